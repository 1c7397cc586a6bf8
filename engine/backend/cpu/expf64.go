package cpu

import "math"

// The attention kernels' exponential: e^x for float32 x, evaluated in
// float64 and rounded once to float32, so that it agrees with a correctly
// rounded expf (what llama.cpp calls) except when e^x lies within about
// 1e-14 relative of a midpoint between two floats. The generic version below
// performs exactly the operations of the assembly one (expF64AVX), so the
// two agree bit for bit.
//
//	x is clamped to [-104, 89]: e^-104 rounds to 0 and e^89 to +Inf in
//	float32; NaN stays NaN.
//	k = roundeven(x*log2(e)), r = x - k*ln2hi - k*ln2lo (fused, ln2 in two
//	parts), |r| <= ln2/2.
//	e^r by its Taylor polynomial of degree 11 (truncation below 1e-14
//	relative), evaluated by Horner's rule with fused multiply-adds.
//	The result is scaled by 2^k (exact: k >= -150 keeps it a normal float64)
//	and rounded to float32.
const (
	expF64Lo    = -104.0
	expF64Hi    = 89.0
	expF64Log2e = 1.4426950408889634 // 0x3ff71547652b82fe
	expF64Ln2Hi = 0.6931471803691238 // 0x3fe62e42fee00000: 32 significant bits
	expF64Ln2Lo = 1.9082149292705877e-10
)

// expF64Coef are 1/j! for j = 0..11, as float64 bit patterns (the assembly
// data holds the same bits).
var expF64Coef = [12]uint64{
	0x3ff0000000000000, 0x3ff0000000000000, 0x3fe0000000000000, 0x3fc5555555555555,
	0x3fa5555555555555, 0x3f81111111111111, 0x3f56c16c16c16c17, 0x3f2a01a01a01a01a,
	0x3efa01a01a01a01a, 0x3ec71de3a556c734, 0x3e927e4fb7789f5c, 0x3e5ae64567f544e4,
}

// expF64Generic returns e^x as described above.
func expF64Generic(x float32) float32 {
	if x != x {
		return x
	}
	xd := min(max(float64(x), expF64Lo), expF64Hi)
	k := math.RoundToEven(xd * expF64Log2e)
	r := math.FMA(-k, expF64Ln2Hi, xd)
	r = math.FMA(-k, expF64Ln2Lo, r)
	p := math.Float64frombits(expF64Coef[11])
	for j := 10; j >= 0; j-- {
		p = math.FMA(r, p, math.Float64frombits(expF64Coef[j]))
	}
	return float32(p * math.Float64frombits(uint64(int64(k)+1023)<<52))
}

// expF32s replaces every x[i] by e^x[i].
func expF32s(x []float32, simd bool) {
	if simd {
		expF64SIMD(x)
		return
	}
	for i, v := range x {
		x[i] = expF64Generic(v)
	}
}
