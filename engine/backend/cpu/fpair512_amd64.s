//go:build amd64

#include "textflag.h"
#include "simd512.h"

// Batched float kernels: pairs of weight rows (F32, F16, BF16) against four
// activation rows, with AVX-512 F. Each (weight row, activation row) has
// the two 512-bit accumulators of fdot512_amd64.s ([acc0|acc1] for
// elements 32j..32j+15, [acc2|acc3] for 32j+16..32j+31), the 8-element
// tail goes into acc0 alone (a merge-masked fma on the low eight lanes) and
// the reduction is (acc0+acc1)+(acc2+acc3) and the AVX2 horizontal sum: the
// arithmetic of dotRowsF16AVX and its siblings, bit for bit. Each weight
// vector serves four activation rows and each activation vector two weight
// rows, so a multiply-add needs 0.75 loads instead of 1.25.
//
// func dotPairsF32Z(w *float32, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
// func dotPairsF16Z(w *uint16, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
// func dotPairsBF16Z(w *uint16, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
//
// out[r + i*ostride] = dot(weight row r, activation row i) for r < rows
// (even), i < 4; n is a multiple of 8.

// Registers: AX, DI weight rows r and r+1; BX, R12, R13, R9 activation
// rows 0-3; CX elements left; DX out; R10 rows left; SI row r's start.
// Accumulators: Z(i) and Z(4+i) for row r and activation row i, Z(8+i) and
// Z(12+i) for row r+1. Z16-Z19 weights, Z20-Z27 activations, K1 = 0xff.

// Loads of 16 (Z) or 8 (Y) weights at OFF(B) as float32.
#define F32P16(OFF, B, Z) VMOVUPS OFF(B), Z
#define F32P8(OFF, B, Y) VMOVUPS OFF(B), Y
#define F16P16(OFF, B, Z) VCVTPH2PS OFF(B), Z
#define F16P8(OFF, B, Y) VCVTPH2PS OFF(B), Y
#define BF16P16(OFF, B, Z) VPMOVZXWD OFF(B), Z; VPSLLD $16, Z, Z
#define BF16P8(OFF, B, Y) VPMOVZXWD OFF(B), Y; VPSLLD $16, Y, Y

#define PPF128 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT0 PF0+64(AX); \
	PREFETCHT0 PF0(DI); \
	PREFETCHT0 PF0+64(DI); \
	PREFETCHT1 PF1(AX); \
	PREFETCHT1 PF1+64(AX); \
	PREFETCHT1 PF1(DI); \
	PREFETCHT1 PF1+64(DI)
#define PPF64 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT0 PF0(DI); \
	PREFETCHT1 PF1(AX); \
	PREFETCHT1 PF1(DI)

// XROW multiplies 32 activations of one row (at XB) with both rows'
// weights.
#define XROW(XB, XA, XH, A0, B0, A1, B1) \
	VMOVUPS     (XB), XA; \
	VMOVUPS     64(XB), XH; \
	VFMADD231PS XA, Z16, A0; \
	VFMADD231PS XH, Z17, B0; \
	VFMADD231PS XA, Z18, A1; \
	VFMADD231PS XH, Z19, B1

// XTAIL adds 8 activations of one row (at XB) times both rows' weights to
// the low eight lanes of A0 and A1.
#define XTAIL(XB, XA, XAY, A0, A1) \
	VMOVUPS     (XB), XAY; \
	VFMADD231PS XA, Z16, K1, A0; \
	VFMADD231PS XA, Z18, K1, A1

// SUMSTORE reduces one (weight row, activation row) pair's accumulators A
// and B (YA, YB their low halves) and stores the sum at OUT.
#define SUMSTORE(A, B, YA, YB, XA, XB, OUT) \
	VEXTRACTF64X4 $1, A, Y28; \
	VEXTRACTF64X4 $1, B, Y29; \
	VADDPS        Y28, YA, YA; \
	VADDPS        Y29, YB, YB; \
	VADDPS        YB, YA, YA; \
	HSUMPS(YA, XA, XB); \
	MOVSS         XA, OUT

#define FPAIRS(NAME, WS, P16, P8, PF) \
TEXT NAME(SB), NOSPLIT, $0-64; \
	MOVL  $0xff, AX; \
	KMOVW AX, K1; \
	MOVQ  w+0(FP), SI; \
	MOVQ  rows+40(FP), R10; \
	MOVQ  out+48(FP), DX; \
pairloop: \
	CMPQ   R10, $2; \
	JL     done; \
	MOVQ   SI, AX; \
	MOVQ   wstride+8(FP), DI; \
	ADDQ   SI, DI; \
	MOVQ   x+16(FP), BX; \
	MOVQ   xstride+24(FP), R8; \
	LEAQ   (BX)(R8*1), R12; \
	LEAQ   (BX)(R8*2), R13; \
	LEAQ   (R12)(R8*2), R9; \
	MOVQ   n+32(FP), CX; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
loop32: \
	CMPQ CX, $32; \
	JL   loop8; \
	PF; \
	P16(0, AX, Z16); \
	P16(16*WS, AX, Z17); \
	P16(0, DI, Z18); \
	P16(16*WS, DI, Z19); \
	XROW(BX, Z20, Z21, Z0, Z4, Z8, Z12); \
	XROW(R12, Z22, Z23, Z1, Z5, Z9, Z13); \
	XROW(R13, Z24, Z25, Z2, Z6, Z10, Z14); \
	XROW(R9, Z26, Z27, Z3, Z7, Z11, Z15); \
	ADDQ $32*WS, AX; \
	ADDQ $32*WS, DI; \
	ADDQ $128, BX; \
	ADDQ $128, R12; \
	ADDQ $128, R13; \
	ADDQ $128, R9; \
	SUBQ $32, CX; \
	JMP  loop32; \
loop8: \
	CMPQ CX, $8; \
	JL   pairend; \
	P8(0, AX, Y16); \
	P8(0, DI, Y18); \
	XTAIL(BX, Z20, Y20, Z0, Z8); \
	XTAIL(R12, Z22, Y22, Z1, Z9); \
	XTAIL(R13, Z24, Y24, Z2, Z10); \
	XTAIL(R9, Z26, Y26, Z3, Z11); \
	ADDQ $8*WS, AX; \
	ADDQ $8*WS, DI; \
	ADDQ $32, BX; \
	ADDQ $32, R12; \
	ADDQ $32, R13; \
	ADDQ $32, R9; \
	SUBQ $8, CX; \
	JMP  loop8; \
pairend: \
	MOVQ ostride+56(FP), R11; \
	SHLQ $2, R11; \
	LEAQ (R11)(R11*2), CX; \
	SUMSTORE(Z0, Z4, Y0, Y4, X0, X4, (DX)); \
	SUMSTORE(Z1, Z5, Y1, Y5, X1, X5, (DX)(R11*1)); \
	SUMSTORE(Z2, Z6, Y2, Y6, X2, X6, (DX)(R11*2)); \
	SUMSTORE(Z3, Z7, Y3, Y7, X3, X7, (DX)(CX*1)); \
	SUMSTORE(Z8, Z12, Y8, Y12, X8, X12, 4(DX)); \
	SUMSTORE(Z9, Z13, Y9, Y13, X9, X13, 4(DX)(R11*1)); \
	SUMSTORE(Z10, Z14, Y10, Y14, X10, X14, 4(DX)(R11*2)); \
	SUMSTORE(Z11, Z15, Y11, Y15, X11, X15, 4(DX)(CX*1)); \
	MOVQ wstride+8(FP), R11; \
	LEAQ (SI)(R11*2), SI; \
	ADDQ $8, DX; \
	SUBQ $2, R10; \
	JMP  pairloop; \
done: \
	VZEROUPPER; \
	RET

FPAIRS(·dotPairsF32Z, 4, F32P16, F32P8, PPF128)

FPAIRS(·dotPairsF16Z, 2, F16P16, F16P8, PPF64)

FPAIRS(·dotPairsBF16Z, 2, BF16P16, BF16P8, PPF64)
