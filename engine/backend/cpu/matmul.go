package cpu

import (
	"math/bits"

	"rill/engine/tensor"
)

// MatMul tuning, in bytes of weight rows times activation rows (a proxy for
// the work of the dot products).
const (
	// parallelMinWork: below it MatMul runs on the caller alone; waking the
	// pool costs about as much as this much work.
	parallelMinWork = 128 << 10
	// grainWork is the least work of one range handed to a thread.
	grainWork = 16 << 10
	// tileBytes bounds a tile of weight rows that stays in cache while every
	// activation row is multiplied with it.
	tileBytes = 32 << 10
	// convertParallelMin is the number of activation values from which their
	// conversion is split over the pool too.
	convertParallelMin = 16 << 10
)

// mmJob is the MatMul in flight, read by the workers.
type mmJob struct {
	out       []float32
	w         []byte // weight rows
	rows      int
	cols      int
	wrb, xrb  int    // bytes per weight row and per converted activation row
	x         []byte // converted activations, n rows of xrb bytes
	n         int
	k         *rowKernel
	g         *gemmKernel // the prefill kernel, when the job runs on one
	pk        *packKernel // the packed kernel, when the job runs on one
	slotBytes int         // the prefill kernel's scratch per thread
	src       []float32   // activations to convert
}

// MatMul computes out[i*w.Rows + r] = sum_c W[r][c] * x[i*w.Cols + c] for
// i < n, r < w.Rows: n activation rows of w.Cols values times the transpose
// of w.
//
// x is first converted to quant.VecDotType(w.Type) into scratch owned by b,
// as llama.cpp's CPU backend does: F16 and BF16 weights dot f16/bf16-rounded
// activations, Q8_0 and Q4_0 weights dot Q8_0 activations, K-quants dot Q8_K.
// Work is split over weight rows, and each thread multiplies a tile of weight
// rows with all n activation rows before moving on, so each weight row is
// read from memory once per call: a batch of n rows costs about one
// matrix-vector product in memory traffic. Every output is computed with the
// same arithmetic whatever n, the row's place in the batch and the thread
// count: a row's results are the same bits alone or batched. A matrix
// that Prepare packed is read from its packed copy, with its packed
// kernel's arithmetic, which is likewise the same for every n.
//
// len(x) must be at least n*w.Cols and len(out) at least n*w.Rows; out must
// not overlap x; w must be a weight MatMul supports (CheckMatMul). MatMul panics otherwise
// (CheckMatMul returns the same condition as an error). It allocates nothing
// once its scratch has grown to the largest activation batch seen, and it is
// not safe for concurrent use.
func (b *Backend) MatMul(out []float32, w tensor.Matrix, x []float32, n int) {
	if err := checkMatMul(out, w, x, n); err != nil {
		panic("cpu: MatMul: " + err.Error())
	}
	if n == 0 || w.Rows == 0 || w.Cols == 0 {
		clear(out[:n*w.Rows])
		return
	}
	k := &b.kern.rows[w.Type]
	if k.pack != nil {
		if data, ok := b.packedFor(w); ok {
			b.packedMatMul(k.pack, out, w, data, x, n)
			return
		}
	}
	wrb := w.RowBytes()
	j := &b.mm
	*j = mmJob{out: out, w: w.Data, rows: w.Rows, cols: w.Cols, wrb: wrb, n: n, k: k}
	if g := k.gemm; g != nil && n >= g.minTokens && (g.cols == nil || g.cols(w.Cols)) {
		b.gemm(g, x)
		*j = mmJob{}
		return
	}

	if k.convert == nil {
		j.x, j.xrb = f32Bytes(x[:n*w.Cols]), 4*w.Cols
	} else {
		j.xrb = k.xRowBytes(w.Cols)
		need := n * j.xrb
		if cap(b.scratch) < need {
			b.scratch = make([]byte, need)
		}
		j.x, j.src = b.scratch[:need], x
		if !b.converted(convKey{k: k, x: &x[0], n: n, cols: w.Cols}) {
			if n > 1 && n*w.Cols >= convertParallelMin {
				b.pool.run(n, 1, b.convFn)
			} else {
				b.convertRange(0, n)
			}
		}
	}

	work := w.Rows * wrb * n
	if work < parallelMinWork {
		b.matmulRange(0, w.Rows)
	} else {
		b.pool.run(w.Rows, max(1, grainWork/(wrb*n)), b.mmFn)
	}
	*j = mmJob{}
}

// gemm runs the job in flight on its prefill kernel g: activations
// converted in parallel, then weight rows split over the threads.
func (b *Backend) gemm(g *gemmKernel, x []float32) {
	j := &b.mm
	need := g.xBytes(j.cols, j.n)
	if cap(b.scratch) < need {
		b.scratch = make([]byte, need)
	}
	j.x, j.src = b.scratch[:need], x
	j.slotBytes = g.slotBytes(j.cols)
	b.growSlots(j.slotBytes)
	j.g = g
	if !b.converted(convKey{g: g, x: &x[0], n: j.n, cols: j.cols}) {
		if j.n*j.cols >= convertParallelMin {
			b.pool.run(j.n, 1, b.gconvFn)
		} else {
			b.gemmConvert(0, j.n)
		}
		g.finish(j.x, j.cols, j.n)
	}
	// Rows in about gemmRangesPerThread ranges per thread, of at least
	// gemmGrainRows (a few register tiles) and a multiple of 12 (whole
	// panels of 4 rows, and of 2 for the float tiles), claimed one at a
	// time.
	chunk := j.rows / (b.pool.threads * gemmRangesPerThread)
	chunk = max(gemmGrainRows, (chunk+11)/12*12)
	b.pool.runRanges(j.rows, chunk, gemmGrainRows, b.gemmFn)
}

// converted reports whether scratch already holds the activations key
// describes (within Linears), and records key as what it will hold.
func (b *Backend) converted(key convKey) bool {
	if !b.shareX {
		return false
	}
	if b.conv == key {
		return true
	}
	b.conv = key
	return false
}

const (
	// gemmGrainRows is the least number of weight rows of one prefill
	// range.
	gemmGrainRows = 16
	// gemmRangesPerThread: a prefill multiplication is long (milliseconds),
	// so it is cut into many ranges; a thread that the machine slows down
	// (other processes) then holds back one small range, not a quarter of
	// the work.
	gemmRangesPerThread = 8
)

func (b *Backend) gemmConvert(lo, hi int) {
	j := &b.mm
	j.g.convert(j.x, j.src, j.cols, j.n, lo, hi)
}

func (b *Backend) gemmRange(lo, hi int) {
	j := &b.mm
	s := b.takeSlot()
	j.g.run(j.out, j.w, j.rows, j.cols, j.wrb, j.x, j.n, b.slots[s][:j.slotBytes], lo, hi)
	b.slotFree.Or(1 << s)
}

// growSlots makes one scratch slot per thread of at least size bytes and
// marks them all free. It runs before a job is dispatched (no range holds a
// slot).
func (b *Backend) growSlots(size int) {
	n := min(b.pool.threads, 64)
	if len(b.slots) != n {
		b.slots = make([][]byte, n)
	}
	for i := range b.slots {
		if cap(b.slots[i]) < size {
			b.slots[i] = make([]byte, size)
		}
		b.slots[i] = b.slots[i][:cap(b.slots[i])]
	}
	b.slotFree.Store(1<<n - 1)
}

// takeSlot claims a free scratch slot. A thread runs one range at a time,
// so with a slot per thread there is always one (past 64 threads a range
// may wait for another to finish).
func (b *Backend) takeSlot() int {
	for {
		free := b.slotFree.Load()
		if free == 0 {
			cpuPause()
			continue
		}
		s := bits.TrailingZeros64(free)
		if b.slotFree.CompareAndSwap(free, free&^(1<<s)) {
			return s
		}
	}
}

// convertRange converts activation rows [lo,hi) of the job in flight.
func (b *Backend) convertRange(lo, hi int) {
	j := &b.mm
	for i := lo; i < hi; i++ {
		j.k.convert(j.x[i*j.xrb:(i+1)*j.xrb], j.src[i*j.cols:(i+1)*j.cols])
	}
}

// matmulRange computes output columns (weight rows) [lo,hi) for all n
// activation rows of the job in flight.
func (b *Backend) matmulRange(lo, hi int) { b.mm.rowRange(lo, hi) }

// rowRange computes output columns (weight rows) [lo,hi) of j, a job on a
// row kernel, for all its activation rows.
func (j *mmJob) rowRange(lo, hi int) {
	k, rows, cols, wrb, xrb, n := j.k, j.rows, j.cols, j.wrb, j.xrb, j.n
	tile := max(1, tileBytes/wrb)
	for r0 := lo; r0 < hi; r0 += tile {
		r1 := min(r0+tile, hi)
		i := 0
		if k.dots4 != nil {
			for ; i+4 <= n; i += 4 {
				k.dots4(cols, j.w[r0*wrb:r1*wrb], wrb, r1-r0, j.x[i*xrb:(i+4)*xrb], xrb, j.out[i*rows+r0:], rows)
			}
		} else if k.dot4 != nil {
			for ; i+4 <= n; i += 4 {
				xs := j.x[i*xrb : (i+4)*xrb]
				for r := r0; r < r1; r++ {
					k.dot4(cols, j.w[r*wrb:(r+1)*wrb], xs, xrb, j.out[i*rows+r:], rows)
				}
			}
		}
		for ; i < n; i++ {
			xi := j.x[i*xrb : (i+1)*xrb]
			o := j.out[i*rows : (i+1)*rows]
			if k.dots != nil {
				k.dots(cols, j.w[r0*wrb:r1*wrb], wrb, r1-r0, xi, o[r0:r1])
				continue
			}
			for r := r0; r < r1; r++ {
				o[r] = k.dot(cols, j.w[r*wrb:(r+1)*wrb], xi)
			}
		}
	}
}
