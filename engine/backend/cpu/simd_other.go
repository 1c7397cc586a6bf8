//go:build !amd64

package cpu

import "math"

// Without amd64 assembly every kernel is the generic Go one.

var hasSIMD = false

var useSIMD = false

var hasAVX512 = false

var useAVX512 = false

var hasBF16Dot = false

var useBF16Dot = false

func cpuPause() {}

func simdKernels() *kernelSet { return genericKernels() }

func avx512Kernels() *kernelSet { return genericKernels() }

func bf16Kernels() *kernelSet { return genericKernels() }

func dotF32SIMD(a, b []float32) float32                     { return dotF32Generic(a, b) }
func axpySIMD(y []float32, a float32, x []float32)          { axpyGeneric(y, a, x) }
func scaleSIMD(x []float32, a float32)                      { scaleGeneric(x, a) }
func addSIMD(dst, a, b []float32)                           { addGeneric(dst, a, b) }
func sumSquaresSIMD(x []float32) float64                    { return sumSquaresGeneric(x) }
func scaleMulSIMD(out, x []float32, s float32, w []float32) { scaleMulGeneric(out, x, s, w) }
func swigluSIMD(out, gate, up []float32)                    { swigluGeneric(out, gate, up) }
func f16ToF32SIMD(dst []float32, src []uint16)              { f16ToF32Generic(dst, src) }
func f32ToF16SIMD(dst []uint16, src []float32)              { f32ToF16Generic(dst, src) }
func expSIMD(dst, src []float32) {
	for i := range dst {
		dst[i] = float32(math.Exp(float64(src[i])))
	}
}
