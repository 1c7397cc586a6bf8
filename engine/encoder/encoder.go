// Package encoder serves an encoder model (model.Encoder: BERT-style
// embedders such as bge, e5 and all-MiniLM, and rerankers with a
// classification head such as bge-reranker) as an engine: embeddings
// (engine.Embedder), reranking (engine.Reranker) and its tokens
// (engine.Tokenizer). It generates nothing.
//
// It is a package of its own rather than a mode of engine/native because
// it shares nothing of native's machinery: an encoder has no KV cache, no
// decoding loop, no sampler and no chat template; a request is one
// forward pass (or a few) over whole sequences.
package encoder

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/tokenizer"
)

// DefaultMaxBatchTokens is the most tokens one forward pass runs when
// Options.MaxBatchTokens is 0: the activations of a pass take about
// (4·embd + ffn) floats a token, some 15 MiB for a bge-small-sized model.
const DefaultMaxBatchTokens = 2048

// Options configure an Engine; the zero value means defaults.
type Options struct {
	// ID is the model's name in requests; "" means the file's
	// general.name.
	ID          string
	Description string
	OwnedBy     string // "" means "rill"
	// ContextLength, when positive and below the model's, is the most
	// tokens an input may have.
	ContextLength int
	// MaxBatchTokens is the most tokens one forward pass runs (0:
	// DefaultMaxBatchTokens); an input longer than it runs alone.
	MaxBatchTokens int
}

// Engine serves one encoder model. It is safe for concurrent use: the
// encoder runs one forward pass at a time (a model.Encoder is safe for one
// call at a time, and its backend uses all its threads for one pass), so
// callers take turns on a one-slot semaphore that they leave when their
// context ends. Tokenising runs on the caller's goroutine, outside it.
type Engine struct {
	enc    *model.Encoder
	tok    *tokenizer.Tokenizer
	b      model.EncoderBackend
	card   engine.ModelCard
	ctxLen int
	batch  int
	// pre and suf are the special tokens the vocabulary puts around a
	// text ([CLS] and [SEP] for WordPiece).
	pre, suf []int32
	turn     chan struct{} // one slot: the encoder's
	closed   atomic.Bool
}

var (
	_ engine.Engine    = (*Engine)(nil)
	_ engine.Embedder  = (*Engine)(nil)
	_ engine.Reranker  = (*Engine)(nil)
	_ engine.Tokenizer = (*Engine)(nil)
)

// ErrClosed is returned by calls on a closed Engine.
var ErrClosed = errors.New("encoder: engine closed")

// Open memory-maps the encoder GGUF at path and serves it on b (see New).
func Open(path string, b model.EncoderBackend, opts Options) (*Engine, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	e, err := New(f, b, opts)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

// New serves the encoder in f (general.architecture one that
// model.IsEncoder accepts) on b. It takes ownership of f when it succeeds
// and of b always: Close closes both (b when it has a Close method).
func New(f *gguf.File, b model.EncoderBackend, opts Options) (*Engine, error) {
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		closeBackend(b)
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	enc, err := model.LoadEncoder(f, b)
	if err != nil {
		closeBackend(b)
		return nil, err
	}
	c := &enc.Config
	ctxLen := c.ContextLength
	if opts.ContextLength > 0 && opts.ContextLength < ctxLen {
		ctxLen = opts.ContextLength
	}
	e := &Engine{
		enc: enc, tok: tok, b: b, ctxLen: ctxLen,
		batch: cmp.Or(max(opts.MaxBatchTokens, 0), DefaultMaxBatchTokens),
		turn:  make(chan struct{}, 1),
		card: engine.ModelCard{
			ID:            cmp.Or(opts.ID, c.Name, "encoder"),
			OwnedBy:       cmp.Or(opts.OwnedBy, "rill"),
			ContextLength: ctxLen,
			Description:   opts.Description,
		},
	}
	if e.card.Description == "" {
		what := "embedding model"
		if enc.Pooling == model.PoolRank {
			what = "reranking model"
		}
		e.card.Description = fmt.Sprintf("%s (%s encoder, %s pooling, %d dimensions)", what, c.Arch, enc.Pooling, c.Embd)
	}
	v := tok.Vocab()
	if v.AddBOS && v.BOS >= 0 {
		e.pre = append(e.pre, int32(v.BOS))
	}
	if v.AddEOS && v.EOS >= 0 {
		e.suf = append(e.suf, int32(v.EOS))
	}
	if v.AddSEP && v.SEP >= 0 {
		e.suf = append(e.suf, int32(v.SEP))
	}
	return e, nil
}

func closeBackend(b model.EncoderBackend) {
	if c, ok := b.(interface{ Close() }); ok {
		c.Close()
	}
}

// Close releases the model's file and the backend. Calls in flight must
// have returned.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	err := e.enc.Close()
	closeBackend(e.b)
	return err
}

// Models implements engine.Engine.
func (e *Engine) Models() []engine.ModelCard { return []engine.ModelCard{e.card} }

// Generate implements engine.Engine by refusing: an encoder does not
// generate text.
func (e *Engine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if err := e.checkModel(req.Model); err != nil {
		return nil, err
	}
	what, use := "an embedding model", "/v1/embeddings"
	if e.enc.Pooling == model.PoolRank {
		what, use = "a reranking model", "/v1/rerank"
	}
	return nil, engine.Errorf("unsupported_model", "model", "model %q is %s and does not generate text: use %s", e.card.ID, what, use)
}

func (e *Engine) checkModel(id string) error {
	if id != e.card.ID {
		return fmt.Errorf("%w: %q (this server has %q)", engine.ErrUnknownModel, id, e.card.ID)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Embed implements engine.Embedder for a mean- or cls-pooled model: each
// text is tokenised with the special tokens its vocabulary puts around a
// text ([CLS] … [SEP]) and token ids are taken as they are; inputs are
// packed into passes of at most MaxBatchTokens tokens, each a sequence of
// its own. Truncation keeps an input's last tokens, as vLLM's
// truncate_prompt_tokens does, but keeps a text's leading and trailing
// special tokens: cls pooling reads the first. Vectors are L2-normalised
// unless req.Raw; Dimensions other than the model's size are refused, as
// the native engine refuses them. A reranker answers ErrUnsupported.
func (e *Engine) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	if err := e.checkModel(req.Model); err != nil {
		return nil, err
	}
	if e.enc.Pooling == model.PoolRank {
		return nil, fmt.Errorf("%w: model %q is a reranker (rank pooling): use /v1/rerank", engine.ErrUnsupported, e.card.ID)
	}
	if len(req.Inputs) == 0 {
		return nil, engine.Errorf("invalid_value", "input", "input must not be empty")
	}
	embd := e.enc.Config.Embd
	if req.Dimensions < 0 || req.Dimensions > 0 && req.Dimensions != embd {
		return nil, engine.Errorf("invalid_value", "dimensions", "model %q does not support Matryoshka dimensions: dimensions must be %d, its embedding size, or omitted", e.card.ID, embd)
	}
	limit := e.ctxLen
	switch {
	case req.Truncate > e.ctxLen:
		return nil, engine.Errorf("invalid_value", "truncate_prompt_tokens", "truncate_prompt_tokens %d exceeds the model's context of %d tokens", req.Truncate, e.ctxLen)
	case req.Truncate > 0:
		limit = req.Truncate
	case req.Truncate < -1:
		return nil, engine.Errorf("invalid_value", "truncate_prompt_tokens", "truncate_prompt_tokens must be -1, 0 or positive")
	}
	seqs := make([][]int32, len(req.Inputs))
	total := 0
	for i, in := range req.Inputs {
		var toks []int32
		if in.Tokens != nil {
			ids := in.Tokens
			if len(ids) > limit {
				if req.Truncate == 0 {
					return nil, tooLong("input", i, len(ids), e.ctxLen)
				}
				ids = ids[len(ids)-limit:]
			}
			toks = make([]int32, len(ids))
			for j, id := range ids {
				if !e.tok.Valid(id) {
					return nil, engine.Errorf("invalid_value", "input", "token %d of input %d is outside the vocabulary of %d tokens", id, i, e.tok.Size())
				}
				toks[j] = int32(id)
			}
		} else {
			body, err := e.encode(ctx, in.Text)
			if err != nil {
				return nil, err
			}
			if n := len(e.pre) + len(body) + len(e.suf); n > limit {
				if req.Truncate == 0 {
					return nil, tooLong("input", i, n, e.ctxLen)
				}
				keep := max(limit-len(e.pre)-len(e.suf), 0)
				body = body[len(body)-keep:]
			}
			toks = e.frame(body)
		}
		if len(toks) == 0 {
			return nil, engine.Errorf("invalid_value", "input", "input %d has no tokens", i)
		}
		seqs[i], total = toks, total+len(toks)
	}
	vs, err := e.run(ctx, seqs, model.PoolDefault)
	if err != nil {
		return nil, err
	}
	if !req.Raw {
		for _, v := range vs {
			normalize(v)
		}
	}
	return &engine.EmbedResult{Vectors: vs, PromptTokens: total}, nil
}

// Rerank implements engine.Reranker for a rank-pooled model. Each
// document is paired with the query as llama.cpp pairs them for a model
// without a rerank template: BOS, the query, EOS (the separator when the
// vocabulary has no EOS) if the vocabulary adds EOS, SEP if it adds SEP,
// the document, EOS if it adds EOS. For WordPiece that is
// "[CLS] query [SEP] document". A document's score is the classification
// head's first output, raw (no sigmoid), as llama.cpp returns it. A pair
// longer than the context is refused.
func (e *Engine) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	if err := e.checkModel(req.Model); err != nil {
		return nil, err
	}
	if e.enc.Pooling != model.PoolRank {
		return nil, fmt.Errorf("%w: model %q is not a reranker (its GGUF pools by %s, not rank)", engine.ErrUnsupported, e.card.ID, e.enc.Pooling)
	}
	if len(req.Documents) == 0 {
		return nil, engine.Errorf("invalid_value", "documents", "documents must not be empty")
	}
	query, err := e.encode(ctx, req.Query)
	if err != nil {
		return nil, err
	}
	v := e.tok.Vocab()
	var mid []int32 // between the query and the document
	if v.AddEOS {
		if v.EOS >= 0 {
			mid = append(mid, int32(v.EOS))
		} else if v.SEP >= 0 {
			mid = append(mid, int32(v.SEP))
		}
	}
	if v.AddSEP && v.SEP >= 0 {
		mid = append(mid, int32(v.SEP))
	}
	seqs := make([][]int32, len(req.Documents))
	total := 0
	for i, d := range req.Documents {
		doc, err := e.encode(ctx, d)
		if err != nil {
			return nil, err
		}
		s := make([]int32, 0, len(e.pre)+len(query)+len(mid)+len(doc)+1)
		s = append(append(append(append(s, e.pre...), query...), mid...), doc...)
		if v.AddEOS && v.EOS >= 0 {
			s = append(s, int32(v.EOS))
		}
		if len(s) > e.ctxLen {
			return nil, tooLong("documents", i, len(s), e.ctxLen)
		}
		seqs[i], total = s, total+len(s)
	}
	scores, err := e.run(ctx, seqs, model.PoolRank)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(scores))
	for i, s := range scores {
		out[i] = s[0]
	}
	return &engine.RerankResult{Scores: out, PromptTokens: total}, nil
}

func tooLong(param string, i, n, ctxLen int) error {
	what := "input"
	if param == "documents" {
		what = "the query with document"
	}
	return engine.Errorf(engine.CodeContextLengthExceeded, param, "%s %d has %d tokens, more than the model's context of %d", what, i, n, ctxLen)
}

// encode returns the tokens of a user's text, without special tokens and
// without parsing special-token texts.
func (e *Engine) encode(ctx context.Context, text string) ([]int32, error) {
	ids, err := e.tok.EncodeContext(ctx, text, tokenizer.EncodeOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

// frame puts the vocabulary's special tokens around body.
func (e *Engine) frame(body []int32) []int32 {
	s := make([]int32, 0, len(e.pre)+len(body)+len(e.suf))
	return append(append(append(s, e.pre...), body...), e.suf...)
}

// run pools seqs, each at most the context long, in passes of at most
// the batch budget of tokens (a longer sequence alone), taking the
// encoder's turn for each pass.
func (e *Engine) run(ctx context.Context, seqs [][]int32, how model.Pooling) ([][]float32, error) {
	out := make([][]float32, 0, len(seqs))
	for start := 0; start < len(seqs); {
		end, n := start+1, len(seqs[start])
		for end < len(seqs) && n+len(seqs[end]) <= e.batch {
			n += len(seqs[end])
			end++
		}
		vs, err := e.pass(ctx, seqs[start:end], how)
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
		start = end
	}
	return out, nil
}

func (e *Engine) pass(ctx context.Context, seqs [][]int32, how model.Pooling) ([][]float32, error) {
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-e.turn }()
	if e.closed.Load() {
		return nil, ErrClosed
	}
	return e.enc.Embed(ctx, seqs, how)
}

// normalize scales v to unit Euclidean length (a zero vector stays zero).
func normalize(v []float32) {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
}
