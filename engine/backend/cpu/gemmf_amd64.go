//go:build amd64

package cpu

import "math"

// Prefill for the float weight types on AVX-512: gen_amd64.s's gemmFR<r>C<c>
// tiles (internal/gen/gemmf.go) of 2 weight rows by 6 activation rows, over
// float32 weights (BF16 rows converted once per call, per L2-sized block of
// a thread's rows; F16 rows read in place by the gemmFHR<r>C<c> tiles,
// which widen them as they load them) and the activations as the row
// kernels see them (F16 and BF16: rounded to the weight type's precision).
// Per output the arithmetic is that of the 512-bit row kernels, so prefill
// results are the bits of decode results. Rows must be whole multiples of
// 32 elements of at least zmmMin (shorter ones run the AVX2 row kernels,
// whose order the tiles do not follow).

// fTiles is the prefill kernel of one float weight type.
type fTiles struct {
	wsize   int
	convert func(dst []byte, src []float32) // activation row, as the row kernels see it
	// widen writes a weight row as float32; nil for F32 (used in place).
	widen func(dst []float32, src []byte)
	// half: the weights are F16 rows that the gemmFH tiles widen as they
	// read them.
	half bool
}

var (
	gemmF32  = fTiles{wsize: 4, convert: func(dst []byte, src []float32) { copy(bytesF32(dst), src) }}
	gemmF16  = fTiles{wsize: 2, convert: f16Row, half: true}
	gemmBF16 = fTiles{wsize: 2, convert: bf16Row, widen: func(dst []float32, src []byte) {
		for i, h := range bytesU16(src)[:len(dst)] {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
	}}
)

// fStride is the distance in floats between rows of the converted
// activations and weights: a row plus one cache line, so that rows of a
// power-of-two length do not all map to the same cache sets.
func fStride(cols int) int { return cols + 16 }

// gemmFMCBytes bounds the float32 weight rows one thread multiplies with
// each group of activation rows: they stay in L2.
const gemmFMCBytes = 512 << 10

// gemmFKSteps bounds the 32-element steps of one chunk of a row: a chunk
// of 6 activation rows (24 KiB) stays in L1 while every weight panel of
// the cache block passes over it. Longer rows are multiplied chunk by
// chunk, the tiles carrying their accumulators over (the same bits).
const gemmFKSteps = 32

// fTile is a gemmFR<r>C<c> tile (internal/gen/gemmf.go).
type fTile func(w *byte, wstride int, x *float32, xstride int, n32 int, out *float32, ostride int, acc *float32, mode int)

// fTileSet are the tiles of one weight format: fTileR or 1 weight rows by
// fTileC or 1 activation rows.
type fTileSet struct{ rc, r1, oneC, one1 fTile }

var (
	fTilesF32 = fTileSet{gemmFR2C6, gemmFR2C1, gemmFR1C6, gemmFR1C1}
	fTilesF16 = fTileSet{gemmFHR2C6, gemmFHR2C1, gemmFHR1C6, gemmFHR1C1} // rows of halves
)

// fTile modes: start from saved accumulators; end in the output.
const (
	fResume = 1
	fFinal  = 2
)

// fTileR and fTileC are the tile's weight rows and activation rows.
const fTileR, fTileC = 2, 6

// mc is the number of weight rows of cols values in one cache block: a
// multiple of the panels of fTileR rows.
func (g *fTiles) mc(cols int) int {
	row := fStride(cols) * 4
	if g.half {
		row = cols * 2
	}
	return max(fTileR, gemmFMCBytes/row/fTileR*fTileR)
}

func (g *fTiles) kernel() *gemmKernel {
	return &gemmKernel{
		minTokens: 8,
		cols:      func(cols int) bool { return cols%32 == 0 && cols >= zmmMin },
		xBytes:    func(cols, n int) int { return n * fStride(cols) * 4 },
		// The widened rows of one cache block (BF16), then the
		// accumulators of its rows for a group of fTileC activation rows.
		slotBytes: func(cols int) int {
			mc := g.mc(cols)
			b := mc * fTileC * 2 * 64
			if g.widen != nil {
				b += mc * fStride(cols) * 4
			}
			return b
		},
		convert: func(dst []byte, src []float32, cols, n, lo, hi int) {
			s := fStride(cols) * 4
			for i := lo; i < hi; i++ {
				g.convert(dst[i*s:i*s+cols*4], src[i*cols:(i+1)*cols])
			}
		},
		finish: func([]byte, int, int) {},
		run:    g.run,
	}
}

func (g *fTiles) run(out []float32, w []byte, rows, cols, wrb int, x []byte, n int, slot []byte, lo, hi int) {
	if lo >= hi {
		return
	}
	_ = w[hi*wrb-1]
	_ = out[(n-1)*rows+hi-1]
	fs := fStride(cols)
	xs := bytesF32(x[:n*fs*4])
	n32 := cols / 32
	xstride := fs * 4
	mc := g.mc(cols)
	accs := bytesF32(slot[:mc*fTileC*2*64])
	// The weight rows the tiles read, wstride bytes apart from row rbase
	// at wb: F32 and F16 in place, BF16 widened to float32 per cache block
	// into the slot.
	wb, wstride, esize, tiles := w, wrb, 4, fTilesF32
	if g.half {
		esize, tiles = 2, fTilesF16
	}
	if g.widen != nil {
		wb, wstride = slot[mc*fTileC*2*64:mc*fTileC*2*64+mc*fs*4], xstride
	}
	// Chunks of the row, as even as gemmFKSteps allows.
	chunks := (n32 + gemmFKSteps - 1) / gemmFKSteps
	steps := (n32 + chunks - 1) / chunks
	for m0 := lo; m0 < hi; m0 += mc {
		m1 := min(hi, m0+mc)
		rbase := 0
		if g.widen != nil {
			rbase = m0
			wf := bytesF32(wb)
			for r := m0; r < m1; r++ {
				g.widen(wf[(r-m0)*fs:(r-m0)*fs+cols], w[r*wrb:(r+1)*wrb])
			}
		}
		for c0 := 0; c0 < n; {
			C, rc, one := fTileC, tiles.rc, tiles.oneC
			if c0+C > n {
				C, rc, one = 1, tiles.r1, tiles.one1
			}
			og := out[c0*rows:]
			for k0 := 0; k0 < n32; k0 += steps {
				k1 := min(n32, k0+steps)
				mode := 0
				if k0 > 0 {
					mode |= fResume
				}
				if k1 == n32 {
					mode |= fFinal
				}
				xg := &xs[c0*fs+32*k0]
				wk := wb[32*k0*esize:]
				r := m0
				for ; r+fTileR <= m1; r += fTileR {
					rc(&wk[(r-rbase)*wstride], wstride, xg, xstride, k1-k0, &og[r], rows, &accs[(r-m0)*C*2*16], mode)
				}
				for ; r < m1; r++ {
					one(&wk[(r-rbase)*wstride], wstride, xg, xstride, k1-k0, &og[r], rows, &accs[(r-m0)*C*2*16], mode)
				}
			}
			c0 += C
		}
	}
}
