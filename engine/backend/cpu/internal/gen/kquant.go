package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The K-quant family (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS: 256-element
// super-blocks dotted with Q8_K activations) with AVX2: for every type a
// decoder of its super-block into the common unit below, and from it three
// kernels:
//
//	kdot<T>(w, x *byte, nb int) float32
//	    one weight row with one Q8_K activation row (decode);
//	kdot4<T>(w, x *byte, xstride, nb int, out *float32, ostride int)
//	    one weight row with four activation rows (batched decode);
//	kunpack<T>(dst *byte, dstride int, src *byte, nsb int)
//	    the units of nsb super-blocks, dstride bytes apart, for the
//	    AVX-512 prefill tiles (gemmk.go).
//
// The unit of a super-block (kUnit bytes; kSgnUnit for IQ4_XS):
//
//	+0    256 unsigned quants u in element order: the operand of
//	      VPMADDUBSW (Q2_K: q; Q3_K: q+4*hbit; Q4_K: q; Q5_K: q with its
//	      fifth bit; Q6_K: q; IQ4_XS: |level|)
//	+256  8 x 32 bytes: per 32 elements, 16 int16 scale words, word m for
//	      elements 2m and 2m+1 (one sub-block scale 16 times, or two
//	      16-element scales 8 times each)
//	+512  16 int16 words against Q8_K's 16 bsums: the mins (Q4_K, Q5_K:
//	      each twice; Q2_K: each once), or -offset*scale for the types
//	      whose u is the weight plus an offset (Q3_K: 4, Q6_K: 32)
//	+544  float32 d, float32 dmin (0 for the types without mins)
//	+576  IQ4_XS only: the 256 signed levels (their signs go to the
//	      activations before VPMADDUBSW: |w|*(sign(w)*x))
//
// Per super-block and activation row the kernels compute 8 int32 lanes,
// lane l = sum over chunks c (32 elements) of the scale-weighted products of
// elements 32c+4l..32c+4l+3 (VPMADDUBSW, then VPMADDWD with the scale
// words), started from bsums . offset words for the offset types; then
// acc = fma(float(lanes), d*dx, acc), and for the types with mins
// acc = acc - float(bsums . min words)*(dmin*dx); at the end the 8 lanes
// are added as HSUMPS does. Integer lanes are exact whatever the order of
// their additions, so every kernel that follows these float steps (the
// AVX-512 tiles included) gives the same bits for the same row.

const (
	kSgnUnit = kUnit + 256
	q8KBytes = 292 // float32 d, int8 qs[256], int16 bsums[16]
)

// kKind is how a K-quant type's integer lanes start and end.
type kKind int

const (
	kMin kKind = iota // lanes from 0; mins subtracted in float
	kOff              // lanes from bsums . offset words
	kSgn              // lanes from 0; signed levels (IQ4_XS)
)

// kquant describes one K-quant type to the generators. prep and chunk read
// the super-block at RSI.
type kquant struct {
	name  string
	bytes int
	kind  kKind
	// consts loads the constant registers chunk and words use (Y13-Y15).
	consts func()
	// words leaves the block's int16 scale words in Y4 (8 in X4, one per
	// 32 elements; or 16 when scales16, one per 16 elements) and, for kMin
	// and kOff, the 16 words against the bsums in Y8. It may use AX, BX,
	// DX, R8, R12, R13 and Y5-Y7, Y9-Y12.
	words    func()
	scales16 bool
	// d is the fp16 d (then dmin, when withMin) in the block.
	d       int
	withMin bool
	// chunk sets y to the unsigned quants of elements 32c..32c+31 (for
	// kSgn, s to the signed levels). It may use Y11.
	chunk func(c int, y, s VecPhysical)
	// pairZ sets z to the unsigned quants of elements 64j..64j+63 (chunks
	// 2j and 2j+1 in its two halves; for kSgn, s to the signed levels), with
	// AVX-512 and the constants of constsZ. It may use Z7.
	pairZ   func(j int, z, s VecPhysical)
	constsZ func()
}

// prep writes the unit's scale part (+256 to +551) through u (unit offset
// to memory): the scale patterns, the bsum words and d, dmin. It may use
// AX, BX, DX, R8, R12, R13 and Y4-Y12.
func (q kquant) prep(u func(int) Mem) {
	q.words()
	if q.kind != kSgn {
		VMOVDQU(Y8, u(512))
	}
	if q.scales16 {
		pairPatterns(Y4, u)
	} else {
		VINSERTI128(U8(1), X4, Y4, Y4)
		wordPatterns(Y4, u)
	}
	halfPair(Mem{Base: RSI, Disp: q.d}, q.withMin, u)
}

// halves sets x to [d, dmin] (dmin 0 without mins) as float32.
func (q kquant) halves(x VecPhysical) {
	if q.withMin {
		MOVL(Mem{Base: RSI, Disp: q.d}, EAX)
	} else {
		MOVWLZX(Mem{Base: RSI, Disp: q.d}, EAX)
	}
	VMOVD(EAX, x)
	VCVTPH2PS(x, x)
}

// Constant data of the K-quant kernels.
var (
	kWordBcast Mem // 8 x 32 bytes: VPSHUFB controls, word s into every word of both lanes
	kPairBcast Mem // 4 x 32 bytes: word 2k into every word of the low lane, 2k+1 of the high
	kIQ4Levels Mem // IQ4_NL's 16 levels, in both lanes
	kIQ4Shift  Mem // 8 words 2^(14-2s): moves bits 2s, 2s+1 of a word to 14, 15
	kWords32   Mem // 16 words of 32
	kQ8KPerm   Mem // VPERMD order of packed quants: dwords 0,4,1,5,2,6,3,7
	kOnes      Mem // 32 bytes of 1, then 16 words of 1
)

func kquantData() {
	kWordBcast = GLOBL("kwordbcast", RODATA|NOPTR)
	for s := 0; s < 8; s++ {
		for i := 0; i < 4; i++ {
			b := uint64(2*s) | uint64(2*s+1)<<8
			DATA(32*s+8*i, U64(b*0x0001000100010001))
		}
	}
	kPairBcast = GLOBL("kpairbcast", RODATA|NOPTR)
	for k := 0; k < 4; k++ {
		for i := 0; i < 4; i++ {
			w := 2 * k
			if i >= 2 {
				w++
			}
			b := uint64(2*w) | uint64(2*w+1)<<8
			DATA(32*k+8*i, U64(b*0x0001000100010001))
		}
	}
	kIQ4Levels = GLOBL("kiq4levels", RODATA|NOPTR)
	levels := []int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	for h := 0; h < 2; h++ {
		for i := 0; i < 2; i++ {
			var v uint64
			for j := 0; j < 8; j++ {
				v |= uint64(uint8(levels[8*i+j])) << (8 * j)
			}
			DATA(16*h+8*i, U64(v))
		}
	}
	kIQ4Shift = GLOBL("kiq4shift", RODATA|NOPTR)
	for i := 0; i < 2; i++ {
		var v uint64
		for j := 0; j < 4; j++ {
			s := 4*i + j
			v |= uint64(1<<(14-2*s)) << (16 * j)
		}
		DATA(8*i, U64(v))
	}
	kWords32 = GLOBL("kwords32", RODATA|NOPTR)
	for i := 0; i < 4; i++ {
		DATA(8*i, U64(0x0020002000200020))
	}
	kQ8KPerm = GLOBL("kq8kperm", RODATA|NOPTR)
	for i, v := range []uint64{0 | 4<<32, 1 | 5<<32, 2 | 6<<32, 3 | 7<<32} {
		DATA(8*i, U64(v))
	}
	kOnes = GLOBL("kones", RODATA|NOPTR)
	for i := 0; i < 4; i++ {
		DATA(8*i, U64(0x0101010101010101))
	}
	for i := 0; i < 4; i++ {
		DATA(32+8*i, U64(0x0001000100010001))
	}
}

// bcastByteY sets y to 32 copies of b.
func bcastByteY(b byte, y VecPhysical) {
	MOVL(U32(uint32(b)*0x01010101), EAX)
	VMOVD(EAX, y.AsX())
	VPBROADCASTD(y.AsX(), y)
}

// halfPair stores the fp16 word(s) at m (one, or two when both) converted
// to float32 at u(544) and u(548) (0 where there is no second).
func halfPair(m Mem, both bool, u func(int) Mem) {
	if both {
		MOVL(m, EAX)
	} else {
		MOVWLZX(m, EAX)
	}
	VMOVD(EAX, X4)
	VCVTPH2PS(X4, X4)
	VMOVQ(X4, u(544))
}

// wordPatterns writes the 8 scale patterns of a type with one scale per 32
// elements: y holds the 8 int16 scales in both lanes.
func wordPatterns(y VecPhysical, u func(int) Mem) {
	for s := 0; s < 8; s++ {
		VPSHUFB(kWordBcast.Offset(32*s), y, Y5)
		VMOVDQU(Y5, u(256+32*s))
	}
}

// pairPatterns writes the 8 scale patterns of a type with 16-element
// scales: y holds the 16 int16 scales.
func pairPatterns(y VecPhysical, u func(int) Mem) {
	VINSERTI128(U8(1), y.AsX(), y, Y6)
	VPERM2I128(U8(0x11), y, y, Y7)
	for c := 0; c < 8; c++ {
		src := Y6
		if c >= 4 {
			src = Y7
		}
		VPSHUFB(kPairBcast.Offset(32*(c%4)), src, Y5)
		VMOVDQU(Y5, u(256+32*c))
	}
}

// q4kScaleMins leaves Q4_K's (and Q5_K's) eight 6-bit scales in AX and
// eight 6-bit mins in R8, one per byte, from the 12 bytes at 4(SI): with
// u0, u1, u2 their little-endian words, scales 0-3 are u0&0x3f (per byte),
// mins 0-3 u1&0x3f, scales 4-7 (u2&0xf) | (u0>>6&3)<<4, mins 4-7
// (u2>>4&0xf) | (u1>>6&3)<<4.
func q4kScaleMins() {
	MOVL(Mem{Base: RSI, Disp: 4}, R8L)
	MOVL(Mem{Base: RSI, Disp: 8}, R12L)
	MOVL(Mem{Base: RSI, Disp: 12}, R13L)
	MOVL(R8L, EAX)
	ANDL(U32(0x3f3f3f3f), EAX)
	MOVL(R13L, EBX)
	ANDL(U32(0x0f0f0f0f), EBX)
	MOVL(R8L, EDX)
	SHRL(U8(6), EDX)
	ANDL(U32(0x03030303), EDX)
	SHLL(U8(4), EDX)
	ORL(EDX, EBX)
	SHLQ(U8(32), RBX)
	ORQ(RBX, RAX)
	MOVL(R12L, R8L)
	ANDL(U32(0x3f3f3f3f), R8L)
	MOVL(R13L, EBX)
	SHRL(U8(4), EBX)
	ANDL(U32(0x0f0f0f0f), EBX)
	MOVL(R12L, EDX)
	SHRL(U8(6), EDX)
	ANDL(U32(0x03030303), EDX)
	SHLL(U8(4), EDX)
	ORL(EDX, EBX)
	SHLQ(U8(32), RBX)
	ORQ(RBX, R8)
}

// wordsQ4K is the scale part of Q4_K and Q5_K (the same header): the 8
// scales, and the 8 mins each twice against the bsums.
func wordsQ4K() {
	q4kScaleMins()
	VMOVQ(RAX, X4)
	VPMOVZXBW(X4, X4)
	VMOVQ(R8, X5)
	VPMOVZXBW(X5, X5)
	VPUNPCKLWD(X5, X5, X6)
	VPUNPCKHWD(X5, X5, X7)
	VINSERTI128(U8(1), X7, Y6, Y8)
}

// offsetWords sets Y8 to -k*scale for the 16 int16 scales in y.
func offsetWords(y VecPhysical, shift int) {
	VPSLLW(U8(shift), y, Y5)
	VPXOR(Y8, Y8, Y8)
	VPSUBW(Y5, Y8, Y8)
}

// shiftBytes shifts the bytes of t (as words) so that bit from of each byte
// lands on bit to; the bits that cross into a neighbouring byte land
// outside the mask the caller applies next.
func shiftBytes(t VecPhysical, from, to int) {
	switch {
	case from < to:
		VPSLLW(U8(to-from), t, t)
	case from > to:
		VPSRLW(U8(from-to), t, t)
	}
}

var kquants = []kquant{
	{
		name: "Q4_K", bytes: 144, kind: kMin,
		consts: func() { bcastByteY(0x0f, Y15) },
		words:  wordsQ4K, d: 0, withMin: true,
		chunk: func(c int, y, _ VecPhysical) {
			VMOVDQU(Mem{Base: RSI, Disp: 16 + 32*(c/2)}, y)
			if c%2 == 1 {
				VPSRLW(U8(4), y, y)
			}
			VPAND(Y15, y, y)
		},
	},
	{
		// Q5_K: Q4_K's header, then qh[32] at 16 and the nibbles at 48;
		// element 32c+l has bit c of qh[l] as its bit 4.
		name: "Q5_K", bytes: 176, kind: kMin,
		consts: func() { bcastByteY(0x0f, Y15); bcastByteY(0x10, Y14) },
		words:  wordsQ4K, d: 0, withMin: true,
		chunk: func(c int, y, _ VecPhysical) {
			VMOVDQU(Mem{Base: RSI, Disp: 48 + 32*(c/2)}, y)
			if c%2 == 1 {
				VPSRLW(U8(4), y, y)
			}
			VPAND(Y15, y, y)
			VMOVDQU(Mem{Base: RSI, Disp: 16}, Y11)
			shiftBytes(Y11, c, 4)
			VPAND(Y14, Y11, Y11)
			VPOR(Y11, y, y)
		},
	},
	{
		// Q6_K: ql[128], qh[64], int8 scales[16], fp16 d. Element
		// 128h+32k+l has the low (k<2) or high nibble of ql[64h+32(k&1)+l]
		// and bits 2k, 2k+1 of qh[32h+l] as bits 4, 5; the weight is q-32.
		name: "Q6_K", bytes: 210, kind: kOff,
		consts: func() { bcastByteY(0x0f, Y15); bcastByteY(0x30, Y14) },
		words: func() {
			VPMOVSXBW(Mem{Base: RSI, Disp: 192}, Y4)
			offsetWords(Y4, 5)
		},
		scales16: true, d: 208,
		chunk: func(c int, y, _ VecPhysical) {
			h, k := c/4, c%4
			VMOVDQU(Mem{Base: RSI, Disp: 64*h + 32*(k&1)}, y)
			if k >= 2 {
				VPSRLW(U8(4), y, y)
			}
			VPAND(Y15, y, y)
			VMOVDQU(Mem{Base: RSI, Disp: 128 + 32*h}, Y11)
			shiftBytes(Y11, 2*k, 4)
			VPAND(Y14, Y11, Y11)
			VPOR(Y11, y, y)
		},
	},
	{
		// Q3_K: hmask[32], qs[64], scales[12], fp16 d. Element 128h+32p+l
		// has q = qs[32h+l]>>2p & 3 and hbit = bit 4h+p of hmask[l]; the
		// weight is (sc-32)*(q+4*hbit-4), sc from 16 6-bit scales.
		name: "Q3_K", bytes: 110, kind: kOff,
		consts:   func() { bcastByteY(0x03, Y15); bcastByteY(0x04, Y14) },
		scales16: true, d: 108,
		words: func() {
			// The 16 scales, one per byte (ggml's aux shuffle of the three
			// words a0, a1, t of the 12 bytes): bytes 0-3 a0&0xf | (t&3)<<4,
			// 4-7 a1&0xf | (t>>2&3)<<4, 8-11 a0>>4&0xf | (t>>4&3)<<4,
			// 12-15 a1>>4&0xf | (t>>6&3)<<4.
			MOVL(Mem{Base: RSI, Disp: 96}, EAX)
			MOVL(Mem{Base: RSI, Disp: 100}, EBX)
			MOVL(Mem{Base: RSI, Disp: 104}, EDX)
			lowHigh := func(src GPPhysical, nib, tshift int, dst GPPhysical) {
				MOVL(src.As32(), dst.As32())
				if nib > 0 {
					SHRL(U8(nib), dst.As32())
				}
				ANDL(U32(0x0f0f0f0f), dst.As32())
				MOVL(EDX, R13L)
				if tshift > 0 {
					SHRL(U8(tshift), R13L)
				}
				ANDL(U32(0x03030303), R13L)
				SHLL(U8(4), R13L)
				ORL(R13L, dst.As32())
			}
			lowHigh(RAX, 0, 0, R8)
			lowHigh(RBX, 0, 2, R12)
			SHLQ(U8(32), R12)
			ORQ(R12, R8)
			VMOVQ(R8, X4)
			lowHigh(RAX, 4, 4, R8)
			lowHigh(RBX, 4, 6, R12)
			SHLQ(U8(32), R12)
			ORQ(R12, R8)
			VPINSRQ(U8(1), R8, X4, X4)
			VPMOVZXBW(X4, Y4)
			VPSUBW(kWords32, Y4, Y4)
			offsetWords(Y4, 2)
		},
		chunk: func(c int, y, _ VecPhysical) {
			h, p := c/4, c%4
			VMOVDQU(Mem{Base: RSI, Disp: 32 + 32*h}, y)
			if p > 0 {
				VPSRLW(U8(2*p), y, y)
			}
			VPAND(Y15, y, y)
			VMOVDQU(Mem{Base: RSI}, Y11)
			shiftBytes(Y11, c, 2)
			VPAND(Y14, Y11, Y11)
			VPOR(Y11, y, y)
		},
	},
	{
		// Q2_K: scales[16] (scale low nibble, min high nibble), qs[64],
		// fp16 d, fp16 dmin. Element 128h+32p+l has q = qs[32h+l]>>2p & 3.
		name: "Q2_K", bytes: 84, kind: kMin,
		consts:   func() { bcastByteY(0x03, Y15); bcastByteY(0x0f, Y13) },
		scales16: true, d: 80, withMin: true,
		words: func() {
			VMOVDQU(Mem{Base: RSI}, X4)
			VPSRLW(U8(4), X4, X5)
			VPAND(X13, X4, X4)
			VPAND(X13, X5, X5)
			VPMOVZXBW(X4, Y4)
			VPMOVZXBW(X5, Y8)
		},
		chunk: func(c int, y, _ VecPhysical) {
			h, p := c/4, c%4
			VMOVDQU(Mem{Base: RSI, Disp: 16 + 32*h}, y)
			if p > 0 {
				VPSRLW(U8(2*p), y, y)
			}
			VPAND(Y15, y, y)
		},
	},
	{
		// IQ4_XS: fp16 d, uint16 scales_h, scales_l[4], qs[128]. Sub-block
		// s (32 elements) has the 6-bit scale
		// (scales_l[s/2]>>4(s%2) & 15) | (scales_h>>2s & 3)<<4, less 32,
		// and 16 bytes of level indices: low nibbles elements 0-15, high
		// nibbles 16-31.
		name: "IQ4_XS", bytes: 136, kind: kSgn,
		consts: func() {
			bcastByteY(0x0f, Y15)
			VMOVDQU(kIQ4Levels, Y14)
		},
		d: 0,
		words: func() {
			MOVL(Mem{Base: RSI, Disp: 4}, EAX)
			VMOVD(EAX, X4)
			VPSRLW(U8(4), X4, X5)
			VPAND(X15, X4, X4)
			VPAND(X15, X5, X5)
			VPUNPCKLBW(X5, X4, X4)
			VPMOVZXBW(X4, X4)
			MOVWLZX(Mem{Base: RSI, Disp: 2}, EAX)
			VMOVD(EAX, X5)
			VPBROADCASTW(X5, X5)
			VPMULLW(kIQ4Shift, X5, X5)
			VPSRLW(U8(14), X5, X5)
			VPSLLW(U8(4), X5, X5)
			VPOR(X5, X4, X4)
			VPSUBW(kWords32, X4, X4)
		},
		chunk: func(c int, y, s VecPhysical) {
			VMOVDQU(Mem{Base: RSI, Disp: 8 + 16*c}, y.AsX())
			VPSRLW(U8(4), y.AsX(), X11)
			VINSERTI128(U8(1), X11, y, y)
			VPAND(Y15, y, y)
			VPSHUFB(y, Y14, s)
			VPABSB(s, y)
		},
	},
}

// kquantFamily generates the decode kernels and unpackers of every
// K-quant type, and the Q8_K activation quantisers.
func kquantFamily() {
	kquantData()
	kzData()
	for _, q := range kquants {
		q.pairZ, q.constsZ = kzDecoders(q.name)
		kdot1(q)
		kdot4(q)
		kunpack(q)
		kdotZ(q, 1)
		kdotZ(q, 4)
		kdotZ(q, 0)
	}
	quantQ8K(false)
	quantQ8K(true)
}

// prefetchBlock prefetches the weight bytes of one super-block pf1 ahead
// into L2 (see frows.go).
func prefetchBlock(bytes int) {
	for off := 0; off < bytes; off += 64 {
		PREFETCHT1(Mem{Base: RSI, Disp: pf1 + off})
	}
}

// kdot1 generates kdot<T>(w, x *byte, nb int) float32.
func kdot1(q kquant) {
	name := "kdot" + q.name
	text(name, NOSPLIT, "func(w, x *byte, nb int) float32")
	Doc(fmt.Sprintf("%s returns the dot product of nb %s super-blocks with nb Q8_K blocks (see internal/gen/kquant.go).", name, q.name))
	frame := AllocLocal(kUnit - 256)
	u := func(off int) Mem { return frame.Offset(off - 256) }
	Load(Param("w"), RSI)
	Load(Param("x"), RDI)
	Load(Param("nb"), RCX)
	VXORPS(Y0, Y0, Y0)
	q.consts()

	loop, done := name+"_block", name+"_done"
	Label(loop)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	prefetchBlock(q.bytes)
	q.prep(u)
	if q.kind == kOff {
		VMOVDQU(u(512), Y1)
		VPMADDWD(Mem{Base: RDI, Disp: 260}, Y1, Y1)
	} else {
		VPXOR(Y1, Y1, Y1)
	}
	for c := 0; c < 8; c++ {
		q.chunk(c, Y8, Y10)
		xm := Mem{Base: RDI, Disp: 4 + 32*c}
		if q.kind == kSgn {
			VMOVDQU(xm, Y3)
			VPSIGNB(Y10, Y3, Y3)
			VPMADDUBSW(Y3, Y8, Y3)
		} else {
			VPMADDUBSW(xm, Y8, Y3)
		}
		VPMADDWD(u(256+32*c), Y3, Y3)
		VPADDD(Y3, Y1, Y1)
	}
	kfloat(q, u, RDI, Y1, Y0, X4, [3]VecPhysical{Y5, Y6, Y7})
	ADDQ(U32(q.bytes), RSI)
	ADDQ(U32(q8KBytes), RDI)
	DECQ(RCX)
	JMP(LabelRef(loop))

	Label(done)
	hsum2(Y0, X1)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// kfloat adds a super-block's lanes isum (with the activation block at
// xb) to acc, as the file comment says. t and ts are scratch.
func kfloat(q kquant, u func(int) Mem, xb GPPhysical, isum, acc VecPhysical, t VecPhysical, ts [3]VecPhysical) {
	VMOVQ(u(544), t)
	VBROADCASTSS(Mem{Base: xb}, ts[0].AsX())
	VMULPS(ts[0].AsX(), t, t) // [d*dx, dmin*dx]
	VBROADCASTSS(t, ts[0])
	VCVTDQ2PS(isum, isum)
	VFMADD231PS(isum, ts[0], acc)
	if q.kind == kMin {
		VMOVDQU(u(512), ts[1])
		VPMADDWD(Mem{Base: xb, Disp: 260}, ts[1], ts[1])
		VCVTDQ2PS(ts[1], ts[1])
		VMOVSHDUP(t, ts[2].AsX())
		VBROADCASTSS(ts[2].AsX(), ts[2])
		VFNMADD231PS(ts[1], ts[2], acc)
	}
}

// kdot4 generates
//
//	kdot4<T>(w, x *byte, xstride, nb int, out *float32, ostride int)
//
// one weight row against four activation rows xstride bytes apart,
// storing the dots at out[0], out[ostride], out[2*ostride], out[3*ostride].
func kdot4(q kquant) {
	name := "kdot4" + q.name
	text(name, NOSPLIT, "func(w, x *byte, xstride, nb int, out *float32, ostride int)")
	Doc(fmt.Sprintf("%s returns the dots of nb %s super-blocks with four Q8_K rows (see internal/gen/kquant.go).", name, q.name))
	frame := AllocLocal(kUnit - 256)
	u := func(off int) Mem { return frame.Offset(off - 256) }
	xs := []GPPhysical{RDI, R9, R10, R11}
	Load(Param("w"), RSI)
	Load(Param("nb"), RCX)
	Load(Param("x"), RDI)
	Load(Param("xstride"), R8)
	LEAQ(Mem{Base: RDI, Index: R8, Scale: 1}, R9)
	LEAQ(Mem{Base: RDI, Index: R8, Scale: 2}, R10)
	LEAQ(Mem{Base: R9, Index: R8, Scale: 2}, R11)
	for i := 0; i < 4; i++ {
		VXORPS(yreg(i), yreg(i), yreg(i))
	}
	q.consts()

	loop, done := name+"_block", name+"_done"
	Label(loop)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	prefetchBlock(q.bytes)
	q.prep(u)
	isum := func(i int) VecPhysical { return yreg(4 + i) }
	for i := 0; i < 4; i++ {
		if q.kind == kOff {
			VMOVDQU(u(512), isum(i))
			VPMADDWD(Mem{Base: xs[i], Disp: 260}, isum(i), isum(i))
		} else {
			VPXOR(isum(i), isum(i), isum(i))
		}
	}
	for c := 0; c < 8; c++ {
		q.chunk(c, Y8, Y10)
		for i := 0; i < 4; i++ {
			xm := Mem{Base: xs[i], Disp: 4 + 32*c}
			if q.kind == kSgn {
				VMOVDQU(xm, Y9)
				VPSIGNB(Y10, Y9, Y9)
				VPMADDUBSW(Y9, Y8, Y9)
			} else {
				VPMADDUBSW(xm, Y8, Y9)
			}
			VPMADDWD(u(256+32*c), Y9, Y9)
			VPADDD(Y9, isum(i), isum(i))
		}
	}
	for i := 0; i < 4; i++ {
		kfloat(q, u, xs[i], isum(i), yreg(i), X9, [3]VecPhysical{Y10, Y11, Y12})
	}
	ADDQ(U32(q.bytes), RSI)
	for _, x := range xs {
		ADDQ(U32(q8KBytes), x)
	}
	DECQ(RCX)
	JMP(LabelRef(loop))

	Label(done)
	Load(Param("out"), RDX)
	Load(Param("ostride"), R8)
	SHLQ(U8(2), R8)
	for i := 0; i < 4; i++ {
		hsum2(yreg(i), X8)
		VMOVSS(yreg(i).AsX(), Mem{Base: RDX})
		if i < 3 {
			ADDQ(R8, RDX)
		}
	}
	VZEROUPPER()
	RET()
}

// kunpack generates kunpack<T>(dst *byte, dstride int, src *byte, nsb int).
func kunpack(q kquant) {
	name := "kunpack" + q.name
	text(name, NOSPLIT, "func(dst *byte, dstride int, src *byte, nsb int)")
	Doc(fmt.Sprintf("%s writes the prefill units of nsb %s super-blocks, dstride bytes apart (see internal/gen/kquant.go).", name, q.name))
	Load(Param("dst"), RDI)
	Load(Param("dstride"), R9)
	Load(Param("src"), RSI)
	Load(Param("nsb"), RCX)
	q.consts()
	u := func(off int) Mem { return Mem{Base: RDI, Disp: off} }
	loop, done := name+"_block", name+"_done"
	Label(loop)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	q.prep(u)
	for c := 0; c < 8; c++ {
		q.chunk(c, Y8, Y10)
		VMOVDQU(Y8, u(32*c))
		if q.kind == kSgn {
			VMOVDQU(Y10, u(kUnit+32*c))
		}
	}
	ADDQ(R9, RDI)
	ADDQ(U32(q.bytes), RSI)
	DECQ(RCX)
	JMP(LabelRef(loop))
	Label(done)
	VZEROUPPER()
	RET()
}

// quantQ8K generates the Q8_K activation quantiser with AVX2:
//
//	quantQ8K(dst *byte, src *float32, nsb int)    Q8_K blocks, 292 bytes apart
//	quantQ8KP(dst *byte, src *float32, nsb int)   one token's slot of the
//	                                              q8kp layout (gemmk.go)
//
// with engine/quant's arithmetic (ggml's quantize_row_q8_K_ref): m is the
// first value of largest magnitude (NaNs ignored), iscale = -127/m,
// q = min(127, nearest-even(iscale*v)) kept as its low byte, bsums the
// sums of 16 quants, d = 1/iscale; a block whose values are all 0 (or NaN)
// is all zeros.
func quantQ8K(pair bool) {
	name := "quantQ8K"
	qsOff := func(c int) int { return 4 + 32*c }
	bsOff, dOff, unitBytes := 260, 0, q8KBytes
	if pair {
		name = "quantQ8KP"
		qsOff = func(c int) int { return 64 * c }
		bsOff, dOff, unitBytes = 512, 576, 640
	}
	text(name, NOSPLIT, "func(dst *byte, src *float32, nsb int)")
	Doc(fmt.Sprintf("%s quantises nsb super-blocks of activations to Q8_K (see internal/gen/kquant.go).", name))
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("nsb"), RCX)
	MOVL(U32(0x7fffffff), EAX)
	VMOVD(EAX, X15)
	VPBROADCASTD(X15, Y15) // |v| mask
	VPCMPEQD(Y14, Y14, Y14)
	VPSRLD(U8(24), Y14, Y14) // 0xff per dword
	MOVL(U32(127), EAX)
	VMOVD(EAX, X13)
	VPBROADCASTD(X13, Y13)
	VMOVDQU(kQ8KPerm, Y12)
	VMOVDQU(kOnes, Y10)

	loop, done, zero := name+"_block", name+"_done", name+"_zero"
	Label(loop)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))

	// amax over |v|; a NaN is never taken (VMAXPS keeps its second source
	// unless the first is larger).
	for i := 0; i < 4; i++ {
		VXORPS(yreg(i), yreg(i), yreg(i))
	}
	for j := 0; j < 32; j++ {
		a := yreg(4 + j%4)
		VANDPS(Mem{Base: RSI, Disp: 32 * j}, Y15, a)
		VMAXPS(yreg(j%4), a, yreg(j%4))
	}
	VMAXPS(Y1, Y0, Y0)
	VMAXPS(Y3, Y2, Y2)
	VMAXPS(Y2, Y0, Y0)
	VEXTRACTF128(U8(1), Y0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0x4e), X0, X1)
	VMAXPS(X1, X0, X0)
	VPERMILPS(U8(0xb1), X0, X1)
	VMAXPS(X1, X0, X0)
	VXORPS(X1, X1, X1)
	VUCOMISS(X1, X0)
	JE(LabelRef(zero))

	// m: the first value whose magnitude is amax.
	VBROADCASTSS(X0, Y0)
	XORQ(RDX, RDX)
	find := name + "_find"
	Label(find)
	VANDPS(Mem{Base: RSI, Index: RDX, Scale: 4}, Y15, Y1)
	VCMPPS(U8(0), Y0, Y1, Y1)
	VMOVMSKPS(Y1, EAX)
	ADDQ(U8(8), RDX)
	TESTL(EAX, EAX)
	JZ(LabelRef(find))
	BSFL(EAX, EAX)
	LEAQ(Mem{Base: RDX, Index: RAX, Scale: 1, Disp: -8}, RAX)
	VMOVSS(Mem{Base: RSI, Index: RAX, Scale: 4}, X1)
	MOVL(U32(0xc2fe0000), EAX) // -127
	VMOVD(EAX, X11)
	VDIVSS(X1, X11, X11) // iscale
	MOVL(U32(0x3f800000), EAX)
	VMOVD(EAX, X3)
	VDIVSS(X11, X3, X3) // d = 1/iscale
	if pair {
		VBROADCASTSS(X3, Y3)
		VMOVDQU(Y3, Mem{Base: RDI, Disp: dOff})
	} else {
		VMOVSS(X3, Mem{Base: RDI, Disp: dOff})
	}
	VBROADCASTSS(X11, Y11)

	// Quants, 32 (one chunk) at a time: int32, clamped to 127, low byte,
	// packed in order. The chunk's two bsums start as 4 int32 partial
	// sums each (VPMADDUBSW with ones, VPMADDWD with ones).
	partial := []VecPhysical{Y4, Y5, Y5, Y6, Y5, Y6, Y6, Y7}
	for c := 0; c < 8; c++ {
		for i := 0; i < 4; i++ {
			v := yreg(i)
			VMULPS(Mem{Base: RSI, Disp: 128*c + 32*i}, Y11, v)
			VCVTPS2DQ(v, v)
			VPMINSD(Y13, v, v)
			VPAND(Y14, v, v)
		}
		VPACKUSDW(Y1, Y0, Y0)
		VPACKUSDW(Y3, Y2, Y2)
		VPACKUSWB(Y2, Y0, Y0)
		VPERMD(Y0, Y12, Y0)
		VMOVDQU(Y0, Mem{Base: RDI, Disp: qsOff(c)})
		s := partial[c]
		VPMADDUBSW(Y0, Y10, s)
		VPMADDWD(kOnes.Offset(32), s, s)
		// Pairwise reduction: after chunks 0-3, Y4 holds in its low lane
		// the sums of groups 0, 2, 4, 6 and in its high lane 1, 3, 5, 7;
		// after chunks 4-7, Y5 the same for groups 8-15.
		switch c {
		case 1:
			VPHADDD(Y5, Y4, Y4)
		case 3:
			VPHADDD(Y6, Y5, Y5)
			VPHADDD(Y5, Y4, Y4)
		case 5:
			VPHADDD(Y6, Y5, Y5)
		case 7:
			VPHADDD(Y7, Y6, Y6)
			VPHADDD(Y6, Y5, Y5)
		}
	}
	VPACKSSDW(Y5, Y4, Y4)
	VEXTRACTI128(U8(1), Y4, X5)
	VPUNPCKLWD(X5, X4, X6)
	VPUNPCKHWD(X5, X4, X7)
	VMOVDQU(X6, Mem{Base: RDI, Disp: bsOff})
	VMOVDQU(X7, Mem{Base: RDI, Disp: bsOff + 16})
	next := name + "_next"
	Label(next)
	ADDQ(U32(1024), RSI)
	ADDQ(U32(unitBytes), RDI)
	DECQ(RCX)
	JMP(LabelRef(loop))

	Label(zero)
	VPXOR(Y0, Y0, Y0)
	if pair {
		for c := 0; c < 8; c++ {
			VMOVDQU(Y0, Mem{Base: RDI, Disp: qsOff(c)})
		}
		VMOVDQU(Y0, Mem{Base: RDI, Disp: bsOff})
		VMOVDQU(Y0, Mem{Base: RDI, Disp: dOff})
	} else {
		for off := 0; off+32 <= q8KBytes; off += 32 {
			VMOVDQU(Y0, Mem{Base: RDI, Disp: off})
		}
		MOVL(U32(0), Mem{Base: RDI, Disp: q8KBytes - 4})
	}
	JMP(LabelRef(next))

	Label(done)
	VZEROUPPER()
	RET()
}

// hsum2 sets the low lane of y to the sum of its eight lanes in HSUMPS's
// order (see hsum), with AVX only. t is scratch.
func hsum2(y VecPhysical, t VecPhysical) {
	x := y.AsX()
	VEXTRACTF128(U8(1), y, t)
	VADDPS(t, x, x)
	VPERMILPS(U8(0x4e), x, t)
	VADDPS(t, x, x)
	VPERMILPS(U8(0xb1), x, t)
	VADDSS(t, x, x)
}

func yreg(i int) VecPhysical {
	return []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
}
