package cpu

import (
	"math"
	"testing"

	"rill/engine/quant"
)

// TestBF16Bits checks the activation rounding of the bf16 dot kernels
// against quant.F32ToBF16, bit for bit: ties both ways, carries into the
// exponent, infinities, NaNs (quiet and signalling), denormals and random
// values, at lengths that cover the vector body and the tail.
func TestBF16Bits(t *testing.T) {
	needAVX512(t)
	special := []uint32{
		0, 0x80000000, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, // ties to even, just above and below
		0x3fffffff, 0x7f7fffff, 0xff7fffff, // carry into the exponent, to infinity
		0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff, // infinities, NaNs
		0x00000001, 0x007fffff, 0x80008000, 0x00018000, // denormals
	}
	r := newRand(t, 7)
	for _, n := range []int{1, 15, 16, 17, 48, 203} {
		src := make([]float32, n)
		for i := range src {
			if i < len(special) && n >= 16 {
				src[i] = math.Float32frombits(special[i])
			} else {
				src[i] = float32(r.NormFloat64()) * float32(math.Pow(2, float64(r.IntN(40)-20)))
			}
		}
		got := make([]uint16, n)
		bf16Bits(got, src)
		for i, v := range src {
			if want := quant.F32ToBF16(v); got[i] != want {
				t.Errorf("n=%d: %#08x rounds to %#04x, want %#04x", n, math.Float32bits(v), got[i], want)
			}
		}
	}
}
