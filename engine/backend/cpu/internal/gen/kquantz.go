package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// AVX-512 decode kernels of the K-quant family (see kquant.go):
//
//	kdotZ<T>(w, x *byte, nb int) float32
//	kdotZ4<T>(w, x *byte, xstride, nb int, out *float32, ostride int)
//
// the row kernels of kquant.go with two 32-element chunks per 512-bit
// vector: VPMADDUBSW on 64 elements, the chunks' scale patterns made in
// registers by VPERMW from the block's scale words, VPDPWSSD. Lane l of
// the low half sums chunk 2j's elements 4l..4l+3 and the high half chunk
// 2j+1's; the halves are added at the end. The integer lanes are exact, so
// they are the AVX2 kernels' lanes, and the float steps are theirs: the
// same bits.

// Constants of the AVX-512 decoders, 64 bytes each.
var (
	kzWordPerm Mem // 4: words [2j x16 | 2j+1 x16] (one scale per chunk)
	kzPairPerm Mem // 4: words [4j x8, 4j+1 x8 | 4j+2 x8, 4j+3 x8]
	kzShift04  Mem // words [0 x16 | 4 x16]
	kzLanes04  Mem // words 0 in 128-bit lanes 0 and 2, 4 in lanes 1 and 3
	kzQ5Bits   Mem // 4: bytes [1<<2j x32 | 1<<(2j+1) x32]
	kzShifts   Mem // pairs of per-half word shift counts, see kzShiftAt
)

// kzShiftPairs are the per-half word shift counts kzShiftAt addresses.
var kzShiftPairs = [][2]int{{4, 2}, {0, 2}, {0, 1}, {2, 3}, {4, 5}, {2, 1}, {4, 6}}

func kzShiftAt(lo, hi int) Mem {
	for i, p := range kzShiftPairs {
		if p == [2]int{lo, hi} {
			return kzShifts.Offset(64 * i)
		}
	}
	panic(fmt.Sprintf("no shift pair %d, %d", lo, hi))
}

func words64(m Mem, base int, word func(i int) uint16) {
	for q := 0; q < 8; q++ {
		var v uint64
		for k := 0; k < 4; k++ {
			v |= uint64(word(4*q+k)) << (16 * k)
		}
		DATA(base+8*q, U64(v))
	}
}

func kzData() {
	kzWordPerm = GLOBL("kzwordperm", RODATA|NOPTR)
	for j := 0; j < 4; j++ {
		words64(kzWordPerm, 64*j, func(i int) uint16 { return uint16(2*j + i/16) })
	}
	kzPairPerm = GLOBL("kzpairperm", RODATA|NOPTR)
	for j := 0; j < 4; j++ {
		words64(kzPairPerm, 64*j, func(i int) uint16 { return uint16(4*j + i/8) })
	}
	kzShift04 = GLOBL("kzshift04", RODATA|NOPTR)
	words64(kzShift04, 0, func(i int) uint16 { return uint16(4 * (i / 16)) })
	kzLanes04 = GLOBL("kzlanes04", RODATA|NOPTR)
	words64(kzLanes04, 0, func(i int) uint16 { return uint16(4 * (i / 8 % 2)) })
	kzQ5Bits = GLOBL("kzq5bits", RODATA|NOPTR)
	for j := 0; j < 4; j++ {
		for q := 0; q < 8; q++ {
			b := uint64(1) << (2 * j)
			if q >= 4 {
				b <<= 1
			}
			DATA(64*j+8*q, U64(b*0x0101010101010101))
		}
	}
	kzShifts = GLOBL("kzshifts", RODATA|NOPTR)
	for i, p := range kzShiftPairs {
		words64(kzShifts, 64*i, func(w int) uint16 { return uint16(p[w/16]) })
	}
}

// bcastByteZ sets z to 64 copies of b.
func bcastByteZ(b byte, z VecPhysical) {
	MOVL(U32(uint32(b)*0x01010101), EAX)
	VPBROADCASTD(EAX, z)
}

// kzDecoders returns the AVX-512 pair decoder and constants of a type.
// Constant registers: Z16, Z17, Z19 (and Z18 = 0 for the kernels).
func kzDecoders(name string) (func(j int, z, s VecPhysical), func()) {
	switch name {
	case "Q4_K", "Q5_K":
		qs, hasHigh := 16, false
		if name == "Q5_K" {
			qs, hasHigh = 48, true
		}
		return func(j int, z, _ VecPhysical) {
				VBROADCASTI64X4(Mem{Base: RSI, Disp: qs + 32*j}, z)
				VPSRLVW(kzShift04, z, z)
				VPANDD(Z16, z, z)
				if hasHigh {
					VBROADCASTI64X4(Mem{Base: RSI, Disp: 16}, Z7)
					VPTESTMB(kzQ5Bits.Offset(64*j), Z7, K2)
					VPADDB(Z17, z, K2, z)
				}
			}, func() {
				bcastByteZ(0x0f, Z16)
				bcastByteZ(0x10, Z17)
			}
	case "Q6_K":
		// Pair j: chunks 4h+k, k = 2(j%2) and 2(j%2)+1, h = j/2: the low
		// (j even) or high nibbles of ql[64h:64h+64], and bits 2k, 2k+1
		// of qh[32h:32h+32] as bits 4, 5.
		return func(j int, z, _ VecPhysical) {
				h := j / 2
				VMOVDQU64(Mem{Base: RSI, Disp: 64 * h}, z)
				if j%2 == 1 {
					VPSRLW(U8(4), z, z)
				}
				VPANDD(Z16, z, z)
				VBROADCASTI64X4(Mem{Base: RSI, Disp: 128 + 32*h}, Z7)
				if j%2 == 0 {
					VPSLLVW(kzShiftAt(4, 2), Z7, Z7)
				} else {
					VPSRLVW(kzShiftAt(0, 2), Z7, Z7)
				}
				VPANDD(Z17, Z7, Z7)
				VPORD(Z7, z, z)
			}, func() {
				bcastByteZ(0x0f, Z16)
				bcastByteZ(0x30, Z17)
			}
	case "Q3_K", "Q2_K":
		// Pair j: chunks 4h+p, p = 2(j%2) and 2(j%2)+1, h = j/2: bits
		// 2p, 2p+1 of qs[32h:32h+32]; Q3_K also bit c of hmask[l] as bit 2.
		q3 := name == "Q3_K"
		qs := 16
		if q3 {
			qs = 32
		}
		return func(j int, z, _ VecPhysical) {
				h := j / 2
				VBROADCASTI64X4(Mem{Base: RSI, Disp: qs + 32*h}, z)
				if j%2 == 0 {
					VPSRLVW(kzShiftAt(0, 2), z, z)
				} else {
					VPSRLVW(kzShiftAt(4, 6), z, z)
				}
				VPANDD(Z16, z, z)
				if !q3 {
					return
				}
				VBROADCASTI64X4(Mem{Base: RSI}, Z7)
				// bit c to bit 2: c = 2j, 2j+1.
				switch j {
				case 0:
					VPSLLVW(kzShiftAt(2, 1), Z7, Z7)
				case 1:
					VPSRLVW(kzShiftAt(0, 1), Z7, Z7)
				case 2:
					VPSRLVW(kzShiftAt(2, 3), Z7, Z7)
				case 3:
					VPSRLVW(kzShiftAt(4, 5), Z7, Z7)
				}
				VPANDD(Z17, Z7, Z7)
				VPORD(Z7, z, z)
			}, func() {
				bcastByteZ(0x03, Z16)
				bcastByteZ(0x04, Z17)
			}
	case "IQ4_XS":
		// Pair j: sub-blocks 2j and 2j+1, 16 bytes each at 8+32j: each
		// one's low nibbles then high nibbles in one half.
		return func(j int, z, s VecPhysical) {
				VBROADCASTI32X4(Mem{Base: RSI, Disp: 8 + 32*j}, z)
				VBROADCASTI32X4(Mem{Base: RSI, Disp: 8 + 32*j + 16}, K3, z)
				VPSRLVW(kzLanes04, z, z)
				VPANDD(Z16, z, z)
				VPSHUFB(z, Z17, s)
				VPABSB(s, z)
			}, func() {
				bcastByteZ(0x0f, Z16)
				VBROADCASTI32X4(kIQ4Levels, Z17)
				MOVL(U32(0xff00), EAX)
				KMOVW(EAX, K3)
			}
	}
	panic("no AVX-512 decoder for " + name)
}

// kdotZ generates kdotZ<T> (rows = 1), kdotZ4<T> (rows = 4) or, for
// rows = 0,
//
//	kdotZR<T>(w *byte, wstride int, x *byte, nb, rows int, out *float32)
//
// out[r] = kdotZ<T>(weight row r, x) for r < rows, weight rows wstride
// bytes apart: one call for many rows.
func kdotZ(q kquant, rows int) {
	many := rows == 0
	if many {
		rows = 1
	}
	name := "kdotZ" + q.name
	sig := "func(w, x *byte, nb int) float32"
	switch {
	case many:
		name = "kdotZR" + q.name
		sig = "func(w *byte, wstride int, x *byte, nb, rows int, out *float32)"
	case rows == 4:
		name = "kdotZ4" + q.name
		sig = "func(w, x *byte, xstride, nb int, out *float32, ostride int)"
	}
	text(name, NOSPLIT, sig)
	Doc(fmt.Sprintf("%s computes kdot%s%s's dots with AVX-512, the same bits (see internal/gen/kquantz.go).", name, map[int]string{1: "", 4: "4"}[rows], q.name))
	xs := []GPPhysical{RDI, R9, R10, R11}[:rows]
	if many {
		// The row loop's state: R9 the weight row, R10 rows left, R11
		// out (registers words and the block loop leave alone).
		Load(Param("w"), R9)
		Load(Param("rows"), R10)
		Load(Param("out"), R11)
	} else {
		Load(Param("w"), RSI)
		Load(Param("nb"), RCX)
		Load(Param("x"), RDI)
	}
	if rows == 4 {
		Load(Param("xstride"), R8)
		LEAQ(Mem{Base: RDI, Index: R8, Scale: 1}, R9)
		LEAQ(Mem{Base: RDI, Index: R8, Scale: 2}, R10)
		LEAQ(Mem{Base: R9, Index: R8, Scale: 2}, R11)
	}
	for i := 0; i < rows; i++ {
		VXORPS(yreg(i), yreg(i), yreg(i))
	}
	q.consts()
	q.constsZ()
	VPXORD(Z18, Z18, Z18)
	perm := kzWordPerm
	if q.scales16 {
		perm = kzPairPerm
	}
	for j := 0; j < 4; j++ {
		VMOVDQU64(perm.Offset(64*j), zreg(24+j))
	}
	// Registers: Y0-Y3 accumulators; Y4 scale words, Y8 bsum words, X9
	// [d, dmin]; Z20-Z23 integer lanes; Z28 (Z29) the pair's quants (signed
	// levels); Z5 its scale pattern; Z6, Z7, Z10-Z12 scratch; Z16-Z18
	// constants; Z24-Z27 the VPERMW controls.
	isum := func(i int) VecPhysical { return zreg(20 + i) }

	loop, done, row, rowDone := name+"_block", name+"_done", name+"_row", name+"_rows_done"
	if many {
		Label(row)
		TESTQ(R10, R10)
		JZ(LabelRef(rowDone))
		MOVQ(R9, RSI)
		Load(Param("x"), RDI)
		Load(Param("nb"), RCX)
		VXORPS(Y0, Y0, Y0)
	}
	Label(loop)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	prefetchBlock(q.bytes)
	q.words() // Y4 scale words, Y8 bsum words
	q.halves(X9)
	for i := 0; i < rows; i++ {
		if q.kind == kOff {
			VPMADDWD(Mem{Base: xs[i], Disp: 260}, Y8, isum(i).AsY())
		} else {
			VPXORD(isum(i), isum(i), isum(i))
		}
	}
	for j := 0; j < 4; j++ {
		q.pairZ(j, Z28, Z29)
		VPERMW(Z4, zreg(24+j), Z5)
		for i := 0; i < rows; i++ {
			xm := Mem{Base: xs[i], Disp: 4 + 64*j}
			if q.kind == kSgn {
				// x negated where the level is negative, as VPSIGNB.
				VMOVDQU64(xm, Z10)
				VPSUBB(Z10, Z18, Z11)
				VPMOVB2M(Z29, K1)
				VPBLENDMB(Z11, Z10, K1, Z6)
				VPMADDUBSW(Z6, Z28, Z6)
			} else {
				VPMADDUBSW(xm, Z28, Z6)
			}
			raw("VPDPWSSD", Z5, Z6, isum(i))
		}
	}
	for i := 0; i < rows; i++ {
		VEXTRACTI64X4(U8(1), isum(i), Y6)
		VPADDD(Y6, isum(i).AsY(), isum(i).AsY())
		// As kfloat: [d*dx, dmin*dx]; acc = fma(lanes, d*dx, acc); for the
		// types with mins acc -= float(bsums . mins)*(dmin*dx).
		VBROADCASTSS(Mem{Base: xs[i]}, X10)
		VMULPS(X10, X9, X10)
		VBROADCASTSS(X10, Y11)
		VCVTDQ2PS(isum(i).AsY(), Y12)
		VFMADD231PS(Y12, Y11, yreg(i))
		if q.kind == kMin {
			VPMADDWD(Mem{Base: xs[i], Disp: 260}, Y8, Y12)
			VCVTDQ2PS(Y12, Y12)
			VMOVSHDUP(X10, X11)
			VBROADCASTSS(X11, Y11)
			VFNMADD231PS(Y12, Y11, yreg(i))
		}
	}
	ADDQ(U32(q.bytes), RSI)
	for _, x := range xs {
		ADDQ(U32(q8KBytes), x)
	}
	DECQ(RCX)
	JMP(LabelRef(loop))

	Label(done)
	switch {
	case many:
		hsum2(Y0, X1)
		VMOVSS(X0, Mem{Base: R11})
		ADDQ(U8(4), R11)
		ADDQ(NewParamAddr("wstride", 8), R9)
		DECQ(R10)
		JMP(LabelRef(row))
		Label(rowDone)
	case rows == 1:
		hsum2(Y0, X1)
		Store(X0, ReturnIndex(0))
	default:
		Load(Param("out"), RDX)
		Load(Param("ostride"), R8)
		SHLQ(U8(2), R8)
		for i := 0; i < 4; i++ {
			hsum2(yreg(i), X8)
			VMOVSS(yreg(i).AsX(), Mem{Base: RDX})
			if i < 3 {
				ADDQ(R8, RDX)
			}
		}
	}
	VZEROUPPER()
	RET()
}
