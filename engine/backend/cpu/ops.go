package cpu

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// The operations of engine/model's Backend interface: *Backend is the
// compute backend of the forward pass. They are this package's kernels
// applied row by row, so the model's numbers are the kernels' numbers. Each
// runs on the calling goroutine except Linear (MatMul) and Attention, which
// split their work over the worker pool; like MatMul they are used by one
// forward pass at a time.

// Linear is MatMul over the model's weight type: dst = x · wᵀ for T rows of
// x. It panics on inconsistent shapes, as MatMul does.
func (b *Backend) Linear(dst []float32, w tensor.Matrix, x []float32, T int) {
	b.MatMul(dst, w, x, T)
}

// Linears is Linear for matrices that read the same x: it converts x once
// for every matrix whose kernel reads the same converted form (same type
// family, shape and batch), then multiplies; the bits are those of Linear.
func (b *Backend) Linears(dst [][]float32, ws []tensor.Matrix, x []float32, T int) {
	if len(dst) != len(ws) {
		panic(fmt.Sprintf("cpu: Linears: %d outputs for %d matrices", len(dst), len(ws)))
	}
	b.shareX = true
	for i, w := range ws {
		b.MatMul(dst[i], w, x, T)
	}
	b.shareX, b.conv = false, convKey{}
}

// Embed writes row rows[i] of table, dequantised to float32, to
// dst[i*table.Cols:(i+1)*table.Cols].
func (b *Backend) Embed(dst []float32, table tensor.Matrix, rows []int32) error {
	if err := table.Validate(); err != nil {
		return err
	}
	cols := table.Cols
	if len(dst) < len(rows)*cols {
		return fmt.Errorf("embed: %d values for %d rows of %d", len(dst), len(rows), cols)
	}
	rb := table.RowBytes()
	for i, r := range rows {
		if r < 0 || int(r) >= table.Rows {
			return fmt.Errorf("embed: row %d of %d", r, table.Rows)
		}
		if err := quant.Dequantize(table.Type, dst[i*cols:(i+1)*cols], table.Data[int(r)*rb:][:rb]); err != nil {
			return err
		}
	}
	return nil
}

// RMSNorm applies the package's RMSNorm to each row of len(weight) values
// of x. It panics unless len(dst) == len(x) is a multiple of len(weight).
func (b *Backend) RMSNorm(dst, x, weight []float32, eps float32) {
	n := len(weight)
	if n == 0 || len(x)%n != 0 || len(dst) != len(x) {
		panic(fmt.Sprintf("cpu: RMSNorm: %d values into %d, rows of %d", len(x), len(dst), n))
	}
	for i := 0; i < len(x); i += n {
		RMSNorm(dst[i:i+n], x[i:i+n], weight, eps)
	}
}

// RoPE applies the package's RoPE (RoPEScaled when rope.Scaling has
// frequency factors, a magnitude factor or YaRN) to each of the len(pos)
// rows of x, at its own position. It panics unless len(x) ==
// len(pos)*heads*headDim.
func (b *Backend) RoPE(x []float32, pos []int32, heads, headDim int, rope tensor.RoPE) {
	w := heads * headDim
	if len(x) != len(pos)*w {
		panic(fmt.Sprintf("cpu: RoPE: %d values for %d rows of %d heads of %d", len(x), len(pos), heads, headDim))
	}
	if !rope.Scaling.Identity() {
		for t, p := range pos {
			RoPEScaled(x[t*w:(t+1)*w], heads, headDim, int(p), rope)
		}
		return
	}
	for t, p := range pos {
		RoPE(x[t*w:(t+1)*w], heads, headDim, rope.Dims, int(p), rope.Base, rope.FreqScale, rope.Neox)
	}
}

// Scale sets dst = x * s elementwise (equal lengths) in float32, as
// ggml_scale does; dst may be x.
func (b *Backend) Scale(dst, x []float32, s float32) {
	sameLen("Scale", len(dst), len(x))
	if len(x) == 0 {
		return
	}
	if &dst[0] != &x[0] {
		copy(dst, x)
	}
	Scale(dst, s)
}

// SoftCap is the package's SoftCap.
func (b *Backend) SoftCap(x []float32, softCap float32) { SoftCap(x, softCap) }

// GeGLU is the package's GeGLU.
func (b *Backend) GeGLU(dst, gate, up []float32) { GeGLU(dst, gate, up) }

// Add is the package's Add.
func (b *Backend) Add(dst, x, y []float32) { Add(dst, x, y) }

// AddBias adds bias to each row of len(bias) values of x with the
// package's Add. It panics unless len(x) is a multiple of len(bias).
func (b *Backend) AddBias(x, bias []float32) {
	n := len(bias)
	if n == 0 || len(x)%n != 0 {
		panic(fmt.Sprintf("cpu: AddBias: %d values in rows of %d", len(x), n))
	}
	for i := 0; i < len(x); i += n {
		Add(x[i:i+n], x[i:i+n], bias)
	}
}

// SwiGLU is the package's SwiGLU.
func (b *Backend) SwiGLU(dst, gate, up []float32) { SwiGLU(dst, gate, up) }

// NewKVCache allocates a host cache (*tensor.HostKV), the memory StoreKV
// and Attention work on, after checking that the attention kernels take
// its layout.
func (b *Backend) NewKVCache(spec tensor.KVSpec) (tensor.KVCache, error) {
	if err := checkLayout(spec.Layout); err != nil {
		return nil, err
	}
	kv, err := tensor.NewHostKV(spec)
	if err != nil {
		return nil, err
	}
	return kv, nil
}

// errForeignKV is returned for a cache that is not host memory.
var errForeignKV = errors.New("kv cache is not in host memory (made by another backend)")

// hostKV returns kv as host memory and checks layer against it.
func hostKV(kv tensor.KVCache, layer int) (*tensor.HostKV, error) {
	host, ok := kv.(*tensor.HostKV)
	if !ok {
		return nil, errForeignKV
	}
	if s := host.Spec(); layer < 0 || layer >= s.Layers {
		return nil, fmt.Errorf("kv cache layer %d of %d", layer, s.Layers)
	}
	return host, nil
}

// StoreKV writes each token's keys and values (KV heads of HeadDim values
// per row) into the slot pg gives it, rounded to half precision in an F16
// cache, quantised into blocks of 32 (engine/quant's reference quantisers)
// in a Q8_0 or Q4_0 cache. Slots that pg does not name are left alone. It panics when k or v
// does not hold len(pg.Pos) rows or a slot is outside the cache.
func (b *Backend) StoreKV(kv tensor.KVCache, layer int, k, v []float32, pg tensor.Paging) error {
	host, err := hostKV(kv, layer)
	if err != nil {
		return err
	}
	l := host.Spec().Layout
	hd, dim := l.HeadDim, l.Heads*l.HeadDim
	if len(k) != len(pg.Pos)*dim || len(v) != len(k) {
		panic(fmt.Sprintf("cpu: StoreKV: %d keys and %d values for %d rows of %d", len(k), len(v), len(pg.Pos), dim))
	}
	if host.KQ != nil {
		storeQuantKV(host, layer, k, v, pg) // attention_quant.go
		return nil
	}
	for t := range pg.Pos {
		block, slot := pg.Slot(t, l.BlockSize)
		for h := range l.Heads {
			row := l.Row(block, h, slot)
			kh, vh := k[t*dim+h*hd:][:hd], v[t*dim+h*hd:][:hd]
			if host.K32 != nil {
				copy(host.K32[layer][row:row+hd], kh)
				copy(host.V32[layer][row:row+hd], vh)
				continue
			}
			F32ToF16s(host.K16[layer][row:row+hd], kh)
			F32ToF16s(host.V16[layer][row:row+hd], vh)
		}
	}
	return nil
}

// Attention computes causal paged attention with AttendF16 (an F16 cache:
// llama.cpp's flash-attention rounding) or AttendF32 (an F32 cache: exact
// float32), split over the worker pool; a sliding window or soft-capped
// scores or attention sinks (at.Window, at.SoftCap, at.Sinks) take
// AttendF16Window or AttendF32Window.
// A Q8_0 or Q4_0 cache takes attendQuant (attention_quant.go) for every
// token, prompt or decode step, as llama.cpp does.
//
// Over an F16 cache with AVX-512, the tokens of prompts of at least
// tiledMinPrompt tokens (pg.Prompt) take the tiled arithmetic instead
// (attention_tiled.go), as llama.cpp computes such prompts, in float32 or,
// with the bf16 kernel set, on bf16 dot products (attention_tiled.go's
// bf16 arithmetic): a job is then a run of up to tiledChunk consecutive
// tokens of one sequence and a KV head, so each tile of keys and values is
// widened once for all of them. Which
// arithmetic a token gets depends on its request (its prompt's length and
// whether it is a prompt token), never on its batch.
//
// A job is one KV head of one token, together with the query heads that
// share it (grouped-query attention), so each cached key and value is read
// once per group. The jobs of one token that fall in one range go to the
// kernel in one call, which interleaves their work. Jobs are numbered so
// that consecutive ranges mix early and late tokens of the batch (see
// attnToken): under causal attention a token's cost grows with its
// position, and contiguous ranges of a prefill would otherwise give one
// thread all the long ones. A job's result depends only on its query and
// the cache, never on the rest of the batch or on how jobs were grouped.
func (b *Backend) Attention(out, q []float32, kv tensor.KVCache, layer int, at tensor.Attention, pg tensor.Paging) error {
	host, err := hostKV(kv, layer)
	if err != nil {
		return err
	}
	l := host.Spec().Layout
	T := len(pg.Pos)
	switch {
	case at.Heads <= 0 || at.Heads%l.Heads != 0:
		return fmt.Errorf("attention: %d query heads over %d kv heads", at.Heads, l.Heads)
	case len(q) != T*at.Heads*l.HeadDim || len(out) != len(q):
		return fmt.Errorf("attention: %d query and %d output values for %d rows of %d heads of %d", len(q), len(out), T, at.Heads, l.HeadDim)
	case len(pg.Seq) != T:
		return fmt.Errorf("attention: %d positions but %d sequence indices", T, len(pg.Seq))
	case at.Window < 0 || !(at.SoftCap >= 0):
		return fmt.Errorf("attention: window %d, soft cap %g", at.Window, at.SoftCap)
	case at.Sinks != nil && len(at.Sinks) != at.Heads:
		return fmt.Errorf("attention: %d sinks for %d query heads", len(at.Sinks), at.Heads)
	}
	j := attnJobs.get()
	j.out, j.q, j.kv, j.layer, j.at, j.pg = out, q, host, layer, at, pg
	j.kern = b.kern
	j.plain = at.Window <= 0 && at.SoftCap == 0 && at.Sinks == nil
	// Tokens of long prompts go to the tiled kernels in runs, the others
	// one by one.
	j.chunks, j.single = j.chunks[:0], j.single[:0]
	tiled := host.K16 != nil && useAVX512
	rd := tiledRow(l.HeadDim)
	// Runs of tiledChunk tokens, or half that where the batch would give
	// the threads fewer than four jobs each.
	chunk := tiledChunk
	if T*l.Heads < 4*tiledChunk*b.Threads() {
		chunk = tiledChunk / 2
	}
	most := min(chunk, tiledTokens(min(at.Heads/l.Heads, tiledHeads(rd)), rd))
	for t := 0; t < T; {
		if !tiled || !tiledPrompt(pg, t) {
			j.single = append(j.single, int32(t))
			t++
			continue
		}
		e := t + 1
		for e < T && e-t < most && pg.Seq[e] == pg.Seq[t] && tiledPrompt(pg, e) {
			e++
		}
		j.chunks = append(j.chunks, int32(t), int32(e))
		t = e
	}
	grain := attnGrain(l.Heads, b.Threads())
	if len(j.chunks) > 0 {
		j.start, j.ends = j.start[:0], j.ends[:0]
		for t := range T {
			n := int(pg.Pos[t]) + 1
			j.start, j.ends = append(j.start, int32(windowStart(at, n))), append(j.ends, int32(n))
		}
		b.ParallelGrain(len(j.chunks)/2*l.Heads, grain, j.tiled)
	}
	if len(j.single) > 0 {
		b.ParallelGrain(len(j.single)*l.Heads, grain, j.per)
	}
	err = j.err
	j.release()
	attnJobs.put(j)
	return err
}

// attnJob is one Attention call in flight, read by the workers through fn,
// which is bound once per job so that dispatching it allocates nothing.
type attnJob struct {
	out, q []float32
	kv     *tensor.HostKV
	kern   *kernelSet // the backend's: a quantised cache's key dots
	layer  int
	at     tensor.Attention
	plain  bool // no window, no soft cap, no sinks: AttendF16 or AttendF32
	pg     tensor.Paging
	// per, tiled: j.runPerToken and j.runTiled, bound once so that
	// dispatching them allocates nothing.
	per, tiled func(lo, hi int)
	// chunks: the tiled jobs' runs of tokens, chunks[2i] to chunks[2i+1];
	// single: the other tokens, one job per token and KV head.
	chunks, single []int32
	start          []int32 // per token of the batch: the first position it sees
	ends           []int32 // and one past the last

	mu  sync.Mutex
	err error // the first error of the workers
}

// release drops the call's references, so a kept job does not keep the
// caller's memory alive.
func (j *attnJob) release() {
	j.out, j.q, j.kv, j.pg, j.err = nil, nil, nil, tensor.Paging{}, nil
}

// runPerToken computes attention jobs [lo,hi), each a token and a KV head.
func (j *attnJob) runPerToken(lo, hi int) {
	l := j.kv.Spec().Layout
	H, HKV, hd := j.at.Heads, l.Heads, l.HeadDim
	group := H / HKV
	for u := lo; u < hi; {
		t, g := int(j.single[attnToken(u/HKV, len(j.single))]), u%HKV
		nkv := min(hi-u, HKV-g) // this token's KV heads in the range
		i := (t*H + g*group) * hd
		q, out := j.q[i:i+nkv*group*hd], j.out[i:i+nkv*group*hd]
		n := int(j.pg.Pos[t]) + 1
		table := j.pg.Table(t)
		var err error
		switch {
		case j.kv.KQ != nil:
			err = j.attendQuant(out, q, g, nkv, table, n) // attention_quant.go
		case j.plain && j.kv.K32 != nil:
			err = AttendF32(out, q, j.kv.K32[j.layer], j.kv.V32[j.layer], l, g, nkv, table, n, j.at.Scale)
		case j.plain:
			err = AttendF16(out, q, j.kv.K16[j.layer], j.kv.V16[j.layer], l, g, nkv, table, n, j.at.Scale)
		default:
			err = j.attendWindow(out, q, g, nkv, table, n)
		}
		if err != nil {
			j.fail(err)
			return
		}
		u += nkv
	}
}

// tiledChunk is the most tokens of one tiled attention job: enough that
// converting a tile's keys and values (and reading them from memory) is
// cheap next to the tokens' work, few enough that a prompt makes many jobs
// for the threads to share. (128 rather than 64: 7% less thread time per
// pair at depth 8,192 on bf16 dot products, 6% on float32.)
const tiledChunk = 128

// tiledMinPrompt is the shortest prompt whose tokens get the tiled
// arithmetic: llama.cpp's tile of queries (GGML_FA_TILE_Q), below which its
// prompts take the per-position arithmetic of its decode steps.
const tiledMinPrompt = 64

// tiledPrompt reports whether token t is a long prompt's.
func tiledPrompt(pg tensor.Paging, t int) bool {
	n := pg.PromptLen(pg.Seq[t])
	return n >= tiledMinPrompt && pg.Pos[t] < n
}

// windowStart is the first of n positions a query attends to: the last
// at.Window of them, or all when there is no window.
func windowStart(at tensor.Attention, n int) int {
	if at.Window > 0 {
		return max(0, n-at.Window)
	}
	return 0
}

// runTiled computes tiled attention jobs [lo,hi), each a run of tokens
// (j.chunks) and a KV head, ordered as attnToken orders tokens so that
// ranges mix early and late runs.
func (j *attnJob) runTiled(lo, hi int) {
	l := j.kv.Spec().Layout
	H, HKV, hd := j.at.Heads, l.Heads, l.HeadDim
	group := H / HKV
	hmax := tiledHeads(tiledRow(hd))
	nc := len(j.chunks) / 2
	for u := lo; u < hi; u++ {
		c, g := attnToken(u/HKV, nc), u%HKV
		t0, t1 := int(j.chunks[2*c]), int(j.chunks[2*c+1])
		table := j.pg.Table(t0)
		if err := checkTable(l, table, int(slices.Max(j.ends[t0:t1]))); err != nil {
			j.fail(err)
			return
		}
		for i0 := 0; i0 < group; i0 += hmax {
			i1 := min(group, i0+hmax)
			base := (t0*H + g*group + i0) * hd
			tq := tiledQueries{
				out: j.out[base:], q: j.q[base:], stride: H * hd, gn: i1 - i0, kvh: g, table: table,
				start: j.start[t0:t1], n: j.ends[t0:t1], scale: j.at.Scale, softCap: j.at.SoftCap, assembler: true,
				bf16: j.kern.bf16Attn,
			}
			if j.at.Sinks != nil {
				tq.sinks = j.at.Sinks[g*group+i0 : g*group+i1]
			}
			attendTiled(&tq, j.kv.K16[j.layer], j.kv.V16[j.layer], l)
		}
	}
}

// fail records the first error of the workers.
func (j *attnJob) fail(err error) {
	j.mu.Lock()
	if j.err == nil {
		j.err = err
	}
	j.mu.Unlock()
}

// attendWindow is one job of a windowed or soft-capped attention: the
// query attends to the last at.Window of its n positions (all of them
// when there is no window).
func (j *attnJob) attendWindow(out, q []float32, g, nkv int, table []int32, n int) error {
	l := j.kv.Spec().Layout
	start := windowStart(j.at, n)
	var sinks []float32
	if j.at.Sinks != nil {
		group := j.at.Heads / l.Heads
		sinks = j.at.Sinks[g*group : (g+nkv)*group]
	}
	if j.kv.K32 != nil {
		return AttendF32Window(out, q, j.kv.K32[j.layer], j.kv.V32[j.layer], l, g, nkv, table, start, n, j.at.Scale, j.at.SoftCap, sinks)
	}
	return AttendF16Window(out, q, j.kv.K16[j.layer], j.kv.V16[j.layer], l, g, nkv, table, start, n, j.at.Scale, j.at.SoftCap, sinks)
}

// attnJobs is the free list of attention jobs, as attnScratches is of
// scratch memory: it keeps the jobs (and their bound methods), so a
// steady-state call allocates nothing.
var attnJobs = freeList[attnJob]{make: func() *attnJob {
	j := new(attnJob)
	j.per, j.tiled = j.runPerToken, j.runTiled
	return j
}}

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
