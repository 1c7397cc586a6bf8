//go:build amd64

package cpu

import (
	"unsafe"

	"rill/engine/quant"
)

// MatMul's AVX-512 kernel set: the AVX2 set with the Q8_0, Q4_0, Q5_0,
// IQ4_NL and float row kernels replaced by kernels that produce the same
// bits faster: internal/gen/q32z.go's VNNI rows (one weight row, rows by
// four activation rows, row pairs) over activations in the q8x layout
// (q8x_amd64.go), internal/gen/frows.go's float rows and kquantz.go's
// K-quant rows. Q4_1 and Q5_1 keep their AVX2 row kernels. Every type has
// AVX-512 prefill tiles.

// qRows are the kernels of one 32-element block type (wb bytes per weight
// block) over q8x activations: one multiplies many weight rows with one
// activation row; four multiplies many weight rows with four activation
// rows, and pairs does the same for an even number of weight rows, two at
// a time (faster, the same bits).
type qRows struct {
	wb    int
	one   func(w *byte, wstride int, x *byte, nb, rows int, out *float32)
	four  func(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)
	pairs func(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)
	// pairs1 is one for an even number of rows, two at a time: two
	// chains of multiply-adds per vector, which the 4-bit types (bound by
	// computation) want; Q8_0 (bound by memory) keeps one (nil).
	pairs1 func(w *byte, wstride int, x *byte, nb, rows int, out *float32)
}

var (
	q8_0Rows  = qRows{wb: 34, one: dotRowsQ8_0VNNI, four: dotRowsQ8_0x4VNNI, pairs: dotPairsQ8_0VNNI}
	q4_0Rows  = qRows{wb: 18, one: dotRowsQ4_0VNNI, four: dotRowsQ4_0x4VNNI, pairs: dotPairsQ4_0VNNI, pairs1: dotPairs1Q4_0VNNI}
	q5_0Rows  = qRows{wb: 22, one: dotRowsQ5_0VNNI, four: dotRowsQ5_0x4VNNI, pairs: dotPairsQ5_0VNNI, pairs1: dotPairs1Q5_0VNNI}
	iq4NLRows = qRows{wb: 18, one: dotRowsIQ4_NLVNNI, four: dotRowsIQ4_NLx4VNNI, pairs: dotPairsIQ4_NLVNNI, pairs1: dotPairs1IQ4_NLVNNI}
)

// dots computes out[r] = dot(weight row r, x) for r < rows.
func (q *qRows) dots(n int, w []byte, wStride, rows int, x []byte, out []float32) {
	if rows <= 0 {
		return
	}
	out = out[:rows]
	nb := n / 32
	if nb == 0 {
		clear(out)
		return
	}
	_ = w[(rows-1)*wStride+nb*q.wb-1]
	_ = x[nb*q8xBlockBytes-1]
	if wStride < nb*q.wb {
		panic("cpu: overlapping rows")
	}
	even := 0
	if q.pairs1 != nil {
		even = rows &^ 1
	}
	if even > 0 {
		q.pairs1(&w[0], wStride, &x[0], nb, even, &out[0])
	}
	if even < rows {
		q.one(&w[even*wStride], wStride, &x[0], nb, rows-even, &out[even])
	}
}

// dots4 computes out[r + i*outStride] = dot(weight row r, x row i) for
// r < rows and four activation rows xStride bytes apart.
func (q *qRows) dots4(n int, w []byte, wStride, rows int, x []byte, xStride int, out []float32, outStride int) {
	if rows <= 0 {
		return
	}
	nb := n / 32
	_ = out[3*outStride+rows-1]
	if outStride < rows {
		panic("cpu: overlapping rows")
	}
	if nb == 0 {
		for i := range 4 {
			clear(out[i*outStride : i*outStride+rows])
		}
		return
	}
	_ = w[(rows-1)*wStride+nb*q.wb-1]
	_ = x[3*xStride+nb*q8xBlockBytes-1]
	if wStride < nb*q.wb || xStride < nb*q8xBlockBytes {
		panic("cpu: overlapping rows")
	}
	even := rows &^ 1
	if even > 0 {
		q.pairs(&w[0], wStride, &x[0], xStride, nb, even, &out[0], outStride)
	}
	if even < rows {
		q.four(&w[even*wStride], wStride, &x[0], xStride, nb, 1, &out[even], outStride)
	}
}

func (q *qRows) dot(n int, w, x []byte) float32 {
	var o [1]float32
	q.dots(n, w, n/32*q.wb, 1, x, o[:])
	return o[0]
}

func (q *qRows) dot4(n int, w, x []byte, xStride int, out []float32, outStride int) {
	_ = out[3*outStride]
	if n/32 == 0 {
		zero4(out, outStride)
		return
	}
	var o [4]float32
	q.dots4(n, w, n/32*q.wb, 1, x, xStride, o[:], 1)
	out[0], out[outStride], out[2*outStride], out[3*outStride] = o[0], o[1], o[2], o[3]
}

// fRows is a many-row kernel for a float weight type of wsize bytes per
// weight; weight(row, i) decodes weight i of a row for the tails. four
// multiplies any number of weight rows with four activation rows; pairs
// does the same for an even number of weight rows, two at a time (faster,
// the same bits).
type fRows struct {
	wsize int
	// one is the 512-bit many-row kernel; short is the AVX2 one, which
	// gives the same bits and is faster for rows shorter than zmmMin.
	one    func(w unsafe.Pointer, wstride int, x *float32, n, rows int, out *float32)
	short  func(w unsafe.Pointer, wstride int, x *float32, n, rows int, out *float32)
	four   func(w unsafe.Pointer, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
	pairs  func(w unsafe.Pointer, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
	weight func(row []byte, i int) float32
}

var (
	f32Rows = fRows{
		wsize: 4,
		one: func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsF32Z((*float32)(w), ws, x, n, rows, out)
		},
		short: func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsF32AVX((*float32)(w), ws, x, n, rows, out)
		},
		four: func(w unsafe.Pointer, ws int, x *float32, xs, n, rows int, out *float32, os int) {
			dotRowsF32x4Z((*float32)(w), ws, x, xs, n, rows, out, os)
		},
		pairs: func(w unsafe.Pointer, ws int, x *float32, xs, n, rows int, out *float32, os int) {
			dotPairsF32Z((*float32)(w), ws, x, xs, n, rows, out, os)
		},
		weight: func(row []byte, i int) float32 { return bytesF32(row)[i] },
	}
	f16Rows = fRows{
		wsize: 2,
		one: func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsF16Z((*uint16)(w), ws, x, n, rows, out)
		},
		short: func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsF16AVX((*uint16)(w), ws, x, n, rows, out)
		},
		four: func(w unsafe.Pointer, ws int, x *float32, xs, n, rows int, out *float32, os int) {
			dotRowsF16x4Z((*uint16)(w), ws, x, xs, n, rows, out, os)
		},
		pairs: func(w unsafe.Pointer, ws int, x *float32, xs, n, rows int, out *float32, os int) {
			dotPairsF16Z((*uint16)(w), ws, x, xs, n, rows, out, os)
		},
		weight: func(row []byte, i int) float32 { return quant.F16ToF32(bytesU16(row)[i]) },
	}
	bf16Rows = fRows{
		wsize: 2,
		one: func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsBF16Z((*uint16)(w), ws, x, n, rows, out)
		},
		short: func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsBF16AVX((*uint16)(w), ws, x, n, rows, out)
		},
		four: func(w unsafe.Pointer, ws int, x *float32, xs, n, rows int, out *float32, os int) {
			dotRowsBF16x4Z((*uint16)(w), ws, x, xs, n, rows, out, os)
		},
		pairs: func(w unsafe.Pointer, ws int, x *float32, xs, n, rows int, out *float32, os int) {
			dotPairsBF16Z((*uint16)(w), ws, x, xs, n, rows, out, os)
		},
		weight: func(row []byte, i int) float32 { return quant.BF16ToF32(bytesU16(row)[i]) },
	}
)

// zmmMin is the row length from which the 512-bit float kernels beat the
// AVX2 ones: below it a row is a few iterations, and the wider kernel's
// extra reduction steps cost more than its wider loop saves.
const zmmMin = 256

func (f *fRows) dots(n int, w []byte, wStride, rows int, x []byte, out []float32) {
	k := f.one
	if n < zmmMin {
		k = f.short
	}
	floatRows(n, w, wStride, rows, x, out, f.wsize, k, f.weight)
}

// dots4 is dots for four activation rows xStride bytes apart, storing the
// products with activation row i at out[i*outStride:].
func (f *fRows) dots4(n int, w []byte, wStride, rows int, x []byte, xStride int, out []float32, outStride int) {
	if rows <= 0 {
		return
	}
	_ = out[3*outStride+rows-1]
	if outStride < rows || xStride < 4*n {
		panic("cpu: overlapping rows")
	}
	if n == 0 {
		for i := range 4 {
			clear(out[i*outStride : i*outStride+rows])
		}
		return
	}
	_ = w[(rows-1)*wStride+n*f.wsize-1]
	_ = x[3*xStride+4*n-1]
	if wStride < n*f.wsize {
		panic("cpu: overlapping rows")
	}
	body := n &^ 7
	if body > 0 {
		xv := &bytesF32(x)[0]
		even := rows &^ 1
		if even > 0 {
			f.pairs(unsafe.Pointer(&w[0]), wStride, xv, xStride, body, even, &out[0], outStride)
		}
		if even < rows {
			f.four(unsafe.Pointer(&w[even*wStride]), wStride, xv, xStride, body, 1, &out[even], outStride)
		}
	} else {
		for i := range 4 {
			clear(out[i*outStride : i*outStride+rows])
		}
	}
	if body < n {
		for i := range 4 {
			xi := bytesF32(x[i*xStride : i*xStride+4*n])
			floatTails(n, body, w, wStride, xi, out[i*outStride:i*outStride+rows], f.wsize, f.weight)
		}
	}
}

func (f *fRows) dot(n int, w, x []byte) float32 {
	var o [1]float32
	f.dots(n, w, n*f.wsize, 1, x, o[:])
	return o[0]
}

func (f *fRows) dot4(n int, w, x []byte, xStride int, out []float32, outStride int) {
	_ = out[3*outStride]
	var o [4]float32
	f.dots4(n, w, n*f.wsize, 1, x, xStride, o[:], 1)
	out[0], out[outStride], out[2*outStride], out[3*outStride] = o[0], o[1], o[2], o[3]
}

// avx512Kernels is the AVX-512 kernel set: the AVX2 set, with Q8_0 and
// Q4_0 on VNNI kernels over q8x activations and float types on 512-bit
// kernels, all bit-identical to the AVX2 kernels they replace.
func avx512Kernels() *kernelSet {
	ks := simdKernels()
	ks.name = "avx512"
	r := &ks.rows
	for _, c := range []struct {
		t quant.Type
		k *fRows
	}{{quant.F32, &f32Rows}, {quant.F16, &f16Rows}, {quant.BF16, &bf16Rows}} {
		r[c.t].dot, r[c.t].dots, r[c.t].dot4, r[c.t].dots4 = c.k.dot, c.k.dots, c.k.dot4, c.k.dots4
	}
	for _, c := range []struct {
		t    quant.Type
		k    *qRows
		corr int32
	}{{quant.Q8_0, &q8_0Rows, 128}, {quant.Q4_0, &q4_0Rows, 8}, {quant.Q5_0, &q5_0Rows, 16}, {quant.IQ4_NL, &iq4NLRows, 128}} {
		r[c.t] = rowKernel{
			xType: quant.Q8_0, xBlock: q8xBlockBytes, convert: q8xConverter(c.corr),
			dot: c.k.dot, dots: c.k.dots, dot4: c.k.dot4, dots4: c.k.dots4,
		}
	}
	r[quant.Q8_0].gemm = gemmQ8_0.kernel()
	r[quant.Q4_0].gemm = gemmQ4_0.kernel()
	r[quant.Q4_0].pack = packedQ4_0.kernel()
	r[quant.Q8_0].pack = packedQ8_0.kernel()
	r[quant.Q4_K].pack = packedQ4K
	r[quant.F16].pack = packedF16Tiles.kernel(f16Row)
	r[quant.BF16].pack = packedBF16Tiles.kernel(bf16Row)
	r[quant.Q5_0].gemm = gemmQ5_0.kernel()
	r[quant.IQ4_NL].gemm = gemmIQ4_NL.kernel()
	r[quant.Q4_1].gemm = gemmQ4_1.kernel()
	r[quant.Q5_1].gemm = gemmQ5_1.kernel()
	r[quant.F32].gemm = gemmF32.kernel()
	r[quant.F16].gemm = gemmF16.kernel()
	r[quant.BF16].gemm = gemmBF16.kernel()
	for _, g := range kGemms {
		r[g.rows.typ].gemm = g.kernel()
	}
	for _, k := range kFamily {
		kz := k.z()
		r[k.typ].dot, r[k.typ].dot4, r[k.typ].dots = kz.dot, kz.dot4, kz.dots
	}
	return ks
}

// bf16Kernels is the AVX-512 kernel set with prepared F16 and BF16
// matrices multiplied by bf16 dot products (packedd_amd64.go) rather than
// float32 FMAs: twice the multiply rate, F16 weights rounded to bf16.
// Unprepared matrices keep avx512Kernels' arithmetic. Long prompts'
// attention runs on bf16 dot products too, unless RILL_CPU_NOBF16ATTN=1
// (read once, at start-up) keeps it in float32.
func bf16Kernels() *kernelSet {
	ks := avx512Kernels()
	ks.name = "avx512bf16"
	ks.bf16Attn = !noBF16Attn
	ks.rows[quant.F16].pack = packedDot(quant.F16)
	ks.rows[quant.BF16].pack = packedDot(quant.BF16)
	return ks
}
