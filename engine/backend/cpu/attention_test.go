package cpu

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// attnCase is one attention call's shape: head size, query heads per KV
// head, KV heads in the call, positions attended to, block size.
type attnCase struct {
	hd, group, kvHeads, n, bs int
}

func (c attnCase) String() string {
	return fmt.Sprintf("hd=%d/group=%d/kv=%d/n=%d/bs=%d", c.hd, c.group, c.kvHeads, c.n, c.bs)
}

// attnCases cover the head sizes of real models (8 for stories260K, 64,
// 128) and ones that need padding (4, 20) or a tail of vector chains (16,
// 40, 72); groups 1, 2, 4, 8 (and 3, 5: partial sets of chains); one or
// several KV heads per call; one position, a partial tile, whole and
// partial blocks, long contexts; block sizes that are not multiples of the
// tile (7) and of one slot; more query heads than one pass takes.
func attnCases() []attnCase {
	var cs []attnCase
	for _, hd := range []int{8, 32, 64, 128} {
		for _, g := range []int{1, 2, 4, 8} {
			for _, n := range []int{1, 17, 150} {
				cs = append(cs, attnCase{hd, g, 1 + n%3, n, 16})
			}
		}
	}
	return append(cs,
		attnCase{4, 1, 2, 40, 16}, attnCase{4, 2, 1, 33, 16}, attnCase{20, 3, 2, 50, 16}, attnCase{16, 3, 3, 70, 16},
		attnCase{40, 5, 1, 45, 16}, attnCase{72, 2, 2, 20, 16}, attnCase{8, 2, 4, 300, 7}, attnCase{64, 4, 2, 9, 1},
		attnCase{8, 2, 4, 1000, 16}, attnCase{256, 2, 1, 40, 32}, attnCase{8, 40, 1, 20, 16}, attnCase{24, 10, 4, 5, 16},
		attnCase{8, 1, 3, 64, 16},
	)
}

// attnFixture is a cache of one layer filled with random halves and float32
// values (padding zero), a random block table for one sequence and random
// queries. Blocks the table does not use hold data too, so that reading a
// wrong block shows.
type attnFixture struct {
	l       tensor.KVLayout
	head    int
	kvHeads int
	table   []int32
	q       []float32
	k16     []uint16
	v16     []uint16
	k32     []float32
	v32     []float32
	scale   float32
}

func newAttnFixture(t testing.TB, r *rand.Rand, c attnCase, heads int, sd float64) *attnFixture {
	heads = max(heads, c.kvHeads)
	t.Helper()
	nb := (c.n + c.bs - 1) / c.bs
	l := tensor.KVLayout{Blocks: 2*nb + 1, BlockSize: c.bs, Heads: heads, HeadDim: c.hd}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	f := &attnFixture{l: l, head: r.IntN(heads - c.kvHeads + 1), kvHeads: c.kvHeads, scale: float32(1 / math.Sqrt(float64(c.hd)))}
	f.table = make([]int32, nb)
	for i, b := range r.Perm(l.Blocks)[:nb] {
		f.table[i] = int32(b)
	}
	f.q = randFloats(r, c.kvHeads*c.group*c.hd, sd)
	f.k32, f.v32 = make([]float32, l.Size()), make([]float32, l.Size())
	rd := l.RowDim()
	for row := 0; row < l.Size(); row += rd {
		copy(f.k32[row:], randFloats(r, c.hd, 1))
		copy(f.v32[row:], randFloats(r, c.hd, 1))
	}
	f.k16, f.v16 = make([]uint16, l.Size()), make([]uint16, l.Size())
	f32ToF16Generic(f.k16, f.k32)
	f32ToF16Generic(f.v16, f.v32)
	return f
}

// contiguous returns the same sequence in a cache whose table is 0, 1, 2...
// and holds nothing else.
func (f *attnFixture) contiguous() *attnFixture {
	g := *f
	g.l.Blocks = len(f.table)
	g.table = make([]int32, len(f.table))
	g.k16, g.v16 = make([]uint16, g.l.Size()), make([]uint16, g.l.Size())
	g.k32, g.v32 = make([]float32, g.l.Size()), make([]float32, g.l.Size())
	w := f.l.BlockSize * f.l.RowDim()
	for i, b := range f.table {
		g.table[i] = int32(i)
		for h := range f.l.Heads {
			src, dst := f.l.Row(int(b), h, 0), g.l.Row(i, h, 0)
			copy(g.k16[dst:dst+w], f.k16[src:])
			copy(g.v16[dst:dst+w], f.v16[src:])
			copy(g.k32[dst:dst+w], f.k32[src:])
			copy(g.v32[dst:dst+w], f.v32[src:])
		}
	}
	return &g
}

func (f *attnFixture) group() int { return len(f.q) / f.l.HeadDim / f.kvHeads }

// f16 runs AttendF16's kernels: generic, or the best SIMD level here.
func (f *attnFixture) f16(n int, simd bool) []float32 {
	level := attnGeneric
	if simd {
		level = attnAVX2
		if hasAVX512 {
			level = attnAVX512
		}
	}
	return f.f16At(n, level)
}

func (f *attnFixture) f16At(n int, level attnKernels) []float32 {
	out := make([]float32, len(f.q))
	attendF16(out, f.q, f.k16, f.v16, f.l, f.head, f.group(), f.table, n, f.scale, level)
	return out
}

func (f *attnFixture) f32(n int, simd bool) []float32 {
	out := make([]float32, len(f.q))
	attendF32(out, f.q, f.k32, f.v32, f.l, f.head, f.group(), f.table, n, f.scale, simd)
	return out
}

// refF16 is the definition AttendF16 documents, written position by
// position as llama.cpp's flash attention loop, with the score's float64
// lanes summed in the documented order.
func (f *attnFixture) refF16(n int) []float32 {
	hd, bs := f.l.HeadDim, f.l.BlockSize
	out := make([]float32, len(f.q))
	for i := range len(f.q) / hd {
		q := make([]float32, hd)
		for d := range q {
			q[d] = quant.RoundF16(f.q[i*hd+d])
		}
		acc := make([]float32, hd)
		m, s := float32(math.Inf(-1)), float32(0)
		for p := range n {
			row := f.l.Row(int(f.table[p/bs]), f.head+i/f.group(), p%bs)
			var lanes [4]float64
			for d := range hd {
				lanes[d%4] += float64(q[d]) * float64(quant.F16ToF32(f.k16[row+d]))
			}
			sc := float32((lanes[0]+lanes[1])+(lanes[2]+lanes[3])) * f.scale
			ms, vs := float32(1), float32(1)
			if sc > m {
				ms = expF64Generic(m - sc)
				m = sc
				for d := range acc {
					acc[d] = quant.RoundF16(acc[d] * ms)
				}
			} else {
				vs = expF64Generic(sc - m)
			}
			for d := range acc {
				acc[d] = quant.RoundF16(fmaF32(quant.F16ToF32(f.v16[row+d]), vs, acc[d]))
			}
			s = float32(s*ms) + vs
		}
		for d := range acc {
			out[i*hd+d] = acc[d] * (1 / s)
		}
	}
	return out
}

// refF32 is exact softmax attention over the float32 cache, in float64.
func (f *attnFixture) refF32(n int) []float64 {
	hd, bs := f.l.HeadDim, f.l.BlockSize
	out := make([]float64, len(f.q))
	for i := range len(f.q) / hd {
		sc := make([]float64, n)
		m := math.Inf(-1)
		for p := range n {
			row := f.l.Row(int(f.table[p/bs]), f.head+i/f.group(), p%bs)
			for d := range hd {
				sc[p] += float64(f.q[i*hd+d]) * float64(f.k32[row+d])
			}
			sc[p] *= float64(f.scale)
			m = max(m, sc[p])
		}
		var sum float64
		for p := range n {
			sc[p] = math.Exp(sc[p] - m)
			sum += sc[p]
		}
		for p := range n {
			row := f.l.Row(int(f.table[p/bs]), f.head+i/f.group(), p%bs)
			for d := range hd {
				out[i*hd+d] += sc[p] / sum * float64(f.v32[row+d])
			}
		}
	}
	return out
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %g (%#08x), want %g (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestAttendF16 checks the F16 kernel against its definition, bit for bit,
// on the generic path and (where the machine has it) the SIMD path; and
// that a block table scattered over a larger cache gives bit-identical
// results to the same keys and values stored contiguously.
func TestAttendF16(t *testing.T) {
	t.Parallel()
	for ci, c := range attnCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			r := newRand(t, uint64(ci))
			// A larger spread of queries makes the softmax peaky, so both
			// branches of the update (new maximum or not) and tiny weights
			// occur.
			for _, sd := range []float64{1, 4} {
				f := newAttnFixture(t, r, c, 3, sd)
				want := f.refF16(c.n)
				sameBits(t, "generic", f.f16(c.n, false), want)
				sameBits(t, "generic contiguous", f.contiguous().f16(c.n, false), want)
				if hasSIMD {
					sameBits(t, "simd", f.f16(c.n, true), want)
					sameBits(t, "simd contiguous", f.contiguous().f16(c.n, true), want)
					sameBits(t, "avx2", f.f16At(c.n, attnAVX2), want)
				}
				// Fewer positions over the same table: a prefix.
				if c.n > 1 {
					sameBits(t, "prefix", f.f16(c.n-1, hasSIMD), f.refF16(c.n-1))
				}
			}
		})
	}
}

// TestAttendF32 checks the float32 kernel against exact softmax attention.
// Tolerance: the output is a convex combination of values of magnitude up
// to about 4; the scores, weights and sums carry relative errors of a few
// float32 roundings per position and per rescale, so 1e-5 absolute is far
// above float32 rounding noise and far below any misplaced weight. SIMD and
// generic paths may differ in the dot and axpy roundings only (FMA), so
// they are compared to the reference separately.
func TestAttendF32(t *testing.T) {
	t.Parallel()
	for ci, c := range attnCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			r := newRand(t, uint64(100+ci))
			f := newAttnFixture(t, r, c, 2, 2)
			want := f.refF32(c.n)
			paths := []bool{false}
			if hasSIMD {
				paths = append(paths, true)
			}
			for _, simd := range paths {
				for _, g := range []*attnFixture{f, f.contiguous()} {
					got := g.f32(c.n, simd)
					for i := range want {
						if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5*max(1, math.Abs(want[i])) {
							t.Fatalf("simd %v: out[%d] = %g, exact %g", simd, i, got[i], want[i])
						}
					}
				}
				sameBits(t, "paged vs contiguous", f.f32(c.n, simd), f.contiguous().f32(c.n, simd))
			}
		})
	}
}

// TestAttnKernelsSIMD compares each assembly piece with its generic twin,
// bit for bit, on random data of every shape the pass produces.
func TestAttnKernelsSIMD(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	r := newRand(t, 7)
	for _, rd := range []int{8, 16, 24, 64, 128} {
		q := randFloats(r, rd, 3)
		q[0] = 70000 // rounds to +Inf in half precision
		q[1] = 1e-6  // a half subnormal
		gq, sq := make([]float64, rd), make([]float64, rd)
		roundQuery(gq, q, false)
		roundQuery(sq, q, true)
		if !slices.Equal(gq, sq) {
			t.Fatalf("rd %d: roundQuery differs: %v vs %v", rd, sq, gq)
		}
		gq[0] = 1
		for _, n := range []int{1, 3, 4, 5, 8, 9, 12, 13, 16} {
			h := make([]uint16, n*rd)
			f32ToF16Generic(h, randFloats(r, n*rd, 2))
			gk, sk := make([]float64, n*rd), make([]float64, n*rd)
			halfToF64(gk, h, false)
			halfToF64(sk, h, true)
			if !slices.Equal(gk, sk) {
				t.Fatalf("rd %d n %d: halfToF64 differs", rd, n)
			}
			// Scores go to every 8th float; the floats between are kept.
			gs, ss := randFloats(r, 8*n, 1), make([]float32, 8*n)
			copy(ss, gs)
			zs := slices.Clone(ss)
			scores(gs, gq, gk, n, rd, 0.3, false)
			scores(ss, gq, gk, n, rd, 0.3, true)
			sameBits(t, fmt.Sprintf("rd %d n %d scores", rd, n), ss, gs)
			if hasAVX512 {
				pk := make([]float64, (n+1)/2*2*rd)
				halfToF64Pairs(pk, h, n, rd)
				scoresPairs(zs, gq, pk, n, rd, 0.3)
				sameBits(t, fmt.Sprintf("rd %d n %d scores (avx512)", rd, n), zs, gs)
			}
		}
	}

	// The softmax bookkeeping: fresh maxima (-Inf), rising and falling
	// scores, ties, NaN, and padding lanes outside the lane mask.
	for _, n := range []int{1, 2, 7, 16} {
		for _, lanes := range []uint{0xff, 0x0f, 0x01} {
			sc := randFloats(r, 8*n, 3)
			for i := range sc {
				switch r.IntN(20) {
				case 0:
					sc[i] = float32(i) // rising: new maxima
				case 1:
					sc[i] = float32(math.NaN())
				case 2:
					sc[i] = float32(math.Inf(-1))
				}
			}
			const ws = 32 // a weight row of two blocks
			gm, gsum := make([]float32, 8), make([]float32, 8)
			for i := range gm {
				gm[i], gsum[i] = float32(math.Inf(-1)), 0
				if i%3 == 1 {
					gm[i], gsum[i] = float32(r.NormFloat64()), float32(r.Float64()*4)
				}
			}
			sm, ssum := slices.Clone(gm), slices.Clone(gsum)
			gw, sw := make([]float32, n*ws), make([]float32, n*ws)
			gf, sf := make([]uint8, n), make([]uint8, n)
			weights(sc, gw, gf, gm, gsum, n, ws, lanes, false)
			weights(sc, sw, sf, sm, ssum, n, ws, lanes, true)
			what := fmt.Sprintf("n %d lanes %#x weights", n, lanes)
			sameBits(t, what+" rows", sw, gw)
			sameBits(t, what+" maxima", sm, gm)
			sameBits(t, what+" sums", ssum, gsum)
			if !slices.Equal(sf, gf) {
				t.Fatalf("%s: flags %v, want %v", what, sf, gf)
			}
		}
	}

	// The value updates: every kernel (eight slices along one head, or
	// across 2, 4, 8 heads) and the four-slice leftovers, with and
	// without new maxima.
	for _, rd := range []int{8, 16, 24, 32, 40, 64, 72, 128, 136, 256} {
		for _, gn := range []int{1, 2, 3, 4, 5, 8, 9, 12, 14, 17} {
			for _, n := range []int{1, 7, 16} {
				h := make([]uint16, 3*n*rd)
				f32ToF16Generic(h, randFloats(r, 3*n*rd, 2))
				acc := make([]float32, gn*rd)
				for i := range acc {
					acc[i] = quant.RoundF16(float32(r.NormFloat64()))
				}
				nb := (gn + 7) / 8
				w := make([]float32, 16*nb*n)
				flags := make([]uint8, n)
				for p := range n {
					flags[p] = uint8(r.IntN(3) / 2)
					for i := range gn {
						ms, vs := float32(1), float32(r.Float64())
						if flags[p] != 0 && r.IntN(2) == 0 {
							ms, vs = float32(r.Float64()), 1
						}
						o := p*16*nb + 16*(i/8) + i%8
						w[o], w[o+8] = ms, vs
					}
				}
				// Heads read value rows at their own offsets, as heads
				// of different KV heads do.
				voff := make([]int, gn)
				for i := range voff {
					voff[i] = 2 * r.IntN(len(h)-n*rd+1)
					if i%4 != 0 && r.IntN(2) == 0 {
						voff[i] = voff[i-1] // heads of one KV head share rows
					}
				}
				ga := slices.Clone(acc)
				values(ga, h, w, flags, voff, n, rd, gn, false)
				for _, z := range []bool{false, true} {
					if z && !hasAVX512 {
						continue
					}
					sa := slices.Clone(acc)
					valuesSIMD(sa, h, w, flags, voff, n, rd, gn, z)
					sameBits(t, fmt.Sprintf("rd %d gn %d n %d values (avx512 %v)", rd, gn, n, z), sa, ga)
				}
			}
		}
	}
}

// TestExpF64 checks the attention exponential: the assembly and the
// generic version agree bit for bit everywhere (special values included),
// and both are the correctly rounded e^x (float32(math.Exp), itself
// correctly rounded but for double rounding one time in 2^29) but for at
// most a handful of near-midpoint arguments out of a million, never by more
// than one ulp.
func TestExpF64(t *testing.T) {
	t.Parallel()
	r := newRand(t, 11)
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 88.72283, 88.72284, 88.7229, 89, 89.5, -87.33654, -103.9, -103.97, -104, -104.5,
		-150, 1e-8, -1e-8, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32}
	for range 1 << 20 {
		xs = append(xs, float32(-110+r.Float64()*200))
	}
	got := slices.Clone(xs)
	expF32s(got, false)
	if hasSIMD {
		simd := slices.Clone(xs)
		expF32s(simd, true)
		sameBits(t, "simd exp", simd, got)
	}
	off := 0
	for i, x := range xs {
		want := float32(math.Exp(float64(x)))
		switch {
		case x != x:
			if got[i] == got[i] {
				t.Errorf("exp(NaN) = %g", got[i])
			}
		case got[i] != want:
			off++
			if math.IsInf(float64(want), 0) || want == 0 || ulps(got[i], want) > 1 {
				t.Errorf("exp(%g) = %g, want %g", x, got[i], want)
			}
		}
	}
	if off > 4 {
		t.Errorf("%d of %d exponentials are not correctly rounded", off, len(xs))
	}
}

// TestFMAF32 checks the float32 fused multiply-add of the generic value
// updates against exact arithmetic (math/big, rounded once to float32) on
// random operands of similar and of very different magnitudes, cancelling
// sums, ties and subnormal results.
func TestFMAF32(t *testing.T) {
	t.Parallel()
	r := newRand(t, 5)
	randF := func() float32 {
		switch r.IntN(4) {
		case 0:
			return float32(r.NormFloat64())
		case 1:
			return float32(r.NormFloat64() * math.Ldexp(1, r.IntN(60)-30))
		case 2:
			return math.Float32frombits(r.Uint32()) // any pattern: subnormals, Inf, NaN
		}
		return quant.RoundF16(float32(r.NormFloat64())) // few significant bits: exact ties
	}
	// (1+2^-12)^2 = 1 + 2^-11 + 2^-24 is a float32 midpoint: a tiny c
	// decides the rounding, which a sum rounded to float64 first loses.
	m := float32(1 + 0x1p-12)
	hard := [][3]float32{{m, m, 0x1p-80}, {m, m, -0x1p-80}, {-m, m, 0x1p-80}, {m, -m, -0x1p-80}, {m, m, 0}}
	for i := range 200000 + len(hard) {
		a, b, c := randF(), randF(), randF()
		if i%3 == 0 { // make a*b+c cancel
			c = -float32(float64(a) * float64(b))
		}
		if i >= 200000 {
			a, b, c = hard[i-200000][0], hard[i-200000][1], hard[i-200000][2]
		}
		got := fmaF32(a, b, c)
		p := float64(a) * float64(b)
		if math.IsInf(p, 0) || math.IsNaN(p) || math.IsInf(float64(c), 0) || c != c {
			if want := float32(p + float64(c)); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("fma(%g, %g, %g) = %g, want %g", a, b, c, got, want)
			}
			continue
		}
		exact := new(big.Float).SetPrec(2000).SetFloat64(p)
		exact.Add(exact, new(big.Float).SetPrec(2000).SetFloat64(float64(c)))
		want, _ := exact.Float32()
		if math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) {
			t.Fatalf("fma(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
	}
}

// TestAttendErrors: bad arguments are errors, not panics.
func TestAttendErrors(t *testing.T) {
	t.Parallel()
	l := tensor.KVLayout{Blocks: 4, BlockSize: 16, Heads: 2, HeadDim: 8}
	k16, v16 := make([]uint16, l.Size()), make([]uint16, l.Size())
	k32, v32 := make([]float32, l.Size()), make([]float32, l.Size())
	q, out := make([]float32, 16), make([]float32, 16)
	table := []int32{3, 1}
	cases := []struct {
		name          string
		l             tensor.KVLayout
		out, q        []float32
		head, kvHeads int
		table         []int32
		n             int
		short         bool // k and v one element short
	}{
		{"ok", l, out, q, 1, 1, table, 32, false},
		{"ok, two kv heads", l, out, q, 0, 2, table, 32, false},
		{"no heads", tensor.KVLayout{Blocks: 4, BlockSize: 16, HeadDim: 8}, out, q, 0, 1, table, 1, false},
		{"head size", tensor.KVLayout{Blocks: 4, BlockSize: 16, Heads: 2, HeadDim: MaxAttnHeadDim + 1}, out, q, 0, 1, table, 1, false},
		{"size overflows", tensor.KVLayout{Blocks: math.MaxInt / 64, BlockSize: 16, Heads: 2, HeadDim: 8}, out, q, 0, 1, table, 1, false},
		{"short cache", l, out, q, 0, 1, table, 1, true},
		{"partial query head", l, out[:15], q[:15], 0, 1, table, 1, false},
		{"query heads not a multiple of the kv heads", l, out[:8], q[:8], 0, 2, table, 1, false},
		{"empty query", l, out[:0], q[:0], 0, 1, table, 1, false},
		{"output size", l, out[:8], q, 0, 1, table, 1, false},
		{"kv head", l, out, q, 2, 1, table, 1, false},
		{"kv heads past the end", l, out, q, 1, 2, table, 1, false},
		{"no kv heads", l, out, q, 0, 0, table, 1, false},
		{"negative kv head", l, out, q, -1, 1, table, 1, false},
		{"no positions", l, out, q, 0, 1, table, 0, false},
		{"past the table", l, out, q, 0, 1, table, 33, false},
		{"block id", l, out, q, 0, 1, []int32{3, 4}, 17, false},
		{"negative block id", l, out, q, 0, 1, []int32{-1}, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k16, v16, k32, v32 := k16, v16, k32, v32
			if c.short {
				k16, v16, k32, v32 = k16[1:], v16[1:], k32[1:], v32[1:]
			}
			e16 := AttendF16(c.out, c.q, k16, v16, c.l, c.head, c.kvHeads, c.table, c.n, 1)
			e32 := AttendF32(c.out, c.q, k32, v32, c.l, c.head, c.kvHeads, c.table, c.n, 1)
			if strings.HasPrefix(c.name, "ok") {
				if e16 != nil || e32 != nil {
					t.Fatalf("errors %v, %v", e16, e32)
				}
				return
			}
			if e16 == nil || e32 == nil {
				t.Fatalf("errors %v, %v: want both", e16, e32)
			}
		})
	}
}

// TestAttendNoAlloc: the kernels work in their own stack memory.
func TestAttendNoAlloc(t *testing.T) {
	r := newRand(t, 3)
	f := newAttnFixture(t, r, attnCase{hd: 64, group: 4, kvHeads: 2, n: 100, bs: 16}, 2, 1)
	out := make([]float32, len(f.q))
	if a := testing.AllocsPerRun(20, func() {
		if err := AttendF16(out, f.q, f.k16, f.v16, f.l, f.head, f.kvHeads, f.table, 100, f.scale); err != nil {
			t.Fatal(err)
		}
		if err := AttendF32(out, f.q, f.k32, f.v32, f.l, f.head, f.kvHeads, f.table, 100, f.scale); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("attention allocates %v times", a)
	}
	// The op over a batch of a long prompt's tokens (the tiled path where
	// the machine has it) and a decode step.
	be := New(Options{Threads: 2})
	defer be.Close()
	l := tensor.KVLayout{Blocks: 8, BlockSize: 16, Heads: 2, HeadDim: 64}
	c, err := be.NewKVCache(tensor.KVSpec{Layers: 1, Type: quant.F16, Layout: l})
	if err != nil {
		t.Fatal(err)
	}
	pg := tensor.Paging{Tables: [][]int32{{0, 1, 2, 3, 4}, {5, 6}}, Prompt: []int32{80, 10}}
	for p := range 80 {
		pg.Pos, pg.Seq = append(pg.Pos, int32(p)), append(pg.Seq, 0)
	}
	pg.Pos, pg.Seq = append(pg.Pos, 20), append(pg.Seq, 1)
	at := tensor.Attention{Heads: 8, Scale: 0.125}
	q := randFloats(r, len(pg.Pos)*at.Heads*l.HeadDim, 1)
	out = make([]float32, len(q))
	if a := testing.AllocsPerRun(5, func() {
		if err := be.Attention(out, q, c, 0, at, pg); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("the attention op allocates %v times", a)
	}
}
