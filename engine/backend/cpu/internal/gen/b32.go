package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The 32-element block family with AVX2 (decode): Q8_0, Q4_0, Q5_0,
// IQ4_NL and MXFP4 against Q8_0 activations, Q4_1 and Q5_1 against Q8_1:
//
//	b32dot<T>(w, x *byte, nb int) float32
//	b32dot4<T>(w, x *byte, xstride, nb int, out *float32, ostride int)
//
// Per block, 8 int32 lanes, lane l the exact sum of w*x over elements
// 4l..4l+3 (signed weights: VPMADDUBSW of |w| and x*sign(w), then
// VPMADDWD with ones; the unsigned quants of Q4_1 and Q5_1 go into
// VPMADDUBSW as they are); then acc = fma(float(lanes), dw*dx, acc), dw*dx
// rounded to float32 (MXFP4's dw, 2^(e-128), read from a table of the
// 256 scale bytes); for Q4_1 and Q5_1 then acc = fma(m, S, acc) where S
// holds the activation block's s in lane 0 and zeros elsewhere (so lane 0
// adds m*s). Blocks in order, one 8-lane accumulator per row, reduced as
// HSUMPS does. The AVX-512 kernels (q32z.go's rows, gemm32.go's tiles)
// follow the same steps, so results do not depend on the kernel.

type block32AVX2 struct {
	name   string
	bytes  int
	xbytes int  // 34 (Q8_0) or 36 (Q8_1)
	offset bool // w = d*q + m against Q8_1: the m*s term
	signed bool // the weights are signed (sign trick), else unsigned quants
	e8m0   bool // the weight scale is an E8M0 byte (MXFP4), not an fp16 d
	consts func()
	// weights sets y to the block's 32 weights at m in element order:
	// signed, or unsigned quants for the offset types. Scratch: X10.
	weights func(m Mem, y VecPhysical)
}

var (
	b32Levels   Mem // IQ4_NL's levels in both lanes
	b32MXLevels Mem // MXFP4's levels in both lanes
	b32E8M0     Mem // 256 float32: 2^(e-128) for each E8M0 byte e (MXFP4's scale)
	b32Bits     Mem // VPSHUFB control and bit masks spreading 32 bits to 32 bytes
)

func b32Data() {
	b32MXLevels = GLOBL("b32mxlevels", RODATA|NOPTR)
	levels := []int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
	for h := 0; h < 2; h++ {
		for i := 0; i < 2; i++ {
			var v uint64
			for j := 0; j < 8; j++ {
				v |= uint64(uint8(levels[8*i+j])) << (8 * j)
			}
			DATA(16*h+8*i, U64(v))
		}
	}
	// ggml's ggml_e8m0_to_fp32_half: denormal below e = 2.
	b32E8M0 = GLOBL("b32e8m0", RODATA|NOPTR)
	for e := 0; e < 256; e++ {
		bits := uint32(0x00200000) << e
		if e >= 2 {
			bits = uint32(e-1) << 23
		}
		DATA(4*e, U32(bits))
	}
	b32Bits = GLOBL("b32bits", RODATA|NOPTR)
	// Control: byte j takes byte j/8 of the broadcast dword.
	for i := 0; i < 4; i++ {
		DATA(8*i, U64(uint64(i)*0x0101010101010101))
	}
	// Masks: byte j is bit j%8.
	for i := 0; i < 4; i++ {
		DATA(32+8*i, U64(0x8040201008040201))
	}
}

// nibbles32 sets y to the 32 nibbles of the 16 bytes at m: low nibbles
// (elements 0-15) in the low lane, high nibbles in the high lane. Y14: 0x0F.
func nibbles32(m Mem, y VecPhysical) {
	VMOVDQU(m, y.AsX())
	VPSRLW(U8(4), y.AsX(), X10)
	VINSERTI128(U8(1), X10, y, y)
	VPAND(Y14, y, y)
}

// fifthBits ORs bit 4 into the 32 quants in y from the 32 bits at m (bit j
// for element j). Y13: 0x10 bytes. Scratch: Y10.
func fifthBits(m Mem, y VecPhysical) {
	VPBROADCASTD(m, Y10)
	VPSHUFB(b32Bits, Y10, Y10)
	VPAND(b32Bits.Offset(32), Y10, Y10)
	VPCMPEQB(b32Bits.Offset(32), Y10, Y10)
	VPAND(Y13, Y10, Y10)
	VPOR(Y10, y, y)
}

var blocks32AVX2 = []block32AVX2{
	{
		name: "Q8_0", bytes: 34, xbytes: 34, signed: true,
		consts:  func() {},
		weights: func(m Mem, y VecPhysical) { VMOVDQU(m.Offset(2), y) },
	},
	{
		name: "Q4_0", bytes: 18, xbytes: 34, signed: true,
		consts: func() { bcastByteY(0x0f, Y14); bcastByteY(0x08, Y13) },
		weights: func(m Mem, y VecPhysical) {
			nibbles32(m.Offset(2), y)
			VPSUBB(Y13, y, y)
		},
	},
	{
		// Q5_0: fp16 d, qh[4], qs[16]; q = nibble | bit j of qh << 4, w = q-16.
		name: "Q5_0", bytes: 22, xbytes: 34, signed: true,
		consts: func() { bcastByteY(0x0f, Y14); bcastByteY(0x10, Y13) },
		weights: func(m Mem, y VecPhysical) {
			nibbles32(m.Offset(6), y)
			fifthBits(m.Offset(2), y)
			VPSUBB(Y13, y, y)
		},
	},
	{
		// IQ4_NL: fp16 d, qs[16]; w = the level of each nibble.
		name: "IQ4_NL", bytes: 18, xbytes: 34, signed: true,
		consts: func() { bcastByteY(0x0f, Y14); VMOVDQU(b32Levels, Y13) },
		weights: func(m Mem, y VecPhysical) {
			nibbles32(m.Offset(2), y)
			VPSHUFB(y, Y13, y)
		},
	},
	{
		// MXFP4: E8M0 e, qs[16]; w = the level of each nibble, d = 2^(e-128).
		name: "MXFP4", bytes: 17, xbytes: 34, signed: true, e8m0: true,
		consts: func() { bcastByteY(0x0f, Y14); VMOVDQU(b32MXLevels, Y13) },
		weights: func(m Mem, y VecPhysical) {
			nibbles32(m.Offset(1), y)
			VPSHUFB(y, Y13, y)
		},
	},
	{
		// Q4_1: fp16 d, fp16 m, qs[16]; w = d*q + m.
		name: "Q4_1", bytes: 20, xbytes: 36, offset: true,
		consts:  func() { bcastByteY(0x0f, Y14) },
		weights: func(m Mem, y VecPhysical) { nibbles32(m.Offset(4), y) },
	},
	{
		// Q5_1: fp16 d, fp16 m, qh[4], qs[16].
		name: "Q5_1", bytes: 24, xbytes: 36, offset: true,
		consts: func() { bcastByteY(0x0f, Y14); bcastByteY(0x10, Y13) },
		weights: func(m Mem, y VecPhysical) {
			nibbles32(m.Offset(8), y)
			fifthBits(m.Offset(4), y)
		},
	},
}

func block32Family() {
	b32Data()
	b32Levels = kIQ4Levels
	for _, b := range blocks32AVX2 {
		b32dot1(b)
		b32dot4(b)
	}
}

// b32lanes sets t to the float32 lane sums of the block's weights in w
// (prepared: |w| in w for the signed types, whose original is in sw)
// with the 32 activation quants at xm. Y15: int16 ones.
func b32lanes(b block32AVX2, w, sw VecPhysical, xm Mem, t VecPhysical) {
	if b.signed {
		VMOVDQU(xm, t)
		VPSIGNB(sw, t, t)
		VPMADDUBSW(t, w, t)
	} else {
		VPMADDUBSW(xm, w, t)
	}
	VPMADDWD(Y15, t, t)
	VCVTDQ2PS(t, t)
}

// b32prep unpacks the block at m into w (for signed types |w| in w and the
// signed weights in sw).
func b32prep(b block32AVX2, m Mem, w, sw VecPhysical) {
	if b.signed {
		b.weights(m, sw)
		VPSIGNB(sw, sw, w)
	} else {
		b.weights(m, w)
	}
}

// b32dot1 generates b32dot<T>.
func b32dot1(b block32AVX2) {
	name := "b32dot" + b.name
	text(name, NOSPLIT, "func(w, x *byte, nb int) float32")
	Doc(fmt.Sprintf("%s returns the dot product of nb %s blocks with nb activation blocks (see internal/gen/b32.go).", name, b.name))
	Load(Param("w"), RSI)
	Load(Param("x"), RDI)
	Load(Param("nb"), RCX)
	VXORPS(Y0, Y0, Y0)
	MOVL(U32(0x00010001), EAX)
	VMOVD(EAX, X15)
	VPBROADCASTD(X15, Y15)
	b.consts()
	if b.e8m0 {
		LEAQ(b32E8M0, RBX)
	}

	four, one, done := name+"_four", name+"_one", name+"_done"
	Label(four)
	CMPQ(RCX, U8(4))
	JL(LabelRef(one))
	for off := 0; off < 4*b.bytes; off += 64 {
		PREFETCHT0(Mem{Base: RSI, Disp: 1024 + off})
	}
	for off := 0; off < 4*b.bytes; off += 64 {
		PREFETCHT1(Mem{Base: RSI, Disp: 8192 + off})
	}
	// The four blocks' dw*dx in Y8 (both lanes), and for the offset types
	// their m in Y11 (both lanes) and s in X12.
	halves := func(woff, xoff int, dst VecPhysical) {
		MOVWLZX(Mem{Base: RSI, Disp: woff}, EAX)
		VMOVD(EAX, dst.AsX())
		for k := 1; k < 4; k++ {
			VPINSRW(U8(k), Mem{Base: RSI, Disp: woff + k*b.bytes}, dst.AsX(), dst.AsX())
		}
		for k := 0; k < 4; k++ {
			VPINSRW(U8(4+k), Mem{Base: RDI, Disp: xoff + k*b.xbytes}, dst.AsX(), dst.AsX())
		}
		VCVTPH2PS(dst.AsX(), dst)
	}
	if b.e8m0 {
		// The activations' d in X8, the weights' from the table in X9.
		MOVWLZX(Mem{Base: RDI}, EAX)
		VMOVD(EAX, X8)
		for k := 1; k < 4; k++ {
			VPINSRW(U8(k), Mem{Base: RDI, Disp: k * b.xbytes}, X8, X8)
		}
		VCVTPH2PS(X8, X8)
		for k := 0; k < 4; k++ {
			MOVBLZX(Mem{Base: RSI, Disp: k * b.bytes}, EAX)
			if k == 0 {
				VMOVSS(Mem{Base: RBX, Index: RAX, Scale: 4}, X9)
			} else {
				VINSERTPS(U8(k<<4), Mem{Base: RBX, Index: RAX, Scale: 4}, X9, X9)
			}
		}
	} else {
		halves(0, 0, Y8)
		VEXTRACTF128(U8(1), Y8, X9)
	}
	VMULPS(X9, X8, X8)
	VINSERTF128(U8(1), X8, Y8, Y8)
	if b.offset {
		halves(2, 2, Y11)
		VEXTRACTF128(U8(1), Y11, X12)
		VINSERTF128(U8(1), X11, Y11, Y11)
	}
	for k := 0; k < 4; k++ {
		VPERMILPS(U8(0x55*k), Y8, Y9)
		b32prep(b, Mem{Base: RSI, Disp: k * b.bytes}, Y4, Y5)
		xo := 2
		if b.offset {
			xo = 4
		}
		b32lanes(b, Y4, Y5, Mem{Base: RDI, Disp: k*b.xbytes + xo}, Y6)
		VFMADD231PS(Y6, Y9, Y0)
		if b.offset {
			VPERMILPS(U8(0x55*k), Y11, Y9)
			VINSERTPS(U8(k<<6|0x0e), X12, X7, X7)
			VFMADD231PS(Y7, Y9, Y0)
		}
	}
	ADDQ(U32(4*b.bytes), RSI)
	ADDQ(U32(4*b.xbytes), RDI)
	SUBQ(U8(4), RCX)
	JMP(LabelRef(four))

	Label(one)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	b32scale1(b, RSI, RDI, Y9, Y11, X12)
	b32prep(b, Mem{Base: RSI}, Y4, Y5)
	xo := 2
	if b.offset {
		xo = 4
	}
	b32lanes(b, Y4, Y5, Mem{Base: RDI, Disp: xo}, Y6)
	VFMADD231PS(Y6, Y9, Y0)
	if b.offset {
		VFMADD231PS(Y12, Y11, Y0)
	}
	ADDQ(U32(b.bytes), RSI)
	ADDQ(U32(b.xbytes), RDI)
	DECQ(RCX)
	JMP(LabelRef(one))

	Label(done)
	hsum2(Y0, X1)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// b32scale1 sets d (all lanes) to dw*dx of the blocks at w and x, and for
// the offset types m (all lanes) to the weight's m and s to [s, 0, ...].
func b32scale1(b block32AVX2, w, x GPPhysical, d, m, s VecPhysical) {
	if b.e8m0 {
		// RBX: the scale table.
		MOVWLZX(Mem{Base: x}, EAX)
		VMOVD(EAX, X10)
		VCVTPH2PS(X10, X10)
		MOVBLZX(Mem{Base: w}, EAX)
		VMULSS(Mem{Base: RBX, Index: RAX, Scale: 4}, X10, d.AsX())
		VBROADCASTSS(d.AsX(), d)
		return
	}
	MOVWLZX(Mem{Base: w}, EAX)
	VMOVD(EAX, X10)
	VPINSRW(U8(1), Mem{Base: x}, X10, X10)
	if b.offset {
		VPINSRW(U8(2), Mem{Base: w, Disp: 2}, X10, X10)
		VPINSRW(U8(3), Mem{Base: x, Disp: 2}, X10, X10)
	}
	VCVTPH2PS(X10, X10)
	VMOVSHDUP(X10, d.AsX())
	VMULSS(d.AsX(), X10, d.AsX())
	VBROADCASTSS(d.AsX(), d)
	if b.offset {
		VPERMILPS(U8(0xaa), X10, m.AsX())
		VBROADCASTSS(m.AsX(), m)
		VINSERTPS(U8(3<<6|0x0e), X10, s.AsX(), s.AsX())
	}
}

// b32dot4 generates b32dot4<T>: one weight row against four activation
// rows xstride bytes apart, dots stored at out[i*ostride].
func b32dot4(b block32AVX2) {
	name := "b32dot4" + b.name
	text(name, NOSPLIT, "func(w, x *byte, xstride, nb int, out *float32, ostride int)")
	Doc(fmt.Sprintf("%s returns the dots of nb %s blocks with four activation rows (see internal/gen/b32.go).", name, b.name))
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
	MOVL(U32(0x00010001), EAX)
	VMOVD(EAX, X15)
	VPBROADCASTD(X15, Y15)
	b.consts()
	if b.e8m0 {
		LEAQ(b32E8M0, RBX)
	}
	xo := 2
	if b.offset {
		xo = 4
	}

	loop, done := name+"_block", name+"_done"
	Label(loop)
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	PREFETCHT0(Mem{Base: RSI, Disp: 1024})
	PREFETCHT1(Mem{Base: RSI, Disp: 8192})
	// dw * [dx0..dx3] in both lanes of Y8; for the offset types m in
	// every lane of Y11 and the four rows' s in X12.
	MOVWLZX(Mem{Base: RDI}, EAX)
	VMOVD(EAX, X8)
	for i := 1; i < 4; i++ {
		VPINSRW(U8(i), Mem{Base: xs[i]}, X8, X8)
	}
	if b.offset {
		for i := 0; i < 4; i++ {
			VPINSRW(U8(4+i), Mem{Base: xs[i], Disp: 2}, X8, X8)
		}
	}
	VCVTPH2PS(X8, Y8)
	if b.offset {
		VEXTRACTF128(U8(1), Y8, X12)
	}
	if b.e8m0 {
		MOVBLZX(Mem{Base: RSI}, EAX)
		VMOVSS(Mem{Base: RBX, Index: RAX, Scale: 4}, X9)
	} else {
		MOVWLZX(Mem{Base: RSI}, EAX)
		VMOVD(EAX, X9)
		if b.offset {
			VPINSRW(U8(1), Mem{Base: RSI, Disp: 2}, X9, X9)
		}
		VCVTPH2PS(X9, X9)
	}
	if b.offset {
		VMOVSHDUP(X9, X11)
		VBROADCASTSS(X11, Y11)
	}
	VBROADCASTSS(X9, X9)
	VMULPS(X9, X8, X8)
	VINSERTF128(U8(1), X8, Y8, Y8)
	b32prep(b, Mem{Base: RSI}, Y4, Y5)
	for i := 0; i < 4; i++ {
		b32lanes(b, Y4, Y5, Mem{Base: xs[i], Disp: xo}, Y6)
		VPERMILPS(U8(0x55*i), Y8, Y7)
		VFMADD231PS(Y6, Y7, yreg(i))
		if b.offset {
			VINSERTPS(U8(i<<6|0x0e), X12, X7, X7)
			VFMADD231PS(Y7, Y11, yreg(i))
		}
	}
	ADDQ(U32(b.bytes), RSI)
	for _, x := range xs {
		ADDQ(U32(b.xbytes), x)
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
