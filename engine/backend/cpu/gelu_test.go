package cpu

import (
	"math"
	"testing"

	"rill/engine/quant"
)

// geluExact is GELU's tanh approximation in float64.
func geluExact(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// halfULP is the spacing of half-precision values at |x|.
func halfULP(x float64) float64 {
	_, e := math.Frexp(math.Max(math.Abs(x), 0x1p-14))
	return math.Ldexp(1, e-11)
}

// TestGELUTable: every entry of the table is GELU of its half-precision
// input to within half a half-precision step plus the float32 evaluation's
// error, which for negative inputs is dominated by 1+tanh cancelling (one
// float32 step of tanh near -1, times 0.5|x|); a few known values.
func TestGELUTable(t *testing.T) {
	t.Parallel()
	table := geluTable()
	for h := range 1 << 16 {
		x := float64(quant.F16ToF32(uint16(h)))
		if math.IsNaN(x) || math.Abs(x) >= geluLimit {
			continue
		}
		want := geluExact(x)
		if d := math.Abs(float64(table[h]) - want); d > halfULP(want)/2+1e-6*math.Abs(want)+0x1p-23*0.5*math.Abs(x) {
			t.Fatalf("gelu(%g) = %g in the table, exact %g", x, table[h], want)
		}
		if quant.RoundF16(table[h]) != table[h] {
			t.Fatalf("gelu(%g) = %g is not a half-precision value", x, table[h])
		}
	}
	for _, c := range []struct{ x, want float32 }{{0, 0}, {1, 0.8413086}, {-1, -0.15881348}, {3, 2.9960938}} {
		if got := table[quant.F32ToF16(c.x)]; got != c.want {
			t.Errorf("gelu(%g) = %.8g, want %.8g", c.x, got, c.want)
		}
	}
}

// TestGeGLU: inputs inside (-10, 10) are rounded to half and looked up,
// the product with up is float32; at or beyond ±10 GELU is 0 or x, as in
// ggml; out may alias gate.
func TestGeGLU(t *testing.T) {
	t.Parallel()
	r := newRand(t, 31)
	gate := randFloats(r, 100, 4)
	gate = append(gate, -10, -10.5, 10, 12, -9.99, 9.99, 1e-5)
	up := randFloats(r, len(gate), 1)
	out := make([]float32, len(gate))
	GeGLU(out, gate, up)
	table := geluTable()
	for i, x := range gate {
		var want float32
		switch {
		case x <= -10:
			want = 0
		case x >= 10:
			want = x * up[i]
		default:
			want = table[quant.F32ToF16(x)] * up[i]
		}
		if math.Float32bits(out[i]) != math.Float32bits(want) {
			t.Fatalf("GeGLU(%g, %g) = %g, want %g", x, up[i], out[i], want)
		}
		if x > -9 && x < 9 {
			exact := geluExact(float64(x)) * float64(up[i])
			if d := math.Abs(float64(out[i]) - exact); d > 2e-3*math.Abs(float64(up[i]))*max(1, math.Abs(float64(x))) {
				t.Fatalf("GeGLU(%g, %g) = %g, exact %g", x, up[i], out[i], exact)
			}
		}
	}
	aliased := append([]float32(nil), gate...)
	GeGLU(aliased, aliased, up)
	sameBits(t, "out aliasing gate", aliased, out)
}

// TestSoftCap: cap*tanh(x/cap) to float32 accuracy, odd, bounded by the
// cap, and the identity near zero.
func TestSoftCap(t *testing.T) {
	t.Parallel()
	r := newRand(t, 32)
	for _, softCap := range []float32{1.5, 30, 50} {
		x := randFloats(r, 200, float64(softCap))
		x = append(x, 0, 1e-6, -1e-6, 1e6, -1e6)
		got := append([]float32(nil), x...)
		SoftCap(got, softCap)
		for i, v := range x {
			want := float64(softCap) * math.Tanh(float64(v)/float64(softCap))
			if d := math.Abs(float64(got[i]) - want); d > 3e-7*math.Abs(want)+1e-30 {
				t.Fatalf("cap %g: SoftCap(%g) = %g, want %g", softCap, v, got[i], want)
			}
			if math.Abs(float64(got[i])) > float64(softCap) {
				t.Fatalf("cap %g: SoftCap(%g) = %g exceeds the cap", softCap, v, got[i])
			}
		}
	}
}
