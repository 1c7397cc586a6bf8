package cpu

import (
	"math"
	"testing"
)

// TestSwiGLUOAI checks the clamped activation against its float64
// definition, on values inside the clamps and beyond them (where the
// clamps must hold gate at limit and up within ±limit), in place too.
func TestSwiGLUOAI(t *testing.T) {
	t.Parallel()
	const alpha, limit = 1.702, 7
	ref := func(g, u float32) float64 {
		x := math.Min(float64(g), limit)
		y := math.Max(-limit, math.Min(float64(u), limit))
		return x / (1 + math.Exp(-alpha*x)) * (y + 1)
	}
	tests := []struct {
		name     string
		gate, up float32
	}{
		{"zero", 0, 0},
		{"inside", 1.5, -0.5},
		{"negative gate", -3, 2},
		{"gate above limit", 9, 1},
		{"gate far below", -40, 1},
		{"up above limit", 2, 12},
		{"up below limit", 2, -12},
		{"both beyond", 100, -100},
	}
	r := newRand(t, 7)
	gate, up := make([]float32, len(tests)), make([]float32, len(tests))
	for i, c := range tests {
		gate[i], up[i] = c.gate, c.up
	}
	gate = append(gate, randFloats(r, 200, 5)...)
	up = append(up, randFloats(r, 200, 5)...)
	out := make([]float32, len(gate))
	SwiGLUOAI(out, gate, up, alpha, limit)
	for i := range out {
		want := ref(gate[i], up[i])
		if d := math.Abs(float64(out[i]) - want); d > 4e-7*math.Max(1, math.Abs(want)) {
			name := "random"
			if i < len(tests) {
				name = tests[i].name
			}
			t.Errorf("%s: SwiGLUOAI(%g, %g) = %g, want %g", name, gate[i], up[i], out[i], want)
		}
	}
	inPlace := append([]float32(nil), gate...)
	SwiGLUOAI(inPlace, inPlace, up, alpha, limit)
	sameOpBits(t, "SwiGLUOAI in place", inPlace, out)
}
