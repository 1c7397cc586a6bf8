package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
	. "github.com/mmcloughlin/avo/reg"
)

// The tiled attention kernels on bf16 dot products (AVX512_BF16; see
// attention_tiled.go's bf16 section for the arithmetic, which
// tileScoresBF16Generic and tileSoftmaxBF16Generic spell out in Go, and
// for the layouts). A pair is a dword of two bf16 values, the lower
// element in its low half; VDPBF16PS multiplies 16 lanes of pairs by
// another pair each (here one pair broadcast from memory) and adds both
// products to a float32 lane.
//
//	keyPairsBZ    a tile's keys, half to pairs of bf16 by element
//	valuePairsBZ  a tile's values, half to pairs of bf16 by position
//	tileScoresBZ  the 16 scores of each row, from pairs
//	tileSoftmaxBZ the online softmax of each row, its weights rounded to
//	              bf16, and the value accumulation from pairs

func attnTBFamily() {
	exp2C = GLOBL("exp2c", RODATA|NOPTR)
	for i, v := range exp2Vals {
		DATA(4*i, U32(v))
	}
	pairIdx = GLOBL("pairidx", RODATA|NOPTR)
	for w := 0; w < 32; w++ {
		DATA(2*w, U16(uint16(w/2+16*(w%2))))
	}
	keyPairsBZ()
	valuePairsBZ()
	queryPairsBZ()
	tileScoresBZ()
	tileSoftmaxBZ()
}

// vdpbf16psBcst emits VDPBF16PS m32bcst, Z<src1>, Z<dst>: every lane of
// dst adds src1's pair times the pair at disp(base), by bytes (neither
// avo nor the Go assembler knows the instruction). The encoding is
// EVEX.512.F3.0F38.W0 52 /r with EVEX.b set: a disp8 scaled by 4 where
// disp allows, else a disp32.
func vdpbf16psBcst(base reg.GPPhysical, disp int, src1, dst int) {
	inv := func(v, bit int) int { return (v>>bit)&1 ^ 1 }
	b := int(base.PhysicalIndex())
	p0 := inv(dst, 3)<<7 | 1<<6 | inv(b, 3)<<5 | inv(dst, 4)<<4 | 0b10
	p1 := (^src1&15)<<3 | 1<<2 | 0b10
	p2 := 0b10<<5 | 1<<4 | inv(src1, 4)<<3
	var mod int
	var tail []byte
	switch {
	case disp == 0 && b&7 != 5:
		mod = 0
	case disp%4 == 0 && disp/4 >= -128 && disp/4 <= 127:
		mod, tail = 1, []byte{byte(int8(disp / 4))}
	default:
		mod, tail = 2, []byte{byte(disp), byte(disp >> 8), byte(disp >> 16), byte(disp >> 24)}
	}
	code := []byte{0x62, byte(p0), byte(p1), byte(p2), 0x52, byte(mod<<6 | (dst&7)<<3 | b&7)}
	if b&7 == 4 {
		code = append(code, 0x24) // SIB: base alone
	}
	code = append(code, tail...)
	Comment(fmt.Sprintf("VDPBF16PS.BCST %d(%s), Z%d, Z%d", disp, base.Asm(), src1, dst))
	for _, c := range code {
		raw("BYTE", U8(c))
	}
}

// exp2C holds exp2Vals; pairIdx the words 0, 16, 1, 17, ... 15, 31 (VPERMW
// by it interleaves a vector's lower and upper 16 words into pairs).
var exp2C, pairIdx Mem

// exp2Vals are exp2Tile's and exp2Weight's constants (attention_tiled.go),
// as float32 bits: the clamp, then ln2^j/j! for j = 7 down to 0
// (exp2Coef), then exp2WeightCoef.
var exp2Vals = []uint32{
	0xc3160000, // -150
	0x377fe5fe, 0x39218489, 0x3aaec3ff, 0x3c1d955b, 0x3d635847, 0x3e75fdf0, 0x3f317218, 0x3f800000,
	0x3d61fbcb, 0x3e786f2b, 0x3f31798e, 0x3f7ffb49,
}

// exp2Poly is a polynomial's coefficients in exp2Vals, the highest
// degree's first: [first, end).
type exp2Poly struct{ first, end int }

// exp2Taylor is exp2Tile's polynomial of degree deg; exp2Weights
// exp2Weight's.
func exp2Taylor(deg int) exp2Poly { return exp2Poly{9 - 1 - deg, 9} }

var exp2Weights = exp2Poly{9, 13}

// exp2Neg2 sets the lanes of z1 and z2, at most lazyMax (or NaN), to 2^z
// as exp2Tile computes it with the polynomial p: clamped from
// below by lo (-150 in every lane; nil where no lane is -Inf, which the
// clamp is for: below -150 the result is 0 either way), k = roundeven(z),
// f = z - k, the polynomial in f by Horner's rule, then scaled by 2^k.
// t1a, t2a, t1b, t2b are scratch.
func exp2Neg2(z1, z2, t1a, t2a, t1b, t2b, lo VecPhysical, p exp2Poly) {
	c := func(i int) Mem { return exp2C.Offset(4 * i) }
	if lo != nil {
		VMAXPS(z1, lo, z1)
		VMAXPS(z2, lo, z2)
	}
	VRNDSCALEPS(U8(0), z1, t1a) // k
	VRNDSCALEPS(U8(0), z2, t1b)
	VSUBPS(t1a, z1, z1) // f
	VSUBPS(t1b, z2, z2)
	VBROADCASTSS(c(p.first), t2a)
	VMOVAPS(t2a, t2b)
	for i := p.first + 1; i < p.end; i++ {
		VFMADD213PS_BCST(c(i), z1, t2a)
		VFMADD213PS_BCST(c(i), z2, t2b)
	}
	VSCALEFPS(t1a, t2a, z1)
	VSCALEFPS(t1b, t2b, z2)
}

// exp2Neg is exp2Neg2 on one vector.
func exp2Neg(z, t1, t2, lo VecPhysical, p exp2Poly) {
	c := func(i int) Mem { return exp2C.Offset(4 * i) }
	VMAXPS(z, lo, z)
	VRNDSCALEPS(U8(0), z, t1) // k
	VSUBPS(t1, z, z)          // f
	VBROADCASTSS(c(p.first), t2)
	for i := p.first + 1; i < p.end; i++ {
		VFMADD213PS_BCST(c(i), z, t2)
	}
	VSCALEFPS(t1, t2, z)
}

// vcvtneps2bf16 emits VCVTNEPS2BF16 Z<src>, Y<dst>: the 16 float32 lanes
// of src rounded to bf16 (to nearest, ties to even, a denormal read as
// zero, a NaN kept quiet) into dst's 16 words, by bytes (the Go assembler
// does not know the instruction). EVEX.512.F3.0F38.W0 72 /r.
func vcvtneps2bf16(src, dst int) {
	inv := func(v, bit int) int { return (v>>bit)&1 ^ 1 }
	p0 := inv(dst, 3)<<7 | inv(src, 4)<<6 | inv(src, 3)<<5 | inv(dst, 4)<<4 | 0b10
	Comment(fmt.Sprintf("VCVTNEPS2BF16 Z%d, Y%d", src, dst))
	for _, c := range []byte{0x62, byte(p0), 0x7e, 0x48, 0x72, byte(0b11<<6 | (dst&7)<<3 | src&7)} {
		raw("BYTE", U8(c))
	}
}

// bf16Round rounds the float32 lanes of x to bf16 in place, as integers
// (to nearest, ties to even: x + 0x7fff + bit 16 of x, then the lower half
// cleared), leaving bf16 values as float32. one, half and top hold 1,
// 0x7fff and 0xffff0000 in every lane; t is scratch.
func bf16Round(x, t, one, half, top VecPhysical) {
	VPSRLD(U8(16), x, t)
	VPANDD(one, t, t)
	VPADDD(t, x, x)
	VPADDD(half, x, x)
	VPANDD(top, x, x)
}

// bf16Consts loads bf16Round's constants into one, half and top.
func bf16Consts(one, half, top VecPhysical) {
	for _, c := range []struct {
		v uint32
		z VecPhysical
	}{{1, one}, {0x7fff, half}, {0xffff0000, top}} {
		MOVL(U32(c.v), EAX)
		VPBROADCASTD(EAX, c.z)
	}
}

// vcvtne2ps2bf16 emits VCVTNE2PS2BF16 Z<hi>, Z<lo>, Z<dst>: the 16 float32
// lanes of lo rounded to bf16 into dst's words 0-15 and those of hi into
// words 16-31 (rounding as VCVTNEPS2BF16), by bytes (the Go assembler does
// not know the instruction). EVEX.512.F2.0F38.W0 72 /r.
func vcvtne2ps2bf16(hi, lo, dst int) {
	inv := func(v, bit int) int { return (v>>bit)&1 ^ 1 }
	p0 := inv(dst, 3)<<7 | inv(lo, 4)<<6 | inv(lo, 3)<<5 | inv(dst, 4)<<4 | 0b10
	p1 := (^hi&15)<<3 | 1<<2 | 0b11
	p2 := 0b10<<5 | inv(hi, 4)<<3
	Comment(fmt.Sprintf("VCVTNE2PS2BF16 Z%d, Z%d, Z%d", lo, hi, dst))
	for _, c := range []byte{0x62, byte(p0), byte(p1), byte(p2), 0x72, byte(0b11<<6 | (dst&7)<<3 | lo&7)} {
		raw("BYTE", U8(c))
	}
}

// keyPairsBZ generates
//
//	keyPairsBZ(dst *uint32, src *uint16, cnt, rd, rd16 int)
//
// which writes a tile's keys as the scores' bf16 pairs: pair j of position
// p at dst[16j+p], from the cnt rows of rd halves at src (the pairs of
// positions past cnt, and pairs rd/2 to rd16/2, zero). Each pair is
// gathered as a dword of halves, widened and rounded (VCVTNE2PS2BF16),
// and its halves interleaved (VPERMW by pairIdx).
func keyPairsBZ() {
	text("keyPairsBZ", NOSPLIT, "func(dst *uint32, src *uint16, cnt, rd, rd16 int)")
	Doc("keyPairsBZ converts a tile's keys from half precision to bf16 pairs (see internal/gen/attntb.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("cnt"), RCX)
	Load(Param("rd"), RDX)
	Load(Param("rd16"), R8)
	tilePairGather()
	VMOVDQU16(pairIdx, Z7)
	MOVQ(RDX, RBX)
	SHRQ(U8(1), RBX) // pairs of elements
	Label("kp_pair")
	VPXORD(Z0, Z0, Z0)
	KMOVW(K1, K2) // the gather clears its mask
	VPGATHERDD(Mem{Base: RSI, Index: Z5, Scale: 1}, K2, Z0)
	VPMOVDW(Z0, Y2)
	VCVTPH2PS(Y2, Z3) // elements 2j
	VPSRLD(U8(16), Z0, Z0)
	VPMOVDW(Z0, Y2)
	VCVTPH2PS(Y2, Z4) // elements 2j+1
	vcvtne2ps2bf16(4, 3, 6)
	VPERMW(Z6, Z7, Z6)
	VMOVDQU32(Z6, Mem{Base: RDI})
	ADDQ(U8(4), RSI)
	ADDQ(U8(64), RDI)
	DECQ(RBX)
	JNZ(LabelRef("kp_pair"))
	SUBQ(RDX, R8) // padding elements
	SHRQ(U8(1), R8)
	JZ(LabelRef("kp_done"))
	VPXORD(Z1, Z1, Z1)
	Label("kp_pad")
	VMOVDQU32(Z1, Mem{Base: RDI})
	ADDQ(U8(64), RDI)
	DECQ(R8)
	JNZ(LabelRef("kp_pad"))
	Label("kp_done")
	VZEROUPPER()
	RET()
}

// valuePairsBZ generates
//
//	valuePairsBZ(dst *uint32, src *uint16, zero *uint16, cnt, rd, rd16 int)
//
// which writes a tile's values as the value sums' bf16 pairs: pair j of
// element d at dst[j*rd16+d], the values of positions 2j and 2j+1, from
// the cnt rows of rd halves at src (rd a multiple of 8; positions past cnt
// read from zero, at least rd halves of zeros; elements past rd zero).
func valuePairsBZ() {
	text("valuePairsBZ", NOSPLIT, "func(dst *uint32, src *uint16, zero *uint16, cnt, rd, rd16 int)")
	Doc("valuePairsBZ converts a tile's values from half precision to bf16 pairs (see internal/gen/attntb.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("zero"), R13)
	Load(Param("cnt"), RCX)
	Load(Param("rd"), RDX)
	Load(Param("rd16"), R8)
	VMOVDQU16(pairIdx, Z7)
	MOVQ(RDX, R11)
	SHLQ(U8(1), R11) // bytes of a row of halves
	SHLQ(U8(2), R8)  // bytes of a row of pairs
	XORQ(R9, R9)     // position 2j
	Label("vp_pair")
	// RAX, RBX: rows 2j and 2j+1, or the zeros.
	MOVQ(R13, RAX)
	MOVQ(R13, RBX)
	MOVQ(R9, R10)
	IMULQ(R11, R10)
	ADDQ(RSI, R10)
	CMPQ(R9, RCX)
	CMOVQLT(R10, RAX)
	ADDQ(R11, R10)
	LEAQ(Mem{Base: R9, Disp: 1}, R12)
	CMPQ(R12, RCX)
	CMOVQLT(R10, RBX)
	XORQ(R14, R14) // byte offset of the chunk in a row of halves
	MOVQ(RDI, R15)
	MOVQ(RDX, R12) // halves left
	Label("vp_chunk")
	CMPQ(R12, U8(16))
	JL(LabelRef("vp_half"))
	VCVTPH2PS(Mem{Base: RAX, Index: R14, Scale: 1}, Z3)
	VCVTPH2PS(Mem{Base: RBX, Index: R14, Scale: 1}, Z4)
	vcvtne2ps2bf16(4, 3, 6)
	VPERMW(Z6, Z7, Z6)
	VMOVDQU32(Z6, Mem{Base: R15})
	ADDQ(U8(32), R14)
	ADDQ(U8(64), R15)
	SUBQ(U8(16), R12)
	JNZ(LabelRef("vp_chunk"))
	JMP(LabelRef("vp_next"))
	Label("vp_half") // 8 halves left: the chunk's upper half is padding
	VCVTPH2PS(Mem{Base: RAX, Index: R14, Scale: 1}, Y3)
	VCVTPH2PS(Mem{Base: RBX, Index: R14, Scale: 1}, Y4)
	vcvtne2ps2bf16(4, 3, 6)
	VPERMW(Z6, Z7, Z6)
	VMOVDQU32(Z6, Mem{Base: R15})
	Label("vp_next")
	ADDQ(R8, RDI)
	ADDQ(U8(2), R9)
	CMPQ(R9, U8(16))
	JL(LabelRef("vp_pair"))
	VZEROUPPER()
	RET()
}

// queryPairsBZ generates
//
//	queryPairsBZ(dst *uint32, src *float32, r0, rows, hd, rd16 int, scale float32)
//
// which writes rows consecutive queries of hd floats (a multiple of 32) at
// src, times scale, as the scores' blocked bf16 pairs from row r0 on: row
// r's pair j at dst[(r/8)*4*rd16 + 8j + r%8], rounded by VCVTNE2PS2BF16
// and scattered 8 dwords apart (the pairs past hd/2 are left as they are).
func queryPairsBZ() {
	text("queryPairsBZ", NOSPLIT, "func(dst *uint32, src *float32, r0, rows, hd, rd16 int, scale float32)")
	Doc("queryPairsBZ converts queries to the scores' blocked bf16 pairs (see internal/gen/attntb.go).")
	Load(Param("dst"), RDI)
	Load(Param("src"), RSI)
	Load(Param("r0"), R10)
	Load(Param("rows"), RCX)
	Load(Param("hd"), RDX)
	Load(Param("rd16"), R9)
	Load(Param("scale"), X8)
	VBROADCASTSS(X8, Z8)
	VMOVDQU32(attnTIota, Z9)
	VPSLLD(U8(3), Z9, Z9) // pair j's dword offset: 8j
	SHLQ(U8(4), R9)       // bytes of a block of 8 rows
	SHRQ(U8(5), RDX)      // chunks of 32 floats
	Label("qp_row")
	// R11: row r's first pair.
	MOVQ(R10, R11)
	SHRQ(U8(3), R11)
	IMULQ(R9, R11)
	ADDQ(RDI, R11)
	MOVQ(R10, RAX)
	ANDQ(U8(7), RAX)
	LEAQ(Mem{Base: R11, Index: RAX, Scale: 4}, R11)
	MOVQ(RDX, RBX)
	Label("qp_chunk")
	VMULPS(Mem{Base: RSI}, Z8, Z0)
	VMULPS(Mem{Base: RSI, Disp: 64}, Z8, Z1)
	vcvtne2ps2bf16(1, 0, 2)
	KXNORW(K1, K1, K1)
	VPSCATTERDD(Z2, K1, Mem{Base: R11, Index: Z9, Scale: 4})
	ADDQ(U32(128), RSI)
	ADDQ(U32(16*8*4), R11)
	DECQ(RBX)
	JNZ(LabelRef("qp_chunk"))
	INCQ(R10)
	DECQ(RCX)
	JNZ(LabelRef("qp_row"))
	VZEROUPPER()
	RET()
}

// tileScoresBZ generates
//
//	tileScoresBZ(s *float32, q *uint32, k *uint32, blocks, rd16 int)
//
// s[16r+p] = q_r . k_p (the scale is in the queries) for the rows r of blocks blocks of 8 and
// the tile's 16 positions, from pairs: q in blocks of 8 rows, pair j of a
// block's row i at q[8j+i] (blocks 4*rd16 dwords apart), k pair j of
// position p at k[16j+p]. Each dot is one chain of VDPBF16PS over j from
// zero, the 16 positions of a row at once. Two blocks go at a time (16
// independent chains), then the last one alone.
//
// Meanwhile it prefetches (into the L2) lines cache lines from nk and as
// many from nv, two of each per two blocks: the next tile's keys and
// values, which halfTileZ would otherwise read from L3 one latency at a
// time. (Asked for all at once, they stall on the misses in flight; and
// the L1 would not keep them through the tile's work.)
func tileScoresBZ() {
	text("tileScoresBZ", NOSPLIT, "func(s *float32, q *uint32, k *uint32, blocks, rd16 int, nk, nv *uint16, lines int)")
	Doc("tileScoresBZ computes one tile's scores on bf16 pairs (see internal/gen/attntb.go).")
	Load(Param("nk"), R13)
	Load(Param("nv"), R14)
	Load(Param("lines"), R12)
	Load(Param("s"), RDI)
	Load(Param("q"), RSI)
	Load(Param("blocks"), RCX)
	Load(Param("rd16"), RDX)
	MOVQ(RDX, R11)
	SHLQ(U8(4), R11) // bytes of a block of queries: 8 rows of rd16/2 pairs
	SHRQ(U8(2), RDX) // iterations: two pairs each
	for _, nb := range []int{2, 1} {
		loop, next := fmt.Sprintf("tsb_%d", nb), fmt.Sprintf("tsb_%d_done", nb)
		Label(loop)
		CMPQ(RCX, U8(nb))
		JL(LabelRef(next))
		for r := 0; r < 8*nb; r++ {
			VPXORD(zreg(r), zreg(r), zreg(r))
		}
		Load(Param("k"), RAX)
		MOVQ(RDX, RBX)
		LEAQ(Mem{Base: RSI, Index: R11, Scale: 1}, R10) // the second block
		if nb == 2 {
			skip := loop + "_nopf"
			CMPQ(R12, U8(2))
			JL(LabelRef(skip))
			PREFETCHT1(Mem{Base: R13})
			PREFETCHT1(Mem{Base: R13, Disp: 64})
			PREFETCHT1(Mem{Base: R14})
			PREFETCHT1(Mem{Base: R14, Disp: 64})
			ADDQ(U8(128), R13)
			ADDQ(U8(128), R14)
			SUBQ(U8(2), R12)
			Label(skip)
		}
		step := loop + "_step"
		Label(step)
		VMOVDQU32(Mem{Base: RAX}, Z16)
		VMOVDQU32(Mem{Base: RAX, Disp: 64}, Z17)
		for u := 0; u < 2; u++ {
			for r := 0; r < 8; r++ {
				vdpbf16psBcst(RSI, 32*u+4*r, 16+u, r)
				if nb == 2 {
					vdpbf16psBcst(R10, 32*u+4*r, 16+u, 8+r)
				}
			}
		}
		ADDQ(U32(128), RAX)
		ADDQ(U8(64), RSI)
		ADDQ(U8(64), R10)
		DECQ(RBX)
		JNZ(LabelRef(step))
		for r := 0; r < 8*nb; r++ {
			VMOVUPS(zreg(r), Mem{Base: RDI, Disp: 64 * r})
		}
		ADDQ(U32(512*nb), RDI)
		if nb == 2 {
			ADDQ(R11, RSI) // past the second block
		}
		SUBQ(U8(nb), RCX)
		JMP(LabelRef(loop))
		Label(next)
	}
	VZEROUPPER()
	RET()
}

// tileSoftmaxBZ generates
//
//	tileSoftmaxBZ(s *float32, v *uint32, acc *float32, ms *float32, sv *float32, masks *uint16, wb *uint16, rows, rd16 int)
//
// tileSoftmaxBF16Generic's online softmax, m a bound within lazyMax of the
// maximum: a row takes m' = max(m, tile max) and c = 2^(m-m') only when
// one of its scores exceeds m by more than lazyMax, else m' = m and c = 1.
// Sixteen rows go at a time: their scores less m first, then the tile's
// maximum only when a row exceeds (rarely, deep into a prompt). Weights
// w = bf16(2^(x-m')) by exp2Weight (VCVTNEPS2BF16), row r's 16 at
// wb[16r:] (its dword j the pair of positions 2j and 2j+1); S's 8 parts
// (sv[8r:]) scaled by c and added the weights' pairs (VDPBF16PS with pairs
// of ones); unseen scores set to -Inf in s. Then each row's accumulators
// are scaled by c and take the tile's 8 value pairs in order, acc =
// dpbf16(acc, v_j, w_j), v pair j of element d at v[j*rd16+d]. Every pair
// is added, those of the positions a row does not see with weight 0.
func tileSoftmaxBZ() {
	text("tileSoftmaxBZ", NOSPLIT, "func(s *float32, v *uint32, acc *float32, ms *float32, sv *float32, masks *uint16, wb *uint16, rows, rd16 int)")
	Doc("tileSoftmaxBZ runs one tile's online softmax and value accumulation on bf16 pairs (see internal/gen/attntb.go).")
	Load(Param("s"), RDI)
	Load(Param("ms"), R9)
	Load(Param("sv"), RDX)
	Load(Param("masks"), RSI)
	Load(Param("wb"), R10)
	Load(Param("rows"), RCX)
	MOVL(U32(0xff800000), EAX) // -Inf
	VPBROADCASTD(EAX, Z30)
	VMOVDQU32(attnTPerm, Z31)
	VBROADCASTSS(exp2C, Z27) // the clamp, -150
	MOVL(U32(lazyMaxBits), EAX)
	VPBROADCASTD(EAX, Z29)
	MOVL(U32(0x3f803f80), EAX) // pairs of bf16 ones
	VPBROADCASTD(EAX, Z28)
	one := expfC.Offset(4 * 12)
	VBROADCASTSS(one, Z24)
	// The value accumulation's registers (vaccTB): R13 the row's weights,
	// R14 its m, R8 its accumulators, R12 the bytes of a row of
	// accumulators or of value pairs.
	Load(Param("wb"), R13)
	Load(Param("acc"), R8)
	Load(Param("ms"), R14)
	Load(Param("rd16"), R12)
	SHLQ(U8(2), R12)

	Label("smb_block")
	CMPQ(RCX, U8(16))
	JL(LabelRef("smb_rows"))
	// The 16 rows' masks all whole (every tile of a long prompt but the
	// diagonal ones): the scores are read as they are, and 2^x needs no
	// clamp for -Inf; else their unseen lanes are set to -Inf first.
	VPCMPEQD(Y1, Y1, Y1)
	VPCMPEQD(Mem{Base: RSI}, Y1, Y0)
	VPMOVMSKB(Y0, EAX)
	CMPL(EAX, U32(0xffffffff))
	JNE(LabelRef("smb_mask"))
	softmaxBlockTB("w", false)
	JMP(LabelRef("smb_next"))
	Label("smb_mask")
	for r := 0; r < 16; r++ {
		KMOVW(Mem{Base: RSI, Disp: 2 * r}, K1)
		VMOVUPS(Mem{Base: RDI, Disp: 64 * r}, zreg(r))
		VBLENDMPS(zreg(r), Z30, K1, zreg(r)) // masked lanes -Inf
		VMOVUPS(zreg(r), Mem{Base: RDI, Disp: 64 * r})
	}
	softmaxBlockTB("m", true)
	Label("smb_next")
	// The 16 rows' values now rather than after every row's softmax, so
	// that the softmax's other instructions run beside the values' dot
	// products.
	MOVQ(U32(4), R11)
	Label("smb_bquad")
	vaccTB(4, "b")
	ADDQ(U32(4*32), R13)
	ADDQ(U8(4*4), R14)
	DECQ(R11)
	JNZ(LabelRef("smb_bquad"))
	ADDQ(U32(16*64), RDI)
	ADDQ(U32(16*32), R10)
	ADDQ(U32(16*32), RDX)
	ADDQ(U8(16*4), R9)
	ADDQ(U8(16*2), RSI)
	SUBQ(U8(16), RCX)
	JMP(LabelRef("smb_block"))

	// The rows left, one at a time.
	Label("smb_rows")
	TESTQ(RCX, RCX)
	JZ(LabelRef("smb_values"))
	KMOVW(Mem{Base: RSI}, K1)
	VMOVUPS(Mem{Base: RDI}, Z0)
	VBLENDMPS(Z0, Z30, K1, Z0) // masked lanes -Inf
	VMOVUPS(Z0, Mem{Base: RDI})
	VSUBPS_BCST(Mem{Base: R9}, Z0, Z2) // x - m
	VCMPPS(U8(cmpGT), Z29, Z2, K2)
	KORTESTW(K2, K2)
	JZ(LabelRef("smb_r_keep"))
	// Max over the lanes: m' (greater than m).
	VEXTRACTF32X8(U8(1), Z0, Y1)
	VMAXPS(Y1, Y0, Y1)
	VEXTRACTF128(U8(1), Y1, X2)
	VMAXPS(X2, X1, X1)
	VPERMILPS(U8(0x4e), X1, X2)
	VMAXPS(X2, X1, X1)
	VPERMILPS(U8(0xb1), X1, X2)
	VMAXSS(X2, X1, X1)
	VMOVSS(Mem{Base: R9}, X2) // m
	VMOVSS(X1, Mem{Base: R9})
	VSUBSS(X1, X2, X2) // m - m'
	VBROADCASTSS(X2, Z3)
	exp2Neg(Z3, Z4, Z5, Z27, exp2Taylor(7)) // c in every lane
	VMOVSS(X3, Mem{Base: R9, Disp: 2 * msStride})
	VMULPS(Mem{Base: RDX}, Y3, Y4) // S's parts times c
	VMOVUPS(Y4, Mem{Base: RDX})
	VBROADCASTSS(X1, Z1)
	VSUBPS(Z1, Z0, Z2) // x - m'
	JMP(LabelRef("smb_r_exp"))
	Label("smb_r_keep")
	VMOVSS(X24, Mem{Base: R9, Disp: 2 * msStride}) // c = 1
	Label("smb_r_exp")
	exp2Neg(Z2, Z4, Z5, Z27, exp2Weights)
	vcvtneps2bf16(2, 4)
	VMOVDQU32(Y4, Mem{Base: R10})
	VMOVUPS(Mem{Base: RDX}, Y5)
	vdpbf16psY(4, 28, 5) // S's parts plus the weights' pairs
	VMOVUPS(Y5, Mem{Base: RDX})
	ADDQ(U8(64), RDI)
	ADDQ(U8(32), R10)
	ADDQ(U8(32), RDX)
	ADDQ(U8(4), R9)
	ADDQ(U8(2), RSI)
	DECQ(RCX)
	JMP(LabelRef("smb_rows"))

	// The rows left's value accumulation, four rows at a time, then one
	// at a time (R11 the rows left).
	Label("smb_values")
	Load(Param("rows"), R11)
	ANDQ(U8(15), R11) // the rows left after the blocks of 16
	Label("smb_quad")
	CMPQ(R11, U8(4))
	JL(LabelRef("smb_single"))
	vaccTB(4, "q")
	ADDQ(U32(4*32), R13)
	ADDQ(U8(4*4), R14)
	SUBQ(U8(4), R11)
	JMP(LabelRef("smb_quad"))
	Label("smb_single")
	TESTQ(R11, R11)
	JZ(LabelRef("smb_done"))
	vaccTB(1, "s")
	ADDQ(U8(32), R13)
	ADDQ(U8(4), R14)
	DECQ(R11)
	JMP(LabelRef("smb_single"))
	Label("smb_done")
	VZEROUPPER()
	RET()
}

// lazyMaxBits is lazyMax (attention_tiled.go) as float32 bits: 8.
const lazyMaxBits = 0x41000000

// cmpGT is VCMPPS's predicate greater than, ordered and quiet (GT_OQ).
const cmpGT = 0x1e

// softmaxBlockTB emits the softmax of the 16 rows at RDI (scores), R9 (m,
// and c at 2*msStride), RDX (S's parts), R10 (weights); masked, their
// unseen scores are -Inf and 2^x clamps. Z0-Z23 and Z25, Z26 are
// clobbered; Z24 holds 1, Z27 the clamp, Z28 pairs of bf16 ones, Z29
// lazyMax, Z31 attnTPerm.
func softmaxBlockTB(tag string, masked bool) {
	a := func(r int) VecPhysical { return zreg(r) }
	// x - m, and whether a row exceeds lazyMax.
	KXORW(K4, K4, K4)
	for r := 0; r < 16; r++ {
		VMOVUPS(Mem{Base: RDI, Disp: 64 * r}, a(r))
		VSUBPS_BCST(Mem{Base: R9, Disp: 4 * r}, a(r), a(r))
		VCMPPS(U8(cmpGT), Z29, a(r), K1)
		KORW(K1, K4, K4)
	}
	KORTESTW(K4, K4)
	JZ(LabelRef("smb_" + tag + "_keep"))
	// Some row exceeds: the rows that do take the tile's maximum as m'
	// and c = 2^(m-m'), the others keep m and c = 1.
	for r := 0; r < 16; r++ {
		VMOVUPS(Mem{Base: RDI, Disp: 64 * r}, a(r))
	}
	reduce16(func(x, y, z VecPhysical) { VMAXPS(x, y, z) }) // Z16: the rows' maxima
	VMOVUPS(Mem{Base: R9}, Z18)                             // m
	VSUBPS(Z18, Z16, Z21)
	VCMPPS(U8(cmpGT), Z29, Z21, K2) // the rows that exceed
	VMOVAPS(Z18, Z19)
	VMOVAPS(Z16, K2, Z19) // m'
	VMOVUPS(Z19, Mem{Base: R9})
	VSUBPS(Z19, Z18, Z20) // m - m'
	exp2Neg(Z20, Z16, Z17, Z27, exp2Taylor(7))
	VBLENDMPS(Z20, Z24, K2, Z20) // c
	VMOVUPS(Z20, Mem{Base: R9, Disp: 2 * msStride})
	for r := 0; r < 16; r++ {
		VMOVUPS(Mem{Base: RDX, Disp: 32 * r}, Y21)
		VMULPS_BCST(Mem{Base: R9, Disp: 2*msStride + 4*r}, Y21, Y21) // S's parts times c
		VMOVUPS(Y21, Mem{Base: RDX, Disp: 32 * r})
	}
	for r := 0; r < 16; r++ {
		VMOVUPS(Mem{Base: RDI, Disp: 64 * r}, a(r))
		VSUBPS_BCST(Mem{Base: R9, Disp: 4 * r}, a(r), a(r)) // x - m'
	}
	JMP(LabelRef("smb_" + tag + "_exp"))
	Label("smb_" + tag + "_keep")
	VMOVUPS(Z24, Mem{Base: R9, Disp: 2 * msStride}) // c = 1
	Label("smb_" + tag + "_exp")
	// Two rows at a time, their instructions interleaved: each 2^x is a
	// chain of dependent steps.
	var lo VecPhysical
	if masked {
		lo = Z27
	}
	for r := 0; r < 16; r += 2 {
		exp2Neg2(a(r), a(r+1), Z16, Z17, Z25, Z26, lo, exp2Weights)
		// The weights to bf16 (wb), and their pairs into S's parts.
		vcvtneps2bf16(r, 16)
		vcvtneps2bf16(r+1, 25)
		VMOVDQU32(Y16, Mem{Base: R10, Disp: 32 * r})
		VMOVDQU32(Y25, Mem{Base: R10, Disp: 32 * (r + 1)})
		VMOVUPS(Mem{Base: RDX, Disp: 32 * r}, Y17)
		VMOVUPS(Mem{Base: RDX, Disp: 32 * (r + 1)}, Y26)
		vdpbf16psY(16, 28, 17)
		vdpbf16psY(25, 28, 26)
		VMOVUPS(Y17, Mem{Base: RDX, Disp: 32 * r})
		VMOVUPS(Y26, Mem{Base: RDX, Disp: 32 * (r + 1)})
	}
}

// vdpbf16psY emits VDPBF16PS Y<src2>, Y<src1>, Y<dst>: every lane of dst
// adds the products of src1's and src2's pairs (the upper halves' first),
// by bytes (the Go assembler does not know the instruction).
// EVEX.256.F3.0F38.W0 52 /r.
func vdpbf16psY(src1, src2, dst int) {
	inv := func(v, bit int) int { return (v>>bit)&1 ^ 1 }
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0b10
	p1 := (^src1&15)<<3 | 1<<2 | 0b10
	p2 := 0b01<<5 | inv(src1, 4)<<3
	Comment(fmt.Sprintf("VDPBF16PS Y%d, Y%d, Y%d", src2, src1, dst))
	for _, c := range []byte{0x62, byte(p0), byte(p1), byte(p2), 0x52, byte(0b11<<6 | (dst&7)<<3 | src2&7)} {
		raw("BYTE", U8(c))
	}
}

// vaccTB emits the value accumulation of R rows on bf16 pairs: R13 points
// at the first row's weights (rows 32 bytes apart), R14 at its m, R8 at
// its accumulators (advanced past the R rows on exit), R12 the bytes of a
// row. The accumulators go in chunks of up to 4 vectors per row; each
// chunk takes the 8 value pairs in order. When every row's c is 1 (the
// maximum stayed: most tiles deep into a prompt) the accumulators are
// loaded rather than multiplied by it, the same bits.
func vaccTB(R int, tag string) {
	VMOVUPS(Mem{Base: R14, Disp: 2 * msStride}, X16)
	VBROADCASTSS(expfC.Offset(4*12), X17)
	VCMPPS(U8(0), X17, X16, K3) // c == 1
	KMOVW(K3, EAX)
	ANDL(U32(1<<R-1), EAX)
	CMPL(EAX, U32(1<<R-1))
	JE(LabelRef("smb_" + tag + "_same"))
	vaccTBBody(R, tag+"c", true)
	JMP(LabelRef("smb_" + tag + "_end"))
	Label("smb_" + tag + "_same")
	vaccTBBody(R, tag+"1", false)
	Label("smb_" + tag + "_end")
	for r := 0; r < R; r++ {
		ADDQ(R12, R8)
	}
}

// vaccTBBody is vaccTB's loop over the chunks, with the accumulators
// scaled by c or (rescale false) as they are.
func vaccTBBody(R int, tag string, rescale bool) {
	acc := func(r, i int) int { return 4*r + i }
	vv := func(i int) int { return 16 + i }
	cs := func(r int) VecPhysical { return zreg(20 + r) }
	if rescale {
		for r := 0; r < R; r++ {
			VBROADCASTSS(Mem{Base: R14, Disp: 4*r + 2*msStride}, cs(r))
		}
	}
	XORQ(R15, R15) // byte offset of the chunk in a row
	rowMem := func(r, i int) Mem {
		if r == 0 {
			return Mem{Base: R8, Index: R15, Scale: 1, Disp: 64 * i}
		}
		return Mem{Base: RAX, Disp: 64 * i} // row r's chunk, formed in RAX
	}
	rowAddr := func(r int) {
		IMUL3Q(U32(r), R12, RAX)
		ADDQ(R8, RAX)
		ADDQ(R15, RAX)
	}
	for _, w := range []int{4, 1} {
		loop, done := fmt.Sprintf("smb_%schunk%d", tag, w), fmt.Sprintf("smb_%schunkdone%d", tag, w)
		Label(loop)
		MOVQ(R12, RAX)
		SUBQ(R15, RAX)
		CMPQ(RAX, U32(64*w))
		JL(LabelRef(done))
		for r := 0; r < R; r++ {
			if r > 0 {
				rowAddr(r)
			}
			for i := 0; i < w; i++ {
				if rescale {
					VMULPS(rowMem(r, i), cs(r), zreg(acc(r, i)))
				} else {
					VMOVUPS(rowMem(r, i), zreg(acc(r, i)))
				}
			}
		}
		// RBX: pair j's values of the chunk.
		Load(Param("v"), RBX)
		ADDQ(R15, RBX)
		for j := 0; j < 8; j++ {
			for i := 0; i < w; i++ {
				VMOVDQU32(Mem{Base: RBX, Disp: 64 * i}, zreg(vv(i)))
			}
			for r := 0; r < R; r++ {
				for i := 0; i < w; i++ {
					vdpbf16psBcst(R13, 32*r+4*j, vv(i), acc(r, i))
				}
			}
			if j < 7 {
				ADDQ(R12, RBX)
			}
		}
		for r := 0; r < R; r++ {
			if r > 0 {
				rowAddr(r)
			}
			for i := 0; i < w; i++ {
				VMOVUPS(zreg(acc(r, i)), rowMem(r, i))
			}
		}
		ADDQ(U32(64*w), R15)
		JMP(LabelRef(loop))
		Label(done)
	}
}
