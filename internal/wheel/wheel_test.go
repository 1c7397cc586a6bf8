package wheel

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWheel: every added entry runs once, no sooner than the delay and
// within a tick of it (and a loaded machine's slack); a removed one does
// not run, and Remove tells which happened; an entry removed and added
// again runs at its new time, not its old slot's; a wheel whose entries
// all ran holds none.
func TestWheel(t *testing.T) {
	t.Parallel()
	const (
		delay = 80 * time.Millisecond
		slots = 8
		slack = 400 * time.Millisecond
	)
	tests := []struct {
		name    string
		n       int
		remove  func(i int) bool // entries removed right after Add
		readd   bool             // remove and add again halfway through the delay
		wantRun func(i int) bool
	}{
		{name: "one", n: 1},
		{name: "many", n: 1000},
		{name: "some removed", n: 100, remove: func(i int) bool { return i%3 == 0 }},
		{name: "all removed", n: 10, remove: func(int) bool { return true }},
		{name: "removed and added again", n: 50, readd: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New(delay, slots)
			entries := make([]Entry, tt.n)
			ran := make([]atomic.Int64, tt.n) // when, in ns since start; 0: not yet
			runs := make([]atomic.Int32, tt.n)
			var wg sync.WaitGroup
			start := time.Now()
			added := make([]time.Time, tt.n)
			for i := range entries {
				entries[i].F = func() {
					ran[i].Store(int64(time.Since(start)))
					runs[i].Add(1)
					wg.Done()
				}
			}
			want := 0
			for i := range entries {
				added[i] = time.Now()
				w.Add(&entries[i])
				if tt.remove != nil && tt.remove(i) {
					if !w.Remove(&entries[i]) {
						t.Fatalf("Remove of scheduled entry %d reported false", i)
					}
					continue
				}
				want++
			}
			wg.Add(want)
			if tt.readd {
				time.Sleep(delay / 2)
				for i := range entries {
					if !w.Remove(&entries[i]) {
						t.Fatalf("Remove of entry %d, due later, reported false", i)
					}
					added[i] = time.Now()
					w.Add(&entries[i])
				}
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(delay + slack + time.Second):
				t.Fatal("not every entry ran")
			}
			time.Sleep(2 * delay) // a second run, or a removed one's, would show now
			for i := range entries {
				removed := tt.remove != nil && tt.remove(i)
				switch got := runs[i].Load(); {
				case removed && got != 0:
					t.Errorf("removed entry %d ran %d times", i, got)
				case !removed && got != 1:
					t.Errorf("entry %d ran %d times, want 1", i, got)
				}
				if removed {
					if w.Remove(&entries[i]) {
						t.Errorf("a second Remove of entry %d reported true", i)
					}
					continue
				}
				after := start.Add(time.Duration(ran[i].Load())).Sub(added[i])
				if after < delay || after > delay+delay/slots+slack {
					t.Errorf("entry %d ran %v after its Add, want %v to %v", i, after, delay, delay+delay/slots)
				}
				if w.Remove(&entries[i]) {
					t.Errorf("Remove of entry %d after it ran reported true", i)
				}
			}
			w.mu.Lock()
			n := w.n
			w.mu.Unlock()
			if n != 0 {
				t.Errorf("%d entries scheduled after all ran", n)
			}
		})
	}
}

// TestWheelRestarts: a wheel that emptied runs the next entry added on
// time, as many times as it empties.
func TestWheelRestarts(t *testing.T) {
	t.Parallel()
	w := New(30*time.Millisecond, 3)
	for round := range 3 {
		ran := make(chan struct{})
		e := &Entry{F: func() { close(ran) }}
		w.Add(e)
		select {
		case <-ran:
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: the entry did not run", round)
		}
	}
}

// BenchmarkWheelAddRemove is the cost of scheduling and unscheduling one
// entry among many scheduled ones.
func BenchmarkWheelAddRemove(b *testing.B) {
	w := New(time.Hour, 64)
	others := make([]Entry, 10000)
	for i := range others {
		others[i].F = func() {}
		w.Add(&others[i])
	}
	e := &Entry{F: func() {}}
	for b.Loop() {
		w.Add(e)
		w.Remove(e)
	}
}
