// Package upstream is an engine.Engine over OpenAI-compatible HTTP servers:
// llama.cpp's llama-server, vLLM, SGLang, tabbyAPI, another rill, or any
// other server of the OpenAI API. It is how rill fronts GPU engines and
// spreads one model over several machines.
//
// Every request goes upstream streamed, with stream_options.include_usage,
// whatever the client asked: rill reads the upstream's counters and decides
// itself what its client sees. Each Kind maps its server's counters into
// engine.Stats (see Kind.stats).
//
// A model has one or more replicas. Each request picks one by prefix
// affinity and load (see pick), a replica that fails before the first event
// is replaced by another, and a health checker per replica takes failing
// replicas out of rotation and brings them back.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"rill/engine"
)

// Defaults for zero Options fields.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultHeaderTimeout  = 5 * time.Minute
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultHealthInterval = 5 * time.Second
	DefaultHealthTimeout  = 2 * time.Second
	DefaultPrefixBytes    = 512
	DefaultMaxImbalance   = 8
)

// Replica is one server of a model.
type Replica struct {
	// URL is the server's base URL, e.g. "http://10.0.0.7:8000"; a trailing
	// "/v1" is accepted and dropped.
	URL string
	// APIKey is sent as "Authorization: Bearer <key>"; empty sends none.
	APIKey string
}

// Options configure an Engine. Zero values mean the defaults.
type Options struct {
	// ID is the model id rill's clients use. Required.
	ID string
	// UpstreamModel is the model name sent upstream; default ID.
	UpstreamModel string
	Kind          Kind // required
	Replicas      []Replica
	// What /v1/models shows.
	Description   string
	OwnedBy       string // default the kind's name
	ContextLength int    // 0: unknown
	// Drafting says the upstream is set up for speculative decoding.
	Drafting bool
	// MaxTokensPolicy says what a max_tokens beyond what the context
	// leaves does; the zero value clamps it (see Generate).
	MaxTokensPolicy engine.MaxTokensPolicy

	// ConnectTimeout bounds dialling a replica.
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for the response headers: how long an
	// upstream may queue a request before it starts answering.
	HeaderTimeout time.Duration
	// IdleTimeout bounds the silence between two reads of a stream.
	IdleTimeout time.Duration
	// HealthInterval is the time between health checks of each replica;
	// HealthTimeout bounds one check.
	HealthInterval time.Duration
	HealthTimeout  time.Duration

	// PrefixBytes is how many bytes of the rendered prompt key prefix
	// affinity (see affinityKey); negative turns affinity off.
	PrefixBytes int
	// MaxImbalance is how many more requests in flight than the least-loaded
	// replica the affinity target may have and still be chosen.
	MaxImbalance int

	Logger *slog.Logger
	// Transport replaces the HTTP transport (tests); nil builds one from
	// the timeouts above.
	Transport http.RoundTripper
}

// Engine serves one model from its replicas. It is safe for concurrent use.
// Create it with New and stop its health checkers with Close.
type Engine struct {
	info     engine.ModelCard
	opts     Options
	caps     caps
	client   *http.Client
	replicas []*replica
	log      *slog.Logger
	rot      atomic.Uint64

	// base is cancelled by Close; health checks run under it.
	base      context.Context
	cancel    context.CancelFunc
	quit      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New checks opts and starts the engine's health checkers (the first check
// of each replica runs at once; replicas count as healthy until a check or
// a request says otherwise).
func New(opts Options) (*Engine, error) {
	o := opts
	if o.ID == "" {
		return nil, errors.New("upstream: model id is required")
	}
	kind, err := ParseKind(string(o.Kind))
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", o.ID, err)
	}
	o.Kind = kind
	if len(o.Replicas) == 0 {
		return nil, fmt.Errorf("upstream %q: no replicas", o.ID)
	}
	if o.UpstreamModel == "" {
		o.UpstreamModel = o.ID
	}
	if o.OwnedBy == "" {
		o.OwnedBy = string(o.Kind)
	}
	setDefault(&o.ConnectTimeout, DefaultConnectTimeout)
	setDefault(&o.HeaderTimeout, DefaultHeaderTimeout)
	setDefault(&o.IdleTimeout, DefaultIdleTimeout)
	setDefault(&o.HealthInterval, DefaultHealthInterval)
	setDefault(&o.HealthTimeout, DefaultHealthTimeout)
	if o.PrefixBytes == 0 {
		o.PrefixBytes = DefaultPrefixBytes
	}
	if o.MaxImbalance == 0 {
		o.MaxImbalance = DefaultMaxImbalance
	}
	if o.ConnectTimeout < 0 || o.HeaderTimeout < 0 || o.IdleTimeout < 0 || o.HealthInterval < 0 || o.HealthTimeout < 0 || o.MaxImbalance < 0 {
		return nil, fmt.Errorf("upstream %q: timeouts, intervals and max imbalance must not be negative", o.ID)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	e := &Engine{opts: o, caps: o.Kind.caps(), log: o.Logger, quit: make(chan struct{})}
	seen := make(map[string]bool)
	for i, r := range o.Replicas {
		rep, err := newReplica(i, r.URL, r.APIKey)
		if err != nil {
			return nil, fmt.Errorf("upstream %q: %w", o.ID, err)
		}
		if seen[rep.base] {
			return nil, fmt.Errorf("upstream %q: replica %s is listed twice", o.ID, rep.base)
		}
		seen[rep.base] = true
		e.replicas = append(e.replicas, rep)
	}
	desc := o.Description
	if desc == "" {
		desc = fmt.Sprintf("served by %s upstream (%d replica", o.Kind, len(e.replicas))
		if len(e.replicas) > 1 {
			desc += "s"
		}
		desc += ")"
	}
	e.info = engine.ModelCard{ID: o.ID, OwnedBy: o.OwnedBy, Created: time.Now().Unix(), ContextLength: o.ContextLength,
		Description: desc, PrefixCache: e.caps.prefixCache, Drafting: o.Drafting}

	tr := o.Transport
	if tr == nil {
		tr = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			ResponseHeaderTimeout: o.HeaderTimeout,
			TLSHandshakeTimeout:   o.ConnectTimeout,
			MaxIdleConns:          1024,
			// A stream holds its connection for its whole life; keep enough
			// idle ones that a busy model does not dial per request.
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		}
	}
	e.client = &http.Client{Transport: tr}
	e.base, e.cancel = context.WithCancel(context.Background())
	for _, r := range e.replicas {
		e.wg.Add(1)
		go e.healthLoop(r)
	}
	return e, nil
}

func setDefault(d *time.Duration, v time.Duration) {
	if *d == 0 {
		*d = v
	}
}

// Close stops the health checkers and waits for them, and closes idle
// connections. Streams in flight are not cut: they end with their
// requests' contexts. Generate fails after Close.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.quit)
		e.cancel()
	})
	e.wg.Wait()
	e.client.CloseIdleConnections()
	return nil
}

// Models implements engine.Engine.
func (e *Engine) Models() []engine.ModelCard { return []engine.ModelCard{e.info} }

// Replicas returns a snapshot of the replicas' states, in configuration order.
func (e *Engine) Replicas() []ReplicaStatus {
	out := make([]ReplicaStatus, len(e.replicas))
	for i, r := range e.replicas {
		out[i] = r.status()
	}
	return out
}

// Generate implements engine.Engine. It returns once a replica answered
// with a stream (trying others when one fails), or with the error that no
// replica could be used: a *engine.RequestError when the upstream refused
// the request as the client's fault (its status was 400, 413 or 422),
// engine.ErrOverloaded when replicas answered 429 or 503, engine.ErrUpstream
// otherwise. Under the clamp policy a context_length_exceeded refusal of a
// request with MaxTokens is sent once more without MaxTokens, so that the
// upstream generates until its context is full; llama.cpp's server does
// that by itself, so its refusals stand.
//
// Usage of n > 1: the upstream reports a request's totals, so the final
// event of choice 0 carries them all (prompt, cached, completion and draft
// counts) and the other choices' Stats have the prompt count and zeros; the
// service's sums then give the upstream's totals. For llama.cpp, whose
// totals count a single choice, each choice is a request of its own (n = 1;
// choice j's seed is the request's seed + j), with Stats of its own.
func (e *Engine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	select {
	case <-e.quit:
		return nil, fmt.Errorf("%w: model %q: engine closed", engine.ErrUpstream, e.info.ID)
	default:
	}
	key, haveKey := affinityKey(req, e.opts.PrefixBytes)
	st, err := e.generate(ctx, req, key, haveKey)
	var re *engine.RequestError
	if err == nil || req.MaxTokens == 0 || e.opts.MaxTokensPolicy == engine.MaxTokensError || e.caps.clampsBudget ||
		!errors.As(err, &re) || re.Code != engine.CodeContextLengthExceeded {
		return st, err
	}
	// The upstream (vLLM, SGLang) refused a budget the context cannot
	// hold, or a prompt it cannot hold at all. Without max_tokens it
	// generates until the context is full, which is less than the budget:
	// the clamp. A prompt that alone does not fit is refused again.
	e.log.Debug("upstream refused the request's context; retrying without max_tokens",
		slog.String("model", e.info.ID), slog.Int("max_tokens", req.MaxTokens), slog.String("err", re.Message))
	unbounded := *req
	unbounded.MaxTokens = 0
	return e.generate(ctx, &unbounded, key, haveKey)
}

// generate is Generate once the model and the affinity key are known.
func (e *Engine) generate(ctx context.Context, req *engine.Request, key uint64, haveKey bool) (engine.Stream, error) {
	n := req.Choices()
	if n > 1 && e.caps.splitChoices {
		return e.fanOut(ctx, req, key, haveKey)
	}
	var path string
	var body []byte
	var err error
	responses := useResponses(e.opts.Kind, req, n)
	if responses {
		path = pathResponses
		body, err = encodeResponsesRequest(e.opts.Kind, e.opts.UpstreamModel, req)
	} else {
		path, body, err = encodeRequest(e.opts.Kind, e.opts.UpstreamModel, req, n)
	}
	if err != nil {
		return nil, err
	}
	var msgBody []byte
	if !responses && useMessages(e.opts.Kind, req, n) {
		// The chat body stays, for replicas without /v1/messages.
		if msgBody, err = encodeMessagesRequest(e.opts.Kind, e.opts.UpstreamModel, req); err != nil {
			return nil, err
		}
	}
	c := &call{e: e, ctx: ctx, path: path, body: body, key: key, haveKey: haveKey,
		tried: make([]bool, len(e.replicas)), predicted: req.Prediction != "", responses: responses,
		continuous: req.ContinuousUsage, msgBody: msgBody, progress: req.Progress && msgBody == nil && !responses}
	a, err := c.open()
	if err != nil {
		return nil, err
	}
	return pump(ctx, ctx, nil, []*stream{newStream(c, a, n)}), nil
}

// fanOut starts one single-choice request per choice of req. Choice 0
// goes first, and the others only once it has sent its first event (its
// prompt is processed): the request's cached prompt tokens are choice 0's,
// what the upstream held when the request came. A sibling sent at the same
// time may find the prompt a sibling computed a moment before (llama.cpp
// does, on a cold prompt, about one time in four), or miss a cached prompt
// because another slot holds it, so the siblings' counts say nothing about
// the request; the pump drops them (pumped.split). Generate thus returns
// after choice 0's first token.
func (e *Engine) fanOut(ctx context.Context, req *engine.Request, key uint64, haveKey bool) (engine.Stream, error) {
	n := req.Choices()
	fctx, cancel := context.WithCancel(ctx)
	subs := make([]*stream, 0, n)
	fail := func(err error) (engine.Stream, error) {
		cancel()
		for _, s := range subs {
			drain(s)
		}
		return nil, err
	}
	for j := range n {
		sub := *req
		sub.N = 1
		// Progress would come from every choice's prompt, and choice 0's
		// first event, which lets the others go, must be a token.
		sub.Progress = false
		if s := req.Sampling.Seed; s != nil && j > 0 {
			seed := *s + int64(j)
			sub.Sampling.Seed = &seed
		}
		path, body, err := encodeRequest(e.opts.Kind, e.opts.UpstreamModel, &sub, 1)
		if err != nil {
			return fail(err)
		}
		c := &call{e: e, ctx: fctx, path: path, body: body, key: key, haveKey: haveKey,
			tried: make([]bool, len(e.replicas)), predicted: req.Prediction != "", continuous: req.ContinuousUsage}
		a, err := c.open()
		if err != nil {
			return fail(err)
		}
		st := newStream(c, a, 1)
		subs = append(subs, st)
		if j == 0 {
			// Read ahead to choice 0's first event; the pump passes it on.
			if err := st.prefetch(); err != nil {
				if errors.Is(err, io.EOF) {
					err = fmt.Errorf("%w: model %q: the stream ended without an event", engine.ErrUpstream, e.info.ID)
				}
				return fail(err)
			}
		}
	}
	return pump(ctx, fctx, cancel, subs), nil
}

// drain reads a cancelled stream to its end, releasing its replica.
func drain(s *stream) {
	for {
		if _, err := s.recv(); err != nil {
			return
		}
	}
}
