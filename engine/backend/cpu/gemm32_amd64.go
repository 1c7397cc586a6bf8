//go:build amd64

package cpu

import (
	"encoding/binary"

	"rill/engine/quant"
)

//go:generate go run ./internal/gen -pkg cpu -out gen_amd64.s -stubs gen_stub_amd64.go

// Prefill (many activation rows) for the 32-element block types on AVX-512
// VNNI: gen_amd64.s's gemm<T>R<r>P<p> tiles (internal/gen/gemm32.go) over
// activations in the q8p layout.
//
// q8p: the activation rows in pairs (2p, 2p+1), each pair as nb units of
// q8pUnit bytes, one per block: the two rows' 32 quants, their 8 lane
// corrections -K*(sum of 4 quants) each, and their scales 8 times each (see
// internal/gen/q8p.go). An odd last row is paired with zeros.
//
// A thread's scratch holds the block scales of one cache block of weight
// rows as float32, in the order the tiles read them: rows in panels of four
// (then single rows at the end of the block), R scales per block within a
// panel.

// q8pUnit is the bytes of one block of one pair in the q8p layout.
const q8pUnit = 192

// gemmMCBytes bounds the weight rows a thread multiplies with one group
// of activation pairs before moving to the next group: they stay in L2
// while the group (at most 4 pairs, in L1) passes over all of them.
const gemmMCBytes = 256 << 10

type gemm32Tile func(w *byte, wstride int, dw *float32, x *byte, nb int, out *float32, ostride int, tokens int)

type gemm32Tiles struct {
	wb int // bytes per weight block
	k  uint32
	// r4[i], r1[i]: 4 or 1 weight rows by 4, 2 or 1 pairs for i = 0, 1, 2.
	r4, r1 [3]gemm32Tile
}

var (
	gemmQ8_0 = gemm32Tiles{34, 128,
		[3]gemm32Tile{gemmQ8_0R4P4, gemmQ8_0R4P2, gemmQ8_0R4P1}, [3]gemm32Tile{gemmQ8_0R1P4, gemmQ8_0R1P2, gemmQ8_0R1P1}}
	gemmQ4_0 = gemm32Tiles{18, 8,
		[3]gemm32Tile{gemmQ4_0R4P4, gemmQ4_0R4P2, gemmQ4_0R4P1}, [3]gemm32Tile{gemmQ4_0R1P4, gemmQ4_0R1P2, gemmQ4_0R1P1}}
)

// gemmL1Group bounds the activation bytes of one group of pairs: the group
// is read once per weight row panel and must stay in L1.
const gemmL1Group = 40 << 10

// kernel returns the tiles as a gemmKernel.
func (g *gemm32Tiles) kernel() *gemmKernel {
	pattern := g.k * 0x01010101
	return &gemmKernel{
		minTokens: 8,
		xBytes:    func(cols, n int) int { return (n + 1) / 2 * (cols / 32) * q8pUnit },
		slotBytes: func(cols int) int { return g.mc(cols/32) * (cols / 32) * 4 },
		convert: func(dst []byte, src []float32, cols, n, lo, hi int) {
			nb := cols / 32
			_ = dst[((n+1)/2*nb)*q8pUnit-1]
			_ = src[n*cols-1]
			for i := lo; i < hi; i++ {
				quantQ8pAVX512(&dst[(i/2)*nb*q8pUnit+32*(i%2)], &src[i*cols], nb, pattern)
			}
		},
		finish: func(dst []byte, cols, n int) {
			if n%2 == 0 {
				return
			}
			nb := cols / 32
			base := (n / 2) * nb * q8pUnit
			for b := range nb {
				u := dst[base+b*q8pUnit:][:q8pUnit]
				clear(u[32:64])
				clear(u[96:128])
				clear(u[160:192])
			}
		},
		run: g.run,
	}
}

// mc is the number of weight rows of nb blocks in one cache block: a
// multiple of the 4-row panels.
func (g *gemm32Tiles) mc(nb int) int { return max(4, gemmMCBytes/(nb*g.wb)&^3) }

func (g *gemm32Tiles) run(out []float32, w []byte, rows, cols, wrb int, x []byte, n int, slot []byte, lo, hi int) {
	nb := cols / 32
	if nb == 0 || lo >= hi {
		return
	}
	_ = w[hi*wrb-1]
	_ = out[(n-1)*rows+hi-1]
	npairs := (n + 1) / 2
	_ = x[npairs*nb*q8pUnit-1]
	mc := g.mc(nb)
	dw := bytesF32(slot[:mc*nb*4])

	for m0 := lo; m0 < hi; m0 += mc {
		m1 := min(hi, m0+mc)
		// Block scales of rows [m0,m1), panel by panel (see above).
		for r0 := m0; r0 < m1; {
			R := 4
			if r0+4 > m1 {
				R = 1
			}
			panel := dw[(r0-m0)*nb : (r0-m0+R)*nb]
			for r := range R {
				row := w[(r0+r)*wrb:]
				for b := range nb {
					panel[b*R+r] = quant.F16ToF32(binary.LittleEndian.Uint16(row[b*g.wb:]))
				}
			}
			r0 += R
		}
		// Groups of 4 pairs, or 2 where 4 would not stay in L1.
		wide := 0
		if 4*nb*q8pUnit > gemmL1Group {
			wide = 1
		}
		for p0 := 0; p0 < npairs; {
			i, P := wide, 4>>wide
			if p0+P > npairs {
				i, P = 2, 1
			}
			tokens := min(n-2*p0, 2*P)
			xg := &x[p0*nb*q8pUnit]
			og := out[2*p0*rows:]
			r := m0
			for ; r+4 <= m1; r += 4 {
				g.r4[i](&w[r*wrb], wrb, &dw[(r-m0)*nb], xg, nb, &og[r], rows, tokens)
			}
			for ; r < m1; r++ {
				g.r1[i](&w[r*wrb], wrb, &dw[(r-m0)*nb], xg, nb, &og[r], rows, tokens)
			}
			p0 += P
		}
	}
}
