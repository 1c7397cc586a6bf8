package engine

import (
	"io"
	"sync"
)

// Queue is a Stream that producers fill: they Push events and End it; its
// one consumer takes them with TryRecv and waits on Ready. It is how rill's
// engines (and test doubles) implement Stream. A Queue is safe for
// concurrent use by its producers and its consumer.
//
// Push never blocks, so a producer that serves many streams (the native
// engine's loop) is never held up by one slow consumer. A producer keeps a
// slow consumer from costing memory by bounding itself: Push reports when
// the queue holds High events or more, the producer then stops producing
// for this stream, and onDrain (when set) is called once the consumer has
// taken the queue down to High/2, so that the producer resumes.
type Queue struct {
	high    int
	onDrain func()
	ready   chan struct{}

	mu     sync.Mutex
	events []Event
	head   int
	ended  bool
	err    error // the terminal error; nil: io.EOF
	full   bool  // Push reported full and the queue has not drained since
	hook   *readyHook
}

// readyHook is the consumer's f of OnReady, waiting for the next Push or
// End.
type readyHook struct{ f func() }

// NewQueue returns an empty queue. high is the number of queued events at
// which Push reports the queue full (0: never). onDrain, if not nil, is
// called on the consumer's goroutine, outside any lock, when a queue that
// was reported full has drained to high/2 events; it must not block.
func NewQueue(high int, onDrain func()) *Queue {
	return &Queue{high: high, onDrain: onDrain, ready: make(chan struct{}, 1)}
}

// Push queues ev and reports whether the queue now holds High events or
// more. Events pushed after End are dropped.
func (q *Queue) Push(ev Event) (full bool) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return false
	}
	q.events = append(q.events, ev)
	if q.high > 0 && len(q.events)-q.head >= q.high {
		q.full = true
	}
	full = q.full
	h := q.takeHook()
	q.mu.Unlock()
	q.signal(h)
	return full
}

// End ends the stream after the events already queued: the consumer then
// gets err, or io.EOF when err is nil. Only the first End counts.
func (q *Queue) End(err error) {
	q.mu.Lock()
	if !q.ended {
		q.ended, q.err = true, err
	}
	h := q.takeHook()
	q.mu.Unlock()
	q.signal(h)
}

// Len is the number of events queued and not yet taken.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.events) - q.head
}

// takeHook takes the consumer's waiting OnReady function; q.mu is held.
func (q *Queue) takeHook() *readyHook {
	h := q.hook
	q.hook = nil
	return h
}

// signal tells the consumer that something is new: on Ready, and through
// h, the OnReady function taken under the lock, if any.
func (q *Queue) signal(h *readyHook) {
	select {
	case q.ready <- struct{}{}:
	default:
	}
	if h != nil {
		h.f()
	}
}

// OnReady implements ReadyNotifier.
func (q *Queue) OnReady(f func()) (stop func() bool) {
	q.mu.Lock()
	if q.head < len(q.events) || q.ended {
		q.mu.Unlock()
		f()
		return func() bool { return false }
	}
	h := &readyHook{f: f}
	q.hook = h
	q.mu.Unlock()
	return func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.hook != h {
			return false
		}
		q.hook = nil
		return true
	}
}

// TryRecv implements Stream.
func (q *Queue) TryRecv() (Event, bool, error) {
	q.mu.Lock()
	if q.head < len(q.events) {
		ev := q.events[q.head]
		q.events[q.head] = Event{} // drop references for the collector
		q.head++
		if q.head == len(q.events) {
			q.events, q.head = q.events[:0], 0
		}
		drained := q.full && len(q.events)-q.head <= q.high/2
		if drained {
			q.full = false
		}
		q.mu.Unlock()
		if drained && q.onDrain != nil {
			q.onDrain()
		}
		return ev, true, nil
	}
	ended, err := q.ended, q.err
	q.mu.Unlock()
	if !ended {
		return Event{}, false, nil
	}
	if err == nil {
		err = io.EOF
	}
	return Event{}, false, err
}

// Ready implements Stream.
func (q *Queue) Ready() <-chan struct{} { return q.ready }
