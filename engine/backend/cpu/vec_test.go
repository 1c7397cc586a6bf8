package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"rill/engine/quant"
)

// vecLengths cover empty rows, rows shorter than one vector, every tail
// length 1..7 after whole vectors, and the 32-wide unrolled loops.
var vecLengths = []int{0, 1, 3, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 39, 63, 64, 65, 100, 257, 1000}

// ulps returns the distance between a and b in units of float32's spacing
// at max(|a|,|b|) (at least the smallest normal's spacing).
func ulps(a, b float32) float64 {
	m := math.Max(math.Abs(float64(a)), math.Abs(float64(b)))
	m = math.Max(m, 0x1p-126)
	spacing := math.Ldexp(1, math.Ilogb(m)-23)
	return math.Abs(float64(a)-float64(b)) / spacing
}

// TestVecKernelsSIMD compares each assembly vector kernel with its generic
// version on random data of every tail length.
//
// Tolerances: Scale, Add and RMSNorm's scaling round the same operations
// once each, so they must agree exactly. AXPY fuses the multiply-add (one
// rounding instead of two): within 1 ulp of |y|+|a*x|. The exponential-based
// kernels use a degree-7 polynomial (truncation < 6e-9 relative) against
// math.Exp rounded once: the exponential is within 2 ulps, and SwiGLU's
// 1+e, division and multiplication add at most 1.5 ulps more: 4 ulps.
// Dots and the float64 sum of squares follow the summation bound of
// dotTolerance.
func TestVecKernelsSIMD(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	for _, n := range vecLengths {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			r := newRand(t, uint64(n))
			a, b, w := randFloats(r, n, 1), randFloats(r, n, 1), randFloats(r, n, 1)
			alpha := float32(r.NormFloat64())

			// Dot.
			got, ref := dotF32SIMD(a, b), dotF32Generic(a, b)
			exact, abs := exactDot(a, b, a)
			if d := math.Abs(float64(got) - exact); d > dotTolerance(quant.F32, n, abs, true) {
				t.Errorf("dot %g, exact %g", got, exact)
			}
			if d := math.Abs(float64(ref) - exact); d > dotTolerance(quant.F32, n, abs, false) {
				t.Errorf("generic dot %g, exact %g", ref, exact)
			}

			// AXPY.
			ys, yg := slices.Clone(b), slices.Clone(b)
			axpySIMD(ys, alpha, a)
			axpyGeneric(yg, alpha, a)
			for i := range ys {
				lim := float64(math.Abs(float64(b[i]))+math.Abs(float64(alpha*a[i]))) * 2 * unit
				if d := math.Abs(float64(ys[i] - yg[i])); d > lim {
					t.Fatalf("axpy[%d] = %g, generic %g", i, ys[i], yg[i])
				}
			}

			// Scale, Add: exact agreement.
			ss, sg := slices.Clone(a), slices.Clone(a)
			scaleSIMD(ss, alpha)
			scaleGeneric(sg, alpha)
			equalFloats(t, "scale", ss, sg)
			as, ag := make([]float32, n), make([]float32, n)
			addSIMD(as, a, b)
			addGeneric(ag, a, b)
			equalFloats(t, "add", as, ag)
			// In place (dst aliasing a).
			inplace := slices.Clone(a)
			addSIMD(inplace, inplace, b)
			equalFloats(t, "add in place", inplace, ag)

			// RMSNorm parts.
			sq, sqg := sumSquaresSIMD(a), sumSquaresGeneric(a)
			if math.Abs(sq-sqg) > float64(n+1)*0x1p-53*sqg {
				t.Errorf("sum of squares %g, generic %g", sq, sqg)
			}
			ms, mg := make([]float32, n), make([]float32, n)
			scaleMulSIMD(ms, a, alpha, w)
			scaleMulGeneric(mg, a, alpha, w)
			equalFloats(t, "scaleMul", ms, mg)

			// SwiGLU, with gates spread over the exponential's range.
			gate := randFloats(r, n, 8)
			sw, swg := make([]float32, n), make([]float32, n)
			swigluSIMD(sw, gate, b)
			swigluGeneric(swg, gate, b)
			for i := range sw {
				if u := ulps(sw[i], swg[i]); u > 4 {
					t.Fatalf("swiglu(%g, %g) = %g, generic %g (%.1f ulps)", gate[i], b[i], sw[i], swg[i], u)
				}
			}
		})
	}
}

func equalFloats(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		if got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

// TestExpSIMD checks the assembly exponential against math.Exp over its
// whole range, special values included: within 2 ulps for normal results,
// within one subnormal step (2^-149) below, exactly 0 and +Inf past the
// ends, NaN for NaN.
func TestExpSIMD(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	var xs []float32
	for x := -110.0; x <= 92; x += 0.0137 {
		xs = append(xs, float32(x))
	}
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 88.72283, 88.72284, 88.7229, -87.33654, -103.9, -104,
		-150, 1e-8, -1e-8, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	xs = append(xs, specials...)
	got := make([]float32, len(xs))
	expSIMD(got, xs)
	for i, x := range xs {
		want := float32(math.Exp(float64(x)))
		switch {
		case x != x:
			if got[i] == got[i] {
				t.Errorf("exp(NaN) = %g", got[i])
			}
		case math.IsInf(float64(want), 0) || want == 0:
			if got[i] != want {
				t.Errorf("exp(%g) = %g, want %g", x, got[i], want)
			}
		case want < 0x1p-126:
			if d := math.Abs(float64(got[i] - want)); d > 0x1p-149 {
				t.Errorf("exp(%g) = %g, want %g", x, got[i], want)
			}
		default:
			if u := ulps(got[i], want); u > 2 {
				t.Errorf("exp(%g) = %g, want %g (%.1f ulps)", x, got[i], want, u)
			}
		}
	}
}

// TestVecKernels checks the public kernels (whichever path this machine
// takes) against float64 definitions.
func TestVecKernels(t *testing.T) {
	t.Parallel()
	for _, n := range vecLengths {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			r := newRand(t, 1000+uint64(n))
			x, w, up := randFloats(r, n, 2), randFloats(r, n, 1), randFloats(r, n, 1)

			// RMSNorm: out = x / sqrt(mean(x^2)+eps) * w, within 4 ulps
			// (mean, sqrt, division, two products: 5 roundings of at most
			// half an ulp, and the reference's own).
			const eps = 1e-5
			out := make([]float32, n)
			RMSNorm(out, x, w, eps)
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			scale := 1 / math.Sqrt(ss/float64(n)+eps)
			for i := range out {
				want := float32(float64(x[i]) * scale * float64(w[i]))
				if u := ulps(out[i], want); u > 4 {
					t.Fatalf("rmsnorm[%d] = %g, want %g", i, out[i], want)
				}
			}

			// SwiGLU, out aliasing gate as the model calls it.
			gate := slices.Clone(x)
			SwiGLU(gate, gate, up)
			for i := range gate {
				g := float64(x[i])
				want := float32(g / (1 + math.Exp(-g)) * float64(up[i]))
				if u := ulps(gate[i], want); u > 5 {
					t.Fatalf("swiglu(%g, %g) = %g, want %g", x[i], up[i], gate[i], want)
				}
			}

			// Dot, AXPY, Scale, Add.
			exact, abs := exactDot(x, w, x)
			if d := math.Abs(float64(DotF32(x, w)) - exact); d > dotTolerance(quant.F32, n, abs, false) {
				t.Errorf("dot %g, exact %g", DotF32(x, w), exact)
			}
			y := slices.Clone(up)
			AXPY(y, 0.5, x)
			Scale(y, 2)
			sumv := make([]float32, n)
			Add(sumv, y, w)
			for i := range y {
				want := (float64(up[i]) + 0.5*float64(x[i])) * 2
				if d := math.Abs(float64(y[i]) - want); d > 4*unit*(math.Abs(float64(up[i]))+math.Abs(float64(x[i]))) {
					t.Fatalf("axpy+scale[%d] = %g, want %g", i, y[i], want)
				}
				if sumv[i] != y[i]+w[i] {
					t.Fatalf("add[%d] = %g, want %g", i, sumv[i], y[i]+w[i])
				}
			}
		})
	}
}

// TestHalfConversions checks the bulk conversions against engine/quant's
// scalar ones: every half value to float32 exactly, and float32 to half
// for random values, halfway cases, overflow and subnormals.
func TestHalfConversions(t *testing.T) {
	t.Parallel()
	halves := make([]uint16, 1<<16+5) // odd length: exercises the tail
	for i := range halves {
		halves[i] = uint16(i)
	}
	for _, path := range []struct {
		name  string
		toF32 func([]float32, []uint16)
		toF16 func([]uint16, []float32)
		skip  bool
	}{
		{"public", F16ToF32s, F32ToF16s, false},
		{"simd", f16ToF32SIMD, f32ToF16SIMD, !hasSIMD},
		{"generic", f16ToF32Generic, f32ToF16Generic, false},
	} {
		if path.skip {
			continue
		}
		f := make([]float32, len(halves))
		path.toF32(f, halves)
		for i, h := range halves {
			want := quant.F16ToF32(h)
			if math.Float32bits(f[i]) != math.Float32bits(want) && !(f[i] != f[i] && want != want) {
				t.Fatalf("%s: half %#04x = %g, want %g", path.name, h, f[i], want)
			}
		}

		r := newRand(t, 7)
		src := randFloats(r, 1003, 1000)
		for i := 0; i < 200; i++ {
			// Halfway between two halves (ties to even), tiny and huge values.
			lo := quant.F16ToF32(uint16(r.IntN(0x7bff)))
			hi := quant.F16ToF32(quant.F32ToF16(lo) + 1)
			src = append(src, (lo+hi)/2, float32(r.NormFloat64()*1e-6), float32(r.NormFloat64()*1e5))
		}
		src = append(src, 65504, 65520, 65519.99, 1e-8, -0, float32(math.Inf(-1)), float32(math.NaN()))
		h := make([]uint16, len(src))
		path.toF16(h, src)
		for i, v := range src {
			want := quant.F32ToF16(v)
			if h[i] != want && !(v != v && h[i]&0x7c00 == 0x7c00 && h[i]&0x3ff != 0) {
				t.Fatalf("%s: %g -> half %#04x, want %#04x", path.name, v, h[i], want)
			}
		}
	}
}

// TestKernelsNoAlloc checks that the vector kernels do not allocate.
func TestKernelsNoAlloc(t *testing.T) {
	r := newRand(t, 3)
	x, w, y := randFloats(r, 77, 1), randFloats(r, 77, 1), make([]float32, 77)
	q := make([]float32, 4*64)
	h := make([]uint16, 77)
	allocs := testing.AllocsPerRun(20, func() {
		_ = DotF32(x, w)
		AXPY(y, 0.5, x)
		Scale(y, 0.5)
		Add(y, y, w)
		RMSNorm(y, x, w, 1e-5)
		SwiGLU(y, x, w)
		RoPE(q, 4, 64, 64, 1234, 10000, 1, true)
		F32ToF16s(h, x)
		F16ToF32s(y, h)
	})
	if allocs != 0 {
		t.Errorf("vector kernels allocate %v times per run", allocs)
	}
}

// TestLengthMismatchPanics checks that a caller's length mismatch is caught
// rather than read past.
func TestLengthMismatchPanics(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"DotF32":  func() { DotF32(make([]float32, 16), make([]float32, 15)) },
		"AXPY":    func() { AXPY(make([]float32, 16), 1, make([]float32, 17)) },
		"Add":     func() { Add(make([]float32, 16), make([]float32, 16), make([]float32, 8)) },
		"RMSNorm": func() { RMSNorm(make([]float32, 16), make([]float32, 16), make([]float32, 4), 1e-5) },
		"SwiGLU":  func() { SwiGLU(make([]float32, 16), make([]float32, 9), make([]float32, 16)) },
		"RoPE":    func() { RoPE(make([]float32, 16), 2, 8, 10, 0, 10000, 1, false) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic on mismatched lengths", name)
				}
			}()
			f()
		}()
	}
}
