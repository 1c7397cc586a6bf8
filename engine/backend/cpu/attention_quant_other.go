//go:build !amd64

package cpu

import "rill/engine/quant"

// quantValueKernel: without amd64 assembly, values take the generic path.
func quantValueKernel(quant.Type, int) func(acc []float32, v []byte, rb, rows int, w []float32, ws, hd, group int) {
	return nil
}
