package service

import (
	"sync"
	"time"

	"rill/internal/wheel"
)

// pingTicker ticks every period, as a time.Ticker does, on C (1-buffered,
// a tick not taken is dropped), or, while a parked wait is hooked to it
// (onTick), by calling the wait's function instead. It ticks on the
// server's ping wheel when the wheel's delay is its period (a few words a
// stream), else on a timer of its own.
type pingTicker struct {
	C       chan time.Time
	period  time.Duration
	wheel   *wheel.Wheel
	next    wheel.Entry // on wheel
	t       *time.Timer // without wheel
	mu      sync.Mutex
	hook    *waitHook
	stopped bool
}

// newPingTicker starts ticking every period, on w when its delay is
// period (w may be nil).
func newPingTicker(period time.Duration, w *wheel.Wheel) *pingTicker {
	p := &pingTicker{C: make(chan time.Time, 1), period: period}
	p.mu.Lock() // a short period may tick before AfterFunc returns
	if w != nil && w.Delay() == period {
		p.wheel = w
		p.next.F = p.tick
		w.Add(&p.next)
	} else {
		p.t = time.AfterFunc(period, p.tick)
	}
	p.mu.Unlock()
	return p
}

// tick runs on the timer's goroutine. It sends under mu, so that onTick
// sees either the tick on C or its hook called.
func (p *pingTicker) tick() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	if p.wheel != nil {
		p.wheel.Add(&p.next)
	} else {
		p.t.Reset(p.period)
	}
	h := p.hook
	p.hook = nil
	if h == nil {
		select {
		case p.C <- time.Now():
		default:
		}
	}
	p.mu.Unlock()
	if h != nil {
		h.f()
	}
}

// onTick hooks f to the next tick, or calls it at once when a tick is
// waiting on C (and takes it). stop unhooks f and reports whether it had
// not run.
func (p *pingTicker) onTick(f func()) (stop func() bool) {
	p.mu.Lock()
	select {
	case <-p.C:
		p.mu.Unlock()
		f()
		return func() bool { return false }
	default:
	}
	h := &waitHook{f: f}
	p.hook = h
	p.mu.Unlock()
	return func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.hook != h {
			return false
		}
		p.hook = nil
		return true
	}
}

// Stop stops the ticks; a hooked wait is not called.
func (p *pingTicker) Stop() {
	p.mu.Lock()
	p.stopped = true
	if p.wheel != nil {
		p.wheel.Remove(&p.next)
	} else {
		p.t.Stop()
	}
	p.hook = nil
	p.mu.Unlock()
}
