package quant

import (
	"encoding/binary"
	"math"
)

// Plain floating-point rows: F32, F16 and BF16, one element per "block".

func quantizeF32(dst []byte, src []float32) {
	if v := f32View(dst); v != nil {
		copy(v, src)
		return
	}
	for i, f := range src {
		putF32(dst, 4*i, f)
	}
}

func dequantizeF32(dst []float32, src []byte) {
	if v := f32View(src); v != nil {
		copy(dst, v)
		return
	}
	for i := range dst {
		dst[i] = f32At(src, 4*i)
	}
}

func quantizeF16(dst []byte, src []float32) {
	if v := u16View(dst); v != nil {
		for i, f := range src {
			v[i] = F32ToF16(f)
		}
		return
	}
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(f))
	}
}

func dequantizeF16(dst []float32, src []byte) {
	if v := u16View(src); v != nil {
		for i, h := range v[:len(dst)] {
			dst[i] = F16ToF32(h)
		}
		return
	}
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func quantizeBF16(dst []byte, src []float32) {
	if v := u16View(dst); v != nil {
		for i, f := range src {
			v[i] = F32ToBF16(f)
		}
		return
	}
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(f))
	}
}

func dequantizeBF16(dst []float32, src []byte) {
	if v := u16View(src); v != nil {
		for i, h := range v[:len(dst)] {
			dst[i] = BF16ToF32(h)
		}
		return
	}
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// DotF32 returns the dot product of n float32 values in w and x (4n bytes
// each at least). Like ggml's scalar ggml_vec_dot_f32, each product is
// rounded to float32 and the products are summed in order in float64; the sum
// is rounded to float32 at the end.
//
// The Dot functions are kernels: they panic when n is negative or not a
// multiple of the block size, or when w or x is too short. VecDot checks its
// arguments and returns an error instead. They allocate nothing and are safe
// for concurrent use.
func DotF32(n int, w, x []byte) float32 {
	nb := checkDot("DotF32", n, 1, 4, 4, w, x)
	w, x = w[:4*nb], x[:4*nb]
	var sum float64
	if wv, xv := f32View(w), f32View(x); wv != nil && xv != nil {
		xv = xv[:len(wv)]
		for i, a := range wv {
			sum += float64(float32(a * xv[i]))
		}
		return float32(sum)
	}
	for i := 0; i < len(w); i += 4 {
		sum += float64(float32(f32At(w, i) * f32At(x, i)))
	}
	return float32(sum)
}

// DotF16 returns the dot product of n binary16 values in w and x (2n bytes
// each at least). Like ggml's scalar ggml_vec_dot_f16, each product of the
// two widened values is rounded to float32 (it is exact: 11-bit by 11-bit
// significands) and the products are summed in order in float64.
func DotF16(n int, w, x []byte) float32 {
	nb := checkDot("DotF16", n, 1, 2, 2, w, x)
	w, x = w[:2*nb], x[:2*nb]
	var sum float64
	if wv, xv := u16View(w), u16View(x); wv != nil && xv != nil {
		xv = xv[:len(wv)]
		for i, a := range wv {
			sum += float64(float32(F16ToF32(a) * F16ToF32(xv[i])))
		}
		return float32(sum)
	}
	for i := 0; i < len(w); i += 2 {
		sum += float64(float32(f16At(w, i) * f16At(x, i)))
	}
	return float32(sum)
}

// DotBF16 returns the dot product of n bfloat16 values in w and x (2n bytes
// each at least), with ggml's scalar arithmetic: float32 products (exact,
// 8-bit significands) summed in order in float64.
func DotBF16(n int, w, x []byte) float32 {
	nb := checkDot("DotBF16", n, 1, 2, 2, w, x)
	w, x = w[:2*nb], x[:2*nb]
	var sum float64
	if wv, xv := u16View(w), u16View(x); wv != nil && xv != nil {
		xv = xv[:len(wv)]
		for i, a := range wv {
			sum += float64(float32(BF16ToF32(a) * BF16ToF32(xv[i])))
		}
		return float32(sum)
	}
	for i := 0; i < len(w); i += 2 {
		a := math.Float32frombits(uint32(binary.LittleEndian.Uint16(w[i:])) << 16)
		b := math.Float32frombits(uint32(binary.LittleEndian.Uint16(x[i:])) << 16)
		sum += float64(float32(a * b))
	}
	return float32(sum)
}
