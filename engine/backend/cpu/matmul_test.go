package cpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// testBackend returns a Backend on the given kernel set, closed with the test.
func testBackend(t testing.TB, threads int, ks *kernelSet) *Backend {
	t.Helper()
	b := New(Options{Threads: threads})
	b.kern = ks
	t.Cleanup(b.Close)
	return b
}

// kernelSets are the sets this machine can run.
func kernelSets() []*kernelSet {
	return append([]*kernelSet{genericKernels()}, simdSets()...)
}

// simdSets are the assembly kernel sets this machine can run.
func simdSets() []*kernelSet {
	var sets []*kernelSet
	if hasSIMD {
		sets = append(sets, simdKernels())
	}
	if hasAVX512 {
		sets = append(sets, avx512Kernels())
	}
	if hasBF16Dot {
		sets = append(sets, bf16Kernels())
	}
	return sets
}

// matmulCols picks a row length per type: odd lengths for the float types
// (vector tails), a few blocks for the block types.
func matmulCols(typ quant.Type) int {
	switch typ {
	case quant.F32, quant.F16, quant.BF16:
		return 203
	case quant.Q8_0, quant.Q4_0:
		return 7 * 32
	default:
		return 2 * 256
	}
}

// TestMatMulVsNaive checks MatMul against dequantising the weights and the
// converted activations and multiplying in float64, for every weight type,
// kernel set, batch size and thread count. The tolerance per output is
// dotTolerance's bound for its row dot (the naive product is exact).
func TestMatMulVsNaive(t *testing.T) {
	t.Parallel()
	const rows = 37 // not a multiple of 4 or of any tile
	for _, ks := range kernelSets() {
		for _, typ := range weightTypes {
			for _, threads := range []int{1, 3} {
				b := testBackend(t, threads, ks)
				for _, n := range []int{1, 3, 8, 64} {
					name := fmt.Sprintf("%s/%s/threads=%d/n=%d", ks.name, typ, threads, n)
					t.Run(name, func(t *testing.T) {
						cols := matmulCols(typ)
						r := newRand(t, uint64(n)<<8+uint64(typ))
						w := tensor.Matrix{Type: typ, Rows: rows, Cols: cols}
						var wd, mag [][]float32
						for range rows {
							row := randWeights(t, r, typ, cols, typ != quant.Q8_0 || n%2 == 0)
							w.Data = append(w.Data, row...)
							wd = append(wd, dequantize(t, typ, row, cols))
							mag = append(mag, magnitudeRow(t, typ, row, cols))
						}
						x := randFloats(r, n*cols, 1)
						// One output row more than needed: MatMul must not write it.
						out := make([]float32, (n+1)*rows)
						for i := range out {
							out[i] = -42
						}
						b.MatMul(out, w, x, n)

						xt, _ := quant.VecDotType(typ)
						for i := range n {
							xd := dequantize(t, xt, quantize(t, xt, x[i*cols:(i+1)*cols]), cols)
							for rr := range rows {
								exact, abs := exactDot(wd[rr], xd, mag[rr])
								tol := dotTolerance(typ, cols, abs, false)
								if got := out[i*rows+rr]; math.Abs(float64(got)-exact) > tol {
									t.Fatalf("out[%d][%d] = %g, want %g (tolerance %g)", i, rr, got, exact, tol)
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

// TestMatMulKernelSetsAgree checks that the SIMD and generic backends give
// the same products on a matrix large enough for the parallel, tiled path.
func TestMatMulKernelSetsAgree(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	gen, simd := testBackend(t, 2, genericKernels()), testBackend(t, 2, simdKernels())
	for _, typ := range weightTypes {
		t.Run(typ.String(), func(t *testing.T) {
			const rows, n = 300, 9
			cols := 1024
			r := newRand(t, uint64(typ))
			w := tensor.Matrix{Type: typ, Rows: rows, Cols: cols}
			var absRow []float32
			for range rows {
				row := randWeights(t, r, typ, cols, false)
				w.Data = append(w.Data, row...)
				absRow = append(absRow, magnitudeRow(t, typ, row, cols)...)
			}
			x := randFloats(r, n*cols, 1)
			a, c := make([]float32, n*rows), make([]float32, n*rows)
			gen.MatMul(a, w, x, n)
			simd.MatMul(c, w, x, n)
			xt, _ := quant.VecDotType(typ)
			for i := range n {
				xd := dequantize(t, xt, quantize(t, xt, x[i*cols:(i+1)*cols]), cols)
				for rr := range rows {
					_, abs := exactDot(xd, xd, absRow[rr*cols:(rr+1)*cols])
					tol := dotTolerance(typ, cols, abs, false) + dotTolerance(typ, cols, abs, true)
					if d := math.Abs(float64(a[i*rows+rr] - c[i*rows+rr])); d > tol {
						t.Fatalf("[%d][%d]: generic %g, simd %g", i, rr, a[i*rows+rr], c[i*rows+rr])
					}
				}
			}
		})
	}
}

// TestMatMulBatchInvariant checks that an activation row's products are
// the same bits whichever batch it is multiplied in and however the work is
// split over threads: speculative decoding verifies drafts in one batch and
// must reproduce plain one-token decoding exactly.
func TestMatMulBatchInvariant(t *testing.T) {
	t.Parallel()
	for _, ks := range kernelSets() {
		serial, parallel := testBackend(t, 1, ks), testBackend(t, 3, ks)
		for _, typ := range weightTypes {
			for _, cols := range []int{typ.BlockElems() * 2, 2048} {
				if typ.BlockElems() == 1 {
					cols += 3 // a tail
				}
				t.Run(fmt.Sprintf("%s/%s/cols=%d", ks.name, typ, cols), func(t *testing.T) {
					const rows, n = 70, 9
					r := newRand(t, uint64(cols)+uint64(typ)<<20)
					w := tensor.Matrix{Type: typ, Rows: rows, Cols: cols, Data: randWeights(t, r, typ, rows*cols, true)}
					x := randFloats(r, n*cols, 1)
					all := make([]float32, n*rows)
					parallel.MatMul(all, w, x, n)
					one := make([]float32, rows)
					for i := range n {
						serial.MatMul(one, w, x[i*cols:(i+1)*cols], 1)
						for rr := range rows {
							if math.Float32bits(one[rr]) != math.Float32bits(all[i*rows+rr]) {
								t.Fatalf("row %d, output %d: %g alone, %g in a batch of %d", i, rr, one[rr], all[i*rows+rr], n)
							}
						}
					}
					// A batch that starts at a different row modulo 4.
					part := make([]float32, 5*rows)
					serial.MatMul(part, w, x[2*cols:7*cols], 5)
					for k := range part {
						if math.Float32bits(part[k]) != math.Float32bits(all[2*rows+k]) {
							t.Fatalf("rows 2..6, output %d: %g, %g in the full batch", k, part[k], all[2*rows+k])
						}
					}
				})
			}
		}
	}
}

// TestMatMulNoAlloc checks that MatMul allocates nothing once its scratch
// has grown, on the serial and the parallel path.
func TestMatMulNoAlloc(t *testing.T) {
	for _, ks := range kernelSets() {
		b := testBackend(t, 2, ks)
		for _, typ := range weightTypes {
			for _, n := range []int{1, 8} {
				cols, rows := 512, 256
				r := newRand(t, 1)
				w := tensor.Matrix{Type: typ, Rows: rows, Cols: cols, Data: randWeights(t, r, typ, rows*cols, false)}
				x := randFloats(r, n*cols, 1)
				out := make([]float32, n*rows)
				if allocs := testing.AllocsPerRun(5, func() { b.MatMul(out, w, x, n) }); allocs != 0 {
					t.Errorf("%s %s n=%d: %v allocations per MatMul", ks.name, typ, n, allocs)
				}
			}
		}
	}
}

func TestCheckWeight(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		m    tensor.Matrix
		want string // substring of the error; empty for valid
	}{
		{"f32", tensor.Matrix{Type: quant.F32, Rows: 2, Cols: 3, Data: make([]byte, 24)}, ""},
		{"q4_K", tensor.Matrix{Type: quant.Q4_K, Rows: 2, Cols: 256, Data: make([]byte, 288)}, ""},
		{"empty", tensor.Matrix{Type: quant.Q8_0, Rows: 0, Cols: 64}, ""},
		{"unsupported type", tensor.Matrix{Type: quant.IQ2_XXS, Rows: 1, Cols: 256, Data: make([]byte, 66)}, "not a supported"},
		{"unknown type", tensor.Matrix{Type: 99, Rows: 1, Cols: 1, Data: make([]byte, 4)}, "not a supported"},
		{"negative", tensor.Matrix{Type: quant.F32, Rows: -1, Cols: 3}, "negative"},
		{"partial block", tensor.Matrix{Type: quant.Q8_0, Rows: 1, Cols: 40, Data: make([]byte, 34)}, "block"},
		{"short data", tensor.Matrix{Type: quant.F16, Rows: 2, Cols: 4, Data: make([]byte, 15)}, "bytes of data"},
		{"long data", tensor.Matrix{Type: quant.F16, Rows: 2, Cols: 4, Data: make([]byte, 17)}, "bytes of data"},
		{"overflow", tensor.Matrix{Type: quant.F32, Rows: math.MaxInt / 2, Cols: 4}, "too large"},
	}
	for _, c := range cases {
		err := checkWeight(c.m)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestCheckMatMul(t *testing.T) {
	t.Parallel()
	w := tensor.Matrix{Type: quant.F32, Rows: 3, Cols: 4, Data: make([]byte, 48)}
	cases := []struct {
		name   string
		out, x int
		n      int
		w      tensor.Matrix
		ok     bool
	}{
		{"exact", 6, 8, 2, w, true},
		{"larger buffers", 9, 12, 2, w, true},
		{"n=0", 0, 0, 0, w, true},
		{"short x", 6, 7, 2, w, false},
		{"short out", 5, 8, 2, w, false},
		{"negative n", 6, 8, -1, w, false},
		{"bad matrix", 6, 8, 2, tensor.Matrix{Type: quant.F32, Rows: 3, Cols: 4}, false},
	}
	for _, c := range cases {
		err := CheckMatMul(make([]float32, c.out), c.w, make([]float32, c.x), c.n)
		if (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && c.name != "bad matrix" && !errors.Is(err, errShape) {
			t.Errorf("%s: error %v does not wrap errShape", c.name, err)
		}
	}
	b := testBackend(t, 1, genericKernels())
	defer func() {
		if recover() == nil {
			t.Error("MatMul with a short x did not panic")
		}
	}()
	b.MatMul(make([]float32, 6), w, make([]float32, 7), 2)
}

// TestLinearsShareConversion: Linears over matrices of one type and of
// types whose activations convert differently, on the prefill and the row
// paths, gives the bits of one Linear per matrix; and a later MatMul on
// other activations at the same address converts them afresh.
func TestLinearsShareConversion(t *testing.T) {
	t.Parallel()
	be := New(Options{Threads: 2})
	defer be.Close()
	const cols = 512
	r := newRand(t, 41)
	var ws []tensor.Matrix
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q4_0, quant.Q8_0, quant.Q4_0, quant.F16, quant.F16, quant.Q4_K, quant.Q6_K} {
		rows := 48 + 16*len(ws)
		ws = append(ws, tensor.Matrix{Type: typ, Rows: rows, Cols: cols, Data: randWeights(t, r, typ, rows*cols, true)})
	}
	for _, n := range []int{1, 5, 40} {
		x := randFloats(r, n*cols, 1)
		got := make([][]float32, len(ws))
		for i, w := range ws {
			got[i] = make([]float32, n*w.Rows)
		}
		be.Linears(got, ws, x, n)
		for i, w := range ws {
			want := make([]float32, n*w.Rows)
			be.Linear(want, w, x, n)
			sameOpBits(t, fmt.Sprintf("n=%d matrix %d (%s)", n, i, w.Type), got[i], want)
		}
		// Same buffer, new values: converted again.
		copy(x, randFloats(r, n*cols, 1))
		want := make([]float32, n*ws[0].Rows)
		be.Linear(want, ws[0], x, n)
		be.Linears(got[:1], ws[:1], x, n)
		sameOpBits(t, fmt.Sprintf("n=%d new activations", n), got[0], want)
	}
}
