package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// AVX-512 value updates of AttendF16 (see values in attnkernels.go):
//
//	vaccZ<nh>x<nz>(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)
//
// nh consecutive heads of one block of 8 (ms at 4*i, vs at 32+4*i of a
// weight row w + p*wstride) by nz chunks of 16 accumulators (head i's at
// acc + i*astride + 64*c bytes; its values at byte voff[i] + 32*c of a value
// row v + p*vstride), nh*nz = 16 chains. Per position, when flags[p] is
// set, a = h(a*ms); then a = h(fma(v, vs, a)), h rounding to half precision
// and back: per element exactly the steps of the AVX2 kernels, with 16
// independent rounding chains in flight instead of 8, so the pass is bound
// by throughput rather than by the latency of one chain. n >= 1.
//
// vaccZS<nh>x<nz> is the same for heads that share their values (the
// query heads of one KV head, voff[i] all equal): each value chunk is
// converted once for all of them.
func attnZ() {
	for _, s := range [][2]int{{4, 4}, {2, 8}, {1, 16}} {
		vaccZ(s[0], s[1], false)
	}
	for _, s := range [][2]int{{4, 4}, {2, 8}} {
		vaccZ(s[0], s[1], true)
	}
}

func vaccZ(nh, nz int, shared bool) {
	name := fmt.Sprintf("vaccZ%dx%d", nh, nz)
	if shared {
		name = fmt.Sprintf("vaccZS%dx%d", nh, nz)
	}
	text(name, NOSPLIT, "func(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)")
	Doc(fmt.Sprintf("%s runs the ordered value updates of %d heads by %d chunks of 16 accumulators (see internal/gen/attnz.go).", name, nh, nz))
	a := func(i, c int) VecPhysical { return zreg(i*nz + c) }
	vp := []GPPhysical{R8, R9, R10, R11}[:nh]
	Load(Param("acc"), RSI)
	Load(Param("astride"), RAX)
	for i := 0; i < nh; i++ {
		for c := 0; c < nz; c++ {
			VMOVUPS(Mem{Base: RSI, Disp: 64 * c}, a(i, c))
		}
		if i < nh-1 {
			ADDQ(RAX, RSI)
		}
	}
	Load(Param("v"), RDI)
	Load(Param("voff"), RAX)
	for i := 0; i < nh; i++ {
		MOVQ(Mem{Base: RAX, Disp: 8 * i}, vp[i])
		ADDQ(RDI, vp[i])
	}
	Load(Param("w"), RDX)
	Load(Param("flags"), RBX)
	Load(Param("n"), RCX)
	Load(Param("vstride"), RDI)
	Load(Param("wstride"), R12)

	loop, upd := name+"_pos", name+"_upd"
	Label(loop)
	CMPB(Mem{Base: RBX}, U8(0))
	JE(LabelRef(upd))
	for i := 0; i < nh; i++ {
		ms := zreg(28 + i)
		VBROADCASTSS(Mem{Base: RDX, Disp: 4 * i}, ms)
		for c := 0; c < nz; c++ {
			VMULPS(ms, a(i, c), a(i, c))
			VCVTPS2PH(U8(0), a(i, c), a(i, c).AsY())
			VCVTPH2PS(a(i, c).AsY(), a(i, c))
		}
	}
	Label(upd)
	k := 0
	if shared {
		for i := 0; i < nh; i++ {
			VBROADCASTSS(Mem{Base: RDX, Disp: 32 + 4*i}, zreg(16+i))
		}
		for c := 0; c < nz; c++ {
			t := zreg(20 + c%8)
			VCVTPH2PS(Mem{Base: vp[0], Disp: 32 * c}, t)
			for i := 0; i < nh; i++ {
				VFMADD231PS(t, zreg(16+i), a(i, c))
				VCVTPS2PH(U8(0), a(i, c), a(i, c).AsY())
				VCVTPH2PS(a(i, c).AsY(), a(i, c))
			}
		}
	}
	for i := 0; i < nh && !shared; i++ {
		vs := zreg(16 + i)
		VBROADCASTSS(Mem{Base: RDX, Disp: 32 + 4*i}, vs)
		for c := 0; c < nz; c++ {
			t := zreg(20 + k%8)
			k++
			VCVTPH2PS(Mem{Base: vp[i], Disp: 32 * c}, t)
			VFMADD231PS(t, vs, a(i, c))
			VCVTPS2PH(U8(0), a(i, c), a(i, c).AsY())
			VCVTPH2PS(a(i, c).AsY(), a(i, c))
		}
	}
	for i := 0; i < nh; i++ {
		ADDQ(RDI, vp[i])
	}
	ADDQ(R12, RDX)
	INCQ(RBX)
	DECQ(RCX)
	JNZ(LabelRef(loop))

	Load(Param("acc"), RSI)
	Load(Param("astride"), RAX)
	for i := 0; i < nh; i++ {
		for c := 0; c < nz; c++ {
			VMOVUPS(a(i, c), Mem{Base: RSI, Disp: 64 * c})
		}
		if i < nh-1 {
			ADDQ(RAX, RSI)
		}
	}
	VZEROUPPER()
	RET()
}

// Scores with AVX-512 (see scores in attnkernels.go): each position's dot
// keeps four float64 lanes, lane j summing elements j, j+4, ... in order,
// added as (l0+l1)+(l2+l3); a 512-bit register holds the lanes of two
// positions, so the keys are converted into position pairs, chunk-major:
//
//	halfToF64PairsZ(dst *float64, src *uint16, n, rd int)
//	    n rows of rd halves (contiguous) to float64: with np = ceil(n/2)
//	    pairs, chunk c (4 elements) of pair j at dst + (c*np + j)*8
//	    doubles, row 2j's 4 values then row 2j+1's (zeros past the last
//	    row when n is odd);
//	scoresZ(s *float32, q, k *float64, n, rd int, scale float32)
//	    s[8*p] = float32(q . k_p) * scale for p < n, k in that layout.
func attnScoresZ() {
	text("halfToF64PairsZ", NOSPLIT, "func(dst *float64, src *uint16, n, rd int)")
	Doc("halfToF64PairsZ converts rows of halves to float64 in position pairs (see internal/gen/attnz.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	Load(Param("rd"), RDX)
	MOVQ(RDX, R8)
	SHLQ(U8(1), R8)  // bytes per row of halves
	SHRQ(U8(2), RDX) // chunks per row
	MOVQ(RCX, R10)
	INCQ(R10)
	SHRQ(U8(1), R10)
	SHLQ(U8(6), R10) // bytes from one chunk to the next: np*64
	pairs, odd, done := "h2pz_pairs", "h2pz_odd", "h2pz_done"
	Label(pairs)
	CMPQ(RCX, U8(2))
	JL(LabelRef(odd))
	MOVQ(RDX, RAX)
	MOVQ(RSI, R9)
	MOVQ(RDI, R11)
	inner := "h2pz_chunk"
	Label(inner)
	VMOVQ(Mem{Base: R9}, X0)
	VPINSRQ(U8(1), Mem{Base: R9, Index: R8, Scale: 1}, X0, X0)
	VCVTPH2PS(X0, Y0)
	VCVTPS2PD(Y0, Z0)
	VMOVUPD(Z0, Mem{Base: R11})
	ADDQ(R10, R11)
	ADDQ(U8(8), R9)
	DECQ(RAX)
	JNZ(LabelRef(inner))
	LEAQ(Mem{Base: RSI, Index: R8, Scale: 2}, RSI)
	ADDQ(U8(64), RDI)
	SUBQ(U8(2), RCX)
	JMP(LabelRef(pairs))
	Label(odd)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	inner1 := "h2pz_chunk1"
	Label(inner1)
	VMOVQ(Mem{Base: RSI}, X0)
	VCVTPH2PS(X0, Y0)
	VCVTPS2PD(Y0, Z0)
	VMOVUPD(Z0, Mem{Base: RDI})
	ADDQ(R10, RDI)
	ADDQ(U8(8), RSI)
	DECQ(RDX)
	JNZ(LabelRef(inner1))
	Label(done)
	VZEROUPPER()
	RET()

	text("scoresZ", NOSPLIT, "func(s *float32, q, k *float64, n, rd int, scale float32)")
	Doc("scoresZ computes the scores of n positions from keys in position pairs (see internal/gen/attnz.go).")
	Load(Param("s"), RDI)
	Load(Param("q"), RSI)
	Load(Param("k"), RDX)
	Load(Param("n"), RCX)
	Load(Param("rd"), R8)
	VBROADCASTSS(NewParamAddr("scale", 40), Y31)
	SHRQ(U8(2), R8) // chunks per row
	MOVQ(RCX, R9)
	INCQ(R9)
	SHRQ(U8(1), R9)
	SHLQ(U8(6), R9) // bytes from one chunk to the next
	// Groups of up to 8 pairs share each broadcast chunk of q; the last
	// pair may hold one position.
	for _, g := range []int{8, 4, 2, 1} {
		lbl, next := fmt.Sprintf("scz_g%d", g), fmt.Sprintf("scz_after%d", g)
		Label(lbl)
		if g > 1 {
			CMPQ(RCX, U8(2*g))
		} else {
			CMPQ(RCX, U8(1))
		}
		JL(LabelRef(next))
		for j := 0; j < g; j++ {
			VPXORQ(zreg(j), zreg(j), zreg(j))
		}
		MOVQ(RSI, R10)
		MOVQ(RDX, R11)
		MOVQ(R8, RAX)
		loop := fmt.Sprintf("scz_d%d", g)
		Label(loop)
		VBROADCASTF64X4(Mem{Base: R10}, Z16)
		for j := 0; j < g; j++ {
			VFMADD231PD(Mem{Base: R11, Disp: 64 * j}, Z16, zreg(j))
		}
		ADDQ(U8(32), R10)
		ADDQ(R9, R11)
		DECQ(RAX)
		JNZ(LabelRef(loop))
		for j := 0; j < g; j++ {
			a := zreg(j)
			VPERMILPD(U8(0x55), a, Z17)
			VADDPD(Z17, a, a)
			VPERMPD(U8(0x4e), a, Z17)
			VADDPD(Z17, a, a)
			VCVTPD2PS(a, a.AsY())
			VMULPS(Y31, a.AsY(), a.AsY())
			VMOVSS(a.AsX(), Mem{Base: RDI, Disp: 64 * j})
			if g == 1 {
				CMPQ(RCX, U8(2))
				JL(LabelRef("scz_done"))
			}
			VEXTRACTF32X4(U8(1), a.AsY(), X17)
			VMOVSS(X17, Mem{Base: RDI, Disp: 64*j + 32})
		}
		ADDQ(U32(64*g), RDI)
		ADDQ(U32(64*g), RDX)
		SUBQ(U8(2*g), RCX)
		JMP(LabelRef(lbl))
		Label(next)
	}
	Label("scz_done")
	VZEROUPPER()
	RET()
}
