package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Dispatch tuning. A decode step of a tiny model issues dozens of parallel
// jobs a few microseconds apart, so a worker that has just finished a job
// spins for spinTime before it parks: waking a parked goroutine costs several
// microseconds, which would exceed the job itself.
const (
	spinTime = 50 * time.Microsecond
	// chunksPerThread > 1 lets threads that start late or run slow (the
	// machine is shared) take fewer ranges than the others: ranges are claimed
	// one at a time, not assigned up front.
	chunksPerThread = 2
	// waitSpins is how many pause loops the dispatching goroutine spins on
	// unfinished ranges before it starts yielding its P to the scheduler.
	waitSpins = 256
)

const (
	workerRunning int32 = iota // working or spinning: will see new work by itself
	workerParked               // blocked on its wake channel: must be sent a token
)

type worker struct {
	state atomic.Int32
	wake  chan struct{} // capacity 1; a token is sent only by whoever moves state parked->running
	_     [48]byte      // keep workers' states on separate cache lines
}

// pool runs one job at a time over threads goroutines: threads-1 workers
// plus the goroutine that calls run.
//
// A job is published by writing fn, n and chunk and then storing work, whose
// high 32 bits are the number of ranges and low 32 bits the next range to
// claim. A thread reads the job's fields only after it claimed a range by
// compare-and-swap on work, and the dispatcher rewrites them only after
// pending (ranges not yet finished) dropped to zero, so a worker that wakes
// late never sees a half-written job.
type pool struct {
	threads int
	workers []*worker
	wg      sync.WaitGroup
	quit    atomic.Bool
	mu      sync.Mutex // serialises run

	fn    func(lo, hi int)
	n     int
	chunk int

	_       [64]byte
	work    atomic.Uint64
	_       [56]byte
	pending atomic.Int64
	_       [56]byte
}

func (p *pool) start(threads int) {
	p.threads = threads
	p.workers = make([]*worker, threads-1)
	for i := range p.workers {
		w := &worker{wake: make(chan struct{}, 1)}
		p.workers[i] = w
		p.wg.Add(1)
		go p.loop(w)
	}
}

// stop ends the workers and waits for them.
func (p *pool) stop() {
	p.mu.Lock() // no job in flight from here on
	defer p.mu.Unlock()
	p.quit.Store(true)
	for _, w := range p.workers {
		p.unpark(w)
	}
	p.wg.Wait()
	p.threads = 1
	p.workers = nil
}

// run executes fn over [0,n) in ranges of at least grain (see Parallel).
func (p *pool) run(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	ranges := min(n/grain, p.threads*chunksPerThread)
	p.runRanges(n, (n+max(ranges, 1)-1)/max(ranges, 1), grain, fn)
}

// runRanges executes fn over [0,n) in ranges of chunk indices (the last
// may be shorter), claimed one at a time by the threads: for long jobs,
// whose ranges should be many more than the threads so that a thread the
// machine slows down holds back little. Below 2*grain, fn runs on the
// caller alone.
func (p *pool) runRanges(n, chunk, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunk = max(chunk, 1)
	if p.threads == 1 || n < 2*max(grain, 1) || chunk >= n {
		fn(0, n)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quit.Load() {
		fn(0, n)
		return
	}
	ranges := (n + chunk - 1) / chunk

	p.fn, p.n, p.chunk = fn, n, chunk
	p.pending.Store(int64(ranges))
	p.work.Store(uint64(ranges) << 32) // publish

	// Wake parked workers, counting running ones as already available.
	need := ranges - 1
	for _, w := range p.workers {
		if need <= 0 {
			break
		}
		p.unpark(w)
		need--
	}

	for p.claim() {
	}
	for i := 0; p.pending.Load() != 0; i++ {
		if i < waitSpins {
			cpuPause()
		} else {
			runtime.Gosched()
		}
	}
	p.fn = nil // do not keep the caller's closure alive
}

// claim takes the next unclaimed range of the current job and runs it. It
// reports false when no range was left.
func (p *pool) claim() bool {
	for {
		s := p.work.Load()
		next, ranges := uint32(s), uint32(s>>32)
		if next >= ranges {
			return false
		}
		if p.work.CompareAndSwap(s, s+1) {
			lo := int(next) * p.chunk
			hi := min(lo+p.chunk, p.n)
			p.fn(lo, hi)
			p.pending.Add(-1)
			return true
		}
	}
}

func (p *pool) hasWork() bool {
	s := p.work.Load()
	return uint32(s) < uint32(s>>32)
}

// unpark wakes w if it is parked; a running worker needs nothing.
func (p *pool) unpark(w *worker) {
	if w.state.Load() == workerParked && w.state.CompareAndSwap(workerParked, workerRunning) {
		w.wake <- struct{}{}
	}
}

// loop is a worker goroutine: claim ranges while there are any, spin for
// spinTime waiting for more, then park until a dispatcher or stop wakes it.
func (p *pool) loop(w *worker) {
	defer p.wg.Done()
	for {
		for p.claim() {
		}
		if p.spin() {
			continue
		}
		if p.quit.Load() {
			return
		}
		w.state.Store(workerParked)
		// Re-check after announcing the park: a dispatcher that published
		// before it could see workerParked will not send a token.
		if p.hasWork() || p.quit.Load() {
			if w.state.CompareAndSwap(workerParked, workerRunning) {
				continue
			}
			// A dispatcher won the swap and is sending a token; take it so
			// the channel is empty before the next park.
		}
		<-w.wake
	}
}

// spin waits up to spinTime for new work; it reports whether work arrived.
func (p *pool) spin() bool {
	start := time.Now()
	for i := 1; ; i++ {
		if p.hasWork() {
			return true
		}
		if p.quit.Load() {
			return false
		}
		cpuPause()
		if i%32 == 0 && time.Since(start) > spinTime {
			return false
		}
	}
}
