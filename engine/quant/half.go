package quant

import "math"

// F16ToF32 converts an IEEE 754 binary16 value to float32. The conversion is
// exact for every input: normals, subnormals, ±0, ±Inf, and NaN (payload kept).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	em := uint32(h & 0x7fff) // exponent and mantissa
	if em >= 0x7c00 {
		// Inf or NaN: all-ones exponent, mantissa (payload) moved up.
		return math.Float32frombits(sign | 0x7f800000 | (em&0x3ff)<<13)
	}
	// Placing the half's exponent and mantissa bits at the top of a float32
	// gives the value scaled by 2^-112 (the difference of the exponent biases,
	// 127-15). Multiplying by 2^112 restores it exactly, and it normalises
	// half subnormals on the way because they land on float32 subnormals of the
	// same scale.
	mag := math.Float32frombits(em<<13) * 0x1p112
	return math.Float32frombits(sign | math.Float32bits(mag))
}

// F32ToF16 converts a float32 to IEEE 754 binary16, rounding to nearest with
// ties to even (as F16C's VCVTPS2PH with rounding mode 0 does). Values beyond
// the largest half (65504) after rounding become ±Inf; values below half the
// smallest subnormal become ±0. NaN stays NaN (quiet, sign and the top
// payload bits kept).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	// The common case, a normal half (float32 exponents 113 to 142), is
	// kept small enough to inline. Rebias the exponent in place, then drop
	// 13 mantissa bits rounding to nearest even without branches: adding
	// 0xfff plus the lowest kept bit carries into the kept bits exactly when
	// the dropped part is above half, or is half and the kept part is odd. A
	// carry out of the mantissa increments the exponent, and out of the
	// largest exponent it yields exactly Inf (0x7c00), the correct overflow.
	if a := b & 0x7fffffff; a-113<<23 < 30<<23 {
		v := a - (127-15)<<23
		return uint16(b>>16)&0x8000 | uint16((v+0xfff+(v>>13)&1)>>13)
	}
	return f32ToF16Rare(b)
}

// f32ToF16Rare converts the float32 with bits b when the result is not a
// normal half: zero, subnormal, overflow, Inf or NaN.
func f32ToF16Rare(b uint32) uint16 {
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00
		}
		// Setting the quiet bit also guarantees a non-zero mantissa, so the
		// result cannot turn into an infinity.
		return sign | 0x7e00 | uint16(man>>13)
	}
	e := exp - 127 + 15 // the exponent rebiased for binary16
	if e >= 31 {
		return sign | 0x7c00
	}
	// The result is a half subnormal (or rounds up to the smallest normal).
	// Below 2^-25 everything rounds to zero; exactly 2^-25 is a tie that
	// goes to the even zero, which roundShift also gets right, but the shift
	// would exceed the mantissa width.
	if e < -10 {
		return sign
	}
	m := man | 0x800000 // the implicit leading one
	return sign | uint16(roundShift(m, uint32(14-e)))
}

// roundShift returns m >> shift rounded to nearest, ties to even. shift is in
// [1, 31].
func roundShift(m, shift uint32) uint32 {
	v := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && v&1 == 1) {
		v++
	}
	return v
}

// BF16ToF32 converts a bfloat16 (the upper 16 bits of a float32) to float32.
// It is exact.
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToBF16 converts a float32 to bfloat16 as ggml does: round to nearest,
// ties to even, on the upper 16 bits (so the largest finite floats round to
// Inf); subnormals are kept, not flushed. A NaN stays NaN with its quiet bit
// forced on, so truncating its payload cannot produce an infinity.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}
