package quant

import (
	"encoding/binary"
	"math"
)

// GGML's 256-element "K" super-block formats.
//
//	Q8_K (292 bytes): f32 d, int8 qs[256], int16 bsums[16]
//	    x[k] = d*qs[k]; bsums[j] = sum of qs[16j:16j+16]
//	Q4_K (144 bytes): f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]
//	    eight 32-element sub-blocks with 6-bit scale sc[s] and min m[s];
//	    x = d*sc[s]*q - dmin*m[s], q a 4-bit value: in each 64-element
//	    chunk c, sub-block 2c is the low nibbles of qs[32c:32c+32] and
//	    sub-block 2c+1 their high nibbles
//	Q6_K (210 bytes): uint8 ql[128], uint8 qh[64], int8 scales[16], f16 d
//	    sixteen 16-element sub-blocks; x = d*scales[k/16]*(q-32), q a
//	    6-bit value: low 4 bits from ql, high 2 bits from qh (see q6Decode)

const (
	qkK       = 256
	q8_KBytes = 292
	q4_KBytes = 144
	q6_KBytes = 210
)

// quantizeQ8_K is ggml's quantize_row_q8_K_ref: with m the first value of
// largest magnitude (sign kept), iscale = -127/m, q = min(127,
// nearest_int(iscale*x)) rounding half to even, d = 1/iscale (so d < 0 when
// m > 0), bsums the sums of each 16 q. An all-zero block is stored as zeros.
func quantizeQ8_K(dst []byte, src []float32) {
	for i := range len(src) / qkK {
		x := (*[qkK]float32)(src[i*qkK:])
		b := (*[q8_KBytes]byte)(dst[i*q8_KBytes:])
		var amax, m float32
		for _, v := range x {
			if a := abs32(v); a > amax {
				amax, m = a, v
			}
		}
		if amax == 0 {
			// ggml leaves bsums unwritten here; zero is their only consistent value.
			clear(b[:])
			continue
		}
		iscale := -127 / m
		for j, v := range x {
			b[4+j] = byte(int8(min(127, nearestInt(float32(iscale*v)))))
		}
		for j := range qkK / 16 {
			var s int32
			for _, q := range b[4+16*j : 4+16*j+16] {
				s += int32(int8(q))
			}
			binary.LittleEndian.PutUint16(b[260+2*j:], uint16(int16(s)))
		}
		putF32(b[:], 0, 1/iscale)
	}
}

func dequantizeQ8_K(dst []float32, src []byte) {
	for i := range len(dst) / qkK {
		b := (*[q8_KBytes]byte)(src[i*q8_KBytes:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d := f32At(b[:], 0)
		for j := range y {
			y[j] = d * float32(int8(b[4+j]))
		}
	}
}

// q4KScales unpacks Q4_K's twelve scale bytes into the eight 6-bit scales
// and eight 6-bit mins: sub-blocks 0-3 keep theirs in the low 6 bits of bytes
// 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low 4 bits in the
// nibbles of bytes 8-11 and their top 2 bits in the top bits of bytes 0-3
// (scales) and 4-7 (mins).
func q4KScales(p *[12]byte) (sc, m [8]uint8) {
	for j := range 4 {
		sc[j] = p[j] & 63
		m[j] = p[j+4] & 63
		sc[j+4] = p[j+8]&0x0f | (p[j]>>6)<<4
		m[j+4] = p[j+8]>>4 | (p[j+4]>>6)<<4
	}
	return sc, m
}

// Q4KScaleMins returns the eight 6-bit scales and eight 6-bit mins of a
// Q4_K (or Q5_K) block from its twelve scale bytes, which p begins with.
func Q4KScaleMins(p []byte) (sc, m [8]uint8) { return q4KScales((*[12]byte)(p)) }

// putQ4KScales is the inverse of q4KScales; every value must be below 64.
func putQ4KScales(p *[12]byte, sc, m *[8]uint8) {
	for j := range 4 {
		p[j] = sc[j] | (sc[j+4]>>4)<<6
		p[j+4] = m[j] | (m[j+4]>>4)<<6
		p[j+8] = sc[j+4]&0x0f | (m[j+4]&0x0f)<<4
	}
}

// quantizeQ4_K stores each super-block without ggml's iterative search
// (make_qkx2_quants). Instead, per 32-element sub-block with minimum lo and
// maximum hi, it takes the offset m = -min(lo, 0) and the step
// (hi+m)/15, then quantises the eight offsets with dmin = max(m)/63 and the
// eight steps with d = max(step)/63, rounding d and dmin up to f16 and each
// 6-bit multiplier up, so the stored range covers the data and no value is
// clipped (for |x| below about 6e7, where d and dmin fit in f16; beyond,
// values saturate). Each element is then rounded to the nearest of the 16
// levels of its sub-block, so its error is at most half the stored step
// d*sc (plus float rounding). Rounding the multipliers up costs some
// precision in sub-blocks of small range compared with ggml's search.
func quantizeQ4_K(dst []byte, src []float32) {
	for i := range len(src) / qkK {
		x := (*[qkK]float32)(src[i*qkK:])
		b := (*[q4_KBytes]byte)(dst[i*q4_KBytes:])

		var hi, off [8]float32
		var maxOff float32
		for s := range 8 {
			lo, h := x[32*s], x[32*s]
			for _, v := range x[32*s : 32*s+32] {
				lo, h = min(lo, v), max(h, v)
			}
			off[s], hi[s] = max(0, -lo), h
			maxOff = max(maxOff, off[s])
		}
		dminBits, dmin := f16Up(maxOff / 63)
		var ms [8]uint8
		var need [8]float32
		var maxNeed float32
		for s := range 8 {
			ms[s] = ceil6(off[s], dmin)
			// The dequantiser subtracts dmin*m; the step must cover the
			// data shifted by exactly that amount.
			need[s] = (hi[s] + dmin*float32(ms[s])) / 15
			maxNeed = max(maxNeed, need[s])
		}
		dBits, d := f16Up(maxNeed / 63)
		var sc [8]uint8
		for s := range 8 {
			sc[s] = ceil6(need[s], d)
		}

		binary.LittleEndian.PutUint16(b[0:], dBits)
		binary.LittleEndian.PutUint16(b[2:], dminBits)
		putQ4KScales((*[12]byte)(b[4:]), &sc, &ms)
		for c := range 4 {
			q := (*[32]byte)(b[16+32*c:])
			d1, m1 := d*float32(sc[2*c]), dmin*float32(ms[2*c])
			d2, m2 := d*float32(sc[2*c+1]), dmin*float32(ms[2*c+1])
			for l := range 32 {
				q[l] = nearestLevel(x[64*c+l]+m1, d1, 15) | nearestLevel(x[64*c+32+l]+m2, d2, 15)<<4
			}
		}
	}
}

// ceil6 returns ceil(v/unit) clipped to [0, 63], and 0 when unit is 0.
func ceil6(v, unit float32) uint8 {
	if unit == 0 {
		return 0
	}
	f := math.Ceil(float64(v / unit))
	return uint8(max(0, min(63, f)))
}

// nearestLevel returns round(v/step) clipped to [0, top], and 0 when step is 0.
func nearestLevel(v, step float32, top float64) uint8 {
	if step == 0 {
		return 0
	}
	f := math.Round(float64(v / step))
	return uint8(max(0, min(top, f)))
}

func dequantizeQ4_K(dst []float32, src []byte) {
	for i := range len(dst) / qkK {
		b := (*[q4_KBytes]byte)(src[i*q4_KBytes:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d, dmin := f16At(b[:], 0), f16At(b[:], 2)
		sc, m := q4KScales((*[12]byte)(b[4:]))
		for c := range 4 {
			q := (*[32]byte)(b[16+32*c:])
			d1, m1 := d*float32(sc[2*c]), dmin*float32(m[2*c])
			d2, m2 := d*float32(sc[2*c+1]), dmin*float32(m[2*c+1])
			for l, v := range q {
				y[64*c+l] = float32(d1*float32(v&0x0f)) - m1
				y[64*c+32+l] = float32(d2*float32(v>>4)) - m2
			}
		}
	}
}

// q6Decode unpacks the 256 6-bit values of a Q6_K block, minus 32, in
// element order. In each 128-element half h (ql[64h:], qh[32h:]), for
// l < 32: element l takes the low nibble of ql[l] and bits 0-1 of qh[l];
// l+32 the low nibble of ql[l+32] and bits 2-3; l+64 the high nibble of
// ql[l] and bits 4-5; l+96 the high nibble of ql[l+32] and bits 6-7.
func q6Decode(b *[q6_KBytes]byte, a *[qkK]int8) {
	for h := range 2 {
		ql := (*[64]byte)(b[64*h:])
		qh := (*[32]byte)(b[128+32*h:])
		o := (*[128]int8)(a[128*h:])
		for l := range 32 {
			hb := qh[l]
			o[l] = int8(ql[l]&0x0f|(hb&3)<<4) - 32
			o[l+32] = int8(ql[l+32]&0x0f|(hb>>2&3)<<4) - 32
			o[l+64] = int8(ql[l]>>4|(hb>>4&3)<<4) - 32
			o[l+96] = int8(ql[l+32]>>4|(hb>>6&3)<<4) - 32
		}
	}
}

// q6Encode is the inverse of q6Decode for values in [-32, 31].
func q6Encode(a *[qkK]int8, b *[q6_KBytes]byte) {
	for h := range 2 {
		ql := (*[64]byte)(b[64*h:])
		qh := (*[32]byte)(b[128+32*h:])
		v := (*[128]int8)(a[128*h:])
		for l := range 32 {
			q0, q1 := uint8(v[l]+32), uint8(v[l+32]+32)
			q2, q3 := uint8(v[l+64]+32), uint8(v[l+96]+32)
			ql[l] = q0&0x0f | (q2&0x0f)<<4
			ql[l+32] = q1&0x0f | (q3&0x0f)<<4
			qh[l] = q0>>4 | (q1>>4)<<2 | (q2>>4)<<4 | (q3>>4)<<6
		}
	}
}

// quantizeQ6_K stores each super-block without ggml's weighted search
// (make_qx_quants). Instead each 16-element sub-block with largest magnitude
// a gets the symmetric step a/31, so its values fit in [-31, 31] (the level
// -32 goes unused); the sixteen steps are quantised with d = max(step)/127,
// d rounded up to f16 and each int8 multiplier rounded up (all are
// non-negative), so nothing is clipped (for |x| below about 2.5e8, where d
// fits in f16; beyond, values saturate). Each element is rounded to the
// nearest level, so its error is at most half the stored step d*scale (plus
// float rounding).
func quantizeQ6_K(dst []byte, src []float32) {
	for i := range len(src) / qkK {
		x := (*[qkK]float32)(src[i*qkK:])
		b := (*[q6_KBytes]byte)(dst[i*q6_KBytes:])

		var step [16]float32
		var maxStep float32
		for s := range 16 {
			var amax float32
			for _, v := range x[16*s : 16*s+16] {
				amax = max(amax, abs32(v))
			}
			step[s] = amax / 31
			maxStep = max(maxStep, step[s])
		}
		dBits, d := f16Up(maxStep / 127)
		var a [qkK]int8
		for s := range 16 {
			var sc uint8
			if d != 0 {
				sc = uint8(max(0, min(127, math.Ceil(float64(step[s]/d)))))
			}
			b[192+s] = sc
			ds := d * float32(sc)
			for k := 16 * s; k < 16*s+16; k++ {
				var q int8
				if ds != 0 {
					q = int8(max(-32, min(31, math.Round(float64(x[k]/ds)))))
				}
				a[k] = q
			}
		}
		q6Encode(&a, b)
		binary.LittleEndian.PutUint16(b[208:], dBits)
	}
}

func dequantizeQ6_K(dst []float32, src []byte) {
	var a [qkK]int8
	for i := range len(dst) / qkK {
		b := (*[q6_KBytes]byte)(src[i*q6_KBytes:])
		y := (*[qkK]float32)(dst[i*qkK:])
		d := f16At(b[:], 208)
		q6Decode(b, &a)
		for k, q := range a {
			y[k] = float32(d*float32(int8(b[192+k/16]))) * float32(q)
		}
	}
}
