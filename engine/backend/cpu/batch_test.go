package cpu

import (
	"fmt"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// TestLinearBatch: each multiplication of a batch gives the bits of
// Linear, whatever the mix of weight types (packed by Prepare or not, F32
// read as it is), row counts (one, a few, enough for the prefill tiles,
// none), activations shared between multiplications or not, and thread
// counts.
func TestLinearBatch(t *testing.T) {
	t.Parallel()
	const cols = 512
	r := newRand(t, 43)
	var ws []tensor.Matrix
	for i, typ := range []quant.Type{quant.Q4_0, quant.Q4_0, quant.Q8_0, quant.F16, quant.Q4_K, quant.Q6_K, quant.F32, quant.Q5_0, quant.Q8_0} {
		rows := 32 + 16*i
		ws = append(ws, tensor.Matrix{Type: typ, Rows: rows, Cols: cols, Data: randWeights(t, r, typ, rows*cols, true)})
	}
	shared := randFloats(r, 64*cols, 1)
	for _, threads := range []int{1, 2, 3} {
		for _, prepare := range []bool{false, true} {
			be := New(Options{Threads: threads})
			if prepare {
				be.Prepare(ws[:5])
			}
			for _, c := range []struct {
				name string
				ts   []int
				same bool // every matrix reads the same activations
			}{
				{"decode, one input", []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, true},
				{"decode, own inputs", []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, false},
				{"few rows", []int{3, 1, 7, 2, 5, 4, 6, 1, 2}, false},
				{"some empty, some tiled", []int{0, 40, 2, 64, 0, 33, 1, 0, 48}, false},
			} {
				xs, dst, want := make([][]float32, len(ws)), make([][]float32, len(ws)), make([][]float32, len(ws))
				for i, w := range ws {
					n := c.ts[i]
					xs[i] = shared[:n*cols]
					if !c.same {
						xs[i] = randFloats(r, max(n, 1)*cols, 1)[:n*cols]
					}
					dst[i] = make([]float32, n*w.Rows)
					for j := range dst[i] {
						dst[i][j] = 99 // LinearBatch must write every output
					}
					want[i] = make([]float32, n*w.Rows)
					if n > 0 {
						be.Linear(want[i], w, xs[i], n)
					}
				}
				for i := range xs {
					if len(xs[i]) == 0 {
						xs[i] = shared[:0]
					}
				}
				be.LinearBatch(dst, ws, xs, c.ts)
				for i, w := range ws {
					sameOpBits(t, fmt.Sprintf("threads %d, prepared %v, %s: matrix %d (%s)", threads, prepare, c.name, i, w.Type), dst[i], want[i])
				}
			}
			be.Close()
		}
	}
}
