package sample

import "math"

// softmax replaces x by softmax(x) in place: e^(x-max) / sum, with the sum
// accumulated in float64. -Inf entries (masked positions) become 0; at least
// one entry must be finite. Empty x is left alone.
//
// On amd64 machines with AVX2, FMA and F16C, rows of at least simdMin values
// go through assembly kernels (softmax_amd64.s) that the CPU backend's
// generator writes from its own vector code: e^x by the polynomial of the
// backend's exp kernel, the sum in fixed float64 accumulators. Elsewhere, or
// when RILL_CPU_NOSIMD=1 is set when the process starts (the backend's
// switch, so that one variable turns every kernel generic), it is pure Go
// with math.Exp. Either way the sampler's probabilities are the bits they
// were when it called the backend's Softmax, without importing the backend.
func softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	if useSIMD && len(x) >= simdMin {
		m := maxSIMD(x)
		sum := expSubSumSIMD(x, m)
		scaleSIMD(x, float32(1/sum))
		return
	}
	m := maxGeneric(x)
	sum := expSubSumGeneric(x, m)
	scaleGeneric(x, float32(1/sum))
}

// simdMin is the length from which the SIMD kernels are used: below it the
// call and the tail handling cost more than they save.
const simdMin = 16

func maxGeneric(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

func expSubSumGeneric(x []float32, m float32) float64 {
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += float64(e)
	}
	return sum
}

func scaleGeneric(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}
