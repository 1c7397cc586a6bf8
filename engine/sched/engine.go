// Package sched is the native engine: it implements engine.Engine over one
// model on the CPU backend with continuous batching and a paged KV cache
// with automatic prefix caching (the vLLM v1 split: the scheduler decides,
// engine/kvcache allocates, the backend computes).
//
// One goroutine, the loop, owns the model runner, the KV cache and every
// sequence. Generate validates and tokenises on the caller's goroutine, then
// hands the request to the loop; events flow back through a per-request
// queue that never blocks the loop.
package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"rill/engine"
	"rill/engine/backend/cpu"
	"rill/engine/chat"
	"rill/engine/kvcache"
	"rill/engine/model"
	"rill/engine/tokenizer"
)

// Options configure an Engine. Zero values mean defaults.
type Options struct {
	// ID is the model name clients use; default the GGUF general.name.
	ID          string
	Description string
	OwnedBy     string
	// ContextLength caps prompt + completion; default the model's training context.
	ContextLength int
	// KVCacheBytes is the memory budget of the KV cache; default room for
	// 4 full contexts, at most 1 GiB.
	KVCacheBytes int64
	// KVType is the cache's element type; the zero value is F16.
	KVType model.KVType
	// BlockSize is the KV block size in tokens; default 16.
	BlockSize int
	// MaxBatchTokens is the token budget of one forward pass; default 512.
	MaxBatchTokens int
	// MaxSeqs bounds the sequences running at once; default 64.
	MaxSeqs int
	// Threads for the CPU backend; default GOMAXPROCS.
	Threads int
	Logger  *slog.Logger

	// Draft is a draft model for speculative decoding; it must share the
	// target's vocabulary. The engine takes ownership of it.
	Draft *model.Model
	// NGram turns on n-gram prompt lookup as the proposer when there is no
	// draft model.
	NGram bool
	// DraftTokens is the most tokens proposed per step (k); default 4.
	DraftTokens int
}

// Engine serves one model. Create it with New and stop it with Close.
type Engine struct {
	info   engine.Model
	model  *model.Model
	tok    *tokenizer.Tokenizer
	tmpl   *chat.Template
	opts   Options
	ctxLen int
	log    *slog.Logger

	// Owned by the loop goroutine.
	be          *cpu.Backend
	runner      *model.Runner
	kv          *model.KV
	cache       *kvcache.Manager
	draft       *model.Model // nil without a draft model
	draftRunner *model.Runner
	draftKV     *model.KV // indexed by the same block ids as kv

	submit  chan *request
	quit    chan struct{}
	done    chan struct{}
	closing sync.Once

	statsMu sync.Mutex
	stats   Stats
}

// Stats are the engine's counters, for metrics.
type Stats struct {
	Cache       kvcache.Stats
	Preemptions int64
	Steps       int64
	Running     int
	Waiting     int
}

// New starts an engine over m, which it takes ownership of (Close closes it).
func New(m *model.Model, opts Options) (*Engine, error) {
	tok, err := tokenizer.FromGGUF(m.File.Metadata)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if tok.Size() != m.Config.VocabSize {
		return nil, fmt.Errorf("tokenizer has %d tokens but the model's output has %d", tok.Size(), m.Config.VocabSize)
	}
	src, _ := m.File.Metadata.String("tokenizer.chat_template")
	tmpl, err := chat.NewWithOptions(src, chat.Options{BOS: tok.Text(tok.BOS()), EOS: tok.Text(tok.EOS())})
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	o := opts
	if o.ID == "" {
		o.ID = m.Config.Name
		if o.ID == "" {
			o.ID = "model"
		}
	}
	if o.OwnedBy == "" {
		o.OwnedBy = "rill"
	}
	if o.BlockSize == 0 {
		o.BlockSize = kvcache.DefaultBlockSize
	}
	if o.MaxBatchTokens == 0 {
		o.MaxBatchTokens = 512
	}
	if o.MaxSeqs == 0 {
		o.MaxSeqs = 64
	}
	if o.DraftTokens == 0 {
		o.DraftTokens = 4
	}
	if o.DraftTokens < 0 || o.DraftTokens > 32 {
		return nil, fmt.Errorf("draft tokens %d: want 1 to 32", o.DraftTokens)
	}
	if o.Draft != nil {
		if err := sameVocabulary(tok, o.Draft); err != nil {
			return nil, err
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctxLen := m.Config.ContextLength
	if o.ContextLength > 0 {
		ctxLen = o.ContextLength
	}
	perBlock := model.KVBytesPerBlock(&m.Config, o.KVType, o.BlockSize)
	if o.Draft != nil {
		perBlock += model.KVBytesPerBlock(&o.Draft.Config, o.KVType, o.BlockSize)
	}
	if o.KVCacheBytes == 0 {
		o.KVCacheBytes = min(4*int64(ctxLen)/int64(o.BlockSize)*perBlock, 1<<30)
	}
	nBlocks := int(o.KVCacheBytes / perBlock)
	if nBlocks < 2 {
		return nil, fmt.Errorf("kv cache budget of %d bytes holds %d blocks of %d bytes; need at least 2", o.KVCacheBytes, nBlocks, perBlock)
	}
	kv, err := model.NewKV(&m.Config, o.KVType, nBlocks, o.BlockSize)
	if err != nil {
		return nil, err
	}
	cache, err := kvcache.New(kvcache.Options{NumBlocks: nBlocks, BlockSize: o.BlockSize, Scope: o.ID})
	if err != nil {
		return nil, err
	}
	be := cpu.New(cpu.Options{Threads: o.Threads})
	// Drafting adds up to k tokens per running sequence to a step.
	maxTokens := o.MaxBatchTokens + o.MaxSeqs*o.DraftTokens
	e := &Engine{
		info: engine.Model{
			ID: o.ID, OwnedBy: o.OwnedBy, Created: time.Now().Unix(),
			ContextLength: ctxLen, Description: o.Description, PrefixCache: true,
			Drafting: o.Draft != nil || o.NGram,
		},
		model: m, tok: tok, tmpl: tmpl, opts: o, ctxLen: ctxLen, log: o.Logger,
		be: be, runner: model.NewRunner(m, be, maxTokens), kv: kv, cache: cache,
		submit: make(chan *request),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if o.Draft != nil {
		e.draft = o.Draft
		e.draftRunner = model.NewRunner(o.Draft, be, maxTokens)
		if e.draftKV, err = model.NewKV(&o.Draft.Config, o.KVType, nBlocks, o.BlockSize); err != nil {
			be.Close()
			return nil, err
		}
	}
	o.Logger.Info("kv cache",
		slog.String("model", o.ID),
		slog.Int("blocks", nBlocks),
		slog.Int("block_tokens", o.BlockSize),
		slog.Int("tokens", nBlocks*o.BlockSize),
		slog.Int64("bytes", int64(nBlocks)*perBlock),
		slog.String("type", o.KVType.String()),
		slog.Int("context_length", ctxLen),
		slog.String("chat_template", tmpl.Name()),
		slog.String("speculative", e.proposerName()),
		slog.Int("draft_tokens", o.DraftTokens))
	go e.loop()
	return e, nil
}

// Close stops the loop, fails requests in flight and releases the model.
// It waits for the loop to end.
func (e *Engine) Close() error {
	e.closing.Do(func() { close(e.quit) })
	<-e.done
	e.be.Close()
	if e.draft != nil {
		e.draft.Close()
	}
	return e.model.Close()
}

// proposerName says which proposer drafts for requests without a prediction.
func (e *Engine) proposerName() string {
	switch {
	case e.draft != nil:
		return "draft model " + e.draft.Config.Name
	case e.opts.NGram:
		return "ngram"
	}
	return "off"
}

// sameVocabulary refuses a draft model whose vocabulary differs from the
// target's: draft token ids must mean the same text to both models.
func sameVocabulary(target *tokenizer.Tokenizer, draft *model.Model) error {
	dt, err := tokenizer.FromGGUF(draft.File.Metadata)
	if err != nil {
		return fmt.Errorf("draft model tokenizer: %w", err)
	}
	if dt.Size() != target.Size() || draft.Config.VocabSize != target.Size() {
		return fmt.Errorf("draft model vocabulary has %d tokens, the target's %d: a draft model must share the target's vocabulary", dt.Size(), target.Size())
	}
	tv, dv := target.Vocab(), dt.Vocab()
	for i := range tv.Tokens {
		if tv.Tokens[i] != dv.Tokens[i] {
			return fmt.Errorf("draft model vocabulary differs from the target's at token %d (%q vs %q): a draft model must share the target's vocabulary", i, dv.Tokens[i], tv.Tokens[i])
		}
	}
	if tv.BOS != dv.BOS || tv.EOS != dv.EOS {
		return fmt.Errorf("draft model special tokens differ from the target's (BOS %d/%d, EOS %d/%d)", dv.BOS, tv.BOS, dv.EOS, tv.EOS)
	}
	return nil
}

// Models implements engine.Engine.
func (e *Engine) Models() []engine.Model { return []engine.Model{e.info} }

// Tokenizer exposes the model's tokenizer (read-only), for tools and tests.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// ErrClosed is the error of requests cut short by Close.
var ErrClosed = errors.New("engine closed")

// Generate implements engine.Engine.
func (e *Engine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q (this server has %q)", engine.ErrUnknownModel, req.Model, e.info.ID)
	}
	prompt, err := e.promptTokens(req)
	if err != nil {
		return nil, err
	}
	maxTokens := req.MaxTokens
	room := e.ctxLen - len(prompt)
	switch {
	case room <= 0:
		return nil, engine.Errorf(engine.CodeContextLengthExceeded, promptParam(req),
			"This model's maximum context length is %d tokens. However, your prompt is %d tokens.", e.ctxLen, len(prompt))
	case maxTokens > room:
		return nil, engine.Errorf(engine.CodeContextLengthExceeded, "max_tokens",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the prompt or the completion length.",
			e.ctxLen, len(prompt)+maxTokens, len(prompt), maxTokens)
	case maxTokens == 0:
		maxTokens = room
	}
	if need := e.cache.BlocksFor(len(prompt) + 1); need > e.cache.NumBlocks() {
		return nil, engine.Errorf(engine.CodeContextLengthExceeded, promptParam(req),
			"the prompt of %d tokens does not fit in this server's KV cache of %d tokens", len(prompt), e.cache.NumBlocks()*e.cache.BlockSize())
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > 20 {
		return nil, engine.Errorf("", "top_logprobs", "top_logprobs must be between 0 and 20")
	}

	r := &request{
		ctx:       ctx,
		req:       req,
		prompt:    prompt,
		maxTokens: maxTokens,
		out:       newStream(ctx),
		arrival:   time.Now(),
	}
	if !req.NoDraft {
		switch {
		case req.Prediction != "":
			r.draft = draftPrediction
			for _, id := range e.tok.Encode(req.Prediction, tokenizer.EncodeOptions{Continuation: true}) {
				r.prediction = append(r.prediction, int32(id))
			}
		case e.draft != nil:
			r.draft = draftModel
		case e.opts.NGram:
			r.draft = draftNGram
		}
	}
	seed := rand.Uint64()
	if req.Sampling.Seed != nil {
		seed = uint64(*req.Sampling.Seed)
	}
	for i := range req.Choices() {
		r.seqs = append(r.seqs, e.newSeq(r, i, seed))
	}
	select {
	case e.submit <- r:
		return r.out, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.quit:
		return nil, ErrClosed
	}
}

func promptParam(req *engine.Request) string {
	if req.Messages != nil {
		return "messages"
	}
	return "prompt"
}

// promptTokens tokenises the request's prompt: chat messages through the
// template, text with BOS and special tokens parsed (as llama.cpp's server
// does), token ids as given.
func (e *Engine) promptTokens(req *engine.Request) ([]int32, error) {
	var ids []int
	switch {
	case req.Messages != nil:
		if len(req.Messages) == 0 {
			return nil, engine.Errorf("", "messages", "messages must not be empty")
		}
		text, err := e.tmpl.Render(req.Messages, true)
		if err != nil {
			var re *chat.RenderError
			if errors.As(err, &re) && re.Raised {
				// The template refused the conversation (roles that do not
				// alternate, say): the client's to fix.
				return nil, engine.Errorf("", "messages", "%s", re.Msg)
			}
			return nil, engine.Errorf("", "messages", "the model's chat template failed on these messages: %v", err)
		}
		// Templates that write bos_token themselves would get a second BOS
		// from the tokenizer; llama.cpp drops the template's.
		if bos := e.tok.Text(e.tok.BOS()); bos != "" && e.tok.Vocab().AddBOS {
			text = strings.TrimPrefix(text, bos)
		}
		ids = e.tok.Encode(text, encodeWithBOS)
	case req.PromptTokens != nil:
		for i, id := range req.PromptTokens {
			if !e.tok.Valid(id) {
				return nil, engine.Errorf("", "prompt", "prompt token %d at index %d is outside the vocabulary of %d tokens", id, i, e.tok.Size())
			}
		}
		ids = req.PromptTokens
	default:
		ids = e.tok.Encode(req.Prompt, encodeWithBOS)
	}
	if len(ids) == 0 {
		return nil, engine.Errorf("", promptParam(req), "the prompt is empty")
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

// encodeWithBOS tokenises prompts as llama.cpp's server does: BOS added per
// the vocabulary, special-token text parsed.
var encodeWithBOS = tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}
