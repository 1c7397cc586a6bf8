// Package native is rill's embedded engine: it implements engine.Engine
// over one model on a compute backend (a Compute, which makes the Runners
// that compute whole forward passes; the CPU backend's is
// engine/native/cpurun), with continuous batching, a paged KV cache with
// automatic prefix caching, and speculative decoding.
//
// The work is split the vLLM v1 way: engine/sched decides what each step
// computes, engine/kvcache allocates blocks, and this package does the rest:
// it renders chat templates and tokenises (on the caller's goroutine, in
// Generate), runs the model over each step's plan, shapes the logits of
// constrained choices (response_format, forced tool calls, logit_bias; see
// constrain.go), samples, drafts and verifies, detokenises, parses tool
// calls, and streams events.
//
// One goroutine, the loop (Run), owns the runners (and through them the KV
// cache's memory), the scheduler and every sequence. Events flow to each
// request's consumer through an engine.Queue that never blocks the loop; a
// request whose consumer falls behind is paused until it catches up.
package native

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"rill/engine"
	"rill/engine/chat"
	"rill/engine/grammar"
	"rill/engine/kvcache"
	"rill/engine/model"
	"rill/engine/promptcache"
	"rill/engine/sched"
	"rill/engine/tokenizer"
	"rill/engine/toolcall"
)

// Options configure an Engine. Zero values mean the defaults.
type Options struct {
	// ID is the model name clients use; default the GGUF general.name.
	ID          string
	Description string
	OwnedBy     string
	// ContextLength caps prompt + completion; default the model's training context.
	ContextLength int
	// ChatTemplate is a Jinja chat template that replaces the model's own
	// (tokenizer.chat_template), for models that ship a broken or outdated
	// one; empty keeps the model's. The tool-call format and the reasoning
	// markers are then read from it, as from the model's.
	ChatTemplate string
	// MaxTokensPolicy says what a request's max_tokens beyond what the
	// context leaves after its prompt does; the zero value clamps it.
	MaxTokensPolicy engine.MaxTokensPolicy
	// KVCacheBytes is the memory budget of the KV cache; default room for
	// 4 full contexts, at most 1 GiB.
	KVCacheBytes int64
	// KVType is the cache's element type; the zero value is F16.
	KVType model.KVType
	// BlockSize is the KV block size in tokens; default 16.
	BlockSize int
	// FullSlidingKV keeps every position of a model's sliding-window
	// layers, in one block pool with its other layers, as a model without
	// windows. By default a model with both kinds of layers (gemma2,
	// gemma3, gpt-oss) keeps its sliding layers in a pool of their own
	// that holds only each sequence's window (see sched.Options.Window),
	// so that the budget holds more tokens; the disk tier of the prompt
	// cache is then not used.
	FullSlidingKV bool
	// MaxBatchTokens is the token budget of one forward pass; default 512.
	MaxBatchTokens int
	// MaxSeqs bounds the sequences (choices) decoding at once; default 64.
	MaxSeqs int
	// MaxQueuedRequests bounds the requests waiting to start beyond the
	// free decoding slots; past it Generate fails with engine.ErrOverloaded.
	// Default 256.
	MaxQueuedRequests int
	// StreamBuffer is how many events per choice a request's stream holds
	// before the request is paused until its consumer catches up; default 64.
	StreamBuffer int

	Logger *slog.Logger

	// Draft is a draft model for speculative decoding; it must share the
	// target's vocabulary. The engine takes ownership of it.
	Draft *model.Model
	// NGram turns on n-gram prompt lookup as the proposer when there is no
	// draft model.
	NGram bool
	// DraftTokens is the most tokens proposed per step (k); default 4.
	DraftTokens int

	// JSON shapes the JSON that constrained output is held to: response
	// formats (json_object, json_schema) and tool-call arguments. The zero
	// value is compact JSON, no whitespace between tokens, as OpenAI
	// writes it; grammar.BoundedWhitespace allows short runs for models
	// that pretty-print.
	JSON grammar.JSONOptions

	// PromptCache, when set, is the prompt cache's disk tier, which the
	// engine uses and does not own (engines of several models may share
	// one): KV blocks are written there behind the loop as they are
	// computed (and when evicted, if the write queue was full then),
	// Close saves every cached block the disk lacks, and a prompt whose
	// prefix misses memory loads what the disk holds of it, counted as
	// cached tokens. Blocks are keyed by the model file's fingerprint and
	// the cache's layout, so a model only ever reads its own. Not
	// supported with a draft model (ignored, with a warning).
	PromptCache *promptcache.Dir
	// PromptCacheSaveTime bounds how long Close spends saving the cache to
	// PromptCache; default DefaultPromptCacheSaveTime.
	PromptCacheSaveTime time.Duration
}

// Defaults of Options.
const (
	DefaultDraftTokens  = 4
	DefaultStreamBuffer = 64
	// defaultKVContexts is how many full contexts the default KV cache
	// holds, up to defaultKVBytesMax.
	defaultKVContexts = 4
	defaultKVBytesMax = 1 << 30
)

// Engine serves one model. Create it with New, run it with Run, stop it
// with Close.
type Engine struct {
	info  engine.ModelCard
	model *model.Model
	tok   *tokenizer.Tokenizer
	tmpl  *chat.Template
	think thinkMarkers
	// controlTexts are the texts of the control tokens, which no string
	// of a chat request may turn into those tokens.
	controlTexts []string
	opts         Options
	ctxLen       int
	log          *slog.Logger
	// now is the clock of the date a chat template sees.
	now func() time.Time

	// toolFormat is how this model writes tool calls, from its chat
	// template; markers are its control tokens that stand for tool-call
	// markers (decoded as their text where calls are read or constrained).
	toolFormat toolcall.Format
	markers    map[int]string
	// The grammar's vocabulary, built on first use (grammarVocab).
	gvocabOnce sync.Once
	gvocab     *grammar.Vocab
	gvocabErr  error

	compute Compute // made the runners; Close closes it

	// Owned by Run's goroutine.
	runner      Runner
	cache       *kvcache.Manager
	window      *kvcache.Manager // the sliding layers' pool; nil when not split
	sched       *sched.Scheduler
	draft       *model.Model // nil without a draft model
	draftRunner Runner       // its cache uses the same block ids as runner's
	loop        loopState
	disk        *diskTier // nil without Options.PromptCache

	submit    chan *request
	embeds    chan *embedJob
	wake      chan struct{} // cap 1: a request was cancelled or a consumer caught up
	quit      chan struct{}
	done      chan struct{} // closed when Run returns
	started   atomic.Bool
	closeOnce sync.Once

	statsMu sync.Mutex
	stats   Stats

	// beforeForward, when set (by tests), is called with every step's plan
	// before the forward pass.
	beforeForward func(*sched.Plan)
}

// Stats are the engine's counters, for metrics.
type Stats struct {
	Cache kvcache.Stats
	// WindowCache is the sliding layers' pool, when they have one.
	WindowCache kvcache.Stats
	Preemptions int64
	Steps       int64
	Running     int // sequences scheduled each step
	Paused      int // sequences of requests whose consumer is behind
	Waiting     int // sequences waiting for admission
	Queued      int // requests that have not started
}

// New returns an engine over m whose forward passes c computes. It takes
// ownership of m, c and opts.Draft (Close closes them); on error the caller
// keeps it. The engine serves nothing until Run runs.
func New(m *model.Model, c Compute, opts Options) (*Engine, error) {
	if c == nil {
		return nil, errors.New("native: no compute backend")
	}
	tok, err := tokenizer.FromGGUF(m.File.Metadata)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if tok.Size() != m.Config.VocabSize {
		return nil, fmt.Errorf("tokenizer has %d tokens but the model's output has %d", tok.Size(), m.Config.VocabSize)
	}
	o := withDefaults(opts, m)
	if o.Draft != nil {
		if err := sameVocabulary(tok, o.Draft); err != nil {
			return nil, err
		}
	}
	ctxLen := m.Config.ContextLength
	if o.ContextLength > 0 {
		ctxLen = o.ContextLength
	}
	src, _ := m.File.Metadata.String("tokenizer.chat_template")
	if o.ChatTemplate != "" {
		src = o.ChatTemplate
	}
	tmpl, err := chat.NewWithOptions(src, chat.Options{BOS: tok.Text(tok.BOS()), EOS: tok.Text(tok.EOS()),
		MaxOutput: maxPromptBytes(tok, ctxLen)})
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	perBlock := model.KVBytesPerBlock(&m.Config, o.KVType, o.BlockSize)
	if o.Draft != nil {
		perBlock += model.KVBytesPerBlock(&o.Draft.Config, o.KVType, o.BlockSize)
	}
	if o.KVCacheBytes <= 0 {
		o.KVCacheBytes = min(defaultKVContexts*int64(ctxLen)/int64(o.BlockSize)*perBlock, defaultKVBytesMax)
	}
	sz := sizeKV(&m.Config, &o, perBlock)
	nBlocks := sz.blocks
	if nBlocks < 2 {
		return nil, fmt.Errorf("kv cache budget of %d bytes holds %d blocks of %d bytes; need at least 2", o.KVCacheBytes, nBlocks, sz.perBlock)
	}
	spec := RunnerSpec{
		// Drafting adds up to k tokens per running sequence to a step.
		MaxTokens: o.MaxBatchTokens + o.MaxSeqs*o.DraftTokens,
		// Long-context Phi-3 picks its RoPE factors by the served
		// context, as llama.cpp picks them by n_ctx.
		ContextLength: ctxLen,
		KVType:        o.KVType,
		Blocks:        nBlocks,
		BlockSize:     o.BlockSize,
	}
	var window *kvcache.Manager
	if sz.windowBlocks > 0 {
		window, err = kvcache.New(kvcache.Options{NumBlocks: sz.windowBlocks, BlockSize: o.BlockSize, Scope: o.ID, Window: m.Config.SlidingWindow})
		if err != nil {
			return nil, err
		}
		spec.WindowBlocks = window.TableBlocks()
	}
	runner, err := c.NewRunner(m, spec)
	if err != nil {
		return nil, err
	}
	var draftRunner Runner
	if o.Draft != nil {
		dspec := spec
		dspec.WindowBlocks = 0 // the draft model keeps all its layers with the target's full ones
		if draftRunner, err = c.NewRunner(o.Draft, dspec); err != nil {
			return nil, fmt.Errorf("draft model: %w", err)
		}
	}
	var disk *diskTier
	kvOpts := kvcache.Options{NumBlocks: nBlocks, BlockSize: o.BlockSize, Scope: o.ID}
	if o.PromptCache != nil {
		// Blocks go to disk as soon as they are computed (a crash then
		// loses only what is queued) and, if that found the queue full,
		// when they are evicted.
		kvOpts.Indexed = func(id int32, l kvcache.Link) {
			if disk != nil && disk.writeThrough {
				disk.save(id, l)
			}
		}
		kvOpts.Evict = func(id int32, l kvcache.Link) {
			if disk != nil {
				disk.save(id, l)
			}
		}
	}
	cache, err := kvcache.New(kvOpts)
	if err != nil {
		return nil, err
	}
	if o.PromptCache != nil {
		// Last, after everything that can fail: it starts the writer.
		disk = newDiskTier(o.PromptCache, m, runner, &o, window != nil)
	}
	params, active := m.Params()
	e := &Engine{
		info: engine.ModelCard{
			Params: params, ActiveParams: active,
			ID: o.ID, OwnedBy: o.OwnedBy, Created: time.Now().Unix(),
			ContextLength: ctxLen, Description: o.Description, PrefixCache: true,
			Drafting: o.Draft != nil || o.NGram,
		},
		model: m, tok: tok, tmpl: tmpl, opts: o, ctxLen: ctxLen, log: o.Logger, now: time.Now,
		think: findThinkMarkers(tok, src), controlTexts: tok.ControlTexts(),
		toolFormat: toolcall.Detect(src), markers: markerTokens(tok),
		compute: c, runner: runner, cache: cache, window: window, draft: o.Draft, draftRunner: draftRunner, disk: disk,
		submit: make(chan *request),
		embeds: make(chan *embedJob),
		wake:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	e.sched = sched.New(cache, sched.Options{
		MaxBatchTokens: o.MaxBatchTokens,
		MaxRunning:     o.MaxSeqs,
		MaxQueued:      o.MaxQueuedRequests,
		DraftLen:       e.draftLen,
		LockstepDraft:  o.Draft != nil,
		Load:           e.loadFromDisk,
		Window:         window,
	})
	o.Logger.Info("kv cache",
		slog.String("model", o.ID),
		slog.Int("blocks", nBlocks),
		slog.Int("block_tokens", o.BlockSize),
		slog.Int("tokens", nBlocks*o.BlockSize),
		slog.Int64("bytes", int64(nBlocks)*sz.perBlock+int64(sz.windowBlocks)*sz.windowPerBlock),
		slog.Int("window_blocks", sz.windowBlocks),
		slog.String("type", o.KVType.String()),
		slog.Int("context_length", ctxLen),
		slog.String("chat_template", tmpl.Name()),
		slog.Bool("chat_template_override", o.ChatTemplate != ""),
		slog.Bool("reasoning", e.think.reasons() || e.toolFormat == toolcall.Harmony),
		slog.String("tool_format", string(e.toolFormat)),
		slog.String("speculative", e.proposerName()),
		slog.Int("draft_tokens", o.DraftTokens),
		slog.Int("json_max_whitespace", max(o.JSON.MaxWhitespace, 0)),
		slog.Int("max_seqs", o.MaxSeqs),
		slog.Int("max_queued_requests", o.MaxQueuedRequests))
	if disk != nil {
		st := o.PromptCache.Stats()
		o.Logger.Info("prompt cache on disk", slog.String("model", o.ID), slog.String("dir", o.PromptCache.Path()),
			slog.Int64("max_bytes", o.PromptCache.MaxBytes()), slog.Int("blocks", st.Blocks), slog.Int64("bytes", st.Bytes))
	}
	return e, nil
}

// kvSizing is how the KV budget is split into blocks.
type kvSizing struct {
	blocks   int   // blocks of the full layers (all layers when not split)
	perBlock int64 // their bytes, the draft model's included
	// windowBlocks is the sliding layers' pool (0: not split), of
	// windowPerBlock bytes a block.
	windowBlocks   int
	windowPerBlock int64
}

// sizeKV splits o.KVCacheBytes between the full layers' blocks and, for a
// model with both sliding-window and full-attention layers (unless
// o.FullSlidingKV), the sliding layers' pool. A sequence holds at most
// its window, the blocks its step adds and one block that straddles in
// that pool, so the pool is sized for o.MaxSeqs such sequences plus the
// step budget (every running sequence at its most), and the rest of the
// budget goes to the full layers' blocks, which bound the tokens held.
// When the budget cannot hold that pool and more full blocks than one
// pool of every layer would (windows long for the budget), the layers
// share one pool as without windows. perBlock is the bytes of a block of
// every layer (and the draft model's).
func sizeKV(c *model.Config, o *Options, perBlock int64) kvSizing {
	n := c.SlidingLayers()
	if o.FullSlidingKV || n == 0 || n == c.Layers {
		return kvSizing{blocks: int(o.KVCacheBytes / perBlock), perBlock: perBlock}
	}
	_, win := model.KVSplitBytesPerBlock(c, o.KVType, o.BlockSize)
	full := perBlock - win // the draft model's layers stay with the full ones
	bs := o.BlockSize
	perSeq := (c.SlidingWindow-1+bs-1)/bs + 2
	step := o.MaxBatchTokens
	if o.Draft != nil || o.NGram {
		step += o.MaxSeqs * o.DraftTokens
	}
	need := int64(o.MaxSeqs*perSeq + (step+bs-1)/bs)
	// Equal pools while the window pool is below what it needs; past that,
	// the window pool stops at need and the rest holds full blocks.
	// The hole block of the window pool's memory is counted in win.
	one := kvSizing{blocks: int(o.KVCacheBytes / perBlock), perBlock: perBlock}
	b := o.KVCacheBytes - win
	if b/(full+win) <= need {
		// The window pool would be as large as the full one: two pools
		// would hold no more tokens than one (a budget below MaxSeqs
		// windows), and a window pool's prefix hits are stricter.
		return one
	}
	nf := (b - need*win) / full
	if int(nf) <= one.blocks {
		return one
	}
	return kvSizing{blocks: int(nf), perBlock: full, windowBlocks: int(need), windowPerBlock: win}
}

// maxPromptBytes bounds what the chat template may build: a prompt longer
// than MaxTokenBytes per token of the context cannot fit (the tokenizer's
// own first check, see Engine.encode), so a render stops as soon as it would build one,
// having copied at most that much of an oversized conversation. The slack
// is for templates that build a little more than they keep.
func maxPromptBytes(tok *tokenizer.Tokenizer, ctxLen int) int {
	const slack = 64 << 10
	per := max(tok.MaxTokenBytes(), 1)
	if ctxLen > (chat.DefaultMaxOutput-slack)/per {
		return chat.DefaultMaxOutput
	}
	return per*ctxLen + slack
}

// withDefaults fills in opts' zero (or negative) values.
func withDefaults(o Options, m *model.Model) Options {
	if o.ID == "" {
		o.ID = m.Config.Name
		if o.ID == "" {
			o.ID = "model"
		}
	}
	if o.OwnedBy == "" {
		o.OwnedBy = "rill"
	}
	if o.BlockSize <= 0 {
		o.BlockSize = kvcache.DefaultBlockSize
	}
	if o.MaxBatchTokens <= 0 {
		o.MaxBatchTokens = sched.DefaultMaxBatchTokens
	}
	if o.MaxSeqs <= 0 {
		o.MaxSeqs = sched.DefaultMaxRunning
	}
	if o.MaxQueuedRequests <= 0 {
		o.MaxQueuedRequests = sched.DefaultMaxQueued
	}
	if o.StreamBuffer <= 0 {
		o.StreamBuffer = DefaultStreamBuffer
	}
	if o.DraftTokens <= 0 {
		o.DraftTokens = DefaultDraftTokens
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PromptCacheSaveTime <= 0 {
		o.PromptCacheSaveTime = DefaultPromptCacheSaveTime
	}
	return o
}

// Close stops Run (and waits for it to return), fails the requests in
// flight with ErrClosed, saves the cached blocks to the disk tier (within
// Options.PromptCacheSaveTime), and releases the compute backend, the
// model and the draft model. Later calls do nothing.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		close(e.quit)
		if e.started.Load() {
			<-e.done
		}
		if e.disk != nil {
			e.disk.close(e.cache, e.opts.PromptCacheSaveTime)
		}
		err = e.compute.Close()
		if e.draft != nil {
			e.draft.Close()
		}
		err = errors.Join(err, e.model.Close())
	})
	return err
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
	// Every end-of-generation token, not just EOS: a draft that proposes
	// past an EOT the target stops at wastes its proposals, and one that
	// stops where the target goes on proposes nothing.
	for i := range tv.Tokens {
		if target.IsEOG(i) != dt.IsEOG(i) {
			return fmt.Errorf("draft model and target disagree on whether token %d (%q) ends generation: a draft model must share the target's vocabulary", i, tv.Tokens[i])
		}
	}
	return nil
}

// Models implements engine.Engine.
func (e *Engine) Models() []engine.ModelCard { return []engine.ModelCard{e.info} }

// Tokenizer exposes the model's tokenizer (read-only), for tools and tests.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Stats returns a snapshot of the engine's counters, as of the last step.
func (e *Engine) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// ErrClosed is the error of requests cut short by Close (or the end of
// Run's context), and of Generate after it.
var ErrClosed = errors.New("engine closed")
