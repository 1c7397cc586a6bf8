package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The value updates of attention over a Q8_0 or Q4_0 cache
// (attention_quant.go):
//
//	vacc<T>Z<nh>(acc *float32, v *byte, w *float32, rows, rb, wstride, astride int)
//	vacc<T>AVX<nh>(... the same)
//
// For one 32-value column of the cached values (one GGML block per row,
// the first at v, rows rb bytes apart) and nh query heads, acc[i][0:32] +=
// w[i][r] * dequant(row r) for r < rows: head i's accumulators at acc +
// i*astride bytes, its weights at w + i*wstride bytes, 4 bytes apart. The
// block is dequantised once in registers (int8 or nibble, times its fp16
// scale, in float32, as engine/quant's dequantisers compute it) and used by
// every head; the accumulators stay in registers for all rows. rows >= 1.
// Z kernels (AVX-512) take up to 4 heads, AVX (AVX2) kernels up to 2.
func attnQFamily() {
	for _, t := range []string{"Q8_0", "Q4_0"} {
		for nh := 1; nh <= 4; nh++ {
			vaccQGen(t, nh, true)
		}
		for nh := 1; nh <= 2; nh++ {
			vaccQGen(t, nh, false)
		}
	}
}

func vaccQGen(typ string, nh int, wide bool) {
	name := fmt.Sprintf("vacc%sAVX%d", typ, nh)
	vreg, per := yreg, 4 // registers per head for 32 values
	if wide {
		name = fmt.Sprintf("vacc%sZ%d", typ, nh)
		vreg, per = zreg, 2
	}
	text(name, NOSPLIT, "func(acc *float32, v *byte, w *float32, rows, rb, wstride, astride int)")
	Doc(fmt.Sprintf("%s adds %d heads' weighted sums of a column of %s value blocks to their accumulators (see internal/gen/attnq.go).", name, nh, typ))
	a := func(i, c int) VecPhysical { return vreg(i*per + c) }
	t := func(c int) VecPhysical { return vreg(nh*per + c) }
	d, bc := vreg(nh*per+per), vreg(nh*per+per+1)
	mask, eight := vreg(nh*per+per+2), vreg(nh*per+per+3)
	ws := []GPPhysical{RDX, R8, R9, R10}

	Load(Param("acc"), RBX)
	Load(Param("astride"), R11)
	MOVQ(RBX, RAX)
	for i := range nh {
		for c := range per {
			VMOVUPS(Mem{Base: RAX, Disp: 4 * c * 32 / per}, a(i, c))
		}
		if i+1 < nh {
			ADDQ(R11, RAX)
		}
	}
	Load(Param("v"), RSI)
	Load(Param("w"), RDX)
	Load(Param("rows"), RCX)
	Load(Param("rb"), RDI)
	Load(Param("wstride"), R11)
	for i := 1; i < nh; i++ {
		MOVQ(ws[i-1], ws[i])
		ADDQ(R11, ws[i])
	}
	if typ == "Q4_0" {
		MOVL(U32(15), EAX)
		VMOVD(EAX, mask.AsX())
		VPBROADCASTD(mask.AsX(), mask)
		MOVL(U32(8), EAX)
		VMOVD(EAX, eight.AsX())
		VPBROADCASTD(eight.AsX(), eight)
	}
	loop := name + "_row"
	Label(loop)
	if wide {
		VPBROADCASTW(Mem{Base: RSI}, d.AsY())
		VCVTPH2PS(d.AsY(), d)
	} else {
		VPBROADCASTW(Mem{Base: RSI}, d.AsX())
		VCVTPH2PS(d.AsX(), d)
	}
	step := 32 / per // values per register
	switch typ {
	case "Q8_0":
		for c := range per {
			VPMOVSXBD(Mem{Base: RSI, Disp: 2 + step*c}, t(c))
		}
	case "Q4_0":
		// Byte j holds element j (low nibble) and j+16 (high nibble).
		for c := range per / 2 {
			VPMOVZXBD(Mem{Base: RSI, Disp: 2 + step*c}, t(c))
			VPSRLD(U8(4), t(c), t(c+per/2))
			if wide {
				VPANDD(mask, t(c), t(c))
			} else {
				VPAND(mask, t(c), t(c))
			}
		}
		for c := range per {
			VPSUBD(eight, t(c), t(c))
		}
	}
	for c := range per {
		VCVTDQ2PS(t(c), t(c))
	}
	for c := range per {
		VMULPS(d, t(c), t(c))
	}
	for i := range nh {
		VBROADCASTSS(Mem{Base: ws[i]}, bc)
		for c := range per {
			VFMADD231PS(t(c), bc, a(i, c))
		}
	}
	ADDQ(RDI, RSI)
	for i := range nh {
		ADDQ(U8(4), ws[i])
	}
	DECQ(RCX)
	JNZ(LabelRef(loop))

	Load(Param("astride"), R11)
	MOVQ(RBX, RAX)
	for i := range nh {
		for c := range per {
			VMOVUPS(a(i, c), Mem{Base: RAX, Disp: 4 * c * 32 / per})
		}
		if i+1 < nh {
			ADDQ(R11, RAX)
		}
	}
	VZEROUPPER()
	RET()
}

// attnQScores emits the softmax steps of a chunk of quantised-cache scores
// (AVX2, 8 at a time; n is a positive multiple of 8):
//
//	quantMaxAVX(x *float32, n int) float32             the largest x[i]
//	quantScaleSubAVX(x *float32, n int, a, b float32)  x[i] = fma(x[i], a, -b)
//	quantSumAVX(x *float32, n int) float32             the sum, in 8 lanes
func attnQScores() {
	text("quantMaxAVX", NOSPLIT, "func(x *float32, n int) float32")
	Doc("quantMaxAVX returns the largest of n float32s (see internal/gen/attnq.go).")
	Load(Param("x"), RSI)
	Load(Param("n"), RCX)
	VMOVUPS(Mem{Base: RSI}, Y0)
	Label("quantMaxAVX_loop")
	VMAXPS(Mem{Base: RSI}, Y0, Y0)
	ADDQ(U8(32), RSI)
	SUBQ(U8(8), RCX)
	JNZ(LabelRef("quantMaxAVX_loop"))
	VEXTRACTF128(U8(1), Y0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0x4e), X0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0xb1), X0, X1)
	VMAXSS(X1, X0, X0)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()

	text("quantScaleSubAVX", NOSPLIT, "func(x *float32, n int, a, b float32)")
	Doc("quantScaleSubAVX sets x[i] = x[i]*a - b, rounded once (see internal/gen/attnq.go).")
	Load(Param("x"), RSI)
	Load(Param("n"), RCX)
	VBROADCASTSS(NewParamAddr("a", 16), Y1)
	VBROADCASTSS(NewParamAddr("b", 20), Y2)
	Label("quantScaleSubAVX_loop")
	VMOVUPS(Mem{Base: RSI}, Y0)
	VFMSUB213PS(Y2, Y1, Y0)
	VMOVUPS(Y0, Mem{Base: RSI})
	ADDQ(U8(32), RSI)
	SUBQ(U8(8), RCX)
	JNZ(LabelRef("quantScaleSubAVX_loop"))
	VZEROUPPER()
	RET()

	text("quantSumAVX", NOSPLIT, "func(x *float32, n int) float32")
	Doc("quantSumAVX returns the sum of n float32s, in 8 lanes, then halves (see internal/gen/attnq.go).")
	Load(Param("x"), RSI)
	Load(Param("n"), RCX)
	VXORPS(Y0, Y0, Y0)
	Label("quantSumAVX_loop")
	VADDPS(Mem{Base: RSI}, Y0, Y0)
	ADDQ(U8(32), RSI)
	SUBQ(U8(8), RCX)
	JNZ(LabelRef("quantSumAVX_loop"))
	VEXTRACTF128(U8(1), Y0, X1)
	VADDPS(X1, X0, X0)
	VPERMILPS(U8(0x4e), X0, X1)
	VADDPS(X1, X0, X0)
	VPERMILPS(U8(0xb1), X0, X1)
	VADDSS(X1, X0, X0)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
