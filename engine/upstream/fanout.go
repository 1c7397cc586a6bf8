package upstream

import (
	"context"
	"errors"
	"io"
	"sync"

	"rill/engine"
)

// fanout merges the single-choice streams of a request split by choice
// (see caps.splitChoices): events of sub-stream j become events of choice
// j, without a cached count for j > 0 (see Engine.fanOut). It implements
// engine.Stream and is owned by one goroutine.
//
// It owns one reader goroutine per sub-stream. They end when their stream
// ends; the first error of any sub-stream cancels the others, and the
// request's context ends them all. Recv returns io.EOF once every
// sub-stream completed.
type fanout struct {
	parent context.Context // the client's
	cancel context.CancelFunc
	ch     chan fanItem
	left   int // sub-streams not yet ended
	wg     sync.WaitGroup
	err    error
}

type fanItem struct {
	ev  engine.Event
	err error // non-nil: the sub-stream ended (io.EOF when complete)
}

// newFanout starts reading subs, which were opened under fctx (a child of
// parent that cancel ends).
func newFanout(parent, fctx context.Context, cancel context.CancelFunc, subs []engine.Stream) *fanout {
	f := &fanout{parent: parent, cancel: cancel, ch: make(chan fanItem, 4*len(subs)), left: len(subs)}
	for j, s := range subs {
		f.wg.Go(func() {
			for {
				ev, err := s.Recv()
				ev.Choice = j
				if j > 0 && ev.Stats != nil {
					// Only choice 0's cache hit is the request's (see fanOut).
					st := *ev.Stats
					st.CachedTokens = nil
					ev.Stats = &st
				}
				select {
				case f.ch <- fanItem{ev: ev, err: err}:
				case <-fctx.Done():
					// Nobody will read on: drain the stream so that it
					// releases its replica, and leave.
					if err == nil {
						drain(s)
					}
					return
				}
				if err != nil {
					return
				}
			}
		})
	}
	return f
}

// Recv implements engine.Stream.
func (f *fanout) Recv() (engine.Event, error) {
	for f.err == nil {
		var it fanItem
		select {
		case it = <-f.ch:
		case <-f.parent.Done():
			// The readers may leave without a word once the context ends.
			f.stop(f.parent.Err())
			continue
		}
		switch {
		case it.err == nil:
			return it.ev, nil
		case errors.Is(it.err, io.EOF):
			if f.left--; f.left == 0 {
				f.stop(io.EOF)
			}
		default:
			err := it.err
			if perr := f.parent.Err(); perr != nil {
				err = perr
			}
			f.stop(err)
		}
	}
	return engine.Event{}, f.err
}

// stop ends the fan-out with err: it cancels the sub-streams and waits for
// the readers.
func (f *fanout) stop(err error) {
	f.err = err
	f.cancel()
	f.wg.Wait()
}
