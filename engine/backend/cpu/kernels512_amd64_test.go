package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"rill/engine/quant"
	"rill/engine/tensor"
)

func needAVX512(t *testing.T) {
	t.Helper()
	if !hasAVX512 {
		t.Skip("this machine has no AVX-512 F/BW/VL/VNNI: only the AVX2 and generic kernels run here")
	}
}

// sameBitsRow fails t unless got and want are the same float32 bits.
func sameBitsRow(t *testing.T, what string, got, want float32) {
	t.Helper()
	if math.Float32bits(got) != math.Float32bits(want) {
		t.Errorf("%s: %g (%#08x), AVX2 %g (%#08x)", what, got, math.Float32bits(got), want, math.Float32bits(want))
	}
}

// TestAVX512RowsMatchAVX2 checks every AVX-512 row kernel (dot, dots, dot4,
// dots4) against the AVX2 single-row kernel, bit for bit, for every weight
// type, row lengths with every tail, raw and quantised weights and several
// kinds of activations: results must not depend on which CPU runs them.
func TestAVX512RowsMatchAVX2(t *testing.T) {
	t.Parallel()
	needAVX512(t)
	avx2, avx512 := simdKernels(), avx512Kernels()
	for _, typ := range weightTypes {
		lengths := []int{1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 63, 64, 65, 100, 203, 1000, 4103}
		if be := typ.BlockElems(); be > 1 {
			lengths = nil
			for _, nb := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33} {
				lengths = append(lengths, nb*be)
			}
		}
		for _, n := range lengths {
			for ki, kind := range activationKinds {
				t.Run(fmt.Sprintf("%s/n=%d/%s", typ, n, kind.name), func(t *testing.T) {
					t.Parallel()
					k2, k5 := avx2.rows[typ], avx512.rows[typ]
					r := newRand(t, uint64(n)<<16+uint64(typ)<<8+uint64(ki))
					const rows = 7
					rb, _ := typ.RowBytes(n)
					wStride := rb + 2*typ.BlockBytes() // rows spaced wider than they are
					w := make([]byte, (rows-1)*wStride+rb)
					for i := range rows {
						copy(w[i*wStride:], randWeights(t, r, typ, n, i%2 == 1))
					}
					row := func(i int) []byte { return w[i*wStride : i*wStride+rb] }

					// Four activation rows in each kernel's layout, with a
					// stride larger than a row.
					x2rb, x5rb := k2.xRowBytes(n), k5.xRowBytes(n)
					x2s, x5s := x2rb+8, x5rb+8
					x2, x5 := make([]byte, 3*x2s+x2rb), make([]byte, 3*x5s+x5rb)
					for i := range 4 {
						src := kind.gen(r, n)
						a, _ := activationRow(t, k2, typ, src)
						b, _ := activationRow(t, k5, typ, src)
						copy(x2[i*x2s:], a)
						copy(x5[i*x5s:], b)
					}
					want := make([][]float32, 4) // want[i][row]
					for i := range 4 {
						for rr := range rows {
							want[i] = append(want[i], k2.dot(n, row(rr), x2[i*x2s:i*x2s+x2rb]))
						}
					}

					for i := range 4 {
						xi := x5[i*x5s : i*x5s+x5rb]
						for rr := range rows {
							sameBitsRow(t, fmt.Sprintf("dot x%d w%d", i, rr), k5.dot(n, row(rr), xi), want[i][rr])
						}
						if k5.dots == nil {
							continue
						}
						out := make([]float32, rows+1)
						out[rows] = 42
						k5.dots(n, w, wStride, rows, xi, out)
						for rr := range rows {
							sameBitsRow(t, fmt.Sprintf("dots x%d w%d", i, rr), out[rr], want[i][rr])
						}
						if out[rows] != 42 {
							t.Errorf("dots wrote past %d rows", rows)
						}
					}
					const ostride = rows + 3
					out := make([]float32, 3*ostride+rows+1)
					for i := range out {
						out[i] = 42
					}
					if k5.dots4 != nil {
						k5.dots4(n, w, wStride, rows, x5, x5s, out, ostride)
					}
					for i := range 4 {
						if k5.dots4 == nil {
							break
						}
						for rr := range rows {
							sameBitsRow(t, fmt.Sprintf("dots4 x%d w%d", i, rr), out[i*ostride+rr], want[i][rr])
						}
						for rr := rows; rr < ostride && i*ostride+rr < len(out); rr++ {
							if out[i*ostride+rr] != 42 {
								t.Errorf("dots4 wrote out[%d]", i*ostride+rr)
							}
						}
					}
					if k5.dot4 == nil {
						return
					}
					o4 := make([]float32, 3*ostride+1)
					k5.dot4(n, row(1), x5, x5s, o4, ostride)
					for i := range 4 {
						sameBitsRow(t, fmt.Sprintf("dot4 x%d", i), o4[i*ostride], want[i][1])
					}
				})
			}
		}
	}
}

// TestAVX512MatMulMatchesAVX2 checks that MatMul gives the same bits on the
// AVX-512 and AVX2 kernel sets for every weight type, batch sizes around
// the four-row kernels and several thread counts.
func TestAVX512MatMulMatchesAVX2(t *testing.T) {
	t.Parallel()
	needAVX512(t)
	for _, threads := range []int{1, 2, 3} {
		b2, b5 := testBackend(t, threads, simdKernels()), testBackend(t, threads, avx512Kernels())
		for _, typ := range weightTypes {
			cols := 1024 + typ.BlockElems()*3
			if typ.BlockElems() == 1 {
				cols += 5
			}
			t.Run(fmt.Sprintf("%s/threads=%d", typ, threads), func(t *testing.T) {
				const rows = 150
				r := newRand(t, uint64(typ)+uint64(threads)<<8)
				w := tensor.Matrix{Type: typ, Rows: rows, Cols: cols, Data: randWeights(t, r, typ, rows*cols, typ != quant.Q8_0)}
				for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 13} {
					x := randFloats(r, n*cols, 2)
					o2, o5 := make([]float32, n*rows), make([]float32, n*rows)
					b2.MatMul(o2, w, x, n)
					b5.MatMul(o5, w, x, n)
					for i := range o2 {
						if math.Float32bits(o2[i]) != math.Float32bits(o5[i]) {
							t.Fatalf("n=%d, out[%d]: AVX-512 %g, AVX2 %g", n, i, o5[i], o2[i])
						}
					}
				}
			})
		}
	}
}

// q8xSpecialBlocks are activation blocks that probe the quantiser's
// corners: ties at .5 (amax 127 makes id exactly 1), values just below a
// tie, zero blocks, NaN and Inf, amax so small that d is an fp16
// subnormal or underflows to 0 in float32, and amax so large that d
// overflows fp16.
func q8xSpecialBlocks() [][32]float32 {
	var bs [][32]float32
	var ties [32]float32
	ties[0] = 127
	for i := 1; i < 32; i++ {
		ties[i] = float32(i) - 16.5
	}
	ties[31] = -126.5
	bs = append(bs, ties)
	var below [32]float32
	below[0] = -127
	for i := 1; i < 32; i++ {
		below[i] = math.Nextafter32(float32(i)+0.5, 0)
	}
	bs = append(bs, below, [32]float32{})
	var nan, inf [32]float32
	for i := range 32 {
		nan[i], inf[i] = float32(i)-3, float32(i)*0.25
	}
	nan[5], nan[17] = float32(math.NaN()), float32(-math.NaN())
	inf[9] = float32(math.Inf(-1))
	bs = append(bs, nan, inf)
	for _, scale := range []float64{1e-6, 1e-9, 1e-40, 1e-44, 1e30, 3e38} {
		var b [32]float32
		for i := range 32 {
			b[i] = float32(scale * (float64(i) - 15.3))
		}
		bs = append(bs, b)
	}
	return bs
}

// TestQ8xLayout checks the q8x activation layout, as the AVX-512
// quantiser writes it, against engine/quant's Q8_0 quantisation of the
// same values, on random rows and on q8xSpecialBlocks.
func TestQ8xLayout(t *testing.T) {
	t.Parallel()
	needAVX512(t)
	var special []float32
	for _, b := range q8xSpecialBlocks() {
		special = append(special, b[:]...)
	}
	for _, k := range []int32{128, 8} {
		for _, nb := range []int{0, 1, 3, 16, 37, -1} {
			t.Run(fmt.Sprintf("k=%d/nb=%d", k, nb), func(t *testing.T) {
				r := newRand(t, uint64(nb+1)+uint64(k)<<8)
				var src []float32
				if nb < 0 {
					src = special
				} else {
					src = randFloats(r, 32*nb, 1)
				}
				nb := len(src) / 32
				ref := make([]byte, 34*nb)
				if err := quant.Quantize(quant.Q8_0, ref, src); err != nil {
					t.Fatal(err)
				}
				dst := make([]byte, nb*q8xBlockBytes+1)
				dst[len(dst)-1] = 0x5a
				q8xConverter(k)(dst[:nb*q8xBlockBytes], src)
				if dst[len(dst)-1] != 0x5a {
					t.Fatal("wrote past the row")
				}
				scales := bytesF32(dst[64*nb : 68*nb])
				for b := range nb {
					blk := ref[34*b : 34*b+34]
					unit := dst[64*b : 64*b+64]
					for e := range 32 {
						if unit[e] != blk[2+e] {
							t.Fatalf("block %d, quant %d: %d, want %d (input %g)", b, e, int8(unit[e]), int8(blk[2+e]), src[32*b+e])
						}
					}
					for l := range 8 {
						var sum int32
						for e := 4 * l; e < 4*l+4; e++ {
							sum += int32(int8(blk[2+e]))
						}
						got := int32(binary.LittleEndian.Uint32(unit[32+4*l:]))
						if got != -k*sum {
							t.Fatalf("block %d, lane %d: correction %d, want %d", b, l, got, -k*sum)
						}
					}
					want := quant.F16ToF32(binary.LittleEndian.Uint16(blk))
					if math.Float32bits(scales[b]) != math.Float32bits(want) {
						t.Fatalf("block %d: scale %g, want %g", b, scales[b], want)
					}
				}
			})
		}
	}
}

// TestQ8pLayout checks the prefill activation layouts, q8p (Q8_0: Q8_0,
// Q4_0, Q5_0, IQ4_NL tiles) and q8p1 (Q8_1: Q4_1, Q5_1), as their
// quantisers write them, against engine/quant's quantisation of the same
// values, on random rows and q8xSpecialBlocks, for both tokens of a pair.
func TestQ8pLayout(t *testing.T) {
	t.Parallel()
	needAVX512(t)
	var special []float32
	for _, b := range q8xSpecialBlocks() {
		special = append(special, b[:]...)
	}
	for _, g := range []*gemm32Tiles{&gemmQ8_0, &gemmQ4_1} {
		ref, blk := quant.Q8_0, 34
		if g.offset {
			ref, blk = quant.Q8_1, 36
		}
		for _, src := range [][]float32{special, randFloats(newRand(t, 3), 32*37, 1)} {
			t.Run(fmt.Sprintf("%s/nb=%d", ref, len(src)/32), func(t *testing.T) {
				nb, unit := len(src)/32, g.unit()
				want := quantize(t, ref, src)
				k := g.kernel()
				both := append(append([]float32(nil), src...), src...)
				dst := make([]byte, k.xBytes(len(src), 2))
				k.convert(dst, both, len(src), 2, 0, 2)
				for b := range nb {
					wb, u := want[b*blk:(b+1)*blk], dst[b*unit:(b+1)*unit]
					qs := wb[2:]
					if g.offset {
						qs = wb[4:]
					}
					for tok := range 2 {
						var sum int32
						for e := range 32 {
							if u[32*tok+e] != qs[e] {
								t.Fatalf("block %d token %d quant %d: %d, want %d", b, tok, e, int8(u[32*tok+e]), int8(qs[e]))
							}
							sum += int32(int8(qs[e]))
						}
						for l := range 8 {
							var s4 int32
							for e := 4 * l; e < 4*l+4; e++ {
								s4 += int32(int8(qs[e]))
							}
							got := int32(binary.LittleEndian.Uint32(u[64+32*tok+4*l:]))
							if got != -int32(g.k)*s4 {
								t.Fatalf("block %d token %d lane %d: correction %d, want %d", b, tok, l, got, -int32(g.k)*s4)
							}
						}
						d := quant.F16ToF32(binary.LittleEndian.Uint16(wb))
						for l := range 8 {
							if got := math.Float32frombits(binary.LittleEndian.Uint32(u[128+32*tok+4*l:])); math.Float32bits(got) != math.Float32bits(d) {
								t.Fatalf("block %d token %d: scale %g, want %g", b, tok, got, d)
							}
						}
						if !g.offset {
							continue
						}
						s := quant.F16ToF32(binary.LittleEndian.Uint16(wb[2:]))
						for l := range 8 {
							want := float32(0)
							if l == 0 {
								want = s
							}
							if got := math.Float32frombits(binary.LittleEndian.Uint32(u[192+32*tok+4*l:])); math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("block %d token %d: s lane %d %g, want %g", b, tok, l, got, want)
							}
						}
					}
				}
			})
		}
	}
}

// TestF16Row: the activation rounding of the F16 kernels (32 at a time
// with AVX-512, then 8, then a padded tail) is quant.RoundF16 on every
// element, whatever the length.
func TestF16Row(t *testing.T) {
	r := newRand(t, 31)
	for n := 1; n <= 100; n++ {
		src := randFloats(r, n, 100)
		dst := make([]byte, 4*n)
		f16Row(dst, src)
		for i, x := range bytesF32(dst) {
			if want := quant.RoundF16(src[i]); math.Float32bits(x) != math.Float32bits(want) {
				t.Fatalf("n=%d: [%d] = %g, want %g", n, i, x, want)
			}
		}
	}
}
