package upstream

import (
	"context"
	"errors"
	"io"
	"sync"

	"rill/engine"
)

// pumpBuffer is how many events per upstream stream a request's queue holds
// before its pump stops reading the upstream's body until the consumer
// catches up (TCP then holds the upstream back).
const pumpBuffer = 64

// pumped is the engine.Stream of an upstream request: an engine.Queue that
// pumps fill, one goroutine per upstream stream, each reading its stream's
// body. With several streams (a request split by choice, see
// caps.splitChoices) the events of stream j become events of choice j.
// The consumer takes events straight from the queue: one hop.
//
// A pump ends when its stream ends: completed, failed, or its context
// ended (the body read then fails at once). The first stream to fail ends
// the request with its error and cancels the others; the request completes
// when every stream completed.
type pumped struct {
	*engine.Queue
	split  bool
	cancel context.CancelFunc // ends every stream's context; nil for one stream

	mu      sync.Mutex
	left    int           // streams still running
	drained chan struct{} // closed (and replaced) when the consumer drained the queue
}

// pump starts reading subs, opened under ctx (which cancel, if not nil,
// ends), and returns the request's stream. parent is the client's context:
// when it ended, its error is the stream's.
func pump(parent, ctx context.Context, cancel context.CancelFunc, subs []*stream) engine.Stream {
	p := &pumped{split: len(subs) > 1, cancel: cancel, left: len(subs), drained: make(chan struct{})}
	p.Queue = engine.NewQueue(pumpBuffer*len(subs), p.onDrain)
	for j, s := range subs {
		go p.run(parent, ctx, j, s)
	}
	return p
}

// onDrain wakes every pump waiting for the consumer.
func (p *pumped) onDrain() {
	p.mu.Lock()
	close(p.drained)
	p.drained = make(chan struct{})
	p.mu.Unlock()
}

func (p *pumped) drainSignal() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drained
}

// run is the pump of stream j.
func (p *pumped) run(parent, ctx context.Context, j int, s *stream) {
	for {
		ev, err := s.recv()
		if err != nil {
			p.end(parent, err)
			return
		}
		if p.split {
			ev.Choice = j
			if j > 0 && ev.Stats != nil {
				// Only choice 0's cache hit and write are the
				// request's (see Engine.fanOut).
				st := *ev.Stats
				st.CachedTokens, st.CacheWriteTokens = nil, nil
				ev.Stats = &st
			}
		}
		// Take the drain signal before pushing, so that a drain between the
		// push and the wait is not missed.
		drained := p.drainSignal()
		if p.Push(ev) {
			select {
			case <-drained:
			case <-ctx.Done(): // the next recv fails at once
			}
		}
	}
}

// end records that one stream ended with err (io.EOF: completed).
func (p *pumped) end(parent context.Context, err error) {
	p.mu.Lock()
	p.left--
	last := p.left == 0
	p.mu.Unlock()
	switch {
	case errors.Is(err, io.EOF):
		if !last {
			return
		}
		err = nil
	case parent.Err() != nil:
		err = parent.Err()
	}
	if p.cancel != nil && (err != nil || last) {
		p.cancel()
	}
	p.End(err)
}
