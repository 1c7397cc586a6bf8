package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"rill/engine"
)

// chunkWriter is the transport of one streamed request: the seam between
// the chunks (built once, by chunker) and the wire. SSE implements it
// (sseWriter); the WebSocket transport implements it over the very same
// chunks, so that its "chunk" member is byte-identical to SSE's data field.
// Implementations frame and deliver, nothing else. Calls come from one
// goroutine, in stream order; an error means the client is gone and ends
// the stream.
type chunkWriter interface {
	// chunk delivers one chunk, a complete JSON object. data is only valid
	// during the call.
	chunk(data []byte) error
	// ping keeps an idle stream alive.
	ping() error
	// fail delivers the error that ends a stream after it began.
	fail(e *apiError) error
	// done ends a stream that completed.
	done() error
}

// transportError marks an error of the chunkWriter (the client went away),
// as opposed to one of the engine.
type transportError struct{ err error }

func (e *transportError) Error() string { return "write to client: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// generation is one client request in flight: its plan, its engine streams
// (one per prompt, in prompt order, all started with one context that
// cancel ends) and the ids the wire shows. It is used once, by one goroutine.
type generation struct {
	*plan
	id      string // "chatcmpl-…" or "cmpl-…"
	created int64  // unix seconds
	streams []engine.Stream
	cancel  context.CancelFunc
}

// sourced is one item of a generation's merged event stream: an event of the
// stream of prompt, or (err != nil) the end of that stream, io.EOF when it
// completed.
type sourced struct {
	prompt int
	ev     engine.Event
	err    error
}

// run pulls the events of every stream of g until all completed, calling
// onEvent with each event and its wire index. When ping > 0 and no event
// arrived for a ping interval, it calls onIdle. It returns the Stats of
// every choice ([prompt][choice]) when the generation completed; otherwise
// the error of the engine, of onEvent or onIdle, or of ctx (the request's
// context: the client left).
//
// run owns the goroutines that read the streams (one per stream). Before it
// returns it cancels the generation, which stops the engine at once if it is
// still generating, and waits for them, so the streams are not touched
// after it returns.
func (g *generation) run(ctx context.Context, ping time.Duration,
	onEvent func(index int, ev *engine.Event) error, onIdle func() error) ([][]engine.Stats, error) {
	ch := make(chan sourced, 16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		g.cancel()
		close(stop)
		wg.Wait()
	}()
	for p, st := range g.streams {
		wg.Go(func() {
			for {
				ev, err := st.Recv()
				select {
				case ch <- sourced{prompt: p, ev: ev, err: err}:
				case <-stop:
					return
				}
				if err != nil {
					return
				}
			}
		})
	}

	var tick <-chan time.Time
	if ping > 0 && onIdle != nil {
		t := time.NewTicker(ping)
		defer t.Stop()
		tick = t.C
	}
	prog := newProgress(g.n, len(g.streams))
	active := false
	var s sourced // outside the loop: &s.ev escapes, and once is enough
	for !prog.complete() {
		select {
		case s = <-ch:
			active = true
			if s.err != nil {
				if errors.Is(s.err, io.EOF) {
					if err := prog.end(s.prompt); err != nil {
						return nil, err
					}
					continue
				}
				return nil, s.err
			}
			i, err := prog.record(s.prompt, &s.ev)
			if err != nil {
				return nil, err
			}
			if err := onEvent(i, &s.ev); err != nil {
				return nil, err
			}
		case <-tick:
			if !active {
				if err := onIdle(); err != nil {
					return nil, err
				}
			}
			active = false
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return prog.stats, nil
}

// streamTo runs g and writes its chunks to w: the opening chunks, one or two
// per event, the usage chunk when asked for, then the end. ctx is the
// request's context. An engine error after the stream began is sent with
// w.fail. It returns the usage of a completed generation, or the error that
// ended it.
func (g *generation) streamTo(ctx context.Context, w chunkWriter, ping time.Duration) (*Usage, error) {
	c := newChunker(g, w)
	if err := c.opening(); err != nil {
		return nil, &transportError{err}
	}
	stats, err := g.run(ctx, ping, func(i int, ev *engine.Event) error {
		if err := c.event(i, ev); err != nil {
			return &transportError{err}
		}
		return nil
	}, func() error {
		if err := w.ping(); err != nil {
			return &transportError{err}
		}
		return nil
	})
	if err != nil {
		// A cancelled context means the client left (the engine's context
		// derives from the request's): it hears nothing more. Whatever the
		// engine says after that (an engine closing under a shutdown) is
		// not a failure to report; the caller answers a shutdown.
		var te *transportError
		if !errors.As(err, &te) && ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			_ = w.fail(fromEngine(err, g.model))
		}
		return nil, err
	}
	u := AssembleUsage(stats)
	if g.includeUsage {
		if err := c.usage(&u); err != nil {
			return &u, &transportError{err}
		}
	}
	if err := w.done(); err != nil {
		return &u, &transportError{err}
	}
	return &u, nil
}

// progress checks a generation's events against its plan, so that an
// engine that breaks the Stream contract ends the request with an error
// instead of a malformed answer, and keeps the Stats of finished choices.
type progress struct {
	n        int
	stats    [][]engine.Stats // [prompt][choice]
	finished [][]bool
	ended    []bool
	open     int // streams not yet ended
}

func newProgress(n, prompts int) *progress {
	p := &progress{n: n, stats: make([][]engine.Stats, prompts),
		finished: make([][]bool, prompts), ended: make([]bool, prompts), open: prompts}
	for i := range prompts {
		p.stats[i] = make([]engine.Stats, n)
		p.finished[i] = make([]bool, n)
	}
	return p
}

// errProtocol is an engine that broke the Stream contract.
var errProtocol = errors.New("engine protocol error")

// record checks ev of the stream of prompt and returns its wire index.
func (p *progress) record(prompt int, ev *engine.Event) (int, error) {
	j := ev.Choice
	if j < 0 || j >= p.n {
		return 0, fmt.Errorf("%w: event for choice %d of %d", errProtocol, j, p.n)
	}
	if p.finished[prompt][j] {
		return 0, fmt.Errorf("%w: event for choice %d after its final event", errProtocol, j)
	}
	if ev.Final {
		p.finished[prompt][j] = true
		if ev.Stats != nil {
			p.stats[prompt][j] = *ev.Stats
		}
	}
	return prompt*p.n + j, nil
}

// end marks the stream of prompt as completed (io.EOF).
func (p *progress) end(prompt int) error {
	for j, done := range p.finished[prompt] {
		if !done {
			return fmt.Errorf("%w: stream ended before the final event of choice %d", errProtocol, j)
		}
	}
	if !p.ended[prompt] {
		p.ended[prompt] = true
		p.open--
	}
	return nil
}

func (p *progress) complete() bool { return p.open == 0 }
