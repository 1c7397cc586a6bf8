package service

import (
	"reflect"
	"sync"
)

// waitsPerWaiter is how many parked waits one goroutine of a waitPool
// selects over. A select costs time in proportion to its cases (it locks
// and queues on every channel), and a wait pays it when it parks and when
// it wakes: BenchmarkWaitPoolWake measured 12 µs with 32 a goroutine, 24
// with 64, 60 with 128. The goroutine's stack and select tables, shared,
// cost a wait about 450 bytes with 32, 250 with 128.
const waitsPerWaiter = 32

// waitPool waits for many streams at once on few goroutines. A stream
// that waits long for its engine parks its wait here instead of holding a
// goroutine of its own (2 KB of stack at least, 4 KB when the runtime's
// adaptive start says so): when its channel or its done channel is ready,
// the pool runs its then on a fresh goroutine, which streams on. Each of
// the pool's goroutines waits for up to waitsPerWaiter parked waits and
// ends when it has none left, so that a server with nothing parked holds
// none. The zero value is ready to use.
type waitPool struct {
	mu      sync.Mutex
	waiters []*poolWaiter // those with room for another wait
}

// poolWaiter is one goroutine of a waitPool and the waits it selects over.
type poolWaiter struct {
	wake chan struct{} // 1-buffered: added has something new
	// Under the pool's mu: the waits parked with this goroutine, those
	// not yet in its select included, and those not yet taken in.
	n     int
	added []parkedWait
}

// parkedWait is one wait: ready or done, then then.
type parkedWait struct {
	ready, done <-chan struct{}
	then        func()
}

// park waits for a receive on ready or on done (a nil done never
// delivers), then runs then on a new goroutine. then must recover its own
// panics; what it needs to end before its owner does (a WaitGroup) the
// caller counts before park. The receive on ready consumes its value: a
// stream's Ready signal, which then's TryRecv follows.
func (p *waitPool) park(ready, done <-chan struct{}, then func()) {
	p.mu.Lock()
	var w *poolWaiter
	if n := len(p.waiters); n > 0 {
		w = p.waiters[n-1]
	} else {
		w = &poolWaiter{wake: make(chan struct{}, 1)}
		p.waiters = append(p.waiters, w)
		go p.run(w)
	}
	w.n++
	if w.n == waitsPerWaiter {
		p.waiters = p.waiters[:len(p.waiters)-1] // full: the last one with room is w
	}
	w.added = append(w.added, parkedWait{ready: ready, done: done, then: then})
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
	cases := make([]reflect.SelectCase, 1, 1+2*waitsPerWaiter)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.wake)}
	thens := make([]func(), 0, waitsPerWaiter) // thens[i] is the wait of cases[1+2i] and cases[2+2i]
	for {
		p.mu.Lock()
		for _, a := range w.added {
			cases = append(cases,
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.ready)},
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.done)})
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
		i := (chosen - 1) / 2
		then := thens[i]
		last := len(thens) - 1
		thens[i], cases[1+2*i], cases[2+2*i] = thens[last], cases[1+2*last], cases[2+2*last]
		thens[last], cases[1+2*last], cases[2+2*last] = nil, reflect.SelectCase{}, reflect.SelectCase{}
		thens, cases = thens[:last], cases[:1+2*last]

		p.mu.Lock()
		if w.n == waitsPerWaiter {
			p.waiters = append(p.waiters, w) // it has room again
		}
		w.n--
		p.mu.Unlock()
		go then()
	}
}

// retire takes w, which has no waits, off the list of those with room.
// The caller holds p.mu.
func (p *waitPool) retire(w *poolWaiter) {
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return
		}
	}
}
