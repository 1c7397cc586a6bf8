package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Prefill kernels for the K-quants (256-element super-blocks against Q8_K
// activations), with AVX-512 BW and VNNI, over weights unpacked once per
// call (gemmk_amd64.go, by kquant.go's kunpack<T>) into units (see
// kquant.go) and activations in the q8kp layout: per token pair and super-block
// (kxUnit bytes), 8 chunks of 64 bytes (the two tokens' 32 quants of the
// chunk), then their 16 bsums (int16, token 2p then 2p+1), then their
// scales 8 times each.
//
// Per output, as the AVX2 row kernels (kquant.go's kdot<T>) compute it:
// 8 integer lanes per super-block, lane l the sum over the 32-element
// chunks of scale * (the products of elements 4l..4l+3), started from the
// bsum term for the offset types (Q3_K, Q6_K); then
// acc = fma(float(lanes), d*dx, acc), and for the types with mins
// acc = acc - float(min lanes)*(dmin*dx) with min lane j = mins-words .
// bsums over 2j, 2j+1. VPMADDUBSW + VPDPWSSD give the same integers as
// VPMADDUBSW + VPMADDWD + VPADDD.

const (
	kUnit  = 576
	kxUnit = 640
)

// gemmK generates gemmK<kind>R<r>P<p> for kind "Min" (Q2_K, Q4_K, Q5_K),
// "Off" (Q3_K, Q6_K) and "Sgn" (IQ4_XS).
func gemmK() {
	for _, kind := range []kKind{kMin, kOff, kSgn} {
		for _, r := range []int{4, 1} {
			for _, p := range []int{4, 1} {
				gemmKTile(kind, r, p)
			}
		}
	}
}

// gemmKTile generates
//
//	func gemmK<kind>R<R>P<P>(w *byte, nsb int, x *byte, xstride int, out *float32, ostride int, tokens int)
//
// w: the unpacked panel of R rows, super-block-major (unit (sb, r) at
// w + (sb*R + r)*unit, unit being kUnit, or kSgnUnit for Sgn); x: P token
// pairs, pair p at x + p*xstride, nsb units each; out and tokens as for
// gemm32Tile.
//
// The Sgn kind (IQ4_XS) multiplies |w| with the activations negated where
// w < 0, as kdotIQ4_XS's VPSIGNB does (the same bytes: no level is 0):
// the mask of the negative levels from VPMOVB2M, the negated activations
// blended in with VPBLENDMB, and the chunk's one scale broadcast from
// memory into VPDPWSSD.
func gemmKTile(kind kKind, R, P int) {
	kindName := map[kKind]string{kMin: "Min", kOff: "Off", kSgn: "Sgn"}[kind]
	unitBytes := kUnit
	if kind == kSgn {
		unitBytes = kSgnUnit
	}
	name := fmt.Sprintf("gemmK%sR%dP%d", kindName, R, P)
	text(name, 0, "func(w *byte, nsb int, x *byte, xstride int, out *float32, ostride int, tokens int)")
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
	unit := func(r int) Mem { return Mem{Base: RSI, Disp: unitBytes * r} }
	masks := []Register{K1, K2, K3, K4}

	loop := name + "_sb"
	Label(loop)
	// Integer lanes: from the bsum term (offset types) or zero.
	for r := 0; r < R; r++ {
		if kind != kOff {
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
	if kind == kSgn {
		// Z20, Z21: an activation chunk and its negation (Z22, Z23 for
		// the next pair); Z28: zero.
		VPXORD(Z28, Z28, Z28)
	}
	for c := 0; c < 8; c++ {
		if kind == kSgn {
			for r := 0; r < R; r++ {
				VBROADCASTI64X4(unit(r).Offset(32*c), wr(r))
				t := temps[r%len(temps)]
				VBROADCASTI64X4(unit(r).Offset(kUnit+32*c), t)
				VPMOVB2M(t, masks[r])
			}
			for p := 0; p < P; p++ {
				xv, nx := []VecPhysical{Z20, Z22}[p%2], []VecPhysical{Z21, Z23}[p%2]
				VMOVDQU64(Mem{Base: xp[p], Disp: 64 * c}, xv)
				VPSUBB(xv, Z28, nx)
				for r := 0; r < R; r++ {
					t := temps[k%len(temps)]
					k++
					VPBLENDMB(nx, xv, masks[r], t)
					VPMADDUBSW(t, wr(r), t)
					raw("VPDPWSSD.BCST", unit(r).Offset(256+32*c), t, isum(r, p))
				}
			}
			continue
		}
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
			if kind == kMin {
				VBROADCASTI64X4(unit(r).Offset(512), sc(r))
				VPMADDWD(Mem{Base: xp[p], Disp: 512}, sc(r), ml)
				VCVTDQ2PS(ml, ml)
				VMULPS_BCST(unit(r).Offset(548), dx, dprod)
				VFNMADD231PS(ml, dprod, acc)
			}
			VMOVUPS(acc, accMem(r, p))
		}
	}
	ADDQ(U32(unitBytes*R), RSI)
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
