//go:build amd64

package cpu

// Prefill for the K-quants on AVX-512 VNNI: gen_amd64.s's gemmK<kind>R<r>P<p>
// tiles (internal/gen/gemmk.go) over weights unpacked once per call into
// units by the row kernels' own decoders (kunpack<T>, internal/gen/kquant.go)
// and activations in the q8kp layout (described there): per output exactly
// the arithmetic of the AVX2 row kernels, so a row's prefill result is the
// bits of its decode result.

const (
	kUnit    = 576         // bytes of one unpacked weight super-block
	kSgnUnit = kUnit + 256 // the same for IQ4_XS (its signed levels follow)
	kxUnit   = 640         // bytes of one super-block of one token pair in q8kp
	q8KLen   = 292         // bytes of one Q8_K block
)

// kTiles is the prefill kernel of one K-quant type.
type kTiles struct {
	rows *kRows // the type's row kernels and unpacker
	unit int    // bytes per unpacked super-block
	// r4p4 ... r1p1 are the tiles of the type's kind (internal/gen/gemmk.go).
	r4p4, r4p1, r1p4, r1p1 func(w *byte, nsb int, x *byte, xstride int, out *float32, ostride int, tokens int)
}

var (
	gemmQ2_K   = kTiles{&q2KRows, kUnit, gemmKMinR4P4, gemmKMinR4P1, gemmKMinR1P4, gemmKMinR1P1}
	gemmQ3_K   = kTiles{&q3KRows, kUnit, gemmKOffR4P4, gemmKOffR4P1, gemmKOffR1P4, gemmKOffR1P1}
	gemmQ4_K   = kTiles{&q4KRows, kUnit, gemmKMinR4P4, gemmKMinR4P1, gemmKMinR1P4, gemmKMinR1P1}
	gemmQ5_K   = kTiles{&q5KRows, kUnit, gemmKMinR4P4, gemmKMinR4P1, gemmKMinR1P4, gemmKMinR1P1}
	gemmQ6_K   = kTiles{&q6KRows, kUnit, gemmKOffR4P4, gemmKOffR4P1, gemmKOffR1P4, gemmKOffR1P1}
	gemmIQ4_XS = kTiles{&iq4XSRows, kSgnUnit, gemmKSgnR4P4, gemmKSgnR4P1, gemmKSgnR1P4, gemmKSgnR1P1}

	kGemms = []*kTiles{&gemmQ2_K, &gemmQ3_K, &gemmQ4_K, &gemmQ5_K, &gemmQ6_K, &gemmIQ4_XS}
)

// gemmKMCBytes bounds the weight rows unpacked and multiplied together with
// every group of token pairs: their unpacked super-blocks stay in L2.
const gemmKMCBytes = 384 << 10

// mc is the number of rows of nsb super-blocks in one cache block: a
// multiple of the 4-row panels.
func (g *kTiles) mc(nsb int) int { return max(4, gemmKMCBytes/(nsb*g.unit)&^3) }

func (g *kTiles) kernel() *gemmKernel {
	return &gemmKernel{
		minTokens: 8,
		xBytes:    func(cols, n int) int { return (n + 1) / 2 * (cols / 256) * kxUnit },
		// A thread unpacks one cache block of rows at a time.
		slotBytes: func(cols int) int { return g.mc(cols/256) * (cols / 256) * g.unit },
		convert:   convertQ8KP,
		finish:    finishQ8KP,
		run:       g.run,
	}
}

// convertQ8KP quantises activation rows [lo,hi) to Q8_K (the bytes the row
// kernels dot: quantQ8KP is quantQ8K storing elsewhere) into the q8kp
// layout of n rows.
func convertQ8KP(dst []byte, src []float32, cols, n, lo, hi int) {
	nsb := cols / 256
	if nsb == 0 || lo >= hi {
		return
	}
	_ = dst[(n+1)/2*nsb*kxUnit-1]
	_ = src[hi*cols-1]
	for i := lo; i < hi; i++ {
		quantQ8KP(&dst[(i/2)*nsb*kxUnit+32*(i%2)], &src[i*cols], nsb)
	}
}

// finishQ8KP zeroes the second token of an odd batch's last pair.
func finishQ8KP(dst []byte, cols, n int) {
	if n%2 == 0 {
		return
	}
	nsb := cols / 256
	pair := dst[(n/2)*nsb*kxUnit:]
	for sb := range nsb {
		u := pair[sb*kxUnit:][:kxUnit]
		for c := range 8 {
			clear(u[64*c+32:][:32])
		}
		clear(u[544:576])
		clear(u[608:640])
	}
}

func (g *kTiles) run(out []float32, w []byte, rows, cols, wrb int, x []byte, n int, slot []byte, lo, hi int) {
	nsb := cols / 256
	if nsb == 0 || lo >= hi {
		return
	}
	_ = w[hi*wrb-1]
	_ = out[(n-1)*rows+hi-1]
	npairs := (n + 1) / 2
	xstride := nsb * kxUnit
	_ = x[npairs*xstride-1]
	unit := g.unit
	mc := g.mc(nsb)
	us := slot[:mc*nsb*unit]

	for m0 := lo; m0 < hi; m0 += mc {
		m1 := min(hi, m0+mc)
		// Unpack rows [m0,m1) in panels of four (then single rows at the
		// end of the range), super-block-major within a panel.
		for r0 := m0; r0 < m1; {
			R := 4
			if r0+4 > m1 {
				R = 1
			}
			panel := us[(r0-m0)*nsb*unit : (r0-m0+R)*nsb*unit]
			for r := range R {
				g.rows.unpack(&panel[r*unit], R*unit, &w[(r0+r)*wrb], nsb)
			}
			r0 += R
		}
		for p0 := 0; p0 < npairs; {
			P := 4
			if p0+4 > npairs {
				P = 1
			}
			tokens := min(n-2*p0, 2*P)
			xg := &x[p0*xstride]
			og := out[2*p0*rows:]
			r := m0
			for ; r+4 <= m1; r += 4 {
				k := g.r4p4
				if P == 1 {
					k = g.r4p1
				}
				k(&us[(r-m0)*nsb*unit], nsb, xg, xstride, &og[r], rows, tokens)
			}
			for ; r < m1; r++ {
				k := g.r1p4
				if P == 1 {
					k = g.r1p1
				}
				k(&us[(r-m0)*nsb*unit], nsb, xg, xstride, &og[r], rows, tokens)
			}
			p0 += P
		}
	}
}
