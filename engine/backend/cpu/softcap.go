package cpu

import "math"

// SoftCap replaces each x by softCap * tanh(x / softCap) (softCap > 0), as
// ggml computes Gemma 2's final logit soft-capping: x times 1/softCap
// (rounded to float32), tanh rounded to float32, times softCap.
func SoftCap(x []float32, softCap float32) {
	inv := 1 / softCap
	for i, v := range x {
		x[i] = float32(math.Tanh(float64(v*inv))) * softCap
	}
}
