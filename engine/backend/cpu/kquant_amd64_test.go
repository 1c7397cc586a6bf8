//go:build amd64

package cpu

import (
	"fmt"
	"math"
	"testing"

	"rill/engine/quant"
)

// q8KSpecialRows are super-blocks that probe the Q8_K quantiser's corners:
// each of q8xSpecialBlocks' blocks (ties, zeros, NaN, Inf, tiny and huge
// scales) repeated to fill a super-block, a super-block whose largest magnitude occurs
// first as a negative and then as a positive value (m must be the first),
// and one that is all zeros but for a NaN.
func q8KSpecialRows() []float32 {
	var v []float32
	for _, b := range q8xSpecialBlocks() {
		for range 8 {
			v = append(v, b[:]...)
		}
	}
	var sign [256]float32
	for i := range sign {
		sign[i] = float32(i%50) - 25.5
	}
	sign[10], sign[200] = -100, 100
	v = append(v, sign[:]...)
	var nan [256]float32
	nan[7] = float32(math.NaN())
	return append(v, nan[:]...)
}

// TestQ8KQuantiser checks the assembly Q8_K quantiser, in the Q8_K layout
// the row kernels read and in the q8kp layout of the prefill tiles, byte
// for byte against engine/quant's reference.
func TestQ8KQuantiser(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	rows := map[string][]float32{"special": q8KSpecialRows()}
	for ki, kind := range activationKinds {
		rows[kind.name] = kind.gen(newRand(t, uint64(ki)), 7*256)
	}
	for name, src := range rows {
		t.Run(name, func(t *testing.T) {
			nsb := len(src) / 256
			want := quantize(t, quant.Q8_K, src)
			got := make([]byte, len(want)+1)
			got[len(want)] = 0x5a
			q8KRow(got[:len(want)], src)
			if got[len(want)] != 0x5a {
				t.Fatal("wrote past the row")
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("byte %d (block %d, offset %d): %#x, want %#x", i, i/q8KLen, i%q8KLen, got[i], want[i])
				}
			}
			// Both tokens of a pair, from garbage.
			pair := make([]byte, nsb*kxUnit)
			for i := range pair {
				pair[i] = 0xa5
			}
			for tok := range 2 {
				convertQ8KP(pair, append(append([]float32(nil), src...), src...), len(src), 2, tok, tok+1)
			}
			for sb := range nsb {
				blk, u := want[sb*q8KLen:(sb+1)*q8KLen], pair[sb*kxUnit:(sb+1)*kxUnit]
				for tok := range 2 {
					for c := range 8 {
						for l := range 32 {
							if g, w := u[64*c+32*tok+l], blk[4+32*c+l]; g != w {
								t.Fatalf("block %d token %d quant %d: %#x, want %#x", sb, tok, 32*c+l, g, w)
							}
						}
					}
					for b := range 32 {
						if g, w := u[512+32*tok+b], blk[260+b]; g != w {
							t.Fatalf("block %d token %d bsums byte %d: %#x, want %#x", sb, tok, b, g, w)
						}
					}
					for l := range 8 {
						for b := range 4 {
							if g, w := u[576+32*tok+4*l+b], blk[b]; g != w {
								t.Fatalf("block %d token %d scale copy %d: %#x, want %#x", sb, tok, l, g, w)
							}
						}
					}
				}
			}
		})
	}
}

// TestKRowsOnSpecialActivations checks the K-quant row kernels against
// engine/quant's scalar dots on the quantiser's corner cases, one
// super-block at a time, within the tolerance of TestRowDotSIMD (the scalar
// dots add in ggml's order, the kernels in their own); where the reference
// is not finite (an Inf activation makes d infinite) the kernel must give
// the same class of value.
func TestKRowsOnSpecialActivations(t *testing.T) {
	t.Parallel()
	needSIMD(t)
	src := q8KSpecialRows()
	x := quantize(t, quant.Q8_K, src)
	generic := genericKernels()
	for _, k := range kFamily {
		t.Run(fmt.Sprint(k.typ), func(t *testing.T) {
			r := newRand(t, uint64(k.typ))
			finite := 0
			for sb := range len(src) / 256 {
				w := randWeights(t, r, k.typ, 256, sb%2 == 0)
				xb := x[sb*q8KLen : (sb+1)*q8KLen]
				want := generic.rows[k.typ].dot(256, w, xb)
				got := k.dot(256, w, xb)
				if math.IsNaN(float64(want)) || math.IsInf(float64(want), 0) {
					if math.IsNaN(float64(want)) != math.IsNaN(float64(got)) || math.IsInf(float64(want), 1) != math.IsInf(float64(got), 1) {
						t.Errorf("block %d: simd %g, scalar %g", sb, got, want)
					}
					continue
				}
				finite++
				wd := dequantize(t, k.typ, w, 256)
				xd := dequantize(t, quant.Q8_K, xb, 256)
				_, abs := exactDot(wd, xd, magnitudeRow(t, k.typ, w, 256))
				tol := 2 * dotTolerance(k.typ, 256, abs, true)
				if d := math.Abs(float64(got - want)); d > tol {
					t.Errorf("block %d: simd %g, scalar %g: off by %g > %g", sb, got, want, d, tol)
				}
			}
			if finite < 3 {
				t.Fatalf("only %d blocks with a finite reference", finite)
			}
		})
	}
}
