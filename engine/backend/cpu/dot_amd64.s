//go:build amd64

#include "textflag.h"
#include "prefetch.h"

// Row dot products of GGML weight formats with AVX2, FMA and F16C. The
// quantised kernels take a count of blocks; the float kernels a length that
// is a multiple of 8 (the Go wrappers in rowdot_amd64.go handle tails).
//
// Integer idiom for 8-bit blocks: VPMADDUBSW multiplies unsigned by signed
// bytes, so a signed weight w and activation x become |w| (VPSIGNB w,w) and
// x*sign(w) (VPSIGNB x,w), whose products are w*x. Pair sums fit int16:
// |w| <= 128 and x in [-127,127] (ggml's Q8_0 quantiser never emits -128),
// so 2*128*127 < 32767. VPMADDWD with int16 ones then sums to 8 int32 lanes,
// converted exactly to float32 (each lane is at most 4*128*127).
//
// The weight stream is prefetched into L1 and L2 (see prefetch.h); the
// prefetches change nothing in the arithmetic.

#define HSUMPS(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0x4E, X, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0xB1, X, T; \
	VADDSS       T, X, X

// INT16ONES sets Y to sixteen int16 ones.
#define INT16ONES(Y, X) \
	MOVL         $0x00010001, AX; \
	VMOVD        AX, X; \
	VPBROADCASTD X, Y

// BYTES sets Y to 32 copies of the byte in the 32-bit pattern V.
#define BYTES(V, Y, X) \
	MOVL         V, AX; \
	VMOVD        AX, X; \
	VPBROADCASTD X, Y

// SCALE2 sets D (Y) to fp16(WOFF(WB)) * fp16(XOFF(XB)) in all lanes.
#define SCALE2(WOFF, WB, XOFF, XB, D) \
	MOVWLZX      WOFF(WB), AX; \
	MOVWLZX      XOFF(XB), BX; \
	SHLL         $16, BX; \
	ORL          BX, AX; \
	VMOVD        AX, X2; \
	VCVTPH2PS    X2, X2; \
	VMOVSHDUP    X2, X3; \
	VMULSS       X3, X2, X2; \
	VBROADCASTSS X2, D

// DOT32 adds D * sum(W*x) to ACC lane-wise, W holding 32 signed weight bytes
// and the 32 activation bytes at XOFF(XB). Scratch: Y6, Y7. Y15: int16 ones.
#define DOT32(W, XOFF, XB, D, ACC) \
	VPSIGNB     W, W, Y6; \
	VMOVDQU     XOFF(XB), Y7; \
	VPSIGNB     W, Y7, Y7; \
	VPMADDUBSW  Y7, Y6, Y6; \
	VPMADDWD    Y15, Y6, Y6; \
	VCVTDQ2PS   Y6, Y6; \
	VFMADD231PS Y6, D, ACC

// Q4UNPACK sets Y (low half X) to the 32 weights of the Q4_0 block at
// WOFF(WB), as signed bytes q-8: low nibbles (elements 0..15) in the low
// lane, high nibbles (16..31) in the high lane. Y14: 0x0F bytes, Y13: 8s.
// Scratch: X10.
#define Q4UNPACK(WOFF, WB, Y, X) \
	VMOVDQU     2+WOFF(WB), X; \
	VPSRLW      $4, X, X10; \
	VINSERTI128 $1, X10, Y, Y; \
	VPAND       Y14, Y, Y; \
	VPSUBB      Y13, Y, Y

// SCALES4B sets Y8 to [p0 p1 p2 p3 p0 p1 p2 p3], pk = fp16 d of weight
// block k (blocks WS bytes apart from SI) times fp16 d of activation block k
// (XS bytes apart from DI): four blocks' scales with one conversion and one
// multiplication. Scratch: X9.
#define SCALES4B(WS, XS) \
	MOVWLZX      (SI), AX; \
	VMOVD        AX, X8; \
	VPINSRW      $1, WS(SI), X8, X8; \
	VPINSRW      $2, 2*WS(SI), X8, X8; \
	VPINSRW      $3, 3*WS(SI), X8, X8; \
	VPINSRW      $4, (DI), X8, X8; \
	VPINSRW      $5, XS(DI), X8, X8; \
	VPINSRW      $6, 2*XS(DI), X8, X8; \
	VPINSRW      $7, 3*XS(DI), X8, X8; \
	VCVTPH2PS    X8, Y8; \
	VEXTRACTF128 $1, Y8, X9; \
	VMULPS       X9, X8, X8; \
	VINSERTF128  $1, X8, Y8, Y8

// SCALES4 sets Y4 to [s0 s1 s2 s3 s0 s1 s2 s3], si = fp16 d of the weight
// block at (SI) times fp16 d of the activation blocks at (DI), (R9), (R10),
// (R11). Scratch: X5.
#define SCALES4 \
	MOVWLZX      (DI), AX; \
	VMOVD        AX, X4; \
	VPINSRW      $1, (R9), X4, X4; \
	VPINSRW      $2, (R10), X4, X4; \
	VPINSRW      $3, (R11), X4, X4; \
	VCVTPH2PS    X4, X4; \
	MOVWLZX      (SI), AX; \
	VMOVD        AX, X5; \
	VCVTPH2PS    X5, X5; \
	VBROADCASTSS X5, X5; \
	VMULPS       X5, X4, X4; \
	VINSERTF128  $1, X4, Y4, Y4

// DOTROW adds lane IMM of Y4 times sum(W*x) to ACC, for the 32 activation
// bytes at 2(XB); Y6 holds |W|. Scratch: Y7, Y8.
#define DOTROW(XB, IMM, ACC) \
	VMOVDQU     2(XB), Y7; \
	VPSIGNB     Y5, Y7, Y7; \
	VPMADDUBSW  Y7, Y6, Y7; \
	VPMADDWD    Y15, Y7, Y7; \
	VCVTDQ2PS   Y7, Y7; \
	VPERMILPS   IMM, Y4, Y8; \
	VFMADD231PS Y7, Y8, ACC

// STORE4 reduces Y0-Y3 and stores them at out, out+ostride, ... (in floats).
#define STORE4 \
	MOVQ   out+32(FP), DX; \
	MOVQ   ostride+40(FP), R8; \
	SHLQ   $2, R8; \
	HSUMPS(Y0, X0, X8); \
	MOVSS  X0, (DX); \
	HSUMPS(Y1, X1, X8); \
	MOVSS  X1, (DX)(R8*1); \
	HSUMPS(Y2, X2, X8); \
	MOVSS  X2, (DX)(R8*2); \
	LEAQ   (DX)(R8*2), DX; \
	HSUMPS(Y3, X3, X8); \
	MOVSS  X3, (DX)(R8*1)

// ROWS4 points DI, R9, R10, R11 at four activation rows xstride apart and
// zeroes the accumulators Y0-Y3.
#define ROWS4 \
	MOVQ   x+8(FP), DI; \
	MOVQ   xstride+16(FP), R8; \
	LEAQ   (DI)(R8*1), R9; \
	LEAQ   (DI)(R8*2), R10; \
	LEAQ   (R9)(R8*2), R11; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3

// func dotQ8_0AVX(w, x *byte, nb int) float32
// Blocks of 34 bytes: fp16 d, 32 int8. One accumulator, blocks in order:
// the same arithmetic per row as dotQ8_0x4AVX, so that a row's result does
// not depend on how MatMul batched it.
TEXT ·dotQ8_0AVX(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   nb+16(FP), CX
	VXORPS Y0, Y0, Y0
	INT16ONES(Y15, X15)

q8four:
	CMPQ       CX, $4
	JL         q8
	PREFETCHT0 PF0(SI)
	PREFETCHT0 PF0+64(SI)
	PREFETCHT0 PF0+128(SI)
	PREFETCHT1 PF1(SI)
	PREFETCHT1 PF1+64(SI)
	PREFETCHT1 PF1+128(SI)
	SCALES4B(34, 34)
	VPERMILPS $0x00, Y8, Y9
	VMOVDQU   2(SI), Y4
	DOT32(Y4, 2, DI, Y9, Y0)
	VPERMILPS $0x55, Y8, Y9
	VMOVDQU   36(SI), Y4
	DOT32(Y4, 36, DI, Y9, Y0)
	VPERMILPS $0xAA, Y8, Y9
	VMOVDQU   70(SI), Y4
	DOT32(Y4, 70, DI, Y9, Y0)
	VPERMILPS $0xFF, Y8, Y9
	VMOVDQU   104(SI), Y4
	DOT32(Y4, 104, DI, Y9, Y0)
	ADDQ      $136, SI
	ADDQ      $136, DI
	SUBQ      $4, CX
	JMP       q8four

q8:
	TESTQ   CX, CX
	JZ      q8done
	SCALE2(0, SI, 0, DI, Y8)
	VMOVDQU 2(SI), Y4
	DOT32(Y4, 2, DI, Y8, Y0)
	ADDQ    $34, SI
	ADDQ    $34, DI
	DECQ    CX
	JMP     q8

q8done:
	HSUMPS(Y0, X0, X1)
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotQ4_0AVX(w, x *byte, nb int) float32
// Weight blocks of 18 bytes (fp16 d, 16 bytes of nibbles), activation
// blocks Q8_0. Same arithmetic per row as dotQ4_0x4AVX.
TEXT ·dotQ4_0AVX(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   nb+16(FP), CX
	VXORPS Y0, Y0, Y0
	INT16ONES(Y15, X15)
	BYTES($0x0F0F0F0F, Y14, X14)
	BYTES($0x08080808, Y13, X13)

q4four:
	CMPQ       CX, $4
	JL         q4
	PREFETCHT0 PF0(SI)
	PREFETCHT0 PF0+64(SI)
	PREFETCHT1 PF1(SI)
	PREFETCHT1 PF1+64(SI)
	SCALES4B(18, 34)
	VPERMILPS $0x00, Y8, Y9
	Q4UNPACK(0, SI, Y4, X4)
	DOT32(Y4, 2, DI, Y9, Y0)
	VPERMILPS $0x55, Y8, Y9
	Q4UNPACK(18, SI, Y4, X4)
	DOT32(Y4, 36, DI, Y9, Y0)
	VPERMILPS $0xAA, Y8, Y9
	Q4UNPACK(36, SI, Y4, X4)
	DOT32(Y4, 70, DI, Y9, Y0)
	VPERMILPS $0xFF, Y8, Y9
	Q4UNPACK(54, SI, Y4, X4)
	DOT32(Y4, 104, DI, Y9, Y0)
	ADDQ      $72, SI
	ADDQ      $136, DI
	SUBQ      $4, CX
	JMP       q4four

q4:
	TESTQ    CX, CX
	JZ       q4done
	SCALE2(0, SI, 0, DI, Y8)
	Q4UNPACK(0, SI, Y4, X4)
	DOT32(Y4, 2, DI, Y8, Y0)
	ADDQ     $18, SI
	ADDQ     $34, DI
	DECQ     CX
	JMP      q4

q4done:
	HSUMPS(Y0, X0, X1)
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotQ8_0x4AVX(w, x *byte, xstride, nb int, out *float32, ostride int)
TEXT ·dotQ8_0x4AVX(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ nb+24(FP), CX
	ROWS4
	INT16ONES(Y15, X15)

q8x4:
	TESTQ      CX, CX
	JZ         q8x4done
	PREFETCHT0 PF0(SI)
	PREFETCHT1 PF1(SI)
	SCALES4
	VMOVDQU 2(SI), Y5
	VPSIGNB Y5, Y5, Y6
	DOTROW(DI, $0x00, Y0)
	DOTROW(R9, $0x55, Y1)
	DOTROW(R10, $0xAA, Y2)
	DOTROW(R11, $0xFF, Y3)
	ADDQ    $34, SI
	ADDQ    $34, DI
	ADDQ    $34, R9
	ADDQ    $34, R10
	ADDQ    $34, R11
	DECQ    CX
	JMP     q8x4

q8x4done:
	STORE4
	VZEROUPPER
	RET

// func dotQ4_0x4AVX(w, x *byte, xstride, nb int, out *float32, ostride int)
TEXT ·dotQ4_0x4AVX(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ nb+24(FP), CX
	ROWS4
	INT16ONES(Y15, X15)
	BYTES($0x0F0F0F0F, Y14, X14)
	BYTES($0x08080808, Y13, X13)

q4x4:
	TESTQ      CX, CX
	JZ         q4x4done
	PREFETCHT0 PF0(SI)
	PREFETCHT1 PF1(SI)
	SCALES4
	Q4UNPACK(0, SI, Y5, X5)
	VPSIGNB  Y5, Y5, Y6
	DOTROW(DI, $0x00, Y0)
	DOTROW(R9, $0x55, Y1)
	DOTROW(R10, $0xAA, Y2)
	DOTROW(R11, $0xFF, Y3)
	ADDQ     $18, SI
	ADDQ     $34, DI
	ADDQ     $34, R9
	ADDQ     $34, R10
	ADDQ     $34, R11
	DECQ     CX
	JMP      q4x4

q4x4done:
	STORE4
	VZEROUPPER
	RET

// func dotF16F32AVX(w *uint16, x *float32, n int) float32
// Half weights with activations already rounded to half and kept as float32
// (the conversion of x is paid once per MatMul, not once per weight row).
TEXT ·dotF16F32AVX(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

hf32:
	CMPQ        CX, $32
	JL          hf8
	PREFETCHT0  PF0(SI)
	PREFETCHT1  PF1(SI)
	VCVTPH2PS   (SI), Y4
	VCVTPH2PS   16(SI), Y5
	VCVTPH2PS   32(SI), Y6
	VCVTPH2PS   48(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         hf32

hf8:
	CMPQ        CX, $8
	JL          hfdone
	VCVTPH2PS   (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         hf8

hfdone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMPS(Y0, X0, X1)
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotBF16F32AVX(w *uint16, x *float32, n int) float32
// BF16 weights with activations rounded to bf16 and kept as float32.
TEXT ·dotBF16F32AVX(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

bf32:
	CMPQ        CX, $32
	JL          bf8
	PREFETCHT0  PF0(SI)
	PREFETCHT1  PF1(SI)
	VPMOVZXWD   (SI), Y4
	VPMOVZXWD   16(SI), Y5
	VPMOVZXWD   32(SI), Y6
	VPMOVZXWD   48(SI), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         bf32

bf8:
	CMPQ        CX, $8
	JL          bfdone
	VPMOVZXWD   (SI), Y4
	VPSLLD      $16, Y4, Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         bf8

bfdone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMPS(Y0, X0, X1)
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func roundF16AVX(dst, src *float32, n int)
// dst = float32(half(src)), rounding to nearest even.
TEXT ·roundF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

rh8:
	CMPQ      CX, $8
	JL        rhdone
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VCVTPH2PS X1, Y1
	VMOVUPS   Y1, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       rh8

rhdone:
	VZEROUPPER
	RET
