package cpu

import (
	"math"

	"rill/engine/quant"
)

// The vector kernels below work on float32 slices, never allocate, and are
// safe for concurrent use on disjoint data. Slices that the doc comment says
// must have equal lengths are a caller's contract; a violation panics, like
// an out-of-range index. Each dispatches to an AVX2 kernel when useSIMD is
// set and the slice is long enough for it to pay, else to the generic Go
// version, which is also what the SIMD kernels are tested against.

// simdMin is the length from which the SIMD kernels are used: below it the
// call and the tail handling cost more than they save.
const simdMin = 16

func sameLen(name string, a, b int) {
	if a != b {
		panic("cpu: " + name + ": slices of different lengths")
	}
}

// DotF32 returns the dot product of a and b (equal lengths).
func DotF32(a, b []float32) float32 {
	sameLen("DotF32", len(a), len(b))
	if useSIMD && len(a) >= simdMin {
		return dotF32SIMD(a, b)
	}
	return dotF32Generic(a, b)
}

// AXPY computes y += a*x (equal lengths).
func AXPY(y []float32, a float32, x []float32) {
	sameLen("AXPY", len(y), len(x))
	if useSIMD && len(y) >= simdMin {
		axpySIMD(y, a, x)
		return
	}
	axpyGeneric(y, a, x)
}

// Scale computes x *= a.
func Scale(x []float32, a float32) {
	if useSIMD && len(x) >= simdMin {
		scaleSIMD(x, a)
		return
	}
	scaleGeneric(x, a)
}

// Add computes dst = a + b (equal lengths); dst may be a or b.
func Add(dst, a, b []float32) {
	sameLen("Add", len(dst), len(a))
	sameLen("Add", len(dst), len(b))
	if useSIMD && len(dst) >= simdMin {
		addSIMD(dst, a, b)
		return
	}
	addGeneric(dst, a, b)
}

// RMSNorm normalises one row: out = x / sqrt(mean(x²) + eps) * weight, with
// the sum of squares accumulated in float64 and the scaling done as
// (x*scale)*weight in float32, as ggml's rms_norm followed by mul does. All
// three slices have equal lengths; out may be x.
func RMSNorm(out, x, weight []float32, eps float32) {
	sameLen("RMSNorm", len(out), len(x))
	sameLen("RMSNorm", len(out), len(weight))
	if len(x) == 0 {
		return
	}
	var sum float64
	if useSIMD && len(x) >= simdMin {
		sum = sumSquaresSIMD(x)
	} else {
		sum = sumSquaresGeneric(x)
	}
	mean := float32(sum / float64(len(x)))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	if useSIMD && len(x) >= simdMin {
		scaleMulSIMD(out, x, scale, weight)
		return
	}
	scaleMulGeneric(out, x, scale, weight)
}

// SwiGLU computes out = silu(gate) * up, silu(g) = g / (1 + e^-g) (equal
// lengths); out may be gate or up.
func SwiGLU(out, gate, up []float32) {
	sameLen("SwiGLU", len(out), len(gate))
	sameLen("SwiGLU", len(out), len(up))
	if useSIMD && len(out) >= simdMin {
		swigluSIMD(out, gate, up)
		return
	}
	swigluGeneric(out, gate, up)
}

// F16ToF32s converts IEEE half floats to float32 (equal lengths), with F16C
// when available.
func F16ToF32s(dst []float32, src []uint16) {
	sameLen("F16ToF32s", len(dst), len(src))
	if useSIMD && len(src) >= simdMin {
		f16ToF32SIMD(dst, src)
		return
	}
	f16ToF32Generic(dst, src)
}

// F32ToF16s converts float32 to IEEE half floats rounding to nearest even
// (equal lengths), with F16C when available. NaN stays NaN (the payload may
// differ between the two paths).
func F32ToF16s(dst []uint16, src []float32) {
	sameLen("F32ToF16s", len(dst), len(src))
	if useSIMD && len(src) >= simdMin {
		f32ToF16SIMD(dst, src)
		return
	}
	f32ToF16Generic(dst, src)
}

// Generic versions: plain Go, the reference for the SIMD kernels.

func dotF32Generic(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGeneric(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

func scaleGeneric(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

func addGeneric(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

func sumSquaresGeneric(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

func scaleMulGeneric(out, x []float32, s float32, w []float32) {
	x, w = x[:len(out)], w[:len(out)]
	for i := range out {
		out[i] = float32(x[i]*s) * w[i]
	}
}

func swigluGeneric(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i := range out {
		g := gate[i]
		e := float32(math.Exp(float64(-g)))
		out[i] = float32(g/(1+e)) * up[i]
	}
}

func f16ToF32Generic(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = quant.F16ToF32(src[i])
	}
}

func f32ToF16Generic(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = quant.F32ToF16(src[i])
	}
}
