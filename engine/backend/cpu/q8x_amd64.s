//go:build amd64

#include "textflag.h"

// BCAST sets Z to sixteen copies of the 32-bit pattern V.
#define BCAST(V, Z) \
	MOVL         V, AX; \
	VMOVD        AX, X31; \
	VPBROADCASTD X31, Z

// ROUNDQ rounds the 16 floats in Z half away from zero, as engine/quant's
// roundAway does, and stores their low bytes (int8) in X. Truncate, then
// add ±1 where the dropped fraction is at least one half (the difference
// is exact below 2^23; at or above it, and for Inf and NaN, it is 0 or NaN
// and nothing is added, so the conversion gives what Go's int32(f) gives).
// Z20: 0x7fffffff, Z21: 0.5, Z22: 1.0, Z23: 0x80000000. Scratch: Z16, Z17.
#define ROUNDQ(Z, X) \
	VRNDSCALEPS $3, Z, Z16; \
	VSUBPS      Z16, Z, Z17; \
	VPANDD      Z20, Z17, Z17; \
	VCMPPS      $0x0D, Z21, Z17, K1; \
	VPANDD      Z23, Z, Z17; \
	VPORD       Z22, Z17, Z17; \
	VADDPS      Z17, Z16, K1, Z16; \
	VCVTTPS2DQ  Z16, Z16; \
	VPMOVDB     Z16, X

// func quantQ8xAVX512(dst *byte, src *float32, nb int, k uint32)
// Quantises nb blocks of 32 floats to Q8_0 with engine/quant's arithmetic
// (d = amax/127, id = 1/d or 0, q = roundAway(v*id), fp16 d) and writes
// them in the q8x layout (see q8x_amd64.go); k holds the offset K in each
// byte.
TEXT ·quantQ8xAVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ CX, R8
	SHLQ $6, R8
	ADDQ DI, R8              // scales
	BCAST($0x7fffffff, Z20)
	BCAST($0x3f000000, Z21)  // 0.5
	BCAST($0x3f800000, Z22)  // 1.0
	BCAST($0x80000000, Z23)
	MOVL k+24(FP), AX
	VMOVD AX, X24
	VPBROADCASTD X24, Y24
	MOVL  $0x42fe0000, AX    // 127.0
	VMOVD AX, X25
	MOVL  $0x3f800000, AX    // 1.0
	VMOVD AX, X26

block:
	TESTQ CX, CX
	JZ    done
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1

	// amax: the largest |v| that is not NaN (VMAXPS returns its second
	// source when the first is NaN, as Go's a > amax skips NaN), else 0.
	VPANDD        Z20, Z0, Z2
	VPANDD        Z20, Z1, Z3
	VPXORD        Z4, Z4, Z4
	VMAXPS        Z4, Z2, Z4
	VMAXPS        Z4, Z3, Z4
	VEXTRACTF64X4 $1, Z4, Y5
	VMAXPS        Y5, Y4, Y4
	VEXTRACTF128  $1, Y4, X5
	VMAXPS        X5, X4, X4
	VPERMILPS     $0x4E, X4, X5
	VMAXPS        X5, X4, X4
	VPERMILPS     $0xB1, X4, X5
	VMAXPS        X5, X4, X4

	// d = amax/127; id = 1/d, or 0 when d is 0.
	VDIVSS       X25, X4, X5
	VDIVSS       X5, X26, X6
	VXORPS       X7, X7, X7
	VCMPSS       $0, X7, X5, X8
	VANDNPS      X6, X8, X6
	VBROADCASTSS X6, Z6

	VMULPS Z6, Z0, Z0
	VMULPS Z6, Z1, Z1
	ROUNDQ(Z0, X2)
	ROUNDQ(Z1, X3)
	VINSERTI128 $1, X3, Y2, Y2
	VMOVDQU     Y2, (DI)

	// Lane corrections -K*(sum of 4 quants).
	VPXORD   Y7, Y7, Y7
	VPDPBUSD Y2, Y24, Y7
	VPXORD   Y8, Y8, Y8
	VPSUBD   Y7, Y8, Y8
	VMOVDQU  Y8, 32(DI)

	// The scale as stored in Q8_0 (fp16, to nearest even) and back.
	VCVTPS2PH $0, X5, X9
	VCVTPH2PS X9, X9
	VMOVSS    X9, (R8)

	ADDQ $128, SI
	ADDQ $64, DI
	ADDQ $4, R8
	DECQ CX
	JMP  block

done:
	VZEROUPPER
	RET
