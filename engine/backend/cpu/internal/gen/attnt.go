package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The tiled attention kernels with AVX-512 (see attention_tiled.go for the
// arithmetic, which tileScoresGeneric and tileSoftmaxGeneric spell out in
// Go, and for the layouts): one tile of 16 positions of one KV head against
// many query rows, in float32.
//
//	halfTileZ    keys or values of the tile, half to float32
//	tileScoresZ  the 16 scores of each row
//	tileSoftmaxZ the online softmax of each row and its value accumulation

// The kernels' vector constants (attnTConsts): lane numbers, where the
// score reduction leaves each position, expTile's constants.
var attnTIota, attnTPerm, expfC Mem

// expfVals are expTile's constants (attention_tiled.go), as float32 bits:
// the clamp, log2(e), ln2 in two parts, then 1/j! for j = 7 down to 0.
var expfVals = []uint32{
	0xc2d00000, // -104
	0x42b20000, // 89
	0x3fb8aa3b, // log2(e)
	0x3f317200, // ln2 high part: 16 significant bits
	0x35bfbe8e, // ln2 low part
	0x39500d01, 0x3ab60b61, 0x3c088889, 0x3d2aaaab, 0x3e2aaaab, 0x3f000000, 0x3f800000, 0x3f800000,
}

func attnTConsts() {
	attnTIota = GLOBL("attntiota", RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		DATA(4*i, U32(uint32(i)))
	}
	// Where the score reduction leaves position p: lane perm[p].
	attnTPerm = GLOBL("attntperm", RODATA|NOPTR)
	for i, p := range []uint32{0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15} {
		DATA(4*i, U32(p))
	}
	expfC = GLOBL("expfc", RODATA|NOPTR)
	for i, v := range expfVals {
		DATA(4*i, U32(v))
	}
}

// expf16 sets the 16 float32 lanes of z to e^z as expTile computes each,
// with t1 and t2 as scratch. NaN stays NaN (max and min return their
// second source when it is NaN).
func expf16(z, t1, t2 VecPhysical) {
	c := func(i int) Mem { return expfC.Offset(4 * i) }
	VBROADCASTSS(c(0), t1)
	VMAXPS(z, t1, z)
	VBROADCASTSS(c(1), t1)
	VMINPS(z, t1, z)
	VMULPS_BCST(c(2), z, t1)
	VRNDSCALEPS(U8(0), t1, t1) // k
	VFNMADD231PS_BCST(c(3), t1, z)
	VFNMADD231PS_BCST(c(4), t1, z) // r
	VBROADCASTSS(c(5), t2)
	for i := 6; i < len(expfVals); i++ {
		VFMADD213PS_BCST(c(i), z, t2)
	}
	VSCALEFPS(t1, t2, z)
}

func attnTFamily() {
	attnTConsts()
	halfTileZ()
	tileScoresZ()
	tileSoftmaxZ()
}

// halfTileZ generates
//
//	halfTileZ(dst *float32, src *uint16, cnt, rd, rd16 int, chunked int)
//
// converting cnt rows of rd halves (rd a positive multiple of 8) to float32
// rows of rd16 (rd rounded up to 16), the padding zero. chunked != 0 writes
// the keys' layout, chunk-major: element 16c+j of row p at dst[(16c+p)*16+j]
// (the 16 rows of a tile side by side per chunk); else row p at
// dst[p*rd16:].
func halfTileZ() {
	text("halfTileZ", NOSPLIT, "func(dst *float32, src *uint16, cnt, rd, rd16 int, chunked int)")
	Doc("halfTileZ converts a tile's keys or values from half precision (see internal/gen/attnt.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("cnt"), RCX)
	Load(Param("rd"), RDX)
	Load(Param("rd16"), R8)
	Load(Param("chunked"), R9)
	// R10: the step between a row's chunks in dst (bytes), R11: between
	// rows.
	MOVQ(U32(64), R10)
	MOVQ(R8, R11)
	SHLQ(U8(2), R11)
	TESTQ(R9, R9)
	JZ(LabelRef("ht_rows"))
	MOVQ(U32(1024), R10)
	MOVQ(U32(64), R11)
	Label("ht_rows")
	VPXORD(Z1, Z1, Z1)
	Label("ht_row")
	MOVQ(RSI, RAX) // source element
	MOVQ(RDI, RBX) // destination chunk
	MOVQ(RDX, R12) // halves left
	Label("ht_chunk")
	CMPQ(R12, U8(16))
	JL(LabelRef("ht_half"))
	VCVTPH2PS(Mem{Base: RAX}, Z0)
	VMOVUPS(Z0, Mem{Base: RBX})
	ADDQ(U8(32), RAX)
	ADDQ(R10, RBX)
	SUBQ(U8(16), R12)
	JNZ(LabelRef("ht_chunk"))
	JMP(LabelRef("ht_next"))
	Label("ht_half") // 8 halves left: the chunk's upper half is padding
	VCVTPH2PS(Mem{Base: RAX}, Y0)
	VMOVUPS(Z1, Mem{Base: RBX})
	VMOVUPS(Y0, Mem{Base: RBX})
	Label("ht_next")
	LEAQ(Mem{Base: RSI, Index: RDX, Scale: 2}, RSI)
	ADDQ(R11, RDI)
	DECQ(RCX)
	JNZ(LabelRef("ht_row"))
	VZEROUPPER()
	RET()
}

// tileScoresZ generates
//
//	tileScoresZ(s *float32, q *float32, k *float32, rows, rd16 int, scale float32)
//
// s[16r+p] = scale * (q_r . k_p) for rows r < rows and the tile's 16
// positions: q rows of rd16 floats, k in halfTileZ's chunk-major layout.
// Each dot keeps 16 lanes (lane j sums elements j, j+16, ... in order, by
// fused multiply-adds from zero), then adds lanes j and j+8, j and j+4, j
// and j+2, j and j+1: a reduction done for the 16 positions at once.
func tileScoresZ() {
	text("tileScoresZ", NOSPLIT, "func(s *float32, q *float32, k *float32, rows, rd16 int, scale float32)")
	Doc("tileScoresZ computes one tile's scores for rows of queries (see internal/gen/attnt.go).")
	Load(Param("s"), RDI)
	Load(Param("q"), RSI)
	Load(Param("rows"), RCX)
	Load(Param("rd16"), RDX)
	SHRQ(U8(4), RDX) // chunks per row
	VBROADCASTSS(NewParamAddr("scale", 40), Z30)
	VMOVDQU32(attnTPerm, Z31)
	a := func(p int) VecPhysical { return zreg(p) }
	Label("ts_row")
	for p := 0; p < 16; p++ {
		VPXORD(a(p), a(p), a(p))
	}
	Load(Param("k"), RAX)
	MOVQ(RDX, RBX)
	Label("ts_chunk")
	VMOVUPS(Mem{Base: RSI}, Z16)
	for p := 0; p < 16; p++ {
		VFMADD231PS(Mem{Base: RAX, Disp: 64 * p}, Z16, a(p))
	}
	ADDQ(U32(1024), RAX)
	ADDQ(U8(64), RSI)
	DECQ(RBX)
	JNZ(LabelRef("ts_chunk"))
	// Lanes j+8 onto j: X_p (in a(p)) holds position p in lanes 0-7 and
	// p+8 in lanes 8-15.
	for p := 0; p < 8; p++ {
		VSHUFF32X4(U8(0x44), a(p+8), a(p), Z16)
		VSHUFF32X4(U8(0xee), a(p+8), a(p), Z17)
		VADDPS(Z17, Z16, a(p))
	}
	// Lanes j+4 onto j: Y_p (in a(p)), quarters p, p+8, p+4, p+12.
	for p := 0; p < 4; p++ {
		VSHUFF32X4(U8(0x88), a(p+4), a(p), Z16)
		VSHUFF32X4(U8(0xdd), a(p+4), a(p), Z17)
		VADDPS(Z17, Z16, a(p))
	}
	// Lanes j+2 onto j.
	for p := 0; p < 2; p++ {
		VUNPCKLPD(a(p+2), a(p), Z16)
		VUNPCKHPD(a(p+2), a(p), Z17)
		VADDPS(Z17, Z16, a(p))
	}
	// Lane j+1 onto j, then positions into lane order.
	VSHUFPS(U8(0x88), a(1), a(0), Z16)
	VSHUFPS(U8(0xdd), a(1), a(0), Z17)
	VADDPS(Z17, Z16, Z16)
	VPERMPS(Z16, Z31, Z16)
	VMULPS(Z30, Z16, Z16)
	VMOVUPS(Z16, Mem{Base: RDI})
	ADDQ(U8(64), RDI)
	DECQ(RCX)
	JNZ(LabelRef("ts_row"))
	VZEROUPPER()
	RET()
}

// tileSoftmaxZ generates
//
//	tileSoftmaxZ(s *float32, v *float32, acc *float32, ms *float32, rng *int32, tokens, group, rd16 int)
//
// the online softmax of rows = tokens*group rows of scores (s, 16 per row;
// overwritten by the weights) and their value accumulation: token t's rows
// t*group.. see positions rng[2t] <= p < rng[2t+1] of the tile; per row, ms
// holds 4 floats (the running maximum m, the running sum, then the tile's
// rescale factor c); acc rows of rd16 floats; v the tile's values, row p at
// v[p*rd16:]. For one row, with x the masked scores (-Inf outside the
// token's positions):
//
//	m' = max(m, max(x)); c = e^(m-m'); w = e^(x-m')
//	S = float32(S*c) + sum(w)  (the lanes added as the scores' reduction)
//	acc = acc*c, then acc = fma(w_p, v_p, acc) for p in order
//
// Four rows of a token at a time share the value loads.
func tileSoftmaxZ() {
	text("tileSoftmaxZ", NOSPLIT, "func(s *float32, v *float32, acc *float32, ms *float32, rng *int32, tokens, group, rd16 int)")
	Doc("tileSoftmaxZ runs one tile's online softmax and value accumulation (see internal/gen/attnt.go).")
	Load(Param("s"), RDI)
	Load(Param("acc"), R8)
	Load(Param("ms"), R9)
	Load(Param("rng"), R10)
	Load(Param("tokens"), R11)
	Load(Param("rd16"), R12)
	SHLQ(U8(2), R12) // bytes per row of values and accumulators
	VMOVDQU32(attnTIota, Z31)
	MOVL(U32(0xff800000), EAX) // -Inf
	VPBROADCASTD(EAX, Z30)
	// EAX is scratch from here on.

	Label("sm_token")
	// K1: the token's lanes.
	VPBROADCASTD(Mem{Base: R10}, Z29)
	VPBROADCASTD(Mem{Base: R10, Disp: 4}, Z28)
	VPCMPD(U8(5), Z29, Z31, K1) // iota >= lo
	VPCMPD(U8(1), Z28, Z31, K2) // iota < hi
	KANDW(K2, K1, K1)
	// Softmax of the token's rows: RDI and R9 walk them, RBX counts.
	MOVQ(RDI, R13) // the token's first row of weights
	MOVQ(R9, R14)  // and of ms
	Load(Param("group"), RBX)
	Label("sm_row")
	VMOVUPS(Mem{Base: RDI}, Z0)
	VBLENDMPS(Z0, Z30, K1, Z0) // masked lanes -Inf
	// Max over the lanes.
	VEXTRACTF32X8(U8(1), Z0, Y1)
	VMAXPS(Y1, Y0, Y1)
	VEXTRACTF128(U8(1), Y1, X2)
	VMAXPS(X2, X1, X1)
	VPERMILPS(U8(0x4e), X1, X2)
	VMAXPS(X2, X1, X1)
	VPERMILPS(U8(0xb1), X1, X2)
	VMAXSS(X2, X1, X1)
	VMOVSS(Mem{Base: R9}, X2) // m
	VMAXSS(X1, X2, X1)        // m' = max(m, tile max)
	VMOVSS(X1, Mem{Base: R9})
	// c = e^(m-m'): 1 when the maximum stays (e^0 is exactly 1), else
	// computed.
	MOVL(U32(0x3f800000), EAX)
	VMOVD(EAX, X3)
	VUCOMISS(X1, X2)
	JNE(LabelRef("sm_exp"))
	JNP(LabelRef("sm_same")) // equal, not NaN
	Label("sm_exp")
	VSUBSS(X1, X2, X2) // m - m'
	VBROADCASTSS(X2, Z3)
	expf16(Z3, Z4, Z5) // c in every lane
	Label("sm_same")
	VMOVSS(X3, Mem{Base: R9, Disp: 8})
	VBROADCASTSS(X1, Z1)
	VSUBPS(Z1, Z0, Z0) // x - m'
	expf16(Z0, Z4, Z5)
	VMOVUPS(Z0, Mem{Base: RDI})
	// Sum of the weights.
	VEXTRACTF32X8(U8(1), Z0, Y1)
	VADDPS(Y1, Y0, Y1)
	VEXTRACTF128(U8(1), Y1, X2)
	VADDPS(X2, X1, X1)
	VPERMILPS(U8(0x4e), X1, X2)
	VADDPS(X2, X1, X1)
	VPERMILPS(U8(0xb1), X1, X2)
	VADDSS(X2, X1, X1)
	VMOVSS(Mem{Base: R9, Disp: 4}, X2)
	VMULSS(X3, X2, X2) // S*c
	VADDSS(X1, X2, X2)
	VMOVSS(X2, Mem{Base: R9, Disp: 4})
	ADDQ(U8(64), RDI)
	ADDQ(U8(16), R9)
	DECQ(RBX)
	JNZ(LabelRef("sm_row"))

	// Value accumulation of the token's rows, four at a time, then one
	// at a time. RDX: the token's first position (bytes into v), RCX: its
	// count.
	MOVLQSX(Mem{Base: R10}, RDX)
	MOVLQSX(Mem{Base: R10, Disp: 4}, RCX)
	SUBQ(RDX, RCX)
	MOVQ(RDX, RAX)
	IMULQ(R12, RDX)
	SHLQ(U8(2), RAX) // the first weight's offset in a row of weights
	ADDQ(RAX, R13)
	Load(Param("group"), RBX)
	Label("sm_quad")
	CMPQ(RBX, U8(4))
	JL(LabelRef("sm_single"))
	vaccT(4, "q")
	ADDQ(U32(4*64), R13)
	ADDQ(U8(4*16), R14)
	SUBQ(U8(4), RBX)
	JMP(LabelRef("sm_quad"))
	Label("sm_single")
	TESTQ(RBX, RBX)
	JZ(LabelRef("sm_next"))
	vaccT(1, "s")
	ADDQ(U8(64), R13)
	ADDQ(U8(16), R14)
	DECQ(RBX)
	JMP(LabelRef("sm_single"))

	Label("sm_next")
	MOVQ(R14, R9) // the next token's ms (vaccT used R9)
	ADDQ(U8(8), R10)
	DECQ(R11)
	JNZ(LabelRef("sm_token"))
	VZEROUPPER()
	RET()
}

// vaccT emits the value accumulation of R rows of one token: R13 points at
// the first row's first weight (rows 64 bytes apart), R14 at its ms, R8 at
// the first row's accumulators (advanced past the R rows on exit), RDX is
// the byte offset of the token's first position in v, RCX its positions
// (at least 1), R12 the bytes of a row. The accumulators go in chunks of
// up to 4 vectors (64 floats) per row.
func vaccT(R int, tag string) {
	acc := func(r, i int) VecPhysical { return zreg(4*r + i) }
	vv := func(i int) VecPhysical { return zreg(16 + i) }
	cs := func(r int) VecPhysical { return zreg(20 + r) }
	for r := 0; r < R; r++ {
		VBROADCASTSS(Mem{Base: R14, Disp: 16*r + 8}, cs(r))
	}
	XORQ(R15, R15) // byte offset of the chunk in a row
	for _, w := range []int{4, 1} {
		loop, done := "sm_"+tag+"chunk"+string(rune('0'+w)), "sm_"+tag+"chunkdone"+string(rune('0'+w))
		Label(loop)
		MOVQ(R12, RAX)
		SUBQ(R15, RAX)
		CMPQ(RAX, U32(64*w))
		JL(LabelRef(done))
		for r := 0; r < R; r++ {
			for i := 0; i < w; i++ {
				m := Mem{Base: R8, Index: R15, Scale: 1, Disp: 64 * i}
				if r > 0 {
					// Row r's accumulators are r row lengths further: the
					// address is formed in RAX.
					m = Mem{Base: RAX, Disp: 64 * i}
				}
				if r > 0 && i == 0 {
					IMUL3Q(U32(r), R12, RAX)
					ADDQ(R8, RAX)
					ADDQ(R15, RAX)
				}
				VMULPS(m, cs(r), acc(r, i))
			}
		}
		// RSI: the first position's values of the chunk; RAX counts.
		Load(Param("v"), RSI)
		ADDQ(RDX, RSI)
		ADDQ(R15, RSI)
		MOVQ(R13, R9)
		MOVQ(RCX, RAX)
		pos := loop + "p"
		Label(pos)
		for i := 0; i < w; i++ {
			VMOVUPS(Mem{Base: RSI, Disp: 64 * i}, vv(i))
		}
		for r := 0; r < R; r++ {
			for i := 0; i < w; i++ {
				VFMADD231PS_BCST(Mem{Base: R9, Disp: 64 * r}, vv(i), acc(r, i))
			}
		}
		ADDQ(R12, RSI)
		ADDQ(U8(4), R9)
		DECQ(RAX)
		JNZ(LabelRef(pos))
		for r := 0; r < R; r++ {
			if r > 0 {
				IMUL3Q(U32(r), R12, RAX)
				ADDQ(R8, RAX)
				ADDQ(R15, RAX)
			}
			for i := 0; i < w; i++ {
				m := Mem{Base: R8, Index: R15, Scale: 1, Disp: 64 * i}
				if r > 0 {
					m = Mem{Base: RAX, Disp: 64 * i}
				}
				VMOVUPS(acc(r, i), m)
			}
		}
		ADDQ(U32(64*w), R15)
		JMP(LabelRef(loop))
		Label(done)
	}
	for r := 0; r < R; r++ {
		ADDQ(R12, R8)
	}
}
