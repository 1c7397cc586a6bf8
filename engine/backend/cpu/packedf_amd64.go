//go:build amd64

package cpu

// Packed F16 and BF16 on AVX-512: rows in groups of 16, column-interleaved
// (a group's column k is the 16 rows' halves), multiplied by the
// packed<type>G<g>T<t> tiles (internal/gen/packedf.go) against activations
// rounded to the weights' precision and kept as float32, as the row
// kernels take them. Each output is one accumulator over the columns in
// order, the same for one token or many: decode and prefill give the same
// bits. On AVX512_BF16 (kernel set avx512bf16) packedd_amd64.go's bf16
// dot products take their place; these remain the fallback.

// packedFTile multiplies g groups of packed rows with t tokens.
type packedFTile func(w *byte, wstride int, x *float32, xstride int, cols int, out *float32, ostride int, mask uint64)

// packedHalfTiles[g-1][t-1] multiplies g groups by t tokens.
type packedHalfTiles [packedFMaxGroups][packedMaxTokens]packedFTile

var (
	packedF16Tiles = packedHalfTiles{
		{packedF16G1T1, packedF16G1T2, packedF16G1T3, packedF16G1T4, packedF16G1T5, packedF16G1T6, packedF16G1T7, packedF16G1T8},
		{packedF16G2T1, packedF16G2T2, packedF16G2T3, packedF16G2T4, packedF16G2T5, packedF16G2T6, packedF16G2T7, packedF16G2T8},
		{packedF16G3T1, packedF16G3T2, packedF16G3T3, packedF16G3T4, packedF16G3T5, packedF16G3T6, packedF16G3T7, packedF16G3T8},
	}
	packedBF16Tiles = packedHalfTiles{
		{packedBF16G1T1, packedBF16G1T2, packedBF16G1T3, packedBF16G1T4, packedBF16G1T5, packedBF16G1T6, packedBF16G1T7, packedBF16G1T8},
		{packedBF16G2T1, packedBF16G2T2, packedBF16G2T3, packedBF16G2T4, packedBF16G2T5, packedBF16G2T6, packedBF16G2T7, packedBF16G2T8},
		{packedBF16G3T1, packedBF16G3T2, packedBF16G3T3, packedBF16G3T4, packedBF16G3T5, packedBF16G3T6, packedBF16G3T7, packedBF16G3T8},
	}
)

// packedFMaxGroups is the most groups of one tile.
const packedFMaxGroups = 3

// kernel returns the packed path of a half-precision type whose rows
// convert converts (rounding to the type's precision).
func (tiles *packedHalfTiles) kernel(convert func(dst []byte, src []float32)) *packKernel {
	return &packKernel{
		group:      packedGroup,
		groupBytes: func(cols int) int { return 32 * cols },
		tileGroups: packedFMaxGroups,
		packable:   func(cols int) bool { return cols%16 == 0 },
		pack:       packHalf,
		xBytes:     func(cols, n int) int { return 4 * n * cols },
		convert: func(dst []byte, src []float32, cols, lo, hi int) {
			for i := lo; i < hi; i++ {
				convert(dst[4*i*cols:4*(i+1)*cols], src[i*cols:(i+1)*cols])
			}
		},
		run: tiles.run,
	}
}

// packHalf writes groups [lo,hi) of the F16 or BF16 matrix src into dst: a
// column at a time, so that the writes are sequential and the 16 rows are
// read as 16 sequential streams.
func packHalf(dst, src []byte, rows, cols, lo, hi int) {
	d, s := bytesU16(dst), bytesU16(src)
	var in [packedGroup][]uint16
	for g := lo; g < hi; g++ {
		u := d[g*packedGroup*cols:][:packedGroup*cols]
		for r := range in {
			in[r] = nil
			if row := g*packedGroup + r; row < rows {
				in[r] = s[row*cols:][:cols]
			}
		}
		for k := range cols {
			c := u[packedGroup*k:][:packedGroup]
			for r, row := range in {
				if row == nil {
					c[r] = 0 // padding past the last row
				} else {
					c[r] = row[k]
				}
			}
		}
	}
}

// run computes out[i*rows + r] for the rows of groups [lo,hi) and every
// token i < n.
func (tiles *packedHalfTiles) run(out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int) {
	if cols == 0 || lo >= hi || n == 0 {
		return
	}
	gb := 32 * cols
	xf := bytesF32(x)
	_ = w[hi*gb-1]
	_ = xf[n*cols-1]
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
				tiles[G-1][T-1](&w[g*gb], gb, &xf[t0*cols], 4*cols, cols, &out[t0*rows+r0], rows, 1<<valid-1)
			}
		}
	}
}
