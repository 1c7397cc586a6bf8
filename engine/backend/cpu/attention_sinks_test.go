package cpu

import (
	"fmt"
	"math"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// TestAttentionSinks checks attention with per-head sink logits against a
// direct float64 softmax whose denominator holds e^sink, on every path
// Attention takes: F16 and F32 caches, with and without a sliding window,
// decode tokens and the tokens of a long prompt (the tiled kernels on
// AVX-512 machines, float32 and bf16), on one thread and several.
func TestAttentionSinks(t *testing.T) {
	t.Parallel()
	r := newRand(t, 25)
	sinks := []float32{-1, 0.5, 2, 4, -3, 1, 6, 0}
	for _, threads := range []int{1, 3} {
		for _, bf16 := range tiledArithmetics() {
			be := attnBackend(t, threads, bf16)
			for _, typ := range []quant.Type{quant.F16, quant.F32} {
				if bf16 && typ == quant.F32 {
					continue // an F32 cache is never tiled
				}
				for _, at := range []tensor.Attention{
					{Heads: 8, Scale: 0.25, Sinks: sinks},
					{Heads: 8, Scale: 0.25, Window: 7, Sinks: sinks},
				} {
					t.Run(fmt.Sprintf("threads=%d/bf16=%v/%v/window=%d", threads, bf16, typ, at.Window), func(t *testing.T) {
						l := tensor.KVLayout{Blocks: 12, BlockSize: 16, Heads: 2, HeadDim: 16}
						c, err := be.NewKVCache(tensor.KVSpec{Layers: 1, Type: typ, Layout: l})
						if err != nil {
							t.Fatal(err)
						}
						// A 70-token prompt in one batch with a decode at
						// position 33 of another sequence.
						pg := tensor.Paging{Tables: [][]int32{{6, 1, 8, 10, 11}, {0, 7, 3}}, Prompt: []int32{70, 20}}
						hist := tensor.Paging{Tables: pg.Tables}
						for p := range 33 {
							hist.Pos, hist.Seq = append(hist.Pos, int32(p)), append(hist.Seq, 1)
						}
						for p := range 70 {
							pg.Pos, pg.Seq = append(pg.Pos, int32(p)), append(pg.Seq, 0)
						}
						pg.Pos, pg.Seq = append(pg.Pos, 33), append(pg.Seq, 1)
						q, out := attendRandom(t, r, be, c, at, hist, pg)
						tol := 1e-5
						if typ == quant.F16 {
							tol = 4e-3 // half-precision queries and accumulators
						}
						// bf16: the prompt's tokens against the reference on
						// bf16-rounded queries, keys and values, within the
						// rounding of the weights to bf16 (up to 2.7e-3 when
						// written; against the unrounded reference bf16 is
						// up to 1.3e-2 off, so this tells the two apart).
						// The decode step keeps its half-precision
						// arithmetic.
						round := func(tok int) bool { return bf16 && pg.Seq[tok] == 0 }
						kv := c.(*tensor.HostKV)
						w := at.Heads * l.HeadDim
						var worst, moved float64
						for tok := range pg.Pos {
							want := sinkAttention(kv, l, at, q[tok*w:(tok+1)*w], pg.Table(tok), int(pg.Pos[tok])+1, true, round(tok))
							plain := sinkAttention(kv, l, at, q[tok*w:(tok+1)*w], pg.Table(tok), int(pg.Pos[tok])+1, false, round(tok))
							tol := tol
							if round(tok) {
								tol = 4e-3
							}
							for i, v := range want {
								d := math.Abs(float64(out[tok*w+i]) - v)
								worst = max(worst, d)
								moved = max(moved, math.Abs(plain[i]-v))
								if d > tol {
									t.Fatalf("token %d value %d = %g, want %g (sinks ignored: %g)", tok, i, out[tok*w+i], v, plain[i])
								}
							}
						}
						if moved < 100*tol {
							t.Fatalf("the sinks move the result by %g only: the test cannot tell them apart", moved)
						}
						t.Logf("largest error %.3g; the sinks move the result by up to %.3g", worst, moved)
					})
				}
			}
		}
	}
}

// sinkAttention is the float64 reference: softmax over the query's window
// of positions 0..n-1 and, with sinks, the head's sink logit as one more
// term of the denominator; with bf16, over the query, keys and values
// rounded to bf16.
func sinkAttention(kv *tensor.HostKV, l tensor.KVLayout, at tensor.Attention, q []float32, table []int32, n int, withSinks, bf16 bool) []float64 {
	hd, group := l.HeadDim, at.Heads/l.Heads
	r := func(x float32) float64 {
		if bf16 {
			x = quant.BF16ToF32(quant.F32ToBF16(x))
		}
		return float64(x)
	}
	// The bf16 arithmetic rounds the query times scaleBF16.
	qs := scaleBF16(at.Scale, 0)
	rq := func(x float32) float64 {
		if bf16 {
			return r(x*qs) / float64(qs)
		}
		return float64(x)
	}
	key := func(h, p, d int) (float64, float64) {
		row := l.Row(int(table[p/l.BlockSize]), h, p%l.BlockSize) + d
		if kv.K32 != nil {
			return r(kv.K32[0][row]), r(kv.V32[0][row])
		}
		return r(quant.F16ToF32(kv.K16[0][row])), r(quant.F16ToF32(kv.V16[0][row]))
	}
	start := 0
	if at.Window > 0 {
		start = max(0, n-at.Window)
	}
	out := make([]float64, len(q))
	for h := range at.Heads {
		sc := make([]float64, n)
		m := math.Inf(-1)
		if withSinks {
			m = float64(at.Sinks[h])
		}
		for p := start; p < n; p++ {
			for d := range hd {
				k, _ := key(h/group, p, d)
				sc[p] += rq(q[h*hd+d]) * k
			}
			sc[p] *= float64(at.Scale)
			m = max(m, sc[p])
		}
		var sum float64
		if withSinks {
			sum = math.Exp(float64(at.Sinks[h]) - m)
		}
		for p := start; p < n; p++ {
			sc[p] = math.Exp(sc[p] - m)
			sum += sc[p]
		}
		for p := start; p < n; p++ {
			for d := range hd {
				_, v := key(h/group, p, d)
				out[h*hd+d] += sc[p] / sum * v
			}
		}
	}
	return out
}
