//go:build amd64

#include "textflag.h"

// Attention kernels with AVX2, FMA and F16C: queries and keys to scores,
// the softmax bookkeeping and its exponential (see attnkernels.go for
// what they compute and attention_amd64.go for the lengths the Go
// wrappers guarantee). The value updates are in attnvalues_amd64.s.

// SCORES4 reduces the accumulators A, B, C, D of four consecutive
// positions to their scores and stores them at 0, 32, 64 and 96(R12),
// using Y5, Y6 (A and C are clobbered): per position (l0+l1)+(l2+l3),
// rounded to float32, times the scale in X15.
#define SCORES4(A, B, C, D) \
	VHADDPD    B, A, A; \
	VHADDPD    D, C, C; \
	VPERM2F128 $0x20, C, A, Y5; \
	VPERM2F128 $0x31, C, A, Y6; \
	VADDPD     Y6, Y5, Y5; \
	VCVTPD2PSY Y5, X5; \
	VMULPS     X15, X5, X5; \
	VMOVSS     X5, (R12); \
	VEXTRACTPS $1, X5, 32(R12); \
	VEXTRACTPS $2, X5, 64(R12); \
	VEXTRACTPS $3, X5, 96(R12)

// EXPD sets the 4 float64 lanes of X to e^X as expF64Generic (expf64.go)
// computes it, before its final rounding to float32, with T1, T2 as
// scratch (XT1 is T1's low half). NaN stays NaN: max and min return their
// second source when it is NaN.
#define EXPD(X, T1, XT1, T2) \
	VMOVUPD      expd<>+0(SB), T1; \
	VMAXPD       X, T1, X; \
	VMOVUPD      expd<>+32(SB), T1; \
	VMINPD       X, T1, X; \
	VMULPD       expd<>+64(SB), X, T1; \
	VROUNDPD     $0, T1, T1; \
	VFNMADD231PD expd<>+96(SB), T1, X; \
	VFNMADD231PD expd<>+128(SB), T1, X; \
	VMOVUPD      expd<>+544(SB), T2; \
	VFMADD213PD  expd<>+512(SB), X, T2; \
	VFMADD213PD  expd<>+480(SB), X, T2; \
	VFMADD213PD  expd<>+448(SB), X, T2; \
	VFMADD213PD  expd<>+416(SB), X, T2; \
	VFMADD213PD  expd<>+384(SB), X, T2; \
	VFMADD213PD  expd<>+352(SB), X, T2; \
	VFMADD213PD  expd<>+320(SB), X, T2; \
	VFMADD213PD  expd<>+288(SB), X, T2; \
	VFMADD213PD  expd<>+256(SB), X, T2; \
	VFMADD213PD  expd<>+224(SB), X, T2; \
	VFMADD213PD  expd<>+192(SB), X, T2; \
	VCVTPD2DQY   T1, XT1; \
	VPMOVSXDQ    XT1, T1; \
	VPADDQ       expd<>+160(SB), T1, T1; \
	VPSLLQ       $52, T1, T1; \
	VMULPD T1, T2, X

// func roundF16ToF64AVX(dst *float64, src *float32, n int)
// dst[i] = float64(h(src[i])), h rounding to half precision (nearest even).
// n is a positive multiple of 8.
TEXT ·roundF16ToF64AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

r2d:
	VMOVUPS      (SI), Y0
	VCVTPS2PH    $0, Y0, X0
	VCVTPH2PS    X0, Y0
	VCVTPS2PD    X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD    X2, Y2
	VMOVUPD      Y1, (DI)
	VMOVUPD      Y2, 32(DI)
	ADDQ         $32, SI
	ADDQ         $64, DI
	SUBQ         $8, CX
	JNZ          r2d
	VZEROUPPER
	RET

// func halfToF64AVX(dst *float64, src *uint16, n int)
// n is a positive multiple of 8.
TEXT ·halfToF64AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

h2d:
	VCVTPH2PS  (SI), X0
	VCVTPH2PS  8(SI), X1
	VCVTPS2PD  X0, Y0
	VCVTPS2PD  X1, Y1
	VMOVUPD    Y0, (DI)
	VMOVUPD    Y1, 32(DI)
	ADDQ       $16, SI
	ADDQ       $64, DI
	SUBQ       $8, CX
	JNZ        h2d
	VZEROUPPER
	RET

// func scoresAVX(s *float32, q, k *float64, n, rd int, scale float32)
// s[8*p] = float32(q . k[p*rd:]) * scale for p < n; rd is a positive
// multiple of 8. Each dot keeps four lanes (lane j sums elements j, j+4, ...
// in order, with fused multiply-adds of exact products) and adds them as
// (l0+l1)+(l2+l3). Eight positions at a time share the loads of q and keep
// eight independent accumulators, so the multiply-adds' latency overlaps.
TEXT ·scoresAVX(SB), NOSPLIT, $0-44
	MOVQ         s+0(FP), R12
	MOVQ         q+8(FP), R13
	MOVQ         k+16(FP), DX
	MOVQ         n+24(FP), R10
	MOVQ         rd+32(FP), R11
	VBROADCASTSS scale+40(FP), X15
	MOVQ         R11, R8
	SHLQ         $3, R8         // row stride in bytes
	LEAQ         (R8)(R8*2), R9 // three rows
	SHRQ         $2, R11        // vectors of four per row

sc8:
	CMPQ   R10, $8
	JL     sc4
	MOVQ   R13, SI
	MOVQ   DX, AX
	LEAQ   (DX)(R8*4), BX
	MOVQ   R11, CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y7, Y7, Y7
	VXORPD Y10, Y10, Y10
	VXORPD Y11, Y11, Y11

sc8d:
	VMOVUPD     (SI), Y8
	VFMADD231PD (AX), Y8, Y0
	VFMADD231PD (AX)(R8*1), Y8, Y1
	VFMADD231PD (AX)(R8*2), Y8, Y2
	VFMADD231PD (AX)(R9*1), Y8, Y3
	VFMADD231PD (BX), Y8, Y4
	VFMADD231PD (BX)(R8*1), Y8, Y7
	VFMADD231PD (BX)(R8*2), Y8, Y10
	VFMADD231PD (BX)(R9*1), Y8, Y11
	ADDQ        $32, SI
	ADDQ        $32, AX
	ADDQ        $32, BX
	DECQ        CX
	JNZ         sc8d

	SCORES4(Y0, Y1, Y2, Y3)
	ADDQ        $128, R12
	SCORES4(Y4, Y7, Y10, Y11)
	ADDQ        $128, R12
	LEAQ        (DX)(R8*8), DX
	SUBQ        $8, R10
	JMP         sc8

sc4:
	CMPQ   R10, $4
	JL     sc1
	MOVQ   R13, SI
	MOVQ   DX, AX
	MOVQ   R11, CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3

sc4d:
	VMOVUPD     (SI), Y8
	VFMADD231PD (AX), Y8, Y0
	VFMADD231PD (AX)(R8*1), Y8, Y1
	VFMADD231PD (AX)(R8*2), Y8, Y2
	VFMADD231PD (AX)(R9*1), Y8, Y3
	ADDQ        $32, SI
	ADDQ        $32, AX
	DECQ        CX
	JNZ         sc4d

	SCORES4(Y0, Y1, Y2, Y3)
	ADDQ        $128, R12
	LEAQ        (DX)(R8*4), DX
	SUBQ        $4, R10

sc1:
	TESTQ  R10, R10
	JZ     scdone
	MOVQ   R13, SI
	MOVQ   DX, AX
	MOVQ   R11, CX
	VXORPD Y0, Y0, Y0

sc1d:
	VMOVUPD     (SI), Y8
	VFMADD231PD (AX), Y8, Y0
	ADDQ        $32, SI
	ADDQ        $32, AX
	DECQ        CX
	JNZ         sc1d

	VHADDPD      Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSD       X1, X0, X0
	VCVTSD2SS    X0, X0, X0
	VMULSS       X15, X0, X0
	VMOVSS       X0, (R12)
	ADDQ         $32, R12
	ADDQ         R8, DX
	DECQ         R10
	JMP          sc1

scdone:
	VZEROUPPER
	RET

// func weightsAVX(sc, w *float32, flags *uint8, m, s *float32, n, wstride, lanes int)
// The softmax bookkeeping of n positions for a block of 8 heads, one head
// per lane (see weights in attention.go): sc holds the scores, 8 per
// position; m and s the running maxima and sums, updated in place. Per
// position p it writes the weight row at w + p*wstride (ms of the 8
// heads, then vs) and sets flags[p] to 1 when a head whose bit is set in
// lanes has a new maximum. n >= 1.
TEXT ·weightsAVX(SB), NOSPLIT, $0-64
	MOVQ    sc+0(FP), SI
	MOVQ    w+8(FP), DI
	MOVQ    flags+16(FP), BX
	MOVQ    m+24(FP), AX
	MOVQ    n+40(FP), CX
	MOVQ    wstride+48(FP), R8
	MOVQ    lanes+56(FP), R9
	VMOVUPS (AX), Y0
	MOVQ    DI, R10
	MOVQ    CX, R11

	// In position order: mask = s > M; the exponent's argument M-s (new
	// maximum) or s-M; M = max. The mask and the argument are parked in
	// the weight row.
wt1:
	VMOVUPS   (SI), Y1
	VCMPPS    $0x1e, Y0, Y1, Y2
	VSUBPS    Y0, Y1, Y3
	VSUBPS    Y1, Y0, Y4
	VBLENDVPS Y2, Y4, Y3, Y3
	VBLENDVPS Y2, Y1, Y0, Y0
	VMOVUPS   Y2, (R10)
	VMOVUPS   Y3, 32(R10)
	VMOVMSKPS Y2, DX
	ANDQ      R9, DX
	JZ        wt1n
	MOVB      $1, (BX)

wt1n:
	ADDQ    $32, SI
	ADDQ    R8, R10
	INCQ    BX
	DECQ    R11
	JNZ     wt1
	VMOVUPS Y0, (AX)

	// The exponentials, four lanes at a time in float64.
	MOVQ DI, R10
	MOVQ CX, R11

wt2:
	VCVTPS2PD  32(R10), Y1
	VCVTPS2PD  48(R10), Y2
	EXPD(Y1,   Y3, X3, Y4)
	EXPD(Y2,   Y5, X5, Y6)
	VCVTPD2PSY Y1, X1
	VCVTPD2PSY Y2, X2
	VMOVUPS    X1, 32(R10)
	VMOVUPS    X2, 48(R10)
	ADDQ       R8, R10
	DECQ       R11
	JNZ        wt2

	// ms = mask ? e : 1, vs = mask ? 1 : e; S = S*ms + vs (unfused).
	MOVQ         s+32(FP), AX
	VMOVUPS      (AX), Y0
	VBROADCASTSS expd<>+576(SB), Y9
	MOVQ         DI, R10
	MOVQ         CX, R11

wt3:
	VMOVUPS    (R10), Y2
	VMOVUPS    32(R10), Y3
	VBLENDVPS  Y2, Y3, Y9, Y4
	VBLENDVPS  Y2, Y9, Y3, Y5
	VMULPS     Y4, Y0, Y0
	VADDPS     Y5, Y0, Y0
	VMOVUPS    Y4, (R10)
	VMOVUPS    Y5, 32(R10)
	ADDQ       R8, R10
	DECQ       R11
	JNZ        wt3
	VMOVUPS    Y0, (AX)
	VZEROUPPER
	RET

// func expF64AVX(x *float32, n int)
// x[i] = e^x[i] as expF64Generic computes it (expf64.go), four at a time
// in float64. n is a positive multiple of 4.
TEXT ·expF64AVX(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX

ex4:
	VCVTPS2PD  (DI), Y0
	EXPD(Y0,   Y1, X1, Y2)
	VCVTPD2PSY Y0, X0
	VMOVUPS    X0, (DI)
	ADDQ       $16, DI
	SUBQ       $4, CX
	JNZ        ex4
	VZEROUPPER
	RET

// Each a vector of 4 float64: lo, hi, log2e, ln2hi, ln2lo, the exponent
// bias (int64), 1/j! for j = 0..11; then float32 1.
DATA expd<>+0(SB)/8, $0xc05a000000000000
DATA expd<>+8(SB)/8, $0xc05a000000000000
DATA expd<>+16(SB)/8, $0xc05a000000000000
DATA expd<>+24(SB)/8, $0xc05a000000000000
DATA expd<>+32(SB)/8, $0x4056400000000000
DATA expd<>+40(SB)/8, $0x4056400000000000
DATA expd<>+48(SB)/8, $0x4056400000000000
DATA expd<>+56(SB)/8, $0x4056400000000000
DATA expd<>+64(SB)/8, $0x3ff71547652b82fe
DATA expd<>+72(SB)/8, $0x3ff71547652b82fe
DATA expd<>+80(SB)/8, $0x3ff71547652b82fe
DATA expd<>+88(SB)/8, $0x3ff71547652b82fe
DATA expd<>+96(SB)/8, $0x3fe62e42fee00000
DATA expd<>+104(SB)/8, $0x3fe62e42fee00000
DATA expd<>+112(SB)/8, $0x3fe62e42fee00000
DATA expd<>+120(SB)/8, $0x3fe62e42fee00000
DATA expd<>+128(SB)/8, $0x3dea39ef35793c76
DATA expd<>+136(SB)/8, $0x3dea39ef35793c76
DATA expd<>+144(SB)/8, $0x3dea39ef35793c76
DATA expd<>+152(SB)/8, $0x3dea39ef35793c76
DATA expd<>+160(SB)/8, $1023
DATA expd<>+168(SB)/8, $1023
DATA expd<>+176(SB)/8, $1023
DATA expd<>+184(SB)/8, $1023
DATA expd<>+192(SB)/8, $0x3ff0000000000000
DATA expd<>+200(SB)/8, $0x3ff0000000000000
DATA expd<>+208(SB)/8, $0x3ff0000000000000
DATA expd<>+216(SB)/8, $0x3ff0000000000000
DATA expd<>+224(SB)/8, $0x3ff0000000000000
DATA expd<>+232(SB)/8, $0x3ff0000000000000
DATA expd<>+240(SB)/8, $0x3ff0000000000000
DATA expd<>+248(SB)/8, $0x3ff0000000000000
DATA expd<>+256(SB)/8, $0x3fe0000000000000
DATA expd<>+264(SB)/8, $0x3fe0000000000000
DATA expd<>+272(SB)/8, $0x3fe0000000000000
DATA expd<>+280(SB)/8, $0x3fe0000000000000
DATA expd<>+288(SB)/8, $0x3fc5555555555555
DATA expd<>+296(SB)/8, $0x3fc5555555555555
DATA expd<>+304(SB)/8, $0x3fc5555555555555
DATA expd<>+312(SB)/8, $0x3fc5555555555555
DATA expd<>+320(SB)/8, $0x3fa5555555555555
DATA expd<>+328(SB)/8, $0x3fa5555555555555
DATA expd<>+336(SB)/8, $0x3fa5555555555555
DATA expd<>+344(SB)/8, $0x3fa5555555555555
DATA expd<>+352(SB)/8, $0x3f81111111111111
DATA expd<>+360(SB)/8, $0x3f81111111111111
DATA expd<>+368(SB)/8, $0x3f81111111111111
DATA expd<>+376(SB)/8, $0x3f81111111111111
DATA expd<>+384(SB)/8, $0x3f56c16c16c16c17
DATA expd<>+392(SB)/8, $0x3f56c16c16c16c17
DATA expd<>+400(SB)/8, $0x3f56c16c16c16c17
DATA expd<>+408(SB)/8, $0x3f56c16c16c16c17
DATA expd<>+416(SB)/8, $0x3f2a01a01a01a01a
DATA expd<>+424(SB)/8, $0x3f2a01a01a01a01a
DATA expd<>+432(SB)/8, $0x3f2a01a01a01a01a
DATA expd<>+440(SB)/8, $0x3f2a01a01a01a01a
DATA expd<>+448(SB)/8, $0x3efa01a01a01a01a
DATA expd<>+456(SB)/8, $0x3efa01a01a01a01a
DATA expd<>+464(SB)/8, $0x3efa01a01a01a01a
DATA expd<>+472(SB)/8, $0x3efa01a01a01a01a
DATA expd<>+480(SB)/8, $0x3ec71de3a556c734
DATA expd<>+488(SB)/8, $0x3ec71de3a556c734
DATA expd<>+496(SB)/8, $0x3ec71de3a556c734
DATA expd<>+504(SB)/8, $0x3ec71de3a556c734
DATA expd<>+512(SB)/8, $0x3e927e4fb7789f5c
DATA expd<>+520(SB)/8, $0x3e927e4fb7789f5c
DATA expd<>+528(SB)/8, $0x3e927e4fb7789f5c
DATA expd<>+536(SB)/8, $0x3e927e4fb7789f5c
DATA expd<>+544(SB)/8, $0x3e5ae64567f544e4
DATA expd<>+552(SB)/8, $0x3e5ae64567f544e4
DATA expd<>+560(SB)/8, $0x3e5ae64567f544e4
DATA expd<>+568(SB)/8, $0x3e5ae64567f544e4
DATA expd<>+576(SB)/4, $0x3f800000
GLOBL expd<>(SB), RODATA|NOPTR, $580
