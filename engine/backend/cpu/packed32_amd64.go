//go:build amd64

package cpu

import "rill/engine/quant"

// Packed Q4_0 and Q8_0 on AVX-512 VNNI: weight rows in groups of 16,
// interleaved so that one 512-bit lane is one row, and multiplied by the
// packed<T>T<n> tiles (internal/gen/packed32.go) against activations in
// the q8s layout. Each output is one float per block, added in block order
// (llama.cpp's arithmetic for its repacked Q4_0), computed the same way
// for one token or many: decode and prefill of a row give the same bits,
// whatever the batch and the thread split.
//
// A group of 16 rows of nb blocks is nb units: the 16 rows' fp16 scales,
// then chunks of 64 bytes, chunk j holding bytes 4j..4j+3 of each row's
// quant bytes (row r at 4r): Q4_0's 16 nibble bytes as stored, Q8_0's 32
// quants plus 128. Rows past the matrix's last (the padding of its last
// group) are zeros.

const (
	q8sUnit         = 40
	packedGroup     = 16
	packedMaxTokens = 8
	// packedMCBytes bounds the packed weights a thread multiplies with
	// one tile of tokens before moving to the next tile: they stay in L2
	// while the tiles pass over them.
	packedMCBytes = 256 << 10
)

type packedTile func(w *byte, x *byte, xstride int, nb int, out *float32, ostride int, rows int)

// packed32 is one packed 32-element block type.
type packed32 struct {
	typ    quant.Type
	quants int    // bytes of quants per block and row
	flip   byte   // XORed into each quant byte when packing
	k      uint32 // the weights' offset K, in each byte of the converter's pattern
	tiles  [packedMaxTokens]packedTile
}

var (
	packedQ4_0 = &packed32{typ: quant.Q4_0, quants: 16, k: 8, tiles: [packedMaxTokens]packedTile{
		packedQ4_0T1, packedQ4_0T2, packedQ4_0T3, packedQ4_0T4, packedQ4_0T5, packedQ4_0T6, packedQ4_0T7, packedQ4_0T8}}
	packedQ8_0 = &packed32{typ: quant.Q8_0, quants: 32, flip: 0x80, k: 128, tiles: [packedMaxTokens]packedTile{
		packedQ8_0T1, packedQ8_0T2, packedQ8_0T3, packedQ8_0T4, packedQ8_0T5, packedQ8_0T6, packedQ8_0T7, packedQ8_0T8}}
)

// unit is the bytes of one block of one group.
func (p *packed32) unit() int { return 32 + packedGroup*p.quants }

// kernel returns p as a packKernel.
func (p *packed32) kernel() *packKernel {
	pattern := p.k * 0x01010101
	return &packKernel{
		group:      packedGroup,
		groupBytes: func(cols int) int { return cols / 32 * p.unit() },
		pack:       p.pack,
		xBytes:     func(cols, n int) int { return n * (cols / 32) * q8sUnit },
		convert: func(dst []byte, src []float32, cols, lo, hi int) {
			nb := cols / 32
			if nb == 0 || lo >= hi {
				return
			}
			_ = dst[hi*nb*q8sUnit-1]
			_ = src[hi*cols-1]
			for i := lo; i < hi; i++ {
				quantQ8sAVX512(&dst[i*nb*q8sUnit], &src[i*cols], nb, pattern)
			}
		},
		run: p.run,
	}
}

// pack writes groups [lo,hi) of the matrix src (rows of cols values) into
// dst in the packed layout.
func (p *packed32) pack(dst, src []byte, rows, cols, lo, hi int) {
	nb := cols / 32
	bb := p.typ.BlockBytes()
	wrb := nb * bb
	unit := p.unit()
	for g := lo; g < hi; g++ {
		for b := range nb {
			u := dst[(g*nb+b)*unit:][:unit]
			for r := range packedGroup {
				row := g*packedGroup + r
				if row >= rows {
					u[2*r], u[2*r+1] = 0, 0
					for j := range p.quants / 4 {
						clear(u[32+64*j+4*r:][:4])
					}
					continue
				}
				blk := src[row*wrb+b*bb:][:bb]
				u[2*r], u[2*r+1] = blk[0], blk[1]
				for j := range p.quants / 4 {
					q, o := blk[2+4*j:][:4], u[32+64*j+4*r:][:4]
					o[0], o[1], o[2], o[3] = q[0]^p.flip, q[1]^p.flip, q[2]^p.flip, q[3]^p.flip
				}
			}
		}
	}
}

// run computes out[i*rows + r] for the rows of groups [lo,hi) and every
// token i < n, from the packed weights w and the q8s activations x.
func (p *packed32) run(out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int) {
	runPacked(p.tiles[:], 32, p.unit(), q8sUnit, out, w, rows, cols, x, n, lo, hi)
}

// runPacked runs a packed type's tiles (tiles[k] multiplies k+1 tokens)
// over the rows of groups [lo,hi) and every token i < n: units of elems
// values, unit bytes per group and xunit per token.
func runPacked(tiles []packedTile, elems, unit, xunit int, out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int) {
	nb := cols / elems
	if nb == 0 || lo >= hi || n == 0 {
		return
	}
	gb, xs := nb*unit, nb*xunit
	_ = w[hi*gb-1]
	_ = x[n*xs-1]
	_ = out[n*rows-1]
	mc := max(1, packedMCBytes/gb)
	for g0 := lo; g0 < hi; g0 += mc {
		g1 := min(hi, g0+mc)
		for t0 := 0; t0 < n; t0 += len(tiles) {
			tile := tiles[min(len(tiles), n-t0)-1]
			for g := g0; g < g1; g++ {
				r0 := g * packedGroup
				tile(&w[g*gb], &x[t0*xs], xs, nb, &out[t0*rows+r0], rows, min(packedGroup, rows-r0))
			}
		}
	}
}
