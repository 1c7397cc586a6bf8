package cpu

import (
	"fmt"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// benchMatrix returns a rows x cols matrix of type typ: one random row
// repeated, so building it is cheap while the memory read per product is
// that of distinct rows.
func benchMatrix(b *testing.B, typ quant.Type, rows, cols int) tensor.Matrix {
	b.Helper()
	row := randWeights(b, newRand(b, uint64(typ)), typ, cols, false)
	data := make([]byte, 0, rows*len(row))
	for range rows {
		data = append(data, row...)
	}
	return tensor.Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
}

// BenchmarkMatMul multiplies a 4096x4096 matrix of each type with n = 1 and
// n = 8 activation rows. SetBytes is the weight bytes read per product, so
// the MB/s column is the effective weight bandwidth (decode is bound by it).
func BenchmarkMatMul(b *testing.B) {
	const dim = 4096
	for _, ks := range kernelSets() {
		for _, typ := range weightTypes {
			w := benchMatrix(b, typ, dim, dim)
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/n=%d", ks.name, typ, n), func(b *testing.B) {
					be := testBackend(b, 0, ks)
					x := randFloats(newRand(b, 2), n*dim, 1)
					out := make([]float32, n*dim)
					be.MatMul(out, w, x, n)
					b.SetBytes(int64(len(w.Data)))
					b.ResetTimer()
					for b.Loop() {
						be.MatMul(out, w, x, n)
					}
				})
			}
		}
	}
}

// BenchmarkParallelDispatch measures the overhead of one Parallel call whose
// ranges do almost nothing: waking (or finding spinning) workers, claiming
// ranges and waiting for them.
func BenchmarkParallelDispatch(b *testing.B) {
	for _, threads := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			be := New(Options{Threads: threads})
			defer be.Close()
			var sink [64]int64
			fn := func(lo, hi int) { sink[lo%64] += int64(hi - lo) }
			for b.Loop() {
				be.Parallel(threads*4, fn)
			}
		})
	}
}

// BenchmarkVec measures the vector kernels on typical row lengths.
func BenchmarkVec(b *testing.B) {
	r := newRand(b, 9)
	x, y, w := randFloats(r, 11008, 1), randFloats(r, 11008, 1), randFloats(r, 11008, 1)
	q := randFloats(r, 32*128, 1)
	b.Run("DotF32/128", func(b *testing.B) {
		for b.Loop() {
			_ = DotF32(x[:128], y[:128])
		}
	})
	b.Run("DotF32/4096", func(b *testing.B) {
		b.SetBytes(2 * 4 * 4096)
		for b.Loop() {
			_ = DotF32(x[:4096], y[:4096])
		}
	})
	b.Run("RMSNorm/4096", func(b *testing.B) {
		for b.Loop() {
			RMSNorm(y[:4096], x[:4096], w[:4096], 1e-5)
		}
	})
	b.Run("SwiGLU/11008", func(b *testing.B) {
		for b.Loop() {
			SwiGLU(y, x, w)
		}
	})
	b.Run("RoPE/32x128", func(b *testing.B) {
		for b.Loop() {
			RoPE(q, 32, 128, 128, 1234, 10000, 1, true)
		}
	})
}

// BenchmarkRowDot measures one row kernel on a 4096-element row that stays
// in L1/L2 cache: the compute cost of the kernel, without memory traffic.
// The x4 variants dot one weight row with four activation rows; their ns/op
// is for all four.
func BenchmarkRowDot(b *testing.B) {
	const n = 4096
	for _, ks := range kernelSets() {
		for _, typ := range weightTypes {
			k := ks.rows[typ]
			r := newRand(b, 5)
			w := randWeights(b, r, typ, n, false)
			var xs []byte
			var xrb int
			for range 4 {
				xb, _ := activationRow(b, k, typ, randFloats(r, n, 1))
				xs, xrb = append(xs, xb...), len(xb)
			}
			b.Run(fmt.Sprintf("%s/%s/x1", ks.name, typ), func(b *testing.B) {
				for b.Loop() {
					_ = k.dot(n, w, xs[:xrb])
				}
			})
			if k.dot4 != nil {
				out := make([]float32, 4)
				b.Run(fmt.Sprintf("%s/%s/x4", ks.name, typ), func(b *testing.B) {
					for b.Loop() {
						k.dot4(n, w, xs, xrb, out, 1)
					}
				})
			}
		}
	}
}

// BenchmarkMatMulTiny multiplies the matrix shapes of the tiny real models
// (stories260K: F32, 64 wide; llama-2-tiny-random: F16, 8 wide with a
// 32000-row output), where per-row and per-call overheads dominate.
func BenchmarkMatMulTiny(b *testing.B) {
	shapes := []struct {
		typ        quant.Type
		rows, cols int
	}{
		{quant.F32, 64, 64}, {quant.F32, 172, 64}, {quant.F32, 64, 172}, {quant.F32, 512, 64},
		{quant.F16, 32, 8}, {quant.F16, 8, 32}, {quant.F16, 32000, 8},
	}
	for _, ks := range kernelSets() {
		for _, s := range shapes {
			w := benchMatrix(b, s.typ, s.rows, s.cols)
			b.Run(fmt.Sprintf("%s/%s/%dx%d", ks.name, s.typ, s.rows, s.cols), func(b *testing.B) {
				be := testBackend(b, 2, ks)
				x := randFloats(newRand(b, 2), s.cols, 1)
				out := make([]float32, s.rows)
				for b.Loop() {
					be.MatMul(out, w, x, 1)
				}
			})
		}
	}
}

// BenchmarkMatMulDRAM multiplies one activation row (decode) or eight
// (batched decode) with a sequence of distinct 2816x1024 matrices, 256 MiB
// of weights in all, as a decode step of a 245M-parameter model does: the
// weights come from memory, not cache, so MB/s is the weight bandwidth a
// decode step gets from MatMul alone (compare with the machine's read
// bandwidth).
func BenchmarkMatMulDRAM(b *testing.B) {
	const rows, cols, total = 2816, 1024, 256 << 20
	if !hasSIMD {
		b.Skip("no assembly kernels on this machine")
	}
	for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q4_0} {
		one := benchMatrix(b, typ, rows, cols)
		ms := make([]tensor.Matrix, max(1, total/len(one.Data)))
		for i := range ms {
			ms[i] = one
			ms[i].Data = append([]byte(nil), one.Data...)
		}
		for _, ks := range kernelSets()[1:] {
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/n=%d", ks.name, typ, n), func(b *testing.B) {
					be := testBackend(b, 0, ks)
					x := randFloats(newRand(b, 2), n*cols, 1)
					out := make([]float32, n*rows)
					b.SetBytes(int64(len(ms) * len(one.Data)))
					for b.Loop() {
						for _, m := range ms {
							be.MatMul(out, m, x, n)
						}
					}
				})
			}
		}
	}
}

// BenchmarkPrefill multiplies the 245M benchmark model's feed-forward
// matrices (2816x1024 and 1024x2816) with 494 activation rows, llama.cpp's
// prompt-processing shape, on one thread: path=gemm is the prefill kernel,
// path=rows the same kernel set without it (the batched row kernels), for
// a same-run ratio. The MMAC/s metric is multiply-adds per second.
// prefillPath is one way BenchmarkPrefill multiplies: a kernel set, and
// whether the matrix is prepared (packed) first.
type prefillPath struct {
	name    string
	ks      *kernelSet
	prepare bool
}

func BenchmarkPrefill(b *testing.B) {
	const n = 494
	for _, ks := range simdSets() {
		for _, typ := range weightTypes {
			if ks.rows[typ].gemm == nil {
				continue
			}
			rowsOnly := *ks
			rowsOnly.rows[typ].gemm = nil
			for _, shape := range [][2]int{{2816, 1024}, {1024, 2816}} {
				w := benchMatrix(b, typ, shape[0], shape[1])
				x := randFloats(newRand(b, 2), n*shape[1], 1)
				out := make([]float32, n*shape[0])
				paths := []prefillPath{{"gemm", ks, false}, {"rows", &rowsOnly, false}}
				if ks.rows[typ].pack != nil {
					paths = append(paths, prefillPath{"packed", ks, true})
				}
				for _, path := range paths {
					b.Run(fmt.Sprintf("%s/%s/%dx%d/path=%s", ks.name, typ, shape[0], shape[1], path.name), func(b *testing.B) {
						be := testBackend(b, 1, path.ks)
						if path.prepare {
							be.Prepare([]tensor.Matrix{tensor.Matrix(w)})
						}
						be.MatMul(out, w, x, n)
						b.ResetTimer()
						for b.Loop() {
							be.MatMul(out, w, x, n)
						}
						b.ReportMetric(float64(n*shape[0]*shape[1])*float64(b.N)/b.Elapsed().Seconds()/1e6, "MMAC/s")
					})
				}
			}
		}
	}
}

// BenchmarkPrepare measures the one-time repacking of a model's weights
// (Backend.Prepare) for the types that have a packed layout, in MB/s of
// the original weights.
func BenchmarkPrepare(b *testing.B) {
	for _, ks := range simdSets() {
		for _, typ := range weightTypes {
			if ks.rows[typ].pack == nil {
				continue
			}
			w := benchMatrix(b, typ, 2816, 1024)
			b.Run(fmt.Sprintf("%s/%s/2816x1024", ks.name, typ), func(b *testing.B) {
				be := testBackend(b, 2, ks)
				for b.Loop() {
					be.packed = nil // forget the last copy: pack again
					be.Prepare([]tensor.Matrix{tensor.Matrix(w)})
				}
				b.ReportMetric(float64(len(w.Data))*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
			})
		}
	}
}

// BenchmarkPackedHalf multiplies prepared F16 and BF16 matrices on one
// thread with 1 (decode) to 512 activation rows (prefill), on each kernel
// set with a packed path for them (avx512: float32 FMA tiles; avx512bf16:
// bf16 dot products), for same-run ratios. MMAC/s is multiply-adds per
// second. The dram cases multiply 256 MiB of distinct prepared 2816x1024
// matrices, as a decode step of a 245M model reads them, on all threads:
// MB/s is the weight bandwidth decode gets.
func BenchmarkPackedHalf(b *testing.B) {
	for _, ks := range simdSets() {
		for _, typ := range []quant.Type{quant.F16, quant.BF16} {
			if ks.rows[typ].pack == nil {
				continue
			}
			for _, shape := range [][2]int{{1024, 1024}, {4096, 1024}, {1024, 4096}} {
				rows, cols := shape[0], shape[1]
				w := benchMatrix(b, typ, rows, cols)
				for _, n := range []int{1, 64, 128, 256, 512} {
					b.Run(fmt.Sprintf("%s/%s/%dx%d/T=%d", ks.name, typ, rows, cols, n), func(b *testing.B) {
						be := testBackend(b, 1, ks)
						be.Prepare([]tensor.Matrix{w})
						x := randFloats(newRand(b, 2), n*cols, 1)
						out := make([]float32, n*rows)
						be.MatMul(out, w, x, n)
						b.ResetTimer()
						for b.Loop() {
							be.MatMul(out, w, x, n)
						}
						b.ReportMetric(float64(n*rows*cols)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MMAC/s")
					})
				}
			}
			const rows, cols, total = 2816, 1024, 256 << 20
			ms := make([]tensor.Matrix, total/(2*rows*cols))
			for i := range ms {
				ms[i] = benchMatrix(b, typ, rows, cols)
			}
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/dram/T=%d", ks.name, typ, n), func(b *testing.B) {
					be := testBackend(b, 0, ks)
					be.Prepare(ms)
					x := randFloats(newRand(b, 2), n*cols, 1)
					out := make([]float32, n*rows)
					b.SetBytes(int64(len(ms) * 2 * rows * cols))
					for b.Loop() {
						for _, m := range ms {
							be.MatMul(out, m, x, n)
						}
					}
				})
			}
		}
	}
}
