package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"rill/engine/quant"
)

// unit is float32's unit roundoff, 2^-24: one rounding of a value v errs by
// at most unit*|v|.
const unit = 1.0 / (1 << 24)

func newRand(t testing.TB, seed uint64) *rand.Rand {
	t.Helper()
	return rand.New(rand.NewPCG(seed, 0x5eed))
}

// randFloats returns n values, normally distributed with standard deviation
// sd, with a sprinkling of exact zeros.
func randFloats(r *rand.Rand, n int, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		if r.IntN(50) == 0 {
			continue
		}
		v[i] = float32(r.NormFloat64() * sd)
	}
	return v
}

// quantize converts values to type t with engine/quant's reference.
func quantize(t testing.TB, typ quant.Type, src []float32) []byte {
	t.Helper()
	rb, err := typ.RowBytes(len(src))
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, rb)
	if err := quant.Quantize(typ, dst, src); err != nil {
		t.Fatal(err)
	}
	return dst
}

// dequantize converts n values of type typ back to float32.
func dequantize(t testing.TB, typ quant.Type, src []byte, n int) []float32 {
	t.Helper()
	dst := make([]float32, n)
	if err := quant.Dequantize(typ, dst, src); err != nil {
		t.Fatal(err)
	}
	return dst
}

// putF16 stores v as an fp16 at b[off:].
func putF16(b []byte, off int, v float32) {
	binary.LittleEndian.PutUint16(b[off:], quant.F32ToF16(v))
}

// randWeights returns a row of n weights of type typ. With raw set, the
// quantised blocks are random bytes (every bit pattern of the quants and
// sub-block scales occurs, including -128 and 6-bit extremes) with positive
// random fp16 block scales; otherwise random floats quantised by
// engine/quant.
func randWeights(t testing.TB, r *rand.Rand, typ quant.Type, n int, raw bool) []byte {
	t.Helper()
	switch typ {
	case quant.F32, quant.F16, quant.BF16:
		return quantize(t, typ, randFloats(r, n, 1))
	case quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q6_K, quant.MXFP4:
		if !raw {
			return quantize(t, typ, randFloats(r, n, 1))
		}
	}
	rb, err := typ.RowBytes(n)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, rb)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	bs := typ.BlockBytes()
	for off := 0; off < len(b); off += bs {
		d := float32(0.001 + 0.05*r.Float64())
		switch typ {
		case quant.Q8_0, quant.Q4_0, quant.Q5_0, quant.IQ4_NL, quant.IQ4_XS:
			putF16(b, off, d)
		case quant.Q4_1, quant.Q5_1, quant.Q4_K, quant.Q5_K:
			putF16(b, off, d)
			putF16(b, off+2, float32(0.001+0.05*r.Float64()))
		case quant.Q2_K:
			putF16(b, off+80, d)
			putF16(b, off+82, float32(0.001+0.05*r.Float64()))
		case quant.Q3_K:
			putF16(b, off+108, d)
		case quant.Q6_K:
			putF16(b, off+208, d)
		case quant.MXFP4:
			b[off] = byte(118 + r.IntN(6)) // 2^-10 .. 2^-5
		}
	}
	return b
}

// magnitudeRow returns, per element, a bound on the magnitude of what a dot
// kernel adds up for that weight: |w| for most types; for the types with a
// block offset (Q4_1 and Q5_1: d*q + m; Q2_K, Q4_K, Q5_K: d*sc*q - dmin*m)
// the sum of the magnitudes of the two parts, got by dequantising the block
// with the signs of the scale and the offset set so that both parts are
// non-negative, so that tolerances account for cancellation between them.
func magnitudeRow(t testing.TB, typ quant.Type, w []byte, n int) []float32 {
	t.Helper()
	// Byte offsets of the high bytes of the fp16 scale and offset fields, and
	// whether the offset is subtracted.
	var dHi, mHi int
	var sub bool
	switch typ {
	case quant.Q4_1, quant.Q5_1:
		dHi, mHi = 1, 3
	case quant.Q4_K, quant.Q5_K:
		dHi, mHi, sub = 1, 3, true
	case quant.Q2_K:
		dHi, mHi, sub = 81, 83, true
	}
	flipped := append([]byte(nil), w...)
	if mHi != 0 {
		for off := 0; off < len(flipped); off += typ.BlockBytes() {
			flipped[off+dHi] &^= 0x80
			if sub {
				flipped[off+mHi] |= 0x80
			} else {
				flipped[off+mHi] &^= 0x80
			}
		}
	}
	v := dequantize(t, typ, flipped, n)
	for i := range v {
		v[i] = float32(math.Abs(float64(v[i])))
	}
	return v
}

// exactDot returns sum(w[i]*x[i]) in float64 and sum(|mag[i]*x[i]|).
func exactDot(w, x, mag []float32) (dot, abs float64) {
	for i := range w {
		dot += float64(w[i]) * float64(x[i])
		abs += math.Abs(float64(mag[i]) * float64(x[i]))
	}
	return dot, abs
}

// activationRow converts src for weights of type wt as kernel k does: the
// bytes in k's layout, and the values the dot product sees (src rounded to
// quant.VecDotType(wt) and back).
func activationRow(t testing.TB, k rowKernel, wt quant.Type, src []float32) ([]byte, []float32) {
	t.Helper()
	sem, _ := quant.VecDotType(wt)
	vals := dequantize(t, sem, quantize(t, sem, src), len(src))
	if k.convert == nil {
		return f32Bytes(append([]float32(nil), src...)), vals
	}
	if _, err := k.xType.RowBytes(len(src)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, k.xRowBytes(len(src)))
	k.convert(b, src)
	return b, vals
}

// activationKinds are the activation rows the bit-identity tests use:
// ordinary values, values so small that Q8_0 block scales are fp16
// subnormals, rows with zero blocks, and a wide dynamic range.
var activationKinds = []struct {
	name string
	gen  func(r *rand.Rand, n int) []float32
}{
	{"normal", func(r *rand.Rand, n int) []float32 { return randFloats(r, n, 1) }},
	{"tiny", func(r *rand.Rand, n int) []float32 { return randFloats(r, n, 1e-6) }},
	{"zeros", func(r *rand.Rand, n int) []float32 {
		v := randFloats(r, n, 3)
		for i := range v {
			if i/32%2 == 0 {
				v[i] = 0
			}
		}
		return v
	}},
	{"wide", func(r *rand.Rand, n int) []float32 {
		v := randFloats(r, n, 1)
		for i := range v {
			v[i] *= float32(math.Pow(10, float64(r.IntN(9)-4)))
		}
		return v
	}},
}
