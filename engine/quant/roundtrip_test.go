package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

var allTypes = []Type{F32, F16, BF16, Q8_0, Q4_0, Q8_K, Q4_K, Q6_K}

var weightTypes = []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K}

// testSets returns named rows of n values (n a multiple of 256) of various
// shapes, deterministic for a seed.
func testSets(n int, seed uint64) []struct {
	name string
	x    []float32
} {
	r := rand.New(rand.NewPCG(seed, 7))
	gen := func(f func(i int) float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(f(i))
		}
		return x
	}
	return []struct {
		name string
		x    []float32
	}{
		{"gaussian", gen(func(int) float64 { return r.NormFloat64() })},
		{"positive", gen(func(int) float64 { return 0.1 + r.Float64() })},
		{"negative", gen(func(int) float64 { return -3 - 2*r.Float64() })},
		{"outliers", gen(func(i int) float64 {
			if i%97 == 0 {
				return 40 * r.NormFloat64()
			}
			return 0.01 * r.NormFloat64()
		})},
		{"zeros and constants", gen(func(i int) float64 {
			switch (i / 256) % 3 {
			case 0:
				return 0
			case 1:
				return 0.75
			}
			return r.NormFloat64() * math.Exp2(float64(i%9-4)) // sub-blocks of very different scale
		})},
	}
}

func quantizeRow(t testing.TB, typ Type, x []float32) []byte {
	t.Helper()
	n, err := typ.RowBytes(len(x))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if err := Quantize(typ, b, x); err != nil {
		t.Fatal(err)
	}
	return b
}

func dequantizeRow(t testing.TB, typ Type, b []byte, n int) []float32 {
	t.Helper()
	y := make([]float32, n)
	if err := Dequantize(typ, y, b); err != nil {
		t.Fatal(err)
	}
	return y
}

func amaxOf(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, abs32(v))
	}
	return m
}

// elementBound returns, for element k of row x stored as b in type typ, the
// largest error the quantiser may make. Each bound is the half step of the
// rounding plus the error of storing the scale, derived per format:
//   - F16/BF16: half an ulp, relative 2^-11 and 2^-8 (plus half the smallest
//     f16 subnormal for tiny values);
//   - Q8_0: d/2 with d = amax/127, plus 127 times the f16 rounding of d
//     (relative 2^-11);
//   - Q4_0: a full step d = amax/8, because the value opposite the extreme
//     is clipped from +8 to +7, plus 8 times the f16 rounding of d;
//   - Q8_K: d/2 with d = amax/127 kept in float32;
//   - Q4_K, Q6_K: half the stored step of the element's sub-block (the
//     quantisers never clip), read from the block bytes.
//
// Each gets a slack of 1e-6 of the block's largest magnitude for float32
// arithmetic.
func elementBound(typ Type, x []float32, b []byte, k int) float64 {
	be := typ.BlockElems()
	blk := k / be
	am := float64(amaxOf(x[blk*be : blk*be+be]))
	slack := 1e-6 * am
	switch typ {
	case F32:
		return 0
	case F16:
		return math.Abs(float64(x[k]))*0x1p-11 + 0x1p-25
	case BF16:
		return math.Abs(float64(x[k])) * 0x1p-8
	case Q8_0:
		d := am / 127
		return d/2 + 127*d*0x1p-11 + slack
	case Q4_0:
		d := am / 8
		return d + 8*d*0x1p-11 + slack
	case Q8_K:
		return am/127/2 + slack
	case Q4_K:
		blockBytes := b[blk*q4_KBytes:]
		sc, _ := q4KScales((*[12]byte)(blockBytes[4:]))
		step := float64(f16At(blockBytes, 0)) * float64(sc[(k%qkK)/32])
		return step/2 + slack
	case Q6_K:
		blockBytes := b[blk*q6_KBytes:]
		step := float64(f16At(blockBytes, 208)) * math.Abs(float64(int8(blockBytes[192+(k%qkK)/16])))
		return step/2 + slack
	}
	panic("no bound for " + typ.String())
}

func TestQuantizeErrorBounds(t *testing.T) {
	t.Parallel()
	for _, set := range testSets(1024, 1) {
		for _, typ := range allTypes {
			b := quantizeRow(t, typ, set.x)
			y := dequantizeRow(t, typ, b, len(set.x))
			for k, v := range set.x {
				err := math.Abs(float64(y[k]) - float64(v))
				if bound := elementBound(typ, set.x, b, k); err > bound {
					t.Errorf("%s %s: element %d = %g dequantised to %g, error %g > bound %g",
						set.name, typ, k, v, y[k], err, bound)
					break
				}
			}
		}
	}
}

// TestQuantizeAccuracy bounds the relative RMS error on Gaussian data, where
// the bounds of TestQuantizeErrorBounds say little about the typical error.
// For a uniform quantiser of step s the RMS error is s/sqrt(12); the limits
// are that figure for the format's typical step on N(0,1) data (the largest
// magnitude of 16, 32 or 256 samples is about 1.9, 2.1 and 2.9), with
// headroom for the scale rounding and the spread of the sample maxima.
func TestQuantizeAccuracy(t *testing.T) {
	t.Parallel()
	limits := map[Type]float64{
		F16:  0x1p-11,
		BF16: 0x1p-8,
		Q8_0: 0.0065, // step about 2.1/127 for 32 samples: 0.0048
		Q8_K: 0.008,  // step about 2.9/127 for 256 samples: 0.0066
		Q4_0: 0.10,   // step about 2.1/8: 0.076
		Q4_K: 0.10,   // step about 4.2/15 plus rounding up: 0.081
		Q6_K: 0.025,  // step about 1.9/31 plus rounding up: 0.018
	}
	x := testSets(4096, 2)[0].x
	for typ, limit := range limits {
		y := dequantizeRow(t, typ, quantizeRow(t, typ, x), len(x))
		var se, ss float64
		for k := range x {
			e := float64(y[k]) - float64(x[k])
			se += e * e
			ss += float64(x[k]) * float64(x[k])
		}
		rel := math.Sqrt(se / ss)
		t.Logf("%s: relative RMS error %.5f", typ, rel)
		if rel > limit {
			t.Errorf("%s: relative RMS error %.5f > %.5f", typ, rel, limit)
		}
	}
}

// TestDotMatchesDequantized compares each Dot with the float64 dot product
// of the dequantised rows. Integer block sums are exact, so the only
// difference is float32 rounding, at most a few roundings per block each of
// relative size 2^-24 of the running sum; 1e-5 of sum|w*x| leaves margin for
// n = 1024 (at most 32 blocks).
func TestDotMatchesDequantized(t *testing.T) {
	t.Parallel()
	const n = 1024
	for seed, set := range testSets(n, 3) {
		xs := testSets(n, uint64(seed)+10)[0].x
		// Q4_1 and Q5_1 are left out: their dots use Q8_1's s = d*sum(q) rounded to
		// f16, as ggml does, which this bound does not cover (TestGGMLReference
		// checks them bit for bit against ggml).
		for _, wt := range append(weightTypes, Q5_0) {
			xt, _ := VecDotType(wt)
			wb, xb := quantizeRow(t, wt, set.x), quantizeRow(t, xt, xs)
			wd, xd := dequantizeRow(t, wt, wb, n), dequantizeRow(t, xt, xb, n)
			var want, mag float64
			for i := range wd {
				p := float64(wd[i]) * float64(xd[i])
				want += p
				mag += math.Abs(p)
			}
			got, err := VecDot(wt, n, wb, xb)
			if err != nil {
				t.Fatal(err)
			}
			if d := math.Abs(float64(got) - want); d > 1e-5*mag {
				t.Errorf("%s %s: dot %g, dequantised dot %g (diff %g, sum|wx| %g)", set.name, wt, got, want, d, mag)
			}
		}
	}
}

// TestUnaligned: the plain types read and write through a fallback when a
// row is not aligned for an in-place view; both paths agree to the bit.
func TestUnaligned(t *testing.T) {
	t.Parallel()
	const n = 64
	x := testSets(256, 4)[0].x[:n]
	y := testSets(256, 5)[0].x[:n]
	shift := func(b []byte) []byte {
		buf := make([]byte, len(b)+1)
		copy(buf[1:], b)
		return buf[1:]
	}
	for _, typ := range []Type{F32, F16, BF16} {
		size, _ := typ.RowBytes(n)
		aligned := quantizeRow(t, typ, x)
		odd := shift(make([]byte, size))
		if err := Quantize(typ, odd, x); err != nil {
			t.Fatal(err)
		}
		if string(odd) != string(aligned) {
			t.Errorf("%s: unaligned Quantize differs", typ)
		}
		a := dequantizeRow(t, typ, aligned, n)
		u := dequantizeRow(t, typ, odd, n)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(u[i]) {
				t.Errorf("%s: unaligned Dequantize differs at %d", typ, i)
				break
			}
		}
		xb := quantizeRow(t, typ, y)
		d1, _ := VecDot(typ, n, aligned, xb)
		d2, _ := VecDot(typ, n, odd, shift(xb))
		if math.Float32bits(d1) != math.Float32bits(d2) || d1 == 0 {
			t.Errorf("%s: aligned dot %g, unaligned %g", typ, d1, d2)
		}
	}
}

// TestQ8KBsums: bsums are the sums of each 16 quantised values.
func TestQ8KBsums(t *testing.T) {
	t.Parallel()
	for _, set := range testSets(512, 6) {
		b := quantizeRow(t, Q8_K, set.x)
		for blk := range 2 {
			bb := b[blk*q8_KBytes:]
			for j := range 16 {
				var s int
				for _, q := range bb[4+16*j : 4+16*j+16] {
					s += int(int8(q))
				}
				if got := int(int16(binary.LittleEndian.Uint16(bb[260+2*j:]))); got != s {
					t.Errorf("%s: block %d bsums[%d] = %d, want %d", set.name, blk, j, got, s)
				}
			}
		}
	}
}

// TestScalePacking: Q4_K's 6-bit scale packing round-trips every value.
func TestScalePacking(t *testing.T) {
	t.Parallel()
	for v := range 64 {
		var sc, m [8]uint8
		for j := range 8 {
			sc[j] = uint8((v + 7*j) % 64)
			m[j] = uint8((v*5 + 11*j) % 64)
		}
		var p [12]byte
		putQ4KScales(&p, &sc, &m)
		gs, gm := q4KScales(&p)
		if gs != sc || gm != m {
			t.Fatalf("packing %v %v came back as %v %v", sc, m, gs, gm)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	const n = 512
	x := testSets(n, 8)[0].x
	y := make([]float32, n)
	for _, wt := range weightTypes {
		xt, _ := VecDotType(wt)
		wb, xb := quantizeRow(t, wt, x), quantizeRow(t, xt, x)
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := VecDot(wt, n, wb, xb); err != nil {
				t.Fatal(err)
			}
			if err := Quantize(wt, wb, x); err != nil {
				t.Fatal(err)
			}
			if err := Dequantize(wt, y, wb); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per dot+quantize+dequantize", wt, allocs)
		}
	}
}

func BenchmarkDot(b *testing.B) {
	const n = 4096
	r := rand.New(rand.NewPCG(9, 9))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	kernels := []struct {
		t   Type
		dot func(int, []byte, []byte) float32
	}{
		{F32, DotF32}, {F16, DotF16}, {BF16, DotBF16}, {Q8_0, DotQ8_0},
		{Q4_0, DotQ4_0}, {Q4_K, DotQ4_K}, {Q6_K, DotQ6_K},
	}
	for _, k := range kernels {
		xt, _ := VecDotType(k.t)
		wb, xb := quantizeRow(b, k.t, x), quantizeRow(b, xt, x)
		b.Run(k.t.String(), func(b *testing.B) {
			b.SetBytes(int64(len(wb)))
			var s float32
			for b.Loop() {
				s += k.dot(n, wb, xb)
			}
			_ = s
		})
	}
}

func BenchmarkQuantize(b *testing.B) {
	const n = 4096
	r := rand.New(rand.NewPCG(9, 10))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, typ := range []Type{F16, Q8_0, Q8_K, Q4_K, Q6_K} {
		buf := quantizeRow(b, typ, x)
		b.Run(typ.String(), func(b *testing.B) {
			for b.Loop() {
				_ = Quantize(typ, buf, x)
			}
		})
	}
}
