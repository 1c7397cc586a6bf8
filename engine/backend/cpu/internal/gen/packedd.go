package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
	. "github.com/mmcloughlin/avo/reg"
)

// Packed bf16 dot products (packedd_amd64.go), for F16 and BF16 weights on
// AVX512_BF16: weight rows in groups of 16, a group's column pair p as 64
// bytes, lane r the pair (w[r][2p], w[r][2p+1]) as bf16, so that one
// VDPBF16PS multiplies 16 rows by two columns. Activations are bf16 rows;
// each pair of them is broadcast to the 16 lanes.
//
// Per output one accumulator, updated by one VDPBF16PS per column pair in
// order, the same for one token or eight, whatever the tile and thread. A
// tile is G groups (48 rows at most) by T tokens.

func packedDFamily() {
	for g := 1; g <= packedFMaxGroups; g++ {
		for t := 1; t <= packedMaxTokens; t++ {
			packedDTile(g, t)
		}
	}
}

// packedDTile generates
//
//	func packedDG<G>T<T>(w *byte, wstride int, x *uint16, xstride int, cols int, out *float32, ostride int, mask uint64)
//
// w: G groups wstride bytes apart (32*cols each); x: T bf16 rows xstride
// bytes apart; cols a multiple of 8; out: token t's result for row r of
// group g at out[t*ostride + 16g + r], where bit 16g+r of mask is set.
func packedDTile(G, T int) {
	name := fmt.Sprintf("packedDG%dT%d", G, T)
	text(name, NOSPLIT, "func(w *byte, wstride int, x *uint16, xstride int, cols int, out *float32, ostride int, mask uint64)")
	Doc(fmt.Sprintf("%s multiplies %d groups of 16 packed bf16 rows with %d bf16 tokens (see internal/gen/packedd.go).", name, G, T))

	xp := []reg.GPPhysical{RDI, R9, R10, R11, R12, R13, RBX, RAX}[:T]
	Load(Param("w"), RSI)
	Load(Param("wstride"), R8)
	loadRows(xp, RCX)
	Load(Param("cols"), RCX)
	SHRQ(U8(3), RCX) // steps of 4 column pairs
	XORQ(RDX, RDX)   // the step's offset in every activation row
	acc := func(g, t int) int { return g*T + t }
	wreg := func(g int) int { return 24 + g }
	bx := func(t int) int { return 27 + t%4 }
	wm := func(g, disp int) Mem {
		m := Mem{Base: RSI, Disp: disp}
		if g > 0 {
			m.Index, m.Scale = R8, uint8(g)
		}
		return m
	}
	for g := range G {
		for t := range T {
			a := zreg(acc(g, t))
			VPXORD(a, a, a)
		}
	}
	loop := name + "_step"
	Label(loop)
	for u := range 4 {
		for g := range G {
			VMOVDQU32(wm(g, 64*u), zreg(wreg(g)))
		}
		for t := range T {
			VPBROADCASTD(Mem{Base: xp[t], Index: RDX, Scale: 1, Disp: 4 * u}, zreg(bx(t)))
			for g := range G {
				vdpbf16ps(bx(t), wreg(g), acc(g, t))
			}
		}
	}
	ADDQ(U32(256), RSI)
	ADDQ(U8(16), RDX)
	DECQ(RCX)
	JNZ(LabelRef(loop))

	Load(Param("mask"), RCX)
	KMOVQ(RCX, K1)
	Load(Param("out"), RSI)
	Load(Param("ostride"), RDX)
	SHLQ(U8(2), RDX)
	masks := []reg.Register{K1, K2, K3}[:G]
	for g := 1; g < G; g++ {
		KSHIFTRQ(U8(16*g), K1, masks[g])
	}
	for t := range T {
		for g := range G {
			VMOVUPS(zreg(acc(g, t)), masks[g], Mem{Base: RSI, Disp: 64 * g})
		}
		if t < T-1 {
			ADDQ(RDX, RSI)
		}
	}
	VZEROUPPER()
	RET()
}

// vdpbf16ps emits VDPBF16PS Z<src2>, Z<src1>, Z<dst> (Go operand order:
// dst.f32[i] += src1.bf16[2i+1]*src2.bf16[2i+1] + src1.bf16[2i]*src2.bf16[2i]),
// register operands only, as bytes: neither avo nor the Go assembler knows
// the instruction (AVX512_BF16). The encoding is EVEX.512.F3.0F38.W0 52 /r.
func vdpbf16ps(src2, src1, dst int) {
	inv := func(v, bit int) int { return (v>>bit)&1 ^ 1 }
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0b10
	p1 := (^src1&15)<<3 | 1<<2 | 0b10
	p2 := 0b10<<5 | inv(src1, 4)<<3
	modrm := 0b11<<6 | (dst&7)<<3 | src2&7
	Comment(fmt.Sprintf("VDPBF16PS Z%d, Z%d, Z%d", src2, src1, dst))
	raw("LONG", U32(uint32(0x62|p0<<8|p1<<16|p2<<24)))
	raw("WORD", U16(uint16(0x52|modrm<<8)))
}

// roundBF16Z generates
//
//	func roundBF16Z(dst *uint16, src *float32, n int)
//
// which writes n (a multiple of 16) float32s rounded to bf16 as
// quant.F32ToBF16 rounds them: to nearest, ties to even, a NaN kept a NaN
// (its top half with the quiet bit set). The packed bf16 kernels'
// activations.
func roundBF16Z() {
	text("roundBF16Z", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Doc("roundBF16Z rounds n float32s (a multiple of 16) to bf16 bits (see internal/gen/packedd.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	SHRQ(U8(4), RCX)
	konst := func(v uint32, z reg.VecPhysical) {
		MOVL(U32(v), EAX)
		VPBROADCASTD(EAX, z)
	}
	konst(1, Z20)
	konst(0x7fff, Z21)
	konst(0x7fffffff, Z22)
	konst(0x7f800000, Z23)
	konst(0x40, Z24)
	Label("roundBF16Z_loop")
	VMOVDQU32(Mem{Base: RSI}, Z0)
	VPSRLD(U8(16), Z0, Z1)      // the top half
	VPANDD(Z20, Z1, Z2)         // its lowest bit: ties to even
	VPADDD(Z0, Z2, Z2)          //
	VPADDD(Z21, Z2, Z2)         // + 0x7fff: carries into the top half past the halfway point
	VPSRLD(U8(16), Z2, Z2)      //
	VPANDD(Z22, Z0, Z3)         // |x|
	VPCMPUD(U8(6), Z23, Z3, K1) // NaN: |x| above infinity's bits
	VPORD(Z24, Z1, Z1)          // the top half, quiet
	VMOVDQA32(Z1, K1, Z2)
	VPMOVDW(Z2, Mem{Base: RDI})
	ADDQ(U8(64), RSI)
	ADDQ(U8(32), RDI)
	DECQ(RCX)
	JNZ(LabelRef("roundBF16Z_loop"))
	VZEROUPPER()
	RET()
}
