// Package wheel runs many functions, each once after the same delay, on one
// runtime timer: a timing wheel whose slots hold the entries due at each of
// its ticks. A server's per-connection timers (a ping every interval, for
// every idle connection) cost a runtime timer each with time.AfterFunc,
// about 230 bytes; an Entry, kept in its owner's struct, costs a few words
// and a slot's pointer to it. The price is granularity: a function runs
// between the delay and a tick (delay/slots) later.
package wheel

import (
	"sync"
	"time"
)

// Entry is one scheduled run of F, embedded in (or owned by) whoever
// schedules it. F must be set before the first Add and not changed while
// the entry is scheduled. An Entry must not be copied once added.
type Entry struct {
	F func()
	// Under the wheel's mu: w.slots[slot][idx] is e while it is scheduled.
	w         *Wheel
	slot, idx int
}

// Wheel runs each added Entry's F, on a goroutine of its own, once its
// delay has passed. Its timer runs only while an entry is scheduled: a
// Wheel with none holds no timer and no goroutine. Safe for concurrent
// use.
type Wheel struct {
	delay, tick time.Duration
	ticks       int // delay in ticks, rounded up

	mu sync.Mutex
	// slots[k % len(slots)] holds the entries due at tick k. An entry is
	// added for the tick a whole delay after the current one's end, so the
	// ring has two slots more than the delay has ticks.
	slots [][]*Entry
	cur   int       // the last tick run
	next  time.Time // when tick cur+1 is due
	n     int       // entries scheduled
	t     *time.Timer
}

// New returns a Wheel whose entries run delay after they are added, within
// delay/slots; slots < 1 means 1.
func New(delay time.Duration, slots int) *Wheel {
	slots = max(slots, 1)
	tick := max(delay/time.Duration(slots), time.Millisecond)
	ticks := int((delay + tick - 1) / tick)
	return &Wheel{delay: delay, tick: tick, ticks: ticks, slots: make([][]*Entry, ticks+2)}
}

// Delay is how long after its Add an entry runs, at least.
func (w *Wheel) Delay() time.Duration { return w.delay }

// Add schedules e to run after the delay; an entry scheduled already is
// left as it is.
func (w *Wheel) Add(e *Entry) {
	w.mu.Lock()
	if e.w != nil {
		w.mu.Unlock()
		return
	}
	now := time.Now()
	// Ticks overdue (a late timer) run first: the slot below counts from
	// a tick still to come.
	due := w.advance(now, nil)
	if w.n == 0 {
		// Nothing scheduled: the wheel starts over, its slots empty of
		// anything that would still run.
		w.next = now.Add(w.tick)
		if w.t == nil {
			w.t = time.AfterFunc(w.tick, w.run)
		} else {
			w.t.Reset(w.tick)
		}
	}
	// Due at the first tick a whole delay from now: now is before tick
	// cur+1, so tick cur+1+ticks is at least delay away.
	k := (w.cur + 1 + w.ticks) % len(w.slots)
	e.w, e.slot, e.idx = w, k, len(w.slots[k])
	w.slots[k] = append(w.slots[k], e)
	w.n++
	w.mu.Unlock()
	start(due)
}

// Remove unschedules e and reports whether it was scheduled: false when it
// ran (or is starting to) or was never added.
func (w *Wheel) Remove(e *Entry) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.w != w {
		return false
	}
	s := w.slots[e.slot]
	last := len(s) - 1
	s[e.idx] = s[last]
	s[e.idx].idx = e.idx
	s[last] = nil
	w.slots[e.slot] = s[:last]
	e.w = nil
	w.n--
	if w.n == 0 {
		w.t.Stop()
	}
	return true
}

// run is the timer's: it runs the ticks that are due, then sets the timer
// for the next while anything is scheduled.
func (w *Wheel) run() {
	w.mu.Lock()
	due := w.advance(time.Now(), nil)
	if w.n > 0 {
		w.t.Reset(time.Until(w.next))
	}
	w.mu.Unlock()
	start(due)
}

// advance runs the ticks due by now: it takes their entries off the wheel
// and appends them to due, for start once w.mu is let go. w.mu is held.
func (w *Wheel) advance(now time.Time, due []*Entry) []*Entry {
	for w.n > 0 && !w.next.After(now) {
		w.cur = (w.cur + 1) % len(w.slots)
		for _, e := range w.slots[w.cur] {
			e.w = nil
			w.n--
			due = append(due, e)
		}
		clear(w.slots[w.cur])
		w.slots[w.cur] = w.slots[w.cur][:0]
		w.next = w.next.Add(w.tick)
	}
	return due
}

// start runs each entry's F on a goroutine of its own.
func start(due []*Entry) {
	for _, e := range due {
		go e.F()
	}
}
