package cpu

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/internal/wait"
)

// rangeRecorder records the ranges a parallel job ran.
type rangeRecorder struct {
	mu     sync.Mutex
	ranges [][2]int
	hits   []atomic.Int32
}

func (r *rangeRecorder) run(lo, hi int) {
	r.mu.Lock()
	r.ranges = append(r.ranges, [2]int{lo, hi})
	r.mu.Unlock()
	for i := lo; i < hi; i++ {
		r.hits[i].Add(1)
	}
}

// check verifies that the ranges tile [0,n) exactly, each at least grain
// wide except the last.
func (r *rangeRecorder) check(t *testing.T, n, grain int) {
	t.Helper()
	for i := range r.hits {
		if h := r.hits[i].Load(); h != 1 {
			t.Fatalf("index %d ran %d times", i, h)
		}
	}
	sort.Slice(r.ranges, func(i, j int) bool { return r.ranges[i][0] < r.ranges[j][0] })
	next := 0
	for k, rg := range r.ranges {
		if rg[0] != next || rg[1] <= rg[0] {
			t.Fatalf("ranges %v do not tile [0,%d)", r.ranges, n)
		}
		if k < len(r.ranges)-1 && rg[1]-rg[0] < grain {
			t.Fatalf("range %v narrower than grain %d", rg, grain)
		}
		next = rg[1]
	}
	if next != n {
		t.Fatalf("ranges %v end at %d, want %d", r.ranges, next, n)
	}
}

func TestParallelCoversEachIndexOnce(t *testing.T) {
	t.Parallel()
	for _, threads := range []int{1, 2, 3, 8} {
		b := New(Options{Threads: threads})
		for _, n := range []int{0, 1, 2, 3, 7, 64, 1000, 4099} {
			for _, grain := range []int{1, 5, 100} {
				t.Run(fmt.Sprintf("threads=%d/n=%d/grain=%d", threads, n, grain), func(t *testing.T) {
					rec := &rangeRecorder{hits: make([]atomic.Int32, n)}
					b.ParallelGrain(n, grain, rec.run)
					rec.check(t, n, grain)
					if n > 0 && n < 2*grain && len(rec.ranges) != 1 {
						t.Errorf("work below two grains split into %d ranges", len(rec.ranges))
					}
				})
			}
		}
		b.Close()
	}
}

// TestParallelUsesWorkers checks that a job big enough is split over more
// than one goroutine.
func TestParallelUsesWorkers(t *testing.T) {
	t.Parallel()
	b := New(Options{Threads: 4})
	defer b.Close()
	if b.Threads() != 4 {
		t.Fatalf("Threads() = %d, want 4", b.Threads())
	}
	// Each range waits (within a bound) until a second range has started,
	// so the first is still running when a worker claims one; more than
	// one in flight at once means more than one goroutine ran them. A pool
	// that ran every range on the caller would keep the first waiting out
	// the bound, and one range in flight at a time.
	var inFlight, most, started atomic.Int32
	second := make(chan struct{})
	b.Parallel(16, func(lo, hi int) {
		now := inFlight.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		if started.Add(1) == 2 {
			close(second)
		}
		select {
		case <-second:
		case <-time.After(wait.DefaultBound):
		}
		inFlight.Add(-1)
	})
	if most.Load() < 2 {
		t.Errorf("at most %d range(s) ran at once", most.Load())
	}
}

// TestParallelConcurrentCallers checks that callers on several goroutines
// take turns without losing or repeating work.
func TestParallelConcurrentCallers(t *testing.T) {
	t.Parallel()
	b := New(Options{Threads: 3})
	defer b.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 50 {
				n := 100 + g*37 + round
				var sum atomic.Int64
				b.Parallel(n, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						sum.Add(int64(i))
					}
				})
				if want := int64(n * (n - 1) / 2); sum.Load() != want {
					t.Errorf("caller %d round %d: sum %d, want %d", g, round, sum.Load(), want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestParallelAfterIdle checks that parked workers wake for new work.
func TestParallelAfterIdle(t *testing.T) {
	t.Parallel()
	b := New(Options{Threads: 2})
	defer b.Close()
	for range 3 {
		// The worker spins for spinTime after a job, then parks; the job
		// must wake it.
		wait.For(t, "the worker to park", func() bool {
			for _, w := range b.pool.workers {
				if w.state.Load() != workerParked {
					return false
				}
			}
			return true
		})
		rec := &rangeRecorder{hits: make([]atomic.Int32, 500)}
		b.Parallel(500, rec.run)
		rec.check(t, 500, 1)
	}
}

// TestCloseEndsGoroutines checks that every goroutine New starts has ended
// when Close returns, and that Close is idempotent and the Backend still
// computes afterwards, on the caller.
func TestCloseEndsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	b := New(Options{Threads: 6})
	if got := runtime.NumGoroutine(); got < before+5 {
		t.Fatalf("%d goroutines after New(6), want at least %d", got, before+5)
	}
	b.Parallel(100, func(lo, hi int) {})
	b.Close()
	b.Close()
	// A worker calls wg.Done in its last deferred call; give the runtime a
	// moment to retire the goroutine.
	if !wait.Until(func() bool { return runtime.NumGoroutine() <= before }) {
		t.Errorf("%d goroutines after Close, %d before New", runtime.NumGoroutine(), before)
	}
	rec := &rangeRecorder{hits: make([]atomic.Int32, 100)}
	b.Parallel(100, rec.run)
	rec.check(t, 100, 1)
}

// TestParallelNoAlloc checks that dispatching a kept func value allocates
// nothing.
func TestParallelNoAlloc(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	var sink atomic.Int64
	fn := func(lo, hi int) { sink.Add(int64(hi - lo)) }
	allocs := testing.AllocsPerRun(100, func() { b.Parallel(64, fn) })
	if allocs != 0 {
		t.Errorf("Parallel allocates %v times per call", allocs)
	}
	if sink.Load() != 64*101 {
		t.Errorf("ran %d indices, want %d", sink.Load(), 64*101)
	}
}
