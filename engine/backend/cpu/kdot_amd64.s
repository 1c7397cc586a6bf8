//go:build amd64

#include "textflag.h"
#include "prefetch.h"

// K-quant row dot products (Q4_K x Q8_K, Q6_K x Q8_K) with AVX2 and FMA.
// Each takes a count of 256-element super-blocks. Q8_K blocks are 292 bytes:
// float32 d at 0, int8 qs[256] at 4, int16 bsums[16] at 260 (sums of each
// 16 qs).
//
// The weight stream is prefetched into L1 and L2 (see prefetch.h).

#define HSUMPS(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0x4E, X, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0xB1, X, T; \
	VADDSS       T, X, X

#define BYTES(V, Y, X) \
	MOVL         V, AX; \
	VMOVD        AX, X; \
	VPBROADCASTD X, Y

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

// ADVANCE4 moves the four activation row pointers to their next block.
#define ADVANCE4(N) \
	ADDQ N, DI; \
	ADDQ N, R9; \
	ADDQ N, R10; \
	ADDQ N, R11

// Q4K_UNPACK leaves in AX the eight 6-bit scales and in R8 the eight 6-bit
// mins of the Q4_K block at SI, one per byte (see dotQ4_KAVX). Clobbers BX,
// DX, R12, R13.
#define Q4K_UNPACK \
	MOVL  4(SI), R8; \
	MOVL  8(SI), R12; \
	MOVL  12(SI), R13; \
	MOVL  R8, AX; \
	ANDL  $0x3f3f3f3f, AX; \
	MOVL  R13, BX; \
	ANDL  $0x0f0f0f0f, BX; \
	MOVL  R8, DX; \
	SHRL  $6, DX; \
	ANDL  $0x03030303, DX; \
	SHLL  $4, DX; \
	ORL   DX, BX; \
	SHLQ  $32, BX; \
	ORQ   BX, AX; \
	MOVL  R12, R8; \
	ANDL  $0x3f3f3f3f, R8; \
	MOVL  R13, BX; \
	SHRL  $4, BX; \
	ANDL  $0x0f0f0f0f, BX; \
	MOVL  R12, DX; \
	SHRL  $6, DX; \
	ANDL  $0x03030303, DX; \
	SHLL  $4, DX; \
	ORL   DX, BX; \
	SHLQ  $32, BX; \
	ORQ   BX, R8

// Q4K_NIBBLES stores chunk J's low and high nibbles at 64*J(SP) and
// 64*J+32(SP), and the int16 scales of its two sub-blocks, broadcast, at
// 256+64*J(SP) and 288+64*J(SP) (the eight scales are at 512(SP)).
#define Q4K_NIBBLES(J) \
	VMOVDQU      16+32*J(SI), Y8; \
	VPSRLW       $4, Y8, Y9; \
	VPAND        Y15, Y8, Y8; \
	VPAND        Y15, Y9, Y9; \
	VMOVDQU      Y8, 64*J(SP); \
	VMOVDQU      Y9, 64*J+32(SP); \
	VPBROADCASTW 512+4*J(SP), Y8; \
	VPBROADCASTW 514+4*J(SP), Y9; \
	VMOVDQU      Y8, 256+64*J(SP); \
	VMOVDQU      Y9, 288+64*J(SP)

// Q4K_ROWCHUNK adds chunk J's scale-weighted products with the activation
// row at XB to Y12.
#define Q4K_ROWCHUNK(XB, J) \
	VMOVDQU    64*J(SP), Y8; \
	VMOVDQU    64*J+32(SP), Y9; \
	VPMADDUBSW 4+64*J(XB), Y8, Y8; \
	VPMADDUBSW 36+64*J(XB), Y9, Y9; \
	VPMADDWD   256+64*J(SP), Y8, Y8; \
	VPMADDWD   288+64*J(SP), Y9, Y9; \
	VPADDD     Y8, Y12, Y12; \
	VPADDD     Y9, Y12, Y12

// Q4K_ROW adds the block's dot with the Q8_K block at XB to ACC. Y6: the
// mins, each twice; X7: [d, dmin].
#define Q4K_ROW(XB, ACC) \
	VPXOR        Y12, Y12, Y12; \
	Q4K_ROWCHUNK(XB, 0); \
	Q4K_ROWCHUNK(XB, 1); \
	Q4K_ROWCHUNK(XB, 2); \
	Q4K_ROWCHUNK(XB, 3); \
	VPMADDWD     260(XB), Y6, Y13; \
	VCVTDQ2PS    Y13, Y13; \
	VCVTDQ2PS    Y12, Y12; \
	VBROADCASTSS (XB), X9; \
	VMULPS       X9, X7, X9; \
	VBROADCASTSS X9, Y10; \
	VMOVSHDUP    X9, X11; \
	VBROADCASTSS X11, Y11; \
	VFMADD231PS  Y12, Y10, ACC; \
	VFNMADD231PS Y13, Y11, ACC

// Q6K_PREP unpacks half H of the Q6_K block at SI into 128 bytes at
// 128*H(SP) (weights 32k..32k+31 of the half at 128*H+32k) and the scale
// vectors for them (see Q6K_ACC) at 256+128*H+32k(SP). SC: the half's eight
// int16 scales in both lanes. Scratch: Y9-Y13 (not the accumulators).
#define Q6K_PREP(H, SC) \
	VMOVDQU 64*H(SI), Y11; \
	VMOVDQU 64*H+32(SI), Y12; \
	VMOVDQU 128+32*H(SI), Y13; \
	VPAND   Y15, Y11, Y9; \
	VPSLLW  $4, Y13, Y10; \
	VPAND   Y14, Y10, Y10; \
	VPOR    Y10, Y9, Y9; \
	VMOVDQU Y9, 128*H(SP); \
	VPAND   Y15, Y12, Y9; \
	VPSLLW  $2, Y13, Y10; \
	VPAND   Y14, Y10, Y10; \
	VPOR    Y10, Y9, Y9; \
	VMOVDQU Y9, 128*H+32(SP); \
	VPSRLW  $4, Y11, Y9; \
	VPAND   Y15, Y9, Y9; \
	VPAND   Y14, Y13, Y10; \
	VPOR    Y10, Y9, Y9; \
	VMOVDQU Y9, 128*H+64(SP); \
	VPSRLW  $4, Y12, Y9; \
	VPAND   Y15, Y9, Y9; \
	VPSRLW  $2, Y13, Y10; \
	VPAND   Y14, Y10, Y10; \
	VPOR    Y10, Y9, Y9; \
	VMOVDQU Y9, 128*H+96(SP); \
	VPSHUFB q6shuf<>+0(SB), SC, Y9; \
	VMOVDQU Y9, 256+128*H(SP); \
	VPSHUFB q6shuf<>+32(SB), SC, Y9; \
	VMOVDQU Y9, 256+128*H+32(SP); \
	VPSHUFB q6shuf<>+64(SB), SC, Y9; \
	VMOVDQU Y9, 256+128*H+64(SP); \
	VPSHUFB q6shuf<>+96(SB), SC, Y9; \
	VMOVDQU Y9, 256+128*H+96(SP)

// Q6K_ROWPART adds the products of the 32 weights at OFF(SP) with the
// activations at 4+OFF(XB), weighted by the scales at 256+OFF(SP), to Y12.
#define Q6K_ROWPART(XB, OFF) \
	VMOVDQU    OFF(SP), Y8; \
	VPMADDUBSW 4+OFF(XB), Y8, Y8; \
	VPMADDWD   256+OFF(SP), Y8, Y8; \
	VPADDD     Y8, Y12, Y12

// Q6K_ROW adds the block's dot with the Q8_K block at XB to ACC. Y4: the 16
// int16 scales; X7: d.
#define Q6K_ROW(XB, ACC) \
	VPMADDWD     260(XB), Y4, Y12; \
	VPSLLD       $5, Y12, Y12; \
	VPXOR        Y13, Y13, Y13; \
	VPSUBD       Y12, Y13, Y12; \
	Q6K_ROWPART(XB, 0); \
	Q6K_ROWPART(XB, 32); \
	Q6K_ROWPART(XB, 64); \
	Q6K_ROWPART(XB, 96); \
	Q6K_ROWPART(XB, 128); \
	Q6K_ROWPART(XB, 160); \
	Q6K_ROWPART(XB, 192); \
	Q6K_ROWPART(XB, 224); \
	VCVTDQ2PS    Y12, Y12; \
	VMULSS       (XB), X7, X9; \
	VBROADCASTSS X9, Y9; \
	VFMADD231PS  Y12, Y9, ACC


// Q4K_CHUNK multiplies the 64 weights of chunk J (32 bytes of nibbles: low
// nibbles are sub-block 2J, high nibbles sub-block 2J+1) with their
// activations and adds scale-weighted int32 sums to Y12. Products of 4-bit
// unsigned weights and int8 activations pair-sum within int16 (2*15*128).
// The eight int16 sub-block scales are at 0(SP). Y15: 0x0F bytes.
#define Q4K_CHUNK(J) \
	VMOVDQU      16+32*J(SI), Y2; \
	VPSRLW       $4, Y2, Y3; \
	VPAND        Y15, Y2, Y2; \
	VPAND        Y15, Y3, Y3; \
	VPMADDUBSW   4+64*J(DI), Y2, Y2; \
	VPMADDUBSW   36+64*J(DI), Y3, Y3; \
	VPBROADCASTW 4*J(SP), Y4; \
	VPBROADCASTW 4*J+2(SP), Y5; \
	VPMADDWD     Y4, Y2, Y2; \
	VPMADDWD     Y5, Y3, Y3; \
	VPADDD       Y2, Y12, Y12; \
	VPADDD       Y3, Y12, Y12

// func dotQ4_KAVX(w, x *byte, nb int) float32
// Q4_K blocks are 144 bytes: fp16 d, fp16 dmin, 12 bytes of packed 6-bit
// scales and mins, 128 bytes of nibbles. The value of element e of
// sub-block j is d*sc[j]*q - dmin*m[j], so the dot is
// dx*d*sum_j sc[j]*sum(q*x) - dx*dmin*sum_j m[j]*(bsums[2j]+bsums[2j+1]).
// One accumulator, the two terms added in that order: the same arithmetic
// per row as dotQ4_Kx4AVX, so that a row's result does not depend on how
// MatMul batched it.
TEXT ·dotQ4_KAVX(SB), NOSPLIT, $16-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   nb+16(FP), CX
	VXORPS Y0, Y0, Y0
	BYTES($0x0F0F0F0F, Y15, X15)

q4k:
	TESTQ      CX, CX
	JZ         q4kdone
	PREFETCHT0 PF0(SI)
	PREFETCHT0 PF0+64(SI)
	PREFETCHT0 PF0+128(SI)
	PREFETCHT1 PF1(SI)
	PREFETCHT1 PF1+64(SI)
	PREFETCHT1 PF1+128(SI)

	// Unpack the 6-bit scales and mins: with u0, u1, u2 the three
	// little-endian words of the 12 bytes, scales 0-3 are u0&0x3f (per
	// byte), mins 0-3 u1&0x3f, scales 4-7 (u2&0xf) | (u0>>6&3)<<4, and
	// mins 4-7 (u2>>4&0xf) | (u1>>6&3)<<4.
	MOVL  4(SI), R8
	MOVL  8(SI), R9
	MOVL  12(SI), R10
	MOVL  R8, AX
	ANDL  $0x3f3f3f3f, AX
	MOVL  R10, BX
	ANDL  $0x0f0f0f0f, BX
	MOVL  R8, DX
	SHRL  $6, DX
	ANDL  $0x03030303, DX
	SHLL  $4, DX
	ORL   DX, BX
	SHLQ  $32, BX
	ORQ   BX, AX        // AX: 8 scales
	MOVL  R9, R11
	ANDL  $0x3f3f3f3f, R11
	MOVL  R10, BX
	SHRL  $4, BX
	ANDL  $0x0f0f0f0f, BX
	MOVL  R9, DX
	SHRL  $6, DX
	ANDL  $0x03030303, DX
	SHLL  $4, DX
	ORL   DX, BX
	SHLQ  $32, BX
	ORQ   BX, R11       // R11: 8 mins

	VMOVQ     AX, X4
	VPMOVZXBW X4, X4
	VMOVDQU   X4, 0(SP)

	// Mins: each of the 8 mins twice, against the 16 bsums.
	VMOVQ       R11, X5
	VPMOVZXBW   X5, X5
	VPUNPCKLWD  X5, X5, X6
	VPUNPCKHWD  X5, X5, X7
	VINSERTI128 $1, X7, Y6, Y6
	VPMADDWD    260(DI), Y6, Y6
	VCVTDQ2PS   Y6, Y6

	// [d*dx, dmin*dx]
	MOVL         (SI), AX
	VMOVD        AX, X8
	VCVTPH2PS    X8, X8
	VBROADCASTSS (DI), X9
	VMULPS       X9, X8, X8
	VBROADCASTSS X8, Y10
	VMOVSHDUP    X8, X11
	VBROADCASTSS X11, Y11

	VPXOR Y12, Y12, Y12
	Q4K_CHUNK(0)
	Q4K_CHUNK(1)
	Q4K_CHUNK(2)
	Q4K_CHUNK(3)
	VCVTDQ2PS    Y12, Y12
	VFMADD231PS  Y12, Y10, Y0
	VFNMADD231PS Y6, Y11, Y0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JMP  q4k

q4kdone:
	HSUMPS(Y0, X0, X1)
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// Q6K_ACC multiplies 32 unsigned 6-bit weights in Q with the activations at
// XOFF(DI), weights each 16 of them by its int16 scale (SC holds the eight
// scales of this half in both lanes; the VPSHUFB control at SHUF picks scale
// 2k for the low lane and 2k+1 for the high one), and adds to Y12. Pair sums
// fit int16: 2*63*128.
#define Q6K_ACC(Q, XOFF, SHUF, SC) \
	VPMADDUBSW XOFF(DI), Q, Q; \
	VPSHUFB    q6shuf<>+SHUF(SB), SC, Y11; \
	VPMADDWD   Y11, Q, Q; \
	VPADDD     Q, Y12, Y12

// Q6K_HALF handles elements 128H..128H+127: ql bytes 64H..64H+63, qh bytes
// 32H..32H+31. Element 32k+l of the half has the low nibble (k=0,1) or high
// nibble (k=2,3) of ql[l+32*(k&1)] and bits 2k,2k+1 of qh[l] as bits 4,5.
// Y15: 0x0F bytes, Y14: 0x30 bytes.
#define Q6K_HALF(H, SC) \
	VMOVDQU 64*H(SI), Y1; \
	VMOVDQU 64*H+32(SI), Y2; \
	VMOVDQU 128+32*H(SI), Y3; \
	VPAND   Y15, Y1, Y9; \
	VPSLLW  $4, Y3, Y10; \
	VPAND   Y14, Y10, Y10; \
	VPOR    Y10, Y9, Y9; \
	Q6K_ACC(Y9, 4+128*H, 0, SC); \
	VPAND   Y15, Y2, Y9; \
	VPSLLW  $2, Y3, Y10; \
	VPAND   Y14, Y10, Y10; \
	VPOR    Y10, Y9, Y9; \
	Q6K_ACC(Y9, 36+128*H, 32, SC); \
	VPSRLW  $4, Y1, Y9; \
	VPAND   Y15, Y9, Y9; \
	VPAND   Y14, Y3, Y10; \
	VPOR    Y10, Y9, Y9; \
	Q6K_ACC(Y9, 68+128*H, 64, SC); \
	VPSRLW  $4, Y2, Y9; \
	VPAND   Y15, Y9, Y9; \
	VPSRLW  $2, Y3, Y10; \
	VPAND   Y14, Y10, Y10; \
	VPOR    Y10, Y9, Y9; \
	Q6K_ACC(Y9, 100+128*H, 96, SC)

// func dotQ6_KAVX(w, x *byte, nb int) float32
// Q6_K blocks are 210 bytes: ql[128], qh[64], int8 scales[16], fp16 d. The
// value of element e is d*scales[e/16]*(q-32), so the dot is
// dx*d*(sum_g scales[g]*sum(q*x) - 32*sum_g scales[g]*bsums[g]).
TEXT ·dotQ6_KAVX(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   nb+16(FP), CX
	VXORPS Y0, Y0, Y0
	BYTES($0x0F0F0F0F, Y15, X15)
	BYTES($0x30303030, Y14, X14)

q6k:
	TESTQ      CX, CX
	JZ         q6kdone
	PREFETCHT0 PF0(SI)
	PREFETCHT0 PF0+64(SI)
	PREFETCHT0 PF0+128(SI)
	PREFETCHT0 PF0+192(SI)
	PREFETCHT1 PF1(SI)
	PREFETCHT1 PF1+64(SI)
	PREFETCHT1 PF1+128(SI)
	PREFETCHT1 PF1+192(SI)

	VPMOVSXBW   192(SI), Y4
	VPMADDWD    260(DI), Y4, Y5
	VPSLLD      $5, Y5, Y5
	VPXOR       Y12, Y12, Y12
	VPSUBD      Y5, Y12, Y12
	VINSERTI128 $1, X4, Y4, Y6
	VPERM2I128  $0x11, Y4, Y4, Y7

	Q6K_HALF(0, Y6)
	Q6K_HALF(1, Y7)

	MOVWLZX      208(SI), AX
	VMOVD        AX, X8
	VCVTPH2PS    X8, X8
	VMULSS       (DI), X8, X8
	VBROADCASTSS X8, Y8
	VCVTDQ2PS    Y12, Y12
	VFMADD231PS  Y12, Y8, Y0

	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JMP  q6k

q6kdone:
	HSUMPS(Y0, X0, X1)
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotQ4_Kx4AVX(w, x *byte, xstride, nb int, out *float32, ostride int)
// One Q4_K weight row against four Q8_K activation rows: scales, mins and
// nibbles are unpacked once per block (into the frame) for all four.
TEXT ·dotQ4_Kx4AVX(SB), 0, $528-48
	MOVQ w+0(FP), SI
	MOVQ nb+24(FP), CX
	ROWS4
	BYTES($0x0F0F0F0F, Y15, X15)

q4kx4:
	TESTQ      CX, CX
	JZ         q4kx4done
	PREFETCHT0 PF0(SI)
	PREFETCHT0 PF0+64(SI)
	PREFETCHT0 PF0+128(SI)
	PREFETCHT1 PF1(SI)
	PREFETCHT1 PF1+64(SI)
	PREFETCHT1 PF1+128(SI)
	Q4K_UNPACK
	VMOVQ       AX, X4
	VPMOVZXBW   X4, X4
	VMOVDQU     X4, 512(SP)
	VMOVQ       R8, X5
	VPMOVZXBW   X5, X5
	VPUNPCKLWD  X5, X5, X6
	VPUNPCKHWD  X5, X5, X7
	VINSERTI128 $1, X7, Y6, Y6
	MOVL        (SI), AX
	VMOVD       AX, X7
	VCVTPH2PS   X7, X7
	Q4K_NIBBLES(0)
	Q4K_NIBBLES(1)
	Q4K_NIBBLES(2)
	Q4K_NIBBLES(3)
	Q4K_ROW(DI, Y0)
	Q4K_ROW(R9, Y1)
	Q4K_ROW(R10, Y2)
	Q4K_ROW(R11, Y3)
	ADDQ        $144, SI
	ADVANCE4($292)
	DECQ        CX
	JMP         q4kx4

q4kx4done:
	STORE4
	VZEROUPPER
	RET

// func dotQ6_Kx4AVX(w, x *byte, xstride, nb int, out *float32, ostride int)
// One Q6_K weight row against four Q8_K activation rows, unpacking each
// block once (into the frame) for all four.
TEXT ·dotQ6_Kx4AVX(SB), 0, $512-48
	MOVQ w+0(FP), SI
	MOVQ nb+24(FP), CX
	ROWS4
	BYTES($0x0F0F0F0F, Y15, X15)
	BYTES($0x30303030, Y14, X14)

q6kx4:
	TESTQ      CX, CX
	JZ         q6kx4done
	PREFETCHT0 PF0(SI)
	PREFETCHT0 PF0+64(SI)
	PREFETCHT0 PF0+128(SI)
	PREFETCHT0 PF0+192(SI)
	PREFETCHT1 PF1(SI)
	PREFETCHT1 PF1+64(SI)
	PREFETCHT1 PF1+128(SI)
	PREFETCHT1 PF1+192(SI)
	VPMOVSXBW   192(SI), Y4
	VINSERTI128 $1, X4, Y4, Y6
	VPERM2I128  $0x11, Y4, Y4, Y7
	Q6K_PREP(0, Y6)
	Q6K_PREP(1, Y7)
	MOVWLZX     208(SI), AX
	VMOVD       AX, X7
	VCVTPH2PS   X7, X7
	Q6K_ROW(DI, Y0)
	Q6K_ROW(R9, Y1)
	Q6K_ROW(R10, Y2)
	Q6K_ROW(R11, Y3)
	ADDQ        $210, SI
	ADVANCE4($292)
	DECQ        CX
	JMP         q6kx4

q6kx4done:
	STORE4
	VZEROUPPER
	RET


DATA q6shuf<>+0(SB)/8, $0x100010001000100
DATA q6shuf<>+8(SB)/8, $0x100010001000100
DATA q6shuf<>+16(SB)/8, $0x302030203020302
DATA q6shuf<>+24(SB)/8, $0x302030203020302
DATA q6shuf<>+32(SB)/8, $0x504050405040504
DATA q6shuf<>+40(SB)/8, $0x504050405040504
DATA q6shuf<>+48(SB)/8, $0x706070607060706
DATA q6shuf<>+56(SB)/8, $0x706070607060706
DATA q6shuf<>+64(SB)/8, $0x908090809080908
DATA q6shuf<>+72(SB)/8, $0x908090809080908
DATA q6shuf<>+80(SB)/8, $0xb0a0b0a0b0a0b0a
DATA q6shuf<>+88(SB)/8, $0xb0a0b0a0b0a0b0a
DATA q6shuf<>+96(SB)/8, $0xd0c0d0c0d0c0d0c
DATA q6shuf<>+104(SB)/8, $0xd0c0d0c0d0c0d0c
DATA q6shuf<>+112(SB)/8, $0xf0e0f0e0f0e0f0e
DATA q6shuf<>+120(SB)/8, $0xf0e0f0e0f0e0f0e
GLOBL q6shuf<>(SB), RODATA|NOPTR, $128
