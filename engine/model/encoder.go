package model

import (
	"context"
	"errors"
	"fmt"
	"math"

	"rill/engine/gguf"
	"rill/engine/tensor"
)

// An Encoder is a BERT-style embedding model (bge, e5, all-MiniLM, and
// bge-reranker with its classification head): every token attends to
// every token of its sequence, and the model's output is a vector per
// sequence pooled from its last hidden states, not next-token logits. It
// follows llama.cpp's "bert" graph: token, learned absolute position and
// token-type (type 0) embeddings, LayerNorm, then per layer bidirectional
// attention with biases, residual add and LayerNorm, a GELU feed-forward
// with biases, residual add and LayerNorm.
//
// It also runs llama.cpp's "nomic-bert" (nomic-embed-text v1 and v1.5),
// the same graph with three differences: no position embeddings, but
// NeoX RoPE (rope.freq_base) on the queries and keys; and a SwiGLU
// feed-forward, down(silu(gate(x)) * up(x)), without biases. And
// "nomic-bert-moe" (nomic-embed-text v2): nomic-bert's RoPE with bert's
// GELU feed-forward, which every moe_every_n_layers-th layer (the layers
// i with i%n == 1) replaces by a mixture of GELU experts: a softmax
// router chooses expert_used_count of expert_count, unnormalised weights.
//
// An Encoder is safe for one call at a time: it runs on one
// EncoderBackend, which runs one pass at a time.
type Encoder struct {
	Config Config
	// Pooling is the file's pooling_type, what PoolDefault means.
	Pooling Pooling
	// ClassOut is the width of a rank-pooled result: the classifier's
	// output labels (1 without labels). 0 when the file has no
	// classification head.
	ClassOut int

	file     *gguf.File
	b        EncoderBackend
	tokEmbd  tensor.Matrix // VocabSize rows of Embd
	posEmbd  tensor.Matrix // ContextLength rows of Embd; zero Rows with RoPE
	rope     bool          // rotate queries and keys (nomic-bert)
	routing  tensor.Routing
	typeEmbd tensor.Matrix // token-type rows of Embd; zero Rows when absent
	normW    []float32
	normB    []float32
	layers   []encoderLayer
	// cls and clsOut are the classification head of rank pooling: dense
	// with tanh, then the output projection; either may be absent.
	cls, clsOut linear
}

type encoderLayer struct {
	q, k, v, o           linear
	attnNormW, attnNormB []float32
	up, down             linear
	gate                 linear // SwiGLU's gate (nomic-bert); zero w.Rows for GELU
	// router, expUp and expDown make the feed-forward a mixture of GELU
	// experts (nomic-bert-moe); expUp is nil in a dense layer.
	router                 linear
	expUp, expDown         []linear
	layerNormW, layerNormB []float32
}

// EncoderBackend is what an Encoder computes with: Backend's projections
// and elementwise operations, and the encoder's own operations, which
// engine/backend/cpu implements.
type EncoderBackend interface {
	Linear(dst []float32, w tensor.Matrix, x []float32, T int)
	Embed(dst []float32, table tensor.Matrix, rows []int32) error
	Add(dst, a, b []float32)
	AddBias(x, bias []float32)
	RoPE(x []float32, pos []int32, heads, headDim int, rope tensor.RoPE)
	SwiGLU(dst, gate, up []float32)
	Route(ids []int32, weights []float32, logits []float32, r tensor.Routing)

	// LayerNorm sets each row of len(weight) values of x to
	// (x-mean)/sqrt(var+eps)*weight + bias (bias may be nil); dst may be
	// x.
	LayerNorm(dst, x, weight, bias []float32, eps float32)
	// GELU sets dst = gelu(x), the tanh approximation as llama.cpp
	// evaluates it; dst may be x.
	GELU(dst, x []float32)
	// Tanh sets dst = tanh(x); dst may be x.
	Tanh(dst, x []float32)
	// EncoderAttention is bidirectional attention within each sequence
	// of the batch: sequence s is rows seqStart[s] to seqStart[s+1] of
	// q (heads*headDim values a row), k and v (headsKV*headDim); scores
	// are scaled by scale. out receives as many rows as q.
	EncoderAttention(out, q, k, v []float32, seqStart []int32, heads, headsKV, headDim int, scale float32)
}

// IsEncoder reports whether arch (general.architecture) is one an Encoder
// runs rather than a Model.
func IsEncoder(arch string) bool {
	return arch == "bert" || arch == "nomic-bert" || arch == "nomic-bert-moe"
}

// OpenEncoder memory-maps and loads the encoder GGUF at path, to run on b.
func OpenEncoder(path string, b EncoderBackend) (*Encoder, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	e, err := LoadEncoder(f, b)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

// Close releases the encoder's file mapping.
func (e *Encoder) Close() error { return e.file.Close() }

// LoadEncoder reads an encoder from an open GGUF file, which it takes
// ownership of, to run on b. It reads the metadata and tensors llama.cpp
// reads for the "bert", "nomic-bert" and "nomic-bert-moe" architectures.
func LoadEncoder(f *gguf.File, b EncoderBackend) (*Encoder, error) {
	c, err := encoderConfig(f.Metadata)
	if err != nil {
		return nil, err
	}
	e := &Encoder{Config: c, file: f, b: b, Pooling: PoolMean}
	if v, ok := f.Metadata.Uint(c.Arch + ".pooling_type"); ok {
		switch p := Pooling(v); p {
		case PoolMean, PoolCLS, PoolRank:
			e.Pooling = p
		default:
			return nil, fmt.Errorf("gguf: %s.pooling_type %d is not supported (1 mean, 2 cls, 4 rank)", c.Arch, v)
		}
	}
	if e.tokEmbd, err = matrix(f, "token_embd.weight", c.VocabSize, c.Embd); err != nil {
		return nil, err
	}
	// bert learns absolute positions; nomic-bert rotates instead.
	if c.Arch == "bert" {
		if e.posEmbd, err = matrix(f, "position_embd.weight", c.ContextLength, c.Embd); err != nil {
			return nil, err
		}
	} else {
		e.rope = true
	}
	if t, ok := f.Tensor("token_types.weight"); ok {
		if len(t.Shape) != 2 || t.Shape[1] < 1 {
			return nil, fmt.Errorf("tensor token_types.weight has shape %v, want [%d n]", t.Shape, c.Embd)
		}
		if e.typeEmbd, err = matrix(f, "token_types.weight", t.Shape[1], c.Embd); err != nil {
			return nil, err
		}
	}
	if e.normW, e.normB, err = layerNorm(f, "token_embd_norm", c.Embd); err != nil {
		return nil, err
	}
	// llama.cpp reads a classification head for bert only.
	if _, ok := f.Tensor("cls.weight"); ok && c.Arch == "bert" {
		if e.cls, err = linearLayer(f, "cls", c.Embd, c.Embd); err != nil {
			return nil, err
		}
	}
	if t, ok := f.Tensor("cls.output.weight"); ok && c.Arch == "bert" {
		if len(t.Shape) != 2 {
			return nil, fmt.Errorf("tensor cls.output.weight has shape %v", t.Shape)
		}
		if e.clsOut, err = linearLayer(f, "cls.output", t.Shape[1], c.Embd); err != nil {
			return nil, err
		}
	}
	switch {
	case e.clsOut.w.Rows > 0:
		e.ClassOut = e.clsOut.w.Rows
	case e.cls.w.Rows > 0:
		e.ClassOut = c.Embd
	}
	moeEvery := 0
	if c.Arch == "nomic-bert-moe" {
		v, _ := f.Metadata.Uint(c.Arch + ".moe_every_n_layers")
		if v > uint64(c.Layers) {
			return nil, fmt.Errorf("gguf: %s.moe_every_n_layers = %d is out of range", c.Arch, v)
		}
		moeEvery = int(v)
		e.routing = tensor.Routing{Experts: c.Experts, Used: c.ExpertsUsed, Gating: tensor.GatingSoftmax, Scale: 1}
		if v, ok := f.Metadata.Float(c.Arch + ".expert_weights_scale"); ok {
			e.routing.Scale = float32(v)
		}
	}
	e.layers = make([]encoderLayer, c.Layers)
	for i := range e.layers {
		if err := e.loadLayer(i, moeEvery > 0 && i%moeEvery == 1); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// encoderConfig reads the hyperparameters of a "bert" file: those of
// ConfigFromGGUF that apply, with attention.layer_norm_epsilon (required,
// as llama.cpp requires it) as NormEps.
func encoderConfig(md *gguf.Metadata) (Config, error) {
	arch, ok := md.String("general.architecture")
	if !ok {
		return Config{}, errors.New("gguf: general.architecture is missing")
	}
	if !IsEncoder(arch) {
		return Config{}, fmt.Errorf("architecture %q is not an encoder (supported: bert, nomic-bert, nomic-bert-moe)", arch)
	}
	c := Config{Arch: arch}
	c.Name, _ = md.String("general.name")
	for _, f := range []struct {
		key      string
		dst      *int
		required bool
	}{
		{"embedding_length", &c.Embd, true},
		{"block_count", &c.Layers, true},
		{"attention.head_count", &c.Heads, true},
		{"attention.head_count_kv", &c.HeadsKV, false},
		{"feed_forward_length", &c.FF, true},
		{"context_length", &c.ContextLength, true},
		{"vocab_size", &c.VocabSize, false},
	} {
		v, ok := md.Uint(arch + "." + f.key)
		if !ok {
			if f.required {
				return Config{}, fmt.Errorf("gguf: %s.%s is missing", arch, f.key)
			}
			continue
		}
		if v == 0 || v > 1<<24 {
			return Config{}, fmt.Errorf("gguf: %s.%s = %d is out of range", arch, f.key, v)
		}
		*f.dst = int(v)
	}
	if c.HeadsKV == 0 {
		c.HeadsKV = c.Heads
	}
	if c.Embd%c.Heads != 0 || c.Heads%c.HeadsKV != 0 {
		return Config{}, fmt.Errorf("gguf: embedding_length %d, head_count %d, head_count_kv %d: heads must divide the width and kv heads the heads", c.Embd, c.Heads, c.HeadsKV)
	}
	c.HeadDim = c.Embd / c.Heads
	if c.VocabSize == 0 {
		toks, ok := md.Strings("tokenizer.ggml.tokens")
		if !ok || len(toks) == 0 {
			return Config{}, errors.New("gguf: vocabulary size unknown (no vocab_size and no tokenizer.ggml.tokens)")
		}
		c.VocabSize = len(toks)
	}
	eps, ok := md.Float(arch + ".attention.layer_norm_epsilon")
	if !ok {
		return Config{}, fmt.Errorf("gguf: %s.attention.layer_norm_epsilon is missing", arch)
	}
	c.NormEps = float32(eps)
	if !(c.NormEps > 0) || math.IsInf(float64(c.NormEps), 0) {
		return Config{}, fmt.Errorf("gguf: %s.attention.layer_norm_epsilon = %g: want a positive finite number", arch, eps)
	}
	if causal, ok := md.Bool(arch + ".attention.causal"); ok && causal {
		return Config{}, fmt.Errorf("gguf: %s.attention.causal is true: causal encoders are not supported", arch)
	}
	c.AttnScale = invSqrt(c.HeadDim)
	if arch != "bert" {
		if err := encoderRoPE(md, &c); err != nil {
			return Config{}, err
		}
	}
	if arch == "nomic-bert-moe" {
		for _, f := range []struct {
			key string
			dst *int
		}{{"expert_count", &c.Experts}, {"expert_used_count", &c.ExpertsUsed}} {
			v, ok := md.Uint(arch + "." + f.key)
			if !ok || v == 0 || v > MaxExperts {
				return Config{}, fmt.Errorf("gguf: %s.%s is missing or out of range (1 to %d)", arch, f.key, MaxExperts)
			}
			*f.dst = int(v)
		}
		if c.ExpertsUsed > c.Experts {
			return Config{}, fmt.Errorf("gguf: %d experts used of %d", c.ExpertsUsed, c.Experts)
		}
	}
	return c, nil
}

// encoderRoPE reads the rotation of nomic-bert: NeoX pairs (llama.cpp's
// rope type for the architecture), rope.freq_base (default 10000) and
// rope.dimension_count (default the head size), unscaled.
func encoderRoPE(md *gguf.Metadata, c *Config) error {
	c.RopeNeox, c.RopeFreqScale, c.RopeBase, c.RopeDims = true, 1, 10000, c.HeadDim
	if v, ok := md.Float(c.Arch + ".rope.freq_base"); ok {
		c.RopeBase = float32(v)
		if !(c.RopeBase > 0) || math.IsInf(float64(c.RopeBase), 0) {
			return fmt.Errorf("gguf: %s.rope.freq_base = %g: want a positive finite number", c.Arch, v)
		}
	}
	if v, ok := md.Uint(c.Arch + ".rope.dimension_count"); ok {
		if v == 0 || v > uint64(c.HeadDim) || v%2 != 0 {
			return fmt.Errorf("gguf: %s.rope.dimension_count %d does not fit head size %d", c.Arch, v, c.HeadDim)
		}
		c.RopeDims = int(v)
	}
	return nil
}

// layerNorm reads the weight and bias of the LayerNorm name, n values each.
func layerNorm(f *gguf.File, name string, n int) (w, b []float32, err error) {
	if w, err = vector(f, name+".weight", n); err != nil {
		return nil, nil, err
	}
	if b, err = vector(f, name+".bias", n); err != nil {
		return nil, nil, err
	}
	return w, b, nil
}

func (e *Encoder) loadLayer(i int, moe bool) error {
	c, f, l := &e.Config, e.file, &e.layers[i]
	p := fmt.Sprintf("blk.%d.", i)
	qDim, kvDim := c.Embd, c.KVDim()
	var err error
	if _, ok := f.Tensor(p + "attn_qkv.weight"); ok {
		qkv, err := linearLayer(f, p+"attn_qkv", qDim+2*kvDim, c.Embd)
		if err != nil {
			return err
		}
		l.q, l.k, l.v = qkv.rows(0, qDim), qkv.rows(qDim, qDim+kvDim), qkv.rows(qDim+kvDim, qDim+2*kvDim)
	} else {
		for _, t := range []struct {
			dst  *linear
			name string
			rows int
		}{{&l.q, "attn_q", qDim}, {&l.k, "attn_k", kvDim}, {&l.v, "attn_v", kvDim}} {
			if *t.dst, err = linearLayer(f, p+t.name, t.rows, c.Embd); err != nil {
				return err
			}
		}
	}
	if l.o, err = linearLayer(f, p+"attn_output", c.Embd, qDim); err != nil {
		return err
	}
	if l.attnNormW, l.attnNormB, err = layerNorm(f, p+"attn_output_norm", c.Embd); err != nil {
		return err
	}
	if moe {
		// llama.cpp reads no bias for the router or the experts.
		if l.router.w, err = matrix(f, p+"ffn_gate_inp.weight", c.Experts, c.Embd); err != nil {
			return err
		}
		if l.expUp, err = expertLayers(f, p+"ffn_up_exps", c.Experts, c.FF, c.Embd); err != nil {
			return err
		}
		if l.expDown, err = expertLayers(f, p+"ffn_down_exps", c.Experts, c.Embd, c.FF); err != nil {
			return err
		}
		for j := range l.expUp {
			l.expUp[j].bias, l.expDown[j].bias = nil, nil
		}
		l.layerNormW, l.layerNormB, err = layerNorm(f, p+"layer_output_norm", c.Embd)
		return err
	}
	if l.up, err = linearLayer(f, p+"ffn_up", c.FF, c.Embd); err != nil {
		return err
	}
	if l.down, err = linearLayer(f, p+"ffn_down", c.Embd, c.FF); err != nil {
		return err
	}
	if c.Arch == "nomic-bert" {
		if l.gate, err = linearLayer(f, p+"ffn_gate", c.FF, c.Embd); err != nil {
			return err
		}
		// llama.cpp's nomic-bert graph applies no feed-forward bias even
		// when the file has one; the numbers follow it.
		l.up.bias, l.down.bias, l.gate.bias = nil, nil, nil
	}
	l.layerNormW, l.layerNormB, err = layerNorm(f, p+"layer_output_norm", c.Embd)
	return err
}

// project sets dst = x·Wᵀ + bias over T rows.
func (e *Encoder) project(dst []float32, l linear, x []float32, T int) {
	e.b.Linear(dst, l.w, x, T)
	if l.bias != nil {
		e.b.AddBias(dst, l.bias)
	}
}

// Hidden runs the encoder over sequences of token ids and returns the
// last hidden states: for each sequence, its tokens' rows of Embd values,
// concatenated. Sequences do not see each other. A sequence must hold 1
// to ContextLength tokens of the vocabulary.
func (e *Encoder) Hidden(ctx context.Context, seqs [][]int32) ([][]float32, error) {
	c := &e.Config
	seqStart := make([]int32, 1, len(seqs)+1)
	T := 0
	for i, s := range seqs {
		if len(s) == 0 || len(s) > c.ContextLength {
			return nil, fmt.Errorf("sequence %d has %d tokens: want 1 to %d", i, len(s), c.ContextLength)
		}
		for _, id := range s {
			if id < 0 || int(id) >= c.VocabSize {
				return nil, fmt.Errorf("sequence %d: token %d is outside the vocabulary of %d", i, id, c.VocabSize)
			}
		}
		T += len(s)
		seqStart = append(seqStart, int32(T))
	}
	if T == 0 {
		return nil, errors.New("no sequences")
	}
	ids := make([]int32, 0, T)
	pos := make([]int32, 0, T)
	for _, s := range seqs {
		ids = append(ids, s...)
		for p := range s {
			pos = append(pos, int32(p))
		}
	}
	d, kvd := c.Embd, c.KVDim()
	x := make([]float32, T*d)
	tmp := make([]float32, T*d)
	if err := e.b.Embed(x, e.tokEmbd, ids); err != nil {
		return nil, err
	}
	// llama.cpp adds the token-type row 0 to the token embeddings, then
	// the position embeddings.
	if e.typeEmbd.Rows > 0 {
		type0 := make([]float32, d)
		if err := e.b.Embed(type0, e.typeEmbd, []int32{0}); err != nil {
			return nil, err
		}
		e.b.AddBias(x, type0)
	}
	if e.posEmbd.Rows > 0 {
		if err := e.b.Embed(tmp, e.posEmbd, pos); err != nil {
			return nil, err
		}
		e.b.Add(x, tmp, x)
	}
	e.b.LayerNorm(x, x, e.normW, e.normB, c.NormEps)

	q, attn := make([]float32, T*d), make([]float32, T*d)
	k, v := make([]float32, T*kvd), make([]float32, T*kvd)
	ff := make([]float32, T*c.FF)
	var up []float32
	if e.layers[0].gate.w.Rows > 0 {
		up = make([]float32, T*c.FF)
	}
	rope := tensor.RoPE{Dims: c.RopeDims, Base: c.RopeBase, FreqScale: c.RopeFreqScale, Neox: c.RopeNeox}
	for i := range e.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l := &e.layers[i]
		e.project(q, l.q, x, T)
		e.project(k, l.k, x, T)
		e.project(v, l.v, x, T)
		if e.rope {
			e.b.RoPE(q, pos, c.Heads, c.HeadDim, rope)
			e.b.RoPE(k, pos, c.HeadsKV, c.HeadDim, rope)
		}
		e.b.EncoderAttention(attn, q, k, v, seqStart, c.Heads, c.HeadsKV, c.HeadDim, c.AttnScale)
		e.project(tmp, l.o, attn, T)
		e.b.Add(tmp, tmp, x)
		e.b.LayerNorm(tmp, tmp, l.attnNormW, l.attnNormB, c.NormEps)
		// tmp is the feed-forward's input and its residual.
		switch {
		case l.expUp != nil:
			e.mixture(x, l, tmp, T)
		case l.gate.w.Rows > 0:
			e.project(ff, l.gate, tmp, T)
			e.project(up, l.up, tmp, T)
			e.b.SwiGLU(ff, ff, up)
			e.project(x, l.down, ff, T)
		default:
			e.project(ff, l.up, tmp, T)
			e.b.GELU(ff, ff)
			e.project(x, l.down, ff, T)
		}
		e.b.Add(x, x, tmp)
		e.b.LayerNorm(x, x, l.layerNormW, l.layerNormB, c.NormEps)
	}
	out := make([][]float32, len(seqs))
	for i := range seqs {
		out[i] = x[int(seqStart[i])*d : int(seqStart[i+1])*d : int(seqStart[i+1])*d]
	}
	return out, nil
}

// mixture sets dst to the mixture-of-experts feed-forward of the T rows of
// x: each token's chosen experts, up, GELU and down, summed with the
// router's weights. It runs one token and expert at a time: an encoder
// pass is one batch, and the experts of nomic-bert-moe are small.
func (e *Encoder) mixture(dst []float32, l *encoderLayer, x []float32, T int) {
	c, r := &e.Config, e.routing
	d, k := c.Embd, r.Used
	logits := make([]float32, T*r.Experts)
	e.b.Linear(logits, l.router.w, x, T)
	ids, w := make([]int32, T*k), make([]float32, T*k)
	e.b.Route(ids, w, logits, r)
	h, out := make([]float32, c.FF), make([]float32, d)
	clear(dst[:T*d])
	for t := range T {
		xt, yt := x[t*d:(t+1)*d], dst[t*d:(t+1)*d]
		for j := range k {
			ex := ids[t*k+j]
			e.b.Linear(h, l.expUp[ex].w, xt, 1)
			e.b.GELU(h, h)
			e.b.Linear(out, l.expDown[ex].w, h, 1)
			for i, v := range out {
				yt[i] += w[t*k+j] * v
			}
		}
	}
}

// Embed runs the encoder over sequences of token ids and pools each
// sequence's hidden states as how says (PoolDefault: the file's pooling):
// Embd values per sequence for mean and cls pooling, ClassOut scores for
// rank pooling (the relevance first). The vectors are not normalised.
// Rank pooling needs a classification head.
func (e *Encoder) Embed(ctx context.Context, seqs [][]int32, how Pooling) ([][]float32, error) {
	if how == PoolDefault {
		how = e.Pooling
	}
	switch how {
	case PoolMean, PoolCLS:
	case PoolRank:
		if e.ClassOut == 0 {
			return nil, errors.New("rank pooling needs a classification head, which the model does not have")
		}
	default:
		return nil, fmt.Errorf("pooling %s is not supported (mean, cls, rank)", how)
	}
	hidden, err := e.Hidden(ctx, seqs)
	if err != nil {
		return nil, err
	}
	d := e.Config.Embd
	out := make([][]float32, len(hidden))
	for i, h := range hidden {
		switch how {
		case PoolMean:
			n := len(h) / d
			sum := make([]float64, d)
			for t := 0; t < n; t++ {
				for j, x := range h[t*d : (t+1)*d] {
					sum[j] += float64(x)
				}
			}
			v := make([]float32, d)
			for j := range v {
				v[j] = float32(sum[j] / float64(n))
			}
			out[i] = v
		case PoolCLS:
			out[i] = append([]float32(nil), h[:d]...)
		case PoolRank:
			out[i] = e.classify(h[:d])
		}
	}
	return out, nil
}

// classify runs the classification head over one hidden state: the dense
// layer and tanh when the file has it, then the output projection when it
// has that, as llama.cpp's rank pooling does.
func (e *Encoder) classify(x []float32) []float32 {
	if e.cls.w.Rows > 0 {
		y := make([]float32, e.cls.w.Rows)
		e.project(y, e.cls, x, 1)
		e.b.Tanh(y, y)
		x = y
	}
	if e.clsOut.w.Rows > 0 {
		y := make([]float32, e.clsOut.w.Rows)
		e.project(y, e.clsOut, x, 1)
		x = y
	}
	return x
}
