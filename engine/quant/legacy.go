package quant

import "encoding/binary"

// GGML's other 32-element block formats ("legacy" quants and IQ4_NL).
//
//	Q4_1 (20 bytes): f16 d, f16 m, uint8 qs[16]
//	    x[j] = d*(qs[j]&15) + m, x[j+16] = d*(qs[j]>>4) + m
//	Q5_0 (22 bytes): f16 d, uint8 qh[4], uint8 qs[16]
//	    q[j] = qs[j]&15 | bit j of qh <<4, q[j+16] = qs[j]>>4 | bit j+16 of qh <<4;
//	    x = d*(q-16)
//	Q5_1 (24 bytes): f16 d, f16 m, uint8 qh[4], uint8 qs[16]
//	    q as for Q5_0; x = d*q + m
//	Q8_1 (36 bytes): f16 d, f16 s, int8 qs[32]; x = d*qs, s = d*sum(qs)
//	IQ4_NL (18 bytes): f16 d, uint8 qs[16]
//	    x[j] = d*IQ4NLValues[qs[j]&15], x[j+16] = d*IQ4NLValues[qs[j]>>4]
//
// Q4_1 and Q5_1 dot Q8_1 activations (the s term carries the offset m);
// Q5_0 and IQ4_NL dot Q8_0.

const (
	q4_1Bytes   = 20
	q5_0Bytes   = 22
	q5_1Bytes   = 24
	q8_1Bytes   = 36
	iq4_nlBytes = 18
)

// IQ4NLValues are the 16 levels of the IQ4_NL and IQ4_XS formats
// (ggml's kvalues_iq4nl): a non-uniform grid, denser near zero.
var IQ4NLValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// q5Bits returns the 32 5-bit values of a Q5_0 or Q5_1 block from its 4
// bytes of high bits and 16 bytes of nibbles.
func q5Bits(qh []byte, qs *[16]byte) (q [32]uint8) {
	h := binary.LittleEndian.Uint32(qh)
	for j, b := range qs {
		q[j] = b&0x0f | uint8(h>>j&1)<<4
		q[j+16] = b>>4 | uint8(h>>(j+16)&1)<<4
	}
	return q
}

// minMax returns the smallest and the largest of x, as ggml's reference
// quantisers scan them (starting from +-FLT_MAX).
func minMax(x []float32) (lo, hi float32) {
	lo, hi = maxFloat32, -maxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

const maxFloat32 = 3.40282346638528859811704183484516925440e+38

// quantizeQ4_1 is ggml's quantize_row_q4_1_ref: d = (max-min)/15, m = min,
// q = min(15, trunc((x-min)/d + 0.5)).
func quantizeQ4_1(dst []byte, src []float32) {
	for i := range len(src) / qk32 {
		x := (*[qk32]float32)(src[i*qk32:])
		b := (*[q4_1Bytes]byte)(dst[i*q4_1Bytes:])
		lo, hi := minMax(x[:])
		d := float32(hi-lo) / 15
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b[:], 0, d)
		putF16(b[:], 2, lo)
		for j := range qk32 / 2 {
			q0 := min(15, truncQ(float32(float32(x[j]-lo)*id)+0.5))
			q1 := min(15, truncQ(float32(float32(x[j+16]-lo)*id)+0.5))
			b[4+j] = q0 | q1<<4
		}
	}
}

// truncQ is C's conversion of a non-negative float to a small unsigned
// quant: truncation toward zero, clamped to [0, 255] (ggml's inputs stay in
// range for finite data; the clamp keeps non-finite input from panicking).
func truncQ(f float32) uint8 {
	if !(f > 0) {
		return 0
	}
	return uint8(min(255, f))
}

func dequantizeQ4_1(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[q4_1Bytes]byte)(src[i*q4_1Bytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d, m := f16At(b[:], 0), f16At(b[:], 2)
		for j := range qk32 / 2 {
			q := b[4+j]
			y[j] = float32(float32(q&0x0f)*d) + m
			y[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

// quantizeQ5_0 is ggml's quantize_row_q5_0_ref: d = m/-16 for the first
// value m of largest magnitude, q = min(31, trunc(x/d + 16.5)).
func quantizeQ5_0(dst []byte, src []float32) {
	for i := range len(src) / qk32 {
		x := (*[qk32]float32)(src[i*qk32:])
		b := (*[q5_0Bytes]byte)(dst[i*q5_0Bytes:])
		var amax, m float32
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax, m = a, v
			}
		}
		d := m / -16
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b[:], 0, d)
		var qh uint32
		for j := range qk32 / 2 {
			q0 := min(31, truncQ(float32(x[j]*id)+16.5))
			q1 := min(31, truncQ(float32(x[j+16]*id)+16.5))
			b[6+j] = q0&0x0f | (q1&0x0f)<<4
			qh |= uint32(q0>>4) << j
			qh |= uint32(q1>>4) << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[2:], qh)
	}
}

func dequantizeQ5_0(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[q5_0Bytes]byte)(src[i*q5_0Bytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d := f16At(b[:], 0)
		q := q5Bits(b[2:6], (*[16]byte)(b[6:]))
		for j, v := range q {
			y[j] = float32(int32(v)-16) * d
		}
	}
}

// quantizeQ5_1 is ggml's quantize_row_q5_1_ref: d = (max-min)/31, m = min,
// q = trunc((x-min)/d + 0.5).
func quantizeQ5_1(dst []byte, src []float32) {
	for i := range len(src) / qk32 {
		x := (*[qk32]float32)(src[i*qk32:])
		b := (*[q5_1Bytes]byte)(dst[i*q5_1Bytes:])
		lo, hi := minMax(x[:])
		d := float32(hi-lo) / 31
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b[:], 0, d)
		putF16(b[:], 2, lo)
		var qh uint32
		for j := range qk32 / 2 {
			q0 := min(31, truncQ(float32(float32(x[j]-lo)*id)+0.5))
			q1 := min(31, truncQ(float32(float32(x[j+16]-lo)*id)+0.5))
			b[8+j] = q0&0x0f | (q1&0x0f)<<4
			qh |= uint32(q0>>4) << j
			qh |= uint32(q1>>4) << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[4:], qh)
	}
}

func dequantizeQ5_1(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[q5_1Bytes]byte)(src[i*q5_1Bytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d, m := f16At(b[:], 0), f16At(b[:], 2)
		q := q5Bits(b[4:8], (*[16]byte)(b[8:]))
		for j, v := range q {
			y[j] = float32(float32(v)*d) + m
		}
	}
}

// quantizeQ8_1 is ggml's quantize_row_q8_1_ref: Q8_0's d and quants
// (roundf of x/d, half away from zero), and s = d*sum(q) stored as f16.
func quantizeQ8_1(dst []byte, src []float32) {
	for i := range len(src) / qk32 {
		b := (*[q8_1Bytes]byte)(dst[i*q8_1Bytes:])
		d, sum := quantize8(b[4:], (*[qk32]float32)(src[i*qk32:]))
		putF16(b[:], 0, d)
		putF16(b[:], 2, float32(sum)*d)
	}
}

func dequantizeQ8_1(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[q8_1Bytes]byte)(src[i*q8_1Bytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d := f16At(b[:], 0)
		for j := range y {
			y[j] = float32(int8(b[4+j])) * d
		}
	}
}

func dequantizeIQ4_NL(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[iq4_nlBytes]byte)(src[i*iq4_nlBytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d := f16At(b[:], 0)
		for j := range qk32 / 2 {
			q := b[2+j]
			y[j] = d * float32(IQ4NLValues[q&0x0f])
			y[j+16] = d * float32(IQ4NLValues[q>>4])
		}
	}
}

// DotQ4_1 returns the dot product of n elements (a multiple of 32) of Q4_1
// weights w with Q8_1 activations x, as ggml_vec_dot_q4_1_q8_1_generic
// computes it: per block (dw*dx)*sum(q*qx) + m*s, summed in float32. See
// DotF32 for the kernel contract.
func DotQ4_1(n int, w, x []byte) float32 {
	nb := checkDot("DotQ4_1", n, qk32, q4_1Bytes, q8_1Bytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[q4_1Bytes]byte)(w[i*q4_1Bytes:])
		xb := (*[q8_1Bytes]byte)(x[i*q8_1Bytes:])
		var sumi int32
		for j := range qk32 / 2 {
			q := wb[4+j]
			sumi += int32(q&0x0f)*int32(int8(xb[4+j])) + int32(q>>4)*int32(int8(xb[20+j]))
		}
		sumf += offsetBlock(sumi, wb[:], xb[:])
	}
	return sumf
}

// offsetBlock is ggml's per-block term of the Q4_1 and Q5_1 dots:
// (dw*dx)*sumi + m*s, each product rounded to float32.
func offsetBlock(sumi int32, wb, xb []byte) float32 {
	scaled := float32(float32(f16At(wb, 0)*f16At(xb, 0)) * float32(sumi))
	offset := float32(f16At(wb, 2) * f16At(xb, 2))
	return scaled + offset
}

// DotQ5_0 returns the dot product of n elements (a multiple of 32) of Q5_0
// weights w with Q8_0 activations x, as ggml_vec_dot_q5_0_q8_0_generic
// computes it. See DotF32 for the kernel contract.
func DotQ5_0(n int, w, x []byte) float32 {
	nb := checkDot("DotQ5_0", n, qk32, q5_0Bytes, q8_0Bytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[q5_0Bytes]byte)(w[i*q5_0Bytes:])
		xb := (*[q8_0Bytes]byte)(x[i*q8_0Bytes:])
		q := q5Bits(wb[2:6], (*[16]byte)(wb[6:]))
		var sumi int32
		for j, v := range q {
			sumi += (int32(v) - 16) * int32(int8(xb[2+j]))
		}
		sumf += float32(float32(f16At(wb[:], 0)*f16At(xb[:], 0)) * float32(sumi))
	}
	return sumf
}

// DotQ5_1 returns the dot product of n elements (a multiple of 32) of Q5_1
// weights w with Q8_1 activations x, as ggml_vec_dot_q5_1_q8_1_generic
// computes it. See DotF32 for the kernel contract.
func DotQ5_1(n int, w, x []byte) float32 {
	nb := checkDot("DotQ5_1", n, qk32, q5_1Bytes, q8_1Bytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[q5_1Bytes]byte)(w[i*q5_1Bytes:])
		xb := (*[q8_1Bytes]byte)(x[i*q8_1Bytes:])
		q := q5Bits(wb[4:8], (*[16]byte)(wb[8:]))
		var sumi int32
		for j, v := range q {
			sumi += int32(v) * int32(int8(xb[4+j]))
		}
		sumf += offsetBlock(sumi, wb[:], xb[:])
	}
	return sumf
}

// DotIQ4_NL returns the dot product of n elements (a multiple of 32) of
// IQ4_NL weights w with Q8_0 activations x, as
// ggml_vec_dot_iq4_nl_q8_0_generic computes it. See DotF32 for the kernel
// contract.
func DotIQ4_NL(n int, w, x []byte) float32 {
	nb := checkDot("DotIQ4_NL", n, qk32, iq4_nlBytes, q8_0Bytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[iq4_nlBytes]byte)(w[i*iq4_nlBytes:])
		xb := (*[q8_0Bytes]byte)(x[i*q8_0Bytes:])
		var s1, s2 int32
		for j := range qk32 / 2 {
			q := wb[2+j]
			s1 += int32(int8(xb[2+j])) * int32(IQ4NLValues[q&0x0f])
			s2 += int32(int8(xb[18+j])) * int32(IQ4NLValues[q>>4])
		}
		d := f16At(xb[:], 0) * f16At(wb[:], 0)
		sumf += float32(d * float32(s1+s2))
	}
	return sumf
}
