//go:build amd64

#include "textflag.h"

// Vector kernels on float32 with AVX2 and FMA. Every function here takes a
// length n that is a multiple of 8; the Go wrappers in simd_amd64.go handle
// the tails.

// HSUMPS reduces the 8 floats of Y (whose low half is X) to its lowest lane,
// using T as scratch.
#define HSUMPS(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0x4E, X, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0xB1, X, T; \
	VADDSS       T, X, X

// HSUMPD reduces the 4 doubles of Y (low half X) to its lowest lane.
#define HSUMPD(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPD       T, X, X; \
	VPERMILPD    $1, X, T; \
	VADDSD       T, X, X

// EXP8 sets X to e^X lane by lane, with T1-T3 as scratch. x is clamped to
// [-104, 88.72284]: below, e^x rounds to 0 in float32; above, it overflows to
// +Inf. k = round(x*log2(e)) and r = x - k*ln2 (ln2 in two parts, so k*ln2hi
// is exact), e^r by its Taylor polynomial of degree 7 (truncation error below
// 6e-9 relative for |r| <= ln2/2), then scaled by 2^k as two factors
// 2^(k>>1) * 2^(k-k>>1), each a normal float, so results in the subnormal
// range are rounded once and correctly. NaN propagates (max/min return
// their second source when it is NaN).
#define EXP8(X, T1, T2, T3) \
	VMOVUPS      expc<>+0(SB), T1; \
	VMAXPS       X, T1, X; \
	VMOVUPS      expc<>+32(SB), T1; \
	VMINPS       X, T1, X; \
	VMULPS       expc<>+64(SB), X, T1; \
	VROUNDPS     $0, T1, T1; \
	VFNMADD231PS expc<>+96(SB), T1, X; \
	VFNMADD231PS expc<>+128(SB), T1, X; \
	VMOVUPS      expc<>+160(SB), T2; \
	VFMADD213PS  expc<>+192(SB), X, T2; \
	VFMADD213PS  expc<>+224(SB), X, T2; \
	VFMADD213PS  expc<>+256(SB), X, T2; \
	VFMADD213PS  expc<>+288(SB), X, T2; \
	VFMADD213PS  expc<>+320(SB), X, T2; \
	VFMADD213PS  expc<>+352(SB), X, T2; \
	VFMADD213PS  expc<>+352(SB), X, T2; \
	VCVTPS2DQ    T1, T1; \
	VPSRAD       $1, T1, T3; \
	VPSUBD       T3, T1, T1; \
	VPSLLD       $23, T3, T3; \
	VPADDD       expc<>+352(SB), T3, T3; \
	VPSLLD       $23, T1, T1; \
	VPADDD       expc<>+352(SB), T1, T1; \
	VMULPS       T3, T2, T2; \
	VMULPS       T1, T2, X

// func cpuPause()
TEXT ·cpuPause(SB), NOSPLIT, $0-0
	PAUSE
	RET

// func dotF32AVX(a, b *float32, n int) float32
TEXT ·dotF32AVX(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

dot32:
	CMPQ        CX, $32
	JL          dot8
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         dot32

dot8:
	CMPQ        CX, $8
	JL          dotdone
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         dot8

dotdone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMPS(Y0, X0, X1)
	MOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyAVX(y *float32, a float32, x *float32, n int)
TEXT ·axpyAVX(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	VBROADCASTSS a+8(FP), Y15
	MOVQ         x+16(FP), SI
	MOVQ         n+24(FP), CX

axpy32:
	CMPQ        CX, $32
	JL          axpy8
	VMOVUPS     (DI), Y0
	VMOVUPS     32(DI), Y1
	VMOVUPS     64(DI), Y2
	VMOVUPS     96(DI), Y3
	VFMADD231PS (SI), Y15, Y0
	VFMADD231PS 32(SI), Y15, Y1
	VFMADD231PS 64(SI), Y15, Y2
	VFMADD231PS 96(SI), Y15, Y3
	VMOVUPS     Y0, (DI)
	VMOVUPS     Y1, 32(DI)
	VMOVUPS     Y2, 64(DI)
	VMOVUPS     Y3, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         axpy32

axpy8:
	CMPQ        CX, $8
	JL          axpydone
	VMOVUPS     (DI), Y0
	VFMADD231PS (SI), Y15, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         axpy8

axpydone:
	VZEROUPPER
	RET

// func scaleAVX(x *float32, a float32, n int)
TEXT ·scaleAVX(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), DI
	VBROADCASTSS a+8(FP), Y15
	MOVQ         n+16(FP), CX

scale32:
	CMPQ    CX, $32
	JL      scale8
	VMULPS  (DI), Y15, Y0
	VMULPS  32(DI), Y15, Y1
	VMULPS  64(DI), Y15, Y2
	VMULPS  96(DI), Y15, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     scale32

scale8:
	CMPQ    CX, $8
	JL      scaledone
	VMULPS  (DI), Y15, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     scale8

scaledone:
	VZEROUPPER
	RET

// func addAVX(dst, a, b *float32, n int)
TEXT ·addAVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX

add32:
	CMPQ    CX, $32
	JL      add8
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VADDPS  (DX), Y0, Y0
	VADDPS  32(DX), Y1, Y1
	VADDPS  64(DX), Y2, Y2
	VADDPS  96(DX), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DX
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     add32

add8:
	CMPQ    CX, $8
	JL      adddone
	VMOVUPS (SI), Y0
	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     add8

adddone:
	VZEROUPPER
	RET

// func sumSquaresAVX(x *float32, n int) float64
// Squares are formed and summed in float64 (exact products), in four
// accumulators so that the adds' latency overlaps.
TEXT ·sumSquaresAVX(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3

ss16:
	CMPQ        CX, $16
	JL          ss8
	VCVTPS2PD   (SI), Y4
	VCVTPS2PD   16(SI), Y5
	VCVTPS2PD   32(SI), Y6
	VCVTPS2PD   48(SI), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	ADDQ        $64, SI
	SUBQ        $16, CX
	JMP         ss16

ss8:
	CMPQ        CX, $8
	JL          ssdone
	VCVTPS2PD   (SI), Y4
	VCVTPS2PD   16(SI), Y5
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         ss8

ssdone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	HSUMPD(Y0, X0, X1)
	MOVSD  X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleMulAVX(out, x *float32, s float32, w *float32, n int)
// out = (x*s)*w, two roundings, as the generic version.
TEXT ·scaleMulAVX(SB), NOSPLIT, $0-40
	MOVQ         out+0(FP), DI
	MOVQ         x+8(FP), SI
	VBROADCASTSS s+16(FP), Y15
	MOVQ         w+24(FP), DX
	MOVQ         n+32(FP), CX

sm16:
	CMPQ    CX, $16
	JL      sm8
	VMULPS  (SI), Y15, Y0
	VMULPS  32(SI), Y15, Y1
	VMULPS  (DX), Y0, Y0
	VMULPS  32(DX), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     sm16

sm8:
	CMPQ    CX, $8
	JL      smdone
	VMULPS  (SI), Y15, Y0
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     sm8

smdone:
	VZEROUPPER
	RET

// func maxAVX(x *float32, n int) float32
TEXT ·maxAVX(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVAPS Y0, Y1

max8:
	CMPQ    CX, $8
	JL      maxdone
	VMAXPS  (SI), Y0, Y0
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     max8

maxdone:
	VMAXPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4E, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xB1, X0, X1
	VMAXSS       X1, X0, X0
	MOVSS        X0, ret+16(FP)
	VZEROUPPER
	RET

// func expSubSumAVX(x *float32, m float32, n int) float64
// x[i] = e^(x[i]-m); returns the sum of the new values, accumulated in float64.
TEXT ·expSubSumAVX(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), DI
	VBROADCASTSS m+8(FP), Y15
	MOVQ         n+16(FP), CX
	VXORPD       Y8, Y8, Y8
	VXORPD       Y9, Y9, Y9

es8:
	CMPQ         CX, $8
	JL           esdone
	VMOVUPS      (DI), Y0
	VSUBPS       Y15, Y0, Y0
	EXP8(Y0, Y1, Y2, Y3)
	VMOVUPS      Y0, (DI)
	VCVTPS2PD    X0, Y4
	VEXTRACTF128 $1, Y0, X5
	VCVTPS2PD    X5, Y5
	VADDPD       Y4, Y8, Y8
	VADDPD       Y5, Y9, Y9
	ADDQ         $32, DI
	SUBQ         $8, CX
	JMP          es8

esdone:
	VADDPD Y9, Y8, Y8
	HSUMPD(Y8, X8, X1)
	MOVSD  X8, ret+24(FP)
	VZEROUPPER
	RET

// func swigluAVX(out, gate, up *float32, n int)
// out = g/(1+e^-g) * up.
TEXT ·swigluAVX(SB), NOSPLIT, $0-32
	MOVQ    out+0(FP), DI
	MOVQ    gate+8(FP), SI
	MOVQ    up+16(FP), DX
	MOVQ    n+24(FP), CX
	VXORPS  Y14, Y14, Y14
	VMOVUPS expc<>+352(SB), Y13

sw8:
	CMPQ    CX, $8
	JL      swdone
	VMOVUPS (SI), Y4
	VSUBPS  Y4, Y14, Y0
	EXP8(Y0, Y1, Y2, Y3)
	VADDPS  Y13, Y0, Y0
	VDIVPS  Y0, Y4, Y4
	VMULPS  (DX), Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     sw8

swdone:
	VZEROUPPER
	RET

// func expAVX(dst, src *float32, n int)
TEXT ·expAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

ex8:
	CMPQ    CX, $8
	JL      exdone
	VMOVUPS (SI), Y0
	EXP8(Y0, Y1, Y2, Y3)
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     ex8

exdone:
	VZEROUPPER
	RET

// func f16ToF32AVX(dst *float32, src *uint16, n int)
TEXT ·f16ToF32AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

h2f8:
	CMPQ      CX, $8
	JL        h2fdone
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       h2f8

h2fdone:
	VZEROUPPER
	RET

// func f32ToF16AVX(dst *uint16, src *float32, n int)
// Rounds to nearest even (immediate 0).
TEXT ·f32ToF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

f2h8:
	CMPQ      CX, $8
	JL        f2hdone
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	SUBQ      $8, CX
	JMP       f2h8

f2hdone:
	VZEROUPPER
	RET

// lo at 0
DATA expc<>+0(SB)/4, $0xc2d00000
DATA expc<>+4(SB)/4, $0xc2d00000
DATA expc<>+8(SB)/4, $0xc2d00000
DATA expc<>+12(SB)/4, $0xc2d00000
DATA expc<>+16(SB)/4, $0xc2d00000
DATA expc<>+20(SB)/4, $0xc2d00000
DATA expc<>+24(SB)/4, $0xc2d00000
DATA expc<>+28(SB)/4, $0xc2d00000
// hi at 32
DATA expc<>+32(SB)/4, $0x42b17218
DATA expc<>+36(SB)/4, $0x42b17218
DATA expc<>+40(SB)/4, $0x42b17218
DATA expc<>+44(SB)/4, $0x42b17218
DATA expc<>+48(SB)/4, $0x42b17218
DATA expc<>+52(SB)/4, $0x42b17218
DATA expc<>+56(SB)/4, $0x42b17218
DATA expc<>+60(SB)/4, $0x42b17218
// log2e at 64
DATA expc<>+64(SB)/4, $0x3fb8aa3b
DATA expc<>+68(SB)/4, $0x3fb8aa3b
DATA expc<>+72(SB)/4, $0x3fb8aa3b
DATA expc<>+76(SB)/4, $0x3fb8aa3b
DATA expc<>+80(SB)/4, $0x3fb8aa3b
DATA expc<>+84(SB)/4, $0x3fb8aa3b
DATA expc<>+88(SB)/4, $0x3fb8aa3b
DATA expc<>+92(SB)/4, $0x3fb8aa3b
// ln2hi at 96
DATA expc<>+96(SB)/4, $0x3f318000
DATA expc<>+100(SB)/4, $0x3f318000
DATA expc<>+104(SB)/4, $0x3f318000
DATA expc<>+108(SB)/4, $0x3f318000
DATA expc<>+112(SB)/4, $0x3f318000
DATA expc<>+116(SB)/4, $0x3f318000
DATA expc<>+120(SB)/4, $0x3f318000
DATA expc<>+124(SB)/4, $0x3f318000
// ln2lo at 128
DATA expc<>+128(SB)/4, $0xb95e8083
DATA expc<>+132(SB)/4, $0xb95e8083
DATA expc<>+136(SB)/4, $0xb95e8083
DATA expc<>+140(SB)/4, $0xb95e8083
DATA expc<>+144(SB)/4, $0xb95e8083
DATA expc<>+148(SB)/4, $0xb95e8083
DATA expc<>+152(SB)/4, $0xb95e8083
DATA expc<>+156(SB)/4, $0xb95e8083
// c7 at 160
DATA expc<>+160(SB)/4, $0x39500d01
DATA expc<>+164(SB)/4, $0x39500d01
DATA expc<>+168(SB)/4, $0x39500d01
DATA expc<>+172(SB)/4, $0x39500d01
DATA expc<>+176(SB)/4, $0x39500d01
DATA expc<>+180(SB)/4, $0x39500d01
DATA expc<>+184(SB)/4, $0x39500d01
DATA expc<>+188(SB)/4, $0x39500d01
// c6 at 192
DATA expc<>+192(SB)/4, $0x3ab60b61
DATA expc<>+196(SB)/4, $0x3ab60b61
DATA expc<>+200(SB)/4, $0x3ab60b61
DATA expc<>+204(SB)/4, $0x3ab60b61
DATA expc<>+208(SB)/4, $0x3ab60b61
DATA expc<>+212(SB)/4, $0x3ab60b61
DATA expc<>+216(SB)/4, $0x3ab60b61
DATA expc<>+220(SB)/4, $0x3ab60b61
// c5 at 224
DATA expc<>+224(SB)/4, $0x3c088889
DATA expc<>+228(SB)/4, $0x3c088889
DATA expc<>+232(SB)/4, $0x3c088889
DATA expc<>+236(SB)/4, $0x3c088889
DATA expc<>+240(SB)/4, $0x3c088889
DATA expc<>+244(SB)/4, $0x3c088889
DATA expc<>+248(SB)/4, $0x3c088889
DATA expc<>+252(SB)/4, $0x3c088889
// c4 at 256
DATA expc<>+256(SB)/4, $0x3d2aaaab
DATA expc<>+260(SB)/4, $0x3d2aaaab
DATA expc<>+264(SB)/4, $0x3d2aaaab
DATA expc<>+268(SB)/4, $0x3d2aaaab
DATA expc<>+272(SB)/4, $0x3d2aaaab
DATA expc<>+276(SB)/4, $0x3d2aaaab
DATA expc<>+280(SB)/4, $0x3d2aaaab
DATA expc<>+284(SB)/4, $0x3d2aaaab
// c3 at 288
DATA expc<>+288(SB)/4, $0x3e2aaaab
DATA expc<>+292(SB)/4, $0x3e2aaaab
DATA expc<>+296(SB)/4, $0x3e2aaaab
DATA expc<>+300(SB)/4, $0x3e2aaaab
DATA expc<>+304(SB)/4, $0x3e2aaaab
DATA expc<>+308(SB)/4, $0x3e2aaaab
DATA expc<>+312(SB)/4, $0x3e2aaaab
DATA expc<>+316(SB)/4, $0x3e2aaaab
// c2 at 320
DATA expc<>+320(SB)/4, $0x3f000000
DATA expc<>+324(SB)/4, $0x3f000000
DATA expc<>+328(SB)/4, $0x3f000000
DATA expc<>+332(SB)/4, $0x3f000000
DATA expc<>+336(SB)/4, $0x3f000000
DATA expc<>+340(SB)/4, $0x3f000000
DATA expc<>+344(SB)/4, $0x3f000000
DATA expc<>+348(SB)/4, $0x3f000000
// one at 352
DATA expc<>+352(SB)/4, $0x3f800000
DATA expc<>+356(SB)/4, $0x3f800000
DATA expc<>+360(SB)/4, $0x3f800000
DATA expc<>+364(SB)/4, $0x3f800000
DATA expc<>+368(SB)/4, $0x3f800000
DATA expc<>+372(SB)/4, $0x3f800000
DATA expc<>+376(SB)/4, $0x3f800000
DATA expc<>+380(SB)/4, $0x3f800000
GLOBL expc<>(SB), RODATA|NOPTR, $384
