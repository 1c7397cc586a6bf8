package quant

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Block bytes are little-endian, as GGUF and GGML store them. The helpers in
// this file read and write the scalars inside blocks, and view whole rows of
// plain types in place when the host allows it.

// hostLittleEndian reports whether the host's byte order matches the files',
// which is what makes viewing []byte as []float32 or []uint16 correct.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func f16At(b []byte, off int) float32 { return F16ToF32(binary.LittleEndian.Uint16(b[off:])) }

func putF16(b []byte, off int, f float32) { binary.LittleEndian.PutUint16(b[off:], F32ToF16(f)) }

func f32At(b []byte, off int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
}

func putF32(b []byte, off int, f float32) {
	binary.LittleEndian.PutUint32(b[off:], math.Float32bits(f))
}

// f32View returns b as float32s without copying, or nil when that is not
// possible (big-endian host, or b not 4-byte aligned; an unaligned view would
// be legal on amd64 but trips Go's checkptr instrumentation).
func f32View(b []byte) []float32 {
	p := unsafe.SliceData(b)
	if !hostLittleEndian || len(b) < 4 || uintptr(unsafe.Pointer(p))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), len(b)/4)
}

// u16View is f32View for 16-bit elements.
func u16View(b []byte) []uint16 {
	p := unsafe.SliceData(b)
	if !hostLittleEndian || len(b) < 2 || uintptr(unsafe.Pointer(p))%2 != 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(p)), len(b)/2)
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// roundAway rounds half away from zero, like C's roundf, and converts to an
// integer. Callers pass a product as float32(x*y): the explicit conversion
// keeps Go from fusing the product into the subtraction below, which would
// change tie decisions. Magnitudes of 2^23 and more are already integers.
func roundAway(f float32) int32 {
	q := int32(f) // truncated toward zero
	if !(abs32(f) < 0x1p23) {
		return q
	}
	var up int32
	if abs32(f-float32(q)) >= 0.5 { // f-q is exact
		up = 1
	}
	s := int32(math.Float32bits(f)) >> 31 // 0 or -1
	return q + (up ^ s) - s
}

// nearestInt is ggml's nearest_int: round half to even by adding 1.5*2^23
// in float32 arithmetic and reading the integer from the mantissa. It is
// exact for |f| < 2^22; larger magnitudes (which ggml does not accept) fall
// back to math.RoundToEven. Callers pass a product as float32(x*y), as for
// roundAway.
func nearestInt(f float32) int32 {
	if !(abs32(f) <= 4194303) {
		return int32(math.RoundToEven(float64(f)))
	}
	return int32(math.Float32bits(f+12582912)&0x7fffff) - 0x400000
}

// f16Up returns the smallest binary16 value not below v (v >= 0), as bits and
// as float32, capped at the largest finite half. Scales stored as f16 are
// rounded up so that the quantised range still covers the data.
func f16Up(v float32) (uint16, float32) {
	h := F32ToF16(v)
	if F16ToF32(h) < v && h < 0x7bff {
		h++
	}
	if h >= 0x7c00 && h&0x8000 == 0 {
		h = 0x7bff
	}
	return h, F16ToF32(h)
}
