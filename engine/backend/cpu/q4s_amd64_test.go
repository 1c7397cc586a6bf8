package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// q4sReference is the packed Q4_0 arithmetic in Go: per row and token,
// acc = fma(float(isum), dw*dx, acc) over the blocks in order, isum the
// exact integer dot product of the block's quants, x quantised by
// engine/quant's Q8_0 reference.
func q4sReference(t *testing.T, w []byte, rows, cols int, x []float32, n int) []float32 {
	t.Helper()
	nb := cols / 32
	out := make([]float32, n*rows)
	xq := quantize(t, quant.Q8_0, x[:n*cols])
	for i := range n {
		for r := range rows {
			var acc float32
			for b := range nb {
				wb := w[(r*nb+b)*18:][:18]
				xb := xq[(i*nb+b)*34:][:34]
				isum := 0
				for k := range 16 {
					lo, hi := int(wb[2+k]&15)-8, int(wb[2+k]>>4)-8
					isum += lo*int(int8(xb[2+k])) + hi*int(int8(xb[18+k]))
				}
				d := quant.F16ToF32(binary.LittleEndian.Uint16(wb)) * quant.F16ToF32(binary.LittleEndian.Uint16(xb))
				// float(isum)*d is exact in float64, so this is a float32
				// fma up to a double rounding (odds about 2^-29 a step).
				acc = float32(float64(isum)*float64(d) + float64(acc))
			}
			out[i*rows+r] = acc
		}
	}
	return out
}

// TestQ4sConverter checks the q8s activation converter against
// engine/quant's Q8_0 quantiser: the same quants, the same scale, and
// -8 times the quants' sum.
func TestQ4sConverter(t *testing.T) {
	needAVX512(t)
	r := newRand(t, 41)
	for _, nb := range []int{1, 2, 5, 28} {
		for ki, kind := range activationKinds {
			x := kind.gen(r, 32*nb)
			ref := quantize(t, quant.Q8_0, x)
			got := make([]byte, nb*q8sUnit)
			q4sKernel.convert(got, x, 32*nb, 0, 1)
			for b := range nb {
				u, rb := got[b*q8sUnit:][:q8sUnit], ref[b*34:][:34]
				sum := 0
				for k := range 32 {
					if u[k] != rb[2+k] {
						t.Fatalf("nb=%d kind %d block %d quant %d: %d, want %d", nb, ki, b, k, int8(u[k]), int8(rb[2+k]))
					}
					sum += int(int8(rb[2+k]))
				}
				d := math.Float32frombits(binary.LittleEndian.Uint32(u[32:]))
				if want := quant.F16ToF32(binary.LittleEndian.Uint16(rb)); math.Float32bits(d) != math.Float32bits(want) {
					t.Fatalf("nb=%d kind %d block %d: scale %g, want %g", nb, ki, b, d, want)
				}
				if c := int32(binary.LittleEndian.Uint32(u[36:])); c != int32(-8*sum) {
					t.Fatalf("nb=%d kind %d block %d: correction %d, want %d", nb, ki, b, c, -8*sum)
				}
			}
		}
	}
}

// TestQ4sMatMul checks MatMul on a prepared Q4_0 matrix: its arithmetic
// (against q4sReference, bit for bit), its closeness to the unprepared
// kernels, and that a token's outputs are the same bits alone, in any
// batch and on any number of threads.
func TestQ4sMatMul(t *testing.T) {
	needAVX512(t)
	if !useAVX512 {
		t.Skip("RILL_CPU_NOAVX512 or RILL_CPU_NOSIMD is set: the packed kernels are off")
	}
	for _, tc := range []struct{ rows, cols int }{{16, 32}, {37, 96}, {64, 256}, {200, 896}} {
		for _, n := range []int{1, 2, 7, 8, 9, 17, 40} {
			t.Run(fmt.Sprintf("%dx%d/n=%d", tc.rows, tc.cols, n), func(t *testing.T) {
				r := newRand(t, uint64(tc.rows*1000+tc.cols*10+n))
				w := Matrix{Type: quant.Q4_0, Rows: tc.rows, Cols: tc.cols}
				for i := range tc.rows {
					w.Data = append(w.Data, randWeights(t, r, quant.Q4_0, tc.cols, i%3 == 0)...)
				}
				x := randFloats(r, n*tc.cols, 1)
				want := q4sReference(t, w.Data, tc.rows, tc.cols, x, n)

				plain := New(Options{Threads: 2})
				defer plain.Close()
				unpacked := make([]float32, n*tc.rows)
				plain.MatMul(unpacked, w, x, n)

				for _, threads := range []int{1, 3} {
					b := New(Options{Threads: threads})
					defer b.Close()
					b.Prepare([]tensor.Matrix{tensor.Matrix(w)})
					b.Prepare([]tensor.Matrix{tensor.Matrix(w)}) // idempotent
					if len(b.packed) != 1 {
						t.Fatalf("%d packed matrices after Prepare, want 1", len(b.packed))
					}
					got := make([]float32, n*tc.rows)
					b.MatMul(got, w, x, n)
					for i, v := range got {
						if math.Float32bits(v) != math.Float32bits(want[i]) {
							t.Fatalf("threads %d: token %d row %d: %g, reference %g", threads, i/tc.rows, i%tc.rows, v, want[i])
						}
						if d := math.Abs(float64(v - unpacked[i])); d > 1e-4*(1+math.Abs(float64(v))) {
							t.Fatalf("threads %d: token %d row %d: %g, unpacked kernels %g", threads, i/tc.rows, i%tc.rows, v, unpacked[i])
						}
					}
					// Each token alone: the same bits as in the batch.
					one := make([]float32, tc.rows)
					for i := range n {
						b.MatMul(one, w, x[i*tc.cols:(i+1)*tc.cols], 1)
						for k, v := range one {
							if math.Float32bits(v) != math.Float32bits(got[i*tc.rows+k]) {
								t.Fatalf("threads %d: token %d row %d: %g alone, %g in a batch of %d", threads, i, k, v, got[i*tc.rows+k], n)
							}
						}
					}
				}
			})
		}
	}
}
