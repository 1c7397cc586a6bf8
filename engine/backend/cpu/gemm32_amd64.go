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

// q8p1Unit is the same for Q8_1 activations (Q4_1, Q5_1): also each
// token's s in lane 0 of its 8 lanes (see internal/gen/q8p.go).
const q8p1Unit = 256

// gemmMCBytes bounds the weight rows a thread multiplies with one group
// of activation pairs before moving to the next group: they stay in L2
// while the group (at most 4 pairs, in L1) passes over all of them.
const gemmMCBytes = 256 << 10

type gemm32Tile func(w *byte, wstride int, dw *float32, x *byte, nb int, out *float32, ostride int, tokens int)

type gemm32Tiles struct {
	wb int // bytes per weight block
	k  uint32
	// offset: Q4_1 and Q5_1 (w = d*q + m against Q8_1): activations in
	// q8p1 units (q8p plus each token's s), weight scratch with each
	// block's m after its d's.
	offset bool
	// r4[i], r1[i]: 4 or 1 weight rows by 4, 2 or 1 pairs for i = 0, 1, 2.
	r4, r1 [3]gemm32Tile
}

var (
	gemmQ8_0 = gemm32Tiles{34, 128, false,
		[3]gemm32Tile{gemmQ8_0R4P4, gemmQ8_0R4P2, gemmQ8_0R4P1}, [3]gemm32Tile{gemmQ8_0R1P4, gemmQ8_0R1P2, gemmQ8_0R1P1}}
	gemmQ4_0 = gemm32Tiles{18, 8, false,
		[3]gemm32Tile{gemmQ4_0R4P4, gemmQ4_0R4P2, gemmQ4_0R4P1}, [3]gemm32Tile{gemmQ4_0R1P4, gemmQ4_0R1P2, gemmQ4_0R1P1}}
	gemmQ5_0 = gemm32Tiles{22, 16, false,
		[3]gemm32Tile{gemmQ5_0R4P4, gemmQ5_0R4P2, gemmQ5_0R4P1}, [3]gemm32Tile{gemmQ5_0R1P4, gemmQ5_0R1P2, gemmQ5_0R1P1}}
	gemmIQ4_NL = gemm32Tiles{18, 128, false,
		[3]gemm32Tile{gemmIQ4_NLR4P4, gemmIQ4_NLR4P2, gemmIQ4_NLR4P1}, [3]gemm32Tile{gemmIQ4_NLR1P4, gemmIQ4_NLR1P2, gemmIQ4_NLR1P1}}
	gemmQ4_1 = gemm32Tiles{20, 0, true,
		[3]gemm32Tile{gemmQ4_1R4P4, gemmQ4_1R4P2, gemmQ4_1R4P1}, [3]gemm32Tile{gemmQ4_1R1P4, gemmQ4_1R1P2, gemmQ4_1R1P1}}
	gemmQ5_1 = gemm32Tiles{24, 0, true,
		[3]gemm32Tile{gemmQ5_1R4P4, gemmQ5_1R4P2, gemmQ5_1R4P1}, [3]gemm32Tile{gemmQ5_1R1P4, gemmQ5_1R1P2, gemmQ5_1R1P1}}
)

// unit is the bytes of one block of one token pair in the activation
// layout; scales the float32 values per weight block in the scratch.
func (g *gemm32Tiles) unit() int {
	if g.offset {
		return q8p1Unit
	}
	return q8pUnit
}

func (g *gemm32Tiles) scales() int {
	if g.offset {
		return 2
	}
	return 1
}

// gemmL1Group bounds the activation bytes of one group of pairs: the group
// is read once per weight row panel and must stay in L1.
const gemmL1Group = 40 << 10

// kernel returns the tiles as a gemmKernel.
func (g *gemm32Tiles) kernel() *gemmKernel {
	pattern := g.k * 0x01010101
	unit := g.unit()
	quant8 := quantQ8pAVX512
	if g.offset {
		quant8 = quantQ8p1AVX512
	}
	return &gemmKernel{
		minTokens: 8,
		xBytes:    func(cols, n int) int { return (n + 1) / 2 * (cols / 32) * unit },
		slotBytes: func(cols int) int { return g.mc(cols/32) * (cols / 32) * 4 * g.scales() },
		convert: func(dst []byte, src []float32, cols, n, lo, hi int) {
			nb := cols / 32
			_ = dst[((n+1)/2*nb)*unit-1]
			_ = src[n*cols-1]
			for i := lo; i < hi; i++ {
				quant8(&dst[(i/2)*nb*unit+32*(i%2)], &src[i*cols], nb, pattern)
			}
		},
		finish: func(dst []byte, cols, n int) {
			if n%2 == 0 {
				return
			}
			nb := cols / 32
			base := (n / 2) * nb * unit
			for b := range nb {
				u := dst[base+b*unit:][:unit]
				for off := 32; off < unit; off += 64 {
					clear(u[off : off+32])
				}
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
	_ = x[npairs*nb*g.unit()-1]
	mc := g.mc(nb)
	ns := g.scales()
	dw := bytesF32(slot[:mc*nb*4*ns])
	unit := g.unit()

	for m0 := lo; m0 < hi; m0 += mc {
		m1 := min(hi, m0+mc)
		// Block scales of rows [m0,m1), panel by panel (see above).
		for r0 := m0; r0 < m1; {
			R := 4
			if r0+4 > m1 {
				R = 1
			}
			panel := dw[(r0-m0)*nb*ns : (r0-m0+R)*nb*ns]
			for r := range R {
				row := w[(r0+r)*wrb:]
				for b := range nb {
					blk := row[b*g.wb:]
					panel[b*R*ns+r] = quant.F16ToF32(binary.LittleEndian.Uint16(blk))
					if ns == 2 {
						panel[b*R*ns+R+r] = quant.F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
					}
				}
			}
			r0 += R
		}
		// Groups of 4 pairs, or 2 where 4 would not stay in L1.
		wide := 0
		if 4*nb*unit > gemmL1Group {
			wide = 1
		}
		for p0 := 0; p0 < npairs; {
			i, P := wide, 4>>wide
			if p0+P > npairs {
				i, P = 2, 1
			}
			tokens := min(n-2*p0, 2*P)
			xg := &x[p0*nb*unit]
			og := out[2*p0*rows:]
			r := m0
			for ; r+4 <= m1; r += 4 {
				g.r4[i](&w[r*wrb], wrb, &dw[(r-m0)*nb*ns], xg, nb, &og[r], rows, tokens)
			}
			for ; r < m1; r++ {
				g.r1[i](&w[r*wrb], wrb, &dw[(r-m0)*nb*ns], xg, nb, &og[r], rows, tokens)
			}
			p0 += P
		}
	}
}
