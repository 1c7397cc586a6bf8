package cpu

import (
	"fmt"
	"testing"
)

func BenchmarkZZTile(b *testing.B) {
	for _, n32 := range []int{4, 8, 32, 88} {
		for _, rowsW := range []int{3, 96, 384} {
			cols := n32 * 32
			fs := fStride(cols)
			w := make([]float32, rowsW*fs)
			x := make([]float32, 4*fs)
			for i := range w {
				w[i] = float32(i%7) * 0.1
			}
			for i := range x {
				x[i] = float32(i%5) * 0.1
			}
			out := make([]float32, 4*rowsW)
			acc := make([]float32, 24*16)
			b.Run(fmt.Sprintf("n32=%d/rows=%d", n32, rowsW), func(b *testing.B) {
				for b.Loop() {
					for r := 0; r+3 <= rowsW; r += 3 {
						gemmFR3C4(&w[r*fs], fs*4, &x[0], fs*4, n32, &out[r], rowsW, &acc[0], fFinal)
					}
				}
				flops := float64(rowsW/3*3*4*cols*2) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
