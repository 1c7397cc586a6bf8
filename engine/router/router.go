// Package router serves several engines as one: each request goes to the
// engine that serves its model, and /v1/models lists every engine's models.
// It is how one rill serves native models and models behind HTTP side by
// side.
package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"rill/engine"
)

// Router is an engine.Engine over other engines, keyed by model id. It is
// safe for concurrent use; its set of models is fixed at New.
type Router struct {
	engines []engine.Engine
	byID    map[string]engine.Engine
	models  []engine.ModelCard

	closeOnce sync.Once
	closeErr  error
}

// New routes to engines. Every engine must serve at least one model, and
// no model id may be served twice. The Router takes ownership of the
// engines: Close closes them.
func New(engines ...engine.Engine) (*Router, error) {
	if len(engines) == 0 {
		return nil, errors.New("router: no engines")
	}
	r := &Router{engines: engines, byID: make(map[string]engine.Engine)}
	for i, e := range engines {
		if e == nil {
			return nil, fmt.Errorf("router: engine %d is nil", i)
		}
		ms := e.Models()
		if len(ms) == 0 {
			return nil, fmt.Errorf("router: engine %d serves no model", i)
		}
		for _, m := range ms {
			if m.ID == "" {
				return nil, fmt.Errorf("router: engine %d serves a model without an id", i)
			}
			if _, dup := r.byID[m.ID]; dup {
				return nil, fmt.Errorf("router: model %q is served twice", m.ID)
			}
			r.byID[m.ID] = e
			r.models = append(r.models, m)
		}
	}
	return r, nil
}

// Models implements engine.Engine: every engine's models, in the order of
// the engines given to New. The slice is the caller's. The cards are
// asked for afresh: a catalogue's say whether a model is loaded now.
func (r *Router) Models() []engine.ModelCard {
	out := make([]engine.ModelCard, 0, len(r.models))
	for _, e := range r.engines {
		out = append(out, e.Models()...)
	}
	return out
}

// Generate implements engine.Engine by handing req to the engine that
// serves req.Model.
func (r *Router) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	e, ok := r.byID[req.Model]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	return e.Generate(ctx, req)
}

// Engine returns the engine that serves the model id, or nil.
func (r *Router) Engine(id string) engine.Engine { return r.byID[id] }

// Close closes every engine that has a Close method (io.Closer), last
// first, and returns their errors joined. Later calls return the same.
func (r *Router) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		for i := len(r.engines) - 1; i >= 0; i-- {
			if c, ok := r.engines[i].(io.Closer); ok {
				if err := c.Close(); err != nil {
					errs = append(errs, fmt.Errorf("close engine of %q: %w", r.engines[i].Models()[0].ID, err))
				}
			}
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// Load implements engine.LoadReporter: the loads of the engines that report
// theirs, in the order of Models; models of engines that do not report
// are left out.
func (r *Router) Load() []engine.ModelLoad {
	var out []engine.ModelLoad
	for _, e := range r.engines {
		if lr, ok := e.(engine.LoadReporter); ok {
			out = append(out, lr.Load()...)
		}
	}
	return out
}

var (
	_ engine.ModelManager      = (*Router)(nil)
	_ engine.LifecycleReporter = (*Router)(nil)
)

// LoadModel implements engine.ModelManager by handing the call to the
// engine that serves id; an engine that loads no models on demand (its
// models are always loaded) gives (a wrapped) engine.ErrUnsupported.
func (r *Router) LoadModel(ctx context.Context, id string) error {
	m, err := r.manager(id)
	if err != nil {
		return err
	}
	return m.LoadModel(ctx, id)
}

// UnloadModel implements engine.ModelManager as LoadModel does.
func (r *Router) UnloadModel(ctx context.Context, id string) error {
	m, err := r.manager(id)
	if err != nil {
		return err
	}
	return m.UnloadModel(ctx, id)
}

func (r *Router) manager(id string) (engine.ModelManager, error) {
	e, ok := r.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, id)
	}
	m, ok := e.(engine.ModelManager)
	if !ok {
		return nil, fmt.Errorf("%w: model %q is always loaded", engine.ErrUnsupported, id)
	}
	return m, nil
}

// Lifecycle implements engine.LifecycleReporter with the engines that
// report theirs.
func (r *Router) Lifecycle() []engine.ModelLifecycle {
	var out []engine.ModelLifecycle
	for _, e := range r.engines {
		if lr, ok := e.(engine.LifecycleReporter); ok {
			out = append(out, lr.Lifecycle()...)
		}
	}
	return out
}

var _ engine.Tokenizer = (*Router)(nil)

// Tokenize implements engine.Tokenizer by handing req to the engine that
// serves req.Model; an engine without a tokenizer gives (a wrapped)
// engine.ErrUnsupported.
func (r *Router) Tokenize(ctx context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	t, err := r.tokenizer(req.Model)
	if err != nil {
		return nil, err
	}
	return t.Tokenize(ctx, req)
}

// Detokenize implements engine.Tokenizer as Tokenize does.
func (r *Router) Detokenize(ctx context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	t, err := r.tokenizer(req.Model)
	if err != nil {
		return nil, err
	}
	return t.Detokenize(ctx, req)
}

func (r *Router) tokenizer(model string) (engine.Tokenizer, error) {
	e, ok := r.byID[model]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, model)
	}
	t, ok := e.(engine.Tokenizer)
	if !ok {
		return nil, fmt.Errorf("%w: the engine of model %q has no tokenizer", engine.ErrUnsupported, model)
	}
	return t, nil
}

var _ engine.Embedder = (*Router)(nil)

// Embed implements engine.Embedder by handing req to the engine that
// serves req.Model; an engine that cannot embed gives (a wrapped)
// engine.ErrUnsupported.
func (r *Router) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	e, ok := r.byID[req.Model]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	em, ok := e.(engine.Embedder)
	if !ok {
		return nil, fmt.Errorf("%w: model %q does not serve embeddings", engine.ErrUnsupported, req.Model)
	}
	return em.Embed(ctx, req)
}

var _ engine.Reranker = (*Router)(nil)

// Rerank implements engine.Reranker by handing req to the engine that
// serves req.Model; an engine that cannot rerank gives (a wrapped)
// engine.ErrUnsupported.
func (r *Router) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	e, ok := r.byID[req.Model]
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	rr, ok := e.(engine.Reranker)
	if !ok {
		return nil, fmt.Errorf("%w: model %q does not rerank", engine.ErrUnsupported, req.Model)
	}
	return rr.Rerank(ctx, req)
}
