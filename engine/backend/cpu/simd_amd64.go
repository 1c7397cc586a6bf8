//go:build amd64

package cpu

import (
	"os"

	xcpu "golang.org/x/sys/cpu"
)

// hasSIMD reports whether this machine runs the assembly kernels: AVX2 for
// the integer and float vectors, FMA, and F16C for half conversions.
var hasSIMD = xcpu.X86.HasAVX2 && xcpu.X86.HasFMA && xcpu.X86.HasF16C

// useSIMD selects the assembly kernels for the package-level functions and
// for new Backends. RILL_CPU_NOSIMD=1 forces the generic Go kernels; it is
// read once, at start-up.
var useSIMD = hasSIMD && os.Getenv("RILL_CPU_NOSIMD") != "1"

// hasAVX512 reports whether this machine (and its OS) runs the AVX-512
// MatMul kernels as well: AVX-512 F, BW and VL, and VNNI for the int8 dot
// products.
var hasAVX512 = hasSIMD && xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512BW &&
	xcpu.X86.HasAVX512VL && xcpu.X86.HasAVX512VNNI

// useAVX512 selects the AVX-512 MatMul kernels for new Backends.
// RILL_CPU_NOAVX512=1 keeps the AVX2 ones (they give the same bits; the
// switch is for comparisons); RILL_CPU_NOSIMD=1 turns both off.
var useAVX512 = useSIMD && hasAVX512 && os.Getenv("RILL_CPU_NOAVX512") != "1"

// Vector kernels in vec_amd64.s. Lengths are multiples of 8 elements; the
// wrappers below add the tails.

func cpuPause()

//go:noescape
func dotF32AVX(a, b *float32, n int) float32

//go:noescape
func axpyAVX(y *float32, a float32, x *float32, n int)

//go:noescape
func scaleAVX(x *float32, a float32, n int)

//go:noescape
func addAVX(dst, a, b *float32, n int)

//go:noescape
func sumSquaresAVX(x *float32, n int) float64

//go:noescape
func scaleMulAVX(out, x *float32, s float32, w *float32, n int)

//go:noescape
func maxAVX(x *float32, n int) float32

//go:noescape
func expSubSumAVX(x *float32, m float32, n int) float64

//go:noescape
func swigluAVX(out, gate, up *float32, n int)

//go:noescape
func expAVX(dst, src *float32, n int)

//go:noescape
func f16ToF32AVX(dst *float32, src *uint16, n int)

//go:noescape
func f32ToF16AVX(dst *uint16, src *float32, n int)

// Wrappers: check bounds (so the assembly never reads past a slice), run
// the kernel on the multiple-of-8 body and finish the tail in Go. Callers
// have checked lengths.

func dotF32SIMD(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	body := n &^ 7
	var s float32
	if body > 0 {
		s = dotF32AVX(&a[0], &b[0], body)
	}
	for i := body; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

func axpySIMD(y []float32, a float32, x []float32) {
	n := len(y)
	x = x[:n]
	body := n &^ 7
	if body > 0 {
		axpyAVX(&y[0], a, &x[0], body)
	}
	for i := body; i < n; i++ {
		y[i] += a * x[i]
	}
}

func scaleSIMD(x []float32, a float32) {
	body := len(x) &^ 7
	if body > 0 {
		scaleAVX(&x[0], a, body)
	}
	for i := body; i < len(x); i++ {
		x[i] *= a
	}
}

func addSIMD(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	body := n &^ 7
	if body > 0 {
		addAVX(&dst[0], &a[0], &b[0], body)
	}
	for i := body; i < n; i++ {
		dst[i] = a[i] + b[i]
	}
}

func sumSquaresSIMD(x []float32) float64 {
	body := len(x) &^ 7
	var s float64
	if body > 0 {
		s = sumSquaresAVX(&x[0], body)
	}
	for _, v := range x[body:] {
		s += float64(v) * float64(v)
	}
	return s
}

func scaleMulSIMD(out, x []float32, s float32, w []float32) {
	n := len(out)
	x, w = x[:n], w[:n]
	body := n &^ 7
	if body > 0 {
		scaleMulAVX(&out[0], &x[0], s, &w[0], body)
	}
	for i := body; i < n; i++ {
		out[i] = float32(x[i]*s) * w[i]
	}
}

func maxSIMD(x []float32) float32 {
	body := len(x) &^ 7
	m := maxGeneric(x[body:])
	if body > 0 {
		m = max(m, maxAVX(&x[0], body))
	}
	return m
}

func expSubSumSIMD(x []float32, m float32) float64 {
	body := len(x) &^ 7
	var sum float64
	if body > 0 {
		sum = expSubSumAVX(&x[0], m, body)
	}
	// The tail goes through the same polynomial, so every element of the
	// row is computed the same way.
	var buf [8]float32
	tail := buf[:len(x)-body]
	if len(tail) > 0 {
		for i := range tail {
			tail[i] = x[body+i] - m
		}
		expAVX(&buf[0], &buf[0], 8)
		for i, e := range tail {
			x[body+i] = e
			sum += float64(e)
		}
	}
	return sum
}

func swigluSIMD(out, gate, up []float32) {
	n := len(out)
	gate, up = gate[:n], up[:n]
	body := n &^ 7
	if body > 0 {
		swigluAVX(&out[0], &gate[0], &up[0], body)
	}
	if body < n {
		var g, u, o [8]float32
		copy(g[:], gate[body:])
		copy(u[:], up[body:])
		swigluAVX(&o[0], &g[0], &u[0], 8)
		copy(out[body:], o[:n-body])
	}
}

// expSIMD sets dst[i] = e^src[i] with the assembly polynomial (tests).
func expSIMD(dst, src []float32) {
	n := len(dst)
	src = src[:n]
	body := n &^ 7
	if body > 0 {
		expAVX(&dst[0], &src[0], body)
	}
	if body < n {
		var buf [8]float32
		copy(buf[:], src[body:])
		expAVX(&buf[0], &buf[0], 8)
		copy(dst[body:], buf[:n-body])
	}
}

func f16ToF32SIMD(dst []float32, src []uint16) {
	n := len(dst)
	src = src[:n]
	body := n &^ 7
	if body > 0 {
		f16ToF32AVX(&dst[0], &src[0], body)
	}
	if body < n {
		var s [8]uint16
		var d [8]float32
		copy(s[:], src[body:])
		f16ToF32AVX(&d[0], &s[0], 8)
		copy(dst[body:], d[:n-body])
	}
}

func f32ToF16SIMD(dst []uint16, src []float32) {
	n := len(dst)
	src = src[:n]
	body := n &^ 7
	if body > 0 {
		f32ToF16AVX(&dst[0], &src[0], body)
	}
	if body < n {
		var s [8]float32
		var d [8]uint16
		copy(s[:], src[body:])
		f32ToF16AVX(&d[0], &s[0], 8)
		copy(dst[body:], d[:n-body])
	}
}
