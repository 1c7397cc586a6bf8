package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestRoundF16(t *testing.T) {
	t.Parallel()
	check := func(x float32) {
		want := F16ToF32(F32ToF16(x))
		got := RoundF16(x)
		if math.Float32bits(got) != math.Float32bits(want) && !(want != want && got != got) {
			t.Fatalf("RoundF16(%g [%#08x]) = %g [%#08x], want %g [%#08x]", x, math.Float32bits(x), got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	edges := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.99, 65520, -65520, 1e9,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 6.1035156e-05, 6.1e-05, 5.96e-08, 2.98e-08, 2.99e-08, 1e-10, 1.00048828125, 1.0009765625 + 0.00048828125}
	for _, x := range edges {
		check(x)
	}
	// Every half value and the midpoints between neighbours.
	for h := range 0x7c00 {
		x := F16ToF32(uint16(h))
		check(x)
		check(-x)
		if h+1 < 0x7c00 {
			mid := (float64(x) + float64(F16ToF32(uint16(h+1)))) / 2
			check(float32(mid))
			check(math.Nextafter32(float32(mid), 0))
			check(math.Nextafter32(float32(mid), 1e9))
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for range 1_000_000 {
		check(math.Float32frombits(r.Uint32()))
	}
}
