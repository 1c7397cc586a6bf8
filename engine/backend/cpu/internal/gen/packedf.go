package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
	. "github.com/mmcloughlin/avo/reg"
)

// Packed F16 and BF16 (packedf_amd64.go): weight rows in groups of 16, a
// group's column k as 32 bytes (the 16 rows' halves), so that lane r of a
// 512-bit register is row r. Activations are float32 rows already rounded
// to the weights' precision (as for the row kernels).
//
// Per output one accumulator, acc = fma(w[k], x[k], acc) for k in order,
// the activation broadcast to the 16 rows: the same arithmetic for one
// token or eight, whatever the tile and the thread. A tile is G groups (48
// rows at most) by T tokens.

const packedFMaxGroups = 3

func packedFFamily() {
	for _, ft := range floatTypes {
		if ft.size != 2 {
			continue // F32 weights are not packed
		}
		for g := 1; g <= packedFMaxGroups; g++ {
			for t := 1; t <= packedMaxTokens; t++ {
				packedFTile(ft, g, t)
			}
		}
	}
}

// packedFTile generates, for F16 and BF16,
//
//	func packed<type>G<G>T<T>(w *byte, wstride int, x *float32, xstride int, cols int, out *float32, ostride int, mask uint64)
//
// w: G groups wstride bytes apart (32*cols each); x: T float32 rows
// xstride bytes apart; cols a multiple of 4; out: token t's result for
// row r of group g at out[t*ostride + 16g + r], where bit 16g+r of mask is
// set.
func packedFTile(ft floatType, G, T int) {
	name := fmt.Sprintf("packed%sG%dT%d", ft.name, G, T)
	text(name, NOSPLIT, "func(w *byte, wstride int, x *float32, xstride int, cols int, out *float32, ostride int, mask uint64)")
	Doc(fmt.Sprintf("%s multiplies %d groups of 16 packed %s rows with %d tokens (see internal/gen/packedf.go).", name, G, ft.name, T))

	xp := []reg.GPPhysical{RDI, R9, R10, R11, R12, R13, RBX, RAX}[:T]
	Load(Param("w"), RSI)
	Load(Param("wstride"), R8)
	loadRows(xp, RCX)
	Load(Param("cols"), RCX)
	SHRQ(U8(2), RCX) // steps of 4 columns
	XORQ(RDX, RDX)   // the step's offset in every activation row
	acc := func(g, t int) reg.VecPhysical { return zreg(g*T + t) }
	wreg := func(u, g int) reg.VecPhysical { return zreg(24 + g) }
	bx := func(t int) reg.VecPhysical { return zreg(27 + t%4) }
	wm := func(g, disp int) Mem {
		m := Mem{Base: RSI, Disp: disp}
		if g > 0 {
			m.Index, m.Scale = R8, uint8(g)
		}
		return m
	}
	for g := range G {
		for t := range T {
			VPXORD(acc(g, t), acc(g, t), acc(g, t))
		}
	}
	loop := name + "_step"
	Label(loop)
	for u := range 4 {
		for g := range G {
			ft.load(wm(g, 32*u), wreg(u, g))
		}
		for t := range T {
			if G == 1 {
				VFMADD231PS_BCST(Mem{Base: xp[t], Index: RDX, Scale: 1, Disp: 4 * u}, wreg(u, 0), acc(0, t))
				continue
			}
			// One broadcast for the G groups.
			VBROADCASTSS(Mem{Base: xp[t], Index: RDX, Scale: 1, Disp: 4 * u}, bx(t))
			for g := range G {
				VFMADD231PS(bx(t), wreg(u, g), acc(g, t))
			}
		}
	}
	ADDQ(U8(128), RSI)
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
			VMOVUPS(acc(g, t), masks[g], Mem{Base: RSI, Disp: 64 * g})
		}
		if t < T-1 {
			ADDQ(RDX, RSI)
		}
	}
	VZEROUPPER()
	RET()
}
