//go:build amd64

#include "textflag.h"
#include "prefetch.h"

// Row dot products of the float weight formats with AVX2, FMA and F16C,
// over a length that is a multiple of 8 (the Go wrappers in rowdot_amd64.go
// handle tails). (The quantised types' kernels are generated: see
// internal/gen/b32.go and kquant.go.)
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
