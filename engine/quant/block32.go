package quant

// GGML's 32-element block formats.
//
//	Q8_0 (34 bytes): f16 d, int8 qs[32];            x[j] = d*qs[j]
//	Q4_0 (18 bytes): f16 d, uint8 qs[16];           x[j] = d*((qs[j]&15)-8),
//	                                                x[j+16] = d*((qs[j]>>4)-8)
//
// Float expressions below are written with explicit float32 conversions
// where ggml's C rounds an intermediate, because Go may otherwise fuse a
// multiply and an add into one FMA and round once.

const (
	qk32      = 32
	q8_0Bytes = 34
	q4_0Bytes = 18
)

// quantizeQ8_0 is ggml's quantize_row_q8_0_ref: d = amax/127 stored as f16,
// q = roundf(x/d) (half away from zero) computed with the unrounded 1/d.
// (On x86 llama.cpp uses an AVX2 variant for activations that computes
// 127/amax and rounds half to even; the two differ only on exact ties.)
func quantizeQ8_0(dst []byte, src []float32) {
	for i := range len(src) / qk32 {
		b := (*[q8_0Bytes]byte)(dst[i*q8_0Bytes:])
		d, _ := quantize8(b[2:], (*[qk32]float32)(src[i*qk32:]))
		putF16(b[:], 0, d)
	}
}

// quantize8 writes the 32 quants of one Q8_0 or Q8_1 block to q and
// returns d and the sum of the quants. A NaN is never the largest
// magnitude (Go's max would propagate it; ggml's MAX macro keeps or drops
// it depending on where it stands).
func quantize8(q []byte, x *[qk32]float32) (d float32, sum int32) {
	var amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax = a
		}
	}
	d = amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	q = q[:qk32]
	for j, v := range x {
		qj := int8(roundAway(float32(v * id)))
		q[j] = byte(qj)
		sum += int32(qj)
	}
	return d, sum
}

func dequantizeQ8_0(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[q8_0Bytes]byte)(src[i*q8_0Bytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d := f16At(b[:], 0)
		for j := range y {
			y[j] = float32(int8(b[2+j])) * d
		}
	}
}

// quantizeQ4_0 is ggml's quantize_row_q4_0_ref: d = m/-8 where m is the
// first value of largest magnitude (sign kept), so m maps to q = 0 exactly;
// q = min(15, trunc(x/d + 8.5)), i.e. round half up, with the value of
// opposite sign at +8 steps clipped to 15.
func quantizeQ4_0(dst []byte, src []float32) {
	for i := range len(src) / qk32 {
		x := (*[qk32]float32)(src[i*qk32:])
		b := (*[q4_0Bytes]byte)(dst[i*q4_0Bytes:])
		var amax, m float32
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax, m = a, v
			}
		}
		d := m / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b[:], 0, d)
		for j := range qk32 / 2 {
			x0 := float32(x[j] * id)
			x1 := float32(x[j+qk32/2] * id)
			q0 := min(15, int8(x0+8.5))
			q1 := min(15, int8(x1+8.5))
			b[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func dequantizeQ4_0(dst []float32, src []byte) {
	for i := range len(dst) / qk32 {
		b := (*[q4_0Bytes]byte)(src[i*q4_0Bytes:])
		y := (*[qk32]float32)(dst[i*qk32:])
		d := f16At(b[:], 0)
		for j := range qk32 / 2 {
			q := b[2+j]
			y[j] = float32(int32(q&0x0f)-8) * d
			y[j+qk32/2] = float32(int32(q>>4)-8) * d
		}
	}
}

// DotQ8_0 returns the dot product of n elements (a multiple of 32) of Q8_0
// weights w with Q8_0 activations x, as ggml_vec_dot_q8_0_q8_0_generic
// computes it: an exact integer sum per block, scaled by (dw*dx) and summed
// in float32. See DotF32 for the kernel contract.
func DotQ8_0(n int, w, x []byte) float32 {
	nb := checkDot("DotQ8_0", n, qk32, q8_0Bytes, q8_0Bytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[q8_0Bytes]byte)(w[i*q8_0Bytes:])
		xb := (*[q8_0Bytes]byte)(x[i*q8_0Bytes:])
		wq := (*[qk32]byte)(wb[2:])
		xq := (*[qk32]byte)(xb[2:])
		var s0, s1, s2, s3 int32
		for j := 0; j < qk32; j += 4 {
			s0 += int32(int8(wq[j])) * int32(int8(xq[j]))
			s1 += int32(int8(wq[j+1])) * int32(int8(xq[j+1]))
			s2 += int32(int8(wq[j+2])) * int32(int8(xq[j+2]))
			s3 += int32(int8(wq[j+3])) * int32(int8(xq[j+3]))
		}
		sumi := s0 + s1 + s2 + s3
		sumf += float32(float32(sumi) * (f16At(wb[:], 0) * f16At(xb[:], 0)))
	}
	return sumf
}

// DotQ4_0 returns the dot product of n elements (a multiple of 32) of Q4_0
// weights w with Q8_0 activations x, as ggml_vec_dot_q4_0_q8_0_generic
// computes it: an exact integer sum per block, then (sum*dw)*dx summed in
// float32. See DotF32 for the kernel contract.
func DotQ4_0(n int, w, x []byte) float32 {
	nb := checkDot("DotQ4_0", n, qk32, q4_0Bytes, q8_0Bytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[q4_0Bytes]byte)(w[i*q4_0Bytes:])
		xb := (*[q8_0Bytes]byte)(x[i*q8_0Bytes:])
		wq := (*[qk32 / 2]byte)(wb[2:])
		lo := (*[qk32 / 2]byte)(xb[2:])
		hi := (*[qk32 / 2]byte)(xb[2+qk32/2:])
		var s0, s1 int32
		for j, q := range wq {
			s0 += (int32(q&0x0f) - 8) * int32(int8(lo[j]))
			s1 += (int32(q>>4) - 8) * int32(int8(hi[j]))
		}
		sumi := s0 + s1
		sumf += float32(float32(sumi) * f16At(wb[:], 0) * f16At(xb[:], 0))
	}
	return sumf
}
