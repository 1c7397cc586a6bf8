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

// The kernels' vector constants (attnTConsts): lane numbers, where
// reduce16 leaves each row, expTile's constants.
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
	// Where reduce16 leaves row r: lane perm[r].
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

// tilePairGather emits the setup of a gather of one pair of halves per
// position of a tile of CX rows of DX halves: K1 the rows' lanes, Z5 each
// row's byte offset (Z6 and RAX clobbered).
func tilePairGather() {
	// K1: the cnt positions' lanes; Z5: each position's byte offset.
	MOVL(U32(1), EAX)
	SHLL(CL, EAX)
	DECL(EAX)
	KMOVW(EAX, K1)
	MOVQ(RDX, RAX)
	SHLQ(U8(1), RAX)
	VPBROADCASTD(EAX, Z6)
	VMOVDQU32(attnTIota, Z5)
	VPMULLD(Z6, Z5, Z5)
}

// halfTileZ generates
//
//	halfTileZ(dst *float32, src *uint16, cnt, rd, rd16 int, transposed int)
//
// converting cnt rows of rd halves (rd a positive multiple of 8) to float32
// rows of rd16 (rd rounded up to 16), the padding zero. transposed != 0
// writes the keys' layout: element d of row p at dst[16d+p], positions in
// the lanes of one vector per element, lanes cnt..15 and elements
// rd..rd16-1 zero (the halves gathered two at a time, a dword per
// position); else row p at dst[p*rd16:].
func halfTileZ() {
	text("halfTileZ", NOSPLIT, "func(dst *float32, src *uint16, cnt, rd, rd16 int, transposed int)")
	Doc("halfTileZ converts a tile's keys or values from half precision (see internal/gen/attnt.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("cnt"), RCX)
	Load(Param("rd"), RDX)
	Load(Param("rd16"), R8)
	Load(Param("transposed"), R9)
	VPXORD(Z1, Z1, Z1)
	TESTQ(R9, R9)
	JNZ(LabelRef("ht_t"))
	// R11: the bytes between rows of dst.
	MOVQ(R8, R11)
	SHLQ(U8(2), R11)
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
	ADDQ(U8(64), RBX)
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

	Label("ht_t")
	tilePairGather()
	MOVQ(RDX, RBX)
	SHRQ(U8(1), RBX) // pairs of elements
	Label("ht_pair")
	VPXORD(Z0, Z0, Z0)
	KMOVW(K1, K2) // the gather clears its mask
	VPGATHERDD(Mem{Base: RSI, Index: Z5, Scale: 1}, K2, Z0)
	VPMOVDW(Z0, Y2)
	VCVTPH2PS(Y2, Z3)
	VMOVUPS(Z3, Mem{Base: RDI})
	VPSRLD(U8(16), Z0, Z0)
	VPMOVDW(Z0, Y2)
	VCVTPH2PS(Y2, Z3)
	VMOVUPS(Z3, Mem{Base: RDI, Disp: 64})
	ADDQ(U8(4), RSI)
	ADDQ(U32(128), RDI)
	DECQ(RBX)
	JNZ(LabelRef("ht_pair"))
	SUBQ(RDX, R8) // padding elements
	JZ(LabelRef("ht_done"))
	Label("ht_pad")
	VMOVUPS(Z1, Mem{Base: RDI})
	ADDQ(U8(64), RDI)
	DECQ(R8)
	JNZ(LabelRef("ht_pad"))
	Label("ht_done")
	VZEROUPPER()
	RET()
}

// tileScoresZ generates
//
//	tileScoresZ(s *float32, q *float32, k *float32, blocks, rd16 int, scale float32)
//
// s[16r+p] = scale * (q_r . k_p) for the rows r of blocks blocks of 8 and
// the tile's 16 positions: q in blocks of 8 rows, element d of a block's
// row i at q[8d+i] (blocks 8*rd16 floats apart), k in halfTileZ's
// transposed layout. Each dot is one chain of fused multiply-adds over d
// from zero, for the 16 positions of a row at once (the query element
// broadcast against the keys' vector of element d): llama.cpp's tiled
// product, with no reduction across lanes.
func tileScoresZ() {
	text("tileScoresZ", NOSPLIT, "func(s *float32, q *float32, k *float32, blocks, rd16 int, scale float32)")
	Doc("tileScoresZ computes one tile's scores for blocks of 8 rows of queries (see internal/gen/attnt.go).")
	Load(Param("s"), RDI)
	Load(Param("q"), RSI)
	Load(Param("blocks"), RCX)
	Load(Param("rd16"), RDX)
	SHRQ(U8(1), RDX) // pairs of elements
	VBROADCASTSS(NewParamAddr("scale", 40), Z30)
	a := func(r int) VecPhysical { return zreg(r) }
	Label("ts_block")
	for r := 0; r < 8; r++ {
		VPXORD(a(r), a(r), a(r))
	}
	Load(Param("k"), RAX)
	MOVQ(RDX, RBX)
	Label("ts_pair")
	VMOVUPS(Mem{Base: RAX}, Z16)
	VMOVUPS(Mem{Base: RAX, Disp: 64}, Z17)
	for r := 0; r < 8; r++ {
		VFMADD231PS_BCST(Mem{Base: RSI, Disp: 4 * r}, Z16, a(r))
	}
	for r := 0; r < 8; r++ {
		VFMADD231PS_BCST(Mem{Base: RSI, Disp: 32 + 4*r}, Z17, a(r))
	}
	ADDQ(U32(128), RAX)
	ADDQ(U8(64), RSI)
	DECQ(RBX)
	JNZ(LabelRef("ts_pair"))
	for r := 0; r < 8; r++ {
		VMULPS(Z30, a(r), a(r))
		VMOVUPS(a(r), Mem{Base: RDI, Disp: 64 * r})
	}
	ADDQ(U32(512), RDI)
	DECQ(RCX)
	JNZ(LabelRef("ts_block"))
	VZEROUPPER()
	RET()
}

// tileSoftmaxZ generates
//
//	tileSoftmaxZ(s *float32, v *float32, acc *float32, ms *float32, rng *int32, masks *uint16, tokens, group, rd16 int)
//
// the online softmax of rows = tokens*group rows of scores (s, 16 per row;
// overwritten by the weights) and their value accumulation: token t's rows
// t*group.. see positions rng[2t] <= p < rng[2t+1] of the tile, row r the
// positions whose bits are set in masks[r]; ms holds, a row each, the
// running maxima m, then tiledMaxRows floats on the running sums, then as
// far on the tile's rescale factors c; acc rows of rd16 floats; v the
// tile's values, row p at v[p*rd16:]. For one row, with x the masked
// scores (-Inf outside the token's positions):
//
//	m' = max(m, max(x)); c = 1 if m' == m, else e^(m-m'); w = e^(x-m')
//	S = float32(S*c) + sum(w)  (the lanes added by halves)
//	acc = acc*c, then acc = fma(w_p, v_p, acc) for p in order
//
// The softmax goes 16 rows at a time: their maxima and sums come out of
// one transposing reduction (lane r of the result is row r's), and m, S
// and c are updated as vectors; the rows past the last 16 go one at a
// time. Then the values, four rows of a token at a time sharing the value
// loads.
func tileSoftmaxZ() {
	text("tileSoftmaxZ", NOSPLIT, "func(s *float32, v *float32, acc *float32, ms *float32, rng *int32, masks *uint16, tokens, group, rd16 int)")
	Doc("tileSoftmaxZ runs one tile's online softmax and value accumulation (see internal/gen/attnt.go).")
	Load(Param("s"), RDI)
	Load(Param("ms"), R9)
	Load(Param("masks"), RSI)
	Load(Param("tokens"), RCX)
	Load(Param("group"), RAX)
	IMULQ(RAX, RCX)            // rows
	MOVL(U32(0xff800000), EAX) // -Inf
	VPBROADCASTD(EAX, Z30)
	VMOVDQU32(attnTPerm, Z31)
	a := func(r int) VecPhysical { return zreg(r) }
	one := expfC.Offset(4 * 12)

	Label("sm_block")
	CMPQ(RCX, U8(16))
	JL(LabelRef("sm_rows"))
	for r := 0; r < 16; r++ {
		KMOVW(Mem{Base: RSI, Disp: 2 * r}, K1)
		VMOVUPS(Mem{Base: RDI, Disp: 64 * r}, a(r))
		VBLENDMPS(a(r), Z30, K1, a(r)) // masked lanes -Inf
		VMOVUPS(a(r), Mem{Base: RDI, Disp: 64 * r})
	}
	reduce16(func(x, y, z VecPhysical) { VMAXPS(x, y, z) })
	VMOVUPS(Mem{Base: R9}, Z18) // m
	VMAXPS(Z16, Z18, Z19)       // m' = m > max ? m : max
	VMOVUPS(Z19, Mem{Base: R9})
	VSUBPS(Z19, Z18, Z20) // m - m'
	expf16(Z20, Z16, Z17)
	VCMPPS(U8(0), Z19, Z18, K2) // m == m' (ordered)
	VBROADCASTSS(one, Z21)
	VBLENDMPS(Z21, Z20, K2, Z20) // c
	VMOVUPS(Z20, Mem{Base: R9, Disp: 2 * msStride})
	for r := 0; r < 16; r++ {
		VBROADCASTSS(Mem{Base: R9, Disp: 4 * r}, Z18)
		VMOVUPS(Mem{Base: RDI, Disp: 64 * r}, a(r)) // the masked scores again
		VSUBPS(Z18, a(r), a(r))                     // x - m'
		expf16(a(r), Z16, Z17)
		VMOVUPS(a(r), Mem{Base: RDI, Disp: 64 * r})
	}
	reduce16(func(x, y, z VecPhysical) { VADDPS(x, y, z) })
	VMOVUPS(Mem{Base: R9, Disp: msStride}, Z18)
	VMULPS(Z20, Z18, Z18) // S*c
	VADDPS(Z16, Z18, Z18)
	VMOVUPS(Z18, Mem{Base: R9, Disp: msStride})
	ADDQ(U32(16*64), RDI)
	ADDQ(U8(16*4), R9)
	ADDQ(U8(16*2), RSI)
	SUBQ(U8(16), RCX)
	JMP(LabelRef("sm_block"))

	Label("sm_rows")
	TESTQ(RCX, RCX)
	JZ(LabelRef("sm_values"))
	KMOVW(Mem{Base: RSI}, K1)
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
	// c = e^(m-m'): 1 when the maximum stays, else computed.
	VMOVSS(one, X3)
	VUCOMISS(X1, X2)
	JNE(LabelRef("sm_exp"))
	JNP(LabelRef("sm_same")) // equal, not NaN
	Label("sm_exp")
	VSUBSS(X1, X2, X2) // m - m'
	VBROADCASTSS(X2, Z3)
	expf16(Z3, Z4, Z5) // c in every lane
	Label("sm_same")
	VMOVSS(X3, Mem{Base: R9, Disp: 2 * msStride})
	VBROADCASTSS(X1, Z1)
	VSUBPS(Z1, Z0, Z0) // x - m'
	expf16(Z0, Z4, Z5)
	VMOVUPS(Z0, Mem{Base: RDI})
	// Sum of the weights, by halves.
	VEXTRACTF32X8(U8(1), Z0, Y1)
	VADDPS(Y1, Y0, Y1)
	VEXTRACTF128(U8(1), Y1, X2)
	VADDPS(X2, X1, X1)
	VPERMILPS(U8(0x4e), X1, X2)
	VADDPS(X2, X1, X1)
	VPERMILPS(U8(0xb1), X1, X2)
	VADDSS(X2, X1, X1)
	VMOVSS(Mem{Base: R9, Disp: msStride}, X2)
	VMULSS(X3, X2, X2) // S*c
	VADDSS(X1, X2, X2)
	VMOVSS(X2, Mem{Base: R9, Disp: msStride})
	ADDQ(U8(64), RDI)
	ADDQ(U8(4), R9)
	ADDQ(U8(2), RSI)
	DECQ(RCX)
	JMP(LabelRef("sm_rows"))

	// Value accumulation of each token's rows, four at a time, then one at
	// a time. RDI: the token's first row of weights, R14 its m, RDX its
	// first position (bytes into v), RCX its count.
	Label("sm_values")
	Load(Param("s"), RDI)
	Load(Param("acc"), R8)
	Load(Param("ms"), R14)
	Load(Param("rng"), R10)
	Load(Param("tokens"), R11)
	Load(Param("rd16"), R12)
	SHLQ(U8(2), R12) // bytes per row of values and accumulators
	Label("sm_token")
	MOVQ(RDI, R13)
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
	ADDQ(U8(4*4), R14)
	SUBQ(U8(4), RBX)
	JMP(LabelRef("sm_quad"))
	Label("sm_single")
	TESTQ(RBX, RBX)
	JZ(LabelRef("sm_next"))
	vaccT(1, "s")
	ADDQ(U8(64), R13)
	ADDQ(U8(4), R14)
	DECQ(RBX)
	JMP(LabelRef("sm_single"))

	Label("sm_next")
	Load(Param("group"), RAX)
	SHLQ(U8(6), RAX)
	ADDQ(RAX, RDI)
	ADDQ(U8(8), R10)
	DECQ(R11)
	JNZ(LabelRef("sm_token"))
	VZEROUPPER()
	RET()
}

// msStride is the bytes between the arrays of tileSoftmaxZ's ms (m, S, c):
// tiledMaxRows floats.
const msStride = 4 * 512

// reduce16 reduces each of Z0..Z15 over its 16 lanes with op(a, b, dst)
// (dst = b op a), adding lanes j and j+8, then j and j+4, j and j+2, j and
// j+1 (halves16's order), and leaves the results in Z16, lane r holding
// Zr's; Z17 is scratch and Z0..Z15 are clobbered. Z31 must hold attnTPerm.
func reduce16(op func(x, y, z VecPhysical)) {
	a := func(r int) VecPhysical { return zreg(r) }
	// Lanes j+8 onto j: a(r) holds row r in lanes 0-7 and r+8 in 8-15.
	for r := 0; r < 8; r++ {
		VSHUFF32X4(U8(0x44), a(r+8), a(r), Z16)
		VSHUFF32X4(U8(0xee), a(r+8), a(r), Z17)
		op(Z17, Z16, a(r))
	}
	// Lanes j+4 onto j: quarters r, r+8, r+4, r+12.
	for r := 0; r < 4; r++ {
		VSHUFF32X4(U8(0x88), a(r+4), a(r), Z16)
		VSHUFF32X4(U8(0xdd), a(r+4), a(r), Z17)
		op(Z17, Z16, a(r))
	}
	// Lanes j+2 onto j.
	for r := 0; r < 2; r++ {
		VUNPCKLPD(a(r+2), a(r), Z16)
		VUNPCKHPD(a(r+2), a(r), Z17)
		op(Z17, Z16, a(r))
	}
	// Lane j+1 onto j, then rows into lane order.
	VSHUFPS(U8(0x88), a(1), a(0), Z16)
	VSHUFPS(U8(0xdd), a(1), a(0), Z17)
	op(Z17, Z16, Z16)
	VPERMPS(Z16, Z31, Z16)
}

// vaccT emits the value accumulation of R rows of one token: R13 points at
// the first row's first weight (rows 64 bytes apart), R14 at its m, R8 at
// the first row's accumulators (advanced past the R rows on exit), RDX is
// the byte offset of the token's first position in v, RCX its positions
// (at least 1), R12 the bytes of a row. The accumulators go in chunks of
// up to 4 vectors (64 floats) per row.
func vaccT(R int, tag string) {
	acc := func(r, i int) VecPhysical { return zreg(4*r + i) }
	vv := func(i int) VecPhysical { return zreg(16 + i) }
	cs := func(r int) VecPhysical { return zreg(20 + r) }
	for r := 0; r < R; r++ {
		VBROADCASTSS(Mem{Base: R14, Disp: 4*r + 2*msStride}, cs(r))
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
