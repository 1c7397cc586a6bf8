package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"

	"rill/engine"
	"rill/internal/wheel"
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
	// pings is the server's ping wheel (nil: none), on which its streams'
	// pings tick when their interval is the wheel's.
	pings *wheel.Wheel
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
	stats, err := g.run(ctx, ping, encodedEvent(enc), nil, idlePinger(p))
	if err != nil && !isClientGone(err) {
		if ferr := enc.fail(fromEngine(err, g.model)); ferr != nil {
			return nil, &transportError{ferr}
		}
	}
	return stats, err
}

// pumpEncoded is runEncoded's pull taken apart at its wait (messageStream,
// responseStream): it sends through enc what r has ready and reports over
// once the generation ended, r ended, with the choices' Stats or the error
// that ended it, sending an engine error through enc.fail as runEncoded
// does.
func (g *generation) pumpEncoded(r *pull, enc eventEncoder) (over bool, stats [][]engine.Stats, err error) {
	complete, err := r.pump()
	if !complete && err == nil {
		return false, nil, nil
	}
	r.end()
	if err != nil {
		if !isClientGone(err) {
			if ferr := enc.fail(fromEngine(err, g.model)); ferr != nil {
				return true, nil, &transportError{ferr}
			}
		}
		return true, nil, err
	}
	return true, r.prog.stats, nil
}

// finishUsage is the usage of a completed generation of the given Stats,
// recorded in its metrics and sent by finish (an encoder's closing
// events); a failure to send is the transport's.
func (g *generation) finishUsage(stats [][]engine.Stats, finish func(*Usage) error) (*Usage, error) {
	u := AssembleUsage(stats)
	g.obs.finish(&u)
	if err := finish(&u); err != nil {
		return &u, &transportError{err}
	}
	return &u, nil
}

// encodedEvent is run's onEvent for enc: an encoder's errCallsInterleaved
// is the engine's fault and fails the stream; its other errors are the
// transport's.
func encodedEvent(enc eventEncoder) func(int, *engine.Event) error {
	return func(_ int, ev *engine.Event) error {
		if err := enc.event(ev); err != nil {
			var order *errCallsInterleaved
			if errors.As(err, &order) {
				return err // the engine's fault: the stream fails
			}
			return &transportError{err}
		}
		return nil
	}
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
	r := g.newPull(ctx, ping, onEvent, onProgress, onIdle)
	defer r.end()
	for {
		complete, err := r.pump()
		if err != nil {
			return nil, err
		}
		if complete {
			return r.prog.stats, nil
		}
		r.wait()
	}
}

// pull is run's loop taken apart at its wait: pump takes what is ready,
// wait waits for more, and the two may run on different goroutines one
// after the other (never at once), so that a stream waiting for its engine
// need not hold the goroutine, and the grown stack, that streamed. It holds
// the request's context because its wait outlives the call that made it.
type pull struct {
	g          *generation
	ctx        context.Context
	onEvent    func(index int, ev *engine.Event) error
	onProgress func(prompt int, pr *engine.Progress) error
	onIdle     func() error

	ticker *pingTicker // nil without pings
	// w and prog are in the pull, not beside it: a stream that waits for
	// its engine keeps them, and fewer objects.
	w      streamWaiter
	prog   progress
	active bool          // an event came since the last tick
	next   int           // the stream to try first: streams take turns
	ev     *engine.Event // &ev escapes: made once, and again after a long wait (waitForDropping)
	err    error         // what the last wait ended with, for pump to return
	events int           // how many pump took: progress, for waits that count from the last
	// timer bounds waitFor's waits; made by the first.
	timer *time.Timer
}

// newPull starts pulling g's events as run describes; end must follow.
func (g *generation) newPull(ctx context.Context, ping time.Duration,
	onEvent func(index int, ev *engine.Event) error, onProgress func(prompt int, pr *engine.Progress) error,
	onIdle func() error) *pull {
	r := &pull{g: g, ctx: ctx, onEvent: onEvent, onProgress: onProgress, onIdle: onIdle}
	r.prog.init(g.n, len(g.streams))
	var tick <-chan time.Time
	if ping > 0 && onIdle != nil {
		r.ticker = newPingTicker(ping, g.pings)
		tick = r.ticker.C
	}
	r.w.init(g.streams, ctx.Done(), tick)
	return r
}

// end cancels the generation, which stops the engine at once if it is
// still generating, and stops the pings.
func (r *pull) end() {
	if r.ticker != nil {
		r.ticker.Stop()
	}
	r.g.cancel()
	r.g.obs.end()
}

// pump takes and hands on every event that is ready. It reports complete
// when every stream has ended, nothing (complete false, no error) when it
// must wait, or the error that ends the generation.
func (r *pull) pump() (complete bool, err error) {
	if r.err != nil {
		return false, r.err
	}
	g := r.g
	if r.ev == nil {
		r.ev = new(engine.Event)
	}
	for !r.prog.complete() {
		got := false
		for range g.streams {
			p := r.next
			r.next = (r.next + 1) % len(g.streams)
			if r.prog.ended[p] {
				continue
			}
			var ok bool
			var err error
			*r.ev, ok, err = g.streams[p].TryRecv()
			switch {
			case errors.Is(err, io.EOF):
				if err := r.prog.end(p); err != nil {
					return false, err
				}
				got = true
			case err != nil:
				return false, err
			case ok && r.ev.Progress != nil:
				// It belongs to no choice: neither the checks of the
				// choices' events nor the time to first token see it.
				if r.onProgress != nil {
					if err := r.onProgress(p, r.ev.Progress); err != nil {
						return false, err
					}
				}
				got = true
			case ok:
				i, err := r.prog.record(p, r.ev)
				if err != nil {
					return false, err
				}
				g.obs.event(i, r.ev)
				if err := r.onEvent(i, r.ev); err != nil {
					return false, err
				}
				got = true
			}
			if got {
				break
			}
		}
		if !got {
			return false, nil
		}
		r.active = true
		r.events++
		// An engine that always has an event ready never makes run wait:
		// notice a client that left all the same.
		select {
		case <-r.ctx.Done():
			return false, r.ctx.Err()
		default:
		}
	}
	return true, nil
}

// wait blocks until a stream may have something new, pinging when the
// stream was idle for a ping interval; what ends the generation meanwhile
// (the request's context, a failed ping) the next pump returns.
func (r *pull) wait() { r.waitUntil(nil) }

// waitUntil is wait, given up when timeout delivers first: it reports
// whether it waited to the end (a nil timeout never delivers).
func (r *pull) waitUntil(timeout <-chan time.Time) bool {
	switch r.w.wait(r.prog.ended, timeout) {
	case waitTimeout:
		return false
	case waitDone:
		r.err = r.ctx.Err()
	case waitTick:
		r.ticked()
	}
	return true
}

// ticked is what a tick of the ping ticker does: a ping when no event came
// since the last tick. A failed ping the next pump returns.
func (r *pull) ticked() {
	idle := !r.active
	r.active = false
	if idle {
		r.err = r.onIdle()
	}
}

// waitFor is wait for at most d: it reports whether it waited to the end,
// so that pump may have something, and false when d passed first.
func (r *pull) waitFor(d time.Duration) bool {
	if r.timer == nil {
		r.timer = time.NewTimer(d)
	} else {
		r.timer.Reset(d)
	}
	if !r.waitUntil(r.timer.C) {
		// It fired: a stream waiting that long may wait for minutes,
		// without the timer's bytes; the next wait makes a new one.
		r.timer = nil
		return false
	}
	r.timer.Stop()
	return true
}

// waitForDropping is waitFor for a stream whose writer keeps a buffer of
// its events (*buf): when d passed first, the stream may wait for
// minutes, and lets go of the buffer; its next event makes one anew.
func (r *pull) waitForDropping(d time.Duration, buf *[]byte) bool {
	if !r.waitFor(d) {
		*buf = nil
		r.ev = nil // 144 bytes; the next pump makes it
		return false
	}
	return true
}

// parkable returns what wait waits for, when a parked wait can wait for
// it: one engine stream (a pull of several waits on a goroutine of its
// own) and no pings.
func (r *pull) parkable() (waitOn, bool) {
	if r.ticker != nil || len(r.g.streams) != 1 {
		return waitOn{}, false
	}
	return waitOn{st: r.g.streams[0], ctx: r.ctx}, true
}

// parkableTicking is parkable for a stream that may ping: the waiter
// hands the pinger's ticks to ticked.
func (r *pull) parkableTicking() (waitOn, bool) {
	if len(r.g.streams) != 1 {
		return waitOn{}, false
	}
	return waitOn{st: r.g.streams[0], ctx: r.ctx, ticks: r.ticker}, true
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
	waitTimeout
)

// init readies w to wait for streams, done and tick.
func (w *streamWaiter) init(streams []engine.Stream, done <-chan struct{}, tick <-chan time.Time) {
	*w = streamWaiter{streams: streams, done: done, tick: tick}
	if len(streams) > 1 {
		// Prompt arrays: a select over a number of channels only known at
		// run time. The case of a stream that ended is disabled (nil channel).
		w.cases = make([]reflect.SelectCase, 0, len(streams)+3)
		w.cases = append(w.cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tick)},
			reflect.SelectCase{Dir: reflect.SelectRecv}) // the timeout, set by wait
		for _, st := range streams {
			w.cases = append(w.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(st.Ready())})
		}
	}
}

// wait blocks until something may have happened, or timeout (nil: none)
// delivers; ended marks the streams not to wait for.
func (w *streamWaiter) wait(ended []bool, timeout <-chan time.Time) waitResult {
	if w.cases == nil {
		select {
		case <-w.streams[0].Ready():
			return waitReady
		case <-w.tick:
			return waitTick
		case <-w.done:
			return waitDone
		case <-timeout:
			return waitTimeout
		}
	}
	w.cases[2].Chan = reflect.Value{}
	if timeout != nil {
		w.cases[2].Chan = reflect.ValueOf(timeout)
	}
	for i, st := range w.streams {
		if ended[i] {
			w.cases[3+i].Chan = reflect.Value{}
		} else {
			w.cases[3+i].Chan = reflect.ValueOf(st.Ready())
		}
	}
	switch chosen, _, _ := reflect.Select(w.cases); chosen {
	case 0:
		return waitDone
	case 1:
		return waitTick
	case 2:
		return waitTimeout
	}
	return waitReady
}

// streamTo runs g and writes its chunks to w: the opening chunks, one or two
// per event, the usage chunk when asked for, then the end. ctx is the
// request's context. An engine error after the stream began is sent with
// w.fail. It returns the usage of a completed generation, or the error that
// ended it.
func (g *generation) streamTo(ctx context.Context, w chunkWriter, ping time.Duration) (*Usage, error) {
	s := g.newChunkStream(ctx, w, ping)
	for {
		if over, u, err := s.next(); over {
			return u, err
		}
		s.wait()
	}
}

// chunkStream is streamTo taken apart at its wait, as pull is run: next
// streams what is ready and wait waits for more, possibly on another
// goroutine, so that a stream waiting for its engine needs no goroutine
// that streamed. It holds the request's context for the same reason.
type chunkStream struct {
	g    *generation
	ctx  context.Context
	w    chunkWriter
	ping time.Duration
	c    *chunker // nil until the opening chunks went out
	pulled
}

func (g *generation) newChunkStream(ctx context.Context, w chunkWriter, ping time.Duration) *chunkStream {
	return &chunkStream{g: g, ctx: ctx, w: w, ping: ping}
}

// next writes the opening chunks on its first call, then the chunks of
// every event that is ready. It reports over, with what streamTo returns,
// once the stream ended; otherwise the caller calls wait, then next again.
func (s *chunkStream) next() (over bool, u *Usage, err error) {
	g, w := s.g, s.w
	if s.c == nil {
		s.c = newChunker(g, w)
		if err := s.c.opening(); err != nil {
			return true, nil, &transportError{err}
		}
		c := s.c
		s.r = g.newPull(s.ctx, s.ping, func(i int, ev *engine.Event) error {
			if err := c.event(i, ev); err != nil {
				return &transportError{err}
			}
			return nil
		}, func(prompt int, pr *engine.Progress) error {
			if err := c.progress(prompt, pr); err != nil {
				return &transportError{err}
			}
			return nil
		}, idlePinger(w))
	}
	complete, err := s.r.pump()
	if !complete && err == nil {
		return false, nil, nil
	}
	s.r.end()
	if err != nil {
		// A cancelled context means the client left (the engine's context
		// derives from the request's): it hears nothing more. Whatever the
		// engine says after that (an engine closing under a shutdown) is
		// not a failure to report; the caller answers a shutdown.
		var te *transportError
		if !errors.As(err, &te) && s.ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			_ = w.fail(fromEngine(err, g.model))
		}
		return true, nil, err
	}
	usage := AssembleUsage(s.r.prog.stats)
	g.obs.finish(&usage)
	var t *Timings
	if g.timings {
		at := AssembleTimings(s.r.prog.stats, &usage)
		t = &at
	}
	if g.includeUsage || t != nil {
		if err := s.c.usage(&usage, t); err != nil {
			return true, &usage, &transportError{err}
		}
	}
	if err := w.done(); err != nil {
		return true, &usage, &transportError{err}
	}
	return true, &usage, nil
}

// waitFor is wait for at most d: it reports whether it waited to the end,
// so that next has something, and false when d passed first.
func (s *chunkStream) waitFor(d time.Duration) bool { return s.r.waitForDropping(d, &s.c.buf) }

// pulled is what the streams taken apart at their waits (chunkStream,
// messageStream, responseStream) share: their pull, made by their first
// next, and the waits on it, which run only after a next.
type pulled struct {
	r *pull
}

// wait waits until the engine may have more for next (or the request's
// context ended, or a ping is due).
func (p *pulled) wait() { p.r.wait() }

// parkable is pull.parkable.
func (p *pulled) parkable() (waitOn, bool) { return p.r.parkable() }

// parkableTicking is pull.parkableTicking, and ticked pull.ticked.
func (p *pulled) parkableTicking() (waitOn, bool) { return p.r.parkableTicking() }

func (p *pulled) ticked() { p.r.ticked() }

// events is how many engine events the stream took so far.
func (p *pulled) events() int {
	if p.r == nil {
		return 0
	}
	return p.r.events
}

// idleFor reports how long the stream has gone without an event
// (idleSince of events).
func (p *pulled) idleFor() func() time.Duration { return idleSince(p.events) }

// idleSince returns a function that reports how long a stream has gone
// without an event, events being its count of them, as of its calls (each
// call checks for progress since the one before): a wait that pings
// returns at each tick, and the time that a stream waits for its engine
// counts from its last event.
func idleSince(events func() int) func() time.Duration {
	seen, since := -1, time.Time{}
	return func() time.Duration {
		if n := events(); n != seen {
			seen, since = n, time.Now()
		}
		return time.Since(since)
	}
}

// idlePinger is a pull's onIdle for a writer that pings (nil without one).
func idlePinger(p pinger) func() error {
	if p == nil {
		return nil
	}
	return func() error {
		if err := p.ping(); err != nil {
			return &transportError{err}
		}
		return nil
	}
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
	// one holds the slices of a request of one prompt and one choice, as
	// most are: no objects of their own.
	one struct {
		stats    [1][]engine.Stats
		stat     [1]engine.Stats
		finished [1][]bool
		fin      [1]bool
		ended    [1]bool
	}
}

// init readies p for prompts streams of n choices each.
func (p *progress) init(n, prompts int) {
	p.n, p.open = n, prompts
	if n == 1 && prompts == 1 {
		o := &p.one
		o.stats[0], o.finished[0] = o.stat[:], o.fin[:]
		p.stats, p.finished, p.ended = o.stats[:], o.finished[:], o.ended[:]
		return
	}
	p.stats, p.finished, p.ended = make([][]engine.Stats, prompts), make([][]bool, prompts), make([]bool, prompts)
	for i := range prompts {
		p.stats[i] = make([]engine.Stats, n)
		p.finished[i] = make([]bool, n)
	}
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
