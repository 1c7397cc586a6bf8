package engine

import (
	"sync/atomic"
	"testing"
)

// wrapped embeds a Stream, as the service's and the catalog's wrappers do.
type wrapped struct{ Stream }

func (w wrapped) Unwrap() Stream { return w.Stream }

// bare is a Stream that cannot call anyone.
type bare struct{ Stream }

// TestQueueOnReady: OnReady's f runs once, at the next Push or End, or at
// once when the queue has something already; stop before it keeps it from
// running; OnReady finds a Queue through wrappers and reports false for a
// stream that is none.
func TestQueueOnReady(t *testing.T) {
	tests := []struct {
		name     string
		before   func(q *Queue) // before OnReady
		after    func(q *Queue) // after it
		stop     bool           // stop before after
		wantRuns int32
		wantStop bool // what stop reports
	}{
		{name: "push", after: func(q *Queue) { q.Push(Event{Text: "a"}) }, wantRuns: 1},
		{name: "end", after: func(q *Queue) { q.End(nil) }, wantRuns: 1},
		{name: "already an event", before: func(q *Queue) { q.Push(Event{Text: "a"}) }, wantRuns: 1},
		{name: "already ended", before: func(q *Queue) { q.End(nil) }, wantRuns: 1},
		{name: "two pushes, one call", after: func(q *Queue) { q.Push(Event{}); q.Push(Event{}) }, wantRuns: 1},
		{name: "stopped", stop: true, wantStop: true, after: func(q *Queue) { q.Push(Event{}) }, wantRuns: 0},
		{name: "stopped after it ran", before: func(q *Queue) { q.Push(Event{}) }, stop: true, wantRuns: 1},
		{name: "nothing yet", wantRuns: 0, stop: true, wantStop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := NewQueue(0, nil)
			if tt.before != nil {
				tt.before(q)
			}
			var runs atomic.Int32
			stop, ok := OnReady(wrapped{wrapped{q}}, func() { runs.Add(1) })
			if !ok {
				t.Fatal("OnReady did not find the Queue through two wrappers")
			}
			if tt.stop {
				if got := stop(); got != tt.wantStop {
					t.Errorf("stop() = %v, want %v", got, tt.wantStop)
				}
			}
			if tt.after != nil {
				tt.after(q)
			}
			if got := runs.Load(); got != tt.wantRuns {
				t.Errorf("f ran %d times, want %d", got, tt.wantRuns)
			}
			// The channel is signalled as before, for consumers that wait on it.
			if tt.wantRuns > 0 {
				select {
				case <-q.Ready():
				default:
					t.Error("Ready was not signalled")
				}
			}
		})
	}
	if _, ok := OnReady(bare{NewQueue(0, nil)}, func() {}); ok {
		t.Error("OnReady reported a hook on a stream that hides its Queue")
	}
}
