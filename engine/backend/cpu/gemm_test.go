package cpu

import (
	"fmt"
	"math"
	"testing"

	"rill/engine/tensor"
)

// TestGEMMMatchesDecode checks every prefill kernel, bit for bit, against
// the same kernel set's single-row product for each activation row (what a
// decode step computes): batch sizes around the register tiles (odd ones
// leave a half pair), weight rows around the tiles and the thread ranges,
// several thread counts, raw and quantised weights.
func TestGEMMMatchesDecode(t *testing.T) {
	t.Parallel()
	for _, ks := range kernelSets() {
		for _, typ := range weightTypes {
			k := ks.rows[typ]
			if k.gemm == nil {
				continue
			}
			for _, threads := range []int{1, 2, 3} {
				b := testBackend(t, threads, ks)
				for _, shape := range []struct{ rows, cols, n int }{
					{37, 2 * 256, k.gemm.minTokens}, {37, 2 * 256, 9}, {70, 1024, 17}, {301, 256, 64}, {5, 512, 130},
					// Long rows: several cache blocks of rows, chunked float rows.
					{130, 2816, 11},
				} {
					t.Run(fmt.Sprintf("%s/%s/threads=%d/%dx%d/n=%d", ks.name, typ, threads, shape.rows, shape.cols, shape.n), func(t *testing.T) {
						rows, cols, n := shape.rows, shape.cols, shape.n
						r := newRand(t, uint64(rows*cols+n)+uint64(typ)<<24)
						w := tensor.Matrix{Type: typ, Rows: rows, Cols: cols}
						for i := range rows {
							w.Data = append(w.Data, randWeights(t, r, typ, cols, i%3 != 0)...)
						}
						// Tokens of every activation kind (ordinary, tiny,
						// zero blocks, wide range).
						var x []float32
						for i := range n {
							x = append(x, activationKinds[i%len(activationKinds)].gen(r, cols)...)
						}
						out := make([]float32, (n+1)*rows)
						for i := range out {
							out[i] = -42
						}
						b.MatMul(out, w, x, n)
						rb := w.RowBytes()
						for i := range n {
							xb, _ := activationRow(t, k, typ, x[i*cols:(i+1)*cols])
							for rr := range rows {
								want := k.dot(cols, w.Data[rr*rb:(rr+1)*rb], xb)
								if got := out[i*rows+rr]; math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("token %d, row %d: prefill %g, decode %g", i, rr, got, want)
								}
							}
						}
						for i := n * rows; i < len(out); i++ {
							if out[i] != -42 {
								t.Fatalf("out[%d] written past n rows", i)
							}
						}
					})
				}
			}
		}
	}
}
