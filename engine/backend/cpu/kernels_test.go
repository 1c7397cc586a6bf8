package cpu

import (
	"fmt"
	"math"
	"testing"

	"rill/engine/quant"
)

func needSIMD(t *testing.T) {
	t.Helper()
	if !hasSIMD {
		t.Skip("this machine has no AVX2/FMA/F16C: only the generic kernels run here")
	}
}

// Tolerances of the row dots, against the exact float64 dot of the
// dequantised operands, in units of abs = sum |w_i*x_i| (see magnitudeRow):
//
//   - float rows of n elements: a sum of n terms, each product rounded at
//     most once, errs by at most (depth+1)*unit*abs, depth being the longest
//     chain of additions. The scalar loop may add sequentially (depth n); the
//     SIMD kernels keep at least 16 lanes, each summing n/16 terms, then
//     reduce in 5 levels and add a tail of at most 7: depth < n/16 + 13.
//   - quantised rows of nb blocks: block sums are exact integers; each block
//     adds at most 2 roundings (scale product, fused multiply-add), the
//     accumulation over blocks at most nb, the 8-lane reduction 3, and
//     dequantising the reference (Q8_K's d*q, Q4_K's d*sc*q - dmin*m, Q6_K's
//     d*sc*q) 2 more per element: (nb+8)*2*unit*abs covers it.
//
// A kernel that drops, duplicates or misplaces an element is off by about
// abs/n, beyond these bounds for all but the longest float rows, whose tails
// the short rows test.
func dotTolerance(typ quant.Type, n int, abs float64, simd bool) float64 {
	switch {
	case typ == quant.Q4_1 || typ == quant.Q5_1:
		// The offset term m*s uses Q8_1's s = d*sum(q) stored as fp16, as
		// ggml does: up to 2^-11 of each block's part of abs.
		nb := n / typ.BlockElems()
		return float64(nb+8)*2*unit*abs + 0x1p-11*abs + 1e-30
	case typ.BlockElems() > 1:
		nb := n / typ.BlockElems()
		return float64(nb+8)*2*unit*abs + 1e-30
	case simd:
		return float64(n/16+16)*unit*abs + 1e-30
	default:
		return float64(n+1)*unit*abs + 1e-30
	}
}

type dotCase struct {
	typ quant.Type
	n   int
	raw bool
}

func dotCases() []dotCase {
	var cs []dotCase
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4103} {
			cs = append(cs, dotCase{typ, n, false})
		}
	}
	for _, typ := range weightTypes[3:] {
		for _, nb := range []int{1, 2, 3, 5, 16, 33} {
			for _, raw := range []bool{false, true} {
				cs = append(cs, dotCase{typ, nb * typ.BlockElems(), raw})
			}
		}
	}
	return cs
}

// TestRowDotSIMD checks every assembly row dot against the exact dot of
// the dequantised operands and against engine/quant's scalar dot.
func TestRowDotSIMD(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	generic := genericKernels()
	for _, simd := range simdSets() {
		for i, c := range dotCases() {
			name := fmt.Sprintf("%s/%s/n=%d/raw=%v", simd.name, c.typ, c.n, c.raw)
			t.Run(name, func(t *testing.T) {
				r := newRand(t, uint64(i))
				w := randWeights(t, r, c.typ, c.n, c.raw)
				src := randFloats(r, c.n, 1)
				x, xd := activationRow(t, simd.rows[c.typ], c.typ, src)
				xg, _ := activationRow(t, generic.rows[c.typ], c.typ, src)
				wd := dequantize(t, c.typ, w, c.n)
				exact, abs := exactDot(wd, xd, magnitudeRow(t, c.typ, w, c.n))
				tolSIMD := dotTolerance(c.typ, c.n, abs, true)
				tolRef := dotTolerance(c.typ, c.n, abs, false)

				got := simd.rows[c.typ].dot(c.n, w, x)
				ref := generic.rows[c.typ].dot(c.n, w, xg)
				if d := math.Abs(float64(got) - exact); d > tolSIMD {
					t.Errorf("simd %g, exact %g: off by %g > %g", got, exact, d, tolSIMD)
				}
				if d := math.Abs(float64(ref) - exact); d > tolRef {
					t.Errorf("scalar %g, exact %g: off by %g > %g", ref, exact, d, tolRef)
				}
				if d := math.Abs(float64(got) - float64(ref)); d > tolSIMD+tolRef {
					t.Errorf("simd %g, scalar %g: off by %g > %g", got, ref, d, tolSIMD+tolRef)
				}
			})
		}
	}
}

// TestRowDot4SIMD checks the four-row kernels against the exact dots and,
// bit for bit, against the single-row kernel.
func TestRowDot4SIMD(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	for _, simd := range simdSets() {
		for _, typ := range weightTypes {
			k := simd.rows[typ]
			if k.dot4 == nil {
				continue
			}
			lengths := []int{1, 2, 7, 16}
			if typ.BlockElems() == 1 {
				lengths = []int{1, 7, 8, 9, 16, 17, 31, 64, 203}
			}
			for _, nb := range lengths {
				n := nb * typ.BlockElems()
				t.Run(fmt.Sprintf("%s/%s/n=%d", simd.name, typ, n), func(t *testing.T) {
					r := newRand(t, uint64(n)+uint64(typ)<<16)
					w := randWeights(t, r, typ, n, true)
					mag := magnitudeRow(t, typ, w, n)
					wd := dequantize(t, typ, w, n)
					// Four activation rows with a stride larger than a row, so a
					// kernel that ignores the stride reads the wrong bytes.
					xrb := k.xRowBytes(n)
					stride := xrb + 3*k.xType.BlockBytes()
					xs := make([]byte, 3*stride+xrb)
					var xd [4][]float32
					for i := range 4 {
						var xb []byte
						xb, xd[i] = activationRow(t, k, typ, randFloats(r, n, 1))
						copy(xs[i*stride:], xb)
					}
					const ostride = 5
					out := make([]float32, 3*ostride+1)
					k.dot4(n, w, xs, stride, out, ostride)
					for i := range 4 {
						xi := xs[i*stride : i*stride+xrb]
						exact, abs := exactDot(wd, xd[i], mag)
						tol := dotTolerance(typ, n, abs, true)
						if d := math.Abs(float64(out[i*ostride]) - exact); d > tol {
							t.Errorf("row %d: %g, exact %g: off by %g > %g", i, out[i*ostride], exact, d, tol)
						}
						// Bit for bit: MatMul's results must not depend on batching.
						if single := k.dot(n, w, xi); single != out[i*ostride] {
							t.Errorf("row %d: %g, single-row kernel %g", i, out[i*ostride], single)
						}
					}
				})
			}
		}
	}
}

// TestGenericKernelsComplete checks that both kernel sets handle every
// supported weight type.
func TestGenericKernelsComplete(t *testing.T) {
	t.Parallel()
	for _, ks := range []*kernelSet{genericKernels(), simdKernels(), avx512Kernels()} {
		for _, typ := range weightTypes {
			k := ks.rows[typ]
			xt, _ := quant.VecDotType(typ)
			layoutOK := k.xType == xt || ks.name != "generic" && k.xType == quant.F32 && (typ == quant.F16 || typ == quant.BF16)
			if k.dot == nil || !layoutOK || (k.convert == nil) != (typ == quant.F32) {
				t.Errorf("%s kernels, %s: incomplete: %+v", ks.name, typ, k)
			}
		}
	}
}

// TestRowDotsSIMD checks the many-row float kernels against the single-row
// ones, on rows spaced wider than they are and of every tail length.
func TestRowDotsSIMD(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	for _, simd := range simdSets() {
		for _, typ := range weightTypes {
			k := simd.rows[typ]
			if k.dots == nil {
				continue
			}
			lengths := []int{0, 1, 7, 8, 9, 31, 64, 203}
			if typ.BlockElems() > 1 {
				lengths = []int{0, 1, 2, 3, 4, 5, 9}
				for i := range lengths {
					lengths[i] *= typ.BlockElems()
				}
			}
			for _, n := range lengths {
				for _, rows := range []int{1, 5} {
					t.Run(fmt.Sprintf("%s/%s/n=%d/rows=%d", simd.name, typ, n, rows), func(t *testing.T) {
						r := newRand(t, uint64(n*10+rows))
						rb, _ := typ.RowBytes(n)
						stride := rb + 6
						w := make([]byte, (rows-1)*stride+rb)
						for i := range rows {
							copy(w[i*stride:], randWeights(t, r, typ, n, false))
						}
						x, _ := activationRow(t, k, typ, randFloats(r, n, 1))
						out := make([]float32, rows+1)
						out[rows] = 42
						k.dots(n, w, stride, rows, x, out)
						for i := range rows {
							if want := k.dot(n, w[i*stride:i*stride+rb], x); out[i] != want {
								t.Errorf("row %d: %g, single-row kernel %g", i, out[i], want)
							}
						}
						if out[rows] != 42 {
							t.Errorf("wrote past %d rows", rows)
						}
					})
				}
			}
		}
	}
}
