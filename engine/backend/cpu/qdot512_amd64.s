//go:build amd64

#include "textflag.h"
#include "simd512.h"

// Q8_0 and Q4_0 weight rows against activations in the q8x layout (see
// q8x_amd64.go) with AVX-512 VL and VNNI on 256-bit vectors: VPDPBUSD sums four
// unsigned-by-signed byte products into each int32 lane. The weights are
// made unsigned (Q8_0: w XOR 0x80 = w+128; Q4_0: the raw nibble q = w+8)
// and the activation row carries -K*(sum of each 4 quants) per lane
// (K = 128 or 8), which is where each lane's sum starts, so a lane ends as
// the exact integer sum of w*x over its 4 elements: the same integers the
// AVX2 kernels get from VPMADDUBSW/VPMADDWD. The float steps are those of
// dotQ8_0AVX and dotQ4_0AVX, in the same order: per block, d = dw*dx
// rounded to float32, then acc = fma(float(lane sums), d, acc) on one
// 8-lane accumulator, blocks in order, and the same final reduction. So
// every result is bit-identical to the AVX2 kernels'.
//
// q8x activation row of nb blocks: nb units of 64 bytes (32 int8 quants,
// then 8 int32 corrections), then nb float32 scales.
//
// The weight stream is prefetched into L1 and L2 (see prefetch.h).

// Q4SHIFTS sets Y14 to word shift counts 0 (low lane) and 4 (high lane),
// Y13 to 0x0F bytes: VBROADCASTI32X4 of 16 nibble bytes, VPSRLVW Y14 and
// VPAND Y13 give the low nibbles (elements 0-15) in the low lane and the
// high nibbles (16-31) in the high lane.
#define Q4SHIFTS \
	VPXOR        X14, X14, X14; \
	MOVL         $0x00040004, AX; \
	VMOVD        AX, X9; \
	VPBROADCASTD X9, X9; \
	VINSERTI128  $1, X9, Y14, Y14; \
	BYTES($0x0F0F0F0F, Y13, X13)

// Q8SCALES sets X3 to the float32 values of the fp16 scales of the four
// Q8_0 blocks at OFF(AX): words 0, 17, 34 and 51 of the 128 bytes there,
// picked by VPERMT2W with Z26 (Q8PREP).
#define Q8SCALES(OFF) \
	VMOVDQU64 OFF(AX), Z3; \
	VPERMT2W  OFF+64(AX), Z26, Z3; \
	VCVTPH2PS X3, X3

// Q4SCALES is Q8SCALES for four Q4_0 blocks: words 0, 9, 18 and 27.
#define Q4SCALES(OFF) \
	VPERMW    OFF(AX), Z26, Z3; \
	VCVTPH2PS X3, X3

// Q8W sets Y to the 32 weights of the Q8_0 block at OFF(AX) plus 128.
#define Q8W(OFF, Y) \
	VPXORD 2+OFF(AX), Y15, Y

// Q4W sets Y to the 32 nibbles of the Q4_0 block at OFF(AX), in element
// order (weights plus 8).
#define Q4W(OFF, Y) \
	VBROADCASTI32X4 2+OFF(AX), Y; \
	VPSRLVW         Y14, Y, Y; \
	VPAND           Y13, Y, Y

// BLOCK adds block K's products to ACC: W the unsigned weights, the
// activation unit at 64*K(BX), its scale product at 4*K(SP).
#define BLOCK(W, K, T, ACC) \
	VMOVDQU32        32+64*K(BX), T; \
	VPDPBUSD         64*K(BX), W, T; \
	VCVTDQ2PS        T, T; \
	VFMADD231PS.BCST 4*K(SP), T, ACC

// ROWS generates a many-row kernel over weight blocks of WB bytes:
// out[r] = dot(weight row r, x) for r < rows, rows wstride bytes apart.
// WEIGHTS(OFF, Y) loads a block's unsigned weights; SCALES4(OFF) converts
// the scales of four blocks; PREP sets constants; PF8 and PF4 prefetch
// ahead of eight and four blocks. Eight blocks per iteration, then four,
// then one: the same arithmetic, fewer instructions per block.
#define ROWS(NAME, WB, WEIGHTS, SCALES4, PREP, PF8, PF4) \
TEXT NAME(SB), NOSPLIT, $32-48; \
	MOVQ w+0(FP), SI; \
	MOVQ x+16(FP), DI; \
	MOVQ rows+32(FP), R10; \
	MOVQ out+40(FP), DX; \
	PREP; \
rowloop: \
	TESTQ  R10, R10; \
	JZ     done; \
	MOVQ   SI, AX; \
	MOVQ   DI, BX; \
	MOVQ   nb+24(FP), CX; \
	MOVQ   CX, R11; \
	SHLQ   $6, R11; \
	ADDQ   DI, R11; \
	VXORPS Y0, Y0, Y0; \
eight: \
	CMPQ    CX, $8; \
	JL      four; \
	PF8; \
	SCALES4(0); \
	VMULPS  (R11), X3, X3; \
	VMOVUPS X3, (SP); \
	SCALES4(4*WB); \
	VMULPS  16(R11), X3, X3; \
	VMOVUPS X3, 16(SP); \
	WEIGHTS(0, Y4); \
	WEIGHTS(WB, Y5); \
	WEIGHTS(2*WB, Y6); \
	WEIGHTS(3*WB, Y7); \
	WEIGHTS(4*WB, Y8); \
	WEIGHTS(5*WB, Y9); \
	WEIGHTS(6*WB, Y10); \
	WEIGHTS(7*WB, Y11); \
	BLOCK(Y4, 0, Y16, Y0); \
	BLOCK(Y5, 1, Y17, Y0); \
	BLOCK(Y6, 2, Y18, Y0); \
	BLOCK(Y7, 3, Y19, Y0); \
	BLOCK(Y8, 4, Y20, Y0); \
	BLOCK(Y9, 5, Y21, Y0); \
	BLOCK(Y10, 6, Y22, Y0); \
	BLOCK(Y11, 7, Y23, Y0); \
	ADDQ    $8*WB, AX; \
	ADDQ    $512, BX; \
	ADDQ    $32, R11; \
	SUBQ    $8, CX; \
	JMP     eight; \
four: \
	CMPQ    CX, $4; \
	JL      one; \
	PF4; \
	SCALES4(0); \
	VMULPS  (R11), X3, X3; \
	VMOVUPS X3, (SP); \
	WEIGHTS(0, Y4); \
	WEIGHTS(WB, Y5); \
	WEIGHTS(2*WB, Y6); \
	WEIGHTS(3*WB, Y7); \
	BLOCK(Y4, 0, Y16, Y0); \
	BLOCK(Y5, 1, Y17, Y0); \
	BLOCK(Y6, 2, Y18, Y0); \
	BLOCK(Y7, 3, Y19, Y0); \
	ADDQ    $4*WB, AX; \
	ADDQ    $256, BX; \
	ADDQ    $16, R11; \
	SUBQ    $4, CX; \
one: \
	TESTQ     CX, CX; \
	JZ        rowend; \
	MOVWLZX   (AX), R12; \
	VMOVD     R12, X3; \
	VCVTPH2PS X3, X3; \
	VMULSS    (R11), X3, X3; \
	VMOVSS    X3, (SP); \
	WEIGHTS(0, Y4); \
	BLOCK(Y4, 0, Y16, Y0); \
	ADDQ      $WB, AX; \
	ADDQ      $64, BX; \
	ADDQ      $4, R11; \
	DECQ      CX; \
	JMP       one; \
rowend: \
	HSUMPS(Y0, X0, X1); \
	MOVSS X0, (DX); \
	ADDQ  wstride+8(FP), SI; \
	ADDQ  $4, DX; \
	DECQ  R10; \
	JMP   rowloop; \
done: \
	VZEROUPPER; \
	RET

#define Q8PREP \
	BYTES($0x80808080, Y15, X15); \
	MOVQ  $0x0033002200110000, AX; \
	VMOVQ AX, X26

#define Q4PREP \
	Q4SHIFTS; \
	MOVQ  $0x001b001200090000, AX; \
	VMOVQ AX, X26

// Eight Q8_0 blocks are 272 bytes, eight Q4_0 blocks 144: prefetch enough
// lines to cover them at both distances (and half as many for four).
#define Q8PF8 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT0 PF0+64(AX); \
	PREFETCHT0 PF0+128(AX); \
	PREFETCHT0 PF0+192(AX); \
	PREFETCHT0 PF0+256(AX); \
	PREFETCHT1 PF1(AX); \
	PREFETCHT1 PF1+64(AX); \
	PREFETCHT1 PF1+128(AX); \
	PREFETCHT1 PF1+192(AX); \
	PREFETCHT1 PF1+256(AX)

#define Q8PF4 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT0 PF0+64(AX); \
	PREFETCHT0 PF0+128(AX); \
	PREFETCHT1 PF1(AX); \
	PREFETCHT1 PF1+64(AX); \
	PREFETCHT1 PF1+128(AX)

#define Q4PF8 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT0 PF0+64(AX); \
	PREFETCHT0 PF0+128(AX); \
	PREFETCHT1 PF1(AX); \
	PREFETCHT1 PF1+64(AX); \
	PREFETCHT1 PF1+128(AX)

#define Q4PF4 \
	PREFETCHT0 PF0(AX); \
	PREFETCHT0 PF0+64(AX); \
	PREFETCHT1 PF1(AX); \
	PREFETCHT1 PF1+64(AX)

// func dotRowsQ8_0VNNI(w *byte, wstride int, x *byte, nb, rows int, out *float32)
ROWS(·dotRowsQ8_0VNNI, 34, Q8W, Q8SCALES, Q8PREP, Q8PF8, Q8PF4)

// func dotRowsQ4_0VNNI(w *byte, wstride int, x *byte, nb, rows int, out *float32)
ROWS(·dotRowsQ4_0VNNI, 18, Q4W, Q4SCALES, Q4PREP, Q4PF8, Q4PF4)

// ROW4 adds one block's products with activation row I to ACC: Y4 holds
// the unsigned weights, Y5 the weight scale in every lane; the row's unit
// is at (XB) and its scale at (XD).
#define ROW4(XB, XD, T, D, ACC) \
	VMOVDQU          32(XB), T; \
	VPDPBUSD         (XB), Y4, T; \
	VCVTDQ2PS        T, T; \
	VMULPS.BCST      (XD), Y5, D; \
	VFMADD231PS      T, D, ACC

// ROW4X is ROW4 for the row R8 bytes after XB and XD.
#define ROW4X(XB, XD, T, D, ACC) \
	VMOVDQU          32(XB)(R8*1), T; \
	VPDPBUSD         (XB)(R8*1), Y4, T; \
	VCVTDQ2PS        T, T; \
	VMULPS.BCST      (XD)(R8*1), Y5, D; \
	VFMADD231PS      T, D, ACC

// ROWS4 generates a kernel of many weight rows against four activation
// rows xstride bytes apart: out[r + i*ostride] = dot(weight row r, x row i)
// for r < rows, i < 4. Each row's arithmetic is that of ROWS.
#define ROWS4(NAME, WB, WEIGHTS, PREP, PF1B) \
TEXT NAME(SB), NOSPLIT, $0-64; \
	MOVQ w+0(FP), SI; \
	MOVQ xstride+24(FP), R8; \
	MOVQ rows+40(FP), R10; \
	MOVQ out+48(FP), DX; \
	PREP; \
rowloop: \
	TESTQ  R10, R10; \
	JZ     done; \
	MOVQ   SI, AX; \
	MOVQ   x+16(FP), BX; \
	MOVQ   nb+32(FP), CX; \
	MOVQ   CX, R11; \
	SHLQ   $6, R11; \
	ADDQ   BX, R11; \
	LEAQ   (BX)(R8*2), DI; \
	LEAQ   (R11)(R8*2), R9; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
block: \
	TESTQ        CX, CX; \
	JZ           rowend; \
	PF1B; \
	MOVWLZX      (AX), R12; \
	VMOVD        R12, X5; \
	VCVTPH2PS    X5, X5; \
	VBROADCASTSS X5, Y5; \
	WEIGHTS(0, Y4); \
	ROW4(BX, R11, Y6, Y7, Y0); \
	ROW4X(BX, R11, Y8, Y9, Y1); \
	ROW4(DI, R9, Y10, Y11, Y2); \
	ROW4X(DI, R9, Y12, Y16, Y3); \
	ADDQ         $WB, AX; \
	ADDQ         $64, BX; \
	ADDQ         $64, DI; \
	ADDQ         $4, R11; \
	ADDQ         $4, R9; \
	DECQ         CX; \
	JMP          block; \
rowend: \
	MOVQ   ostride+56(FP), R12; \
	SHLQ   $2, R12; \
	MOVQ   DX, R13; \
	HSUMPS(Y0, X0, X6); \
	MOVSS  X0, (R13); \
	HSUMPS(Y1, X1, X6); \
	MOVSS  X1, (R13)(R12*1); \
	HSUMPS(Y2, X2, X6); \
	MOVSS  X2, (R13)(R12*2); \
	LEAQ   (R13)(R12*2), R13; \
	HSUMPS(Y3, X3, X6); \
	MOVSS  X3, (R13)(R12*1); \
	ADDQ   wstride+8(FP), SI; \
	ADDQ   $4, DX; \
	DECQ   R10; \
	JMP    rowloop; \
done: \
	VZEROUPPER; \
	RET

// One block per iteration: prefetch one line at each distance, which
// covers a 34- or 18-byte block.
#define PF1LINE \
	PREFETCHT0 PF0(AX); \
	PREFETCHT1 PF1(AX)

// func dotRowsQ8_0x4VNNI(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)
ROWS4(·dotRowsQ8_0x4VNNI, 34, Q8W, Q8PREP, PF1LINE)

// func dotRowsQ4_0x4VNNI(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)
ROWS4(·dotRowsQ4_0x4VNNI, 18, Q4W, Q4PREP, PF1LINE)
