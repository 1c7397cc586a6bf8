package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Row kernels of the float weight types (F32, F16, BF16) against float32
// activations (for F16 and BF16 already rounded to the weight type's
// precision), n a multiple of 8 (the Go wrappers add the tails):
//
//	dot<T>F32AVX(w, x, n) float32                  one row (AVX2)
//	dotRows<T>AVX(w, wstride, x, n, rows, out)     many rows (AVX2)
//	dotRows<T>Z(w, wstride, x, n, rows, out)       many rows (AVX-512)
//	dotRows<T>x4Z(w, wstride, x, xstride, n, rows, out, ostride)
//	                                               many rows by 4 activation rows
//	dotPairs<T>Z(w, wstride, x, xstride, n, rows, out, ostride)
//	                                               the same, two weight rows at a time (rows even)
//
// Per output, one arithmetic: four 8-lane accumulators, elements
// 32j..32j+7 into acc0, +8 into acc1, +16 into acc2, +24 into acc3 (one
// fma per 8 elements, in element order), the 8-element tail into acc0;
// then (acc0+acc1)+(acc2+acc3) and HSUMPS's horizontal sum. A 512-bit
// accumulator holds two of them side by side ([acc0|acc1], [acc2|acc3]), so
// the AVX-512 kernels give the AVX2 kernels' bits. The weight stream is
// prefetched pf1 bytes ahead into L2, a line per 64 bytes of weights.

// pf1 is the prefetch distance of the row kernels, in bytes ahead of the
// weight stream, into L2 (PREFETCHT1). Decode is bound by memory
// bandwidth, and the hardware prefetchers alone keep too few lines in
// flight: this far prefetch is what brings a decode step close to the
// machine's read bandwidth (measured: +50% tokens/s on a 245M-parameter
// Q8_0 model). A near prefetch into L1 (1 KiB ahead) used to go with it;
// on this Zen 5 it cost a fifth of the bandwidth (BenchmarkMatMulDRAM
// without it: F16 +23%, Q8_0 +10%, Q4_0 +8%; F16 decode of the 245M model
// +16-25%), so the L1 is left to the hardware. Prefetches past the end of
// the weights are harmless (they never fault), and they change nothing in
// the arithmetic.
const pf1 = 8192

// floatType describes one float weight type to the generators.
type floatType struct {
	name string
	size int // bytes per weight
	// load sets v (a Y or Z register) to 8 or 16 weights at m as float32.
	load func(m Mem, v VecPhysical)
}

var floatTypes = []floatType{
	{"F32", 4, func(m Mem, v VecPhysical) { VMOVUPS(m, v) }},
	{"F16", 2, func(m Mem, v VecPhysical) { VCVTPH2PS(m, v) }},
	{"BF16", 2, func(m Mem, v VecPhysical) { VPMOVZXWD(m, v); VPSLLD(U8(16), v, v) }},
}

// floatFamily generates the float row kernels; suffix is appended to
// every name.
func floatFamily(suffix string) {
	for _, t := range floatTypes {
		if t.name != "F32" {
			frowAVX(t, suffix)
		}
		frowsAVX(t, suffix)
		frowsZ(t, suffix)
		frows4Z(t, suffix)
		fpairsZ(t, suffix)
	}
	roundF16()
}

// roundF16 generates roundF16AVX(dst, src *float32, n int):
// dst = float32(half(src)), to nearest even, n a multiple of 8.
func roundF16() {
	text("roundF16AVX", NOSPLIT, "func(dst, src *float32, n int)")
	Doc("roundF16AVX rounds n floats to half precision, kept as float32 (see internal/gen/frows.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	loop, done := "roundF16AVX_8", "roundF16AVX_done"
	Label(loop)
	CMPQ(RCX, U8(8))
	JL(LabelRef(done))
	VMOVUPS(Mem{Base: RSI}, Y0)
	VCVTPS2PH(U8(0), Y0, X1)
	VCVTPH2PS(X1, Y1)
	VMOVUPS(Y1, Mem{Base: RDI})
	ADDQ(U8(32), RSI)
	ADDQ(U8(32), RDI)
	SUBQ(U8(8), RCX)
	JMP(LabelRef(loop))
	Label(done)
	VZEROUPPER()
	RET()

	text("roundF16Z", NOSPLIT, "func(dst, src *float32, n int)")
	Doc("roundF16Z is roundF16AVX with AVX-512, 32 at a time; n a positive multiple of 32.")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("n"), RCX)
	Label("roundF16Z_32")
	for i := 0; i < 2; i++ {
		z := zreg(i)
		VMOVUPS(Mem{Base: RSI, Disp: 64 * i}, z)
		VCVTPS2PH(U8(0), z, z.AsY())
		VCVTPH2PS(z.AsY(), z)
		VMOVUPS(z, Mem{Base: RDI, Disp: 64 * i})
	}
	ADDQ(U32(128), RSI)
	ADDQ(U32(128), RDI)
	SUBQ(U8(32), RCX)
	JNZ(LabelRef("roundF16Z_32"))
	VZEROUPPER()
	RET()
}

// prefetchWeights prefetches the bytes of one 32-element step of weights
// at base.
func prefetchWeights(t floatType, bases ...GPPhysical) {
	for _, b := range bases {
		for off := 0; off < 32*t.size; off += 64 {
			PREFETCHT1(Mem{Base: b, Disp: pf1 + off})
		}
	}
}

// frowBody emits one row's product of the weights at AX with x at BX over
// CX elements into Y0 (the reduced sum in X0). It uses Y0-Y7.
func frowBody(t floatType, label string) {
	for i := 0; i < 4; i++ {
		VXORPS(yreg(i), yreg(i), yreg(i))
	}
	loop32, loop8, end := label+"_32", label+"_8", label+"_end"
	Label(loop32)
	CMPQ(RCX, U8(32))
	JL(LabelRef(loop8))
	prefetchWeights(t, RAX)
	for i := 0; i < 4; i++ {
		t.load(Mem{Base: RAX, Disp: 8 * t.size * i}, yreg(4+i))
	}
	for i := 0; i < 4; i++ {
		VFMADD231PS(Mem{Base: RBX, Disp: 32 * i}, yreg(4+i), yreg(i))
	}
	ADDQ(U32(32*t.size), RAX)
	ADDQ(U8(128), RBX)
	SUBQ(U8(32), RCX)
	JMP(LabelRef(loop32))
	Label(loop8)
	CMPQ(RCX, U8(8))
	JL(LabelRef(end))
	t.load(Mem{Base: RAX}, Y4)
	VFMADD231PS(Mem{Base: RBX}, Y4, Y0)
	ADDQ(U32(8*t.size), RAX)
	ADDQ(U8(32), RBX)
	SUBQ(U8(8), RCX)
	JMP(LabelRef(loop8))
	Label(end)
	VADDPS(Y1, Y0, Y0)
	VADDPS(Y3, Y2, Y2)
	VADDPS(Y2, Y0, Y0)
	hsum2(Y0, X1)
}

// frowAVX generates dot<T>F32AVX(w *uint16, x *float32, n int) float32.
func frowAVX(t floatType, suffix string) {
	name := fmt.Sprintf("dot%sF32AVX%s", t.name, suffix)
	text(name, NOSPLIT, "func(w *uint16, x *float32, n int) float32")
	Doc(fmt.Sprintf("%s is the dot product of n %s weights with n float32 activations (see internal/gen/frows.go).", name, t.name))
	Load(Param("w"), RAX)
	Load(Param("x"), RBX)
	Load(Param("n"), RCX)
	frowBody(t, name)
	Store(X0, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// wPtr is the Go type of a weight pointer.
func wPtr(t floatType) string {
	if t.name == "F32" {
		return "*float32"
	}
	return "*uint16"
}

// frowsAVX generates dotRows<T>AVX.
func frowsAVX(t floatType, suffix string) {
	name := fmt.Sprintf("dotRows%sAVX%s", t.name, suffix)
	text(name, NOSPLIT, fmt.Sprintf("func(w %s, wstride int, x *float32, n, rows int, out *float32)", wPtr(t)))
	Doc(fmt.Sprintf("%s computes out[r] = dot(weight row r, x) for r < rows, %s rows wstride bytes apart (see internal/gen/frows.go).", name, t.name))
	Load(Param("w"), RSI)
	Load(Param("wstride"), R8)
	Load(Param("x"), RDI)
	Load(Param("n"), R9)
	Load(Param("rows"), R10)
	Load(Param("out"), RDX)
	row, done := name+"_row", name+"_done"
	Label(row)
	TESTQ(R10, R10)
	JZ(LabelRef(done))
	MOVQ(RSI, RAX)
	MOVQ(RDI, RBX)
	MOVQ(R9, RCX)
	frowBody(t, name)
	VMOVSS(X0, Mem{Base: RDX})
	ADDQ(R8, RSI)
	ADDQ(U8(4), RDX)
	DECQ(R10)
	JMP(LabelRef(row))
	Label(done)
	VZEROUPPER()
	RET()
}

// frowsZ generates dotRows<T>Z.
func frowsZ(t floatType, suffix string) {
	name := fmt.Sprintf("dotRows%sZ%s", t.name, suffix)
	text(name, NOSPLIT, fmt.Sprintf("func(w %s, wstride int, x *float32, n, rows int, out *float32)", wPtr(t)))
	Doc(fmt.Sprintf("%s is dotRows%sAVX with 512-bit vectors, the same bits (see internal/gen/frows.go).", name, t.name))
	Load(Param("w"), RSI)
	Load(Param("wstride"), R8)
	Load(Param("x"), RDI)
	Load(Param("n"), R9)
	Load(Param("rows"), R10)
	Load(Param("out"), RDX)
	row, loop32, tail, loop8, end, done := name+"_row", name+"_32", name+"_tail", name+"_8", name+"_end", name+"_done"
	Label(row)
	TESTQ(R10, R10)
	JZ(LabelRef(done))
	MOVQ(RSI, RAX)
	MOVQ(RDI, RBX)
	MOVQ(R9, RCX)
	VPXORD(Z0, Z0, Z0)
	VPXORD(Z2, Z2, Z2)
	Label(loop32)
	CMPQ(RCX, U8(32))
	JL(LabelRef(tail))
	prefetchWeights(t, RAX)
	t.load(Mem{Base: RAX}, Z4)
	t.load(Mem{Base: RAX, Disp: 16 * t.size}, Z5)
	VFMADD231PS(Mem{Base: RBX}, Z4, Z0)
	VFMADD231PS(Mem{Base: RBX, Disp: 64}, Z5, Z2)
	ADDQ(U32(32*t.size), RAX)
	ADDQ(U8(128), RBX)
	SUBQ(U8(32), RCX)
	JMP(LabelRef(loop32))
	Label(tail)
	VEXTRACTF64X4(U8(1), Z0, Y1)
	VEXTRACTF64X4(U8(1), Z2, Y3)
	Label(loop8)
	CMPQ(RCX, U8(8))
	JL(LabelRef(end))
	t.load(Mem{Base: RAX}, Y4)
	VFMADD231PS(Mem{Base: RBX}, Y4, Y0)
	ADDQ(U32(8*t.size), RAX)
	ADDQ(U8(32), RBX)
	SUBQ(U8(8), RCX)
	JMP(LabelRef(loop8))
	Label(end)
	VADDPS(Y1, Y0, Y0)
	VADDPS(Y3, Y2, Y2)
	VADDPS(Y2, Y0, Y0)
	hsum2(Y0, X1)
	VMOVSS(X0, Mem{Base: RDX})
	ADDQ(R8, RSI)
	ADDQ(U8(4), RDX)
	DECQ(R10)
	JMP(LabelRef(row))
	Label(done)
	VZEROUPPER()
	RET()
}

// frows4Z generates dotRows<T>x4Z: each weight vector is loaded and
// converted once for four activation rows.
func frows4Z(t floatType, suffix string) {
	name := fmt.Sprintf("dotRows%sx4Z%s", t.name, suffix)
	text(name, NOSPLIT, fmt.Sprintf("func(w %s, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)", wPtr(t)))
	Doc(fmt.Sprintf("%s computes out[r + i*ostride] = dot(weight row r, x row i) for r < rows, i < 4 (see internal/gen/frows.go).", name))
	xs := []GPPhysical{RBX, R12, RDI, R13}
	Load(Param("w"), RSI)
	Load(Param("xstride"), R8)
	Load(Param("rows"), R10)
	Load(Param("out"), RDX)
	row, loop32, tail, loop8, end, done := name+"_row", name+"_32", name+"_tail", name+"_8", name+"_end", name+"_done"
	Label(row)
	TESTQ(R10, R10)
	JZ(LabelRef(done))
	MOVQ(RSI, RAX)
	Load(Param("x"), RBX)
	LEAQ(Mem{Base: RBX, Index: R8, Scale: 2}, RDI)
	LEAQ(Mem{Base: RBX, Index: R8, Scale: 1}, R12)
	LEAQ(Mem{Base: RDI, Index: R8, Scale: 1}, R13)
	Load(Param("n"), RCX)
	for i := 0; i < 8; i++ {
		VPXORD(zreg(i), zreg(i), zreg(i))
	}
	Label(loop32)
	CMPQ(RCX, U8(32))
	JL(LabelRef(tail))
	prefetchWeights(t, RAX)
	t.load(Mem{Base: RAX}, Z8)
	t.load(Mem{Base: RAX, Disp: 16 * t.size}, Z9)
	for i, x := range xs {
		VFMADD231PS(Mem{Base: x}, Z8, zreg(2*i))
		VFMADD231PS(Mem{Base: x, Disp: 64}, Z9, zreg(2*i+1))
	}
	ADDQ(U32(32*t.size), RAX)
	for _, x := range xs {
		ADDQ(U8(128), x)
	}
	SUBQ(U8(32), RCX)
	JMP(LabelRef(loop32))
	Label(tail)
	for i := 0; i < 8; i++ {
		VEXTRACTF64X4(U8(1), zreg(i), zreg(16+i).AsY())
	}
	Label(loop8)
	CMPQ(RCX, U8(8))
	JL(LabelRef(end))
	t.load(Mem{Base: RAX}, Y8)
	for i, x := range xs {
		VFMADD231PS(Mem{Base: x}, Y8, yreg(2*i))
	}
	ADDQ(U32(8*t.size), RAX)
	for _, x := range xs {
		ADDQ(U8(32), x)
	}
	SUBQ(U8(8), RCX)
	JMP(LabelRef(loop8))
	Label(end)
	Load(Param("ostride"), R9)
	SHLQ(U8(2), R9)
	MOVQ(RDX, R11)
	for i := 0; i < 4; i++ {
		a, b := yreg(2*i), yreg(2*i+1)
		VADDPS(zreg(16+2*i).AsY(), a, a)
		VADDPS(zreg(17+2*i).AsY(), b, b)
		VADDPS(b, a, a)
		hsum2(a, X8)
		VMOVSS(a.AsX(), Mem{Base: R11})
		if i < 3 {
			ADDQ(R9, R11)
		}
	}
	Load(Param("wstride"), R9)
	ADDQ(R9, RSI)
	ADDQ(U8(4), RDX)
	DECQ(R10)
	JMP(LabelRef(row))
	Label(done)
	VZEROUPPER()
	RET()
}

// fpairsZ generates dotPairs<T>Z: each weight vector serves four
// activation rows and each activation vector two weight rows. The tail
// goes into the low eight lanes of acc0 by a merge-masked fma (K1 = 0xff).
func fpairsZ(t floatType, suffix string) {
	name := fmt.Sprintf("dotPairs%sZ%s", t.name, suffix)
	text(name, NOSPLIT, fmt.Sprintf("func(w %s, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)", wPtr(t)))
	Doc(fmt.Sprintf("%s computes out[r + i*ostride] = dot(weight row r, x row i) for r < rows (even), i < 4, two weight rows at a time (see internal/gen/frows.go).", name))
	xs := []GPPhysical{RBX, R12, R13, R9}
	// Accumulators: Z(i) and Z(4+i) for row r and activation row i,
	// Z(8+i) and Z(12+i) for row r+1.
	MOVL(U32(0xff), EAX)
	KMOVW(EAX, K1)
	Load(Param("w"), RSI)
	Load(Param("rows"), R10)
	Load(Param("out"), RDX)
	pair, loop32, loop8, end, done := name+"_pair", name+"_32", name+"_8", name+"_end", name+"_done"
	Label(pair)
	CMPQ(R10, U8(2))
	JL(LabelRef(done))
	MOVQ(RSI, RAX)
	Load(Param("wstride"), RDI)
	ADDQ(RSI, RDI)
	Load(Param("x"), RBX)
	Load(Param("xstride"), R8)
	LEAQ(Mem{Base: RBX, Index: R8, Scale: 1}, R12)
	LEAQ(Mem{Base: RBX, Index: R8, Scale: 2}, R13)
	LEAQ(Mem{Base: R12, Index: R8, Scale: 2}, R9)
	Load(Param("n"), RCX)
	for i := 0; i < 16; i++ {
		VPXORD(zreg(i), zreg(i), zreg(i))
	}
	Label(loop32)
	CMPQ(RCX, U8(32))
	JL(LabelRef(loop8))
	prefetchWeights(t, RAX, RDI)
	t.load(Mem{Base: RAX}, Z16)
	t.load(Mem{Base: RAX, Disp: 16 * t.size}, Z17)
	t.load(Mem{Base: RDI}, Z18)
	t.load(Mem{Base: RDI, Disp: 16 * t.size}, Z19)
	for i, x := range xs {
		xa, xh := zreg(20+2*i), zreg(21+2*i)
		VMOVUPS(Mem{Base: x}, xa)
		VMOVUPS(Mem{Base: x, Disp: 64}, xh)
		VFMADD231PS(xa, Z16, zreg(i))
		VFMADD231PS(xh, Z17, zreg(4+i))
		VFMADD231PS(xa, Z18, zreg(8+i))
		VFMADD231PS(xh, Z19, zreg(12+i))
	}
	ADDQ(U32(32*t.size), RAX)
	ADDQ(U32(32*t.size), RDI)
	for _, x := range xs {
		ADDQ(U8(128), x)
	}
	SUBQ(U8(32), RCX)
	JMP(LabelRef(loop32))
	Label(loop8)
	CMPQ(RCX, U8(8))
	JL(LabelRef(end))
	t.load(Mem{Base: RAX}, Y16)
	t.load(Mem{Base: RDI}, Y18)
	for i, x := range xs {
		xa := zreg(20 + 2*i)
		VMOVUPS(Mem{Base: x}, xa.AsY())
		VFMADD231PS(xa, Z16, K1, zreg(i))
		VFMADD231PS(xa, Z18, K1, zreg(8+i))
	}
	ADDQ(U32(8*t.size), RAX)
	ADDQ(U32(8*t.size), RDI)
	for _, x := range xs {
		ADDQ(U8(32), x)
	}
	SUBQ(U8(8), RCX)
	JMP(LabelRef(loop8))
	Label(end)
	Load(Param("ostride"), R11)
	SHLQ(U8(2), R11)
	for half := 0; half < 2; half++ {
		for i := 0; i < 4; i++ {
			a, b := zreg(8*half+i), zreg(8*half+4+i)
			VEXTRACTF64X4(U8(1), a, Y28)
			VEXTRACTF64X4(U8(1), b, Y29)
			VADDPS(Y28, a.AsY(), a.AsY())
			VADDPS(Y29, b.AsY(), b.AsY())
			VADDPS(b.AsY(), a.AsY(), a.AsY())
			hsum2(a.AsY().(VecPhysical), b.AsX().(VecPhysical))
			// out + i*ostride (+4 for row r+1)
			MOVQ(RDX, RCX)
			for k := 0; k < i; k++ {
				ADDQ(R11, RCX)
			}
			VMOVSS(a.AsX(), Mem{Base: RCX, Disp: 4 * half})
		}
	}
	Load(Param("wstride"), R11)
	LEAQ(Mem{Base: RSI, Index: R11, Scale: 2}, RSI)
	ADDQ(U8(8), RDX)
	SUBQ(U8(2), R10)
	JMP(LabelRef(pair))
	Label(done)
	VZEROUPPER()
	RET()
}
