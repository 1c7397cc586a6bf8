package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The other attention kernels with AVX2, FMA and F16C (see attnkernels.go
// for what they compute and attention_amd64.go for the lengths the Go
// wrappers guarantee): queries and keys to float64, the scores, the softmax
// bookkeeping and its float64 exponential.

var expd Mem // the constants of expd4, 4 float64 lanes each (see attnData)

func attnData() {
	expd = GLOBL("expd", RODATA|NOPTR)
	vals := []uint64{
		math.Float64bits(-104), // lo
		math.Float64bits(89),   // hi
		0x3ff71547652b82fe,     // log2(e)
		0x3fe62e42fee00000,     // ln2 high part
		0x3dea39ef35793c76,     // ln2 low part
		1023,                   // the exponent bias (int64)
	}
	// 1/j! for j = 0..11, as float64.
	vals = append(vals, 0x3ff0000000000000, 0x3ff0000000000000, 0x3fe0000000000000,
		0x3fc5555555555555, 0x3fa5555555555555, 0x3f81111111111111, 0x3f56c16c16c16c17,
		0x3f2a01a01a01a01a, 0x3efa01a01a01a01a, 0x3ec71de3a556c734, 0x3e927e4fb7789f5c,
		0x3e5ae64567f544e4)
	for i, v := range vals {
		for j := 0; j < 4; j++ {
			DATA(32*i+8*j, U64(v))
		}
	}
	DATA(32*len(vals), U32(0x3f800000)) // float32 1
}

func expdAt(i int) Mem { return expd.Offset(32 * i) }

// expd4 sets the 4 float64 lanes of x to e^x as expF64Generic (expf64.go)
// computes it, before its final rounding to float32, with t1, t2 as
// scratch. NaN stays NaN: max and min return their second source when it
// is NaN.
func expd4(x, t1, t2 VecPhysical) {
	VMOVUPD(expdAt(0), t1)
	VMAXPD(x, t1, x)
	VMOVUPD(expdAt(1), t1)
	VMINPD(x, t1, x)
	VMULPD(expdAt(2), x, t1)
	VROUNDPD(U8(0), t1, t1)
	VFNMADD231PD(expdAt(3), t1, x)
	VFNMADD231PD(expdAt(4), t1, x)
	VMOVUPD(expdAt(6+11), t2)
	for j := 10; j >= 0; j-- {
		VFMADD213PD(expdAt(6+j), x, t2)
	}
	VCVTPD2DQY(t1, t1.AsX())
	VPMOVSXDQ(t1.AsX(), t1)
	VPADDQ(expdAt(5), t1, t1)
	VPSLLQ(U8(52), t1, t1)
	VMULPD(t1, t2, x)
}

func attnFamily() {
	attnData()

	text("roundF16ToF64AVX", NOSPLIT, "func(dst *float64, src *float32, n int)")
	Doc("roundF16ToF64AVX sets dst[i] = float64(h(src[i])), h rounding to half precision (nearest even); n is a positive multiple of 8.")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	Label("r2d")
	VMOVUPS(Mem{Base: RSI}, Y0)
	VCVTPS2PH(U8(0), Y0, X0)
	VCVTPH2PS(X0, Y0)
	VCVTPS2PD(X0, Y1)
	VEXTRACTF128(U8(1), Y0, X2)
	VCVTPS2PD(X2, Y2)
	VMOVUPD(Y1, Mem{Base: RDI})
	VMOVUPD(Y2, Mem{Base: RDI, Disp: 32})
	ADDQ(U8(32), RSI)
	ADDQ(U8(64), RDI)
	SUBQ(U8(8), RCX)
	JNZ(LabelRef("r2d"))
	VZEROUPPER()
	RET()

	text("halfToF64AVX", NOSPLIT, "func(dst *float64, src *uint16, n int)")
	Doc("halfToF64AVX converts halves to float64 (exact); n is a positive multiple of 8.")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	Label("h2d")
	VCVTPH2PS(Mem{Base: RSI}, X0)
	VCVTPH2PS(Mem{Base: RSI, Disp: 8}, X1)
	VCVTPS2PD(X0, Y0)
	VCVTPS2PD(X1, Y1)
	VMOVUPD(Y0, Mem{Base: RDI})
	VMOVUPD(Y1, Mem{Base: RDI, Disp: 32})
	ADDQ(U8(16), RSI)
	ADDQ(U8(64), RDI)
	SUBQ(U8(8), RCX)
	JNZ(LabelRef("h2d"))
	VZEROUPPER()
	RET()

	scoresAVX()
	weightsAVX()

	text("expF64AVX", NOSPLIT, "func(x *float32, n int)")
	Doc("expF64AVX sets x[i] = e^x[i] as expF64Generic computes it, four at a time in float64; n is a positive multiple of 4.")
	Load(Param("x"), RDI)
	Load(Param("n"), RCX)
	Label("ex4")
	VCVTPS2PD(Mem{Base: RDI}, Y0)
	expd4(Y0, Y1, Y2)
	VCVTPD2PSY(Y0, X0)
	VMOVUPS(X0, Mem{Base: RDI})
	ADDQ(U8(16), RDI)
	SUBQ(U8(4), RCX)
	JNZ(LabelRef("ex4"))
	VZEROUPPER()
	RET()
}

// scoresAVX generates
//
//	scoresAVX(s *float32, q, k *float64, n, rd int, scale float32)
//
// s[8*p] = float32(q . k[p*rd:]) * scale for p < n; rd a positive multiple
// of 8. Each dot keeps four lanes (lane j sums elements j, j+4, ... in
// order, with fused multiply-adds of exact products) and adds them as
// (l0+l1)+(l2+l3). Eight positions at a time share the loads of q and keep
// eight independent accumulators, so the multiply-adds' latency overlaps.
func scoresAVX() {
	text("scoresAVX", NOSPLIT, "func(s *float32, q, k *float64, n, rd int, scale float32)")
	Doc("scoresAVX computes the scores of n positions (see internal/gen/attn.go).")
	Load(Param("s"), R12)
	Load(Param("q"), R13)
	Load(Param("k"), RDX)
	Load(Param("n"), R10)
	Load(Param("rd"), R11)
	VBROADCASTSS(NewParamAddr("scale", 40), X15)
	MOVQ(R11, R8)
	SHLQ(U8(3), R8)                              // row stride in bytes
	LEAQ(Mem{Base: R8, Index: R8, Scale: 2}, R9) // three rows
	SHRQ(U8(2), R11)                             // vectors of four per row

	// scores4 reduces the accumulators of four consecutive positions and
	// stores their scores at 0, 32, 64 and 96(R12): per position
	// (l0+l1)+(l2+l3), rounded to float32, times the scale in X15.
	scores4 := func(a, b, c, d VecPhysical) {
		VHADDPD(b, a, a)
		VHADDPD(d, c, c)
		VPERM2F128(U8(0x20), c, a, Y5)
		VPERM2F128(U8(0x31), c, a, Y6)
		VADDPD(Y6, Y5, Y5)
		VCVTPD2PSY(Y5, X5)
		VMULPS(X15, X5, X5)
		VMOVSS(X5, Mem{Base: R12})
		VEXTRACTPS(U8(1), X5, Mem{Base: R12, Disp: 32})
		VEXTRACTPS(U8(2), X5, Mem{Base: R12, Disp: 64})
		VEXTRACTPS(U8(3), X5, Mem{Base: R12, Disp: 96})
	}
	rows := func(b GPPhysical) []Mem {
		return []Mem{{Base: b}, {Base: b, Index: R8, Scale: 1}, {Base: b, Index: R8, Scale: 2}, {Base: b, Index: R9, Scale: 1}}
	}
	for _, g := range []int{8, 4} {
		lbl, next, inner := fmt.Sprintf("sc%d", g), fmt.Sprintf("sc%d", g/2), fmt.Sprintf("sc%dd", g)
		if g == 4 {
			next = "sc1"
		}
		accs := []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y7, Y10, Y11}[:g]
		Label(lbl)
		CMPQ(R10, U8(g))
		JL(LabelRef(next))
		MOVQ(R13, RSI)
		MOVQ(RDX, RAX)
		if g == 8 {
			LEAQ(Mem{Base: RDX, Index: R8, Scale: 4}, RBX)
		}
		MOVQ(R11, RCX)
		for _, a := range accs {
			VXORPD(a, a, a)
		}
		Label(inner)
		VMOVUPD(Mem{Base: RSI}, Y8)
		for i, m := range append(rows(RAX), rows(RBX)...)[:g] {
			VFMADD231PD(m, Y8, accs[i])
		}
		ADDQ(U8(32), RSI)
		ADDQ(U8(32), RAX)
		if g == 8 {
			ADDQ(U8(32), RBX)
		}
		DECQ(RCX)
		JNZ(LabelRef(inner))
		for h := 0; h < g/4; h++ {
			scores4(accs[4*h], accs[4*h+1], accs[4*h+2], accs[4*h+3])
			ADDQ(U32(128), R12)
		}
		LEAQ(Mem{Base: RDX, Index: R8, Scale: uint8(g)}, RDX)
		SUBQ(U8(g), R10)
		if g == 8 {
			JMP(LabelRef(lbl))
		}
	}
	Label("sc1")
	TESTQ(R10, R10)
	JZ(LabelRef("scdone"))
	MOVQ(R13, RSI)
	MOVQ(RDX, RAX)
	MOVQ(R11, RCX)
	VXORPD(Y0, Y0, Y0)
	Label("sc1d")
	VMOVUPD(Mem{Base: RSI}, Y8)
	VFMADD231PD(Mem{Base: RAX}, Y8, Y0)
	ADDQ(U8(32), RSI)
	ADDQ(U8(32), RAX)
	DECQ(RCX)
	JNZ(LabelRef("sc1d"))
	VHADDPD(Y0, Y0, Y0)
	VEXTRACTF128(U8(1), Y0, X1)
	VADDSD(X1, X0, X0)
	VCVTSD2SS(X0, X0, X0)
	VMULSS(X15, X0, X0)
	VMOVSS(X0, Mem{Base: R12})
	ADDQ(U8(32), R12)
	ADDQ(R8, RDX)
	DECQ(R10)
	JMP(LabelRef("sc1"))
	Label("scdone")
	VZEROUPPER()
	RET()
}

// weightsAVX generates
//
//	weightsAVX(sc, w *float32, flags *uint8, m, s *float32, n, wstride, lanes int)
//
// the softmax bookkeeping of n positions for a block of 8 heads, one head
// per lane (see weights in attnkernels.go): sc holds the scores, 8 per
// position; m and s the running maxima and sums, updated in place. Per
// position p it writes the weight row at w + p*wstride (ms of the 8 heads,
// then vs) and sets flags[p] to 1 when a head whose bit is set in lanes
// has a new maximum. n >= 1.
func weightsAVX() {
	text("weightsAVX", NOSPLIT, "func(sc, w *float32, flags *uint8, m, s *float32, n, wstride, lanes int)")
	Doc("weightsAVX is the softmax bookkeeping of n positions for 8 heads (see internal/gen/attn.go).")
	Load(Param("sc"), RSI)
	Load(Param("w"), RDI)
	Load(Param("flags"), RBX)
	Load(Param("m"), RAX)
	Load(Param("n"), RCX)
	Load(Param("wstride"), R8)
	Load(Param("lanes"), R9)
	VMOVUPS(Mem{Base: RAX}, Y0)
	MOVQ(RDI, R10)
	MOVQ(RCX, R11)

	// In position order: mask = s > M; the exponent's argument M-s (new
	// maximum) or s-M; M = max. The mask and the argument are parked in
	// the weight row.
	Label("wt1")
	VMOVUPS(Mem{Base: RSI}, Y1)
	VCMPPS(U8(0x1e), Y0, Y1, Y2)
	VSUBPS(Y0, Y1, Y3)
	VSUBPS(Y1, Y0, Y4)
	VBLENDVPS(Y2, Y4, Y3, Y3)
	VBLENDVPS(Y2, Y1, Y0, Y0)
	VMOVUPS(Y2, Mem{Base: R10})
	VMOVUPS(Y3, Mem{Base: R10, Disp: 32})
	VMOVMSKPS(Y2, EDX)
	ANDQ(R9, RDX)
	JZ(LabelRef("wt1n"))
	MOVB(U8(1), Mem{Base: RBX})
	Label("wt1n")
	ADDQ(U8(32), RSI)
	ADDQ(R8, R10)
	INCQ(RBX)
	DECQ(R11)
	JNZ(LabelRef("wt1"))
	VMOVUPS(Y0, Mem{Base: RAX})

	// The exponentials, four lanes at a time in float64.
	MOVQ(RDI, R10)
	MOVQ(RCX, R11)
	Label("wt2")
	VCVTPS2PD(Mem{Base: R10, Disp: 32}, Y1)
	VCVTPS2PD(Mem{Base: R10, Disp: 48}, Y2)
	expd4(Y1, Y3, Y4)
	expd4(Y2, Y5, Y6)
	VCVTPD2PSY(Y1, X1)
	VCVTPD2PSY(Y2, X2)
	VMOVUPS(X1, Mem{Base: R10, Disp: 32})
	VMOVUPS(X2, Mem{Base: R10, Disp: 48})
	ADDQ(R8, R10)
	DECQ(R11)
	JNZ(LabelRef("wt2"))

	// ms = mask ? e : 1, vs = mask ? 1 : e; S = S*ms + vs (unfused).
	Load(Param("s"), RAX)
	VMOVUPS(Mem{Base: RAX}, Y0)
	VBROADCASTSS(expdAt(18), Y9)
	MOVQ(RDI, R10)
	MOVQ(RCX, R11)
	Label("wt3")
	VMOVUPS(Mem{Base: R10}, Y2)
	VMOVUPS(Mem{Base: R10, Disp: 32}, Y3)
	VBLENDVPS(Y2, Y3, Y9, Y4)
	VBLENDVPS(Y2, Y9, Y3, Y5)
	VMULPS(Y4, Y0, Y0)
	VADDPS(Y5, Y0, Y0)
	VMOVUPS(Y4, Mem{Base: R10})
	VMOVUPS(Y5, Mem{Base: R10, Disp: 32})
	ADDQ(R8, R10)
	DECQ(R11)
	JNZ(LabelRef("wt3"))
	VMOVUPS(Y0, Mem{Base: RAX})
	VZEROUPPER()
	RET()
}
