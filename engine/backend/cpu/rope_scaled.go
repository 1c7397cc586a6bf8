package cpu

import (
	"fmt"
	"math"

	"rill/engine/tensor"
)

// RoPEScaled is RoPE with the extensions of ggml_rope_ext that long-context
// models use (r.Scaling): per-pair frequency factors (Llama 3's rope_freqs,
// Phi-3's long and short factors), a magnitude factor on the cosine and
// sine, and YaRN's blend of scaled and unscaled angles. It rotates the
// first r.Dims dimensions of each of nHeads heads of headDim values
// (len(x) == nHeads*headDim) for position pos.
//
// The arithmetic follows ggml's rope cache, in float32: theta starts at pos
// and is multiplied by thetaScale = Base^(-2/Dims) once per pair; pair i's
// unscaled angle is theta/FreqFactors[i], its scaled angle FreqScale times
// that; with YaRN the angle is scaled*(1-ramp) + unscaled*ramp, ramp =
// ExtFactor * (1 - clamp((i - low)/max(0.001, high - low), 0, 1)) over the
// correction dimensions [low, high] of BetaFast and BetaSlow, and the
// magnitude becomes AttnFactor * (1 + 0.1*ln(1/FreqScale)); cosine and sine
// are rounded to float32 and multiplied by the magnitude. With no extension
// set (a nil r.Scaling included) it is RoPE, bit for bit.
//
// RoPEScaled panics when the shapes are inconsistent, like RoPE.
func RoPEScaled(x []float32, nHeads, headDim, pos int, r tensor.RoPE) {
	nRot := r.Dims
	if nHeads < 0 || headDim < 0 || nRot < 0 || nRot > headDim || nRot%2 != 0 || len(x) != nHeads*headDim {
		panic(fmt.Sprintf("cpu: RoPEScaled: %d values for %d heads of %d with %d rotated dims", len(x), nHeads, headDim, nRot))
	}
	half := nRot / 2
	var sc tensor.RoPEScaling
	if r.Scaling != nil {
		sc = *r.Scaling
	}
	factors := sc.FreqFactors
	if factors != nil && len(factors) < half {
		panic(fmt.Sprintf("cpu: RoPEScaled: %d frequency factors for %d pairs", len(factors), half))
	}
	if nRot == 0 || nHeads == 0 {
		return
	}
	mscale := sc.AttnFactor
	if mscale == 0 {
		mscale = 1
	}
	ext := sc.YaRN.ExtFactor
	var low, high float32
	if ext != 0 {
		low, high = yarnCorrDims(nRot, sc.YaRN.OrigContext, r.Base, sc.YaRN.BetaFast, sc.YaRN.BetaSlow)
		mscale *= 1 + float32(0.1*logf(1/r.FreqScale))
	}
	thetaScale := float32(math.Pow(float64(r.Base), float64(float32(-2)/float32(nRot))))
	theta := float32(pos)
	for i := range half {
		unscaled := theta
		if factors != nil {
			unscaled = theta / factors[i]
		}
		angle := r.FreqScale * unscaled
		if ext != 0 {
			ramp := yarnRamp(low, high, i) * ext
			angle = float32(angle*(1-ramp)) + float32(unscaled*ramp)
		}
		s64, c64 := math.Sincos(float64(angle))
		sin, cos := float32(s64)*mscale, float32(c64)*mscale
		a, b := 2*i, 2*i+1
		if r.Neox {
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

// yarnCorrDims returns the first and last pair dimensions YaRN blends
// over, as ggml_rope_yarn_corr_dims computes them: the dimension whose
// wavelength fits betaFast (betaSlow) rotations into origCtx positions,
// floored (ceiled) and clamped to [0, nDims-1].
func yarnCorrDims(nDims, origCtx int, base, betaFast, betaSlow float32) (low, high float32) {
	corrDim := func(rotations float32) float32 {
		turns := float32(origCtx) / float32(float32(rotations*2)*float32(math.Pi))
		return float32(float32(nDims)*logf(turns)) / float32(2*logf(base))
	}
	low = float32(math.Floor(float64(corrDim(betaFast))))
	high = float32(math.Ceil(float64(corrDim(betaSlow))))
	return max(0, low), min(float32(nDims-1), high)
}

// yarnRamp is ggml's rope_yarn_ramp for pair i (ggml's i0/2): 1 below
// low, 0 above high, linear between.
func yarnRamp(low, high float32, i int) float32 {
	y := (float32(i) - low) / max(0.001, high-low)
	return 1 - min(1, max(0, y))
}

// logf is the natural logarithm rounded to float32.
func logf(x float32) float32 { return float32(math.Log(float64(x))) }
