//go:build amd64

#include "textflag.h"
#include "prefetch.h"

// Matrix-vector kernels for float weight types: one activation row against
// many weight rows in one call, so that narrow rows (tiny models have rows
// of 8 to 64 values) do not pay a Go call per row. n is a multiple of 8
// (the Go wrappers add the tails); wstride is the distance between weight
// rows in bytes.
//
// The weight stream is prefetched into L1 and L2 (see prefetch.h).

#define HSUMPS(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0x4E, X, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0xB1, X, T; \
	VADDSS       T, X, X

// ROWSETUP loads the arguments: SI weights, R8 wstride, DI x, R9 n,
// R10 rows, DX out.
#define ROWSETUP \
	MOVQ w+0(FP), SI; \
	MOVQ wstride+8(FP), R8; \
	MOVQ x+16(FP), DI; \
	MOVQ n+24(FP), R9; \
	MOVQ rows+32(FP), R10; \
	MOVQ out+40(FP), DX

// ROWSTART points AX at the current weight row and BX at x, sets CX to n
// and zeroes the accumulators.
#define ROWSTART \
	MOVQ   SI, AX; \
	MOVQ   DI, BX; \
	MOVQ   R9, CX; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3

// ROWEND stores the row's sum and moves to the next row.
#define ROWEND \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	VADDPS Y2, Y0, Y0; \
	HSUMPS(Y0, X0, X1); \
	MOVSS  X0, (DX); \
	ADDQ   R8, SI; \
	ADDQ   $4, DX; \
	DECQ   R10

// func dotRowsF32AVX(w *float32, wstride int, x *float32, n, rows int, out *float32)
TEXT ·dotRowsF32AVX(SB), NOSPLIT, $0-48
	ROWSETUP

f32row:
	TESTQ R10, R10
	JZ    f32done
	ROWSTART

f32x32:
	CMPQ        CX, $32
	JL          f32x8
	PREFETCHT0  PF0(AX)
	PREFETCHT0  PF0+64(AX)
	PREFETCHT1  PF1(AX)
	PREFETCHT1  PF1+64(AX)
	VMOVUPS     (AX), Y4
	VMOVUPS     32(AX), Y5
	VMOVUPS     64(AX), Y6
	VMOVUPS     96(AX), Y7
	VFMADD231PS (BX), Y4, Y0
	VFMADD231PS 32(BX), Y5, Y1
	VFMADD231PS 64(BX), Y6, Y2
	VFMADD231PS 96(BX), Y7, Y3
	ADDQ        $128, AX
	ADDQ        $128, BX
	SUBQ        $32, CX
	JMP         f32x32

f32x8:
	CMPQ        CX, $8
	JL          f32end
	VMOVUPS     (AX), Y4
	VFMADD231PS (BX), Y4, Y0
	ADDQ        $32, AX
	ADDQ        $32, BX
	SUBQ        $8, CX
	JMP         f32x8

f32end:
	ROWEND
	JMP f32row

f32done:
	VZEROUPPER
	RET

// func dotRowsF16AVX(w *uint16, wstride int, x *float32, n, rows int, out *float32)
// Half weights, activations rounded to half and kept as float32.
TEXT ·dotRowsF16AVX(SB), NOSPLIT, $0-48
	ROWSETUP

f16row:
	TESTQ R10, R10
	JZ    f16done
	ROWSTART

f16x32:
	CMPQ        CX, $32
	JL          f16x8
	PREFETCHT0  PF0(AX)
	PREFETCHT1  PF1(AX)
	VCVTPH2PS   (AX), Y4
	VCVTPH2PS   16(AX), Y5
	VCVTPH2PS   32(AX), Y6
	VCVTPH2PS   48(AX), Y7
	VFMADD231PS (BX), Y4, Y0
	VFMADD231PS 32(BX), Y5, Y1
	VFMADD231PS 64(BX), Y6, Y2
	VFMADD231PS 96(BX), Y7, Y3
	ADDQ        $64, AX
	ADDQ        $128, BX
	SUBQ        $32, CX
	JMP         f16x32

f16x8:
	CMPQ        CX, $8
	JL          f16end
	VCVTPH2PS   (AX), Y4
	VFMADD231PS (BX), Y4, Y0
	ADDQ        $16, AX
	ADDQ        $32, BX
	SUBQ        $8, CX
	JMP         f16x8

f16end:
	ROWEND
	JMP f16row

f16done:
	VZEROUPPER
	RET

// func dotRowsBF16AVX(w *uint16, wstride int, x *float32, n, rows int, out *float32)
// BF16 weights, activations rounded to bf16 and kept as float32.
TEXT ·dotRowsBF16AVX(SB), NOSPLIT, $0-48
	ROWSETUP

b16row:
	TESTQ R10, R10
	JZ    b16done
	ROWSTART

b16x32:
	CMPQ        CX, $32
	JL          b16x8
	PREFETCHT0  PF0(AX)
	PREFETCHT1  PF1(AX)
	VPMOVZXWD   (AX), Y4
	VPMOVZXWD   16(AX), Y5
	VPMOVZXWD   32(AX), Y6
	VPMOVZXWD   48(AX), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (BX), Y4, Y0
	VFMADD231PS 32(BX), Y5, Y1
	VFMADD231PS 64(BX), Y6, Y2
	VFMADD231PS 96(BX), Y7, Y3
	ADDQ        $64, AX
	ADDQ        $128, BX
	SUBQ        $32, CX
	JMP         b16x32

b16x8:
	CMPQ        CX, $8
	JL          b16end
	VPMOVZXWD   (AX), Y4
	VPSLLD      $16, Y4, Y4
	VFMADD231PS (BX), Y4, Y0
	ADDQ        $16, AX
	ADDQ        $32, BX
	SUBQ        $8, CX
	JMP         b16x8

b16end:
	ROWEND
	JMP b16row

b16done:
	VZEROUPPER
	RET

