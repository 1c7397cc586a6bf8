package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/internal/wait"
	"rill/store"
)

// produce appends n events (seq 0..n-1, data "e<seq>") to l, pausing every
// few, then ends it completed.
func produce(l *eventLog, n int) {
	for i := range n {
		l.append(int64(i), []byte(fmt.Sprintf("e%d", i)))
		if i%7 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	l.end(statusCompleted, []byte("final"))
}

// collectFollow follows stream id from after and returns the seqs seen.
func collectFollow(t *testing.T, ls *eventLogs, id string, after int64) ([]int64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seqs []int64
	status, data, err := ls.follow(ctx, id, after, 0, func(ev store.Event) error {
		if string(ev.Data) != fmt.Sprintf("e%d", ev.Seq) {
			return fmt.Errorf("event %d carries %q", ev.Seq, ev.Data)
		}
		seqs = append(seqs, ev.Seq)
		return nil
	}, nil)
	if err != nil {
		t.Fatalf("follow %s after %d: %v", id, after, err)
	}
	if string(data) != "final" {
		t.Errorf("final data %q", data)
	}
	return seqs, status
}

// checkSeqs fails unless seqs are exactly after+1 .. n-1.
func checkSeqs(t *testing.T, seqs []int64, after int64, n int) {
	t.Helper()
	want := int64(n) - after - 1
	if int64(len(seqs)) != want {
		t.Fatalf("got %d events after %d, want %d", len(seqs), after, want)
	}
	for i, s := range seqs {
		if s != after+1+int64(i) {
			t.Fatalf("event %d has seq %d, want %d (gap or duplicate)", i, s, after+1+int64(i))
		}
	}
}

// TestEventLogFollow: followers that join a live stream at any point, in
// this process (memory) or another (polling the shared store), and ones
// that come after it ended (the store), get every event after theirs, in
// order, once each, and the final status.
func TestEventLogFollow(t *testing.T) {
	t.Parallel()
	const n = 300
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name   string
		other  bool // follow from another process sharing the store
		after  []int64
		before bool // follow only once the stream ended and was written
	}{
		{name: "live here", after: []int64{-1, 0, 150, n - 1}},
		{name: "live elsewhere", other: true, after: []int64{-1, 10, n - 2}},
		{name: "ended", before: true, after: []int64{-1, 200}},
		{name: "ended elsewhere", other: true, before: true, after: []int64{-1, 63}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := store.NewMemory(store.Retention{})
			here := newEventLogs(st, quiet)
			follower := here
			if tt.other {
				follower = newEventLogs(st, quiet)
			}
			l, err := here.open(context.Background(), "s1", statusInProgress, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.before {
				produce(l, n)
				if err := l.wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				if here.lookup("s1") != nil {
					t.Error("an ended, written log is still live in memory")
				}
			} else {
				go produce(l, n)
			}
			var wg sync.WaitGroup
			for _, after := range tt.after {
				wg.Go(func() {
					seqs, status := collectFollow(t, follower, "s1", after)
					checkSeqs(t, seqs, after, n)
					if status != statusCompleted {
						t.Errorf("status %q", status)
					}
				})
			}
			wg.Wait()
			if err := l.wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			evs, err := st.Events(context.Background(), "s1", -1, 0)
			if err != nil || len(evs) != n {
				t.Errorf("store holds %d events (%v), want %d", len(evs), err, n)
			}
		})
	}
}

// TestEventLogFlushBound: an event reaches the store within flushDelay
// (and the store's write) of its append, not only when the stream ends.
func TestEventLogFlushBound(t *testing.T) {
	t.Parallel()
	st := store.NewMemory(store.Retention{})
	_, l := openTestLog(t, st)
	defer l.end(statusCompleted, nil)
	l.append(0, []byte("x")) // one event alone: no full batch hurries it
	waitStored(t, st, "s", 1)
}

// openTestLog opens live log "s" (in progress) on st.
func openTestLog(t *testing.T, st store.Store) (*eventLogs, *eventLog) {
	t.Helper()
	ls := newEventLogs(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l, err := ls.open(context.Background(), "s", statusInProgress, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ls, l
}

// waitStored waits until the store holds n events of stream id, for at
// most flushDelay and a loaded machine's slack (far below the heartbeat).
func waitStored(t *testing.T, st store.Store, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(flushDelay + time.Second)
	for {
		evs, err := st.Events(context.Background(), id, -1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the store holds %d events, want %d", flushDelay+time.Second, len(evs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEventLogAbandon: a stream nobody follows is abandoned after the
// grace period; one followed, or ended, is not; one whose follower left
// is, a grace period after it left.
func TestEventLogAbandon(t *testing.T) {
	t.Parallel()
	const grace = 50 * time.Millisecond
	tests := []struct {
		name string
		// run follows and ends the log as the case needs; it returns
		// whether the stream should be abandoned.
		run func(t *testing.T, ls *eventLogs, l *eventLog) bool
	}{
		{"nobody follows", func(*testing.T, *eventLogs, *eventLog) bool { return true }},
		{"ended first", func(_ *testing.T, _ *eventLogs, l *eventLog) bool {
			l.end(statusCompleted, nil)
			return false
		}},
		{"followed throughout", func(t *testing.T, ls *eventLogs, l *eventLog) bool {
			ctx, cancel := context.WithTimeout(context.Background(), 4*grace)
			defer cancel()
			_, _, err := ls.follow(ctx, l.id, -1, 0, func(store.Event) error { return nil }, nil)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("follow: %v", err)
			}
			l.end(statusCompleted, nil) // before a grace period passed since it left
			return false
		}},
		{"follower left", func(t *testing.T, ls *eventLogs, l *eventLog) bool {
			ctx, cancel := context.WithTimeout(context.Background(), grace/2)
			defer cancel()
			_, _, _ = ls.follow(ctx, l.id, -1, 0, func(store.Event) error { return nil }, nil)
			return true
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ls, l := openTestLog(t, store.NewMemory(store.Retention{}))
			abandoned := make(chan struct{})
			var once sync.Once
			l.whenAbandoned(grace, func() { once.Do(func() { close(abandoned) }) })
			want := tt.run(t, ls, l)
			select {
			case <-abandoned:
				if !want {
					t.Error("abandoned")
				}
			case <-time.After(4 * grace):
				if want {
					t.Error("not abandoned")
				}
			}
			l.end(statusCancelled, nil)
		})
	}
}

// slowAppends is a store whose first AppendEvents waits for release.
type slowAppends struct {
	store.Store
	first   sync.Once
	started chan struct{}
	release chan struct{}
}

func (s *slowAppends) AppendEvents(ctx context.Context, id string, evs []store.Event) error {
	s.first.Do(func() {
		close(s.started)
		<-s.release
	})
	return s.Store.AppendEvents(ctx, id, evs)
}

// TestEventLogWritesWhatCameDuringAWrite: events appended while a write
// is in the store's hands (which signal nobody: append signals a batch's
// first) are written right after it, not at the next heartbeat; then no
// write goroutine is left running for the live, idle log.
func TestEventLogWritesWhatCameDuringAWrite(t *testing.T) {
	t.Parallel()
	st := &slowAppends{Store: store.NewMemory(store.Retention{}), started: make(chan struct{}), release: make(chan struct{})}
	_, l := openTestLog(t, st)
	defer l.end(statusCompleted, nil)
	l.append(0, []byte("e0"))
	<-st.started
	l.append(1, []byte("e1"))
	l.append(2, []byte("e2"))
	close(st.release)
	waitStored(t, st, "s", 3)
	if !wait.Until(func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.writing
	}) {
		t.Error("a write goroutine still runs for a log with nothing to write")
	}
}

// TestEventLogOnWake: a parked follower's function runs once, at the
// log's next event or its end, or at once when the log moved on since the
// follower looked; stop before keeps it from running.
func TestEventLogOnWake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		before   func(l *eventLog) // after the follower looked, before it parks
		after    func(l *eventLog) // after it parked
		stop     bool
		wantRuns int32
	}{
		{name: "next event", after: func(l *eventLog) { l.append(1, []byte("e1")) }, wantRuns: 1},
		{name: "end", after: func(l *eventLog) { l.end(statusCompleted, nil) }, wantRuns: 1},
		{name: "two events, one call", after: func(l *eventLog) { l.append(1, nil); l.append(2, nil) }, wantRuns: 1},
		{name: "an event before the park", before: func(l *eventLog) { l.append(1, nil) }, wantRuns: 1},
		{name: "stopped", stop: true, after: func(l *eventLog) { l.append(1, nil) }},
		{name: "nothing comes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, l := openTestLog(t, store.NewMemory(store.Retention{}))
			defer l.end(statusCompleted, nil)
			l.append(0, []byte("e0"))
			l.mu.Lock()
			seen := l.wakes
			l.mu.Unlock()
			if tt.before != nil {
				tt.before(l)
			}
			var runs atomic.Int32
			stop := l.onWake(seen, func() { runs.Add(1) })
			if tt.stop && !stop() {
				t.Fatal("stop of a waiting hook reported false")
			}
			if tt.after != nil {
				tt.after(l)
			}
			if got := runs.Load(); got != tt.wantRuns {
				t.Errorf("ran %d times, want %d", got, tt.wantRuns)
			}
		})
	}
}

// TestEventLogWaitChan: a follower that waits on a channel gets one that
// the log's next move closes (closed at once when it moved already); the
// last waiter to give up without it closing drops it, so that a log
// whose followers wait parked keeps none.
func TestEventLogWaitChan(t *testing.T) {
	t.Parallel()
	_, l := openTestLog(t, store.NewMemory(store.Retention{}))
	defer l.end(statusCompleted, nil)
	l.mu.Lock()
	seen := l.wakes
	a, b := l.waitChanLocked(seen), l.waitChanLocked(seen)
	if a != b || l.wake == nil {
		t.Fatal("two waiters of one move got different channels")
	}
	l.doneWaitingLocked(a)
	if l.wake == nil {
		t.Error("the channel was dropped while a waiter still waits on it")
	}
	l.doneWaitingLocked(b)
	if l.wake != nil {
		t.Error("the channel was kept after its last waiter gave up")
	}
	c := l.waitChanLocked(seen)
	l.mu.Unlock()
	l.append(0, []byte("e0"))
	select {
	case <-c:
	default:
		t.Fatal("the log's move did not close the channel")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.doneWaitingLocked(c)
	select {
	case <-l.waitChanLocked(seen):
	default:
		t.Error("a waiter of a past move got a channel that is not closed")
	}
	if l.wake != nil {
		t.Error("a waiter of a past move made a channel")
	}
}
