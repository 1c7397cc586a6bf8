package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// blockQuants returns the 32 integer quants of a Q4_0 or Q8_0 block.
func blockQuants(typ quant.Type, blk []byte) [32]int {
	var q [32]int
	for k := range 32 {
		if typ == quant.Q8_0 {
			q[k] = int(int8(blk[2+k]))
		} else {
			q[k] = int(blk[2+k%16]>>(4*(k/16))&15) - 8
		}
	}
	return q
}

// packedReference is the packed kernels' arithmetic in Go: per row and
// token, acc = fma(float(isum), dw*dx, acc) over the blocks in order, isum
// the exact integer dot product of the block's quants, x quantised by
// engine/quant's Q8_0 reference.
func packedReference(t *testing.T, typ quant.Type, w []byte, rows, cols int, x []float32, n int) []float32 {
	t.Helper()
	switch typ {
	case quant.Q4_K:
		return packedQ4KReference(t, w, rows, cols, x, n)
	case quant.F16, quant.BF16:
		return packedHalfReference(typ, w, rows, cols, x, n)
	}
	nb, bb := cols/32, typ.BlockBytes()
	out := make([]float32, n*rows)
	xq := quantize(t, quant.Q8_0, x[:n*cols])
	for i := range n {
		for r := range rows {
			var acc float32
			for b := range nb {
				wb := w[(r*nb+b)*bb:][:bb]
				xb := xq[(i*nb+b)*34:][:34]
				wq, xs := blockQuants(typ, wb), blockQuants(quant.Q8_0, xb)
				isum := 0
				for k := range 32 {
					isum += wq[k] * xs[k]
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

// packedDotReference is the bf16 dot packed kernels' arithmetic in Go
// (VDPBF16PS as Intel specifies it): per row and token one accumulator;
// per column pair k, k+1 in order, acc = fma(w[k+1], x[k+1], acc) then
// acc = fma(w[k], x[k], acc), weights and activations rounded to bf16
// (F16 weights from their float value), denormal results flushed to zero.
func packedDotReference(typ quant.Type, w []byte, rows, cols int, x []float32, n int) []float32 {
	weight := func(h uint16) float32 { return quant.BF16ToF32(h) }
	if typ == quant.F16 {
		weight = func(h uint16) float32 { return quant.BF16ToF32(quant.F32ToBF16(quant.F16ToF32(h))) }
	}
	ftz := func(v float32) float32 {
		if math.Abs(float64(v)) < 0x1p-126 {
			return 0
		}
		return v
	}
	out := make([]float32, n*rows)
	for i := range n {
		for r := range rows {
			var acc float32
			for k := 0; k < cols; k += 2 {
				for _, c := range []int{k + 1, k} {
					wk := weight(binary.LittleEndian.Uint16(w[2*(r*cols+c):]))
					xk := quant.BF16ToF32(quant.F32ToBF16(x[i*cols+c]))
					// An exact product in float64: a float32 fma up to a
					// double rounding (odds about 2^-29 a step).
					acc = ftz(float32(float64(wk)*float64(xk) + float64(acc)))
				}
			}
			out[i*rows+r] = acc
		}
	}
	return out
}

// packedHalfReference is the packed F16 and BF16 arithmetic in Go: per
// row and token one accumulator, acc = fma(w[k], x[k], acc) over the
// columns in order, x rounded to the weights' precision.
func packedHalfReference(typ quant.Type, w []byte, rows, cols int, x []float32, n int) []float32 {
	widen, round := quant.F16ToF32, quant.F32ToF16
	if typ == quant.BF16 {
		widen, round = quant.BF16ToF32, quant.F32ToBF16
	}
	out := make([]float32, n*rows)
	for i := range n {
		for r := range rows {
			var acc float32
			for k := range cols {
				wk := widen(binary.LittleEndian.Uint16(w[2*(r*cols+k):]))
				xk := widen(round(x[i*cols+k]))
				// An exact product in float64: a float32 fma up to a
				// double rounding (odds about 2^-29 a step).
				acc = float32(float64(wk)*float64(xk) + float64(acc))
			}
			out[i*rows+r] = acc
		}
	}
	return out
}

// packedQ4KReference is the packed Q4_K arithmetic in Go: per row, token
// and super-block, sumi = sum of scale*(nibbles.x) over the sub-blocks and
// summ = sum of min*(sum of the sub-block's x), exact integers, then
// acc = fma(float(sumi), d*dx, acc) and acc = fma(-float(summ), dmin*dx,
// acc); x quantised by engine/quant's Q8_K reference.
func packedQ4KReference(t *testing.T, w []byte, rows, cols int, x []float32, n int) []float32 {
	t.Helper()
	nsb := cols / 256
	out := make([]float32, n*rows)
	xq := quantize(t, quant.Q8_K, x[:n*cols])
	for i := range n {
		for r := range rows {
			var acc float32
			for sb := range nsb {
				wb := w[(r*nsb+sb)*144:][:144]
				xb := xq[(i*nsb+sb)*q8KLen:][:q8KLen]
				sc, m := quant.Q4KScaleMins(wb[4:16])
				sumi, summ := 0, 0
				for j := range 8 {
					isum, xsum := 0, 0
					for k := range 32 {
						q := int(wb[16+32*(j/2)+k] >> (4 * (j % 2)) & 15)
						xv := int(int8(xb[4+32*j+k]))
						isum += q * xv
						xsum += xv
					}
					sumi += int(sc[j]) * isum
					summ += int(m[j]) * xsum
				}
				dx := math.Float32frombits(binary.LittleEndian.Uint32(xb))
				d := quant.F16ToF32(binary.LittleEndian.Uint16(wb)) * dx
				dmin := quant.F16ToF32(binary.LittleEndian.Uint16(wb[2:])) * dx
				// Exact products in float64, so each step is a float32 fma
				// up to a double rounding (odds about 2^-29).
				acc = float32(float64(sumi)*float64(d) + float64(acc))
				acc = float32(-float64(summ)*float64(dmin) + float64(acc))
			}
			out[i*rows+r] = acc
		}
	}
	return out
}

// TestPackedQ4KConverter checks the q8ks activation converter against
// engine/quant's Q8_K quantiser: the same quants and scale, and each
// 32-element sub-block's sum.
func TestPackedQ4KConverter(t *testing.T) {
	needAVX512(t)
	r := newRand(t, 43)
	for _, nsb := range []int{1, 3} {
		for ki, kind := range activationKinds {
			x := kind.gen(r, 256*nsb)
			ref := quantize(t, quant.Q8_K, x)
			got := make([]byte, nsb*q8ksUnit)
			convertQ8KS(got, x, 256*nsb, 0, 1)
			for sb := range nsb {
				u, rb := got[sb*q8ksUnit:][:q8ksUnit], ref[sb*q8KLen:][:q8KLen]
				for k := range 256 {
					if u[k] != rb[4+k] {
						t.Fatalf("nsb=%d kind %d super-block %d quant %d: %d, want %d", nsb, ki, sb, k, int8(u[k]), int8(rb[4+k]))
					}
				}
				if d, want := binary.LittleEndian.Uint32(u[256:]), binary.LittleEndian.Uint32(rb); d != want {
					t.Fatalf("nsb=%d kind %d super-block %d: scale %#x, want %#x", nsb, ki, sb, d, want)
				}
				for j := range 8 {
					sum := 0
					for k := range 32 {
						sum += int(int8(rb[4+32*j+k]))
					}
					if got := int(int16(binary.LittleEndian.Uint16(u[260+2*j:]))); got != sum {
						t.Fatalf("nsb=%d kind %d super-block %d: sub-block %d sums to %d, want %d", nsb, ki, sb, j, got, sum)
					}
				}
			}
		}
	}
}

// TestPackedConverter checks the q8s activation converter against
// engine/quant's Q8_0 quantiser: the same quants, the same scale, and
// -K times the quants' sum (K = 8 for Q4_0, 128 for Q8_0).
func TestPackedConverter(t *testing.T) {
	needAVX512(t)
	r := newRand(t, 41)
	for _, p := range []*packed32{packedQ4_0, packedQ8_0} {
		for _, nb := range []int{1, 2, 5, 28} {
			for ki, kind := range activationKinds {
				x := kind.gen(r, 32*nb)
				ref := quantize(t, quant.Q8_0, x)
				got := make([]byte, nb*q8sUnit)
				p.kernel().convert(got, x, 32*nb, 0, 1)
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
					if c, want := int32(binary.LittleEndian.Uint32(u[36:])), -int32(p.k)*int32(sum); c != want {
						t.Fatalf("%s nb=%d kind %d block %d: correction %d, want %d", p.typ, nb, ki, b, c, want)
					}
				}
			}
		}
	}
}

// TestPackedMatMul checks MatMul on a prepared Q4_0, Q8_0, Q4_K, F16 or
// BF16 matrix: its
// arithmetic (against packedReference, bit for bit), its closeness to the
// unprepared kernels, and that a token's outputs are the same bits alone,
// in any batch and on any number of threads.
func TestPackedMatMul(t *testing.T) {
	needAVX512(t)
	sets := []*kernelSet{avx512Kernels()}
	if hasBF16Dot {
		sets = append(sets, bf16Kernels())
	}
	for _, ks := range sets {
		t.Run(ks.name, func(t *testing.T) { testPackedMatMul(t, ks) })
	}
}

func testPackedMatMul(t *testing.T, ks *kernelSet) {
	shapes := map[quant.Type][]struct{ rows, cols int }{
		quant.Q4_0: {{16, 32}, {37, 96}, {64, 256}, {200, 896}},
		quant.Q8_0: {{16, 32}, {37, 96}, {64, 256}, {200, 896}},
		quant.Q4_K: {{16, 256}, {37, 512}, {100, 768}},
		quant.F16:  {{16, 16}, {37, 96}, {50, 48}, {200, 896}},
		quant.BF16: {{16, 16}, {37, 96}, {200, 896}},
	}
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.F16, quant.BF16} {
		for _, tc := range shapes[typ] {
			for _, n := range []int{1, 2, 7, 8, 9, 17, 40} {
				t.Run(fmt.Sprintf("%s/%dx%d/n=%d", typ, tc.rows, tc.cols, n), func(t *testing.T) {
					r := newRand(t, uint64(tc.rows*1000+tc.cols*10+n))
					w := tensor.Matrix{Type: typ, Rows: tc.rows, Cols: tc.cols}
					for i := range tc.rows {
						w.Data = append(w.Data, randWeights(t, r, typ, tc.cols, i%3 == 0)...)
					}
					x := randFloats(r, n*tc.cols, 1)
					bf16Dot := ks.rows[typ].pack.xBytes(tc.cols, 1) == 2*tc.cols
					want := packedReference(t, typ, w.Data, tc.rows, tc.cols, x, n)
					if bf16Dot {
						want = packedDotReference(typ, w.Data, tc.rows, tc.cols, x, n)
					}
					plain := testBackend(t, 2, ks)
					unpacked := make([]float32, n*tc.rows)
					plain.MatMul(unpacked, w, x, n)
					// The unprepared kernels' arithmetic, to which a
					// packed result is close: to 1e-4 relative for the
					// float32 FMA tiles; for bf16 dots, to the rounding of
					// the weights and activations to bf16's 8 bits
					// (2^-8 of the sum of the products' magnitudes).
					near := func(i int) float64 { return 1e-4 * (1 + math.Abs(float64(unpacked[i]))) }
					if bf16Dot {
						near = func(i int) float64 {
							tok, row := i/tc.rows, i%tc.rows
							return 0x1p-8*absDot(typ, w.Data[2*row*tc.cols:2*(row+1)*tc.cols], x[tok*tc.cols:(tok+1)*tc.cols]) + 1e-6
						}
					}

					for _, threads := range []int{1, 3} {
						b := testBackend(t, threads, ks)
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
							if d := math.Abs(float64(v - unpacked[i])); d > near(i) {
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
}

// absDot is the sum of |w[k]*x[k]| over an F16 or BF16 weight row w and
// activations x, in float64.
func absDot(typ quant.Type, w []byte, x []float32) float64 {
	widen := quant.F16ToF32
	if typ == quant.BF16 {
		widen = quant.BF16ToF32
	}
	s := 0.0
	for k, v := range x {
		s += math.Abs(float64(widen(binary.LittleEndian.Uint16(w[2*k:]))) * float64(v))
	}
	return s
}
