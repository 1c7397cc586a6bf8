//go:build amd64

package cpu

import (
	"encoding/binary"

	"rill/engine/quant"
)

// Packed Q4_K on AVX-512 VNNI: the layout and the arithmetic of the
// packedQ4_KT<n> tiles are described in internal/gen/packedk.go. As for
// the packed 32-element blocks (packed32_amd64.go), one lane is one row
// for the whole row, so decode and prefill give the same bits.

const (
	q4KUnit    = 64 + 128 + 128 + 2048 // bytes of one super-block of one group
	q8ksUnit   = 288                   // bytes of one super-block of one token
	q4KMaxToks = 4
)

var packedQ4KTiles = [q4KMaxToks]packedTile{packedQ4_KT1, packedQ4_KT2, packedQ4_KT3, packedQ4_KT4}

// packedQ4K is the packed Q4_K path.
var packedQ4K = &packKernel{
	group:      packedGroup,
	groupBytes: func(cols int) int { return cols / 256 * q4KUnit },
	pack:       packQ4K,
	xBytes:     func(cols, n int) int { return n * (cols / 256) * q8ksUnit },
	convert:    convertQ8KS,
	run:        runQ4K,
}

// convertQ8KS quantises activation rows [lo,hi) to Q8_K (the row kernels'
// quantQ8K, engine/quant's arithmetic) and lays them out as q8ks: per
// super-block the 256 quants, the scale, and each 32-element sub-block's
// sum (the sum of its two Q8_K bsums) as int16.
func convertQ8KS(dst []byte, src []float32, cols, lo, hi int) {
	nsb := cols / 256
	if nsb == 0 || lo >= hi {
		return
	}
	_ = dst[hi*nsb*q8ksUnit-1]
	_ = src[hi*cols-1]
	var q [q8KLen]byte
	for i := lo; i < hi; i++ {
		for sb := range nsb {
			quantQ8K(&q[0], &src[i*cols+sb*256], 1)
			u := dst[(i*nsb+sb)*q8ksUnit:][:q8ksUnit]
			copy(u[:256], q[4:260])
			copy(u[256:260], q[:4])
			for j := range 8 {
				s := int16(binary.LittleEndian.Uint16(q[260+4*j:])) + int16(binary.LittleEndian.Uint16(q[262+4*j:]))
				binary.LittleEndian.PutUint16(u[260+2*j:], uint16(s))
			}
		}
	}
}

// packQ4K writes groups [lo,hi) of the Q4_K matrix src into dst.
func packQ4K(dst, src []byte, rows, cols, lo, hi int) {
	nsb := cols / 256
	const bb = 144
	wrb := nsb * bb
	for g := lo; g < hi; g++ {
		for sb := range nsb {
			u := dst[(g*nsb+sb)*q4KUnit:][:q4KUnit]
			clear(u)
			for r := range packedGroup {
				row := g*packedGroup + r
				if row >= rows {
					continue // zeros: d = dmin = 0
				}
				blk := src[row*wrb+sb*bb:][:bb]
				copy(u[2*r:][:2], blk[0:2])
				copy(u[32+2*r:][:2], blk[2:4])
				sc, m := quant.Q4KScaleMins(blk[4:16])
				for j := range 8 {
					u[64+16*j+r] = sc[j]
				}
				for i := range 4 {
					u[192+32*i+2*r], u[192+32*i+2*r+1] = m[2*i], m[2*i+1]
				}
				for c := range 4 {
					for j := range 8 {
						copy(u[320+512*c+64*j+4*r:][:4], blk[16+32*c+4*j:][:4])
					}
				}
			}
		}
	}
}

// runQ4K computes out[i*rows + r] for the rows of groups [lo,hi) and every
// token i < n.
func runQ4K(out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int) {
	runPacked(packedQ4KTiles[:], 256, q4KUnit, q8ksUnit, out, w, rows, cols, x, n, lo, hi)
}
