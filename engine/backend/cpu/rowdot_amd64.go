//go:build amd64

package cpu

import (
	"math"
	"unsafe"

	"rill/engine/quant"
)

// Row kernels of MatMul's AVX2 kernel set (dot_amd64.s, rows_amd64.s; the
// quantised types in b32_amd64.go and kquant_amd64.go) and their Go
// wrappers.

//go:noescape
func dotF16F32AVX(w *uint16, x *float32, n int) float32

//go:noescape
func dotBF16F32AVX(w *uint16, x *float32, n int) float32

//go:noescape
func roundF16AVX(dst, src *float32, n int)

//go:noescape
func dotRowsF32AVX(w *float32, wstride int, x *float32, n, rows int, out *float32)

//go:noescape
func dotRowsF16AVX(w *uint16, wstride int, x *float32, n, rows int, out *float32)

//go:noescape
func dotRowsBF16AVX(w *uint16, wstride int, x *float32, n, rows int, out *float32)

// Row dots with engine/quant's signature (n elements, whole blocks).

func dotF32Row(n int, w, x []byte) float32 {
	return dotF32SIMD(bytesF32(w)[:n], bytesF32(x)[:n])
}

// F16 and BF16 weights dot activations that were rounded to f16/bf16 once
// per MatMul and kept as float32 (kernelSet.rows[t].xType is F32 for them):
// the products are those of ggml's f16 x f16 dot, and only the weights are
// converted in the inner loop.

func dotF16Row(n int, w, x []byte) float32 {
	wv, xv := bytesU16(w)[:n], bytesF32(x)[:n]
	body := n &^ 7
	var s float32
	if body > 0 {
		s = dotF16F32AVX(&wv[0], &xv[0], body)
	}
	for i := body; i < n; i++ {
		s += quant.F16ToF32(wv[i]) * xv[i]
	}
	return s
}

func dotBF16Row(n int, w, x []byte) float32 {
	wv, xv := bytesU16(w)[:n], bytesF32(x)[:n]
	body := n &^ 7
	var s float32
	if body > 0 {
		s = dotBF16F32AVX(&wv[0], &xv[0], body)
	}
	for i := body; i < n; i++ {
		s += quant.BF16ToF32(wv[i]) * xv[i]
	}
	return s
}

// floatRows runs a many-row kernel on the multiple-of-8 body of each row
// and adds the tails in Go: out[r] = dot(weight row r, x) for r < rows.
// wsize is the size of one weight; weight(row, i) decodes weight i of a row.
func floatRows(n int, w []byte, wStride, rows int, x []byte, out []float32, wsize int,
	kernel func(w unsafe.Pointer, wstride int, x *float32, n, rows int, out *float32),
	weight func(row []byte, i int) float32) {
	if rows <= 0 {
		return
	}
	out = out[:rows]
	if n == 0 {
		clear(out)
		return
	}
	_ = w[(rows-1)*wStride+n*wsize-1]
	if wStride < n*wsize {
		panic("cpu: overlapping rows")
	}
	xv := bytesF32(x)[:n]
	body := n &^ 7
	if body > 0 {
		kernel(unsafe.Pointer(&w[0]), wStride, &xv[0], body, rows, &out[0])
	} else {
		clear(out)
	}
	if body < n {
		floatTails(n, body, w, wStride, xv, out, wsize, weight)
	}
}

// floatTails adds the products of elements [body,n) of each weight row and
// of xv to out, in order, in float32: the tail of every float row kernel,
// so that the many-row and four-row kernels round exactly as the
// single-row ones do.
func floatTails(n, body int, w []byte, wStride int, xv, out []float32, wsize int, weight func(row []byte, i int) float32) {
	for r := range out {
		row := w[r*wStride : r*wStride+n*wsize]
		s := out[r]
		for i := body; i < n; i++ {
			s += weight(row, i) * xv[i]
		}
		out[r] = s
	}
}

func dotsF32(n int, w []byte, wStride, rows int, x []byte, out []float32) {
	floatRows(n, w, wStride, rows, x, out, 4,
		func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsF32AVX((*float32)(w), ws, x, n, rows, out)
		},
		func(row []byte, i int) float32 { return bytesF32(row)[i] })
}

func dotsF16(n int, w []byte, wStride, rows int, x []byte, out []float32) {
	floatRows(n, w, wStride, rows, x, out, 2,
		func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsF16AVX((*uint16)(w), ws, x, n, rows, out)
		},
		func(row []byte, i int) float32 { return quant.F16ToF32(bytesU16(row)[i]) })
}

func dotsBF16(n int, w []byte, wStride, rows int, x []byte, out []float32) {
	floatRows(n, w, wStride, rows, x, out, 2,
		func(w unsafe.Pointer, ws int, x *float32, n, rows int, out *float32) {
			dotRowsBF16AVX((*uint16)(w), ws, x, n, rows, out)
		},
		func(row []byte, i int) float32 { return quant.BF16ToF32(bytesU16(row)[i]) })
}

// blockRows returns the number of blocks in n elements and checks that w and
// x hold them (wb and xb bytes per block).
func blockRows(n, elems, wb, xb int, w, x []byte) int {
	nb := n / elems
	_ = w[nb*wb-1]
	_ = x[nb*xb-1]
	return nb
}

func zero4(out []float32, outStride int) {
	out[0], out[outStride], out[2*outStride], out[3*outStride] = 0, 0, 0, 0
}

// check4 checks the operands of a four-row kernel: x holds four rows of
// xStride bytes, each at least xb bytes for nb blocks, w holds nb blocks of
// wb, and out reaches out[3*outStride].
func check4(nb, wb, xb int, w, x []byte, xStride int, out []float32, outStride int) {
	_ = w[nb*wb-1]
	_ = x[3*xStride+nb*xb-1]
	_ = out[3*outStride]
	if xStride < nb*xb || outStride < 1 {
		panic("cpu: overlapping rows")
	}
}

// f16Row rounds one activation row to f16 precision with F16C, keeping it
// as float32.
func f16Row(dst []byte, src []float32) {
	d := bytesF32(dst)[:len(src)]
	body := len(src) &^ 7
	if body > 0 {
		roundF16AVX(&d[0], &src[0], body)
	}
	if body < len(src) {
		var buf [8]float32
		copy(buf[:], src[body:])
		roundF16AVX(&buf[0], &buf[0], 8)
		copy(d[body:], buf[:])
	}
}

// bf16Row rounds one activation row to bf16 precision (to nearest even, as
// engine/quant does), keeping it as float32.
func bf16Row(dst []byte, src []float32) {
	d := bytesF32(dst)[:len(src)]
	for i, v := range src {
		d[i] = math.Float32frombits(uint32(quant.F32ToBF16(v)) << 16)
	}
}

// simdKernels is the AVX2 kernel set. Activations are quantised to Q8_0 and
// Q8_1 by engine/quant's reference quantisers and to Q8_K by an assembly one that
// gives the same bytes, so the activations match llama.cpp's reference
// rounding exactly.
func simdKernels() *kernelSet {
	ks := genericKernels()
	ks.name = "avx2"
	r := &ks.rows
	r[quant.F32].dot, r[quant.F32].dots = dotF32Row, dotsF32
	r[quant.F16] = rowKernel{xType: quant.F32, convert: f16Row, dot: dotF16Row, dots: dotsF16}
	r[quant.BF16] = rowKernel{xType: quant.F32, convert: bf16Row, dot: dotBF16Row, dots: dotsBF16}
	for _, k := range b32Family {
		r[k.typ].dot, r[k.typ].dot4 = k.dot, k.dot4
	}
	for _, k := range kFamily {
		r[k.typ] = rowKernel{xType: quant.Q8_K, convert: q8KRow, dot: k.dot, dot4: k.dot4}
	}
	return ks
}
