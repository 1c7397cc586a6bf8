package cpu

import (
	"math"
	"sync"

	"rill/engine/quant"
)

// GELU as llama.cpp's CPU backend computes it (Gemma's feed-forward
// activation): the tanh approximation
//
//	gelu(x) = 0.5x * (1 + tanh(sqrt(2/pi) * x * (1 + 0.044715x²)))
//
// evaluated in float32 for every half-precision input and rounded to half
// (ggml's ggml_table_gelu_f16), looked up for x rounded to half; inputs at
// or below -10 give 0 and at or above 10 give x, without the table.

// GELU coefficients, as ggml spells them.
const (
	geluCoefA      = float32(0.044715)
	geluSqrt2OverP = float32(0.79788456080286535587989211986876)
	// geluLimit bounds the inputs the table serves: beyond it gelu(x) is
	// 0 or x to float32 precision.
	geluLimit = 10
)

// geluF32 is the tanh approximation in float32, each product and sum
// rounded as ggml's ggml_gelu_f32 evaluates it.
func geluF32(x float32) float32 {
	inner := float32(geluSqrt2OverP*x) * (1 + float32(float32(geluCoefA*x)*x))
	return float32(0.5*x) * (1 + float32(math.Tanh(float64(inner))))
}

// geluTable is gelu of every half-precision value, rounded to half and
// stored as float32, built on first use (256 KiB).
var geluTable = sync.OnceValue(func() []float32 {
	t := make([]float32, 1<<16)
	for h := range t {
		t[h] = quant.RoundF16(geluF32(quant.F16ToF32(uint16(h))))
	}
	return t
})

// GeGLU computes out = gelu(gate) * up elementwise (equal lengths) with
// llama.cpp's table GELU; out may be gate or up.
func GeGLU(out, gate, up []float32) {
	sameLen("GeGLU", len(out), len(gate))
	sameLen("GeGLU", len(out), len(up))
	table := geluTable()
	for i, x := range gate {
		switch {
		case x <= -geluLimit:
			out[i] = 0
		case x >= geluLimit:
			out[i] = x * up[i]
		default:
			out[i] = table[quant.F32ToF16(x)] * up[i]
		}
	}
}
