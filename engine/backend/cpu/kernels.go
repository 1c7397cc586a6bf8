package cpu

import (
	"unsafe"

	"rill/engine/quant"
)

// rowKernel is how MatMul handles one weight type.
type rowKernel struct {
	// xType is the layout activations are converted to: quant.VecDotType of
	// the weight type, except that the SIMD kernels for F16 and BF16 weights
	// keep activations rounded to f16/bf16 precision as float32 (F32), which
	// gives the same products with half the conversions.
	xType quant.Type
	// xBlock, when not 0, is the size in bytes of one xType block of
	// converted activations in this kernel's own layout (the AVX-512 Q8_0
	// and Q4_0 kernels read the q8x layout, which holds xType's values
	// with precomputed extras); 0 means xType's own layout.
	xBlock int
	// convert writes one row of len(src) activations into dst in the
	// kernel's layout; nil for F32, whose activations are used as they are.
	convert func(dst []byte, src []float32)
	// dot is the dot product of one weight row and one activation row of n
	// elements, with engine/quant's Dot* signature.
	dot func(n int, w, x []byte) float32
	// dot4, when not nil, computes the dots of one weight row with four
	// activation rows starting at x, xStride bytes apart, and stores them at
	// out[0], out[outStride], out[2*outStride], out[3*outStride]. It unpacks
	// the weight row once for all four, which pays in batched decode and
	// prefill.
	dot4 func(n int, w, x []byte, xStride int, out []float32, outStride int)
	// dots, when not nil, computes out[r] = dot(weight row r, x) for
	// r < rows, weight rows wStride bytes apart: one call for many rows, so
	// that narrow rows do not pay a call each. MatMul uses it instead of dot.
	dots func(n int, w []byte, wStride, rows int, x []byte, out []float32)
	// dots4, when not nil, is dot4 for many weight rows in one call:
	// out[r + i*outStride] = dot(weight row r, activation row i) for
	// r < rows, i < 4, weight rows wStride bytes apart and activation rows
	// xStride bytes apart (outStride >= rows). MatMul uses it instead of
	// dot4.
	dots4 func(n int, w []byte, wStride, rows int, x []byte, xStride int, out []float32, outStride int)
	// gemm, when not nil, is the prefill path: MatMul uses it for batches of
	// at least gemm.minTokens activation rows.
	gemm *gemmKernel
	// pack, when not nil, multiplies weights that Prepare laid out in the
	// kernel's own layout, for every batch size. Its arithmetic is its
	// own (not the bits of dot), the same for every batch.
	pack *packKernel
	// dot, dot4, dots, dots4 and gemm compute each output with the same
	// arithmetic, bit for bit, so a row's result does not depend on the
	// batch it came in (speculative verification must reproduce plain
	// decoding exactly).
}

// gemmKernel is a blocked matrix multiplication for one weight type: the
// activations are converted once per batch into the kernel's own layout,
// and register tiles of several weight rows by several activation rows
// reuse each unpacked weight block across the tile.
type gemmKernel struct {
	// minTokens is the batch size from which MatMul takes this path.
	minTokens int
	// cols, when not nil, reports whether rows of cols elements can take
	// this path.
	cols func(cols int) bool
	// xBytes is the size of n converted activation rows of cols values.
	xBytes func(cols, n int) int
	// slotBytes is the size of the weight scratch one thread needs for
	// rows of cols values (bounded: a cache block of rows, not the matrix).
	slotBytes func(cols int) int
	// convert writes activation rows [lo,hi) of the n rows in src (cols
	// values each) into dst, laid out for n rows; finish completes dst
	// after all rows are converted (padding), on one thread.
	convert func(dst []byte, src []float32, cols, n, lo, hi int)
	finish  func(dst []byte, cols, n int)
	// run computes out[i*rows + r] for weight rows [lo,hi) and every
	// activation row i < n, from the converted activations x; slot is the
	// calling thread's scratch of slotBytes(cols) bytes.
	run func(out []float32, w []byte, rows, cols, wrb int, x []byte, n int, slot []byte, lo, hi int)
}

// xRowBytes is the size of one row of cols converted activations (cols a
// whole number of xType blocks).
func (k *rowKernel) xRowBytes(cols int) int {
	if k.xBlock != 0 {
		return cols / k.xType.BlockElems() * k.xBlock
	}
	return cols / k.xType.BlockElems() * k.xType.BlockBytes()
}

// kernelSet holds a rowKernel per weight type, indexed by type id.
type kernelSet struct {
	name string
	rows [maxType + 1]rowKernel
	// bf16Attn: long prompts' tiled attention runs on bf16 dot products
	// (attention_tiled.go's bf16 arithmetic) rather than float32 FMAs.
	bf16Attn bool
}

// maxType bounds the type ids kernelSet indexes.
const maxType = quant.MXFP4

// weightTypes are the weight formats MatMul supports.
var weightTypes = []quant.Type{
	quant.F32, quant.F16, quant.BF16,
	quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.IQ4_NL,
	quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_XS,
	quant.MXFP4,
}

// supported reports whether MatMul handles weights of type t.
func supported(t quant.Type) bool {
	for _, s := range weightTypes {
		if s == t {
			return true
		}
	}
	return false
}

// genericKernels is the pure-Go kernel set: engine/quant's reference
// quantisers and dot products.
func genericKernels() *kernelSet {
	ks := &kernelSet{name: "generic"}
	for _, t := range weightTypes {
		xt, _ := quant.VecDotType(t)
		ks.rows[t] = rowKernel{xType: xt, convert: quantizer(xt)}
	}
	ks.rows[quant.F32].convert = nil
	ks.rows[quant.F32].dot = quant.DotF32
	ks.rows[quant.F16].dot = quant.DotF16
	ks.rows[quant.BF16].dot = quant.DotBF16
	ks.rows[quant.Q8_0].dot = quant.DotQ8_0
	ks.rows[quant.Q4_0].dot = quant.DotQ4_0
	ks.rows[quant.Q4_1].dot = quant.DotQ4_1
	ks.rows[quant.Q5_0].dot = quant.DotQ5_0
	ks.rows[quant.Q5_1].dot = quant.DotQ5_1
	ks.rows[quant.IQ4_NL].dot = quant.DotIQ4_NL
	ks.rows[quant.Q2_K].dot = quant.DotQ2_K
	ks.rows[quant.Q3_K].dot = quant.DotQ3_K
	ks.rows[quant.Q4_K].dot = quant.DotQ4_K
	ks.rows[quant.Q5_K].dot = quant.DotQ5_K
	ks.rows[quant.Q6_K].dot = quant.DotQ6_K
	ks.rows[quant.IQ4_XS].dot = quant.DotIQ4_XS
	ks.rows[quant.MXFP4].dot = quant.DotMXFP4
	return ks
}

// quantizer returns a row converter into type t using engine/quant's
// reference quantisers. The row lengths MatMul passes are valid for t, so
// the error cannot occur.
func quantizer(t quant.Type) func(dst []byte, src []float32) {
	return func(dst []byte, src []float32) {
		if err := quant.Quantize(t, dst, src); err != nil {
			panic("cpu: " + err.Error()) // unreachable: MatMul checked the shapes
		}
	}
}

// defaultKernels is the kernel set New uses: AVX-512 when the machine has
// it and RILL_CPU_NOAVX512 is not set (with bf16 dot products for prepared
// F16 and BF16 matrices when it has AVX512_BF16 and RILL_CPU_NOBF16DOT is
// not set), else AVX2 when the machine has it and RILL_CPU_NOSIMD is not
// set, else generic. The sets give bit-identical MatMul results except the
// generic one, which follows engine/quant's scalar reference, and the bf16
// dot products on prepared F16 and BF16 matrices.
func defaultKernels() *kernelSet {
	switch {
	case useBF16Dot:
		return bf16Kernels()
	case useAVX512:
		return avx512Kernels()
	case useSIMD:
		return simdKernels()
	}
	return genericKernels()
}

// f32Bytes views a float32 slice as its bytes.
func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

// bytesF32 views b as float32s; len(b) must be a multiple of 4.
func bytesF32(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// bytesU16 views b as uint16s; len(b) must be even.
func bytesU16(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}
