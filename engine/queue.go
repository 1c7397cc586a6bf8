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
}

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
	q.mu.Unlock()
	q.signal()
	return full
}

// End ends the stream after the events already queued: the consumer then
// gets err, or io.EOF when err is nil. Only the first End counts.
func (q *Queue) End(err error) {
	q.mu.Lock()
	if !q.ended {
		q.ended, q.err = true, err
	}
	q.mu.Unlock()
	q.signal()
}

// Len is the number of events queued and not yet taken.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.events) - q.head
}

func (q *Queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
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
