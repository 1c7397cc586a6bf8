//go:build amd64

package sample

import (
	"os"

	xcpu "golang.org/x/sys/cpu"
)

//go:generate go run ../backend/cpu/internal/gen -kernels softmax -pkg sample -out softmax_amd64.s -stubs softmax_stub_amd64.go

// useSIMD selects the assembly kernels, on the machines and under the
// switch where the CPU backend selects its own (see softmax).
var useSIMD = xcpu.X86.HasAVX2 && xcpu.X86.HasFMA && xcpu.X86.HasF16C && os.Getenv("RILL_CPU_NOSIMD") != "1"

// The wrappers run a kernel on the multiple-of-8 body of x and finish the
// tail in Go.

func maxSIMD(x []float32) float32 {
	body := len(x) &^ 7
	m := maxGeneric(x[body:])
	if body > 0 {
		m = max(m, maxAVX(&x[0], body))
	}
	return m
}

func expSubSumSIMD(x []float32, m float32) float64 {
	body := len(x) &^ 7
	var sum float64
	if body > 0 {
		sum = expSubSumAVX(&x[0], m, body)
	}
	// The tail goes through the same polynomial, so every element of the
	// row is computed the same way.
	var buf [8]float32
	tail := buf[:len(x)-body]
	if len(tail) > 0 {
		for i := range tail {
			tail[i] = x[body+i] - m
		}
		expAVX(&buf[0], &buf[0], 8)
		for i, e := range tail {
			x[body+i] = e
			sum += float64(e)
		}
	}
	return sum
}

func scaleSIMD(x []float32, a float32) {
	body := len(x) &^ 7
	if body > 0 {
		scaleAVX(&x[0], a, body)
	}
	for i := body; i < len(x); i++ {
		x[i] *= a
	}
}
