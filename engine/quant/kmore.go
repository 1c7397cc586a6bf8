package quant

import "encoding/binary"

// More of GGML's 256-element super-block formats, all dotted with Q8_K.
//
//	Q2_K (84 bytes): uint8 scales[16], uint8 qs[64], f16 d, f16 dmin
//	    sixteen 16-element sub-blocks, scale sc = scales[s]&15 and min
//	    m = scales[s]>>4; x = d*sc*q - dmin*m, q a 2-bit value: in each
//	    128-element half h and quarter p (bits 2p of qs[32h:32h+32]),
//	    element 128h+32p+l is qs[32h+l]>>2p & 3
//	Q3_K (110 bytes): uint8 hmask[32], uint8 qs[64], uint8 scales[12], f16 d
//	    sixteen 16-element sub-blocks with 6-bit scales sc (stored +32);
//	    x = d*(sc-32)*(q-4*(1-hbit)): q as for Q2_K, hbit is bit
//	    4h+p of hmask[l] for element 128h+32p+l (l < 32)
//	Q5_K (176 bytes): f16 d, f16 dmin, uint8 scales[12], uint8 qh[32],
//	    uint8 qs[128]: Q4_K's scales, mins and nibbles, plus a fifth bit:
//	    element 32s+l (sub-block s) has bit s of qh[l] as its bit 4
//	IQ4_XS (136 bytes): f16 d, uint16 scales_h, uint8 scales_l[4],
//	    uint8 qs[128]: eight 32-element sub-blocks with 6-bit scales
//	    ls = (scales_l[s/2]>>4(s%2) & 15) | (scales_h>>2s & 3)<<4;
//	    x = d*(ls-32)*IQ4NLValues[q], q the nibbles as in IQ4_NL (sub-block
//	    s holds 16 bytes: low nibbles elements 0-15, high nibbles 16-31)

const (
	q2_KBytes   = 84
	q3_KBytes   = 110
	q5_KBytes   = 176
	iq4_xsBytes = 136
)

// q2Decode unpacks the 256 2-bit values of 64 bytes (the layout Q2_K and
// Q3_K share) in element order.
func q2Decode(qs *[64]byte, a *[qkK]int8) {
	for h := range 2 {
		for p := range 4 {
			for l := range 32 {
				a[128*h+32*p+l] = int8(qs[32*h+l] >> (2 * p) & 3)
			}
		}
	}
}

func dequantizeQ2_K(dst []float32, src []byte) {
	var a [qkK]int8
	for i := range len(dst) / qkK {
		b := (*[q2_KBytes]byte)(src[i*q2_KBytes:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d, dmin := f16At(b[:], 80), f16At(b[:], 82)
		q2Decode((*[64]byte)(b[16:]), &a)
		for s := range 16 {
			sc := b[s]
			dl, ml := d*float32(sc&0x0f), dmin*float32(sc>>4)
			for k := 16 * s; k < 16*s+16; k++ {
				y[k] = float32(dl*float32(a[k])) - ml
			}
		}
	}
}

// q3KScales unpacks Q3_K's twelve scale bytes into the sixteen 6-bit
// scales minus 32: scale j < 8 has its low 4 bits in the low nibble of
// byte j, scale j >= 8 in the high nibble of byte j-8; the top 2 bits of
// scale j are bits 2(j/4) of byte 8 + j%4.
func q3KScales(p *[12]byte) (sc [16]int8) {
	for j := range 16 {
		lo := p[j%8] >> (4 * (j / 8)) & 0x0f
		hi := p[8+j%4] >> (2 * (j / 4)) & 3
		sc[j] = int8(lo|hi<<4) - 32
	}
	return sc
}

// q3Decode unpacks the 256 values of a Q3_K block, q - 4*(1-hbit), in
// element order.
func q3Decode(b *[q3_KBytes]byte, a *[qkK]int8) {
	q2Decode((*[64]byte)(b[32:]), a)
	for h := range 2 {
		for p := range 4 {
			bit := uint(4*h + p)
			for l := range 32 {
				if b[l]>>bit&1 == 0 {
					a[128*h+32*p+l] -= 4
				}
			}
		}
	}
}

func dequantizeQ3_K(dst []float32, src []byte) {
	var a [qkK]int8
	for i := range len(dst) / qkK {
		b := (*[q3_KBytes]byte)(src[i*q3_KBytes:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d := f16At(b[:], 108)
		sc := q3KScales((*[12]byte)(b[96:]))
		q3Decode(b, &a)
		for k := range y {
			y[k] = float32(d*float32(sc[k/16])) * float32(a[k])
		}
	}
}

// q5Decode unpacks the 256 5-bit values of a Q5_K block in element order.
func q5Decode(b *[q5_KBytes]byte, a *[qkK]int8) {
	for c := range 4 {
		qs := (*[32]byte)(b[48+32*c:])
		for l, v := range qs {
			h := b[16+l]
			a[64*c+l] = int8(v&0x0f | (h>>(2*c)&1)<<4)
			a[64*c+32+l] = int8(v>>4 | (h>>(2*c+1)&1)<<4)
		}
	}
}

func dequantizeQ5_K(dst []float32, src []byte) {
	var a [qkK]int8
	for i := range len(dst) / qkK {
		b := (*[q5_KBytes]byte)(src[i*q5_KBytes:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d, dmin := f16At(b[:], 0), f16At(b[:], 2)
		sc, m := q4KScales((*[12]byte)(b[4:]))
		q5Decode(b, &a)
		for s := range 8 {
			ds, ms := d*float32(sc[s]), dmin*float32(m[s])
			for k := 32 * s; k < 32*s+32; k++ {
				y[k] = float32(ds*float32(a[k])) - ms
			}
		}
	}
}

// iq4XSScale returns the 6-bit scale of sub-block s of an IQ4_XS block,
// minus 32.
func iq4XSScale(b *[iq4_xsBytes]byte, s int) int32 {
	h := binary.LittleEndian.Uint16(b[2:])
	ls := b[4+s/2]>>(4*(s%2))&0x0f | uint8(h>>(2*s)&3)<<4
	return int32(ls) - 32
}

func dequantizeIQ4_XS(dst []float32, src []byte) {
	for i := range len(dst) / qkK {
		b := (*[iq4_xsBytes]byte)(src[i*iq4_xsBytes:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d := f16At(b[:], 0)
		for s := range 8 {
			dl := d * float32(iq4XSScale(b, s))
			qs := (*[16]byte)(b[8+16*s:])
			for j, q := range qs {
				y[32*s+j] = dl * float32(IQ4NLValues[q&0x0f])
				y[32*s+16+j] = dl * float32(IQ4NLValues[q>>4])
			}
		}
	}
}

// DotQ2_K returns the dot product of n elements (a multiple of 256) of Q2_K
// weights w with Q8_K activations x, as ggml_vec_dot_q2_K_q8_K_generic
// computes it: per super-block (d*dx)*sum(sc*q*qx) - (dmin*dx)*sum(m*bsum),
// summed in float32. See DotF32 for the kernel contract.
func DotQ2_K(n int, w, x []byte) float32 {
	nb := checkDot("DotQ2_K", n, qkK, q2_KBytes, q8_KBytes, w, x)
	var sumf float32
	var a [qkK]int8
	for i := range nb {
		wb := (*[q2_KBytes]byte)(w[i*q2_KBytes:])
		xb := (*[q8_KBytes]byte)(x[i*q8_KBytes:])
		q2Decode((*[64]byte)(wb[16:]), &a)
		var summs, isum int32
		for s := range 16 {
			summs += int32(int16(binary.LittleEndian.Uint16(xb[260+2*s:]))) * int32(wb[s]>>4)
			var t int32
			for k := 16 * s; k < 16*s+16; k++ {
				t += int32(int8(xb[4+k])) * int32(a[k])
			}
			isum += int32(wb[s]&0x0f) * t
		}
		dx := f32At(xb[:], 0)
		dall := dx * f16At(wb[:], 80)
		dmin := dx * f16At(wb[:], 82)
		sumf += float32(dall*float32(isum)) - float32(dmin*float32(summs))
	}
	return sumf
}

// DotQ3_K returns the dot product of n elements (a multiple of 256) of Q3_K
// weights w with Q8_K activations x, as ggml_vec_dot_q3_K_q8_K_generic
// computes it: eight integer lanes (element k in lane k%8) of
// (sc-32)*q*qx per super-block, scaled by d*dx into eight float32 sums
// added in lane order at the end. See DotF32 for the kernel contract.
func DotQ3_K(n int, w, x []byte) float32 {
	nb := checkDot("DotQ3_K", n, qkK, q3_KBytes, q8_KBytes, w, x)
	var sums [8]float32
	var a [qkK]int8
	for i := range nb {
		wb := (*[q3_KBytes]byte)(w[i*q3_KBytes:])
		xb := (*[q8_KBytes]byte)(x[i*q8_KBytes:])
		q3Decode(wb, &a)
		sc := q3KScales((*[12]byte)(wb[96:]))
		var aux [8]int32
		for k := range qkK {
			aux[k%8] += int32(sc[k/16]) * int32(a[k]) * int32(int8(xb[4+k]))
		}
		d := f16At(wb[:], 108) * f32At(xb[:], 0)
		for l, v := range aux {
			sums[l] += float32(d * float32(v))
		}
	}
	var sumf float32
	for _, s := range sums {
		sumf += s
	}
	return sumf
}

// DotQ5_K returns the dot product of n elements (a multiple of 256) of Q5_K
// weights w with Q8_K activations x, as ggml_vec_dot_q5_K_q8_K_generic
// computes it: Q4_K's arithmetic (see DotQ4_K) on 5-bit values. See DotF32
// for the kernel contract.
func DotQ5_K(n int, w, x []byte) float32 {
	nb := checkDot("DotQ5_K", n, qkK, q5_KBytes, q8_KBytes, w, x)
	var sums [8]float32
	var sumf float32
	var a [qkK]int8
	for i := range nb {
		wb := (*[q5_KBytes]byte)(w[i*q5_KBytes:])
		xb := (*[q8_KBytes]byte)(x[i*q8_KBytes:])
		q5Decode(wb, &a)
		sc, m := q4KScales((*[12]byte)(wb[4:]))
		var sumi int32
		for j := range 16 {
			sumi += int32(int16(binary.LittleEndian.Uint16(xb[260+2*j:]))) * int32(m[j/2])
		}
		var aux [8]int32
		for k := range qkK {
			aux[k%8] += int32(sc[k/32]) * int32(a[k]) * int32(int8(xb[4+k]))
		}
		dx := f32At(xb[:], 0)
		d := f16At(wb[:], 0) * dx
		for l, v := range aux {
			sums[l] += float32(d * float32(v))
		}
		dmin := f16At(wb[:], 2) * dx
		sumf -= float32(dmin * float32(sumi))
	}
	for _, s := range sums {
		sumf += s
	}
	return sumf
}

// DotIQ4_XS returns the dot product of n elements (a multiple of 256) of
// IQ4_XS weights w with Q8_K activations x, as
// ggml_vec_dot_iq4_xs_q8_K_generic computes it: per sub-block,
// (d*dx*(ls-32)) times its integer sum, added in sub-block order. See
// DotF32 for the kernel contract.
func DotIQ4_XS(n int, w, x []byte) float32 {
	nb := checkDot("DotIQ4_XS", n, qkK, iq4_xsBytes, q8_KBytes, w, x)
	var sumf float32
	for i := range nb {
		wb := (*[iq4_xsBytes]byte)(w[i*iq4_xsBytes:])
		xb := (*[q8_KBytes]byte)(x[i*q8_KBytes:])
		d4d8 := f16At(wb[:], 0) * f32At(xb[:], 0)
		for s := range 8 {
			qs := (*[16]byte)(wb[8+16*s:])
			q8 := (*[32]byte)(xb[4+32*s:])
			var s1, s2 int32
			for j, q := range qs {
				s1 += int32(int8(q8[j])) * int32(IQ4NLValues[q&0x0f])
				s2 += int32(int8(q8[16+j])) * int32(IQ4NLValues[q>>4])
			}
			dl := d4d8 * float32(iq4XSScale(wb, s))
			sumf += float32(dl * float32(s1+s2))
		}
	}
	return sumf
}
