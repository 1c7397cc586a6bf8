// Package cpu is rill's CPU compute backend and numeric reference: vector
// kernels on float32 slices, matrix multiplication over GGML weight formats,
// and the worker pool both run on.
//
// On amd64 machines with AVX2, FMA and F16C the kernels are Go assembly,
// generated with avo by internal/gen (go generate; gen_amd64.s is checked
// in and CI regenerates it); on other machines, or when the environment
// variable RILL_CPU_NOSIMD=1 is set when the process starts, they are pure
// Go, and the quantised dot products are engine/quant's scalar reference
// functions. Machines that also have AVX-512 F, BW, VL and VNNI run MatMul
// and attention on AVX-512 kernels (512-bit float kernels, VNNI int8 dot
// products, K-quant rows two chunks per vector, prefill tiles for every
// weight type), which give exactly the bits of the AVX2 kernels, so
// results do not depend on which of the two runs; RILL_CPU_NOAVX512=1
// keeps the AVX2 ones.
//
// The package-level vector kernels are safe for concurrent use on disjoint
// data and never allocate. A Backend is used by one forward pass at a time.
package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Options configures a Backend.
type Options struct {
	// Threads is the number of goroutines that run parallel work, the
	// caller's included. 0 means runtime.GOMAXPROCS(0).
	Threads int
}

// Backend owns a persistent worker pool and the scratch memory of matrix
// multiplication. Create it with New and release it with Close.
//
// MatMul is not safe for concurrent use (it shares one scratch buffer);
// Parallel may be called from several goroutines, which then take turns.
type Backend struct {
	pool pool

	// MatMul state: scratch for converted activations and the job in flight,
	// read by the workers through mmFn/convFn, which are bound once in New so
	// that dispatching them allocates nothing.
	scratch []byte
	// slots are the prefill kernels' per-thread weight scratch (unpacked
	// or widened weight rows of one cache block, accumulators): one per
	// thread, each taken by one range at a time (slotFree: a bit per free
	// slot), so the scratch is bounded by threads x block, whatever the
	// matrix.
	slots    [][]byte
	slotFree atomic.Uint64
	mm       mmJob
	mmFn     func(lo, hi int)
	convFn   func(lo, hi int)
	gemmFn   func(lo, hi int)
	gconvFn  func(lo, hi int)
	kern     *kernelSet
	// shareX: within Linears, MatMul skips converting activations that
	// conv says are already in scratch.
	shareX bool
	conv   convKey
	// packed: the weights Prepare laid out for a packKernel, by the
	// address of the original's data; packFn and pconvFn run such a job.
	packed          map[*byte]packed
	packFn, pconvFn func(lo, hi int)
	// batch is the LinearBatch in flight and batchX its converted
	// activations; batchFn runs a range of it.
	batch   []batchJob
	batchX  []byte
	batchFn func(lo, hi int)

	closeOnce sync.Once
}

// convKey identifies the activations in scratch: converted by a prefill
// kernel or a row kernel, from which x, of how many rows of how many
// values.
type convKey struct {
	g       *gemmKernel
	k       *rowKernel
	p       *packKernel
	x       *float32
	n, cols int
}

// New starts a Backend with opts.Threads-1 worker goroutines (the caller of
// Parallel is the last thread). They spin briefly after each job, then park;
// they end in Close.
func New(opts Options) *Backend {
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	b := &Backend{kern: defaultKernels()}
	b.mmFn = b.matmulRange
	b.convFn = b.convertRange
	b.gemmFn = b.gemmRange
	b.gconvFn = b.gemmConvert
	b.packFn = b.packRange
	b.pconvFn = b.packConvert
	b.batchFn = b.batchRange
	b.pool.start(threads)
	return b
}

// Close stops the worker goroutines and waits for them to end. It is safe to
// call more than once. After Close, Parallel and MatMul still work, on the
// calling goroutine alone.
func (b *Backend) Close() {
	b.closeOnce.Do(b.pool.stop)
}

// Kernels names the kernel set b runs: "avx512bf16" (AVX-512 with bf16
// dot products for prepared F16 and BF16 matrices), "avx512" or "avx2"
// (assembly) or "generic" (pure Go), for start-up logs.
func (b *Backend) Kernels() string { return b.kern.name }

// Threads is the number of goroutines parallel work is split over, the
// caller's included.
func (b *Backend) Threads() int { return b.pool.threads }

// Parallel splits [0,n) into contiguous ranges and runs fn on them, on the
// workers and on the calling goroutine; it returns when every range is done.
// Each index is in exactly one range. n <= 1 runs on the caller alone.
//
// fn must not call Parallel (the pool runs one job at a time) and must not
// panic (a panic on a worker goroutine ends the process). Parallel does not
// allocate when fn is a func value the caller keeps, such as a method value
// bound once.
func (b *Backend) Parallel(n int, fn func(lo, hi int)) {
	b.pool.run(n, 1, fn)
}

// ParallelGrain is Parallel with ranges of at least grain indices (except
// possibly the last): work smaller than two grains runs on the caller alone,
// which is cheaper than waking workers for it.
func (b *Backend) ParallelGrain(n, grain int, fn func(lo, hi int)) {
	b.pool.run(n, grain, fn)
}
