package model

import (
	"errors"
	"fmt"

	"rill/engine/tensor"
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
	// WindowTables, per sequence, are the block tables of the
	// sliding-window layers in a split KV (NewSplitKVOn), required then
	// and ignored otherwise. Entries of blocks before a token's window are
	// never read (nor written), but must name blocks of the memory.
	WindowTables [][]int32
	// Prompt, per sequence and optional, is the length of its prompt (see
	// tensor.Paging.Prompt): backends may compute prompt tokens with the
	// arithmetic their peers use for prompts.
	Prompt []int32
	// Logits lists the batch indices whose next-token logits are wanted,
	// in the order the rows are returned.
	Logits []int32
}

// Reset empties b, keeping its capacity.
func (b *Batch) Reset() {
	b.Tokens, b.Pos, b.Seq, b.Tables, b.Prompt, b.Logits = b.Tokens[:0], b.Pos[:0], b.Seq[:0], b.Tables[:0], b.Prompt[:0], b.Logits[:0]
	b.WindowTables = b.WindowTables[:0]
}

// Runner runs forward passes of one model on one backend. It owns the
// scratch memory of a pass, sized for at most MaxTokens tokens, so that a
// steady-state pass allocates nothing. Not safe for concurrent use.
type Runner struct {
	m         *Model
	be        Backend
	maxTokens int

	x, xn, tmp  []float32 // [T, Embd]
	q, att      []float32 // [T, Heads*HeadDim]
	k, v        []float32 // [T, KVDim]
	gate, up    []float32 // [T, FF]
	hid, logits []float32 // [L, Embd], [L, VocabSize]

	moe moeScratch // for mixture-of-experts layers

	ropes []tensor.RoPE      // per layer: its rotary embedding
	attns []tensor.Attention // per layer: its attention

	// The arguments of one Linears call (see linears).
	ldst [3][]float32
	lw   [3]tensor.Matrix
	ll   [3]*linear
}

// NewRunner prepares forward passes of up to maxTokens tokens per batch on
// be, which the Runner uses but does not own: the caller closes it after
// the Runner's last pass. It serves the model's training context (see
// SetContextLength).
func NewRunner(m *Model, be Backend, maxTokens int) *Runner {
	c := &m.Config
	r := &Runner{m: m, be: be, maxTokens: maxTokens}
	r.x = make([]float32, maxTokens*c.Embd)
	r.xn = make([]float32, maxTokens*c.Embd)
	r.tmp = make([]float32, maxTokens*c.Embd)
	r.q = make([]float32, maxTokens*c.Heads*c.HeadDim)
	r.att = make([]float32, maxTokens*c.Heads*c.HeadDim)
	r.k = make([]float32, maxTokens*c.KVDim())
	r.v = make([]float32, maxTokens*c.KVDim())
	if c.Experts > 0 {
		r.moe = newMoEScratch(c, maxTokens)
	} else {
		r.gate = make([]float32, maxTokens*c.FF)
		r.up = make([]float32, maxTokens*c.FF)
	}
	r.ropes = make([]tensor.RoPE, c.Layers)
	r.attns = make([]tensor.Attention, c.Layers)
	for li := range c.Layers {
		at := tensor.Attention{Heads: c.Heads, Scale: c.AttnScale, SoftCap: c.AttnSoftCap}
		if c.PreScaleQuery {
			at.Scale = 1
		}
		if c.Sliding(li) {
			at.Window = c.SlidingWindow
		}
		at.Sinks = m.layers[li].sinks
		r.attns[li] = at
	}
	r.SetContextLength(c.ContextLength)
	if p, ok := be.(Preparer); ok {
		// The backend reads its copies now: the mapped originals' pages
		// need not stay in the process (a read of one, as the tied
		// embeddings' lookup does, faults it back).
		for _, w := range p.Prepare(m.linearWeights()) {
			if m.File != nil {
				m.File.Evict(w.Data)
			}
		}
	}
	return r
}

// linearWeights lists the matrices the forward pass multiplies with
// Linear or Linears: every layer's projections and the output matrix.
func (m *Model) linearWeights() []tensor.Matrix {
	ws := make([]tensor.Matrix, 0, 7*len(m.layers)+1)
	for i := range m.layers {
		l := &m.layers[i]
		for _, x := range []linear{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
			if x.w.Data != nil {
				ws = append(ws, x.w)
			}
		}
		if l.moe != nil {
			ws = append(ws, l.moe.weights()...)
		}
	}
	return append(ws, m.output.w)
}

// SetContextLength tells the Runner the longest sequence it will run (its
// context window, n_ctx in llama.cpp). It matters only for models with long
// and short RoPE factors (long-context Phi-3), which use the long factors
// when n exceeds the original training context, as llama.cpp chooses them;
// a Runner starts at the model's context length, llama-server's default.
// Call it between forward passes.
func (r *Runner) SetContextLength(n int) {
	c, m := &r.m.Config, r.m
	factors := m.ropeFreqs
	if factors == nil {
		factors = m.ropeShort
		if n > c.RopeOrigContext {
			factors = m.ropeLong
		}
	}
	scaling := &tensor.RoPEScaling{
		FreqFactors: factors, AttnFactor: c.RopeAttnFactor,
		YaRN: tensor.YaRN{ExtFactor: c.RopeYaRNExt, OrigContext: c.RopeOrigContext, BetaFast: c.RopeYaRNBetaFast, BetaSlow: c.RopeYaRNBetaSlow},
	}
	if scaling.Identity() {
		scaling = nil
	}
	for li := range r.ropes {
		rope := tensor.RoPE{Dims: c.RopeDims, Base: c.RopeBase, FreqScale: c.RopeFreqScale, Neox: c.RopeNeox, Scaling: scaling}
		if c.Sliding(li) {
			rope.Base, rope.FreqScale = c.RopeBaseSWA, c.RopeFreqScaleSWA
		}
		r.ropes[li] = rope
	}
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
	if err := r.hidden(b, kv); err != nil {
		return nil, err
	}
	if len(b.Logits) == 0 {
		return nil, nil // a prompt chunk that does not reach its end: keys and values only
	}
	return r.output(b.Logits), nil
}

// hidden checks b and runs it through every layer, leaving the hidden
// states of its tokens (before the final norm) in r.x.
func (r *Runner) hidden(b *Batch, kv *KV) error {
	if err := r.check(b, kv); err != nil {
		return err
	}
	T, E := len(b.Tokens), r.m.Config.Embd
	if err := r.be.Embed(r.x[:T*E], r.m.tokEmbd, b.Tokens); err != nil {
		return fmt.Errorf("embedding: %w", err)
	}
	if s := r.m.Config.EmbedScale; s != 0 {
		r.be.Scale(r.x[:T*E], r.x[:T*E], s)
	}
	pg := tensor.Paging{Pos: b.Pos, Seq: b.Seq, Tables: b.Tables, Prompt: b.Prompt}
	pgWin := pg
	pgWin.Tables = b.WindowTables
	for li := range r.m.layers {
		mem, slot, win := kv.layer(&r.m.Config, li)
		p := pg
		if win {
			p = pgWin
		}
		if err := r.attention(li, slot, T, mem, p); err != nil {
			return fmt.Errorf("layer %d: %w", li, err)
		}
		r.feedForward(li, T)
	}
	return nil
}

// attention is the attention half of layer li over the T tokens of the
// batch: x += n_post(O(attend(RoPE(n_q(Q(n(x)))), RoPE(n_k(K(n(x)))),
// V(n(x))))), with n the layer's RMS norm, Q, K, V and O its linear
// layers, n_q and n_k the per-head norms and n_post the output norm of
// architectures that have them, and this batch's keys and values stored
// in kv before attending. Architectures that scale queries rather than
// scores do so after RoPE.
//
// The layer's keys and values live in layer slot of mem.
func (r *Runner) attention(li, slot, T int, mem tensor.KVCache, pg tensor.Paging) error {
	c, l, be := &r.m.Config, &r.m.layers[li], r.be
	E, qd, kvd := c.Embd, c.Heads*c.HeadDim, c.KVDim()
	x, xn, tmp := r.x[:T*E], r.xn[:T*E], r.tmp[:T*E]
	q, k, v, att := r.q[:T*qd], r.k[:T*kvd], r.v[:T*kvd], r.att[:T*qd]

	be.RMSNorm(xn, x, l.attnNorm, c.NormEps)
	r.ldst, r.ll = [3][]float32{q, k, v}, [3]*linear{&l.q, &l.k, &l.v}
	r.linears(xn, T, 3)
	if l.qNorm != nil {
		be.RMSNorm(q, q, l.qNorm, c.NormEps)
		be.RMSNorm(k, k, l.kNorm, c.NormEps)
	}
	be.RoPE(q, pg.Pos, c.Heads, c.HeadDim, r.ropes[li])
	be.RoPE(k, pg.Pos, c.HeadsKV, c.HeadDim, r.ropes[li])
	if c.PreScaleQuery {
		be.Scale(q, q, c.AttnScale)
	}
	if err := be.StoreKV(mem, slot, k, v, pg); err != nil {
		return err
	}
	if err := be.Attention(att, q, mem, slot, r.attns[li], pg); err != nil {
		return err
	}
	r.linear(tmp, &l.o, att, T)
	if l.attnPostNorm != nil {
		be.RMSNorm(tmp, tmp, l.attnPostNorm, c.NormEps)
	}
	be.Add(x, x, tmp)
	return nil
}

// feedForward is the feed-forward half of layer li:
// x += n_post(Down(act(Gate(n(x))) * Up(n(x)))), act SiLU or GELU, n_post
// the output norm of architectures that have one; or, in a layer with
// experts, x += n_post(mixture(n(x))) (moe.go).
func (r *Runner) feedForward(li, T int) {
	c, l, be := &r.m.Config, &r.m.layers[li], r.be
	E, ff := c.Embd, c.FF
	x, xn, tmp := r.x[:T*E], r.xn[:T*E], r.tmp[:T*E]

	be.RMSNorm(xn, x, l.ffnNorm, c.NormEps)
	if l.moe != nil {
		r.mixture(tmp, l.moe, xn, T)
	} else {
		act := actSwiGLU
		if c.GELU {
			act = actGeGLU
		}
		r.ffn(tmp, &l.gate, &l.up, &l.down, act, xn, r.gate[:T*ff], r.up[:T*ff], T)
	}
	if l.ffnPostNorm != nil {
		be.RMSNorm(tmp, tmp, l.ffnPostNorm, c.NormEps)
	}
	be.Add(x, x, tmp)
}

// linear sets dst = x·Wᵀ + bias for T rows of x.
func (r *Runner) linear(dst []float32, l *linear, x []float32, T int) {
	r.be.Linear(dst, l.w, x, T)
	if l.bias != nil {
		r.be.AddBias(dst, l.bias)
	}
}

// linears is linear for the first n layers of r.ll, which read the same
// x, into r.ldst: the backend may convert x once.
func (r *Runner) linears(x []float32, T, n int) {
	for i, l := range r.ll[:n] {
		r.lw[i] = l.w
	}
	r.be.Linears(r.ldst[:n], r.lw[:n], x, T)
	for i, l := range r.ll[:n] {
		if l.bias != nil {
			r.be.AddBias(r.ldst[i], l.bias)
		}
	}
	clear(r.ldst[:n]) // keep no reference to the batch's buffers
	clear(r.ll[:n])
}

// output returns the logits of the batch rows rows: the final norm of each
// row's hidden state times the output matrix.
func (r *Runner) output(rows []int32) []float32 {
	c := &r.m.Config
	E, L := c.Embd, len(rows)
	if cap(r.hid) < L*E {
		r.hid = make([]float32, L*E)
		r.logits = make([]float32, L*c.VocabSize)
	}
	hid, logits := r.hid[:L*E], r.logits[:L*c.VocabSize]
	for j, i := range rows {
		copy(hid[j*E:(j+1)*E], r.x[int(i)*E:(int(i)+1)*E])
	}
	r.be.RMSNorm(hid, hid, r.m.outNorm, c.NormEps)
	r.linear(logits, &r.m.output, hid, L)
	if c.FinalSoftCap != 0 {
		r.be.SoftCap(logits, c.FinalSoftCap)
	}
	return logits
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
	case !kvFits(kv, c):
		return errors.New("forward: kv cache was made for another model shape")
	case kv.Split() && len(b.WindowTables) != len(b.Tables):
		return fmt.Errorf("forward: %d window tables for %d sequences", len(b.WindowTables), len(b.Tables))
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
		if kv.Split() && p >= len(b.WindowTables[s])*kv.BlockSize {
			return fmt.Errorf("forward: position %d is outside the %d window blocks of sequence %d", p, len(b.WindowTables[s]), s)
		}
	}
	if err := checkTables(b.Tables, kv.NumBlocks); err != nil {
		return err
	}
	if kv.Split() {
		if err := checkTables(b.WindowTables, kv.WindowBlocks); err != nil {
			return err
		}
	}
	for _, i := range b.Logits {
		if i < 0 || int(i) >= T {
			return fmt.Errorf("forward: logits of row %d of a %d-token batch", i, T)
		}
	}
	return nil
}

// checkTables reports whether every entry of tables names one of n blocks.
func checkTables(tables [][]int32, n int) error {
	for s, table := range tables {
		for _, id := range table {
			if id < 0 || int(id) >= n {
				return fmt.Errorf("forward: sequence %d maps to block %d of %d", s, id, n)
			}
		}
	}
	return nil
}

// kvFits reports whether kv was made for a model of shape c.
func kvFits(kv *KV, c *Config) bool {
	s := kv.mem.Spec()
	layers := c.Layers
	if kv.win != nil {
		w := kv.win.Spec()
		if w.Layers != c.SlidingLayers() || w.Layout.Heads != c.HeadsKV || w.Layout.HeadDim != c.HeadDim ||
			w.Layout.Blocks != kv.WindowBlocks || w.Layout.BlockSize != kv.BlockSize || len(kv.slot) != c.Layers {
			return false
		}
		layers -= w.Layers
	}
	return s.Layers == layers && s.Layout.Heads == c.HeadsKV && s.Layout.HeadDim == c.HeadDim &&
		s.Layout.Blocks == kv.NumBlocks && s.Layout.BlockSize == kv.BlockSize
}
