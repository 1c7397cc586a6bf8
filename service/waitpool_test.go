package service

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
	"rill/internal/wait"
	"rill/internal/wheel"
)

// TestWaitPool: every wait the pool's goroutines select over runs its then exactly once, when its
// ready channel delivers or its done channel closes, however many waits
// share the pool's goroutines; once none is parked, the pool holds no
// goroutine.
func TestWaitPool(t *testing.T) {
	t.Parallel()
	const (
		byReady = iota
		byDone
		byTick
	)
	tests := []struct {
		name  string
		n     int
		ticks bool // park with a tick channel (parkTicking)
		by    int  // what ends the waits
	}{
		{"one", 1, false, byReady},
		{"one, done", 1, false, byDone},
		{"a goroutine's worth", waitsPerWaiter, false, byReady},
		{"several goroutines' worth", 3*waitsPerWaiter + 1, false, byReady},
		{"several goroutines' worth, done", 3*waitsPerWaiter + 1, false, byDone},
		{"ticking, ready", 2*waitsPerWaiter + 1, true, byReady},
		{"ticking, done", 2*waitsPerWaiter + 1, true, byDone},
		{"ticking, tick", 2*waitsPerWaiter + 1, true, byTick},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p waitPool
			ready := make([]chan struct{}, tt.n)
			done := make([]chan struct{}, tt.n)
			tick := make([]chan time.Time, tt.n)
			runs := make([]atomic.Int32, tt.n)
			ticked := make([]atomic.Bool, tt.n)
			var ran sync.WaitGroup
			ran.Add(tt.n)
			for i := range tt.n {
				ready[i], done[i], tick[i] = make(chan struct{}, 1), make(chan struct{}), make(chan time.Time, 1)
				if tt.ticks {
					p.selectOver(ready[i], done[i], tick[i], func(tk bool) {
						ticked[i].Store(tk)
						runs[i].Add(1)
						ran.Done()
					})
				} else {
					p.selectOver(ready[i], done[i], nil, func(bool) {
						runs[i].Add(1)
						ran.Done()
					})
				}
			}
			// None has run: nothing delivered yet.
			for i := range tt.n {
				if got := runs[i].Load(); got != 0 {
					t.Fatalf("wait %d ran %d times before its channels delivered", i, got)
				}
			}
			// In an order unlike the parking's: from the end, odd first.
			for _, odd := range []int{1, 0} {
				for i := tt.n - 1; i >= 0; i-- {
					if i%2 != odd {
						continue
					}
					switch tt.by {
					case byReady:
						ready[i] <- struct{}{}
					case byDone:
						close(done[i])
					case byTick:
						tick[i] <- time.Time{}
					}
				}
			}
			ran.Wait()
			for i := range tt.n {
				if got := runs[i].Load(); got != 1 {
					t.Errorf("wait %d ran %d times, want 1", i, got)
				}
				if got, want := ticked[i].Load(), tt.by == byTick; got != want {
					t.Errorf("wait %d: then(ticked %v), want %v", i, got, want)
				}
			}
			if !wait.Until(func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.waiters[0])+len(p.waiters[1]) == 0
			}) {
				t.Error("the pool still has goroutines with no wait parked")
			}
		})
	}
}

// TestWaitPoolReuse: a pool whose goroutines ended with their last wait
// starts new ones for the next, and a ready signal delivered before the
// park is not lost.
func TestWaitPoolReuse(t *testing.T) {
	t.Parallel()
	var p waitPool
	for round := range 3 {
		ready := make(chan struct{}, 1)
		ready <- struct{}{}
		ran := make(chan struct{})
		p.park(waitOn{ready: ready}, func() { close(ran) })
		<-ran
		if !wait.Until(func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.waiters[0])+len(p.waiters[1]) == 0
		}) {
			t.Fatalf("round %d: the pool kept a goroutine with no wait", round)
		}
	}
}

// BenchmarkWaitPoolWake is the time from a parked wait's ready signal to
// its then running, with the goroutine that waits for it full (its select
// over every other parked wait as well): what a stream's first token after
// a long wait pays on top of a goroutine's own wake.
func BenchmarkWaitPoolWake(b *testing.B) {
	var p waitPool
	others := make(chan struct{}) // never ready: the full goroutine's other waits
	done := make(chan struct{})
	defer close(done)
	for range waitsPerWaiter - 1 {
		p.selectOver(others, done, nil, func(bool) {})
	}
	ready := make(chan struct{}, 1)
	ran := make(chan struct{})
	then := func() { ran <- struct{}{} }
	for b.Loop() {
		p.park(waitOn{ready: ready}, then)
		ready <- struct{}{}
		<-ran
	}
}

// TestHookedWait: a wait for an engine stream that can call it (every
// engine's Queue) takes none of the pool's goroutines, and runs its then
// exactly once, when the stream has something (an event, its end, also
// before the park, the end its engine gives it when the context ends) or
// the pinger ticks, whichever is first; the others then do nothing.
func TestHookedWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		before  bool // the stream has its event before the park
		by      string
		tickers bool
		onWheel bool // the pinger ticks on a ping wheel
		ticked  bool
	}{
		{name: "event", by: "push"},
		{name: "end", by: "end"},
		{name: "event before the park", before: true, by: "push"},
		{name: "context", by: "cancel"},
		{name: "event, with pings", by: "push", tickers: true},
		{name: "tick", by: "tick", tickers: true, ticked: true},
		{name: "tick on a wheel", by: "tick", tickers: true, onWheel: true, ticked: true},
		{name: "all at once", by: "all", tickers: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p waitPool
			q := engine.NewQueue(0, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// As an engine does: its stream ends when its context does.
			context.AfterFunc(ctx, func() { q.End(ctx.Err()) })
			on := waitOn{st: &panicSafeStream{Stream: q}, ctx: ctx} // found through Unwrap
			var ticks *pingTicker
			if tt.tickers {
				var w *wheel.Wheel
				if tt.onWheel {
					w = wheel.New(time.Hour, 4)
				}
				ticks = newPingTicker(time.Hour, w) // ticks only when the test says
				defer ticks.Stop()
				on.ticks = ticks
			}
			if tt.before {
				q.Push(engine.Event{Text: "x"})
			}
			var runs atomic.Int32
			var gotTicked atomic.Bool
			ran := make(chan struct{}, 4)
			p.parkTicking(on, func(tk bool) {
				gotTicked.Store(tk)
				runs.Add(1)
				ran <- struct{}{}
			})
			p.mu.Lock()
			pooled := len(p.waiters[0]) + len(p.waiters[1])
			p.mu.Unlock()
			if pooled != 0 {
				t.Fatalf("the wait took %d of the pool's goroutines, want none", pooled)
			}
			if !tt.before {
				select {
				case <-ran:
					t.Fatal("then ran before anything happened")
				case <-time.After(20 * time.Millisecond):
				}
			}
			fire := map[string]func(){
				"push":   func() { q.Push(engine.Event{Text: "x"}) },
				"end":    func() { q.End(nil) },
				"cancel": cancel,
				"tick":   func() { ticks.tick() },
			}
			if tt.by == "all" {
				var wg sync.WaitGroup
				for _, f := range fire {
					wg.Go(f)
				}
				wg.Wait()
			} else if !tt.before {
				fire[tt.by]()
			}
			select {
			case <-ran:
			case <-time.After(5 * time.Second):
				t.Fatal("then did not run")
			}
			// What comes after the end does nothing.
			q.Push(engine.Event{Text: "y"})
			cancel()
			if ticks != nil {
				ticks.tick()
			}
			select {
			case <-ran:
				t.Fatalf("then ran %d times, want once", runs.Load())
			case <-time.After(20 * time.Millisecond):
			}
			if tt.by != "all" && gotTicked.Load() != tt.ticked {
				t.Errorf("then(ticked %v), want %v", gotTicked.Load(), tt.ticked)
			}
		})
	}
}
