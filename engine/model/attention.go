package model

import (
	"math"

	"rill/engine/backend/cpu"
	"rill/engine/quant"
)

// maxGroupDim bounds (query heads per KV head) x head size, the attention
// accumulators one job keeps on its stack.
const maxGroupDim = 8192

// attend computes attention for jobs [lo,hi) of the current layer. Job j is
// KV head j%HeadsKV of batch token j/HeadsKV, together with the query heads
// that share it (grouped-query attention), so each cached key and value is
// read once per group. Every query attends to positions 0..Pos of its own
// sequence through the block table. The result of a job depends only on its
// query and the cache, never on the rest of the batch: batching does not
// change a sequence's numbers.
func (r *Runner) attend(lo, hi int) {
	if r.kv.Type == KVF32 {
		r.attendF32(lo, hi)
	} else {
		r.attendF16(lo, hi)
	}
}

// attendF16 follows llama.cpp's CPU flash attention over an F16 cache, one
// position at a time: the query is rounded to half precision, the running
// value sum is kept in half precision (rounded after every update), and the
// softmax normaliser and maximum in float32. Matching that rounding is what
// keeps rill's log-probabilities within llama.cpp's own noise of its numbers.
func (r *Runner) attendF16(lo, hi int) {
	c := &r.m.Config
	b, kv := r.b, r.kv
	H, HKV, hd := c.Heads, c.HeadsKV, c.HeadDim
	group := H / HKV
	kc, vc := kv.k16[r.layer], kv.v16[r.layer]
	var kBuf, vBuf [MaxHeadDim]float32
	var accBuf [maxGroupDim]float32
	var runMax, sum [maxGroupDim / 2]float32
	k, v := kBuf[:hd], vBuf[:hd]
	acc := accBuf[:group*hd]
	for j := lo; j < hi; j++ {
		t, g := j/HKV, j%HKV
		qs := r.q[(t*H+g*group)*hd:][:group*hd] // the group's queries, rounded to half in Forward
		pos := int(b.Pos[t])
		table := b.Tables[b.Seq[t]]
		off := g * hd
		clear(acc)
		for i := range group {
			runMax[i], sum[i] = float32(math.Inf(-1)), 0
		}
		for p := 0; p <= pos; p++ {
			s := kv.slot(table, p) + off
			cpu.F16ToF32s(k, kc[s:s+hd])
			cpu.F16ToF32s(v, vc[s:s+hd])
			for i := range group {
				a := acc[i*hd : (i+1)*hd]
				score := cpu.DotF32(qs[i*hd:(i+1)*hd], k) * r.scale
				ms, vs := float32(1), float32(1)
				if score > runMax[i] {
					ms = float32(math.Exp(float64(runMax[i] - score)))
					runMax[i] = score
					for d := range a {
						a[d] = quant.RoundF16(a[d] * ms)
					}
				} else {
					vs = float32(math.Exp(float64(score - runMax[i])))
				}
				for d := range a {
					a[d] = quant.RoundF16(a[d] + v[d]*vs)
				}
				sum[i] = sum[i]*ms + vs
			}
		}
		for i := range group {
			out := r.att[(t*H+g*group+i)*hd:][:hd]
			inv := 1 / sum[i]
			for d, x := range acc[i*hd : (i+1)*hd] {
				out[d] = x * inv
			}
		}
	}
}

// attendF32 is exact-math attention over a float32 cache: online softmax over
// tiles of positions with float32 accumulators.
func (r *Runner) attendF32(lo, hi int) {
	c := &r.m.Config
	b, kv := r.b, r.kv
	H, HKV, hd := c.Heads, c.HeadsKV, c.HeadDim
	group := H / HKV
	kc, vc := kv.k32[r.layer], kv.v32[r.layer]
	const tile = 32
	var scores [tile]float32
	var slots [tile]int
	var accBuf [MaxHeadDim]float32
	acc := accBuf[:hd]
	for j := lo; j < hi; j++ {
		t, g := j/HKV, j%HKV
		pos := int(b.Pos[t])
		table := b.Tables[b.Seq[t]]
		off := g * hd
		for i := range group {
			h := g*group + i
			q := r.q[(t*H+h)*hd:][:hd]
			runMax := float32(math.Inf(-1))
			var sum float32
			clear(acc)
			for start := 0; start <= pos; start += tile {
				n := min(tile, pos+1-start)
				tileMax := float32(math.Inf(-1))
				for x := range n {
					s := kv.slot(table, start+x) + off
					slots[x] = s
					sc := cpu.DotF32(q, kc[s:s+hd]) * r.scale
					scores[x] = sc
					tileMax = max(tileMax, sc)
				}
				if tileMax > runMax {
					corr := float32(math.Exp(float64(runMax - tileMax)))
					cpu.Scale(acc, corr)
					sum *= corr
					runMax = tileMax
				}
				for x := range n {
					w := float32(math.Exp(float64(scores[x] - runMax)))
					sum += w
					cpu.AXPY(acc, w, vc[slots[x]:slots[x]+hd])
				}
			}
			out := r.att[(t*H+h)*hd:][:hd]
			inv := 1 / sum
			for d := range acc {
				out[d] = acc[d] * inv
			}
		}
	}
}
