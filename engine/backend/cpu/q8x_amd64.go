//go:build amd64

package cpu

// q8x is the activation layout of the AVX-512 Q8_0 and Q4_0 kernels: the
// Q8_0 quantisation of a row (bit for bit what engine/quant's reference
// quantiser stores in the Q8_0 layout), rearranged so that the
// kernels do the per-activation work once per MatMul instead of once per
// weight row. A row of nb blocks is
//
//	nb units of 64 bytes: the block's 32 int8 quants, then 8 int32 lanes,
//	    lane l = -K * (q[4l] + q[4l+1] + q[4l+2] + q[4l+3]);
//	nb float32: the block's fp16 scale d, converted (exactly) to float32.
//
// K is the offset that makes the weights unsigned for VPDPBUSD (128 for
// Q8_0 weights, 8 for Q4_0 nibbles): a lane that starts at -K*sum(q) and
// adds (w+K)*q over its 4 elements ends at the exact sum of w*q.
const q8xBlockBytes = 64 + 4

// q8xConverter returns the row converter into the q8x layout with offset
// k (0 < k < 256). It runs quantQ8xAVX512 (generated with the prefill
// converters, internal/gen/q8p.go), which quantises with
// engine/quant's Q8_0 arithmetic (tested bit for bit against it), so it
// needs AVX-512. len(src) is a multiple of 32 and dst holds len(src)/32
// blocks of q8xBlockBytes (MatMul sizes it so).
func q8xConverter(k int32) func(dst []byte, src []float32) {
	pattern := uint32(k) * 0x01010101
	return func(dst []byte, src []float32) {
		nb := len(src) / 32
		if nb == 0 {
			return
		}
		_ = dst[nb*q8xBlockBytes-1]
		quantQ8xAVX512(&dst[0], &src[0], nb, pattern)
	}
}
