package cpu

import (
	"rill/engine/tensor"
)

// packKernel multiplies weights kept in a layout of the kernel's own, made
// once by Backend.Prepare (as llama.cpp repacks Q4_0 for its AVX kernels):
// rows in groups of group, each group groupBytes(cols) bytes. Activations
// are converted once per batch into the kernel's layout. Every output is
// computed with the same arithmetic whatever the batch size, the token's
// place in it and the thread split.
type packKernel struct {
	group      int
	groupBytes func(cols int) int
	// tileGroups, when not 0, is the most groups one register tile
	// multiplies: a thread's ranges are cut in multiples of it, so that
	// no range ends in a narrower, slower tile it did not need.
	tileGroups int
	// packable, when not nil, reports whether rows of cols values can be
	// packed (others keep the unpacked kernels).
	packable func(cols int) bool
	// pack writes groups [lo,hi) of src (rows of cols values, in the
	// weight type's own layout) into dst.
	pack func(dst, src []byte, rows, cols, lo, hi int)
	// xBytes is the size of n converted activation rows of cols values;
	// convert writes rows [lo,hi) of src into dst.
	xBytes  func(cols, n int) int
	convert func(dst []byte, src []float32, cols, lo, hi int)
	// run computes out[i*rows + r] for the rows of groups [lo,hi) and
	// every activation row i < n.
	run func(out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int)
}

// packed is one prepared matrix: its packed weights, and the shape and
// length of the original, which a MatMul must match to use them.
type packed struct {
	data             []byte
	rows, cols, size int
}

// Prepare lays out, once, each matrix of ws whose type this Backend
// multiplies faster from a layout of its own (F16, BF16, Q4_0, Q8_0 and
// Q4_K on AVX-512: 16 rows interleaved), and MatMul then reads that copy
// for the matrix. It is for a model's weights: each matrix must stay valid
// and unchanged while the Backend lives (MatMul finds the copy by the
// address of the original's data). Matrices already prepared, of other
// types, or invalid are left as they are. It returns the matrices of ws it
// holds a copy of, made now or by an earlier call: MatMul no longer reads
// their data, and the copies cost memory as large as it.
//
// A prepared matrix's results follow its packed kernel's arithmetic (one
// float per block or output, as llama.cpp's repacked kernels), which
// differs in the last bits from the unprepared kernels'; within one
// Backend a matrix is always multiplied one way, so batching never changes
// a result. Prepare must not run concurrently with other methods of b.
func (b *Backend) Prepare(ws []tensor.Matrix) (copied []tensor.Matrix) {
	type job struct {
		w    tensor.Matrix
		pk   *packKernel
		size int // bytes of the copy
	}
	var jobs []job
	total := 0
	seen := map[*byte]bool{}
	for _, w := range ws {
		if len(w.Data) == 0 || checkWeight(w) != nil {
			continue
		}
		pk := b.kern.rows[w.Type].pack
		key := &w.Data[0]
		if pk == nil || pk.packable != nil && !pk.packable(w.Cols) {
			continue
		}
		if _, ok := b.packedFor(w); ok || seen[key] {
			if ok {
				copied = append(copied, w)
			}
			continue
		}
		seen[key] = true
		size := groups(pk, w.Rows) * pk.groupBytes(w.Cols)
		jobs = append(jobs, job{w, pk, size})
		total += size
	}
	if len(jobs) == 0 {
		return copied
	}
	arena := allocPacked(total)
	if b.packed == nil {
		b.packed = make(map[*byte]packed)
	}
	for _, j := range jobs {
		dst := arena[:j.size:j.size]
		arena = arena[j.size:]
		w, pk := j.w, j.pk
		b.Parallel(groups(pk, w.Rows), func(lo, hi int) { pk.pack(dst, w.Data, w.Rows, w.Cols, lo, hi) })
		b.packed[&w.Data[0]] = packed{data: dst, rows: w.Rows, cols: w.Cols, size: len(w.Data)}
		copied = append(copied, w)
	}
	return copied
}

// groups is the number of row groups of a packed matrix of rows rows.
func groups(pk *packKernel, rows int) int { return (rows + pk.group - 1) / pk.group }

// packedFor returns the packed copy of w, if Prepare made one.
func (b *Backend) packedFor(w tensor.Matrix) ([]byte, bool) {
	if b.packed == nil || len(w.Data) == 0 {
		return nil, false
	}
	p, ok := b.packed[&w.Data[0]]
	if !ok || p.rows != w.Rows || p.cols != w.Cols || p.size != len(w.Data) {
		return nil, false
	}
	return p.data, true
}

// packedMatMul is MatMul on the packed copy data of w, with its kernel pk.
func (b *Backend) packedMatMul(pk *packKernel, out []float32, w tensor.Matrix, data []byte, x []float32, n int) {
	j := &b.mm
	*j = mmJob{out: out, w: data, rows: w.Rows, cols: w.Cols, n: n, pk: pk, src: x}
	need := pk.xBytes(w.Cols, n)
	if cap(b.scratch) < need {
		b.scratch = make([]byte, need)
	}
	j.x = b.scratch[:need]
	if !b.converted(convKey{p: pk, x: &x[0], n: n, cols: w.Cols}) {
		if n > 1 && n*w.Cols >= convertParallelMin {
			b.pool.run(n, 1, b.pconvFn)
		} else {
			b.packConvert(0, n)
		}
	}
	ng := groups(pk, w.Rows)
	gb := pk.groupBytes(w.Cols)
	switch work := ng * gb * n; {
	case work < parallelMinWork:
		b.packRange(0, ng)
	case n < packRangesFrom:
		b.pool.run(ng, max(1, grainWork/(gb*n)), b.packFn)
	default:
		// Long jobs in many ranges per thread, claimed one at a time (see
		// gemmRangesPerThread).
		chunk := max(1, ng/(b.pool.threads*gemmRangesPerThread))
		if tg := pk.tileGroups; tg > 1 {
			chunk = (chunk + tg - 1) / tg * tg
		}
		b.pool.runRanges(ng, chunk, 1, b.packFn)
	}
	*j = mmJob{}
}

// packRangesFrom is the batch from which a packed multiplication is
// cut into many ranges per thread rather than one each.
const packRangesFrom = 8

func (b *Backend) packConvert(lo, hi int) {
	j := &b.mm
	j.pk.convert(j.x, j.src, j.cols, lo, hi)
}

func (b *Backend) packRange(lo, hi int) {
	j := &b.mm
	j.pk.run(j.out, j.w, j.rows, j.cols, j.x, j.n, lo, hi)
}
