package model

import (
	"errors"
	"fmt"
	"math"

	"rill/engine/backend/cpu"
	"rill/engine/quant"
)

// Batch is the input of one forward pass: tokens of any number of sequences,
// flattened. Token i of the batch belongs to sequence Seq[i] and sits at
// position Pos[i] of it; its keys and values are written to the KV slot that
// Tables[Seq[i]] maps Pos[i] to, and it attends to positions 0..Pos[i] of
// its own sequence. A sequence's tokens must appear in position order and
// every earlier position must already be in the cache or earlier in the batch.
type Batch struct {
	Tokens []int32
	Pos    []int32
	Seq    []int32
	Tables [][]int32 // per sequence: block ids covering positions 0..max Pos
	// Logits lists the batch indices whose next-token logits are wanted,
	// in the order the rows are returned.
	Logits []int32
}

// Reset empties b, keeping its capacity.
func (b *Batch) Reset() {
	b.Tokens, b.Pos, b.Seq, b.Tables, b.Logits = b.Tokens[:0], b.Pos[:0], b.Seq[:0], b.Tables[:0], b.Logits[:0]
}

// Runner runs forward passes of one model on one backend. It owns the
// scratch memory of a pass, sized for at most MaxTokens tokens, so that a
// steady-state pass allocates nothing. Not safe for concurrent use.
type Runner struct {
	m         *Model
	be        *cpu.Backend
	maxTokens int

	x, xn, tmp  []float32 // [T, Embd]
	q, att      []float32 // [T, Heads*HeadDim]
	k, v        []float32 // [T, KVDim]
	gate, up    []float32 // [T, FF]
	hid, logits []float32 // [L, Embd], [L, VocabSize]
	scale       float32   // 1/sqrt(HeadDim)

	// The pass in flight, read by the parallel attention workers.
	b       *Batch
	kv      *KV
	layer   int
	attnFn  func(lo, hi int) // r.attend, bound once so dispatch does not allocate
	attnErr firstError       // the first error of the attention workers
}

// NewRunner prepares forward passes of up to maxTokens tokens per batch.
func NewRunner(m *Model, be *cpu.Backend, maxTokens int) *Runner {
	c := &m.Config
	r := &Runner{m: m, be: be, maxTokens: maxTokens}
	r.x = make([]float32, maxTokens*c.Embd)
	r.xn = make([]float32, maxTokens*c.Embd)
	r.tmp = make([]float32, maxTokens*c.Embd)
	r.q = make([]float32, maxTokens*c.Heads*c.HeadDim)
	r.att = make([]float32, maxTokens*c.Heads*c.HeadDim)
	r.k = make([]float32, maxTokens*c.KVDim())
	r.v = make([]float32, maxTokens*c.KVDim())
	r.gate = make([]float32, maxTokens*c.FF)
	r.up = make([]float32, maxTokens*c.FF)
	r.scale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	r.attnFn = r.attend
	return r
}

// MaxTokens is the largest batch Forward accepts.
func (r *Runner) MaxTokens() int { return r.maxTokens }

// Model returns the model this runner runs.
func (r *Runner) Model() *Model { return r.m }

// Forward runs the batch through the model, writing its keys and values into
// kv, and returns the logits of the rows b.Logits asks for: len(b.Logits)
// rows of VocabSize floats (none when b.Logits is empty). The returned slice
// is owned by the Runner and valid until the next call.
func (r *Runner) Forward(b *Batch, kv *KV) ([]float32, error) {
	if err := r.check(b, kv); err != nil {
		return nil, err
	}
	c := &r.m.Config
	T := len(b.Tokens)
	E := c.Embd
	r.b, r.kv = b, kv
	defer func() { r.b, r.kv = nil, nil }()

	x := r.x[:T*E]
	rowBytes, _ := r.m.tokEmbd.Type.RowBytes(E)
	for i, tok := range b.Tokens {
		row := r.m.tokEmbd.Data[int(tok)*rowBytes:][:rowBytes]
		if err := quant.Dequantize(r.m.tokEmbd.Type, x[i*E:(i+1)*E], row); err != nil {
			return nil, fmt.Errorf("embedding: %w", err)
		}
	}

	qd, kvd := c.Heads*c.HeadDim, c.KVDim()
	xn, tmp := r.xn[:T*E], r.tmp[:T*E]
	q, k, v, att := r.q[:T*qd], r.k[:T*kvd], r.v[:T*kvd], r.att[:T*qd]
	gate, up := r.gate[:T*c.FF], r.up[:T*c.FF]
	for li := range r.m.layers {
		l := &r.m.layers[li]
		r.layer = li
		for i := range T {
			cpu.RMSNorm(xn[i*E:(i+1)*E], x[i*E:(i+1)*E], l.attnNorm, c.NormEps)
		}
		r.be.MatMul(q, l.wq, xn, T)
		r.be.MatMul(k, l.wk, xn, T)
		r.be.MatMul(v, l.wv, xn, T)
		for i := range T {
			pos := int(b.Pos[i])
			qi := q[i*qd : (i+1)*qd]
			cpu.RoPE(qi, c.Heads, c.HeadDim, c.RopeDims, pos, c.RopeBase, c.RopeFreqScale, c.RopeNeox)
			ki := k[i*kvd : (i+1)*kvd]
			cpu.RoPE(ki, c.HeadsKV, c.HeadDim, c.RopeDims, pos, c.RopeBase, c.RopeFreqScale, c.RopeNeox)
			kv.store(li, b.Tables[b.Seq[i]], pos, ki, v[i*kvd:(i+1)*kvd])
		}
		r.be.ParallelGrain(T*c.HeadsKV, attnGrain(c.HeadsKV, r.be.Threads()), r.attnFn)
		if err := r.attnErr.take(); err != nil {
			return nil, fmt.Errorf("layer %d: %w", li, err)
		}
		r.be.MatMul(tmp, l.wo, att, T)
		cpu.Add(x, x, tmp)

		for i := range T {
			cpu.RMSNorm(xn[i*E:(i+1)*E], x[i*E:(i+1)*E], l.ffnNorm, c.NormEps)
		}
		r.be.MatMul(gate, l.wGate, xn, T)
		r.be.MatMul(up, l.wUp, xn, T)
		cpu.SwiGLU(gate, gate, up)
		r.be.MatMul(tmp, l.wDown, gate, T)
		cpu.Add(x, x, tmp)
	}

	L := len(b.Logits)
	if L == 0 {
		return nil, nil // a prompt chunk that does not reach its end: keys and values only
	}
	if cap(r.hid) < L*E {
		r.hid = make([]float32, L*E)
		r.logits = make([]float32, L*c.VocabSize)
	}
	hid, logits := r.hid[:L*E], r.logits[:L*c.VocabSize]
	for j, i := range b.Logits {
		cpu.RMSNorm(hid[j*E:(j+1)*E], x[int(i)*E:(int(i)+1)*E], r.m.outNorm, c.NormEps)
	}
	r.be.MatMul(logits, r.m.output, hid, L)
	return logits, nil
}

func (r *Runner) check(b *Batch, kv *KV) error {
	c := &r.m.Config
	T := len(b.Tokens)
	switch {
	case T == 0:
		return errors.New("forward: empty batch")
	case T > r.maxTokens:
		return fmt.Errorf("forward: batch of %d tokens exceeds the runner's %d", T, r.maxTokens)
	case len(b.Pos) != T || len(b.Seq) != T:
		return fmt.Errorf("forward: %d tokens but %d positions and %d sequence indices", T, len(b.Pos), len(b.Seq))
	case kv.dim != c.KVDim() || kv.layers() != c.Layers:
		return errors.New("forward: kv cache was made for another model shape")
	}
	for i, tok := range b.Tokens {
		if tok < 0 || int(tok) >= c.VocabSize {
			return fmt.Errorf("forward: token %d is outside the vocabulary of %d", tok, c.VocabSize)
		}
		s := b.Seq[i]
		if s < 0 || int(s) >= len(b.Tables) {
			return fmt.Errorf("forward: token %d names sequence %d of %d", i, s, len(b.Tables))
		}
		p := int(b.Pos[i])
		table := b.Tables[s]
		if p < 0 || p >= len(table)*kv.BlockSize {
			return fmt.Errorf("forward: position %d is outside the %d blocks of sequence %d", p, len(table), s)
		}
	}
	for s, table := range b.Tables {
		for _, id := range table {
			if id < 0 || int(id) >= kv.NumBlocks {
				return fmt.Errorf("forward: sequence %d maps to block %d of %d", s, id, kv.NumBlocks)
			}
		}
	}
	for _, i := range b.Logits {
		if i < 0 || int(i) >= T {
			return fmt.Errorf("forward: logits of row %d of a %d-token batch", i, T)
		}
	}
	return nil
}
