package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// ropePair returns the indices RoPE rotates together for pair i.
func ropePair(i, nRot int, neox bool) (int, int) {
	if neox {
		return i, i + nRot/2
	}
	return 2 * i, 2*i + 1
}

// TestRoPEExact checks small positions against the exact float64 rotation
// by pos*freqScale*base^(-2i/nRot). At small positions the float32 angle
// recurrence errs by at most a few ulps of angles below ~10 rad, so each
// output is within 1e-5 (relative to the pair's norm) of the exact value.
func TestRoPEExact(t *testing.T) {
	t.Parallel()
	cases := []struct {
		heads, headDim, nRot, pos int
		base, freqScale           float32
		neox                      bool
	}{
		{1, 8, 8, 0, 10000, 1, false},
		{2, 8, 8, 1, 10000, 1, false},
		{8, 8, 8, 7, 10000, 1, true},
		{4, 64, 64, 3, 10000, 1, false},
		{4, 64, 64, 3, 10000, 1, true},
		{3, 64, 32, 5, 500000, 0.25, false},
		{3, 64, 32, 5, 1000000, 0.5, true},
		{2, 128, 128, 9, 10000, 1, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			r := newRand(t, uint64(c.headDim*100+c.pos))
			x := randFloats(r, c.heads*c.headDim, 1)
			got := slices.Clone(x)
			RoPE(got, c.heads, c.headDim, c.nRot, c.pos, c.base, c.freqScale, c.neox)
			for h := range c.heads {
				off := h * c.headDim
				for i := range c.nRot / 2 {
					a, b := ropePair(i, c.nRot, c.neox)
					a, b = a+off, b+off
					angle := float64(c.pos) * float64(c.freqScale) * math.Pow(float64(c.base), -2*float64(i)/float64(c.nRot))
					s, co := math.Sincos(angle)
					wa := float64(x[a])*co - float64(x[b])*s
					wb := float64(x[a])*s + float64(x[b])*co
					norm := math.Hypot(float64(x[a]), float64(x[b]))
					if math.Abs(float64(got[a])-wa) > 1e-5*norm+1e-30 || math.Abs(float64(got[b])-wb) > 1e-5*norm+1e-30 {
						t.Fatalf("head %d pair %d: (%g, %g), want (%g, %g)", h, i, got[a], got[b], wa, wb)
					}
				}
				// Dimensions past nRot are untouched.
				for d := c.nRot; d < c.headDim; d++ {
					if got[off+d] != x[off+d] {
						t.Fatalf("head %d dim %d changed: %g -> %g", h, d, x[off+d], got[off+d])
					}
				}
			}
		})
	}
}

// TestRoPELargePositions checks that at positions in the thousands RoPE
// follows ggml's float32 recurrence (theta starts at pos, multiplied by
// base^(-2/nRot) per pair, angle = freqScale*theta) rather than the exact
// angle: the two drift apart by up to pos*nRot*2^-24 rad, far beyond the
// tolerance here. The reference builds ggml's cos/sin cache first and then
// rotates, so it shares the arithmetic but not the loop.
func TestRoPELargePositions(t *testing.T) {
	t.Parallel()
	const heads, headDim = 2, 128
	for _, neox := range []bool{false, true} {
		for _, pos := range []int{1000, 4095, 32767} {
			r := newRand(t, uint64(pos))
			x := randFloats(r, heads*headDim, 1)
			got := slices.Clone(x)
			const base, freqScale = 10000, 0.5
			RoPE(got, heads, headDim, headDim, pos, base, freqScale, neox)

			var cache [headDim]float32
			thetaScale := float32(math.Pow(base, float64(float32(-2)/float32(headDim))))
			theta := float32(pos)
			for i := 0; i < headDim; i += 2 {
				ang := float64(float32(freqScale) * theta)
				cache[i], cache[i+1] = float32(math.Cos(ang)), float32(math.Sin(ang))
				theta *= thetaScale
			}
			differs := 0 // pairs where the exact angle would fail the check
			for h := range heads {
				for i := range headDim / 2 {
					a, b := ropePair(i, headDim, neox)
					a, b = a+h*headDim, b+h*headDim
					c, s := float64(cache[2*i]), float64(cache[2*i+1])
					wa := float64(x[a])*c - float64(x[b])*s
					wb := float64(x[a])*s + float64(x[b])*c
					norm := math.Hypot(float64(x[a]), float64(x[b]))
					// Two float32 products and a difference: 2 ulps of the norm.
					tol := 4 * unit * norm
					if math.Abs(float64(got[a])-wa) > tol || math.Abs(float64(got[b])-wb) > tol {
						t.Fatalf("neox=%v pos %d head %d pair %d: (%g, %g), want (%g, %g)", neox, pos, h, i, got[a], got[b], wa, wb)
					}
					exact := float64(pos) * freqScale * math.Pow(base, -2*float64(i)/headDim)
					es, ec := math.Sincos(exact)
					if math.Abs(float64(x[a])*ec-float64(x[b])*es-wa) > tol {
						differs++
					}
				}
			}
			if differs == 0 {
				t.Errorf("neox=%v pos %d: the exact angles pass too; the test does not tell the methods apart", neox, pos)
			}
		}
	}
}

// TestRoPEPreservesNorms checks that rotation keeps each pair's length and
// that position 0 is the identity.
func TestRoPEPreservesNorms(t *testing.T) {
	t.Parallel()
	r := newRand(t, 11)
	for _, neox := range []bool{false, true} {
		x := randFloats(r, 4*32, 1)
		zero := slices.Clone(x)
		RoPE(zero, 4, 32, 32, 0, 10000, 1, neox)
		if !slices.Equal(zero, x) {
			t.Errorf("neox=%v: position 0 changed the values", neox)
		}
		got := slices.Clone(x)
		RoPE(got, 4, 32, 32, 777, 10000, 1, neox)
		for h := range 4 {
			for i := range 16 {
				a, b := ropePair(i, 32, neox)
				a, b = a+h*32, b+h*32
				before := math.Hypot(float64(x[a]), float64(x[b]))
				after := math.Hypot(float64(got[a]), float64(got[b]))
				if math.Abs(before-after) > 8*unit*before {
					t.Fatalf("neox=%v head %d pair %d: norm %g -> %g", neox, h, i, before, after)
				}
			}
		}
	}
}
