package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// quantRef is attention as the quantised cache defines it, in float64: the
// query rounded through Q8_0, the keys and values through the cache's type,
// then an exact softmax (soft cap, window and sink included).
func quantRef(typ quant.Type, q, k, v []float64, hd, n, start int, scale, softCap float64, sink *float64) []float64 {
	round := func(t quant.Type, x []float64) []float64 {
		f := make([]float32, len(x))
		for i := range x {
			f[i] = float32(x[i])
		}
		b := make([]byte, len(x)/32*t.BlockBytes())
		if err := quant.Quantize(t, b, f); err != nil {
			panic(err)
		}
		if err := quant.Dequantize(t, f, b); err != nil {
			panic(err)
		}
		out := make([]float64, len(x))
		for i := range f {
			out[i] = float64(f[i])
		}
		return out
	}
	qr := round(quant.Q8_0, q)
	s := make([]float64, n)
	m := math.Inf(-1)
	for p := start; p < n; p++ {
		kr := round(typ, k[p*hd:(p+1)*hd])
		var d float64
		for i := range hd {
			d += qr[i] * kr[i]
		}
		d *= scale
		if softCap != 0 {
			d = softCap * math.Tanh(d/softCap)
		}
		s[p] = d
		m = max(m, d)
	}
	if sink != nil {
		m = max(m, *sink)
	}
	out := make([]float64, hd)
	var sum float64
	for p := start; p < n; p++ {
		w := math.Exp(s[p] - m)
		sum += w
		vr := round(typ, v[p*hd:(p+1)*hd])
		for i := range hd {
			out[i] += w * vr[i]
		}
	}
	if sink != nil {
		sum += math.Exp(*sink - m)
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// TestAttentionQuantized: StoreKV into a Q8_0 or Q4_0 cache and Attention
// over it give the attention of the quantised query, keys and values
// (quantRef) within float32 rounding, for decode steps and prompts, with
// groups of query heads, scattered block tables, windows, soft caps and
// sinks.
func TestAttentionQuantized(t *testing.T) {
	t.Parallel()
	b := New(Options{Threads: 2})
	defer b.Close()
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		for _, tc := range []struct {
			name           string
			hd, kvh, group int
			n              int // the sequence's length
			window         int
			softCap        float32
			sinks          bool
		}{
			{"head 32", 32, 1, 1, 5, 0, 0, false},
			{"head 64 group 4", 64, 2, 4, 40, 0, 0, false},
			{"head 128 group 2", 128, 2, 2, 70, 0, 0, false},
			{"window", 64, 2, 2, 50, 13, 0, false},
			{"soft cap", 64, 1, 2, 30, 0, 5, false},
			{"sinks", 64, 2, 3, 37, 0, 0, true},
			{"window sinks", 32, 1, 2, 45, 16, 0, true},
		} {
			t.Run(typ.String()+"/"+tc.name, func(t *testing.T) {
				const bs = 16
				rng := rand.New(rand.NewPCG(uint64(tc.hd), uint64(tc.n)))
				l := tensor.KVLayout{Blocks: 8, BlockSize: bs, Heads: tc.kvh, HeadDim: tc.hd}
				kv, err := b.NewKVCache(tensor.KVSpec{Layers: 2, Type: typ, Layout: l})
				if err != nil {
					t.Fatal(err)
				}
				heads := tc.kvh * tc.group
				dim := tc.kvh * tc.hd
				table := []int32{6, 1, 7, 3, 0}[:(tc.n+bs-1)/bs]
				pos, seq := make([]int32, tc.n), make([]int32, tc.n)
				for i := range pos {
					pos[i] = int32(i)
				}
				pg := tensor.Paging{Pos: pos, Seq: seq, Tables: [][]int32{table}, Prompt: []int32{int32(tc.n)}}
				randn := func(n int, sd float64) []float32 {
					x := make([]float32, n)
					for i := range x {
						x[i] = float32(rng.NormFloat64() * sd)
					}
					return x
				}
				k, v := randn(tc.n*dim, 1), randn(tc.n*dim, 1)
				q := randn(tc.n*heads*tc.hd, 1)
				if err := b.StoreKV(kv, 1, k, v, pg); err != nil {
					t.Fatal(err)
				}
				at := tensor.Attention{Heads: heads, Scale: float32(1 / math.Sqrt(float64(tc.hd))), Window: tc.window, SoftCap: tc.softCap}
				if tc.sinks {
					at.Sinks = randn(heads, 2)
				}
				out := make([]float32, len(q))
				if err := b.Attention(out, q, kv, 1, at, pg); err != nil {
					t.Fatal(err)
				}
				// The last token as a decode step on its own gives the
				// same result as in the prompt.
				last := tensor.Paging{Pos: pos[tc.n-1:], Seq: seq[:1], Tables: pg.Tables}
				one := make([]float32, heads*tc.hd)
				if err := b.Attention(one, q[(tc.n-1)*heads*tc.hd:], kv, 1, at, last); err != nil {
					t.Fatal(err)
				}
				for i, x := range one {
					if x != out[(tc.n-1)*heads*tc.hd+i] {
						t.Fatalf("decode step [%d] = %g, in the prompt %g", i, x, out[(tc.n-1)*heads*tc.hd+i])
					}
				}
				f64 := func(x []float32) []float64 {
					y := make([]float64, len(x))
					for i := range x {
						y[i] = float64(x[i])
					}
					return y
				}
				var worst float64
				for tok := range tc.n {
					start := 0
					if tc.window > 0 {
						start = max(0, tok+1-tc.window)
					}
					for h := range heads {
						kvHead := h / tc.group
						kk, vv := make([]float64, (tok+1)*tc.hd), make([]float64, (tok+1)*tc.hd)
						for p := range tok + 1 {
							copy(kk[p*tc.hd:], f64(k[p*dim+kvHead*tc.hd:][:tc.hd]))
							copy(vv[p*tc.hd:], f64(v[p*dim+kvHead*tc.hd:][:tc.hd]))
						}
						var sink *float64
						if tc.sinks {
							s := float64(at.Sinks[h])
							sink = &s
						}
						qh := f64(q[(tok*heads+h)*tc.hd:][:tc.hd])
						want := quantRef(typ, qh, kk, vv, tc.hd, tok+1, start, float64(at.Scale), float64(tc.softCap), sink)
						got := out[(tok*heads+h)*tc.hd:][:tc.hd]
						for i := range want {
							if d := math.Abs(float64(got[i]) - want[i]); d > worst {
								worst = d
							}
						}
					}
				}
				// Values are of order 1: float32 sums of a few hundred
				// terms stay well within 1e-5.
				if worst > 1e-5 {
					t.Errorf("largest difference from the reference %g", worst)
				}
			})
		}
	}
}

// TestQuantValueKernel: the fused value kernels give what dequantising the
// rows with engine/quant and adding w*row to each head's accumulators in
// float32 gives, for every head count a call takes and rows at a stride.
func TestQuantValueKernel(t *testing.T) {
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		vacc := quantValueKernel(typ, 64)
		if vacc == nil {
			t.Skip("no value kernel on this machine")
		}
		for _, tc := range []struct{ hd, group, rows, pad int }{
			{32, 1, 1, 0}, {64, 4, 16, 0}, {64, 3, 7, 5}, {128, 2, 16, 34}, {64, 5, 9, 0}, {96, 8, 3, 18},
		} {
			rng := rand.New(rand.NewPCG(uint64(tc.hd), uint64(tc.group*100+tc.rows)))
			rb := tc.hd/32*typ.BlockBytes() + tc.pad
			v := make([]byte, tc.rows*rb)
			rows := make([]float32, tc.rows*tc.hd)
			for r := range tc.rows {
				x := make([]float32, tc.hd)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				if err := quant.Quantize(typ, v[r*rb:r*rb+tc.hd/32*typ.BlockBytes()], x); err != nil {
					t.Fatal(err)
				}
				if err := quant.Dequantize(typ, rows[r*tc.hd:(r+1)*tc.hd], v[r*rb:r*rb+tc.hd/32*typ.BlockBytes()]); err != nil {
					t.Fatal(err)
				}
			}
			ws := tc.rows + 3
			w := make([]float32, tc.group*ws)
			got := make([]float32, tc.group*tc.hd)
			for i := range w {
				w[i] = rng.Float32()
			}
			for i := range got {
				got[i] = float32(rng.NormFloat64())
			}
			want := append([]float32(nil), got...)
			vacc(got, v, rb, tc.rows, w, ws, tc.hd, tc.group)
			for i := range tc.group {
				for r := range tc.rows {
					for d := range tc.hd {
						want[i*tc.hd+d] += w[i*ws+r] * rows[r*tc.hd+d]
					}
				}
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("%s %+v: [%d] = %g, want %g", typ, tc, i, got[i], want[i])
				}
			}
		}
	}
}
