//go:build amd64

package cpu

// Packed F16 on AVX-512: rows in groups of 16, column-interleaved (a
// group's column k is the 16 rows' halves), multiplied by the
// packedF16G<g>T<t> tiles (internal/gen/packedf.go) against activations
// rounded to f16 precision and kept as float32, as the F16 row kernels
// take them. Each output is one accumulator over the columns in order, the
// same for one token or many: decode and prefill give the same bits.

// packedF16Tiles[g-1][t-1] multiplies g groups by t tokens.
var packedF16Tiles = [packedFMaxGroups][packedMaxTokens]func(w *byte, wstride int, x *float32, xstride int, cols int, out *float32, ostride int, mask uint64){
	{packedF16G1T1, packedF16G1T2, packedF16G1T3, packedF16G1T4, packedF16G1T5, packedF16G1T6, packedF16G1T7, packedF16G1T8},
	{packedF16G2T1, packedF16G2T2, packedF16G2T3, packedF16G2T4, packedF16G2T5, packedF16G2T6, packedF16G2T7, packedF16G2T8},
	{packedF16G3T1, packedF16G3T2, packedF16G3T3, packedF16G3T4, packedF16G3T5, packedF16G3T6, packedF16G3T7, packedF16G3T8},
}

// packedFMaxGroups is the most groups of one tile.
const packedFMaxGroups = 3

// packedF16 is the packed F16 path. Rows must be a multiple of 16 columns
// (cols is checked when packing: see packable).
var packedF16 = &packKernel{
	group:      packedGroup,
	groupBytes: func(cols int) int { return 32 * cols },
	packable:   func(cols int) bool { return cols%16 == 0 },
	pack:       packF16,
	xBytes:     func(cols, n int) int { return 4 * n * cols },
	convert: func(dst []byte, src []float32, cols, lo, hi int) {
		for i := lo; i < hi; i++ {
			f16Row(dst[4*i*cols:4*(i+1)*cols], src[i*cols:(i+1)*cols])
		}
	},
	run: runF16,
}

// packF16 writes groups [lo,hi) of the F16 matrix src into dst: a
// column at a time, so that the writes are sequential and the 16 rows are
// read as 16 sequential streams.
func packF16(dst, src []byte, rows, cols, lo, hi int) {
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

// runF16 computes out[i*rows + r] for the rows of groups [lo,hi) and every
// token i < n.
func runF16(out []float32, w []byte, rows, cols int, x []byte, n int, lo, hi int) {
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
				packedF16Tiles[G-1][T-1](&w[g*gb], gb, &xf[t0*cols], 4*cols, cols, &out[t0*rows+r0], rows, 1<<valid-1)
			}
		}
	}
}
