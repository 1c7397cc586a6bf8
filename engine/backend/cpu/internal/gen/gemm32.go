package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
	. "github.com/mmcloughlin/avo/reg"
)

// Prefill kernels for the 32-element block types whose weights become
// unsigned bytes u = w + K (Q8_0: K = 128, Q4_0: 8, Q5_0: 16, IQ4_NL: 128
// through a table of the levels plus 128):
// a register tile of R weight rows times P pairs of activation rows, over
// activations in the q8p layout (q8p_amd64.go), with AVX-512 BW and VNNI.
//
// Each 512-bit register holds the 8 lanes of two activation rows (tokens)
// side by side: lanes 0-7 token 2p, lanes 8-15 token 2p+1. Per block, a
// lane starts at -K times the sum of its 4 activation quants (precomputed
// in q8p), VPDPBUSD adds (w+K)*x over its 4 elements, so it ends at the
// exact integer sum of w*x; then acc = fma(float(lanes), dw*dx, acc), and
// at the end each token's 8 lanes are summed as HSUMPS does. That is, per
// output, exactly the arithmetic of the AVX-512 and AVX2 row kernels
// (q32z.go, b32.go): a row's prefill result is the bits of
// its decode result.

// q8pUnit is the size of one block of one token pair in the q8p layout:
// 64 bytes of quants (token 2p, then 2p+1), 64 of int32 lane corrections,
// 64 of scales (dx of token 2p in lanes 0-7, of 2p+1 in lanes 8-15).
const q8pUnit = 192

// q8p1Unit is the same for Q8_1 activations: also 64 bytes of s (s of
// token 2p in lane 0, of 2p+1 in lane 8, zeros elsewhere).
const q8p1Unit = 256

// block32 describes how one weight type unpacks.
type block32 struct {
	name  string
	bytes int // bytes per block
	// offset: the weight is d*q + m (Q4_1, Q5_1), against Q8_1
	// activations; each block adds m*s (see b32.go).
	offset bool
	// unpack sets w to the block's 32 unsigned weights at m (the block's
	// start), in element order, in both 256-bit halves. It may use the
	// constant registers that consts set up and AX.
	unpack func(m Mem, w reg.VecPhysical)
	consts func()
}

// Constant registers of the unpackers (not used by the tile).
var (
	cMask   = reg.Z30 // 0x80 bytes (Q8_0) or 0x0F bytes (nibbles)
	cShifts = reg.Z31 // word shift counts 0 and 4 in alternate 128-bit lanes
	cExtra  = reg.Z29 // 0x10 bytes (Q5_0) or the level table (IQ4_NL)
)

func broadcastByte(b byte, z reg.VecPhysical) {
	MOVL(U32(uint32(b)*0x01010101), EAX)
	VPBROADCASTD(EAX, z)
}

// nibbles sets w to the 32 nibbles of the 16 bytes at m: low nibbles
// (elements 0-15) then high nibbles (16-31), in both halves.
func nibbles(m Mem, w reg.VecPhysical) {
	VBROADCASTI32X4(m, w)
	VPSRLVW(cShifts, w, w)
	VPANDD(cMask, w, w)
}

func nibbleConsts() {
	broadcastByte(0x0f, cMask)
	VMOVDQU64(q4Shifts, cShifts)
}

var q4Shifts, iq4Table Mem

func dataConsts() {
	// IQ4_NL's levels plus 128, in every 128-bit lane.
	iq4Table = GLOBL("iq4u", RODATA|NOPTR)
	levels := []int{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	for i := 0; i < 8; i++ {
		var v uint64
		for j := 0; j < 8; j++ {
			v |= uint64(levels[8*(i%2)+j]+128) << (8 * j)
		}
		DATA(8*i, U64(v))
	}
	// Word shift counts: 0 in 128-bit lanes 0 and 2, 4 in lanes 1 and 3.
	q4Shifts = GLOBL("q4shifts", RODATA|NOPTR)
	for i := 0; i < 8; i++ {
		DATA(8*i, U64(uint64(i%4/2)*0x0004000400040004))
	}
}

var blocks32 = []block32{
	{
		name: "Q8_0", bytes: 34,
		unpack: func(m Mem, w reg.VecPhysical) {
			VBROADCASTI64X4(m.Offset(2), w)
			VPXORD(cMask, w, w)
		},
		consts: func() { broadcastByte(0x80, cMask) },
	},
	{
		name: "Q4_0", bytes: 18,
		unpack: func(m Mem, w reg.VecPhysical) { nibbles(m.Offset(2), w) },
		consts: nibbleConsts,
	},
	{
		// Q5_0: the nibbles at 6, plus 16 where bit j of the 32 at 2 is
		// set (byte-masked add, the mask in both halves).
		name: "Q5_0", bytes: 22,
		unpack: func(m Mem, w reg.VecPhysical) {
			nibbles(m.Offset(6), w)
			KMOVD(m.Offset(2), reg.K2)
			KUNPCKDQ(reg.K2, reg.K2, reg.K2)
			VPADDB(cExtra, w, reg.K2, w)
		},
		consts: func() { nibbleConsts(); broadcastByte(0x10, cExtra) },
	},
	{
		name: "IQ4_NL", bytes: 18,
		unpack: func(m Mem, w reg.VecPhysical) {
			nibbles(m.Offset(2), w)
			VPSHUFB(w, cExtra, w)
		},
		consts: func() { nibbleConsts(); VMOVDQU64(iq4Table, cExtra) },
	},
	{
		name: "Q4_1", bytes: 20, offset: true,
		unpack: func(m Mem, w reg.VecPhysical) { nibbles(m.Offset(4), w) },
		consts: nibbleConsts,
	},
	{
		name: "Q5_1", bytes: 24, offset: true,
		unpack: func(m Mem, w reg.VecPhysical) {
			nibbles(m.Offset(8), w)
			KMOVD(m.Offset(4), reg.K2)
			KUNPCKDQ(reg.K2, reg.K2, reg.K2)
			VPADDB(cExtra, w, reg.K2, w)
		},
		consts: func() { nibbleConsts(); broadcastByte(0x10, cExtra) },
	},
}

// gemm32 generates gemm<type>R<r>P<p> for every type and the tile shapes
// the driver uses (gemm32_amd64.go): 4 rows by 4 pairs (2 pairs for long
// rows), and 1 row or 1 pair for the edges.
func gemm32() {
	dataConsts()
	for _, b := range blocks32 {
		for _, r := range []int{4, 1} {
			for _, p := range []int{4, 2, 1} {
				gemm32Tile(b, r, p)
			}
		}
	}
}

// gemm32Tile generates one tile kernel:
//
//	func gemm<T>R<R>P<P>(w *byte, wstride int, dw *float32, x *byte, nb int, out *float32, ostride int, tokens int)
//
// w: R weight rows wstride bytes apart, nb blocks each; dw: their block
// scales as float32, R per block (block-major; for the offset types the R
// scales then the R offsets m); x: P token pairs in the q8p layout, pair
// p's nb units at x + p*nb*q8pUnit (q8p1Unit for the offset types); out:
// token t's result for row r goes to out[t*ostride + r], for the tokens
// < tokens (2P, or 2P-1 when the last pair has one token).
func gemm32Tile(b block32, R, P int) {
	unit, dwBlock := q8pUnit, 4*R
	if b.offset {
		unit, dwBlock = q8p1Unit, 8*R
	}
	name := fmt.Sprintf("gemm%sR%dP%d", b.name, R, P)
	text(name, NOSPLIT, "func(w *byte, wstride int, dw *float32, x *byte, nb int, out *float32, ostride int, tokens int)")
	Doc(fmt.Sprintf("%s multiplies %d %s weight rows with %d token pairs (see gemm32Tile).", name, R, b.name, P))

	wp := []reg.GPPhysical{RSI, R8, R9, R10}[:R]
	xp := []reg.GPPhysical{RDI, R11, R12, R13}[:P]
	Load(Param("w"), wp[0])
	if R > 1 {
		Load(Param("wstride"), RAX)
		for r := 1; r < R; r++ {
			LEAQ(Mem{Base: wp[r-1], Index: RAX, Scale: 1}, wp[r])
		}
	}
	Load(Param("x"), xp[0])
	Load(Param("nb"), RCX)
	if P > 1 {
		IMUL3Q(U32(unit), RCX, RAX)
		for p := 1; p < P; p++ {
			LEAQ(Mem{Base: xp[p-1], Index: RAX, Scale: 1}, xp[p])
		}
	}
	Load(Param("dw"), RDX)
	b.consts()

	acc := func(r, p int) reg.VecPhysical { return zreg(r*P + p) }
	for r := 0; r < R; r++ {
		for p := 0; p < P; p++ {
			VPXORD(acc(r, p), acc(r, p), acc(r, p))
		}
	}
	wr := func(r int) reg.VecPhysical { return zreg(16 + r) }
	dx, xq := reg.Z20, reg.Z21
	temps := [][2]reg.VecPhysical{{reg.Z22, reg.Z23}, {reg.Z24, reg.Z25}, {reg.Z26, reg.Z27}}
	if R*P < len(temps) {
		temps = temps[:max(1, R*P)]
	}

	loop := name + "_block"
	Label(loop)
	for r := 0; r < R; r++ {
		b.unpack(Mem{Base: wp[r]}, wr(r))
	}
	k := 0
	for p := 0; p < P; p++ {
		VMOVUPS(Mem{Base: xp[p], Disp: 128}, dx)
		VMOVDQU64(Mem{Base: xp[p]}, xq)
		for r := 0; r < R; r++ {
			t, s := temps[k%len(temps)][0], temps[k%len(temps)][1]
			k++
			VMOVDQU32(Mem{Base: xp[p], Disp: 64}, t)
			raw("VPDPBUSD", xq, wr(r), t)
			VCVTDQ2PS(t, t)
			VMULPS_BCST(Mem{Base: RDX, Disp: 4 * r}, dx, s)
			VFMADD231PS(t, s, acc(r, p))
		}
		if b.offset {
			VMOVUPS(Mem{Base: xp[p], Disp: 192}, reg.Z28)
			for r := 0; r < R; r++ {
				VFMADD231PS_BCST(Mem{Base: RDX, Disp: 4*R + 4*r}, reg.Z28, acc(r, p))
			}
		}
	}
	for r := 0; r < R; r++ {
		ADDQ(U32(b.bytes), wp[r])
	}
	for p := 0; p < P; p++ {
		ADDQ(U32(unit), xp[p])
	}
	ADDQ(U32(dwBlock), RDX)
	DECQ(RCX)
	JNZ(LabelRef(loop))

	// Sums: token 2p's 8 lanes and token 2p+1's, each as HSUMPS adds them.
	Load(Param("out"), RAX)
	Load(Param("ostride"), RBX)
	SHLQ(U8(2), RBX)
	Load(Param("tokens"), RCX)
	for p := 0; p < P; p++ {
		// RAX: token 2p's outputs; RDX: token 2p+1's. The upper halves are
		// set aside first: a 128-bit operation clears a register's upper bits.
		LEAQ(Mem{Base: RAX, Index: RBX, Scale: 1}, RDX)
		for r := 0; r < R; r++ {
			VEXTRACTF64X4(U8(1), acc(r, p), zreg(16+r).AsY())
			hsum(acc(r, p).AsY(), reg.X20)
			VMOVSS(acc(r, p).AsX(), Mem{Base: RAX, Disp: 4 * r})
		}
		last := fmt.Sprintf("%s_half%d", name, p)
		if p == P-1 {
			CMPQ(RCX, U32(2*P))
			JL(LabelRef(last))
		}
		for r := 0; r < R; r++ {
			hi := zreg(16 + r)
			hsum(hi.AsY(), reg.X20)
			VMOVSS(hi.AsX(), Mem{Base: RDX, Disp: 4 * r})
		}
		if p == P-1 {
			Label(last)
		}
		LEAQ(Mem{Base: RDX, Index: RBX, Scale: 1}, RAX)
	}
	VZEROUPPER()
	RET()
}

// hsum sets the low lane of y to the sum of its eight lanes in the order of
// the row kernels' HSUMPS macro: halves, then lanes 0+2 and 1+3, then 0+1.
// t is scratch.
func hsum(y, t reg.Register) {
	x := y.(reg.VecPhysical).AsX()
	VEXTRACTF32X4(U8(1), y, t)
	VADDPS(t, x, x)
	VPERMILPS(U8(0x4e), x, t)
	VADDPS(t, x, x)
	VPERMILPS(U8(0xb1), x, t)
	VADDSS(t, x, x)
}

func zreg(i int) reg.VecPhysical {
	return []reg.VecPhysical{
		reg.Z0, reg.Z1, reg.Z2, reg.Z3, reg.Z4, reg.Z5, reg.Z6, reg.Z7,
		reg.Z8, reg.Z9, reg.Z10, reg.Z11, reg.Z12, reg.Z13, reg.Z14, reg.Z15,
		reg.Z16, reg.Z17, reg.Z18, reg.Z19, reg.Z20, reg.Z21, reg.Z22, reg.Z23,
		reg.Z24, reg.Z25, reg.Z26, reg.Z27, reg.Z28, reg.Z29, reg.Z30, reg.Z31,
	}[i]
}
