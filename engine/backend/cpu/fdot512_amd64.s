//go:build amd64

#include "textflag.h"
#include "simd512.h"

// Float weight rows (F32, F16, BF16) against float32 activations with
// AVX-512 F. A 512-bit accumulator holds two of the AVX2 kernels' four
// 8-lane accumulators side by side: elements 32j..32j+15 go to [acc0|acc1]
// and 32j+16..32j+31 to [acc2|acc3], exactly the lanes dotRowsF16AVX and
// its siblings use. The 8-element tail goes to acc0 and the reduction is
// (acc0+acc1)+(acc2+acc3), then the same horizontal sum, so every result
// is bit-identical to the AVX2 kernels'. n is a multiple of 8 (the Go
// wrappers add the tails).
//
// The weight stream is prefetched into L1 and L2 (see prefetch.h), one
// line per 64 bytes of weights at each distance.

// Loads of 16 (Z) or 8 (Y) weights at OFF(AX) as float32.
#define F32L16(OFF, Z) VMOVUPS OFF(AX), Z
#define F32L8(OFF, Y) VMOVUPS OFF(AX), Y
#define F16L16(OFF, Z) VCVTPH2PS OFF(AX), Z
#define F16L8(OFF, Y) VCVTPH2PS OFF(AX), Y
#define BF16L16(OFF, Z) VPMOVZXWD OFF(AX), Z; VPSLLD $16, Z, Z
#define BF16L8(OFF, Y) VPMOVZXWD OFF(AX), Y; VPSLLD $16, Y, Y

// Prefetches for one iteration of 32 weights: 128 bytes of F32, 64 of the
// 16-bit types.
#define PF128 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT0 PF0+64(AX); \
	PREFETCHT1 PF1(AX); \
	PREFETCHT1 PF1+64(AX)
#define PF64 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT1 PF1(AX)

// ROWSF generates out[r] = dot(weight row r, x) for r < rows, weight rows
// wstride bytes apart, WS bytes per weight.
#define ROWSF(NAME, WS, L16, L8, PF) \
TEXT NAME(SB), NOSPLIT, $0-48; \
	MOVQ w+0(FP), SI; \
	MOVQ wstride+8(FP), R8; \
	MOVQ x+16(FP), DI; \
	MOVQ n+24(FP), R9; \
	MOVQ rows+32(FP), R10; \
	MOVQ out+40(FP), DX; \
rowloop: \
	TESTQ  R10, R10; \
	JZ     done; \
	MOVQ   SI, AX; \
	MOVQ   DI, BX; \
	MOVQ   R9, CX; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z2, Z2, Z2; \
loop32: \
	CMPQ        CX, $32; \
	JL          tail; \
	PF; \
	L16(0, Z4); \
	L16(16*WS, Z5); \
	VFMADD231PS (BX), Z4, Z0; \
	VFMADD231PS 64(BX), Z5, Z2; \
	ADDQ        $32*WS, AX; \
	ADDQ        $128, BX; \
	SUBQ        $32, CX; \
	JMP         loop32; \
tail: \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VEXTRACTF64X4 $1, Z2, Y3; \
loop8: \
	CMPQ        CX, $8; \
	JL          rowend; \
	L8(0, Y4); \
	VFMADD231PS (BX), Y4, Y0; \
	ADDQ        $8*WS, AX; \
	ADDQ        $32, BX; \
	SUBQ        $8, CX; \
	JMP         loop8; \
rowend: \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	VADDPS Y2, Y0, Y0; \
	HSUMPS(Y0, X0, X1); \
	MOVSS  X0, (DX); \
	ADDQ   R8, SI; \
	ADDQ   $4, DX; \
	DECQ   R10; \
	JMP    rowloop; \
done: \
	VZEROUPPER; \
	RET

// func dotRowsF32Z(w *float32, wstride int, x *float32, n, rows int, out *float32)
ROWSF(·dotRowsF32Z, 4, F32L16, F32L8, PF128)

// func dotRowsF16Z(w *uint16, wstride int, x *float32, n, rows int, out *float32)
ROWSF(·dotRowsF16Z, 2, F16L16, F16L8, PF64)

// func dotRowsBF16Z(w *uint16, wstride int, x *float32, n, rows int, out *float32)
ROWSF(·dotRowsBF16Z, 2, BF16L16, BF16L8, PF64)

// FIN4 reduces activation row I's accumulators (acc0 Y(2I) = A, acc2
// Y(2I+1) = B, acc1 and acc3 in HA, HB) and stores the sum at OUT.
#define FIN4(A, B, HA, HB, XA, OUT) \
	VADDPS HA, A, A; \
	VADDPS HB, B, B; \
	VADDPS B, A, A; \
	HSUMPS(A, XA, X8); \
	MOVSS  XA, OUT

// ROWSF4 generates out[r + i*ostride] = dot(weight row r, x row i) for
// r < rows and four activation rows i xstride bytes apart: each weight
// vector is loaded and converted once for the four. Each row's
// arithmetic is that of ROWSF.
#define ROWSF4(NAME, WS, L16, L8, PF) \
TEXT NAME(SB), NOSPLIT, $0-64; \
	MOVQ w+0(FP), SI; \
	MOVQ xstride+24(FP), R8; \
	MOVQ rows+40(FP), R10; \
	MOVQ out+48(FP), DX; \
rowloop: \
	TESTQ  R10, R10; \
	JZ     done; \
	MOVQ   SI, AX; \
	MOVQ   x+16(FP), BX; \
	LEAQ   (BX)(R8*2), DI; \
	LEAQ   (BX)(R8*1), R12; \
	LEAQ   (DI)(R8*1), R13; \
	MOVQ   n+32(FP), CX; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
loop32: \
	CMPQ        CX, $32; \
	JL          tail; \
	PF; \
	L16(0, Z8); \
	L16(16*WS, Z9); \
	VFMADD231PS (BX), Z8, Z0; \
	VFMADD231PS 64(BX), Z9, Z1; \
	VFMADD231PS (R12), Z8, Z2; \
	VFMADD231PS 64(R12), Z9, Z3; \
	VFMADD231PS (DI), Z8, Z4; \
	VFMADD231PS 64(DI), Z9, Z5; \
	VFMADD231PS (R13), Z8, Z6; \
	VFMADD231PS 64(R13), Z9, Z7; \
	ADDQ        $32*WS, AX; \
	ADDQ        $128, BX; \
	ADDQ        $128, DI; \
	ADDQ        $128, R12; \
	ADDQ        $128, R13; \
	SUBQ        $32, CX; \
	JMP         loop32; \
tail: \
	VEXTRACTF64X4 $1, Z0, Y16; \
	VEXTRACTF64X4 $1, Z1, Y17; \
	VEXTRACTF64X4 $1, Z2, Y18; \
	VEXTRACTF64X4 $1, Z3, Y19; \
	VEXTRACTF64X4 $1, Z4, Y20; \
	VEXTRACTF64X4 $1, Z5, Y21; \
	VEXTRACTF64X4 $1, Z6, Y22; \
	VEXTRACTF64X4 $1, Z7, Y23; \
loop8: \
	CMPQ        CX, $8; \
	JL          rowend; \
	L8(0, Y8); \
	VFMADD231PS (BX), Y8, Y0; \
	VFMADD231PS (R12), Y8, Y2; \
	VFMADD231PS (DI), Y8, Y4; \
	VFMADD231PS (R13), Y8, Y6; \
	ADDQ        $8*WS, AX; \
	ADDQ        $32, BX; \
	ADDQ        $32, DI; \
	ADDQ        $32, R12; \
	ADDQ        $32, R13; \
	SUBQ        $8, CX; \
	JMP         loop8; \
rowend: \
	MOVQ ostride+56(FP), R9; \
	SHLQ $2, R9; \
	MOVQ DX, R11; \
	FIN4(Y0, Y1, Y16, Y17, X0, (R11)); \
	FIN4(Y2, Y3, Y18, Y19, X2, (R11)(R9*1)); \
	FIN4(Y4, Y5, Y20, Y21, X4, (R11)(R9*2)); \
	LEAQ (R11)(R9*2), R11; \
	FIN4(Y6, Y7, Y22, Y23, X6, (R11)(R9*1)); \
	ADDQ wstride+8(FP), SI; \
	ADDQ $4, DX; \
	DECQ R10; \
	JMP  rowloop; \
done: \
	VZEROUPPER; \
	RET

// func dotRowsF32x4Z(w *float32, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
ROWSF4(·dotRowsF32x4Z, 4, F32L16, F32L8, PF128)

// func dotRowsF16x4Z(w *uint16, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
ROWSF4(·dotRowsF16x4Z, 2, F16L16, F16L8, PF64)

// func dotRowsBF16x4Z(w *uint16, wstride int, x *float32, xstride, n, rows int, out *float32, ostride int)
ROWSF4(·dotRowsBF16x4Z, 2, BF16L16, BF16L8, PF64)
