package quant

import "fmt"

// VecDotType is the format activations are converted to before a dot product
// with weights of type t, as llama.cpp's CPU backend does: F32->F32,
// F16->F16, BF16->BF16, Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4->Q8_0, Q4_1 and
// Q5_1->Q8_1, the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS->Q8_K.
// ok is false for every other type.
func VecDotType(t Type) (Type, bool) {
	switch t {
	case F32, F16, BF16, Q8_0:
		return t, true
	case Q4_0, Q5_0, IQ4_NL, MXFP4:
		return Q8_0, true
	case Q4_1, Q5_1:
		return Q8_1, true
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS:
		return Q8_K, true
	}
	return 0, false
}

// Quantize writes the len(src) values of src into dst in format t.
// len(src) must be a whole number of t's blocks and len(dst) must equal
// t.RowBytes(len(src)). Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_1, Q8_K, Q4_K, Q6_K, MXFP4. Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q8_1,
// Q8_K and MXFP4 follow ggml's reference quantizers bit for bit (for finite input). llama.cpp's x86 AVX2 build quantises Q8_0 activations
// with a variant (multiplier 127/amax, ties to even) that can differ from
// the reference by one step for values at or near a tie. Q4_K and Q6_K use this package's
// own simpler scheme, documented at quantizeQ4_K and quantizeQ6_K, not
// ggml's search-based quantizers. Non-finite input gives
// unspecified bytes, never a panic. It allocates nothing and is safe for
// concurrent use on distinct dst.
func Quantize(t Type, dst []byte, src []float32) error {
	if !canQuantize(t) {
		return fmt.Errorf("quantize: unsupported tensor type %s", t)
	}
	if err := checkRow(t, dst, len(src)); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	switch t {
	case F32:
		quantizeF32(dst, src)
	case F16:
		quantizeF16(dst, src)
	case BF16:
		quantizeBF16(dst, src)
	case Q8_0:
		quantizeQ8_0(dst, src)
	case Q4_0:
		quantizeQ4_0(dst, src)
	case Q4_1:
		quantizeQ4_1(dst, src)
	case Q5_0:
		quantizeQ5_0(dst, src)
	case Q5_1:
		quantizeQ5_1(dst, src)
	case Q8_1:
		quantizeQ8_1(dst, src)
	case Q8_K:
		quantizeQ8_K(dst, src)
	case Q4_K:
		quantizeQ4_K(dst, src)
	case Q6_K:
		quantizeQ6_K(dst, src)
	case MXFP4:
		quantizeMXFP4(dst, src)
	}
	return nil
}

// Dequantize writes the len(dst) values stored in src in format t into dst.
// len(src) must equal t.RowBytes(len(dst)). Supported: the types of
// Quantize, and Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS.
// It allocates nothing and is safe for concurrent use on distinct dst.
func Dequantize(t Type, dst []float32, src []byte) error {
	if err := checkRow(t, src, len(dst)); err != nil {
		return fmt.Errorf("dequantize: %w", err)
	}
	switch t {
	case F32:
		dequantizeF32(dst, src)
	case F16:
		dequantizeF16(dst, src)
	case BF16:
		dequantizeBF16(dst, src)
	case Q8_0:
		dequantizeQ8_0(dst, src)
	case Q4_0:
		dequantizeQ4_0(dst, src)
	case Q4_1:
		dequantizeQ4_1(dst, src)
	case Q5_0:
		dequantizeQ5_0(dst, src)
	case Q5_1:
		dequantizeQ5_1(dst, src)
	case Q8_1:
		dequantizeQ8_1(dst, src)
	case IQ4_NL:
		dequantizeIQ4_NL(dst, src)
	case Q8_K:
		dequantizeQ8_K(dst, src)
	case Q2_K:
		dequantizeQ2_K(dst, src)
	case Q3_K:
		dequantizeQ3_K(dst, src)
	case Q4_K:
		dequantizeQ4_K(dst, src)
	case Q5_K:
		dequantizeQ5_K(dst, src)
	case Q6_K:
		dequantizeQ6_K(dst, src)
	case IQ4_XS:
		dequantizeIQ4_XS(dst, src)
	case MXFP4:
		dequantizeMXFP4(dst, src)
	}
	return nil
}

// canQuantize reports whether Quantize writes type t.
func canQuantize(t Type) bool {
	switch t {
	case F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q8_1, Q8_K, Q4_K, Q6_K, MXFP4:
		return true
	}
	return false
}

// checkRow reports whether t is supported by Dequantize and whether b holds
// exactly n elements of it.
func checkRow(t Type, b []byte, n int) error {
	switch t {
	case F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q8_1, IQ4_NL,
		Q8_K, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4:
	default:
		return fmt.Errorf("unsupported tensor type %s", t)
	}
	size, err := t.RowBytes(n)
	if err != nil {
		return err
	}
	if len(b) != size {
		return fmt.Errorf("%d elements of %s take %d bytes, got %d", n, t, size, len(b))
	}
	return nil
}

// VecDot returns the dot product of n elements of weights w, in format t,
// with activations x, in format VecDotType(t). w and x must hold at least n
// elements; bytes beyond them are ignored. It fails for a type without a dot
// product, for n not a whole number of blocks, and for short slices. It
// allocates nothing and is safe for concurrent use.
func VecDot(t Type, n int, w, x []byte) (float32, error) {
	xt, ok := VecDotType(t)
	if !ok {
		return 0, fmt.Errorf("vec dot: unsupported weight type %s", t)
	}
	wn, err := t.RowBytes(n)
	if err != nil {
		return 0, fmt.Errorf("vec dot: %w", err)
	}
	xn, err := xt.RowBytes(n)
	if err != nil {
		return 0, fmt.Errorf("vec dot: %w", err)
	}
	if len(w) < wn || len(x) < xn {
		return 0, fmt.Errorf("vec dot: %d elements need %d bytes of %s and %d of %s, got %d and %d",
			n, wn, t, xn, xt, len(w), len(x))
	}
	switch t {
	case F32:
		return DotF32(n, w, x), nil
	case F16:
		return DotF16(n, w, x), nil
	case BF16:
		return DotBF16(n, w, x), nil
	case Q8_0:
		return DotQ8_0(n, w, x), nil
	case Q4_0:
		return DotQ4_0(n, w, x), nil
	case Q4_1:
		return DotQ4_1(n, w, x), nil
	case Q5_0:
		return DotQ5_0(n, w, x), nil
	case Q5_1:
		return DotQ5_1(n, w, x), nil
	case IQ4_NL:
		return DotIQ4_NL(n, w, x), nil
	case Q2_K:
		return DotQ2_K(n, w, x), nil
	case Q3_K:
		return DotQ3_K(n, w, x), nil
	case Q4_K:
		return DotQ4_K(n, w, x), nil
	case Q5_K:
		return DotQ5_K(n, w, x), nil
	case IQ4_XS:
		return DotIQ4_XS(n, w, x), nil
	case MXFP4:
		return DotMXFP4(n, w, x), nil
	default: // Q6_K, the last type VecDotType accepts
		return DotQ6_K(n, w, x), nil
	}
}

// checkDot validates the arguments of a Dot kernel whose weight and
// activation blocks hold be elements in wbytes and xbytes bytes, and returns
// the number of blocks. It panics on misuse: the kernels are hot and have no
// error result.
func checkDot(name string, n, be, wbytes, xbytes int, w, x []byte) int {
	if n < 0 || n%be != 0 {
		panic(fmt.Sprintf("quant: %s: %d elements: not a multiple of the block size %d", name, n, be))
	}
	nb := n / be
	if len(w) < nb*wbytes || len(x) < nb*xbytes {
		panic(fmt.Sprintf("quant: %s: %d elements need %d and %d bytes, got %d and %d",
			name, n, nb*wbytes, nb*xbytes, len(w), len(x)))
	}
	return nb
}
