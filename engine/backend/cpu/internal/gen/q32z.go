package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// AVX-512 VNNI row kernels of the 32-element block types whose weights
// become unsigned bytes u = w + K (Q8_0: K = 128, Q4_0: 8, Q5_0: 16,
// IQ4_NL: 128), over activations in the q8x layout (q8x_amd64.go: per
// block a 64-byte unit of 32 quants and 8 lane corrections -K*(sum of 4
// quants), then the row's nb float32 scales):
//
//	dotRows<T>VNNI(w, wstride, x, nb, rows, out)            many rows, one activation row
//	dotRows<T>x4VNNI(w, wstride, x, xstride, nb, rows, out, ostride)
//	                                                        many rows by four activation rows
//	dotPairs<T>VNNI(w, wstride, x, xstride, nb, rows, out, ostride)
//	                                                        the same, two weight rows per 512-bit vector (rows even)
//
// A lane starts at its correction and VPDPBUSD adds u*x over its 4
// elements, ending at the exact integer sum of w*x; then
// acc = fma(float(lanes), dw*dx, acc), blocks in order, and HSUMPS's
// reduction: per output the arithmetic of the AVX2 kernels (b32.go), so
// the results are theirs bit for bit.

// q32z describes one type to the generators.
type q32z struct {
	name  string
	bytes int
	// consts loads the constant registers (Z12-Z15, K1 for pairs).
	consts func(pairs bool)
	// unpack sets y (256 bits) to the block's 32 unsigned weights at m.
	unpack func(m Mem, y VecPhysical)
	// unpack2 sets z to row r's block at m0 (low half) and row r+1's at m1.
	unpack2 func(m0, m1 Mem, z VecPhysical)
}

var q32zData Mem // word shift counts 0, 4 in alternate 128-bit lanes

func nib16Y(m Mem, y VecPhysical) {
	VBROADCASTI32X4(m, y)
	VPSRLVW(Y14, y, y)
	VPANDD(Y13, y, y)
}

func nib16Pair(m0, m1 Mem, z VecPhysical) {
	VBROADCASTI32X4(m0, z)
	VBROADCASTI32X4(m1, K1, z)
	VPSRLVW(Z14, z, z)
	VPANDD(Z13, z, z)
}

func nibConsts(pairs bool) {
	VMOVDQU64(q32zData, Z14)
	MOVL(U32(0x0f0f0f0f), EAX)
	VPBROADCASTD(EAX, Z13)
	if pairs {
		MOVL(U32(0xff00), EAX)
		KMOVW(EAX, K1)
	}
}

var q32zTypes = []q32z{
	{
		name: "Q8_0", bytes: 34,
		consts: func(bool) {
			MOVL(U32(0x80808080), EAX)
			VPBROADCASTD(EAX, Z15)
		},
		unpack: func(m Mem, y VecPhysical) { VPXORD(m.Offset(2), Y15, y) },
		unpack2: func(m0, m1 Mem, z VecPhysical) {
			VMOVDQU(m0.Offset(2), z.AsY())
			VINSERTI64X4(U8(1), m1.Offset(2), z, z)
			VPXORD(Z15, z, z)
		},
	},
	{
		name: "Q4_0", bytes: 18, consts: nibConsts,
		unpack:  func(m Mem, y VecPhysical) { nib16Y(m.Offset(2), y) },
		unpack2: func(m0, m1 Mem, z VecPhysical) { nib16Pair(m0.Offset(2), m1.Offset(2), z) },
	},
	{
		// Q5_0: the nibbles at 6, plus 16 where bit j of the 32 at 2 is set.
		name: "Q5_0", bytes: 22,
		consts: func(pairs bool) {
			nibConsts(pairs)
			MOVL(U32(0x10101010), EAX)
			VPBROADCASTD(EAX, Z12)
		},
		unpack: func(m Mem, y VecPhysical) {
			nib16Y(m.Offset(6), y)
			KMOVD(m.Offset(2), K2)
			VPADDB(Y12, y, K2, y)
		},
		unpack2: func(m0, m1 Mem, z VecPhysical) {
			nib16Pair(m0.Offset(6), m1.Offset(6), z)
			KMOVD(m0.Offset(2), K2)
			KMOVD(m1.Offset(2), K3)
			KUNPCKDQ(K2, K3, K2) // row r low, r+1 high
			VPADDB(Z12, z, K2, z)
		},
	},
	{
		name: "IQ4_NL", bytes: 18,
		consts: func(pairs bool) {
			nibConsts(pairs)
			VMOVDQU64(iq4Table, Z12)
		},
		unpack: func(m Mem, y VecPhysical) {
			nib16Y(m.Offset(2), y)
			VPSHUFB(y, Y12, y)
		},
		unpack2: func(m0, m1 Mem, z VecPhysical) {
			nib16Pair(m0.Offset(2), m1.Offset(2), z)
			VPSHUFB(z, Z12, z)
		},
	},
}

// q32zFamily generates the kernels of every type; suffix is appended to
// their names.
func q32zFamily(suffix string) {
	q32zData = GLOBL("q32zshifts", RODATA|NOPTR)
	for i := 0; i < 8; i++ {
		DATA(8*i, U64(uint64(i%4/2)*0x0004000400040004))
	}
	for _, t := range q32zTypes {
		q32zRows(t, suffix)
		q32zRows4(t, suffix)
		q32zPairs(t, suffix, 4)
		if t.name != "Q8_0" { // bound by memory: no gain (rowdot512_amd64.go)
			q32zPairs(t, suffix, 1)
		}
	}
}

// scales4 sets X3 to the float32 fp16 scales of the four blocks at m: the
// words 0, b, 2b, 3b (b = bytes/2) gathered by VPERMW (VPERMT2W when they
// span two 64-byte vectors) with the control in Z26.
func (t q32z) scales4(m Mem, x VecPhysical) {
	if 4*t.bytes <= 64 {
		VPERMW(m, Z26, x.AsZ())
	} else {
		VMOVDQU64(m, x.AsZ())
		VPERMT2W(m.Offset(64), Z26, x.AsZ())
	}
	VCVTPH2PS(x, x)
}

// scaleControl loads the word positions of four blocks' scales into X26.
func (t q32z) scaleControl() {
	b := uint64(t.bytes / 2)
	MOVQ(U64(b<<16|2*b<<32|3*b<<48), RAX)
	VMOVQ(RAX, X26)
}

// prefetchBlocks prefetches the bytes of k blocks at each base pf1 ahead
// into L2, a line per 64 bytes.
func prefetchBlocks(t q32z, k int, bases ...GPPhysical) {
	for _, b := range bases {
		for off := 0; off < k*t.bytes; off += 64 {
			PREFETCHT1(Mem{Base: b, Disp: pf1 + off})
		}
	}
}

// q32zRows generates dotRows<T>VNNI: eight blocks per iteration, then
// four, then one (the same arithmetic, fewer instructions per block).
func q32zRows(t q32z, suffix string) {
	name := fmt.Sprintf("dotRows%sVNNI%s", t.name, suffix)
	text(name, NOSPLIT, "func(w *byte, wstride int, x *byte, nb, rows int, out *float32)")
	Doc(fmt.Sprintf("%s computes out[r] = dot(weight row r, x) for r < rows, %s rows wstride bytes apart, x in the q8x layout (see internal/gen/q32z.go).", name, t.name))
	frame := AllocLocal(32)
	Load(Param("w"), RSI)
	Load(Param("x"), RDI)
	Load(Param("rows"), R10)
	Load(Param("out"), RDX)
	t.consts(false)
	t.scaleControl()
	row, eight, four, one, end, done := name+"_row", name+"_8", name+"_4", name+"_1", name+"_end", name+"_done"
	Label(row)
	TESTQ(R10, R10)
	JZ(LabelRef(done))
	MOVQ(RSI, RAX)
	MOVQ(RDI, RBX)
	Load(Param("nb"), RCX)
	MOVQ(RCX, R11)
	SHLQ(U8(6), R11)
	ADDQ(RDI, R11) // the activation scales
	VXORPS(Y0, Y0, Y0)
	block := func(w VecPhysical, k int) {
		tmp := zreg(16 + k).AsY()
		VMOVDQU32(Mem{Base: RBX, Disp: 32 + 64*k}, tmp)
		raw("VPDPBUSD", Mem{Base: RBX, Disp: 64 * k}, w, tmp)
		VCVTDQ2PS(tmp, tmp)
		VFMADD231PS_BCST(frame.Offset(4*k), tmp, Y0)
	}
	for _, k := range []int{8, 4} {
		lbl, next := eight, four
		if k == 4 {
			lbl, next = four, one
		}
		Label(lbl)
		CMPQ(RCX, U8(k))
		JL(LabelRef(next))
		prefetchBlocks(t, k, RAX)
		for h := 0; h < k/4; h++ {
			t.scales4(Mem{Base: RAX, Disp: 4 * h * t.bytes}, X3)
			VMULPS(Mem{Base: R11, Disp: 16 * h}, X3, X3)
			VMOVUPS(X3, frame.Offset(16*h))
		}
		for j := 0; j < k; j++ {
			t.unpack(Mem{Base: RAX, Disp: j * t.bytes}, yreg(4+j))
		}
		for j := 0; j < k; j++ {
			block(yreg(4+j), j)
		}
		ADDQ(U32(k*t.bytes), RAX)
		ADDQ(U32(64*k), RBX)
		ADDQ(U8(4*k), R11)
		SUBQ(U8(k), RCX)
		if k == 8 {
			JMP(LabelRef(eight))
		}
	}
	Label(one)
	TESTQ(RCX, RCX)
	JZ(LabelRef(end))
	MOVWLZX(Mem{Base: RAX}, R12L)
	VMOVD(R12L, X3)
	VCVTPH2PS(X3, X3)
	VMULSS(Mem{Base: R11}, X3, X3)
	VMOVSS(X3, frame)
	t.unpack(Mem{Base: RAX}, Y4)
	block(Y4, 0)
	ADDQ(U32(t.bytes), RAX)
	ADDQ(U8(64), RBX)
	ADDQ(U8(4), R11)
	DECQ(RCX)
	JMP(LabelRef(one))
	Label(end)
	hsum2(Y0, X1)
	VMOVSS(X0, Mem{Base: RDX})
	Load(Param("wstride"), R12)
	ADDQ(R12, RSI)
	ADDQ(U8(4), RDX)
	DECQ(R10)
	JMP(LabelRef(row))
	Label(done)
	VZEROUPPER()
	RET()
}

// q32zRows4 generates dotRows<T>x4VNNI: one block of a weight row is
// unpacked once for four activation rows.
func q32zRows4(t q32z, suffix string) {
	name := fmt.Sprintf("dotRows%sx4VNNI%s", t.name, suffix)
	text(name, NOSPLIT, "func(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)")
	Doc(fmt.Sprintf("%s computes out[r + i*ostride] = dot(weight row r, x row i) for r < rows, i < 4 (see internal/gen/q32z.go).", name))
	Load(Param("w"), RSI)
	Load(Param("xstride"), R8)
	Load(Param("rows"), R10)
	Load(Param("out"), RDX)
	t.consts(false)
	row, blk, end, done := name+"_row", name+"_block", name+"_end", name+"_done"
	Label(row)
	TESTQ(R10, R10)
	JZ(LabelRef(done))
	MOVQ(RSI, RAX)
	Load(Param("x"), RBX)
	Load(Param("nb"), RCX)
	MOVQ(RCX, R11)
	SHLQ(U8(6), R11)
	ADDQ(RBX, R11) // row 0's scales; row i's are i*xstride further
	LEAQ(Mem{Base: RBX, Index: R8, Scale: 2}, RDI)
	LEAQ(Mem{Base: R11, Index: R8, Scale: 2}, R9)
	for i := 0; i < 4; i++ {
		VXORPS(yreg(i), yreg(i), yreg(i))
	}
	Label(blk)
	TESTQ(RCX, RCX)
	JZ(LabelRef(end))
	PREFETCHT1(Mem{Base: RAX, Disp: pf1})
	MOVWLZX(Mem{Base: RAX}, R12L)
	VMOVD(R12L, X5)
	VCVTPH2PS(X5, X5)
	VBROADCASTSS(X5, Y5)
	t.unpack(Mem{Base: RAX}, Y4)
	// Activation rows 0 and 2 at RBX/R11 and RDI/R9; 1 and 3 R8 further.
	for i := 0; i < 4; i++ {
		xb, xd := RBX, R11
		if i >= 2 {
			xb, xd = RDI, R9
		}
		qm, cm, dm := Mem{Base: xb}, Mem{Base: xb, Disp: 32}, Mem{Base: xd}
		if i%2 == 1 {
			qm, cm, dm = Mem{Base: xb, Index: R8, Scale: 1}, Mem{Base: xb, Index: R8, Scale: 1, Disp: 32}, Mem{Base: xd, Index: R8, Scale: 1}
		}
		tt, d := zreg(16+2*i).AsY(), zreg(17+2*i).AsY()
		VMOVDQU32(cm, tt)
		raw("VPDPBUSD", qm, Y4, tt)
		VCVTDQ2PS(tt, tt)
		VMULPS_BCST(dm, Y5, d)
		VFMADD231PS(tt, d, yreg(i))
	}
	ADDQ(U32(t.bytes), RAX)
	ADDQ(U8(64), RBX)
	ADDQ(U8(64), RDI)
	ADDQ(U8(4), R11)
	ADDQ(U8(4), R9)
	DECQ(RCX)
	JMP(LabelRef(blk))
	Label(end)
	Load(Param("ostride"), R12)
	SHLQ(U8(2), R12)
	MOVQ(RDX, R13)
	for i := 0; i < 4; i++ {
		hsum2(yreg(i), X6)
		VMOVSS(yreg(i).AsX(), Mem{Base: R13})
		if i < 3 {
			ADDQ(R12, R13)
		}
	}
	Load(Param("wstride"), R12)
	ADDQ(R12, RSI)
	ADDQ(U8(4), RDX)
	DECQ(R10)
	JMP(LabelRef(row))
	Label(done)
	VZEROUPPER()
	RET()
}

// q32zPairs generates dotPairs<T>VNNI (A = 4 activation rows) and
// dotPairs1<T>VNNI (A = 1): a 512-bit vector holds one block of weight row
// r in its low half and row r+1's in its high half; each activation block
// is broadcast to both halves. With one activation row this halves the
// chain of dependent multiply-adds per weight row that bounds dotRows<T>.
func q32zPairs(t q32z, suffix string, A int) {
	name := fmt.Sprintf("dotPairs%sVNNI%s", t.name, suffix)
	if A == 1 {
		name = fmt.Sprintf("dotPairs1%sVNNI%s", t.name, suffix)
		text(name, NOSPLIT, "func(w *byte, wstride int, x *byte, nb, rows int, out *float32)")
		Doc(fmt.Sprintf("%s is dotRows%sVNNI for an even number of rows, two at a time (see internal/gen/q32z.go).", name, t.name))
	} else {
		text(name, NOSPLIT, "func(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)")
		Doc(fmt.Sprintf("%s is dotRows%sx4VNNI for an even number of rows, two at a time (see internal/gen/q32z.go).", name, t.name))
	}
	t.consts(true)
	t.scaleControl()
	VMOVQ(X26, X28)
	// VPERMPS controls: block k's scale of row r (lane k of Z8) in the low
	// eight lanes, of row r+1 (lane 4+k) in the high eight.
	for k := 0; k < 4; k++ {
		MOVL(U32(k), EAX)
		VPBROADCASTD(EAX, zreg(24+k).AsY())
		MOVL(U32(4+k), EAX)
		VPBROADCASTD(EAX, Y30)
		VINSERTI64X4(U8(1), Y30, zreg(24+k), zreg(24+k))
	}
	Load(Param("w"), RSI)
	if A > 1 {
		Load(Param("xstride"), R8)
	}
	Load(Param("rows"), R10)
	Load(Param("out"), RDX)
	pair, four, one, end, done := name+"_pair", name+"_4", name+"_1", name+"_end", name+"_done"
	Label(pair)
	CMPQ(R10, U8(2))
	JL(LabelRef(done))
	MOVQ(RSI, RAX)
	Load(Param("wstride"), RDI)
	ADDQ(RSI, RDI)
	Load(Param("x"), RBX)
	Load(Param("nb"), RCX)
	MOVQ(RCX, R11)
	SHLQ(U8(6), R11)
	ADDQ(RBX, R11)
	if A > 1 {
		LEAQ(Mem{Base: RBX, Index: R8, Scale: 2}, R12)
		LEAQ(Mem{Base: R11, Index: R8, Scale: 2}, R9)
	}
	for i := 0; i < A; i++ {
		VPXORD(zreg(i), zreg(i), zreg(i))
	}
	// pblock adds block k of both weight rows (Z4; scales in Z5) to the
	// four activation rows' accumulators.
	pblock := func(k int) {
		temps := [][2]VecPhysical{{Z6, Z7}, {Z9, Z10}, {Z11, Z16}, {Z17, Z18}}
		for i := 0; i < A; i++ {
			xb, xd := RBX, R11
			if i >= 2 {
				xb, xd = R12, R9
			}
			idx := func(m Mem) Mem {
				if i%2 == 1 {
					m.Index, m.Scale = R8, 1
				}
				return m
			}
			tt, d := temps[i][0], temps[i][1]
			VBROADCASTI64X4(idx(Mem{Base: xb, Disp: 32 + 64*k}), tt)
			VBROADCASTI64X4(idx(Mem{Base: xb, Disp: 64 * k}), d)
			raw("VPDPBUSD", d, Z4, tt)
			VCVTDQ2PS(tt, tt)
			VMULPS_BCST(idx(Mem{Base: xd, Disp: 4 * k}), Z5, d)
			VFMADD231PS(tt, d, zreg(i))
		}
	}
	Label(four)
	CMPQ(RCX, U8(4))
	JL(LabelRef(one))
	prefetchBlocks(t, 4, RAX, RDI)
	// The four blocks' scales of both rows: [r: 4 | r+1: 4] in Y8.
	if 4*t.bytes <= 64 {
		VPERMW(Mem{Base: RAX}, Z28, Z8)
		VPERMW(Mem{Base: RDI}, Z28, Z9)
	} else {
		VMOVDQU64(Mem{Base: RAX}, Z8)
		VPERMT2W(Mem{Base: RAX, Disp: 64}, Z28, Z8)
		VMOVDQU64(Mem{Base: RDI}, Z9)
		VPERMT2W(Mem{Base: RDI, Disp: 64}, Z28, Z9)
	}
	VPUNPCKLQDQ(X9, X8, X8)
	VCVTPH2PS(X8, Y8)
	for k := 0; k < 4; k++ {
		t.unpack2(Mem{Base: RAX, Disp: k * t.bytes}, Mem{Base: RDI, Disp: k * t.bytes}, Z4)
		VPERMPS(Z8, zreg(24+k), Z5)
		pblock(k)
	}
	ADDQ(U32(4*t.bytes), RAX)
	ADDQ(U32(4*t.bytes), RDI)
	ADDQ(U32(256), RBX)
	ADDQ(U8(16), R11)
	if A > 1 {
		ADDQ(U32(256), R12)
		ADDQ(U8(16), R9)
	}
	SUBQ(U8(4), RCX)
	JMP(LabelRef(four))
	Label(one)
	TESTQ(RCX, RCX)
	JZ(LabelRef(end))
	VPBROADCASTW(Mem{Base: RAX}, X8)
	VPBROADCASTW(Mem{Base: RDI}, X9)
	VINSERTI128(U8(1), X9, Y8, Y8)
	VCVTPH2PS(Y8, Z5)
	t.unpack2(Mem{Base: RAX}, Mem{Base: RDI}, Z4)
	pblock(0)
	ADDQ(U32(t.bytes), RAX)
	ADDQ(U32(t.bytes), RDI)
	ADDQ(U8(64), RBX)
	ADDQ(U8(4), R11)
	if A > 1 {
		ADDQ(U8(64), R12)
		ADDQ(U8(4), R9)
	}
	DECQ(RCX)
	JMP(LabelRef(one))
	Label(end)
	if A > 1 {
		Load(Param("ostride"), R13)
		SHLQ(U8(2), R13)
	}
	MOVQ(RDX, RCX)
	for i := 0; i < A; i++ {
		a := zreg(i)
		VEXTRACTF64X4(U8(1), a, Y6)
		hsum2(a.AsY().(VecPhysical), X7)
		VMOVSS(a.AsX(), Mem{Base: RCX})
		hsum2(Y6, X7)
		VMOVSS(X6, Mem{Base: RCX, Disp: 4})
		if i < A-1 {
			ADDQ(R13, RCX)
		}
	}
	Load(Param("wstride"), R13)
	LEAQ(Mem{Base: RSI, Index: R13, Scale: 2}, RSI)
	ADDQ(U8(8), RDX)
	SUBQ(U8(2), R10)
	JMP(LabelRef(pair))
	Label(done)
	VZEROUPPER()
	RET()
}
