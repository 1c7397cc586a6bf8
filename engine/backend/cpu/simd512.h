// Macros shared by the AVX-512 kernels (qdot512*_amd64.s, fdot512_amd64.s).

#include "prefetch.h"

// HSUMPS sets the low lane of X (the low half of Y) to the sum of Y's
// eight lanes, in the AVX2 kernels' order: halves, then pairs 0+2, 1+3,
// then 0+1. T is scratch.
#define HSUMPS(Y, X, T) \
	VEXTRACTF128 $1, Y, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0x4E, X, T; \
	VADDPS       T, X, X; \
	VPERMILPS    $0xB1, X, T; \
	VADDSS       T, X, X

// BYTES sets Y to 32 copies of the byte in the 32-bit pattern V.
#define BYTES(V, Y, X) \
	MOVL         V, AX; \
	VMOVD        AX, X; \
	VPBROADCASTD X, Y
