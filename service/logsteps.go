package service

import (
	"context"
	"slices"
	"sync"
	"time"

	"rill/internal/wheel"
	"rill/store"
)

// logSink is where a logSteps sends its log's events: a WebSocket
// request's writer (wsLogSink) or an SSE stream's (sseLogSink).
type logSink interface {
	// event sends one event of the log.
	event(ev store.Event) error
	// end sends the stream's end, given how the follow ended: nil when the
	// log ended, else the failure (the follower's context ended, or a send
	// failed). It returns the error the steps report.
	end(err error) error
	// ping keeps an idle stream alive: an SSE comment (the WebSocket
	// connection pings by itself).
	ping() error
}

// logSteps follows a live event log of this process from after seq
// after, taken apart at its waits as a chunkStream is (wsSteps,
// sseSteps): next sends the events that came, and its waits for the next
// one park as a chat stream's waits for its engine do. It counts as one of
// the log's followers (join) until next reports over. run, when the
// follower created the stream, gives the usage its generation reports.
type logSteps struct {
	ctx    context.Context
	l      *eventLog
	run    *resumableRun // nil for a follower that did not start the stream
	sink   logSink
	after  int64
	seen   uint64      // the log's wakes, as of the last next
	timer  *time.Timer // waitFor's; made by the first
	ticker *pingTicker // nil without pings
	active bool        // an event came since the last tick
	err    error       // a failed ping, for next to report
	looks  int         // calls of next
	flowed int         // events sent by calls of next after the first

	// ender, when set, tells of ctx's end (a WebSocket request): the
	// steps then park their waits themselves (parkSelf), hooked on the
	// log and on ender by hooks of their own.
	ender        endNotifier
	pmu          sync.Mutex
	parked       bool
	then         func()
	logHk, endHk waitHook
}

// endNotifier is a request that calls a hook when its context ends
// (wsRequest): hookEnd reports false, hooking nothing, when it has ended
// already.
type endNotifier interface {
	hookEnd(h *waitHook) bool
	unhookEnd(h *waitHook)
}

// newLogSteps follows l after seq after as a follower (it joins the log).
// ping > 0 pings the sink while idle, on the wheel pings when its delay
// is ping (pings may be nil).
func newLogSteps(ctx context.Context, l *eventLog, run *resumableRun, sink logSink, after int64,
	ping time.Duration, pings *wheel.Wheel) *logSteps {
	l.join()
	f := &logSteps{ctx: ctx, l: l, run: run, sink: sink, after: after}
	if ping > 0 {
		f.ticker = newPingTicker(ping, pings)
	}
	return f
}

// next sends the log's events after the last one sent; it reports over,
// with the stream's usage (its starter's) and what the sink's end
// returns, once the log ended or the follow failed.
func (f *logSteps) next() (over bool, u *Usage, err error) {
	f.looks++
	if f.err != nil {
		return f.end(f.err)
	}
	l := f.l
	for {
		l.mu.Lock()
		i, _ := slices.BinarySearchFunc(l.events, f.after+1, cmpSeq)
		evs := l.events[i:len(l.events):len(l.events)]
		ended, seen := l.ended, l.wakes
		l.mu.Unlock()
		for _, ev := range evs {
			if err := f.sink.event(ev); err != nil {
				return f.end(err)
			}
			f.after = ev.Seq
			f.active = true
			if f.looks > 1 {
				f.flowed++
			}
		}
		switch {
		case len(evs) > 0:
			continue
		case ended:
			return f.end(nil)
		case f.ctx.Err() != nil:
			return f.end(f.ctx.Err())
		}
		f.seen = seen
		return false, nil, nil
	}
}

// end ends the follow: the sink's end, the pings, the log left.
func (f *logSteps) end(err error) (bool, *Usage, error) {
	err = f.sink.end(err)
	if f.ticker != nil {
		f.ticker.Stop()
	}
	f.l.leave()
	var u *Usage
	if f.run != nil {
		u = f.run.usage()
	}
	return true, u, err
}

// wait waits for the log's next event, the context's end or a tick.
func (f *logSteps) wait() { f.waitUntil(nil) }

// waitUntil is wait, given up when timeout delivers first: it reports
// whether it waited to the end.
func (f *logSteps) waitUntil(timeout <-chan time.Time) bool {
	var tick <-chan time.Time
	if f.ticker != nil {
		tick = f.ticker.C
	}
	l := f.l
	l.mu.Lock()
	wake := l.waitChanLocked(f.seen)
	l.mu.Unlock()
	waited := true
	select {
	case <-wake:
	case <-f.ctx.Done():
	case <-tick:
		f.ticked()
	case <-timeout:
		waited = false
	}
	l.mu.Lock()
	l.doneWaitingLocked(wake)
	l.mu.Unlock()
	return waited
}

// waitFor is wait for at most d: it reports whether it waited to the
// end, and false when d passed first.
func (f *logSteps) waitFor(d time.Duration) bool {
	if f.timer == nil {
		f.timer = time.NewTimer(d)
	} else {
		f.timer.Reset(d)
	}
	if !f.waitUntil(f.timer.C) {
		f.timer = nil // a long wait goes on without it
		return false
	}
	f.timer.Stop()
	return true
}

// ticked is what a tick does: a ping when no event came since the last.
func (f *logSteps) ticked() {
	idle := !f.active
	f.active = false
	if idle && f.err == nil {
		f.err = f.sink.ping()
	}
}

// parkable is a parked wait on the log: the log calls it back.
func (f *logSteps) parkable() (waitOn, bool) {
	l, seen := f.l, f.seen
	return waitOn{ctx: f.ctx, onReady: func(g func()) func() bool { return l.onWake(seen, g) }}, true
}

// parkSelf parks the wait for the log's next move or the request's end
// (ender) without the waitPool and without allocating (after the first):
// the first of the two to call ends it, unhooks the other and runs then
// on a new goroutine. It reports false when the steps cannot (no ender,
// or pings to send): the caller parks in the waitPool. A hook called late
// (it was being called as the other ended the wait) may end the next
// wait early; the stream then finds nothing new and waits again.
func (f *logSteps) parkSelf(then func()) bool {
	if f.ender == nil || f.ticker != nil {
		return false
	}
	if f.logHk.f == nil {
		woken := f.woken
		f.logHk.f, f.endHk.f = woken, woken
	}
	f.pmu.Lock()
	f.parked, f.then = true, then
	f.pmu.Unlock()
	if !f.l.hook(f.seen, &f.logHk) || !f.ender.hookEnd(&f.endHk) {
		f.woken()
	}
	return true
}

// woken ends a parkSelf wait, the first time it is called.
func (f *logSteps) woken() {
	f.pmu.Lock()
	if !f.parked {
		f.pmu.Unlock()
		return
	}
	f.parked = false
	then := f.then
	f.then = nil
	f.pmu.Unlock()
	f.l.unhook(&f.logHk)
	f.ender.unhookEnd(&f.endHk)
	go then()
}

// parkableTicking is parkable with the pings' ticks.
func (f *logSteps) parkableTicking() (waitOn, bool) {
	on, _ := f.parkable()
	on.ticks = f.ticker
	return on, true
}

// events counts the events that came after the follower's first look at
// the log: those it found then (a stream's opening chunks, and whatever
// its generation had made by then) do not say that the stream flows.
func (f *logSteps) events() int { return f.flowed }

// idleFor reports how long the follow has gone without an event (pulled's
// idleFor).
func (f *logSteps) idleFor() func() time.Duration { return idleSince(f.events) }

// wsLogSink sends a chunk log's events to a WebSocket request: chunks with
// their seq; the stream's own error event is kept for its end.
type wsLogSink struct {
	ctx   context.Context
	w     *wsWriter
	ended *apiError
}

func (s *wsLogSink) event(ev store.Event) error {
	if e, ok := logError(ev.Data); ok {
		s.ended = e
		return nil
	}
	return s.w.chunkSeq(ev.Seq, ev.Data)
}

func (s *wsLogSink) end(err error) error { return followEnd(s.ctx, s.w, err, s.ended) }

func (s *wsLogSink) ping() error { return nil }

// sseLogSink sends a log's events to an SSE stream as `id: <seq>` and
// `data: <chunk>` per event (the stream's own error event as it is), then
// `data: [DONE]` if the stream completed; a client still there when a
// shutdown ends the follow hears why. A Responses log's events (a
// background response's; responses) carry their `event: <type>` too, and
// end with no [DONE].
type sseLogSink struct {
	ctx       context.Context
	sw        *sseWriter
	l         *eventLog
	responses bool
	failed    error // a write failed: nobody is listening
}

func (s *sseLogSink) event(ev store.Event) error {
	s.sw.buf = appendLogEvent(s.sw.buf[:0], ev, s.responses)
	return s.wrote(s.sw.write())
}

func (s *sseLogSink) ping() error { return s.wrote(s.sw.ping()) }

func (s *sseLogSink) wrote(err error) error {
	if err != nil {
		s.failed = err
		return &transportError{err}
	}
	return nil
}

func (s *sseLogSink) end(err error) error {
	switch {
	case err == nil:
		s.l.mu.Lock()
		completed := s.l.status == statusCompleted
		s.l.mu.Unlock()
		if completed && !s.responses {
			return s.wrote(s.sw.done())
		}
	case s.failed == nil && isShutdown(s.ctx):
		// The stream runs on until the shutdown cuts it.
		if s.responses {
			_ = writeResponsesStreamError(s.sw, "server_shutting_down", errShutdownCut.Message)
		} else {
			_ = s.sw.fail(errShutdownCut)
		}
	}
	return err
}

// settle records how an SSE follow ended (the steps' usage and error).
func (s *sseLogSink) settle(info *requestInfo, u *Usage, err error) {
	info.usage = u
	switch {
	case err == nil:
	case s.failed == nil && isShutdown(s.ctx):
		info.status, info.reason = errShutdownCut.Status, reasonShutdown
	default:
		transportFailedCtx(s.ctx, info, err)
	}
}

// selfParker is wsSteps whose waits may park themselves (logSteps):
// parkSelf parks the wait and reports true, then runs then once it ended;
// false: the caller parks it.
type selfParker interface {
	parkSelf(then func()) bool
}
