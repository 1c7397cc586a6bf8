package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// softmaxLengths cover every tail length of the 8-wide kernels around the
// SIMD threshold, and a vocabulary-sized row.
var softmaxLengths = []int{1, 3, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 39, 63, 64, 65, 100, 257, 1000, 32000}

// ulps returns the distance between a and b in units of float32's spacing
// at max(|a|,|b|) (at least the smallest normal's spacing).
func ulps(a, b float32) float64 {
	m := math.Max(math.Abs(float64(a)), math.Abs(float64(b)))
	m = math.Max(m, 0x1p-126)
	spacing := math.Ldexp(1, math.Ilogb(m)-23)
	return math.Abs(float64(a)-float64(b)) / spacing
}

func randLogits(seed uint64, n int, sd float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * sd)
	}
	return v
}

// TestSoftmax checks softmax against a float64 reference: it sums to 1 and
// each value is e^(x-max)/sum within 6 ulps, x-max rounded to float32 as
// ggml does (for x-max near -12 that rounding alone moves e^(x-max) by
// several ulps, so the reference does it too).
func TestSoftmax(t *testing.T) {
	t.Parallel()
	for _, n := range softmaxLengths {
		for _, sd := range []float64{1, 5, 30} {
			t.Run(fmt.Sprintf("n=%d/sd=%g", n, sd), func(t *testing.T) {
				t.Parallel()
				x := randLogits(uint64(n), n, sd)
				sm := slices.Clone(x)
				softmax(sm)
				m := slices.Max(x)
				var sum float64
				for _, v := range x {
					sum += math.Exp(float64(v - m))
				}
				var total float64
				for i, v := range sm {
					total += float64(v)
					want := float32(math.Exp(float64(x[i]-m)) / sum)
					if u := ulps(v, want); u > 6 {
						t.Fatalf("softmax[%d] = %g, want %g (%.1f ulps)", i, v, want, u)
					}
				}
				if math.Abs(total-1) > 1e-5 {
					t.Errorf("softmax sums to %g", total)
				}
			})
		}
	}
}

// TestSoftmaxKernels compares the assembly kernels with the generic Go
// ones: the maximum and the scaling exactly, each exponential within 2 ulps
// (a degree-7 polynomial, truncation below 6e-9 relative, against math.Exp
// rounded once) and their float64 sum within 4 units of float32 rounding.
func TestSoftmaxKernels(t *testing.T) {
	t.Parallel()
	if !useSIMD {
		t.Skip("no AVX2/FMA/F16C here (or RILL_CPU_NOSIMD=1): only the generic kernels run")
	}
	const unit = 1.0 / (1 << 24)
	for _, n := range softmaxLengths {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			t.Parallel()
			x := randLogits(uint64(n)+1, n, 5)
			if mx, mg := maxSIMD(x), maxGeneric(x); mx != mg {
				t.Errorf("max %g, generic %g", mx, mg)
			}
			m := maxGeneric(x)
			es, eg := slices.Clone(x), slices.Clone(x)
			sum, sumg := expSubSumSIMD(es, m), expSubSumGeneric(eg, m)
			for i := range es {
				if u := ulps(es[i], eg[i]); u > 2 {
					t.Fatalf("exp(%g) = %g, generic %g", x[i]-m, es[i], eg[i])
				}
			}
			if math.Abs(sum-sumg) > 4*unit*sumg {
				t.Errorf("sum %g, generic %g", sum, sumg)
			}
			ss, sg := slices.Clone(x), slices.Clone(x)
			scaleSIMD(ss, 0.37)
			scaleGeneric(sg, 0.37)
			if !slices.Equal(ss, sg) {
				t.Errorf("scale differs from the generic scale")
			}
		})
	}
}

// TestSoftmaxMasked checks that -Inf logits (masked positions) become 0.
func TestSoftmaxMasked(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 20, 37} {
		x := make([]float32, n)
		for i := range x {
			if i%3 == 1 {
				x[i] = float32(math.Inf(-1))
			} else {
				x[i] = float32(i)
			}
		}
		softmax(x)
		var total float64
		for i, v := range x {
			if i%3 == 1 && v != 0 {
				t.Errorf("n=%d: masked softmax[%d] = %g", n, i, v)
			}
			total += float64(v)
		}
		if math.Abs(total-1) > 1e-5 {
			t.Errorf("n=%d: softmax sums to %g", n, total)
		}
	}
}

func TestSoftmaxNoAlloc(t *testing.T) {
	x := randLogits(3, 77, 4)
	if a := testing.AllocsPerRun(20, func() { softmax(x) }); a != 0 {
		t.Errorf("softmax allocates %v times per run", a)
	}
}

func BenchmarkSoftmax(b *testing.B) {
	for _, n := range []int{32000, 151936} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			x := randLogits(9, n, 4)
			for b.Loop() {
				softmax(x)
			}
		})
	}
}
