//go:build amd64

package cpu

import "rill/engine/quant"

// quantValueKernel returns the fused value kernel for a cache type and head
// size, or nil where values take the generic path (dequantise the block,
// then AXPY per head and row).
func quantValueKernel(quant.Type, int) func(acc []float32, v []byte, rb, rows int, w []float32, ws, hd, group int) {
	return nil
}
