//go:build amd64

package cpu

import "rill/engine/quant"

// vaccQKernel is one generated value kernel (internal/gen/attnq.go).
type vaccQKernel func(acc *float32, v *byte, w *float32, rows, rb, wstride, astride int)

// vaccQKernels holds a cache type's value kernels by heads per call, for
// one vector width.
type vaccQKernels struct {
	bb    int           // bytes per block
	heads []vaccQKernel // heads[i]: i+1 heads per call
}

var (
	vaccQ8_0Z   = vaccQKernels{34, []vaccQKernel{vaccQ8_0Z1, vaccQ8_0Z2, vaccQ8_0Z3, vaccQ8_0Z4}}
	vaccQ4_0Z   = vaccQKernels{18, []vaccQKernel{vaccQ4_0Z1, vaccQ4_0Z2, vaccQ4_0Z3, vaccQ4_0Z4}}
	vaccQ8_0AVX = vaccQKernels{34, []vaccQKernel{vaccQ8_0AVX1, vaccQ8_0AVX2}}
	vaccQ4_0AVX = vaccQKernels{18, []vaccQKernel{vaccQ4_0AVX1, vaccQ4_0AVX2}}
)

// quantValueKernel returns the fused value kernel for a cache type, or nil
// where values take the generic path (dequantise the block, then AXPY per
// head and row): without SIMD, or for another type.
func quantValueKernel(t quant.Type, _ int) func(acc []float32, v []byte, rb, rows int, w []float32, ws, hd, group int) {
	var k *vaccQKernels
	switch {
	case !useSIMD:
		return nil
	case t == quant.Q8_0 && useAVX512:
		k = &vaccQ8_0Z
	case t == quant.Q4_0 && useAVX512:
		k = &vaccQ4_0Z
	case t == quant.Q8_0:
		k = &vaccQ8_0AVX
	case t == quant.Q4_0:
		k = &vaccQ4_0AVX
	default:
		return nil
	}
	return k.acc
}

// acc adds w[i*ws + r] * dequant(value row r) to acc[i*hd:(i+1)*hd] for
// rows rows of hd values (rb bytes apart in v) and group heads, each
// column of blocks read once for as many heads as a kernel holds.
func (k *vaccQKernels) acc(acc []float32, v []byte, rb, rows int, w []float32, ws, hd, group int) {
	if rows <= 0 {
		return
	}
	nb := hd / 32
	// Bounds, once: the kernels read and write only inside these.
	_ = acc[group*hd-1]
	_ = v[(rows-1)*rb+nb*k.bb-1]
	_ = w[(group-1)*ws+rows-1]
	most := len(k.heads)
	for i := 0; i < group; i += most {
		nh := min(most, group-i)
		kern := k.heads[nh-1]
		for c := range nb {
			kern(&acc[i*hd+c*32], &v[c*k.bb], &w[i*ws], rows, rb, 4*ws, 4*hd)
		}
	}
}

// quantMax, quantScaleSub and quantSum are the softmax steps of a chunk of
// scores (attnQScores in internal/gen/attnq.go), with their generic forms
// for tails and without SIMD.

func quantMax(x []float32) float32 {
	body := len(x) &^ 7
	if !useSIMD || body == 0 {
		return quantMaxGeneric(x)
	}
	return max(quantMaxAVX(&x[0], body), quantMaxGeneric(x[body:]))
}

func quantScaleSub(x []float32, a, b float32) {
	body := len(x) &^ 7
	if !useSIMD || body == 0 {
		quantScaleSubGeneric(x, a, b)
		return
	}
	quantScaleSubAVX(&x[0], body, a, b)
	quantScaleSubGeneric(x[body:], a, b)
}

func quantSum(x []float32) float32 {
	body := len(x) &^ 7
	if !useSIMD || body == 0 {
		return quantSumGeneric(x)
	}
	return quantSumAVX(&x[0], body) + quantSumGeneric(x[body:])
}
