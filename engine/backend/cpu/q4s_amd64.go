//go:build amd64

package cpu

import "rill/engine/quant"

// Packed Q4_0 on AVX-512 VNNI: weight rows in groups of 16, interleaved so
// that one 512-bit lane is one row, and multiplied by the q4sT<T> tiles
// (internal/gen/q4s.go) against activations in the q8s layout. Each output
// is one float per block, added in block order (llama.cpp's arithmetic for
// its repacked Q4_0), computed the same way for one token or many: decode
// and prefill of a row give the same bits, whatever the batch and the
// thread split.
//
// A group of 16 rows of nb blocks is nb units of q4sUnit bytes: the 16
// rows' fp16 scales, then four chunks of 64 bytes, chunk j holding bytes
// 4j..4j+3 of each row's 16 quant bytes (row r at 4r). Rows past the
// matrix's last (the padding of its last group) are zeros.

const (
	q4sUnit      = 32 + 16*16
	q8sUnit      = 40
	q4sGroup     = 16
	q4sMaxTokens = 8
	// q4sMCBytes bounds the packed weights a thread multiplies with one
	// tile of tokens before moving to the next tile: they stay in L2 while
	// the tiles pass over them.
	q4sMCBytes = 256 << 10
)

type q4sTile func(w *byte, x *byte, xstride int, nb int, out *float32, ostride int, rows int)

var q4sTiles = [q4sMaxTokens]q4sTile{q4sT1, q4sT2, q4sT3, q4sT4, q4sT5, q4sT6, q4sT7, q4sT8}

// q4sKernel is the packed Q4_0 path.
var q4sKernel = &packKernel{
	group:      q4sGroup,
	groupBytes: func(cols int) int { return cols / 32 * q4sUnit },
	pack:       packQ4s,
	xBytes:     func(cols, n int) int { return n * (cols / 32) * q8sUnit },
	convert: func(dst []byte, src []float32, cols, lo, hi int) {
		nb := cols / 32
		if nb == 0 || lo >= hi {
			return
		}
		_ = dst[hi*nb*q8sUnit-1]
		_ = src[hi*cols-1]
		for i := lo; i < hi; i++ {
			quantQ8sAVX512(&dst[i*nb*q8sUnit], &src[i*cols], nb, 0x08080808)
		}
	},
	run: runQ4s,
}

// packQ4s writes groups [lo,hi) of the Q4_0 matrix src (rows of cols
// values) into dst in the packed layout.
func packQ4s(dst, src []byte, rows, cols, lo, hi int) {
	nb := cols / 32
	wrb := nb * int(quant.Q4_0.BlockBytes())
	for g := lo; g < hi; g++ {
		for b := range nb {
			u := dst[(g*nb+b)*q4sUnit:][:q4sUnit]
			for r := range q4sGroup {
				row := g*q4sGroup + r
				if row >= rows {
					u[2*r], u[2*r+1] = 0, 0
					for j := range 4 {
						clear(u[32+64*j+4*r:][:4])
					}
					continue
				}
				blk := src[row*wrb+b*18:][:18]
				u[2*r], u[2*r+1] = blk[0], blk[1]
				for j := range 4 {
					copy(u[32+64*j+4*r:][:4], blk[2+4*j:][:4])
				}
			}
		}
	}
}

// runQ4s computes out[i*rows + r] for the rows of groups [lo,hi) and every
// token i < n, from the packed weights w and the q8s activations x.
func runQ4s(out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int) {
	nb := cols / 32
	if nb == 0 || lo >= hi || n == 0 {
		return
	}
	gb, xs := nb*q4sUnit, nb*q8sUnit
	_ = w[hi*gb-1]
	_ = x[n*xs-1]
	_ = out[n*rows-1]
	mc := max(1, q4sMCBytes/gb)
	for g0 := lo; g0 < hi; g0 += mc {
		g1 := min(hi, g0+mc)
		for t0 := 0; t0 < n; t0 += q4sMaxTokens {
			tile := q4sTiles[min(q4sMaxTokens, n-t0)-1]
			for g := g0; g < g1; g++ {
				r0 := g * q4sGroup
				tile(&w[g*gb], &x[t0*xs], xs, nb, &out[t0*rows+r0], rows, min(q4sGroup, rows-r0))
			}
		}
	}
}
