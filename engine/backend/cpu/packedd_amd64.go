//go:build amd64

package cpu

import (
	"math"
	"sync"

	"rill/engine/quant"
)

// Packed F16 and BF16 on AVX512_BF16: the weights as bf16 (F16 rounded to
// the nearest bf16 when packed), rows in groups of 16 with each group's
// column pairs interleaved (a pair is 64 bytes: lane r holds row r's two
// halves), multiplied by the packedDG<g>T<t> tiles (internal/gen/packedd.go)
// against activations rounded to bf16. VDPBF16PS multiplies two columns per
// float32 lane per instruction, twice the FMA's rate.
//
// Per output one float32 accumulator, one VDPBF16PS per column pair in
// order: the same arithmetic for one token or many, so decode and prefill
// give the same bits. The products of two bf16 values are exact in
// float32; the instruction adds the pair's second product to the
// accumulator, then its first, each rounded to nearest even, treating
// denormal inputs as zero and flushing a denormal result to zero (Intel's
// definition, which this Zen 5 follows: TestPackedMatMul checks it bit for
// bit). For BF16 weights that is llama.cpp's own numerics on such a CPU
// (activations rounded to the weights' vec_dot_type, BF16, and
// VDPBF16PS in its row dot and its llamafile tiles), up to the order of
// the sums; for F16 weights it drops 3 bits of each weight's 11 and of
// each activation's (llama.cpp rounds activations to F16), in exchange
// for twice the multiply rate: the results are then as far from
// llama.cpp's F16 as llama.cpp's own BF16 copy of the model is
// (engine/model's F16 weights oracle).

// packedDTile multiplies g groups of packed bf16 rows with t tokens.
type packedDTile func(w *byte, wstride int, x *uint16, xstride int, cols int, out *float32, ostride int, mask uint64)

// packedDTiles[g-1][t-1] multiplies g groups by t tokens.
var packedDTiles = [packedFMaxGroups][packedMaxTokens]packedDTile{
	{packedDG1T1, packedDG1T2, packedDG1T3, packedDG1T4, packedDG1T5, packedDG1T6, packedDG1T7, packedDG1T8},
	{packedDG2T1, packedDG2T2, packedDG2T3, packedDG2T4, packedDG2T5, packedDG2T6, packedDG2T7, packedDG2T8},
	{packedDG3T1, packedDG3T2, packedDG3T3, packedDG3T4, packedDG3T5, packedDG3T6, packedDG3T7, packedDG3T8},
}

// packedDot returns the bf16-dot packed path for weights of type t (F16 or
// BF16).
func packedDot(t quant.Type) *packKernel {
	return &packKernel{
		group:      packedGroup,
		groupBytes: func(cols int) int { return 32 * cols },
		tileGroups: packedFMaxGroups,
		packable:   func(cols int) bool { return cols%16 == 0 },
		pack: func(dst, src []byte, rows, cols, lo, hi int) {
			var tab *[1 << 16]uint16 // BF16: the weights' own bits
			if t == quant.F16 {
				tab = f16ToBF16Table()
			}
			packPairs(dst, src, rows, cols, lo, hi, tab)
		},
		xBytes: func(cols, n int) int { return 2 * n * cols },
		convert: func(dst []byte, src []float32, cols, lo, hi int) {
			bf16Bits(bytesU16(dst[2*lo*cols:2*hi*cols]), src[lo*cols:hi*cols])
		},
		run: runPackedD,
	}
}

// f16ToBF16Table maps each F16 value's bits to the nearest bf16's (ties to
// even; every F16 value, subnormals included, is within bf16's range, so
// only the mantissa is rounded).
var f16ToBF16Table = sync.OnceValue(func() *[1 << 16]uint16 {
	var tab [1 << 16]uint16
	for h := range tab {
		tab[h] = quant.F32ToBF16(quant.F16ToF32(uint16(h)))
	}
	return &tab
})

// bf16Bits writes src rounded to bf16 (ties to even, as quant.F32ToBF16)
// into dst: the body on AVX-512 (roundBF16Z, the only machines that run
// the bf16 kernels), the tail in Go.
func bf16Bits(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	body := len(src) &^ 15
	if body > 0 {
		roundBF16Z(&dst[0], &src[0], body)
	}
	for i := body; i < len(src); i++ {
		v := src[i]
		b := math.Float32bits(v)
		if b&0x7fffffff > 0x7f800000 {
			dst[i] = uint16(b>>16) | 0x40 // NaN stays NaN
			continue
		}
		dst[i] = uint16((b + 0x7fff + (b>>16)&1) >> 16)
	}
}

// packPairs writes groups [lo,hi) of the F16 or BF16 matrix src into dst as
// bf16 (F16 through tab, BF16 when tab is nil as they are): for each
// column pair, the 16 rows' pairs, a pair at a time so that the writes are
// sequential and the 16 rows are read as 16 sequential streams.
func packPairs(dst, src []byte, rows, cols, lo, hi int, tab *[1 << 16]uint16) {
	d, s := bytesU16(dst), bytesU16(src)
	for g := lo; g < hi; g++ {
		u := d[g*packedGroup*cols:][:packedGroup*cols]
		for r := range packedGroup {
			row := g*packedGroup + r
			if row >= rows {
				for p := range cols / 2 {
					u[2*packedGroup*p+2*r], u[2*packedGroup*p+2*r+1] = 0, 0 // padding past the last row
				}
				continue
			}
			in := s[row*cols:][:cols]
			if tab == nil {
				for p := range cols / 2 {
					c := u[2*packedGroup*p+2*r:][:2]
					c[0], c[1] = in[2*p], in[2*p+1]
				}
				continue
			}
			for p := range cols / 2 {
				c := u[2*packedGroup*p+2*r:][:2]
				c[0], c[1] = tab[in[2*p]], tab[in[2*p+1]]
			}
		}
	}
}

// runPackedD computes out[i*rows + r] for the rows of groups [lo,hi) and
// every token i < n, from bf16 activations x.
func runPackedD(out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int) {
	if cols == 0 || lo >= hi || n == 0 {
		return
	}
	gb := 32 * cols
	xh := bytesU16(x)
	_ = w[hi*gb-1]
	_ = xh[n*cols-1]
	_ = out[n*rows-1]
	mc := max(packedFMaxGroups, packedMCBytes/gb/packedFMaxGroups*packedFMaxGroups)
	for g0 := lo; g0 < hi; g0 += mc {
		g1 := min(hi, g0+mc)
		for t0 := 0; t0 < n; t0 += packedMaxTokens {
			T := min(packedMaxTokens, n-t0)
			for g := g0; g < g1; g += packedFMaxGroups {
				G := min(packedFMaxGroups, g1-g)
				r0 := g * packedGroup
				valid := min(G*packedGroup, rows-r0)
				packedDTiles[G-1][T-1](&w[g*gb], gb, &xh[t0*cols], 2*cols, cols, &out[t0*rows+r0], rows, 1<<valid-1)
			}
		}
	}
}
