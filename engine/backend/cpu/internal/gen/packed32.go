package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
	. "github.com/mmcloughlin/avo/reg"
)

// Packed 32-element blocks (packed32_amd64.go): weight rows in groups of
// 16, each block of a group as one unit, the 16 rows' fp16 scales at +0
// and their unsigned quants at +32 in chunks of 64 bytes, chunk j holding
// bytes 4j..4j+3 of each row's quant bytes (row r at 4r): lane r of a
// 512-bit register is row r.
//
//	Q4_0: 4 chunks of the block's nibbles as stored (q + 8): the low
//	      nibbles of chunk j are elements 4j..4j+3, the high ones
//	      16+4j..16+4j+3.
//	Q8_0: 8 chunks of q + 128 (the stored byte with its top bit
//	      flipped): chunk j is elements 4j..4j+3.
//
// Activations are in the q8s layout (q8p.go): per token and block, the 32
// Q8_0 quants at +0, the scale at +32 and -K*(sum of the quants) at +36,
// K the weights' offset (8 or 128).
//
// Per block, token t's lane r starts at -K*sum(x), VPDPBUSD adds (q+K)*x
// (unsigned by signed) over the 32 elements, 4 at a time from a broadcast
// of the token's quants, so it ends at the exact integer sum of q*x, the
// block's dot product; then acc = fma(float(sum), dw*dx, acc). A lane
// holds one row and one token for the whole row, so nothing is summed
// across lanes: each output is that sequence over the blocks, whatever the
// number of tokens of the tile, the tile it is in or the thread that runs
// it. It is llama.cpp's arithmetic for its repacked Q4_0 (a float per
// block, not per 4 elements).

// q8sUnit is the bytes of one block of one token in the q8s layout.
const q8sUnit = 40

// packedMaxTokens is the widest tile: 8 tokens by 16 rows.
const packedMaxTokens = 8

// packed32 is one packed weight type.
type packed32 struct {
	name   string
	chunks int  // chunks of 64 bytes per unit
	nibble bool // each chunk holds two elements per byte (Q4_0)
}

func (p packed32) unit() int { return 32 + 64*p.chunks }

var packed32Types = []packed32{
	{name: "Q4_0", chunks: 4, nibble: true},
	{name: "Q8_0", chunks: 8},
}

func packed32Family() {
	for _, p := range packed32Types {
		for t := 1; t <= packedMaxTokens; t++ {
			packed32Tile(p, t)
		}
	}
}

// packed32Tile generates
//
//	func packed<type>T<T>(w *byte, x *byte, xstride int, nb int, out *float32, ostride int, rows int)
//
// w: one group's nb units; x: token 0's nb q8s units, token t's at
// x + t*xstride; out: token t's result for row r of the group at
// out[t*ostride + r], for r < rows (1 to 16; the rest of the group is
// padding and is not stored).
func packed32Tile(p packed32, T int) {
	name := fmt.Sprintf("packed%sT%d", p.name, T)
	text(name, NOSPLIT, "func(w *byte, x *byte, xstride int, nb int, out *float32, ostride int, rows int)")
	Doc(fmt.Sprintf("%s multiplies a group of 16 packed %s rows with %d tokens (see internal/gen/packed32.go).", name, p.name, T))

	xp := []reg.GPPhysical{RDI, R8, R9, R10, R11, R12, R13, RBX}[:T]
	Load(Param("w"), RSI)
	loadRows(xp, RAX)
	Load(Param("nb"), RCX)
	XORQ(RDX, RDX) // the block's offset in every token's row
	mask := Z31
	if p.nibble {
		broadcastByte(0x0f, mask)
	}

	acc := func(t int) reg.VecPhysical { return zreg(t) }
	sum := func(t int) reg.VecPhysical { return zreg(8 + t) }
	dw, s := Z16, Z17
	regs := func(j int) [3]reg.VecPhysical { // bytes, low and high nibbles
		b := 18 + 3*(j%2)
		return [3]reg.VecPhysical{zreg(b), zreg(b + 1), zreg(b + 2)}
	}
	xm := func(t, disp int) Mem { return Mem{Base: xp[t], Index: RDX, Scale: 1, Disp: disp} }
	for t := range T {
		VPXORD(acc(t), acc(t), acc(t))
	}

	loop := name + "_block"
	Label(loop)
	VCVTPH2PS(Mem{Base: RSI}, dw)
	for t := range T {
		VPBROADCASTD(xm(t, 36), sum(t))
	}
	for j := range p.chunks {
		r := regs(j)
		VMOVDQU64(Mem{Base: RSI, Disp: 32 + 64*j}, r[0])
		if !p.nibble {
			for t := range T {
				vpdpbusdBcst(xm(t, 4*j), r[0], sum(t))
			}
			continue
		}
		VPANDD(mask, r[0], r[1])
		VPSRLW(U8(4), r[0], r[2])
		VPANDD(mask, r[2], r[2])
		for t := range T {
			vpdpbusdBcst(xm(t, 4*j), r[1], sum(t))
		}
		for t := range T {
			vpdpbusdBcst(xm(t, 16+4*j), r[2], sum(t))
		}
	}
	for t := range T {
		VCVTDQ2PS(sum(t), sum(t))
		VMULPS_BCST(xm(t, 32), dw, s)
		VFMADD231PS(sum(t), s, acc(t))
	}
	ADDQ(U32(p.unit()), RSI)
	ADDQ(U32(q8sUnit), RDX)
	DECQ(RCX)
	JNZ(LabelRef(loop))

	storeGroupRows(T, acc)
}

// loadRows sets ps[0] to the "x" parameter and ps[i] to ps[i-1] plus the
// "xstride" parameter (loaded into tmp): a tile's activation rows.
func loadRows(ps []reg.GPPhysical, tmp reg.GPPhysical) {
	Load(Param("x"), ps[0])
	if len(ps) > 1 {
		Load(Param("xstride"), tmp)
		for i := 1; i < len(ps); i++ {
			LEAQ(Mem{Base: ps[i-1], Index: tmp, Scale: 1}, ps[i])
		}
	}
}

// storeGroupRows stores rows [0, rows) of token t's 16 outputs, acc(t), at
// out + t*ostride (the "rows", "out" and "ostride" parameters), and
// returns.
func storeGroupRows(T int, acc func(int) reg.VecPhysical) {
	Load(Param("rows"), RCX)
	MOVL(U32(1), EAX)
	SHLL(CL, EAX)
	DECL(EAX)
	KMOVW(EAX, K1)
	Load(Param("out"), RAX)
	Load(Param("ostride"), RDX)
	SHLQ(U8(2), RDX)
	for t := range T {
		VMOVUPS(acc(t), K1, Mem{Base: RAX})
		if t < T-1 {
			ADDQ(RDX, RAX)
		}
	}
	VZEROUPPER()
	RET()
}

// vpdpbusdBcst adds to sum the dot products of the unsigned bytes of w with
// the signed bytes of the 32-bit word at m, broadcast to every lane.
func vpdpbusdBcst(m Mem, w, sum reg.VecPhysical) {
	raw("VPDPBUSD.BCST", m, w, sum)
}
