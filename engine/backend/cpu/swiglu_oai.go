package cpu

import "math"

// SwiGLUOAI computes gpt-oss's clamped gated activation, elementwise over
// equal lengths, as ggml's swiglu_oai evaluates it in float32:
//
//	x = min(gate, limit); y = clamp(up, -limit, limit)
//	out = x / (1 + e^(alpha*-x)) * (y + 1)
//
// (gpt-oss: alpha 1.702, limit 7). e^ is float32(e^x), correctly rounded
// but for a vanishing fraction of arguments, as glibc's expf. out may be
// gate or up.
func SwiGLUOAI(out, gate, up []float32, alpha, limit float32) {
	sameLen("SwiGLUOAI", len(out), len(gate))
	sameLen("SwiGLUOAI", len(out), len(up))
	for i := range out {
		x := min(gate[i], limit)
		y := min(max(up[i], -limit), limit)
		e := float32(math.Exp(float64(alpha * -x)))
		glu := x / (1 + e)
		out[i] = glu * (y + 1)
	}
}

// SwiGLUOAI is the package's SwiGLUOAI.
func (b *Backend) SwiGLUOAI(dst, gate, up []float32, alpha, limit float32) {
	SwiGLUOAI(dst, gate, up, alpha, limit)
}
