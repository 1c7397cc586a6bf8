//go:build amd64

#include "textflag.h"

// The value updates of AttendF16 with AVX2, FMA and F16C (see values in
// attnkernels.go and valuesSIMD in attention_amd64.go). A slice is 8
// accumulators of one head; per position it takes
// a = h(a*ms) when the position is a new maximum (flags), then
// a = h(fma(v, vs, a)), h rounding to half precision and back. Each slice
// is a chain of dependent roundings, so the kernels run several at once.
//
// Weight rows: per position, 16 floats per block of 8 heads: ms of heads
// 0..7, then vs of heads 0..7.

// H16 rounds the 8 floats of Y to half precision and back (nearest even);
// X is Y's low half.
#define H16(Y, X) \
	VCVTPS2PH $0, Y, X; \
	VCVTPH2PS X, Y

// ACC sets Y = h(Y + V*W) (X is Y's low half), the product and sum fused.
#define ACC(Y, X, V, W) \
	VFMADD231PS W, V, Y; \
	H16(Y, X)

// RESC sets Y = h(Y*W).
#define RESC(Y, X, W) \
	VMULPS W, Y, Y; \
	H16(Y, X)

// func vaccAVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride int, ch *vaccChains)
// Runs n ordered value updates (see values in attention.go) on four slices
// of 8 accumulators with arbitrary offsets: ch holds the byte offsets of
// each slice in acc, in a value row and of its ms in a weight row (its vs
// is 32 bytes further). n >= 1. The four slices are independent chains,
// so their latencies overlap.
TEXT ·vaccAVX(SB), NOSPLIT, $0-64
	MOVQ    ch+56(FP), AX
	MOVQ    acc+0(FP), BX
	MOVQ    0(AX), R8
	VMOVUPS (BX)(R8*1), Y0
	MOVQ    8(AX), R8
	VMOVUPS (BX)(R8*1), Y1
	MOVQ    16(AX), R8
	VMOVUPS (BX)(R8*1), Y2
	MOVQ    24(AX), R8
	VMOVUPS (BX)(R8*1), Y3
	MOVQ    32(AX), R8
	MOVQ    40(AX), R9
	MOVQ    48(AX), R10
	MOVQ    56(AX), R11
	MOVQ    64(AX), R12
	MOVQ    72(AX), R13
	MOVQ    80(AX), DI
	MOVQ    88(AX), AX
	MOVQ    v+8(FP), SI
	MOVQ    w+16(FP), DX
	MOVQ    flags+24(FP), BX
	MOVQ    n+32(FP), CX

va:
	CMPB         (BX), $0
	JEQ          vaupd
	VBROADCASTSS (DX)(R12*1), Y4
	VBROADCASTSS (DX)(R13*1), Y5
	VBROADCASTSS (DX)(DI*1), Y6
	VBROADCASTSS (DX)(AX*1), Y7
	VMULPS       Y4, Y0, Y0
	VMULPS       Y5, Y1, Y1
	VMULPS       Y6, Y2, Y2
	VMULPS       Y7, Y3, Y3
	H16(Y0,      X0)
	H16(Y1,      X1)
	H16(Y2,      X2)
	H16(Y3,      X3)

vaupd:
	VCVTPH2PS    (SI)(R8*1), Y4
	VCVTPH2PS    (SI)(R9*1), Y5
	VCVTPH2PS    (SI)(R10*1), Y6
	VCVTPH2PS    (SI)(R11*1), Y7
	VBROADCASTSS 32(DX)(R12*1), Y8
	VBROADCASTSS 32(DX)(R13*1), Y9
	VBROADCASTSS 32(DX)(DI*1), Y10
	VBROADCASTSS 32(DX)(AX*1), Y11
	VFMADD231PS  Y8, Y4, Y0
	VFMADD231PS  Y9, Y5, Y1
	VFMADD231PS  Y10, Y6, Y2
	VFMADD231PS  Y11, Y7, Y3
	H16(Y0,      X0)
	H16(Y1,      X1)
	H16(Y2,      X2)
	H16(Y3,      X3)
	ADDQ         vstride+40(FP), SI
	ADDQ         wstride+48(FP), DX
	INCQ         BX
	DECQ         CX
	JNZ          va

	MOVQ       ch+56(FP), AX
	MOVQ       acc+0(FP), BX
	MOVQ       0(AX), R8
	VMOVUPS    Y0, (BX)(R8*1)
	MOVQ       8(AX), R8
	VMOVUPS    Y1, (BX)(R8*1)
	MOVQ       16(AX), R8
	VMOVUPS    Y2, (BX)(R8*1)
	MOVQ       24(AX), R8
	VMOVUPS    Y3, (BX)(R8*1)
	VZEROUPPER
	RET

// The eight-slice value kernels vacc{nh}x{nc}AVX: slices (head i, chunk c)
// for nh consecutive heads of one block of 8 and nc = 8/nh consecutive
// 8-element chunks, whose accumulators start at acc + i*astride + 32*c
// (bytes), whose values are at byte voff[i] + 16*c of a value row
// (v + p*vstride) and whose ms and vs are at bytes 4*i and 32+4*i of a
// weight row (w + p*wstride). n >= 1.

// func vacc1x8AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)
TEXT ·vacc1x8AVX(SB), NOSPLIT, $0-72
	MOVQ    acc+0(FP), R11
	MOVQ    astride+56(FP), R10
	VMOVUPS 0(R11), Y0
	VMOVUPS 32(R11), Y1
	VMOVUPS 64(R11), Y2
	VMOVUPS 96(R11), Y3
	VMOVUPS 128(R11), Y4
	VMOVUPS 160(R11), Y5
	VMOVUPS 192(R11), Y6
	VMOVUPS 224(R11), Y7
	MOVQ    v+8(FP), R13
	MOVQ    voff+64(FP), R9
	MOVQ    0(R9), AX
	ADDQ    R13, AX
	MOVQ    w+16(FP), DX
	MOVQ    flags+24(FP), BX
	MOVQ    n+32(FP), CX
	MOVQ    vstride+40(FP), R13

v18:
	CMPB         (BX), $0
	JEQ          v18u
	VBROADCASTSS 0(DX), Y8
	RESC(Y0,     X0, Y8)
	RESC(Y1,     X1, Y8)
	RESC(Y2,     X2, Y8)
	RESC(Y3,     X3, Y8)
	RESC(Y4,     X4, Y8)
	RESC(Y5,     X5, Y8)
	RESC(Y6,     X6, Y8)
	RESC(Y7,     X7, Y8)

v18u:
	VBROADCASTSS 32(DX), Y13
	VCVTPH2PS    0(AX), Y9
	ACC(Y0,      X0, Y9, Y13)
	VCVTPH2PS    16(AX), Y10
	ACC(Y1,      X1, Y10, Y13)
	VCVTPH2PS    32(AX), Y11
	ACC(Y2,      X2, Y11, Y13)
	VCVTPH2PS    48(AX), Y12
	ACC(Y3,      X3, Y12, Y13)
	VCVTPH2PS    64(AX), Y9
	ACC(Y4,      X4, Y9, Y13)
	VCVTPH2PS    80(AX), Y10
	ACC(Y5,      X5, Y10, Y13)
	VCVTPH2PS    96(AX), Y11
	ACC(Y6,      X6, Y11, Y13)
	VCVTPH2PS    112(AX), Y12
	ACC(Y7,      X7, Y12, Y13)
	ADDQ         R13, AX
	ADDQ         wstride+48(FP), DX
	INCQ         BX
	DECQ         CX
	JNZ          v18

	MOVQ       acc+0(FP), R11
	MOVQ       astride+56(FP), R10
	VMOVUPS    Y0, 0(R11)
	VMOVUPS    Y1, 32(R11)
	VMOVUPS    Y2, 64(R11)
	VMOVUPS    Y3, 96(R11)
	VMOVUPS    Y4, 128(R11)
	VMOVUPS    Y5, 160(R11)
	VMOVUPS    Y6, 192(R11)
	VMOVUPS    Y7, 224(R11)
	VZEROUPPER
	RET

// func vacc2x4AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)
TEXT ·vacc2x4AVX(SB), NOSPLIT, $0-72
	MOVQ    acc+0(FP), R11
	MOVQ    astride+56(FP), R10
	VMOVUPS 0(R11), Y0
	VMOVUPS 32(R11), Y1
	VMOVUPS 64(R11), Y2
	VMOVUPS 96(R11), Y3
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y4
	VMOVUPS 32(R11), Y5
	VMOVUPS 64(R11), Y6
	VMOVUPS 96(R11), Y7
	MOVQ    v+8(FP), R13
	MOVQ    voff+64(FP), R9
	MOVQ    0(R9), AX
	ADDQ    R13, AX
	MOVQ    8(R9), SI
	ADDQ    R13, SI
	MOVQ    w+16(FP), DX
	MOVQ    flags+24(FP), BX
	MOVQ    n+32(FP), CX
	MOVQ    vstride+40(FP), R13

v24:
	CMPB         (BX), $0
	JEQ          v24u
	VBROADCASTSS 0(DX), Y8
	RESC(Y0,     X0, Y8)
	RESC(Y1,     X1, Y8)
	RESC(Y2,     X2, Y8)
	RESC(Y3,     X3, Y8)
	VBROADCASTSS 4(DX), Y9
	RESC(Y4,     X4, Y9)
	RESC(Y5,     X5, Y9)
	RESC(Y6,     X6, Y9)
	RESC(Y7,     X7, Y9)

v24u:
	VBROADCASTSS 32(DX), Y13
	VCVTPH2PS    0(AX), Y9
	ACC(Y0,      X0, Y9, Y13)
	VCVTPH2PS    16(AX), Y10
	ACC(Y1,      X1, Y10, Y13)
	VCVTPH2PS    32(AX), Y11
	ACC(Y2,      X2, Y11, Y13)
	VCVTPH2PS    48(AX), Y12
	ACC(Y3,      X3, Y12, Y13)
	VBROADCASTSS 36(DX), Y14
	VCVTPH2PS    0(SI), Y9
	ACC(Y4,      X4, Y9, Y14)
	VCVTPH2PS    16(SI), Y10
	ACC(Y5,      X5, Y10, Y14)
	VCVTPH2PS    32(SI), Y11
	ACC(Y6,      X6, Y11, Y14)
	VCVTPH2PS    48(SI), Y12
	ACC(Y7,      X7, Y12, Y14)
	ADDQ         R13, AX
	ADDQ         R13, SI
	ADDQ         wstride+48(FP), DX
	INCQ         BX
	DECQ         CX
	JNZ          v24

	MOVQ       acc+0(FP), R11
	MOVQ       astride+56(FP), R10
	VMOVUPS    Y0, 0(R11)
	VMOVUPS    Y1, 32(R11)
	VMOVUPS    Y2, 64(R11)
	VMOVUPS    Y3, 96(R11)
	ADDQ       R10, R11
	VMOVUPS    Y4, 0(R11)
	VMOVUPS    Y5, 32(R11)
	VMOVUPS    Y6, 64(R11)
	VMOVUPS    Y7, 96(R11)
	VZEROUPPER
	RET

// func vacc4x2AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)
TEXT ·vacc4x2AVX(SB), NOSPLIT, $0-72
	MOVQ    acc+0(FP), R11
	MOVQ    astride+56(FP), R10
	VMOVUPS 0(R11), Y0
	VMOVUPS 32(R11), Y1
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y2
	VMOVUPS 32(R11), Y3
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y4
	VMOVUPS 32(R11), Y5
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y6
	VMOVUPS 32(R11), Y7
	MOVQ    v+8(FP), R13
	MOVQ    voff+64(FP), R9
	MOVQ    0(R9), AX
	ADDQ    R13, AX
	MOVQ    8(R9), SI
	ADDQ    R13, SI
	MOVQ    16(R9), DI
	ADDQ    R13, DI
	MOVQ    24(R9), R8
	ADDQ    R13, R8
	MOVQ    w+16(FP), DX
	MOVQ    flags+24(FP), BX
	MOVQ    n+32(FP), CX
	MOVQ    vstride+40(FP), R13

v42:
	CMPB         (BX), $0
	JEQ          v42u
	VBROADCASTSS 0(DX), Y8
	RESC(Y0,     X0, Y8)
	RESC(Y1,     X1, Y8)
	VBROADCASTSS 4(DX), Y9
	RESC(Y2,     X2, Y9)
	RESC(Y3,     X3, Y9)
	VBROADCASTSS 8(DX), Y8
	RESC(Y4,     X4, Y8)
	RESC(Y5,     X5, Y8)
	VBROADCASTSS 12(DX), Y9
	RESC(Y6,     X6, Y9)
	RESC(Y7,     X7, Y9)

v42u:
	VBROADCASTSS 32(DX), Y13
	VCVTPH2PS    0(AX), Y9
	ACC(Y0,      X0, Y9, Y13)
	VCVTPH2PS    16(AX), Y10
	ACC(Y1,      X1, Y10, Y13)
	VBROADCASTSS 36(DX), Y14
	VCVTPH2PS    0(SI), Y11
	ACC(Y2,      X2, Y11, Y14)
	VCVTPH2PS    16(SI), Y12
	ACC(Y3,      X3, Y12, Y14)
	VBROADCASTSS 40(DX), Y13
	VCVTPH2PS    0(DI), Y9
	ACC(Y4,      X4, Y9, Y13)
	VCVTPH2PS    16(DI), Y10
	ACC(Y5,      X5, Y10, Y13)
	VBROADCASTSS 44(DX), Y14
	VCVTPH2PS    0(R8), Y11
	ACC(Y6,      X6, Y11, Y14)
	VCVTPH2PS    16(R8), Y12
	ACC(Y7,      X7, Y12, Y14)
	ADDQ         R13, AX
	ADDQ         R13, SI
	ADDQ         R13, DI
	ADDQ         R13, R8
	ADDQ         wstride+48(FP), DX
	INCQ         BX
	DECQ         CX
	JNZ          v42

	MOVQ       acc+0(FP), R11
	MOVQ       astride+56(FP), R10
	VMOVUPS    Y0, 0(R11)
	VMOVUPS    Y1, 32(R11)
	ADDQ       R10, R11
	VMOVUPS    Y2, 0(R11)
	VMOVUPS    Y3, 32(R11)
	ADDQ       R10, R11
	VMOVUPS    Y4, 0(R11)
	VMOVUPS    Y5, 32(R11)
	ADDQ       R10, R11
	VMOVUPS    Y6, 0(R11)
	VMOVUPS    Y7, 32(R11)
	VZEROUPPER
	RET

// func vacc8x1AVX(acc *float32, v *uint16, w *float32, flags *uint8, n, vstride, wstride, astride int, voff *int)
TEXT ·vacc8x1AVX(SB), NOSPLIT, $0-72
	MOVQ    acc+0(FP), R11
	MOVQ    astride+56(FP), R10
	VMOVUPS 0(R11), Y0
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y1
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y2
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y3
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y4
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y5
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y6
	ADDQ    R10, R11
	VMOVUPS 0(R11), Y7
	MOVQ    v+8(FP), R13
	MOVQ    voff+64(FP), R9
	MOVQ    0(R9), AX
	ADDQ    R13, AX
	MOVQ    8(R9), SI
	ADDQ    R13, SI
	MOVQ    16(R9), DI
	ADDQ    R13, DI
	MOVQ    24(R9), R8
	ADDQ    R13, R8
	MOVQ    32(R9), R10
	ADDQ    R13, R10
	MOVQ    40(R9), R11
	ADDQ    R13, R11
	MOVQ    48(R9), R12
	ADDQ    R13, R12
	MOVQ    56(R9), R9
	ADDQ    R13, R9
	MOVQ    w+16(FP), DX
	MOVQ    flags+24(FP), BX
	MOVQ    n+32(FP), CX
	MOVQ    vstride+40(FP), R13

v81:
	CMPB         (BX), $0
	JEQ          v81u
	VBROADCASTSS 0(DX), Y8
	RESC(Y0,     X0, Y8)
	VBROADCASTSS 4(DX), Y9
	RESC(Y1,     X1, Y9)
	VBROADCASTSS 8(DX), Y8
	RESC(Y2,     X2, Y8)
	VBROADCASTSS 12(DX), Y9
	RESC(Y3,     X3, Y9)
	VBROADCASTSS 16(DX), Y8
	RESC(Y4,     X4, Y8)
	VBROADCASTSS 20(DX), Y9
	RESC(Y5,     X5, Y9)
	VBROADCASTSS 24(DX), Y8
	RESC(Y6,     X6, Y8)
	VBROADCASTSS 28(DX), Y9
	RESC(Y7,     X7, Y9)

v81u:
	VBROADCASTSS 32(DX), Y13
	VCVTPH2PS    0(AX), Y9
	ACC(Y0,      X0, Y9, Y13)
	VBROADCASTSS 36(DX), Y14
	VCVTPH2PS    0(SI), Y10
	ACC(Y1,      X1, Y10, Y14)
	VBROADCASTSS 40(DX), Y13
	VCVTPH2PS    0(DI), Y11
	ACC(Y2,      X2, Y11, Y13)
	VBROADCASTSS 44(DX), Y14
	VCVTPH2PS    0(R8), Y12
	ACC(Y3,      X3, Y12, Y14)
	VBROADCASTSS 48(DX), Y13
	VCVTPH2PS    0(R10), Y9
	ACC(Y4,      X4, Y9, Y13)
	VBROADCASTSS 52(DX), Y14
	VCVTPH2PS    0(R11), Y10
	ACC(Y5,      X5, Y10, Y14)
	VBROADCASTSS 56(DX), Y13
	VCVTPH2PS    0(R12), Y11
	ACC(Y6,      X6, Y11, Y13)
	VBROADCASTSS 60(DX), Y14
	VCVTPH2PS    0(R9), Y12
	ACC(Y7,      X7, Y12, Y14)
	ADDQ         R13, AX
	ADDQ         R13, SI
	ADDQ         R13, DI
	ADDQ         R13, R8
	ADDQ         R13, R10
	ADDQ         R13, R11
	ADDQ         R13, R12
	ADDQ         R13, R9
	ADDQ         wstride+48(FP), DX
	INCQ         BX
	DECQ         CX
	JNZ          v81

	MOVQ       acc+0(FP), R11
	MOVQ       astride+56(FP), R10
	VMOVUPS    Y0, 0(R11)
	ADDQ       R10, R11
	VMOVUPS    Y1, 0(R11)
	ADDQ       R10, R11
	VMOVUPS    Y2, 0(R11)
	ADDQ       R10, R11
	VMOVUPS    Y3, 0(R11)
	ADDQ       R10, R11
	VMOVUPS    Y4, 0(R11)
	ADDQ       R10, R11
	VMOVUPS    Y5, 0(R11)
	ADDQ       R10, R11
	VMOVUPS    Y6, 0(R11)
	ADDQ       R10, R11
	VMOVUPS    Y7, 0(R11)
	VZEROUPPER
	RET
