package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Prefill kernels for the float weight types (F32, and F16 and BF16 through
// a float32 copy of the weights made once per call): tiles of R weight rows
// by C activation rows, with AVX-512 F.
//
// Per output, the arithmetic of the 512-bit row kernels (frows.go):
// two 16-lane accumulators, elements 32j..32j+15 into the first and
// 32j+16..32j+31 into the second, one FMA per 16 elements in element order;
// then (low half of the first + its high half) + (low half of the second +
// its high half) and HSUMPS. Rows are whole multiples of 32 elements here
// (the driver sends others to the row kernels).

// gemmF generates gemmFR<r>C<c> for the tile shapes the driver uses.
func gemmF() {
	for _, half := range []bool{false, true} {
		for _, r := range []int{2, 1} {
			for _, c := range []int{6, 1} {
				gemmFTile(r, c, half)
			}
		}
	}
}

// gemmFTile generates
//
//	func gemmFR<R>C<C>(w *float32, wstride int, x *float32, xstride int, n32 int, out *float32, ostride int, acc *float32, mode int)
//
// w: R float32 weight rows wstride bytes apart; x: C activation rows
// xstride bytes apart; n32 steps of 32 elements; out[c*ostride + r].
//
// A row may be multiplied in chunks of steps (so that a chunk of the
// activation rows stays in L1 across weight panels): mode bit 0 starts from
// the 2*R*C accumulators saved at acc (else from zero), bit 1 ends with the
// reduction into out (else the accumulators are saved at acc, 64 bytes
// each). The accumulators carry the exact float32 state, so a chunked row
// gives the bits of an unchunked one.
//
// With half, gemmFHR<R>C<C> reads F16 weight rows (w *uint16) and widens
// them as it goes (exact), rather than a float32 copy.
func gemmFTile(R, C int, half bool) {
	name, esize := fmt.Sprintf("gemmFR%dC%d", R, C), 4
	if half {
		name, esize = fmt.Sprintf("gemmFHR%dC%d", R, C), 2
	}
	text(name, NOSPLIT, "func(w *byte, wstride int, x *float32, xstride int, n32 int, out *float32, ostride int, acc *float32, mode int)")
	Doc(fmt.Sprintf("%s multiplies %d float32 weight rows with %d activation rows (see gemmFTile).", name, R, C))
	wp := []GPPhysical{RSI, R8, R9}[:R]
	xq := []GPPhysical{RDI, R10, R11, R12, R13, R14}[:C]
	Load(Param("w"), wp[0])
	if R > 1 {
		Load(Param("wstride"), RAX)
		for r := 1; r < R; r++ {
			LEAQ(Mem{Base: wp[r-1], Index: RAX, Scale: 1}, wp[r])
		}
	}
	Load(Param("x"), xq[0])
	if C > 1 {
		Load(Param("xstride"), RAX)
		for c := 1; c < C; c++ {
			LEAQ(Mem{Base: xq[c-1], Index: RAX, Scale: 1}, xq[c])
		}
	}
	Load(Param("n32"), RCX)
	acc := func(h, r, c int) VecPhysical { return zreg(h*R*C + r*C + c) }
	saved := func(h, r, c int) Mem { return Mem{Base: RDX, Disp: 64 * (h*R*C + r*C + c)} }
	Load(Param("acc"), RDX)
	Load(Param("mode"), RBX)
	fresh, loop := name+"_fresh", name+"_step"
	TESTQ(U32(1), RBX)
	JZ(LabelRef(fresh))
	for h := 0; h < 2; h++ {
		for r := 0; r < R; r++ {
			for c := 0; c < C; c++ {
				VMOVUPS(saved(h, r, c), acc(h, r, c))
			}
		}
	}
	JMP(LabelRef(loop))
	Label(fresh)
	for h := 0; h < 2; h++ {
		for r := 0; r < R; r++ {
			for c := 0; c < C; c++ {
				VPXORD(acc(h, r, c), acc(h, r, c), acc(h, r, c))
			}
		}
	}
	wr := func(r int) VecPhysical { return zreg(24 + r) }
	xv := []VecPhysical{Z28, Z29}

	Label(loop)
	k := 0
	for h := 0; h < 2; h++ {
		for r := 0; r < R; r++ {
			if half {
				VCVTPH2PS(Mem{Base: wp[r], Disp: 32 * h}, wr(r))
			} else {
				VMOVUPS(Mem{Base: wp[r], Disp: 64 * h}, wr(r))
			}
		}
		for c := 0; c < C; c++ {
			x := xv[k%2]
			k++
			VMOVUPS(Mem{Base: xq[c], Disp: 64 * h}, x)
			for r := 0; r < R; r++ {
				VFMADD231PS(x, wr(r), acc(h, r, c))
			}
		}
	}
	for r := 0; r < R; r++ {
		for off := 0; off < 32*esize; off += 64 {
			PREFETCHT0(Mem{Base: wp[r], Disp: 512 + off})
		}
		ADDQ(U32(32*esize), wp[r])
	}
	for c := 0; c < C; c++ {
		ADDQ(U32(128), xq[c])
	}
	DECQ(RCX)
	JNZ(LabelRef(loop))

	final := name + "_final"
	TESTQ(U32(2), RBX)
	JNZ(LabelRef(final))
	for h := 0; h < 2; h++ {
		for r := 0; r < R; r++ {
			for c := 0; c < C; c++ {
				VMOVUPS(acc(h, r, c), saved(h, r, c))
			}
		}
	}
	VZEROUPPER()
	RET()

	Label(final)
	Load(Param("out"), RAX)
	Load(Param("ostride"), RBX)
	SHLQ(U8(2), RBX)
	for c := 0; c < C; c++ {
		for r := 0; r < R; r++ {
			a, b := acc(0, r, c), acc(1, r, c)
			VEXTRACTF64X4(U8(1), a, Y30)
			VEXTRACTF64X4(U8(1), b, Y31)
			VADDPS(Y30, a.AsY(), a.AsY())
			VADDPS(Y31, b.AsY(), b.AsY())
			VADDPS(b.AsY(), a.AsY(), a.AsY())
			hsum(a.AsY(), X30)
			VMOVSS(a.AsX(), Mem{Base: RAX, Disp: 4 * r})
		}
		ADDQ(RBX, RAX)
	}
	VZEROUPPER()
	RET()
}
