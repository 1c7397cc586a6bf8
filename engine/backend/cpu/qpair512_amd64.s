//go:build amd64

#include "textflag.h"
#include "simd512.h"

// Batched Q8_0 and Q4_0 kernels: pairs of weight rows against four
// activation rows in the q8x layout, with 512-bit VNNI. A 512-bit vector
// holds one block of weight row r in its low half and the same block of
// row r+1 in its high half; each activation block is broadcast to both
// halves. Each half then does exactly what dotRowsQ8_0VNNI does for its
// row (the same lane sums, d = dw*dx rounded to float32, one fma per
// block into an 8-lane accumulator, blocks in order, the same reduction),
// so every result is bit-identical to the single-row kernels' and to the
// AVX2 kernels'; the pair only halves the instructions per product.
//
// func dotPairsQ8_0VNNI(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)
// func dotPairsQ4_0VNNI(w *byte, wstride int, x *byte, xstride, nb, rows int, out *float32, ostride int)
//
// out[r + i*ostride] = dot(weight row r, activation row i) for r < rows
// (even) and i < 4; weight rows wstride bytes apart, activation rows
// xstride bytes apart.

// Registers: AX, DI weight rows r and r+1; BX, R12 the units of activation
// rows 0 and 2 (rows 1 and 3 are R8 = xstride further); R11, R9 their
// scales; CX blocks left; DX out; R10 rows left; SI row r's start.
// Z0-Z3 accumulators (activation rows 0-3), Z4 weights, Z5 weight scales
// [dw(r) x8 | dw(r+1) x8], Z8 the float32 scales of four blocks of both
// rows [r: 4 | r+1: 4], Z24-Z27 VPERMPS controls picking block k's pair
// from Z8, Z28 the VPERMW/VPERMT2W control picking fp16 scales.

// PROW adds block K's products with activation row I (unit at XB, scale
// at XD, optionally indexed by IDX) to ACC. T, D scratch.
#define PROW(K, XB, XD, T, D, ACC) \
	VBROADCASTI64X4 32+64*K(XB), T; \
	VBROADCASTI64X4 64*K(XB), D; \
	VPDPBUSD        D, Z4, T; \
	VCVTDQ2PS       T, T; \
	VMULPS.BCST     4*K(XD), Z5, D; \
	VFMADD231PS     T, D, ACC

#define PROWX(K, XB, XD, T, D, ACC) \
	VBROADCASTI64X4 32+64*K(XB)(R8*1), T; \
	VBROADCASTI64X4 64*K(XB)(R8*1), D; \
	VPDPBUSD        D, Z4, T; \
	VCVTDQ2PS       T, T; \
	VMULPS.BCST     4*K(XD)(R8*1), Z5, D; \
	VFMADD231PS     T, D, ACC

// PBLOCK adds block K of both weight rows to the four accumulators:
// WEIGHTS(OFF) loads the pair's unsigned weights into Z4, Z5 must hold
// the pair's scales.
#define PBLOCK(K) \
	PROW(K, BX, R11, Z6, Z7, Z0); \
	PROWX(K, BX, R11, Z9, Z10, Z1); \
	PROW(K, R12, R9, Z11, Z12, Z2); \
	PROWX(K, R12, R9, Z16, Z17, Z3)

// Q8 weights of a pair: block at OFF of each row, plus 128. Z15: 0x80.
#define Q8PW(OFF) \
	VMOVDQU      2+OFF(AX), Y4; \
	VINSERTI64X4 $1, 2+OFF(DI), Z4, Z4; \
	VPXORD       Z15, Z4, Z4

// Q4 nibbles of a pair: each row's 16 bytes in two 128-bit lanes (K1
// selects the upper two for row r+1), shifted by Z14 (0 or 4 per lane)
// and masked with Z13 (0x0F).
#define Q4PW(OFF) \
	VBROADCASTI32X4 2+OFF(AX), Z4; \
	VBROADCASTI32X4 2+OFF(DI), K1, Z4; \
	VPSRLVW         Z14, Z4, Z4; \
	VPANDD          Z13, Z4, Z4

// The fp16 scales of four blocks of each row into Z8 as float32.
#define Q8PS \
	VMOVDQU64   (AX), Z8; \
	VPERMT2W    64(AX), Z28, Z8; \
	VMOVDQU64   (DI), Z9; \
	VPERMT2W    64(DI), Z28, Z9; \
	VPUNPCKLQDQ X9, X8, X8; \
	VCVTPH2PS   X8, Y8

#define Q4PS \
	VPERMW      (AX), Z28, Z8; \
	VPERMW      (DI), Z28, Z9; \
	VPUNPCKLQDQ X9, X8, X8; \
	VCVTPH2PS   X8, Y8

#define Q8PREP \
	MOVL         $0x80808080, AX; \
	VPBROADCASTD AX, Z15; \
	MOVQ         $0x0033002200110000, AX; \
	VMOVQ        AX, X28

#define Q4PREP \
	MOVL          $0x00040004, AX; \
	VPBROADCASTD  AX, Z14; \
	MOVL          $0x00ff00ff, AX; \
	KMOVD         AX, K2; \
	VPXORD        Z9, Z9, Z9; \
	VMOVDQU16     Z9, K2, Z14; \
	MOVL          $0x0f0f0f0f, AX; \
	VPBROADCASTD  AX, Z13; \
	MOVL          $0xff00, AX; \
	KMOVW         AX, K1; \
	MOVQ          $0x001b001200090000, AX; \
	VMOVQ         AX, X28

// Prefetch the next lines of both rows (one line per row and block covers
// a 34- or 18-byte block).
#define PPF(K, WB) \
	PREFETCHT0 PF0+K*WB(AX); \
	PREFETCHT0 PF0+K*WB(DI); \
	PREFETCHT1 PF1+K*WB(AX); \
	PREFETCHT1 PF1+K*WB(DI)

// STOREPAIR stores the low and high halves' sums of ACC at OUT and OUT+4.
#define STOREPAIR(ACC, Y, X, OUT, OUT4) \
	VEXTRACTF64X4 $1, ACC, Y6; \
	HSUMPS(Y, X, X7); \
	MOVSS         X, OUT; \
	HSUMPS(Y6, X6, X7); \
	MOVSS         X6, OUT4

#define PAIRS(NAME, WB, PW, PS, PREP) \
TEXT NAME(SB), NOSPLIT, $0-64; \
	PREP; \
	VMOVDQU32 pairperm<>+0(SB), Z24; \
	VMOVDQU32 pairperm<>+64(SB), Z25; \
	VMOVDQU32 pairperm<>+128(SB), Z26; \
	VMOVDQU32 pairperm<>+192(SB), Z27; \
	MOVQ      w+0(FP), SI; \
	MOVQ      xstride+24(FP), R8; \
	MOVQ      rows+40(FP), R10; \
	MOVQ      out+48(FP), DX; \
pairloop: \
	CMPQ   R10, $2; \
	JL     done; \
	MOVQ   SI, AX; \
	MOVQ   wstride+8(FP), DI; \
	ADDQ   SI, DI; \
	MOVQ   x+16(FP), BX; \
	MOVQ   nb+32(FP), CX; \
	MOVQ   CX, R11; \
	SHLQ   $6, R11; \
	ADDQ   BX, R11; \
	LEAQ   (BX)(R8*2), R12; \
	LEAQ   (R11)(R8*2), R9; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
four: \
	CMPQ     CX, $4; \
	JL       one; \
	PPF(0, WB); \
	PPF(2, WB); \
	PS; \
	PW(0); \
	VPERMPS  Z8, Z24, Z5; \
	PBLOCK(0); \
	PW(WB); \
	VPERMPS  Z8, Z25, Z5; \
	PBLOCK(1); \
	PW(2*WB); \
	VPERMPS  Z8, Z26, Z5; \
	PBLOCK(2); \
	PW(3*WB); \
	VPERMPS  Z8, Z27, Z5; \
	PBLOCK(3); \
	ADDQ     $4*WB, AX; \
	ADDQ     $4*WB, DI; \
	ADDQ     $256, BX; \
	ADDQ     $256, R12; \
	ADDQ     $16, R11; \
	ADDQ     $16, R9; \
	SUBQ     $4, CX; \
	JMP      four; \
one: \
	TESTQ          CX, CX; \
	JZ             pairend; \
	VPBROADCASTW   (AX), X8; \
	VPBROADCASTW   (DI), X9; \
	VINSERTI128    $1, X9, Y8, Y8; \
	VCVTPH2PS      Y8, Z5; \
	PW(0); \
	PBLOCK(0); \
	ADDQ           $WB, AX; \
	ADDQ           $WB, DI; \
	ADDQ           $64, BX; \
	ADDQ           $64, R12; \
	ADDQ           $4, R11; \
	ADDQ           $4, R9; \
	DECQ           CX; \
	JMP            one; \
pairend: \
	MOVQ ostride+56(FP), R13; \
	SHLQ $2, R13; \
	LEAQ (R13)(R13*2), CX; \
	STOREPAIR(Z0, Y0, X0, (DX), 4(DX)); \
	STOREPAIR(Z1, Y1, X1, (DX)(R13*1), 4(DX)(R13*1)); \
	STOREPAIR(Z2, Y2, X2, (DX)(R13*2), 4(DX)(R13*2)); \
	STOREPAIR(Z3, Y3, X3, (DX)(CX*1), 4(DX)(CX*1)); \
	MOVQ wstride+8(FP), R13; \
	LEAQ (SI)(R13*2), SI; \
	ADDQ $8, DX; \
	SUBQ $2, R10; \
	JMP  pairloop; \
done: \
	VZEROUPPER; \
	RET

PAIRS(·dotPairsQ8_0VNNI, 34, Q8PW, Q8PS, Q8PREP)

PAIRS(·dotPairsQ4_0VNNI, 18, Q4PW, Q4PS, Q4PREP)

// VPERMPS controls: block k's scale of row r (lane k of Z8) in the low
// eight lanes, of row r+1 (lane 4+k) in the high eight.
DATA pairperm<>+0(SB)/8, $0x0000000000000000
DATA pairperm<>+8(SB)/8, $0x0000000000000000
DATA pairperm<>+16(SB)/8, $0x0000000000000000
DATA pairperm<>+24(SB)/8, $0x0000000000000000
DATA pairperm<>+32(SB)/8, $0x0000000400000004
DATA pairperm<>+40(SB)/8, $0x0000000400000004
DATA pairperm<>+48(SB)/8, $0x0000000400000004
DATA pairperm<>+56(SB)/8, $0x0000000400000004
DATA pairperm<>+64(SB)/8, $0x0000000100000001
DATA pairperm<>+72(SB)/8, $0x0000000100000001
DATA pairperm<>+80(SB)/8, $0x0000000100000001
DATA pairperm<>+88(SB)/8, $0x0000000100000001
DATA pairperm<>+96(SB)/8, $0x0000000500000005
DATA pairperm<>+104(SB)/8, $0x0000000500000005
DATA pairperm<>+112(SB)/8, $0x0000000500000005
DATA pairperm<>+120(SB)/8, $0x0000000500000005
DATA pairperm<>+128(SB)/8, $0x0000000200000002
DATA pairperm<>+136(SB)/8, $0x0000000200000002
DATA pairperm<>+144(SB)/8, $0x0000000200000002
DATA pairperm<>+152(SB)/8, $0x0000000200000002
DATA pairperm<>+160(SB)/8, $0x0000000600000006
DATA pairperm<>+168(SB)/8, $0x0000000600000006
DATA pairperm<>+176(SB)/8, $0x0000000600000006
DATA pairperm<>+184(SB)/8, $0x0000000600000006
DATA pairperm<>+192(SB)/8, $0x0000000300000003
DATA pairperm<>+200(SB)/8, $0x0000000300000003
DATA pairperm<>+208(SB)/8, $0x0000000300000003
DATA pairperm<>+216(SB)/8, $0x0000000300000003
DATA pairperm<>+224(SB)/8, $0x0000000700000007
DATA pairperm<>+232(SB)/8, $0x0000000700000007
DATA pairperm<>+240(SB)/8, $0x0000000700000007
DATA pairperm<>+248(SB)/8, $0x0000000700000007
GLOBL pairperm<>(SB), RODATA|NOPTR, $256
