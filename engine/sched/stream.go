package sched

import (
	"context"
	"io"
	"sync"

	"rill/engine"
)

// stream is a request's event queue. The loop pushes without ever blocking
// (the queue grows by at most one event per generated token, so it is bounded
// by the request's max tokens); the consumer's Recv blocks. This keeps a slow
// client from stalling the batch.
type stream struct {
	ctx    context.Context
	mu     sync.Mutex
	events []engine.Event
	head   int
	ended  bool  // no more events will be pushed
	err    error // terminal error after the queued events
	notify chan struct{}
}

func newStream(ctx context.Context) *stream {
	return &stream{ctx: ctx, notify: make(chan struct{}, 1)}
}

// push queues an event (loop side).
func (s *stream) push(ev engine.Event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
	s.wake()
}

// end marks the stream complete; err nil means success (io.EOF to the reader).
func (s *stream) end(err error) {
	s.mu.Lock()
	if !s.ended {
		s.ended, s.err = true, err
	}
	s.mu.Unlock()
	s.wake()
}

func (s *stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv implements engine.Stream.
func (s *stream) Recv() (engine.Event, error) {
	for {
		s.mu.Lock()
		if s.head < len(s.events) {
			ev := s.events[s.head]
			s.events[s.head] = engine.Event{}
			s.head++
			if s.head == len(s.events) {
				s.events, s.head = s.events[:0], 0
			}
			s.mu.Unlock()
			return ev, nil
		}
		ended, err := s.ended, s.err
		s.mu.Unlock()
		if ended {
			if err == nil {
				err = io.EOF
			}
			return engine.Event{}, err
		}
		select {
		case <-s.notify:
		case <-s.ctx.Done():
			return engine.Event{}, s.ctx.Err()
		}
	}
}
