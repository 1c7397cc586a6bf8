//go:build amd64

package cpu

import (
	"encoding/binary"
	"math"

	"rill/engine/quant"
)

// Prefill for the K-quants on AVX-512 VNNI: gen_amd64.s's gemmK<kind>R<r>P<p>
// tiles (internal/gen/gemmk.go) over weights unpacked once per call into
// kUnit-byte units and activations in the q8kp layout (both described
// there): per output exactly the arithmetic of the AVX2 row kernels
// (kdot_amd64.s), so a row's prefill result is the bits of its decode
// result.

const (
	kUnit  = 576 // bytes of one unpacked weight super-block
	kxUnit = 640 // bytes of one super-block of one token pair in q8kp
	q8KLen = 292 // bytes of one Q8_K block
)

// kTiles is the prefill kernel of one K-quant type.
type kTiles struct {
	wb     int // bytes per weight super-block
	unpack func(u *[kUnit]byte, b []byte)
	// r4p4 ... r1p1 are the tiles (the Min kind for types with mins).
	r4p4, r4p1, r1p4, r1p1 func(w *byte, nsb int, x *byte, xstride int, out *float32, ostride int, tokens int)
}

var (
	gemmQ4_K = kTiles{144, unpackQ4_K, gemmKMinR4P4, gemmKMinR4P1, gemmKMinR1P4, gemmKMinR1P1}
	gemmQ6_K = kTiles{210, unpackQ6_K, gemmKOffR4P4, gemmKOffR4P1, gemmKOffR1P4, gemmKOffR1P1}
)

// gemmKMCRows bounds the weight rows unpacked and multiplied together with
// every group of token pairs: their unpacked super-blocks stay in L2.
const gemmKMCBytes = 384 << 10

func (g *kTiles) kernel() *gemmKernel {
	return &gemmKernel{
		minTokens: 8,
		xBytes:    func(cols, n int) int { return (n + 1) / 2 * (cols / 256) * kxUnit },
		// Each thread unpacks at most one block of rows at a time, into
		// its part of the scratch: as many units as the weights have.
		wBytes:  func(cols, rows int) int { return rows * (cols / 256) * kUnit },
		convert: convertQ8KP,
		finish:  finishQ8KP,
		run:     g.run,
	}
}

// convertQ8KP quantises activation rows [lo,hi) to Q8_K with engine/quant's
// reference (the bytes the row kernels dot) and writes them into the q8kp
// layout of n rows.
func convertQ8KP(dst []byte, src []float32, cols, n, lo, hi int) {
	nsb := cols / 256
	_ = dst[(n+1)/2*nsb*kxUnit-1]
	var blk [q8KLen]byte
	for i := lo; i < hi; i++ {
		pair := dst[(i/2)*nsb*kxUnit:]
		t := i % 2
		for sb := range nsb {
			if err := quant.Quantize(quant.Q8_K, blk[:], src[i*cols+sb*256:][:256]); err != nil {
				panic("cpu: " + err.Error()) // unreachable: whole blocks
			}
			u := pair[sb*kxUnit:][:kxUnit]
			for c := range 8 {
				copy(u[64*c+32*t:][:32], blk[4+32*c:])
			}
			copy(u[512+32*t:][:32], blk[260:292])
			d := binary.LittleEndian.Uint32(blk[0:])
			for l := range 8 {
				binary.LittleEndian.PutUint32(u[576+32*t+4*l:], d)
			}
		}
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

func (g *kTiles) run(out []float32, w []byte, rows, cols, wrb int, x []byte, n int, scratch []byte, lo, hi int) {
	nsb := cols / 256
	if nsb == 0 || lo >= hi {
		return
	}
	_ = w[hi*wrb-1]
	_ = out[(n-1)*rows+hi-1]
	npairs := (n + 1) / 2
	xstride := nsb * kxUnit
	_ = x[npairs*xstride-1]
	// This thread's part of the scratch: its rows' units.
	us := scratch[lo*nsb*kUnit : hi*nsb*kUnit]

	mc := max(4, gemmKMCBytes/(nsb*kUnit)&^3)
	for m0 := lo; m0 < hi; m0 += mc {
		m1 := min(hi, m0+mc)
		// Unpack rows [m0,m1) in panels of four (then single rows at the
		// end of the range), super-block-major within a panel.
		for r0 := m0; r0 < m1; {
			R := 4
			if r0+4 > m1 {
				R = 1
			}
			panel := us[(r0-lo)*nsb*kUnit:]
			for r := range R {
				row := w[(r0+r)*wrb:]
				for sb := range nsb {
					g.unpack((*[kUnit]byte)(panel[(sb*R+r)*kUnit:]), row[sb*g.wb:][:g.wb])
				}
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
				k(&us[(r-lo)*nsb*kUnit], nsb, xg, xstride, &og[r], rows, tokens)
			}
			for ; r < m1; r++ {
				k := g.r1p4
				if P == 1 {
					k = g.r1p1
				}
				k(&us[(r-lo)*nsb*kUnit], nsb, xg, xstride, &og[r], rows, tokens)
			}
			p0 += P
		}
	}
}

// putScaleWords writes the 32-byte pattern of 16 int16 words: a in words
// 0-7 and b in words 8-15.
func putScaleWords(p []byte, a, b int16) {
	for m := range 8 {
		binary.LittleEndian.PutUint16(p[2*m:], uint16(a))
		binary.LittleEndian.PutUint16(p[16+2*m:], uint16(b))
	}
}

func putF32(p []byte, v float32) { binary.LittleEndian.PutUint32(p, math.Float32bits(v)) }

// unpackQ4_K: quants are the nibbles (chunk c of 64 elements: low nibbles
// then high nibbles of its 32 bytes), scale words the sub-block's 6-bit
// scale, min words the 6-bit mins each twice.
func unpackQ4_K(u *[kUnit]byte, b []byte) {
	b = b[:144]
	for c := range 4 {
		qs := b[16+32*c:][:32]
		lo, hi := u[64*c:][:32], u[64*c+32:][:32]
		for l, v := range qs {
			lo[l], hi[l] = v&0x0f, v>>4
		}
	}
	sc, m := q4KScaleMins((*[12]byte)(b[4:16]))
	for s := range 8 {
		putScaleWords(u[256+32*s:], int16(sc[s]), int16(sc[s]))
		binary.LittleEndian.PutUint16(u[512+4*s:], uint16(m[s]))
		binary.LittleEndian.PutUint16(u[514+4*s:], uint16(m[s]))
	}
	putF32(u[544:], quant.F16ToF32(binary.LittleEndian.Uint16(b[0:])))
	putF32(u[548:], quant.F16ToF32(binary.LittleEndian.Uint16(b[2:])))
}

// q4KScaleMins unpacks Q4_K's (and Q5_K's) twelve scale bytes into eight
// 6-bit scales and eight 6-bit mins (engine/quant's layout).
func q4KScaleMins(p *[12]byte) (sc, m [8]uint8) {
	for j := range 4 {
		sc[j] = p[j] & 63
		m[j] = p[j+4] & 63
		sc[j+4] = p[j+8]&0x0f | (p[j]>>6)<<4
		m[j+4] = p[j+8]>>4 | (p[j+4]>>6)<<4
	}
	return sc, m
}

// unpackQ6_K: quants are the 6-bit values q (the weight is q-32) in element
// order, scale words the two 16-element scales of each 32 elements, offset
// words -32 times the sixteen scales.
func unpackQ6_K(u *[kUnit]byte, b []byte) {
	b = b[:210]
	for h := range 2 {
		ql := b[64*h:][:64]
		qh := b[128+32*h:][:32]
		o := u[128*h:][:128]
		for l := range 32 {
			hb := qh[l]
			o[l] = ql[l]&0x0f | (hb&3)<<4
			o[l+32] = ql[l+32]&0x0f | (hb>>2&3)<<4
			o[l+64] = ql[l]>>4 | (hb>>4&3)<<4
			o[l+96] = ql[l+32]>>4 | (hb>>6&3)<<4
		}
	}
	for c := range 8 {
		putScaleWords(u[256+32*c:], int16(int8(b[192+2*c])), int16(int8(b[193+2*c])))
	}
	for j := range 16 {
		binary.LittleEndian.PutUint16(u[512+2*j:], uint16(-32*int16(int8(b[192+j]))))
	}
	putF32(u[544:], quant.F16ToF32(binary.LittleEndian.Uint16(b[208:])))
	putF32(u[548:], 0)
}
