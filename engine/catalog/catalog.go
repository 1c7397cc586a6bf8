// Package catalog decides which models are loaded: it serves a fixed set of
// models as one engine.Engine, loads a model when a request first names it,
// and unloads models that sit idle past their TTL or must make room under a
// cap on loaded models or a memory budget (least recently used first, never
// a pinned one). It is what `rill serve --models-dir` serves.
//
// A catalogue knows nothing of GGUF or backends: each model comes with an
// Open function that returns its running engine, and Close on that engine
// must release everything the model holds.
package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"rill/engine"
)

// Engine is a loaded model: it serves the model until Close, which ends
// its requests still in flight and frees the model's memory.
type Engine interface {
	engine.Engine
	io.Closer
}

// Model is one model of the catalogue.
type Model struct {
	// ID is the name requests use. Required, unique.
	ID string
	// Card is what /v1/models shows of the model until its first load
	// (its ID is ID); after a load, the engine's own card.
	Card engine.ModelCard
	// Open loads the model and returns its engine, serving. The catalogue
	// calls it for one model at a time.
	Open func() (Engine, error)
	// TTL is how long the model may sit idle (no request in flight) before
	// it is unloaded: 0 means Options.TTL, negative means never.
	TTL time.Duration
	// Pinned models are loaded by LoadPinned and never unloaded by a TTL
	// or to make room; only an operator's UnloadModel unloads them.
	Pinned bool
	// Size is the memory the model takes when loaded, in bytes (an
	// estimate: its file and its KV cache), for Options.MemoryBudget.
	Size int64
}

// Options of a catalogue; the zero value means no limits and the defaults.
type Options struct {
	// MaxLoaded caps the models loaded at once; 0: no cap.
	MaxLoaded int
	// MemoryBudget caps the sum of the loaded models' Size; 0: no budget.
	MemoryBudget int64
	// TTL is the idle time after which a model is unloaded, for models
	// whose own TTL is 0; 0: never.
	TTL time.Duration
	// Grace is how long an unload lets the model's streams finish before
	// it cancels them; 0: DefaultGrace.
	Grace time.Duration
	// MaxWaiting bounds the requests that wait for one model's load; past
	// it requests are refused with engine.ErrOverloaded. 0: DefaultMaxWaiting.
	MaxWaiting int
	Logger     *slog.Logger
}

// Defaults of Options.
const (
	DefaultGrace      = 30 * time.Second
	DefaultMaxWaiting = 256
)

// ErrUnloaded is the cause with which the contexts of a model's requests
// are cancelled when an unload's grace period runs out; their streams then
// end with it (wrapped) instead of the context's error, which would read
// as the client's cancel. It is engine.ErrModelUnloaded.
var ErrUnloaded = engine.ErrModelUnloaded

// ErrClosed is returned by Generate after Close.
var ErrClosed = errors.New("catalog closed")

// stateUnloading is a loaded model on its way out: its streams finish,
// new requests wait for it to be gone and load it again.
const stateUnloading = "unloading"

// Catalog serves its models as one engine.Engine, loading them on demand.
// It is safe for concurrent use. Close ends its janitor and unloads all.
type Catalog struct {
	opts    Options
	log     *slog.Logger
	entries []*entry
	byID    map[string]*entry

	// loadMu makes loads one at a time: a load first makes room, and two
	// loads making room at once would each count the other's model out.
	loadMu sync.Mutex

	mu     sync.Mutex
	closed bool
	nextID uint64

	quit, done chan struct{}
	closeOnce  sync.Once
}

// entry is one model and its state, guarded by Catalog.mu.
type entry struct {
	Model
	state   string
	eng     Engine
	card    engine.ModelCard
	loadErr error
	// ready is closed when the load or unload in progress ends; nil when
	// the state is settled (loaded or unloaded).
	ready chan struct{}
	// streams are the cancel functions of the requests in flight.
	streams map[uint64]context.CancelCauseFunc
	// drained is closed when the last stream of an unloading model ends.
	drained  chan struct{}
	lastUsed time.Time
	waiting  int

	loads, failures int64
	unloads         map[string]int64
}

// New returns a catalogue of models, none loaded; LoadPinned loads the
// pinned ones. It starts the janitor that unloads idle models when any
// model has a TTL; Close stops it.
func New(models []Model, opts Options) (*Catalog, error) {
	if len(models) == 0 {
		return nil, errors.New("catalog: no models")
	}
	c := &Catalog{opts: opts, log: cmp.Or(opts.Logger, slog.Default()), byID: make(map[string]*entry),
		quit: make(chan struct{}), done: make(chan struct{})}
	if c.opts.Grace <= 0 {
		c.opts.Grace = DefaultGrace
	}
	if c.opts.MaxWaiting <= 0 {
		c.opts.MaxWaiting = DefaultMaxWaiting
	}
	for i, m := range models {
		switch {
		case m.ID == "":
			return nil, fmt.Errorf("catalog: model %d has no id", i)
		case m.Open == nil:
			return nil, fmt.Errorf("catalog: model %q has no Open", m.ID)
		case c.byID[m.ID] != nil:
			return nil, fmt.Errorf("catalog: model %q is listed twice", m.ID)
		case opts.MemoryBudget > 0 && m.Size > opts.MemoryBudget:
			return nil, fmt.Errorf("catalog: model %q needs about %d bytes, more than the memory budget of %d", m.ID, m.Size, opts.MemoryBudget)
		}
		e := &entry{Model: m, state: engine.StateUnloaded, card: m.Card,
			streams: make(map[uint64]context.CancelCauseFunc), unloads: make(map[string]int64)}
		e.card.ID = m.ID
		c.entries = append(c.entries, e)
		c.byID[m.ID] = e
	}
	if tick := c.tick(); tick > 0 {
		go c.janitor(tick)
	} else {
		close(c.done)
	}
	return c, nil
}

// ttl is e's idle TTL; 0 for never.
func (c *Catalog) ttl(e *entry) time.Duration {
	switch {
	case e.Pinned || e.TTL < 0:
		return 0
	case e.TTL > 0:
		return e.TTL
	}
	return max(c.opts.TTL, 0)
}

// tick is how often the janitor looks for idle models: a quarter of the
// shortest TTL, between 10 ms and 1 s, so that a model goes at most a
// quarter TTL (or a second) late; 0 when no model has a TTL.
func (c *Catalog) tick() time.Duration {
	var least time.Duration
	for _, e := range c.entries {
		if t := c.ttl(e); t > 0 && (least == 0 || t < least) {
			least = t
		}
	}
	if least == 0 {
		return 0
	}
	return min(max(least/4, 10*time.Millisecond), time.Second)
}

// janitor unloads idle models until Close.
func (c *Catalog) janitor(tick time.Duration) {
	defer close(c.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
			c.expire()
		}
	}
}

// expire unloads the models idle past their TTL.
func (c *Catalog) expire() {
	now := time.Now()
	var idle []*entry
	c.mu.Lock()
	for _, e := range c.entries {
		ttl := c.ttl(e)
		if e.state == engine.StateLoaded && ttl > 0 && len(e.streams) == 0 && e.waiting == 0 && now.Sub(e.lastUsed) >= ttl {
			c.beginUnload(e)
			idle = append(idle, e)
		}
	}
	c.mu.Unlock()
	for _, e := range idle {
		c.unload(e, engine.UnloadIdle)
	}
}

// Models implements engine.Engine: every model, with its state, in the
// order given to New.
func (c *Catalog) Models() []engine.ModelCard {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]engine.ModelCard, len(c.entries))
	for i, e := range c.entries {
		out[i] = e.card
		out[i].State = publicState(e.state)
		if e.loadErr != nil && e.state == engine.StateUnloaded {
			out[i].LoadError = e.loadErr.Error()
		}
	}
	return out
}

// publicState is how /v1/models shows state: a model being unloaded is
// still loaded (its memory is not free yet).
func publicState(s string) string {
	if s == stateUnloading {
		return engine.StateLoaded
	}
	return s
}

// Generate implements engine.Engine: it loads req.Model if it is not
// loaded (waiting, within ctx, for a load in progress) and hands req to
// its engine. A model that fails to load gives a wrapped
// engine.ErrModelLoad.
func (c *Catalog) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	e, ok := c.byID[req.Model]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	eng, rctx, done, err := c.acquire(ctx, e)
	if err != nil {
		return nil, err
	}
	cut := func(err error) error { return c.cut(rctx, e, err) }
	st, err := eng.Generate(rctx, req)
	if err != nil {
		done()
		return nil, cut(err)
	}
	return &stream{Stream: st, done: done, cut: cut}, nil
}

// cut is err, the error of a request on e under rctx, unless an unload's
// grace period cancelled rctx: then the error says so, and wraps
// ErrUnloaded, whatever the engine said (the context's error, or its
// Close's, which may end the stream first).
func (c *Catalog) cut(rctx context.Context, e *entry, err error) error {
	if err == nil || err == io.EOF || !errors.Is(context.Cause(rctx), ErrUnloaded) {
		return err
	}
	return fmt.Errorf("%w: model %q was unloaded before the request finished (its grace period of %v ran out)", ErrUnloaded, e.ID, c.opts.Grace)
}

// acquire returns e's engine, loading it first if need be, with the
// context a request on it runs under and the function that ends that
// request's claim on the engine (it cancels the context). Until done is
// called (or ctx ends) e is not unloaded, except by a grace period that
// runs out, which cancels the context.
func (c *Catalog) acquire(ctx context.Context, e *entry) (engine.Engine, context.Context, func(), error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, nil, nil, ErrClosed
		}
		switch e.state {
		case engine.StateLoaded:
			c.nextID++
			id := c.nextID
			rctx, cancel := context.WithCancelCause(ctx)
			e.streams[id] = cancel
			e.lastUsed = time.Now()
			eng := e.eng
			c.mu.Unlock()
			context.AfterFunc(rctx, func() { c.release(e, id) })
			return eng, rctx, func() { cancel(nil) }, nil
		case engine.StateUnloaded:
			e.state, e.ready, e.loadErr = engine.StateLoading, make(chan struct{}), nil
			go c.load(e)
		}
		if e.waiting >= c.opts.MaxWaiting {
			c.mu.Unlock()
			return nil, nil, nil, fmt.Errorf("%w: %d requests already wait for model %q to load", engine.ErrOverloaded, e.waiting, e.ID)
		}
		loading := e.state == engine.StateLoading
		ready := e.ready
		e.waiting++
		c.mu.Unlock()
		var err error
		select {
		case <-ready:
		case <-ctx.Done():
			err = ctx.Err()
		}
		c.mu.Lock()
		e.waiting--
		if err == nil && loading && e.state != engine.StateLoaded && e.loadErr != nil {
			err = e.loadErr
		}
		c.mu.Unlock()
		if err != nil {
			return nil, nil, nil, err
		}
	}
}

// release ends the request id's claim on e.
func (c *Catalog) release(e *entry, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := e.streams[id]; !ok {
		return
	}
	delete(e.streams, id)
	e.lastUsed = time.Now()
	if len(e.streams) == 0 && e.drained != nil {
		close(e.drained)
		e.drained = nil
	}
}

// load loads e (in state loading), after making room for it.
func (c *Catalog) load(e *entry) {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	start := time.Now()
	c.mu.Lock()
	victims, err := c.makeRoom(e)
	c.mu.Unlock()
	for _, v := range victims {
		c.unload(v, engine.UnloadEvicted)
	}
	var eng Engine
	if err == nil {
		eng, err = e.Open()
	}
	c.mu.Lock()
	if err == nil && c.closed {
		c.mu.Unlock()
		eng.Close()
		c.mu.Lock()
		err = ErrClosed
	}
	if err != nil {
		e.state, e.loadErr = engine.StateUnloaded, fmt.Errorf("%w: model %q: %w", engine.ErrModelLoad, e.ID, err)
		e.failures++
		c.log.Error("model failed to load", slog.String("model", e.ID), slog.Any("err", err))
	} else {
		e.state, e.eng, e.lastUsed = engine.StateLoaded, eng, time.Now()
		e.loads++
		for _, card := range eng.Models() {
			if card.ID == e.ID {
				e.card = card
			}
		}
		c.log.Info("model loaded", slog.String("model", e.ID), slog.Duration("took", time.Since(start)))
	}
	close(e.ready)
	e.ready = nil
	c.mu.Unlock()
}

// makeRoom marks for unloading the least recently used models that must
// go for e to load under the cap and the memory budget, and returns them.
// It marks none, and says why, when the pinned models leave no room.
// c.mu is held.
func (c *Catalog) makeRoom(e *entry) ([]*entry, error) {
	var loaded []*entry
	count, mem := 1, e.Size
	for _, o := range c.entries {
		if o != e && o.state == engine.StateLoaded {
			loaded = append(loaded, o)
			count++
			mem += o.Size
		}
	}
	slices.SortStableFunc(loaded, func(a, b *entry) int { return a.lastUsed.Compare(b.lastUsed) })
	over := func() bool {
		return c.opts.MaxLoaded > 0 && count > c.opts.MaxLoaded || c.opts.MemoryBudget > 0 && mem > c.opts.MemoryBudget
	}
	var victims []*entry
	for _, o := range loaded {
		if !over() {
			break
		}
		if o.Pinned {
			continue
		}
		victims = append(victims, o)
		count--
		mem -= o.Size
	}
	if over() {
		return nil, fmt.Errorf("no room: %d models loaded (cap %d), about %d bytes of a budget of %d, and the rest are pinned",
			count-1, c.opts.MaxLoaded, mem-e.Size, c.opts.MemoryBudget)
	}
	for _, v := range victims {
		c.beginUnload(v)
	}
	return victims, nil
}

// beginUnload marks e, loaded, as unloading. c.mu is held.
func (c *Catalog) beginUnload(e *entry) {
	e.state, e.ready = stateUnloading, make(chan struct{})
	if len(e.streams) > 0 {
		e.drained = make(chan struct{})
	}
}

// unload unloads e, which beginUnload marked: it lets e's streams finish
// for the grace period, cancels those left, closes e's engine, and
// returns the model's memory to the OS.
func (c *Catalog) unload(e *entry, reason string) {
	err := c.closeEngine(e)
	// A model's weight copies and KV cache are Go memory: without a
	// collection and a scavenge now, the process would keep them resident
	// for minutes. Unloads are rare; the pause is worth it. closeEngine
	// dropped every reference the catalogue held to the engine (e.eng, and
	// its own frame is gone), so this collection frees it.
	debug.FreeOSMemory()
	c.mu.Lock()
	e.state = engine.StateUnloaded
	e.unloads[reason]++
	close(e.ready)
	e.ready = nil
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("model unloaded with an error", slog.String("model", e.ID), slog.String("reason", reason), slog.Any("err", err))
		return
	}
	c.log.Info("model unloaded", slog.String("model", e.ID), slog.String("reason", reason))
}

// closeEngine takes e's engine out of e (unloading, so that nothing else
// reads e.eng), lets e's streams finish for the grace period, cancels
// those left with ErrUnloaded, and closes the engine.
func (c *Catalog) closeEngine(e *entry) error {
	c.mu.Lock()
	drained, eng := e.drained, e.eng
	e.eng = nil
	c.mu.Unlock()
	if drained != nil {
		t := time.NewTimer(c.opts.Grace)
		select {
		case <-drained:
		case <-t.C:
			c.mu.Lock()
			n := len(e.streams)
			for _, cancel := range e.streams {
				cancel(ErrUnloaded)
			}
			c.mu.Unlock()
			c.log.Warn("unload grace period over: cancelling the model's streams", slog.String("model", e.ID), slog.Int("streams", n))
			<-drained // cancelling released every claim
		}
		t.Stop()
	}
	return eng.Close()
}

// LoadPinned loads the pinned models, one after the other, and returns
// the first failure.
func (c *Catalog) LoadPinned(ctx context.Context) error {
	for _, e := range c.entries {
		if e.Pinned {
			if err := c.LoadModel(ctx, e.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// LoadModel implements engine.ModelManager.
func (c *Catalog) LoadModel(ctx context.Context, id string) error {
	e, ok := c.byID[id]
	if !ok {
		return fmt.Errorf("%w: %q", engine.ErrUnknownModel, id)
	}
	_, _, done, err := c.acquire(ctx, e)
	if err != nil {
		return err
	}
	done()
	return nil
}

// UnloadModel implements engine.ModelManager.
func (c *Catalog) UnloadModel(ctx context.Context, id string) error {
	e, ok := c.byID[id]
	if !ok {
		return fmt.Errorf("%w: %q", engine.ErrUnknownModel, id)
	}
	for {
		c.mu.Lock()
		switch e.state {
		case engine.StateUnloaded:
			c.mu.Unlock()
			return nil
		case engine.StateLoaded:
			c.beginUnload(e)
			c.mu.Unlock()
			c.unload(e, engine.UnloadOperator)
			return nil
		}
		ready := e.ready
		c.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Lifecycle implements engine.LifecycleReporter.
func (c *Catalog) Lifecycle() []engine.ModelLifecycle {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]engine.ModelLifecycle, len(c.entries))
	for i, e := range c.entries {
		out[i] = engine.ModelLifecycle{Model: e.ID, State: publicState(e.state), Loads: e.loads,
			LoadFailures: e.failures, Unloads: maps(e.unloads)}
	}
	return out
}

func maps(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Load implements engine.LoadReporter: a loaded model's engine's load
// where it reports one, and for the others the requests waiting for
// their load.
func (c *Catalog) Load() []engine.ModelLoad {
	c.mu.Lock()
	engs := make([]engine.Engine, len(c.entries))
	out := make([]engine.ModelLoad, len(c.entries))
	for i, e := range c.entries {
		out[i] = engine.ModelLoad{Model: e.ID, Waiting: e.waiting}
		if e.state == engine.StateLoaded {
			engs[i] = e.eng
		}
	}
	c.mu.Unlock()
	for i, eng := range engs {
		if lr, ok := eng.(engine.LoadReporter); ok {
			for _, l := range lr.Load() {
				if l.Model == out[i].Model {
					l.Waiting += out[i].Waiting
					out[i] = l
				}
			}
		}
	}
	return out
}

var _ engine.Tokenizer = (*Catalog)(nil)

// Tokenize implements engine.Tokenizer, loading the model as Generate does.
func (c *Catalog) Tokenize(ctx context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	t, done, err := c.tokenizer(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	return t.Tokenize(ctx, req)
}

// Detokenize implements engine.Tokenizer as Tokenize does.
func (c *Catalog) Detokenize(ctx context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	t, done, err := c.tokenizer(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	return t.Detokenize(ctx, req)
}

func (c *Catalog) tokenizer(ctx context.Context, model string) (engine.Tokenizer, func(), error) {
	e, ok := c.byID[model]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, model)
	}
	eng, _, done, err := c.acquire(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	t, ok := eng.(engine.Tokenizer)
	if !ok {
		done()
		return nil, nil, fmt.Errorf("%w: the engine of model %q has no tokenizer", engine.ErrUnsupported, model)
	}
	return t, done, nil
}

var _ engine.Embedder = (*Catalog)(nil)

// Embed implements engine.Embedder, loading the model as Generate does.
func (c *Catalog) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	e, ok := c.byID[req.Model]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	eng, _, done, err := c.acquire(ctx, e)
	if err != nil {
		return nil, err
	}
	defer done()
	em, ok := eng.(engine.Embedder)
	if !ok {
		return nil, fmt.Errorf("%w: model %q does not serve embeddings", engine.ErrUnsupported, req.Model)
	}
	return em.Embed(ctx, req)
}

var _ engine.Reranker = (*Catalog)(nil)

// Rerank implements engine.Reranker, loading the model as Generate does.
func (c *Catalog) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	e, ok := c.byID[req.Model]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	eng, _, done, err := c.acquire(ctx, e)
	if err != nil {
		return nil, err
	}
	defer done()
	rr, ok := eng.(engine.Reranker)
	if !ok {
		return nil, fmt.Errorf("%w: model %q does not rerank", engine.ErrUnsupported, req.Model)
	}
	return rr.Rerank(ctx, req)
}

// Close stops the janitor, waits for a load in progress, and unloads every
// model at once (their engines' Close ends the requests still in flight).
// Later Generate calls fail with ErrClosed. Later calls of Close do nothing.
func (c *Catalog) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		close(c.quit)
		<-c.done
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.loadMu.Lock() // a load in progress ends and sees closed
		defer c.loadMu.Unlock()
		for _, e := range c.entries {
			c.mu.Lock()
			for e.state == stateUnloading { // an operator's or the janitor's
				ready := e.ready
				c.mu.Unlock()
				<-ready
				c.mu.Lock()
			}
			eng := e.eng
			e.state, e.eng = engine.StateUnloaded, nil
			c.mu.Unlock()
			if eng != nil {
				if err := eng.Close(); err != nil {
					errs = append(errs, fmt.Errorf("close model %q: %w", e.ID, err))
				}
			}
		}
	})
	return errors.Join(errs...)
}

// stream is a request's stream that ends its claim on the model when it
// ends, and ends with ErrUnloaded when an unload cut it (cut).
type stream struct {
	engine.Stream
	done func()
	cut  func(error) error
}

// Unwrap is the model's stream, whose Ready this one shares.
func (s *stream) Unwrap() engine.Stream { return s.Stream }

// TryRecv implements engine.Stream.
func (s *stream) TryRecv() (engine.Event, bool, error) {
	ev, ok, err := s.Stream.TryRecv()
	if err != nil {
		err = s.cut(err)
		s.done()
	}
	return ev, ok, err
}
