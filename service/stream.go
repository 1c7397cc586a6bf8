package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
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

// generation is one client request in flight: its job, its engine streams
// (one per prompt, in prompt order, all started with one context that
// cancel ends) and the ids the wire shows. It is used once, by one goroutine.
type generation struct {
	*job
	id      string // "chatcmpl-…" or "cmpl-…"
	created int64  // unix seconds
	streams []engine.Stream
	cancel  context.CancelFunc
	// obs observes the request's metrics; nil observes nothing.
	obs *requestMetrics
}

// eventEncoder writes an API's events for one choice's engine events
// (the Responses API's, the Messages API's), and the error event of a
// stream the engine gave up on after it began.
type eventEncoder interface {
	event(ev *engine.Event) error
	fail(e *apiError) error
}

// pinger keeps an idle stream alive (an SSE comment, nothing on WebSocket).
type pinger interface{ ping() error }

// runEncoded runs g through enc, pinging p while idle when p is set, and
// returns the choices' Stats. An encoder's errCallsInterleaved is the
// engine's fault and fails the stream; its other errors are the
// transport's. An engine error after the stream began is sent through
// enc.fail, unless the client is gone; a transport error or cancellation
// sends nothing more.
func (g *generation) runEncoded(ctx context.Context, ping time.Duration, enc eventEncoder, p pinger) ([][]engine.Stats, error) {
	var onIdle func() error
	if p != nil {
		onIdle = func() error {
			if err := p.ping(); err != nil {
				return &transportError{err}
			}
			return nil
		}
	}
	stats, err := g.run(ctx, ping, func(_ int, ev *engine.Event) error {
		if err := enc.event(ev); err != nil {
			var order *errCallsInterleaved
			if errors.As(err, &order) {
				return err // the engine's fault: the stream fails
			}
			return &transportError{err}
		}
		return nil
	}, nil, onIdle)
	if err != nil && !isClientGone(err) {
		if ferr := enc.fail(fromEngine(err, g.model)); ferr != nil {
			return nil, &transportError{ferr}
		}
	}
	return stats, err
}

// run pulls the events of every stream of g until all completed, calling
// onEvent with each event and its wire index, and onProgress, when not
// nil, with each progress event (engine.Event.Progress) and the index of
// its prompt; without onProgress those are dropped. When ping > 0 and no event
// arrived for a ping interval, it calls onIdle. It returns the Stats of
// every choice ([prompt][choice]) when the generation completed; otherwise
// the error of the engine, of onEvent or onIdle, or of ctx (the request's
// context: the client left).
//
// run takes events straight from the engine's streams on the calling
// goroutine (engine.Stream.TryRecv) and waits on their Ready channels
// together with the ping ticker and ctx: no goroutine stands between the
// engine and the writer. Before it returns it cancels the generation, which
// stops the engine at once if it is still generating.
func (g *generation) run(ctx context.Context, ping time.Duration,
	onEvent func(index int, ev *engine.Event) error, onProgress func(prompt int, pr *engine.Progress) error,
	onIdle func() error) ([][]engine.Stats, error) {
	defer func() {
		g.cancel()
		g.obs.end()
	}()
	var tick <-chan time.Time
	if ping > 0 && onIdle != nil {
		t := time.NewTicker(ping)
		defer t.Stop()
		tick = t.C
	}
	w := newStreamWaiter(g.streams, ctx.Done(), tick)
	prog := newProgress(g.n, len(g.streams))
	active := false
	next := 0           // the stream to try first: streams take turns
	var ev engine.Event // outside the loop: &ev escapes, and once is enough
	for !prog.complete() {
		got, idle := false, false
		for range g.streams {
			p := next
			next = (next + 1) % len(g.streams)
			if prog.ended[p] {
				continue
			}
			var ok bool
			var err error
			ev, ok, err = g.streams[p].TryRecv()
			switch {
			case errors.Is(err, io.EOF):
				if err := prog.end(p); err != nil {
					return nil, err
				}
				got = true
			case err != nil:
				return nil, err
			case ok && ev.Progress != nil:
				// It belongs to no choice: neither the checks of the
				// choices' events nor the time to first token see it.
				if onProgress != nil {
					if err := onProgress(p, ev.Progress); err != nil {
						return nil, err
					}
				}
				got = true
			case ok:
				i, err := prog.record(p, &ev)
				if err != nil {
					return nil, err
				}
				g.obs.event(i, &ev)
				if err := onEvent(i, &ev); err != nil {
					return nil, err
				}
				got = true
			}
			if got {
				break
			}
		}
		if got {
			active = true
			// An engine that always has an event ready never makes run wait:
			// notice a client that left all the same.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			default:
			}
			continue
		}
		switch w.wait(prog.ended) {
		case waitDone:
			return nil, ctx.Err()
		case waitTick:
			idle = !active
			active = false
		}
		if idle {
			if err := onIdle(); err != nil {
				return nil, err
			}
		}
	}
	return prog.stats, nil
}

// streamWaiter waits until one of a generation's streams may have
// something new, the ping ticker ticks, or the request's context ends.
type streamWaiter struct {
	streams []engine.Stream
	done    <-chan struct{}
	tick    <-chan time.Time
	cases   []reflect.SelectCase // for more than one stream; built once
}

type waitResult uint8

const (
	waitReady waitResult = iota
	waitTick
	waitDone
)

func newStreamWaiter(streams []engine.Stream, done <-chan struct{}, tick <-chan time.Time) *streamWaiter {
	w := &streamWaiter{streams: streams, done: done, tick: tick}
	if len(streams) > 1 {
		// Prompt arrays: a select over a number of channels only known at
		// run time. The case of a stream that ended is disabled (nil channel).
		w.cases = make([]reflect.SelectCase, 0, len(streams)+2)
		w.cases = append(w.cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tick)})
		for _, st := range streams {
			w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(st.Ready())})
		}
	}
	return w
}

// wait blocks until something may have happened; ended marks the streams
// not to wait for.
func (w *streamWaiter) wait(ended []bool) waitResult {
	if w.cases == nil {
		select {
		case <-w.streams[0].Ready():
			return waitReady
		case <-w.tick:
			return waitTick
		case <-w.done:
			return waitDone
		}
	}
	for i, st := range w.streams {
		if ended[i] {
			w.cases[2+i].Chan = reflect.Value{}
		} else {
			w.cases[2+i].Chan = reflect.ValueOf(st.Ready())
		}
	}
	switch chosen, _, _ := reflect.Select(w.cases); chosen {
	case 0:
		return waitDone
	case 1:
		return waitTick
	}
	return waitReady
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
	}, func(prompt int, pr *engine.Progress) error {
		if err := c.progress(prompt, pr); err != nil {
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
	g.obs.finish(&u)
	var t *Timings
	if g.timings {
		at := AssembleTimings(stats, &u)
		t = &at
	}
	if g.includeUsage || t != nil {
		if err := c.usage(&u, t); err != nil {
			return &u, &transportError{err}
		}
	}
	if err := w.done(); err != nil {
		return &u, &transportError{err}
	}
	return &u, nil
}

// progress checks a generation's events against its job, so that an
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
