package model

import (
	"sync"

	"rill/engine/backend/cpu"
)

// attend computes attention for jobs [lo,hi) of the current layer. A job
// is one KV head of one batch token, together with the query heads that
// share it (grouped-query attention), so each cached key and value is read
// once per group; every query attends to positions 0..Pos of its own
// sequence through the block table. The jobs of one token that fall in one
// range go to the kernel in one call, which interleaves their work.
//
// Jobs are numbered so that consecutive ranges mix early and late tokens
// of the batch (see attnToken): under causal attention a token's cost
// grows with its position, and contiguous ranges of a prefill would
// otherwise give one thread all the long ones.
//
// The result of a job depends only on its query and the cache, never on
// the rest of the batch or on how jobs were grouped: batching does not
// change a sequence's numbers.
//
// The kernels are the CPU backend's paged attention: over an F16 cache
// cpu.AttendF16 follows llama.cpp's flash attention (query rounded to half,
// value sums rounded to half after every position, in position order),
// which is what keeps rill's log-probabilities within llama.cpp's own noise
// of its numbers (TestOracle); over an F32 cache cpu.AttendF32 is exact
// float32 attention.
func (r *Runner) attend(lo, hi int) {
	c := &r.m.Config
	b, kv := r.b, r.kv
	H, HKV, hd := c.Heads, c.HeadsKV, c.HeadDim
	group := H / HKV
	T := len(b.Tokens)
	for j := lo; j < hi; {
		t, g := attnToken(j/HKV, T), j%HKV
		nkv := min(hi-j, HKV-g) // this token's KV heads in the range
		i := (t*H + g*group) * hd
		q, out := r.q[i:i+nkv*group*hd], r.att[i:i+nkv*group*hd]
		n := int(b.Pos[t]) + 1
		table := b.Tables[b.Seq[t]]
		var err error
		if kv.Type == KVF32 {
			err = cpu.AttendF32(out, q, kv.k32[r.layer], kv.v32[r.layer], kv.layout, g, nkv, table, n, r.scale)
		} else {
			err = cpu.AttendF16(out, q, kv.k16[r.layer], kv.v16[r.layer], kv.layout, g, nkv, table, n, r.scale)
		}
		if err != nil {
			r.attnErr.set(err)
			return
		}
		j += nkv
	}
}

// attnToken maps the u-th token of the attention order to a batch index:
// 0, T-1, 1, T-2, ... so that any run of the order pairs early tokens with
// late ones.
func attnToken(u, T int) int {
	if u%2 == 0 {
		return u / 2
	}
	return T - 1 - u/2
}

// attnGrain is the smallest range of attention jobs worth a thread: the KV
// heads of one token split over the threads, so that a decode step still
// uses them all while each call takes several KV heads.
func attnGrain(heads, threads int) int {
	return max(1, heads/max(1, threads))
}

// firstError keeps the first error reported by parallel workers.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (e *firstError) set(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}

// take returns the kept error and clears it.
func (e *firstError) take() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.err
	e.err = nil
	return err
}
