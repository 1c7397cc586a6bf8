package service

import (
	"context"
	"reflect"
	"sync"
	"time"

	"rill/engine"
)

// waitsPerWaiter is how many parked waits one goroutine of a waitPool
// selects over. A select costs time in proportion to its cases (it locks
// and queues on every channel), and a wait pays it when it parks and when
// it wakes: BenchmarkWaitPoolWake measured 12 µs with 32 a goroutine, 24
// with 64, 60 with 128. The goroutine's stack and select tables, shared,
// cost a wait about 450 bytes with 32, 250 with 128.
const waitsPerWaiter = 32

// waitPool waits for many streams at once on few goroutines, or none. A
// stream that waits long for its engine parks its wait here instead of
// holding a goroutine of its own (2 KB of stack at least, 4 KB when the
// runtime's adaptive start says so): when what it waits for is ready, the
// pool runs its then on a fresh goroutine, which streams on. A wait whose
// engine stream can call it back is only hooks (parkTicking); any other is
// selected over by one of the pool's goroutines, each of which waits for
// up to waitsPerWaiter parked waits and ends when it has none left, so
// that a server with nothing parked holds none. The zero value is ready to
// use.
type waitPool struct {
	mu sync.Mutex
	// Those with room for another wait: [0] selects over waits without a
	// tick (two cases each), [1] over waits with one (three).
	waiters [2][]*poolWaiter
}

// poolWaiter is one goroutine of a waitPool and the waits it selects over.
type poolWaiter struct {
	wake   chan struct{} // 1-buffered: added has something new
	ticked int           // 1: its waits have ticks (three cases each), else 0
	// Under the pool's mu: the waits parked with this goroutine, those
	// not yet in its select included, and those not yet taken in.
	n     int
	added []parkedWait
}

// parkedWait is one wait: ready, done or tick, then then.
type parkedWait struct {
	ready, done <-chan struct{}
	tick        <-chan time.Time
	then        func(ticked bool)
}

// waitOn is what a parked wait waits for: its engine stream having
// something new (st's Ready), or else a log having (onReady, which calls
// back, or else the channel ready), its request's context ending (the
// context of st's engine request derives from it), and, for a stream that
// pings, a tick of its pinger (nil: none).
type waitOn struct {
	st      engine.Stream
	onReady func(f func()) (stop func() bool)
	ready   <-chan struct{}
	ctx     context.Context
	ticks   *pingTicker
}

// park waits for w, then runs then on a new goroutine. then must recover
// its own panics; what it needs to end before its owner does (a
// WaitGroup) the caller counts before park. A wait on a channel consumes
// its value: a stream's Ready signal, which then's TryRecv follows.
func (p *waitPool) park(w waitOn, then func()) {
	p.parkTicking(w, func(bool) { then() })
}

// parkTicking is park for a stream that pings: then learns whether it was
// a tick that ended the wait, whose value the pool took.
//
// A wait for an engine stream that can call a function when it has
// something new (engine.ReadyNotifier, as every engine's Queue can), or
// for a log that can (onReady), holds no goroutine and no select case:
// the stream, the pinger and, for a log, the context each call the wait's,
// and the first ends it. An engine stream's context needs no watch of its
// own: the engine's context derives from it, and an engine ends its
// stream, which then calls, when its context ends (engine.Engine's
// contract). Any other wait is selected over by one of the pool's
// goroutines.
func (p *waitPool) parkTicking(w waitOn, then func(ticked bool)) {
	if hookWait(w, then) {
		return
	}
	if w.st != nil {
		w.ready = w.st.Ready()
	}
	var done <-chan struct{}
	if w.ctx != nil {
		done = w.ctx.Done()
	}
	var tick <-chan time.Time
	if w.ticks != nil {
		tick = w.ticks.C
	}
	p.selectOver(w.ready, done, tick, then)
}

// waitHook is a parked wait's function, kept by the wait and handed by
// pointer to what will call it (an event log, a ping ticker, a WebSocket
// request's end), which lets go of it when it calls it or is unhooked.
type waitHook struct{ f func() }

// hooked is a wait that the things it waits for call (hookWait): the
// first to call it ends it, unhooks the others and runs then.
type hooked struct {
	mu    sync.Mutex
	over  bool
	n     int
	stops [3]func() bool
	then  func(ticked bool)
}

// hookWait parks w as a hooked wait, if its stream or log can call it,
// and reports whether it did. Each hook may call at once (the stream has
// something already, or its end; the context ended): the wait is then
// over before the others are hooked, and they are unhooked as they are.
func hookWait(w waitOn, then func(ticked bool)) bool {
	h := &hooked{then: then}
	switch {
	case w.st != nil:
		stop, ok := engine.OnReady(w.st, h.ready)
		if !ok {
			return false
		}
		h.add(stop)
	case w.onReady != nil:
		h.add(w.onReady(h.ready))
		if w.ctx != nil {
			// A log does not end with its follower's context.
			h.add(context.AfterFunc(w.ctx, h.ready))
		}
	default:
		return false
	}
	if w.ticks != nil {
		h.add(w.ticks.onTick(h.ticked))
	}
	return true
}

func (h *hooked) ready()  { h.end(false) }
func (h *hooked) ticked() { h.end(true) }

// add keeps stop, to unhook one of the wait's hooks when another ends it;
// when the wait is over already, it unhooks at once.
func (h *hooked) add(stop func() bool) {
	h.mu.Lock()
	if h.over {
		h.mu.Unlock()
		stop()
		return
	}
	h.stops[h.n] = stop
	h.n++
	h.mu.Unlock()
}

// end ends the wait, the first time it is called: it unhooks the rest
// and runs then on a new goroutine. It runs on whichever goroutine called
// (an engine's loop, a timer's): it must not block.
func (h *hooked) end(ticked bool) {
	h.mu.Lock()
	if h.over {
		h.mu.Unlock()
		return
	}
	h.over = true
	stops := h.stops[:h.n]
	h.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	go h.then(ticked)
}

// selectOver waits for a receive on ready, done or tick (a nil channel
// never delivers) on one of the pool's goroutines, then runs then on a new
// goroutine.
func (p *waitPool) selectOver(ready, done <-chan struct{}, tick <-chan time.Time, then func(ticked bool)) {
	k := 0
	if tick != nil {
		k = 1
	}
	p.mu.Lock()
	var w *poolWaiter
	if n := len(p.waiters[k]); n > 0 {
		w = p.waiters[k][n-1]
	} else {
		w = &poolWaiter{wake: make(chan struct{}, 1), ticked: k}
		p.waiters[k] = append(p.waiters[k], w)
		go p.run(w)
	}
	w.n++
	if w.n == waitsPerWaiter {
		p.waiters[k] = p.waiters[k][:len(p.waiters[k])-1] // full: the last one with room is w
	}
	w.added = append(w.added, parkedWait{ready: ready, done: done, tick: tick, then: then})
	p.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is the goroutine of w: it selects over its waits and the wake
// channel, hands each wait that is over to a fresh goroutine, and ends
// when no wait is left (under the pool's lock, so that park cannot give it
// one meanwhile).
func (p *waitPool) run(w *poolWaiter) {
	// Made at their full size once: appends that double them would
	// leave up to half of each unused, for as long as the goroutine runs.
	stride := 2 + w.ticked // cases a wait: ready, done and, with ticks, tick
	cases := make([]reflect.SelectCase, 1, 1+stride*waitsPerWaiter)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.wake)}
	thens := make([]func(bool), 0, waitsPerWaiter) // thens[i] is the wait of cases[1+stride*i:][:stride]
	for {
		p.mu.Lock()
		for _, a := range w.added {
			cases = append(cases,
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.ready)},
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.done)})
			if stride == 3 {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.tick)})
			}
			thens = append(thens, a.then)
		}
		clear(w.added)
		w.added = w.added[:0]
		if w.n == 0 {
			p.retire(w)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()

		chosen, _, _ := reflect.Select(cases)
		if chosen == 0 {
			continue // new waits
		}
		i, ticked := (chosen-1)/stride, (chosen-1)%stride == 2
		then := thens[i]
		last := len(thens) - 1
		thens[i] = thens[last]
		copy(cases[1+stride*i:1+stride*(i+1)], cases[1+stride*last:1+stride*(last+1)])
		thens[last] = nil
		clear(cases[1+stride*last : 1+stride*(last+1)])
		thens, cases = thens[:last], cases[:1+stride*last]

		p.mu.Lock()
		if w.n == waitsPerWaiter {
			p.waiters[w.ticked] = append(p.waiters[w.ticked], w) // it has room again
		}
		w.n--
		p.mu.Unlock()
		go then(ticked)
	}
}

// retire takes w, which has no waits, off the list of those with room.
// The caller holds p.mu.
func (p *waitPool) retire(w *poolWaiter) {
	ws := p.waiters[w.ticked]
	for i, x := range ws {
		if x == w {
			p.waiters[w.ticked] = append(ws[:i], ws[i+1:]...)
			return
		}
	}
}
