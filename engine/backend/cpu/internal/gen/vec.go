package main

import (
	"github.com/mmcloughlin/avo/attr"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Vector kernels on float32 with AVX2 and FMA (the package-level functions
// of vec.go and simd_amd64.go). Every one takes a length n that is a
// multiple of 8; the Go wrappers handle the tails. Reductions keep fixed
// accumulators (documented per kernel) so their results do not depend on
// anything but the data.

var expc Mem // the constants of exp8, 8 lanes each (see vecData)

func vecData() {
	expc = GLOBL("expc", RODATA|NOPTR)
	for i, v := range []uint32{
		0xc2d00000, // lo: -104
		0x42b17218, // hi: 88.72284
		0x3fb8aa3b, // log2(e)
		0x3f318000, // ln2 high part
		0xb95e8083, // ln2 low part
		0x39500d01, // c7
		0x3ab60b61, // c6
		0x3c088889, // c5
		0x3d2aaaab, // c4
		0x3e2aaaab, // c3
		0x3f000000, // c2
		0x3f800000, // one (c1, c0, and the exponent bias 127<<23)
	} {
		for j := 0; j < 4; j++ {
			DATA(32*i+8*j, U64(uint64(v)*0x100000001))
		}
	}
}

func expcAt(i int) Mem { return expc.Offset(32 * i) }

// exp8 sets x to e^x lane by lane, with t1-t3 as scratch. x is clamped to
// [-104, 88.72284]: below, e^x rounds to 0 in float32; above, it overflows
// to +Inf. k = round(x*log2(e)) and r = x - k*ln2 (ln2 in two parts, so
// k*ln2hi is exact), e^r by its Taylor polynomial of degree 7 (truncation
// error below 6e-9 relative for |r| <= ln2/2), then scaled by 2^k as two
// factors 2^(k>>1) * 2^(k-k>>1), each a normal float, so results in the
// subnormal range are rounded once and correctly. NaN propagates (max and
// min return their second source when it is NaN).
func exp8(x, t1, t2, t3 VecPhysical) {
	VMOVUPS(expcAt(0), t1)
	VMAXPS(x, t1, x)
	VMOVUPS(expcAt(1), t1)
	VMINPS(x, t1, x)
	VMULPS(expcAt(2), x, t1)
	VROUNDPS(U8(0), t1, t1)
	VFNMADD231PS(expcAt(3), t1, x)
	VFNMADD231PS(expcAt(4), t1, x)
	VMOVUPS(expcAt(5), t2)
	for c := 6; c <= 10; c++ {
		VFMADD213PS(expcAt(c), x, t2)
	}
	VFMADD213PS(expcAt(11), x, t2)
	VFMADD213PS(expcAt(11), x, t2)
	VCVTPS2DQ(t1, t1)
	VPSRAD(U8(1), t1, t3)
	VPSUBD(t3, t1, t1)
	VPSLLD(U8(23), t3, t3)
	VPADDD(expcAt(11), t3, t3)
	VPSLLD(U8(23), t1, t1)
	VPADDD(expcAt(11), t1, t1)
	VMULPS(t3, t2, t2)
	VMULPS(t1, t2, x)
}

// stream emits a loop over CX elements (a multiple of 8) in steps of
// unroll*8 and then of 8: body(k, off) handles the 8 elements at byte
// offset off of every stream in step slot k; ptrs advance by their bytes
// per element times the step.
type streamPtr struct {
	reg  GPPhysical
	size int // bytes per element
}

func stream(name string, unroll int, ptrs []streamPtr, body func(k, slot int)) {
	big, small, done := name+"_big", name+"_8", name+"_end"
	steps := []int{unroll, 1}
	if unroll == 1 {
		steps = steps[1:]
	}
	for _, u := range steps {
		lbl, next := big, small
		if u == 1 {
			lbl, next = small, done
		}
		Label(lbl)
		CMPQ(RCX, U8(8*u))
		JL(LabelRef(next))
		for k := 0; k < u; k++ {
			body(k, k)
		}
		for _, p := range ptrs {
			ADDQ(U32(8*u*p.size), p.reg)
		}
		SUBQ(U8(8*u), RCX)
		JMP(LabelRef(lbl))
	}
	Label(done)
}

func vecFamily(sfx string) {
	text := func(name string, a attr.Attribute, sig string) { textNoEscape(name+sfx, a, sig) }
	vecData()

	text("cpuPause", NOSPLIT, "func()")
	Doc("cpuPause executes PAUSE (spin-wait loops).")
	PAUSE()
	RET()

	// dotF32AVX: four accumulators (elements 32j+8i.. into acc i), the
	// 8-element tail into acc0, (acc0+acc1)+(acc2+acc3), then HSUMPS.
	text("dotF32AVX", NOSPLIT, "func(a, b *float32, n int) float32")
	Doc("dotF32AVX is the dot product of n float32s (see internal/gen/vec.go).")
	Load(Param("a"), RSI)
	Load(Param("b"), RDI)
	Load(Param("n"), RCX)
	for i := 0; i < 4; i++ {
		VXORPS(yreg(i), yreg(i), yreg(i))
	}
	stream(sfx+"dotF32AVX", 4, []streamPtr{{RSI, 4}, {RDI, 4}}, func(k, _ int) {
		VMOVUPS(Mem{Base: RSI, Disp: 32 * k}, yreg(4+k))
		VFMADD231PS(Mem{Base: RDI, Disp: 32 * k}, yreg(4+k), yreg(k))
	})
	VADDPS(Y1, Y0, Y0)
	VADDPS(Y3, Y2, Y2)
	VADDPS(Y2, Y0, Y0)
	hsum2(Y0, X1)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()

	text("axpyAVX", NOSPLIT, "func(y *float32, a float32, x *float32, n int)")
	Doc("axpyAVX sets y += a*x, one fused multiply-add per element.")
	Load(Param("y"), RDI)
	VBROADCASTSS(NewParamAddr("a", 8), Y15)
	Load(Param("x"), RSI)
	Load(Param("n"), RCX)
	stream(sfx+"axpyAVX", 4, []streamPtr{{RSI, 4}, {RDI, 4}}, func(k, _ int) {
		VMOVUPS(Mem{Base: RDI, Disp: 32 * k}, yreg(k))
		VFMADD231PS(Mem{Base: RSI, Disp: 32 * k}, Y15, yreg(k))
		VMOVUPS(yreg(k), Mem{Base: RDI, Disp: 32 * k})
	})
	VZEROUPPER()
	RET()

	scaleKernel(sfx)

	text("addAVX", NOSPLIT, "func(dst, a, b *float32, n int)")
	Doc("addAVX sets dst = a + b.")
	Load(Param("dst"), RDI)
	Load(Param("a"), RSI)
	Load(Param("b"), RDX)
	Load(Param("n"), RCX)
	stream(sfx+"addAVX", 4, []streamPtr{{RSI, 4}, {RDX, 4}, {RDI, 4}}, func(k, _ int) {
		VMOVUPS(Mem{Base: RSI, Disp: 32 * k}, yreg(k))
		VADDPS(Mem{Base: RDX, Disp: 32 * k}, yreg(k), yreg(k))
		VMOVUPS(yreg(k), Mem{Base: RDI, Disp: 32 * k})
	})
	VZEROUPPER()
	RET()

	// sumSquaresAVX: squares formed and summed in float64 (exact
	// products), four accumulators of 4 lanes: elements 16j+4i.. into acc
	// i, the 8-element tail into acc0 and acc1; (acc0+acc1)+(acc2+acc3),
	// then the lanes as HSUMPD.
	text("sumSquaresAVX", NOSPLIT, "func(x *float32, n int) float64")
	Doc("sumSquaresAVX returns the sum of squares of n float32s, in float64 (see internal/gen/vec.go).")
	Load(Param("x"), RSI)
	Load(Param("n"), RCX)
	for i := 0; i < 4; i++ {
		VXORPD(yreg(i), yreg(i), yreg(i))
	}
	{
		big, small, done := "ss_16", "ss_8", "ss_end"
		Label(big)
		CMPQ(RCX, U8(16))
		JL(LabelRef(small))
		for i := 0; i < 4; i++ {
			VCVTPS2PD(Mem{Base: RSI, Disp: 16 * i}, yreg(4+i))
		}
		for i := 0; i < 4; i++ {
			VFMADD231PD(yreg(4+i), yreg(4+i), yreg(i))
		}
		ADDQ(U8(64), RSI)
		SUBQ(U8(16), RCX)
		JMP(LabelRef(big))
		Label(small)
		CMPQ(RCX, U8(8))
		JL(LabelRef(done))
		VCVTPS2PD(Mem{Base: RSI}, Y4)
		VCVTPS2PD(Mem{Base: RSI, Disp: 16}, Y5)
		VFMADD231PD(Y4, Y4, Y0)
		VFMADD231PD(Y5, Y5, Y1)
		ADDQ(U8(32), RSI)
		SUBQ(U8(8), RCX)
		JMP(LabelRef(small))
		Label(done)
	}
	VADDPD(Y1, Y0, Y0)
	VADDPD(Y3, Y2, Y2)
	VADDPD(Y2, Y0, Y0)
	hsumPD(Y0, X1)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()

	text("scaleMulAVX", NOSPLIT, "func(out, x *float32, s float32, w *float32, n int)")
	Doc("scaleMulAVX sets out = (x*s)*w, two roundings, as the generic version.")
	Load(Param("out"), RDI)
	Load(Param("x"), RSI)
	VBROADCASTSS(NewParamAddr("s", 16), Y15)
	Load(Param("w"), RDX)
	Load(Param("n"), RCX)
	stream(sfx+"scaleMulAVX", 2, []streamPtr{{RSI, 4}, {RDX, 4}, {RDI, 4}}, func(k, _ int) {
		VMULPS(Mem{Base: RSI, Disp: 32 * k}, Y15, yreg(k))
		VMULPS(Mem{Base: RDX, Disp: 32 * k}, yreg(k), yreg(k))
		VMOVUPS(yreg(k), Mem{Base: RDI, Disp: 32 * k})
	})
	VZEROUPPER()
	RET()

	text("swigluAVX", NOSPLIT, "func(out, gate, up *float32, n int)")
	Doc("swigluAVX sets out = g/(1+e^-g) * up.")
	Load(Param("out"), RDI)
	Load(Param("gate"), RSI)
	Load(Param("up"), RDX)
	Load(Param("n"), RCX)
	VXORPS(Y14, Y14, Y14)
	VMOVUPS(expcAt(11), Y13)
	stream(sfx+"swigluAVX", 1, []streamPtr{{RSI, 4}, {RDX, 4}, {RDI, 4}}, func(int, int) {
		VMOVUPS(Mem{Base: RSI}, Y4)
		VSUBPS(Y4, Y14, Y0)
		exp8(Y0, Y1, Y2, Y3)
		VADDPS(Y13, Y0, Y0)
		VDIVPS(Y0, Y4, Y4)
		VMULPS(Mem{Base: RDX}, Y4, Y4)
		VMOVUPS(Y4, Mem{Base: RDI})
	})
	VZEROUPPER()
	RET()

	expKernel(sfx)

	text("f16ToF32AVX", NOSPLIT, "func(dst *float32, src *uint16, n int)")
	Doc("f16ToF32AVX converts halves to float32 (exact).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	stream(sfx+"f16ToF32AVX", 1, []streamPtr{{RSI, 2}, {RDI, 4}}, func(int, int) {
		VCVTPH2PS(Mem{Base: RSI}, Y0)
		VMOVUPS(Y0, Mem{Base: RDI})
	})
	VZEROUPPER()
	RET()

	text("f32ToF16AVX", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Doc("f32ToF16AVX converts float32 to halves, rounding to nearest even.")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	stream(sfx+"f32ToF16AVX", 1, []streamPtr{{RSI, 4}, {RDI, 2}}, func(int, int) {
		VMOVUPS(Mem{Base: RSI}, Y0)
		VCVTPS2PH(U8(0), Y0, Mem{Base: RDI})
	})
	VZEROUPPER()
	RET()
}

// hsumPD sets the low lane of y (4 doubles) to (l0+l2)+(l1+l3) as HSUMPD:
// halves, then the pair. t is scratch.
func hsumPD(y, t VecPhysical) {
	x := y.AsX()
	VEXTRACTF128(U8(1), y, t)
	VADDPD(t, x, x)
	VPERMILPD(U8(1), x, t)
	VADDSD(t, x, x)
}

// softmaxFamily is engine/sample's softmax (go run ./internal/gen -kernels
// softmax): the largest value, e^(x-max) with its float64 sum, and the
// scaling by the sum's inverse, the kernels that the CPU backend's vector
// functions use for the same steps (exp8, the fixed accumulators), so the
// sampler's probabilities are the bits they were when it called this
// package.
func softmaxFamily(sfx string) {
	vecData()
	maxKernel(sfx)
	expSubSumKernel(sfx)
	expKernel(sfx)
	scaleKernel(sfx)
}

// scaleKernel emits scaleAVX.
func scaleKernel(sfx string) {
	text := func(name string, a attr.Attribute, sig string) { textNoEscape(name+sfx, a, sig) }
	text("scaleAVX", NOSPLIT, "func(x *float32, a float32, n int)")
	Doc("scaleAVX sets x *= a.")
	Load(Param("x"), RDI)
	VBROADCASTSS(NewParamAddr("a", 8), Y15)
	Load(Param("n"), RCX)
	stream(sfx+"scaleAVX", 4, []streamPtr{{RDI, 4}}, func(k, _ int) {
		VMULPS(Mem{Base: RDI, Disp: 32 * k}, Y15, yreg(k))
		VMOVUPS(yreg(k), Mem{Base: RDI, Disp: 32 * k})
	})
	VZEROUPPER()
	RET()
}

// maxKernel emits maxAVX.
func maxKernel(sfx string) {
	text := func(name string, a attr.Attribute, sig string) { textNoEscape(name+sfx, a, sig) }
	text("maxAVX", NOSPLIT, "func(x *float32, n int) float32")
	Doc("maxAVX returns the largest of n float32s (n >= 8).")
	Load(Param("x"), RSI)
	Load(Param("n"), RCX)
	VMOVUPS(Mem{Base: RSI}, Y0)
	VMOVAPS(Y0, Y1)
	stream(sfx+"maxAVX", 1, []streamPtr{{RSI, 4}}, func(int, int) {
		VMAXPS(Mem{Base: RSI}, Y0, Y0)
	})
	VMAXPS(Y1, Y0, Y0)
	VEXTRACTF128(U8(1), Y0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0x4e), X0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0xb1), X0, X1)
	VMAXSS(X1, X0, X0)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// expSubSumKernel emits expSubSumAVX.
func expSubSumKernel(sfx string) {
	text := func(name string, a attr.Attribute, sig string) { textNoEscape(name+sfx, a, sig) }
	// expSubSumAVX: the low four results of each 8 into one float64
	// accumulator, the high four into another; their sum, then HSUMPD.
	text("expSubSumAVX", NOSPLIT, "func(x *float32, m float32, n int) float64")
	Doc("expSubSumAVX sets x[i] = e^(x[i]-m) and returns their sum in float64 (see internal/gen/vec.go).")
	Load(Param("x"), RDI)
	VBROADCASTSS(NewParamAddr("m", 8), Y15)
	Load(Param("n"), RCX)
	VXORPD(Y8, Y8, Y8)
	VXORPD(Y9, Y9, Y9)
	stream(sfx+"expSubSumAVX", 1, []streamPtr{{RDI, 4}}, func(int, int) {
		VMOVUPS(Mem{Base: RDI}, Y0)
		VSUBPS(Y15, Y0, Y0)
		exp8(Y0, Y1, Y2, Y3)
		VMOVUPS(Y0, Mem{Base: RDI})
		VCVTPS2PD(X0, Y4)
		VEXTRACTF128(U8(1), Y0, X5)
		VCVTPS2PD(X5, Y5)
		VADDPD(Y4, Y8, Y8)
		VADDPD(Y5, Y9, Y9)
	})
	VADDPD(Y9, Y8, Y8)
	hsumPD(Y8, X1)
	Store(X8, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// expKernel emits expAVX.
func expKernel(sfx string) {
	text := func(name string, a attr.Attribute, sig string) { textNoEscape(name+sfx, a, sig) }
	text("expAVX", NOSPLIT, "func(dst, src *float32, n int)")
	Doc("expAVX sets dst = e^src (see exp8 in internal/gen/vec.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	stream(sfx+"expAVX", 1, []streamPtr{{RSI, 4}, {RDI, 4}}, func(int, int) {
		VMOVUPS(Mem{Base: RSI}, Y0)
		exp8(Y0, Y1, Y2, Y3)
		VMOVUPS(Y0, Mem{Base: RDI})
	})
	VZEROUPPER()
	RET()
}
