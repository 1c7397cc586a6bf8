package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q8p generates quantQ8pAVX512, the activation converter of the prefill
// kernels (gemm32.go):
//
//	func quantQ8pAVX512(dst *byte, src *float32, nb int, k uint32)
//
// It quantises nb blocks of 32 floats to Q8_0 with engine/quant's
// arithmetic (d = amax/127, id = 1/d or 0, q = roundAway(v*id), d stored as
// fp16), exactly as quantQ8xAVX512 does for the row kernels, and writes one
// token's slot of the q8p layout: per block, at dst + b*q8pUnit, the 32
// quants at +0, the 8 lane corrections -K*(sum of 4 quants) at +64 and the
// scale, converted back from fp16, 8 times at +128. dst is the slot of
// token 2p (pair p's units) or that plus 32 (token 2p+1); k holds K in each
// byte.
//
// quantQ8p1AVX512 is the same for Q8_1 activations (the Q4_1 and Q5_1
// tiles, whose unsigned quants need no offset: k is 0), in units of
// q8p1Unit bytes: also s = fp16(d * sum of the 32 quants), as engine/quant's
// Q8_1 stores it, converted back to float32, at +192 (the token's 8 lanes:
// s, then 7 zeros).
//
// quantQ8sAVX512 writes the q8s layout of the packed tiles (packed32.go):
// per block a unit of q8sUnit bytes, the 32 quants at +0, the scale
// (float32, back from fp16) at +32 and -K*(sum of the 32 quants) at +36
// (int32, exact).
//
// quantQ8xAVX512 writes the q8x layout of the AVX-512 row kernels
// (q8x_amd64.go): per block a 64-byte unit of the 32 quants and their 8
// lane corrections, then, after the nb units, the nb scales (float32).
func q8p() {
	q8pGen(q8pLayout{name: "quantQ8pAVX512", corr: 64, unit: q8pUnit})
	q8pGen(q8pLayout{name: "quantQ8p1AVX512", corr: 64, unit: q8p1Unit, withS: true})
	q8pGen(q8pLayout{name: "quantQ8xAVX512", corr: 32, unit: 64, scalesAfter: true})
	q8pGen(q8pLayout{name: "quantQ8sAVX512", unit: q8sUnit, blockSum: true})
}

// q8pLayout is where a converter stores a block's parts.
type q8pLayout struct {
	name        string
	corr, unit  int  // byte offset of the corrections in a block's unit; unit size
	withS       bool // Q8_1's s at +192
	scalesAfter bool // scales as nb float32 after the units (q8x), else 8 times at +128
	// blockSum: the q8s layout, one scale at +32 and the block's whole
	// correction at +36, no lane corrections.
	blockSum bool
}

func q8pGen(l q8pLayout) {
	name, unit, withS := l.name, l.unit, l.withS
	text(name, NOSPLIT, "func(dst *byte, src *float32, nb int, k uint32)")
	Doc(name + " quantises nb blocks of activations to Q8_0 (Q8_1) in a prefill or row-kernel layout (see internal/gen/q8p.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("nb"), RCX)
	if l.scalesAfter {
		MOVQ(RCX, R8)
		SHLQ(U8(6), R8)
		ADDQ(RDI, R8)
	}
	bcast := func(v uint32, z VecPhysical) {
		MOVL(U32(v), EAX)
		VPBROADCASTD(EAX, z)
	}
	bcast(0x7fffffff, Z20)
	bcast(0x3f000000, Z21) // 0.5
	bcast(0x3f800000, Z22) // 1.0
	bcast(0x80000000, Z23)
	Load(Param("k"), EAX)
	VPBROADCASTD(EAX, Y24)
	MOVL(U32(0x42fe0000), EAX) // 127.0
	VMOVD(EAX, X25)
	MOVL(U32(0x3f800000), EAX) // 1.0
	VMOVD(EAX, X26)

	Label(name + "_block")
	TESTQ(RCX, RCX)
	JZ(LabelRef(name + "_done"))
	VMOVUPS(Mem{Base: RSI}, Z0)
	VMOVUPS(Mem{Base: RSI, Disp: 64}, Z1)

	// amax: the largest |v| that is not NaN, else 0 (VMAXPS returns its
	// second source when the first is NaN, as Go's a > amax skips NaN).
	VPANDD(Z20, Z0, Z2)
	VPANDD(Z20, Z1, Z3)
	VPXORD(Z4, Z4, Z4)
	VMAXPS(Z4, Z2, Z4)
	VMAXPS(Z4, Z3, Z4)
	VEXTRACTF64X4(U8(1), Z4, Y5)
	VMAXPS(Y5, Y4, Y4)
	VEXTRACTF128(U8(1), Y4, X5)
	VMAXPS(X5, X4, X4)
	VPERMILPS(U8(0x4e), X4, X5)
	VMAXPS(X5, X4, X4)
	VPERMILPS(U8(0xb1), X4, X5)
	VMAXPS(X5, X4, X4)

	// d = amax/127; id = 1/d, or 0 when d is 0.
	VDIVSS(X25, X4, X5)
	VDIVSS(X5, X26, X6)
	VXORPS(X7, X7, X7)
	VCMPSS(U8(0), X7, X5, X8)
	VANDNPS(X6, X8, X6)
	VBROADCASTSS(X6, Z6)

	VMULPS(Z6, Z0, Z0)
	VMULPS(Z6, Z1, Z1)
	roundQ(Z0, X2)
	roundQ(Z1, X3)
	VINSERTI128(U8(1), X3, Y2, Y2)
	VMOVDQU(Y2, Mem{Base: RDI})

	// Lane corrections -K*(sum of 4 quants).
	VPXORD(Y7, Y7, Y7)
	raw("VPDPBUSD", Y2, Y24, Y7)
	VPXORD(Y8, Y8, Y8)
	VPSUBD(Y7, Y8, Y8)
	if l.blockSum {
		// The 8 lanes added (exact integers): the block's correction.
		VEXTRACTI128(U8(1), Y8, X12)
		VPADDD(X12, X8, X8)
		VPSHUFD(U8(0x4e), X8, X12)
		VPADDD(X12, X8, X8)
		VPSHUFD(U8(0xb1), X8, X12)
		VPADDD(X12, X8, X8)
		VMOVD(X8, Mem{Base: RDI, Disp: 36})
	} else {
		VMOVDQU(Y8, Mem{Base: RDI, Disp: l.corr})
	}

	// The scale as stored in Q8_0 (fp16, to nearest even) and back.
	VCVTPS2PH(U8(0), X5, X9)
	VCVTPH2PS(X9, X9)
	switch {
	case l.blockSum:
		VMOVSS(X9, Mem{Base: RDI, Disp: 32})
	case l.scalesAfter:
		VMOVSS(X9, Mem{Base: R8})
		ADDQ(U8(4), R8)
	default:
		VBROADCASTSS(X9, Y9)
		VMOVUPS(Y9, Mem{Base: RDI, Disp: 128})
	}

	if withS {
		// The sum of the quants: VPDPBUSD with ones gives the sums of 4,
		// then the 8 lanes are added (exact integers).
		MOVL(U32(0x01010101), EAX)
		VPBROADCASTD(EAX, Y10)
		VPXORD(Y11, Y11, Y11)
		raw("VPDPBUSD", Y2, Y10, Y11)
		VEXTRACTI128(U8(1), Y11, X12)
		VPADDD(X12, X11, X11)
		VPSHUFD(U8(0x4e), X11, X12)
		VPADDD(X12, X11, X11)
		VPSHUFD(U8(0xb1), X11, X12)
		VPADDD(X12, X11, X11)
		VCVTDQ2PS(X11, X11)
		VMULSS(X5, X11, X11)
		VCVTPS2PH(U8(0), X11, X11)
		VCVTPH2PS(X11, X11)
		VXORPS(X12, X12, X12)
		VMOVSS(X11, X12, X12)
		VMOVUPS(Y12, Mem{Base: RDI, Disp: 192})
	}

	ADDQ(U32(128), RSI)
	ADDQ(U32(unit), RDI)
	DECQ(RCX)
	JMP(LabelRef(name + "_block"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// roundQ rounds the 16 floats in z half away from zero, as engine/quant's
// roundAway does, and stores their low bytes (int8) in x: truncate, then add
// ±1 where the dropped fraction is at least one half (the difference is
// exact below 2^23; at or above it, and for Inf and NaN, it is 0 or NaN and
// nothing is added, so the conversion gives what Go's int32(f) gives).
// Z20: 0x7fffffff, Z21: 0.5, Z22: 1.0, Z23: 0x80000000. Scratch: Z16, Z17.
func roundQ(z, x VecPhysical) {
	VRNDSCALEPS(U8(3), z, Z16)
	VSUBPS(Z16, z, Z17)
	VPANDD(Z20, Z17, Z17)
	VCMPPS(U8(0x0d), Z21, Z17, K1)
	VPANDD(Z23, z, Z17)
	VPORD(Z22, Z17, Z17)
	VADDPS(Z17, Z16, K1, Z16)
	VCVTTPS2DQ(Z16, Z16)
	VPMOVDB(Z16, x)
}
