package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Prefill kernels for the K-quants (256-element super-blocks against Q8_K
// activations), with AVX-512 BW and VNNI, over weights unpacked once per
// call (gemmk_amd64.go) into this layout per row and super-block
// (kUnit bytes):
//
//	+0    256 unsigned quants u in element order (Q4_K: q; Q6_K: q+32)
//	+256  8 x 16 int16 scale words, one 32-byte pattern per 32 elements:
//	      word m multiplies the pair of elements 2m, 2m+1 (Q4_K: its
//	      sub-block's scale 16 times; Q6_K: two 16-element scales 8 times)
//	+512  16 int16 words against the activation's 16 bsums: the mins
//	      (each twice) of Q4_K, or -32*scale of Q6_K
//	+544  float32 d, float32 dmin
//
// and activations in the q8kp layout: per token pair and super-block
// (kxUnit bytes), 8 chunks of 64 bytes (the two tokens' 32 quants of the
// chunk), then their 16 bsums (int16, token 2p then 2p+1), then their
// scales 8 times each.
//
// Per output, as the AVX2 row kernels (kdot_amd64.s) compute it: 8 integer
// lanes per super-block, lane l the sum over the 32-element chunks of
// scale * (the products of elements 4l..4l+3), started from the bsum term
// for the offset types (Q6_K); then acc = fma(float(lanes), d*dx, acc),
// and for the types with mins acc = acc - float(min lanes)*(dmin*dx) with
// min lane j = mins-words . bsums over 2j, 2j+1. VPMADDUBSW + VPDPWSSD give
// the same integers as VPMADDUBSW + VPMADDWD + VPADDD.

const (
	kUnit  = 576
	kxUnit = 640
)

// gemmK generates gemmK<kind>R<r>P<p> for kind "Min" (Q4_K, Q5_K) and
// "Off" (Q6_K).
func gemmK() {
	for _, mins := range []bool{true, false} {
		for _, r := range []int{4, 1} {
			for _, p := range []int{4, 1} {
				gemmKTile(mins, r, p)
			}
		}
	}
}

// gemmKTile generates
//
//	func gemmK<kind>R<R>P<P>(w *byte, nsb int, x *byte, xstride int, out *float32, ostride int, tokens int)
//
// w: the unpacked panel of R rows, super-block-major (unit (sb, r) at
// w + (sb*R + r)*kUnit); x: P token pairs, pair p at x + p*xstride, nsb
// units each; out and tokens as for gemm32Tile.
func gemmKTile(mins bool, R, P int) {
	kind := "Off"
	if mins {
		kind = "Min"
	}
	name := fmt.Sprintf("gemmK%sR%dP%d", kind, R, P)
	TEXT(name, 0, "func(w *byte, nsb int, x *byte, xstride int, out *float32, ostride int, tokens int)")
	Doc(fmt.Sprintf("%s multiplies %d unpacked K-quant weight rows with %d token pairs (see gemmKTile).", name, R, P))
	facc := AllocLocal(64 * R * P)
	accMem := func(r, p int) Mem { return facc.Offset(64 * (r*P + p)) }

	xp := []GPPhysical{RDI, R11, R12, R13}[:P]
	Load(Param("w"), RSI)
	Load(Param("nsb"), RCX)
	Load(Param("x"), xp[0])
	if P > 1 {
		Load(Param("xstride"), RAX)
		for p := 1; p < P; p++ {
			LEAQ(Mem{Base: xp[p-1], Index: RAX, Scale: 1}, xp[p])
		}
	}
	VPXORD(Z0, Z0, Z0)
	for r := 0; r < R; r++ {
		for p := 0; p < P; p++ {
			VMOVUPS(Z0, accMem(r, p))
		}
	}

	isum := func(r, p int) VecPhysical { return zreg(r*P + p) }
	wr := func(r int) VecPhysical { return zreg(16 + r) }
	sc := func(r int) VecPhysical { return zreg(20 + r) }
	temps := []VecPhysical{Z24, Z25, Z26, Z27}
	unit := func(r int) Mem { return Mem{Base: RSI, Disp: kUnit * r} }

	loop := name + "_sb"
	Label(loop)
	// Integer lanes: from the bsum term (offset types) or zero.
	for r := 0; r < R; r++ {
		if mins {
			for p := 0; p < P; p++ {
				VPXORD(isum(r, p), isum(r, p), isum(r, p))
			}
			continue
		}
		VBROADCASTI64X4(unit(r).Offset(512), sc(r))
		for p := 0; p < P; p++ {
			VPMADDWD(Mem{Base: xp[p], Disp: 512}, sc(r), isum(r, p))
		}
	}
	k := 0
	for c := 0; c < 8; c++ {
		for r := 0; r < R; r++ {
			VBROADCASTI64X4(unit(r).Offset(32*c), wr(r))
			VBROADCASTI64X4(unit(r).Offset(256+32*c), sc(r))
		}
		for p := 0; p < P; p++ {
			for r := 0; r < R; r++ {
				t := temps[k%len(temps)]
				k++
				VPMADDUBSW(Mem{Base: xp[p], Disp: 64 * c}, wr(r), t)
				raw("VPDPWSSD", sc(r), t, isum(r, p))
			}
		}
	}
	// Float steps, per output pair of tokens.
	dx, dprod, acc, ml := Z28, Z29, Z30, Z31
	for p := 0; p < P; p++ {
		VMOVUPS(Mem{Base: xp[p], Disp: 576}, dx)
		for r := 0; r < R; r++ {
			VCVTDQ2PS(isum(r, p), isum(r, p))
			VMULPS_BCST(unit(r).Offset(544), dx, dprod)
			VMOVUPS(accMem(r, p), acc)
			VFMADD231PS(isum(r, p), dprod, acc)
			if mins {
				VBROADCASTI64X4(unit(r).Offset(512), sc(r))
				VPMADDWD(Mem{Base: xp[p], Disp: 512}, sc(r), ml)
				VCVTDQ2PS(ml, ml)
				VMULPS_BCST(unit(r).Offset(548), dx, dprod)
				VFNMADD231PS(ml, dprod, acc)
			}
			VMOVUPS(acc, accMem(r, p))
		}
	}
	ADDQ(U32(kUnit*R), RSI)
	for p := 0; p < P; p++ {
		ADDQ(U32(kxUnit), xp[p])
	}
	DECQ(RCX)
	JNZ(LabelRef(loop))

	// Sums, as in gemm32Tile.
	Load(Param("out"), RAX)
	Load(Param("ostride"), RBX)
	SHLQ(U8(2), RBX)
	Load(Param("tokens"), RCX)
	for p := 0; p < P; p++ {
		LEAQ(Mem{Base: RAX, Index: RBX, Scale: 1}, RDX)
		for r := 0; r < R; r++ {
			z := isum(r, p)
			VMOVUPS(accMem(r, p), z)
			VEXTRACTF64X4(U8(1), z, zreg(16+r).AsY())
			hsum(z.AsY(), X20)
			VMOVSS(z.AsX(), Mem{Base: RAX, Disp: 4 * r})
		}
		last := fmt.Sprintf("%s_half%d", name, p)
		if p == P-1 {
			CMPQ(RCX, U32(2*P))
			JL(LabelRef(last))
		}
		for r := 0; r < R; r++ {
			hi := zreg(16 + r)
			hsum(hi.AsY(), X20)
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
