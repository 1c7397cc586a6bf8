//go:build amd64

package cpu

import (
	"math"
	"testing"

	"rill/engine/quant"
)

// TestMXFP4ScalesSIMD: the AVX2 kernels read every E8M0 scale byte as
// ggml does, the denormal scales of bytes 0 and 1 included: one block of
// level-2 weights against activations of 1 (d = 1) gives 64*2^(e-128),
// the reference dot's bits, through the one-row and the four-row kernel.
func TestMXFP4ScalesSIMD(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	w := make([]byte, 17)
	x := make([]byte, 4*34)
	for i := range 4 {
		putF16(x[i*34:], 0, 1)
		for j := range 32 {
			x[i*34+2+j] = 1
		}
	}
	for j := 1; j < 17; j++ {
		w[j] = 0x22
	}
	out := make([]float32, 4)
	for e := range 250 { // 64*2^(e-128) is finite up to e = 249
		w[0] = byte(e)
		want := quant.DotMXFP4(32, w, x)
		if float64(want) != 64*float64(quant.E8M0Half(byte(e))) {
			t.Fatalf("e=%d: reference dot %g", e, want)
		}
		if got := mxfp4Rows32.dot(32, w, x); math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("e=%d: b32dotMXFP4 = %g, want %g", e, got, want)
		}
		mxfp4Rows32.dot4(32, w, x, 34, out, 1)
		for i, got := range out {
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("e=%d: b32dot4MXFP4 row %d = %g, want %g", e, i, got, want)
			}
		}
	}
}
