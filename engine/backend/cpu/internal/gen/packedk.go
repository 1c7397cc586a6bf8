package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
	. "github.com/mmcloughlin/avo/reg"
)

// Packed Q4_K (packedk_amd64.go): weight rows in groups of 16, each
// super-block of a group as one unit of q4KUnit bytes, lane r of a 512-bit
// register being row r:
//
//	+0    the 16 rows' d (fp16)
//	+32   their dmin (fp16)
//	+64   the 6-bit sub-block scales, sub-block j's 16 bytes at +64+16j
//	+192  the 6-bit mins in pairs of bytes, pair i (sub-blocks 2i and
//	      2i+1) at +192+32i, row r's at 2r (widened to int16 pairs)
//	+320  the quants: for each pair of sub-blocks i, 8 chunks of 64
//	      bytes, chunk j holding bytes 4j..4j+3 of the row's 32 bytes of
//	      the pair (low nibbles: sub-block 2i, high: 2i+1)
//
// Activations are in the q8ks layout: per token and super-block the 256
// Q8_K quants at +0, the scale at +256 and the sums of each sub-block's 32
// quants as int16 pairs (sub-blocks 2i, 2i+1) at +260+4i.
//
// Per super-block, token t's lane r sums each sub-block's nibble*x with
// VPDPBUSD (exact), multiplies it by the sub-block's scale and adds the
// eight (exact integers: llama.cpp's sumi), and sums the mins times the
// sub-block sums with VPDPWSSD (exact: its summ); then
// acc = fma(float(sumi), d*dx, acc) and acc = fma(-float(summ), dmin*dx,
// acc). As for the packed 32-blocks, a lane is one row and one token for
// the whole row: the same arithmetic for every batch and thread split.

const (
	q4KUnit    = 64 + 128 + 128 + 2048
	q8ksUnit   = 288
	q8ksScale  = 256
	q8ksSums   = 260
	q4KMaxToks = 4
)

func packedKFamily() {
	for t := 1; t <= q4KMaxToks; t++ {
		packedQ4KTile(t)
	}
}

// packedQ4KTile generates
//
//	func packedQ4_KT<T>(w *byte, x *byte, xstride int, nsb int, out *float32, ostride int, rows int)
//
// with the arguments of the packed 32-block tiles (packed32.go), nsb
// super-blocks per row.
func packedQ4KTile(T int) {
	name := fmt.Sprintf("packedQ4_KT%d", T)
	text(name, NOSPLIT, "func(w *byte, x *byte, xstride int, nsb int, out *float32, ostride int, rows int)")
	Doc(fmt.Sprintf("%s multiplies a group of 16 packed Q4_K rows with %d tokens (see internal/gen/packedk.go).", name, T))

	xp := []reg.GPPhysical{RDI, R8, R9, R10}[:T]
	Load(Param("w"), RSI)
	loadRows(xp, RAX)
	Load(Param("nsb"), RCX)
	XORQ(RDX, RDX) // the super-block's offset in every token's row
	mask := Z31
	broadcastByte(0x0f, mask)

	acc := func(t int) reg.VecPhysical { return zreg(t) }
	sumi := func(t int) reg.VecPhysical { return zreg(4 + t) }
	lo := func(t int) reg.VecPhysical { return zreg(8 + t) }
	hi := func(t int) reg.VecPhysical { return zreg(12 + t) }
	regs := func(j int) [3]reg.VecPhysical { // bytes, low and high nibbles
		b := 16 + 3*(j%2)
		return [3]reg.VecPhysical{zreg(b), zreg(b + 1), zreg(b + 2)}
	}
	scLo, scHi, dw, s, mins := Z22, Z23, Z24, Z25, Z26
	xm := func(t, disp int) Mem { return Mem{Base: xp[t], Index: RDX, Scale: 1, Disp: disp} }
	for t := range T {
		VPXORD(acc(t), acc(t), acc(t))
	}

	loop := name + "_sb"
	Label(loop)
	for t := range T {
		VPXORD(sumi(t), sumi(t), sumi(t))
	}
	for c := range 4 {
		for t := range T {
			VPXORD(lo(t), lo(t), lo(t))
			VPXORD(hi(t), hi(t), hi(t))
		}
		for j := range 8 {
			r := regs(j)
			VMOVDQU64(Mem{Base: RSI, Disp: 320 + 512*c + 64*j}, r[0])
			VPANDD(mask, r[0], r[1])
			VPSRLW(U8(4), r[0], r[2])
			VPANDD(mask, r[2], r[2])
			for t := range T {
				vpdpbusdBcst(xm(t, 64*c+4*j), r[1], lo(t))
			}
			for t := range T {
				vpdpbusdBcst(xm(t, 64*c+32+4*j), r[2], hi(t))
			}
		}
		VPMOVZXBD(Mem{Base: RSI, Disp: 64 + 16*(2*c)}, scLo)
		VPMOVZXBD(Mem{Base: RSI, Disp: 64 + 16*(2*c+1)}, scHi)
		for t := range T {
			VPMULLD(scLo, lo(t), lo(t))
			VPADDD(lo(t), sumi(t), sumi(t))
			VPMULLD(scHi, hi(t), hi(t))
			VPADDD(hi(t), sumi(t), sumi(t))
		}
	}
	// The scales' part: acc += float(sumi) * (d*dx).
	VCVTPH2PS(Mem{Base: RSI}, dw)
	for t := range T {
		VCVTDQ2PS(sumi(t), sumi(t))
		VMULPS_BCST(xm(t, q8ksScale), dw, s)
		VFMADD231PS(sumi(t), s, acc(t))
	}
	// The mins' part: acc -= float(summ) * (dmin*dx), summ in lo(t).
	for t := range T {
		VPXORD(lo(t), lo(t), lo(t))
	}
	for i := range 4 {
		VPMOVZXBW(Mem{Base: RSI, Disp: 192 + 32*i}, mins)
		for t := range T {
			raw("VPDPWSSD.BCST", xm(t, q8ksSums+4*i), mins, lo(t))
		}
	}
	VCVTPH2PS(Mem{Base: RSI, Disp: 32}, dw)
	for t := range T {
		VCVTDQ2PS(lo(t), lo(t))
		VMULPS_BCST(xm(t, q8ksScale), dw, s)
		VFNMADD231PS(lo(t), s, acc(t))
	}
	ADDQ(U32(q4KUnit), RSI)
	ADDQ(U32(q8ksUnit), RDX)
	DECQ(RCX)
	JNZ(LabelRef(loop))

	storeGroupRows(T, acc)
}
