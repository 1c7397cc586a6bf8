package quant

import (
	"math"
)

// MXFP4 (OCP microscaling FP4, gpt-oss's expert weights), 17 bytes per 32
// elements:
//
//	uint8 e (E8M0: a power of two, 2^(e-127)), uint8 qs[16]
//	x[j] = d*MXFP4Values[qs[j]&15], x[j+16] = d*MXFP4Values[qs[j]>>4],
//	d = 2^(e-128)
//
// The levels are the e2m1 values doubled (so they are integers), which the
// scale halves back. MXFP4 dots Q8_0 activations.

const mxfp4Bytes = 17

// MXFP4Values are the 16 levels of MXFP4, the e2m1 values times two
// (ggml's kvalues_mxfp4): sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
var MXFP4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// E8M0Half is half the E8M0 scale e, 2^(e-128), as a float32 (denormal
// below e = 2), as ggml's ggml_e8m0_to_fp32_half computes it: MXFP4's
// block scale for its doubled levels.
func E8M0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// quantizeMXFP4 is ggml's quantize_row_mxfp4_ref: e = floor(log2(amax))
// - 2 + 127 (0 for an all-zero block), so that amax lands in the top
// binade of the levels, and each value takes the first level of least
// absolute error.
func quantizeMXFP4(dst []byte, src []float32) {
	for i := range len(src) / qk32 {
		x := (*[qk32]float32)(src[i*qk32:])
		b := (*[mxfp4Bytes]byte)(dst[i*mxfp4Bytes:])
		var amax float32
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax = a
			}
		}
		var e uint8
		if amax > 0 {
			// log2f rounded to float32 as C computes it, then floored;
			// the conversion to uint8 wraps as C's does on x86 for the
			// in-range exponents of finite float32 input.
			l := float32(math.Log2(float64(amax)))
			e = uint8(int32(float32(math.Floor(float64(l))) - 2 + 127))
		}
		d := E8M0Half(e)
		b[0] = e
		for j := range qk32 / 2 {
			b[1+j] = mxfp4Index(x[j], d) | mxfp4Index(x[j+qk32/2], d)<<4
		}
	}
}

// mxfp4Index is ggml's best_index_mxfp4: the first level whose multiple
// of d is nearest x, errors compared in float32.
func mxfp4Index(x, d float32) uint8 {
	best := uint8(0)
	bestErr := abs32(float32(float32(MXFP4Values[0])*d) - x)
	for i := 1; i < 16; i++ {
		err := abs32(float32(float32(MXFP4Values[i])*d) - x)
		if err < bestErr {
			best, bestErr = uint8(i), err
		}
	}
	return best
}

func dequantizeMXFP4(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[mxfp4Bytes]byte)(src[i*mxfp4Bytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d := E8M0Half(b[0])
		for j := range qk32 / 2 {
			q := b[1+j]
			y[j] = float32(MXFP4Values[q&0x0f]) * d
			y[j+qk32/2] = float32(MXFP4Values[q>>4]) * d
		}
	}
}

// DotMXFP4 returns the dot product of n elements (a multiple of 32) of
// MXFP4 weights w with Q8_0 activations x, as
// ggml_vec_dot_mxfp4_q8_0_generic computes it: per block the exact
// integer sum times dx*dw (rounded to float32), summed in float32. See
// DotF32 for the kernel contract.
func DotMXFP4(n int, w, x []byte) float32 {
	nb := checkDot("DotMXFP4", n, qk32, mxfp4Bytes, q8_0Bytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[mxfp4Bytes]byte)(w[i*mxfp4Bytes:])
		xb := (*[q8_0Bytes]byte)(x[i*q8_0Bytes:])
		var s1, s2 int32
		for j := range qk32 / 2 {
			q := wb[1+j]
			s1 += int32(int8(xb[2+j])) * int32(MXFP4Values[q&0x0f])
			s2 += int32(int8(xb[18+j])) * int32(MXFP4Values[q>>4])
		}
		d := f16At(xb[:], 0) * E8M0Half(wb[0])
		sumf += float32(d * float32(s1+s2))
	}
	return sumf
}
