package cpu

import (
	"fmt"
	"math"
)

// RoPE applies rotary position embedding for position pos to nHeads heads of
// headDim values each (len(x) == nHeads*headDim), rotating the first nRot
// dimensions of every head (nRot even, 0 <= nRot <= headDim); the others are
// left alone.
//
// Normal (llama) mode rotates adjacent pairs (x[2i], x[2i+1]); NEOX mode
// rotates (x[i], x[i+nRot/2]). Pair i turns by the angle
// freqScale * pos * base^(-2i/nRot), computed as ggml computes it so that
// large positions round the same way: theta starts at pos and is multiplied
// by thetaScale = base^(-2/nRot) (float32) once per pair, each angle is
// freqScale*theta in float32, and its cosine and sine are rounded to float32.
// (ggml applies freqScale to each pair's theta rather than to the starting
// position; the two differ in the last bit when freqScale != 1.)
//
// RoPE panics when the shapes are inconsistent, like an out-of-range index.
func RoPE(x []float32, nHeads, headDim, nRot, pos int, base, freqScale float32, neox bool) {
	if nHeads < 0 || headDim < 0 || nRot < 0 || nRot > headDim || nRot%2 != 0 || len(x) != nHeads*headDim {
		panic(fmt.Sprintf("cpu: RoPE: %d values for %d heads of %d with %d rotated dims", len(x), nHeads, headDim, nRot))
	}
	if nRot == 0 || nHeads == 0 {
		return
	}
	half := nRot / 2
	thetaScale := float32(math.Pow(float64(base), float64(float32(-2)/float32(nRot))))
	theta := float32(pos)
	for i := range half {
		angle := freqScale * theta
		s64, c64 := math.Sincos(float64(angle))
		sin, cos := float32(s64), float32(c64)
		a, b := 2*i, 2*i+1
		if neox {
			a, b = i, i+half
		}
		for h := 0; h < len(x); h += headDim {
			x0, x1 := x[h+a], x[h+b]
			x[h+a] = float32(x0*cos) - float32(x1*sin)
			x[h+b] = float32(x0*sin) + float32(x1*cos)
		}
		theta *= thetaScale
	}
}
