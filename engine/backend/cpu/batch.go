package cpu

import (
	"fmt"

	"rill/engine/tensor"
)

// batchJob is one multiplication of a LinearBatch that runs with the
// others: on a packed kernel (units are row groups) or a row kernel
// (units are rows).
type batchJob struct {
	mmJob
	units int
}

// LinearBatch is Linear for several independent multiplications, each
// with its own activations: dst[i] = xs[i]·ws[i]ᵀ over ts[i] rows, the
// same bits as len(ws) calls of Linear. The multiplications small enough
// for the row or packed kernels (a decode step's experts, a prompt's
// experts with few tokens each) are split over the threads as one job, so
// that the pool is woken once for all of them rather than once each;
// activations that several read (the same slice, rows and kernel) are
// converted once. Larger ones run as Linear would, one after another.
func (b *Backend) LinearBatch(dst [][]float32, ws []tensor.Matrix, xs [][]float32, ts []int) {
	if len(dst) != len(ws) || len(xs) != len(ws) || len(ts) != len(ws) {
		panic(fmt.Sprintf("cpu: LinearBatch: %d outputs, %d matrices, %d inputs, %d row counts", len(dst), len(ws), len(xs), len(ts)))
	}
	jobs := b.batch[:0]
	need, work := 0, 0
	for i, w := range ws {
		n := ts[i]
		if err := checkMatMul(dst[i], w, xs[i], n); err != nil {
			panic("cpu: LinearBatch: " + err.Error())
		}
		if n == 0 || w.Rows == 0 || w.Cols == 0 {
			clear(dst[i][:n*w.Rows])
			continue
		}
		k := &b.kern.rows[w.Type]
		j := batchJob{mmJob: mmJob{out: dst[i], rows: w.Rows, cols: w.Cols, n: n, k: k, src: xs[i]}}
		if data, ok := b.packedFor(w); ok && k.pack != nil {
			j.pk, j.w, j.units = k.pack, data, groups(k.pack, w.Rows)
			j.xrb = k.pack.xBytes(w.Cols, n) // all n rows
		} else if g := k.gemm; g != nil && n >= g.minTokens && (g.cols == nil || g.cols(w.Cols)) {
			b.MatMul(dst[i], w, xs[i], n) // prefill tiles: alone
			continue
		} else {
			j.w, j.wrb, j.units = w.Data, w.RowBytes(), w.Rows
			j.xrb = 4 * w.Cols
			if k.convert != nil {
				j.xrb = k.xRowBytes(w.Cols)
			}
		}
		work += len(j.w) * n
		jobs = append(jobs, j)
		need += b.xBytes(&j)
	}
	if len(jobs) == 0 {
		b.batch = jobs
		return
	}
	if cap(b.batchX) < need {
		b.batchX = make([]byte, need)
	}
	x := b.batchX[:need]
	total := 0
	for i := range jobs {
		j := &jobs[i]
		if same := b.sharedX(jobs[:i], j); same != nil {
			j.x = same
		} else {
			size := b.xBytes(j)
			j.x, x = x[:size:size], x[size:]
			b.convertJob(j)
		}
		total += j.units
	}
	b.batch = jobs
	if work < parallelMinWork {
		b.batchRange(0, total)
	} else {
		b.pool.run(total, 1, b.batchFn)
	}
	clear(jobs) // keep no reference to the caller's slices
	b.batch = jobs[:0]
}

// xBytes is the size of j's converted activations; none for F32 row
// kernels, which read them as they are.
func (b *Backend) xBytes(j *batchJob) int {
	switch {
	case j.pk != nil:
		return j.xrb
	case j.k.convert == nil:
		return 0
	}
	return j.n * j.xrb
}

// sharedX returns the converted activations of an earlier job that reads
// the same ones as j (the same slice and rows, through the same kernel's
// conversion), or nil.
func (b *Backend) sharedX(done []batchJob, j *batchJob) []byte {
	if j.pk == nil && j.k.convert == nil {
		return nil
	}
	for i := range done {
		d := &done[i]
		if d.pk == j.pk && d.k == j.k && d.n == j.n && d.cols == j.cols && &d.src[0] == &j.src[0] {
			return d.x
		}
	}
	return nil
}

// convertJob converts j's activations into j.x, on the calling thread.
func (b *Backend) convertJob(j *batchJob) {
	switch {
	case j.pk != nil:
		j.pk.convert(j.x, j.src, j.cols, 0, j.n)
	case j.k.convert == nil:
		j.x = f32Bytes(j.src[:j.n*j.cols])
	default:
		for i := range j.n {
			j.k.convert(j.x[i*j.xrb:(i+1)*j.xrb], j.src[i*j.cols:(i+1)*j.cols])
		}
	}
}

// batchRange computes units [lo,hi) of the LinearBatch in flight, the
// jobs' units laid end to end.
func (b *Backend) batchRange(lo, hi int) {
	start := 0
	for i := range b.batch {
		j := &b.batch[i]
		end := start + j.units
		if end > lo && start < hi {
			a, z := max(lo, start)-start, min(hi, end)-start
			if j.pk != nil {
				j.pk.run(j.out, j.w, j.rows, j.cols, j.x, j.n, a, z)
			} else {
				j.rowRange(a, z)
			}
		}
		if end >= hi {
			return
		}
		start = end
	}
}
