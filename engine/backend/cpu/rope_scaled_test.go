package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"rill/engine/tensor"
)

// TestRoPEScaledPlain: without extensions (and with extensions that are
// identities: factors of 1, magnitude 1) RoPEScaled is RoPE, bit for bit,
// so routing every rotation through it would change nothing.
func TestRoPEScaledPlain(t *testing.T) {
	t.Parallel()
	r := newRand(t, 21)
	for _, c := range []tensor.RoPE{
		{Dims: 16, Base: 10000, FreqScale: 1},
		{Dims: 16, Base: 10000, FreqScale: 1, Neox: true},
		{Dims: 12, Base: 500000, FreqScale: 0.25, Neox: true},
		{Dims: 64, Base: 1e6, FreqScale: 0.125, Scaling: &tensor.RoPEScaling{FreqFactors: slices.Repeat([]float32{1}, 32), AttnFactor: 1}},
		{Dims: 64, Base: 1e6, FreqScale: 0.125, Scaling: &tensor.RoPEScaling{}},
	} {
		for _, pos := range []int{0, 1, 17, 4095, 100000} {
			x := randFloats(r, 3*64, 1)
			want, got := slices.Clone(x), slices.Clone(x)
			RoPE(want, 3, 64, c.Dims, pos, c.Base, c.FreqScale, c.Neox)
			RoPEScaled(got, 3, 64, pos, c)
			sameBits(t, fmt.Sprintf("%+v pos %d", c, pos), got, want)
		}
	}
}

// TestRoPEScaled checks frequency factors, the magnitude factor and YaRN
// against the float64 definition of ggml_rope_ext: pair i turns by
// blend(FreqScale*theta_i, theta_i) with theta_i = pos*Base^(-2i/Dims) /
// FreqFactors[i], and both coordinates scale by the magnitude. At these
// positions the float32 recurrence and roundings stay within 1e-5 of the
// pair's norm (as TestRoPEExact allows).
func TestRoPEScaled(t *testing.T) {
	t.Parallel()
	r := newRand(t, 22)
	factors := make([]float32, 32)
	for i := range factors {
		factors[i] = 1 + 7*float32(i)/31
	}
	yarn := tensor.YaRN{ExtFactor: 1, OrigContext: 256, BetaFast: 32, BetaSlow: 1}
	for _, c := range []tensor.RoPE{
		{Dims: 64, Base: 500000, FreqScale: 1, Scaling: &tensor.RoPEScaling{FreqFactors: factors}},
		{Dims: 64, Base: 10000, FreqScale: 1, Scaling: &tensor.RoPEScaling{FreqFactors: factors, AttnFactor: 1.1547}, Neox: true},
		{Dims: 64, Base: 10000, FreqScale: 0.25, Scaling: &tensor.RoPEScaling{AttnFactor: 0.9, YaRN: yarn}},
		{Dims: 48, Base: 1e6, FreqScale: 0.125, Scaling: &tensor.RoPEScaling{YaRN: tensor.YaRN{ExtFactor: 0.5, OrigContext: 4096, BetaFast: 32, BetaSlow: 1}}, Neox: true},
		{Dims: 64, Base: 10000, FreqScale: 0.25, Scaling: &tensor.RoPEScaling{FreqFactors: factors, AttnFactor: 1.2, YaRN: yarn}},
	} {
		sc := *c.Scaling
		for _, pos := range []int{0, 3, 11} {
			const heads, hd = 2, 64
			x := randFloats(r, heads*hd, 1)
			got := slices.Clone(x)
			RoPEScaled(got, heads, hd, pos, c)
			mscale := float64(sc.AttnFactor)
			if mscale == 0 {
				mscale = 1
			}
			var low, high float64
			if sc.YaRN.ExtFactor != 0 {
				corr := func(beta float64) float64 {
					return float64(c.Dims) * math.Log(float64(sc.YaRN.OrigContext)/(beta*2*math.Pi)) / (2 * math.Log(float64(c.Base)))
				}
				low, high = max(0, math.Floor(corr(float64(sc.YaRN.BetaFast)))), min(float64(c.Dims-1), math.Ceil(corr(float64(sc.YaRN.BetaSlow))))
				mscale *= 1 + 0.1*math.Log(1/float64(c.FreqScale))
			}
			for h := range heads {
				for i := range c.Dims / 2 {
					theta := float64(pos) * math.Pow(float64(c.Base), -2*float64(i)/float64(c.Dims))
					if sc.FreqFactors != nil {
						theta /= float64(sc.FreqFactors[i])
					}
					angle := float64(c.FreqScale) * theta
					if sc.YaRN.ExtFactor != 0 {
						ramp := (1 - min(1, max(0, (float64(i)-low)/max(0.001, high-low)))) * float64(sc.YaRN.ExtFactor)
						angle = angle*(1-ramp) + theta*ramp
					}
					a, b := ropePair(i, c.Dims, c.Neox)
					a, b = a+h*hd, b+h*hd
					s, co := math.Sincos(angle)
					wa := mscale * (float64(x[a])*co - float64(x[b])*s)
					wb := mscale * (float64(x[a])*s + float64(x[b])*co)
					tol := 1e-5 * mscale * math.Hypot(float64(x[a]), float64(x[b]))
					if math.Abs(float64(got[a])-wa) > tol || math.Abs(float64(got[b])-wb) > tol {
						t.Fatalf("%+v pos %d head %d pair %d: (%g, %g), want (%g, %g)", c, pos, h, i, got[a], got[b], wa, wb)
					}
				}
				for d := c.Dims; d < hd; d++ {
					if got[h*hd+d] != x[h*hd+d] {
						t.Fatalf("%+v: dimension %d past the rotated ones changed", c, d)
					}
				}
			}
		}
	}
}

// TestYaRNCorrDims: the correction dimensions of a Llama-2-shaped head
// (128 dims, base 10000) extended from 4096 positions with betas 32 and 1:
// 128*ln(4096/(2*pi*beta))/(2*ln 10000) is 20.9 and 45.0, floored and
// ceiled. As in ggml, the low end is clamped at 0 (-2.8 for a context of
// 8) and the high end at the last dimension (65.9), the low end is not
// (53.8).
func TestYaRNCorrDims(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		dims, ctx      int
		base           float32
		wantLo, wantHi float32
	}{
		{128, 4096, 10000, 20, 46},
		{16, 8, 10000, 0, 1},
		{16, 1 << 30, 10, 53, 15},
	} {
		lo, hi := yarnCorrDims(c.dims, c.ctx, c.base, 32, 1)
		if lo != c.wantLo || hi != c.wantHi {
			t.Errorf("%+v: corr dims (%g, %g), want (%g, %g)", c, lo, hi, c.wantLo, c.wantHi)
		}
	}
}
