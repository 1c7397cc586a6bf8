package quant

import (
	"math"
)

// RoundF16 returns x rounded to the nearest half-precision value (ties to
// even), as a float32: F16ToF32(F32ToF16(x)) without the 16-bit detour.
// Values beyond the half range become ±Inf; NaN stays NaN.
func RoundF16(x float32) float32 {
	b := math.Float32bits(x)
	sign := b & 0x80000000
	a := b &^ 0x80000000
	switch {
	case a >= 0x7f800000: // Inf or NaN
		return x
	case a >= 0x38800000: // a half normal: keep 10 mantissa bits
		a = (a + 0x0fff + (a>>13)&1) &^ 0x1fff
		if a > 0x477fe000 { // past 65504
			a = 0x7f800000
		}
		return math.Float32frombits(sign | a)
	}
	// A half subnormal: a multiple of 2^-24. Scaling by 2^24 is exact here.
	y := math.RoundToEven(float64(math.Float32frombits(a)) * (1 << 24))
	return math.Float32frombits(sign | math.Float32bits(float32(y/(1<<24))))
}
