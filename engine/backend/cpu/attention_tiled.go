package cpu

import (
	"math"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// Tiled attention over an F16 cache, in float32 (the AVX-512 level): the
// arithmetic of llama.cpp's tiled CPU flash attention, which it runs for
// prompts (ggml_compute_forward_flash_attn_ext_tiled), made independent of
// the batch: keys and values are widened to float32 (exact), the query is
// used as it is, and the softmax runs over tiles of at most 16 positions
// that never cross a block and start at multiples of 16 within it, so a
// tile's bounds depend on positions only. For one query head, with m the
// running maximum, S the running sum and acc the float32 accumulators:
//
//	s_p = dot(q, k_p) * scale  for the tile's positions the query sees,
//	      -Inf for the others (before its window, after its own position)
//	m' = max(m, max_p s_p); c = e^(m-m'); w_p = e^(s_p-m')
//	S = float32(S*c) + sum_p w_p; acc = acc*c, then
//	acc = fma(w_p, v_p, acc) for the positions seen, in order
//
// and out = acc * (1/S). A dot is one chain of fused multiply-adds over
// the elements in order, from zero (llama.cpp's tiled product: the
// kernels compute a row's 16 scores at once, one vector of positions per
// element, with no reduction across lanes); sum_p adds the 16 weights by
// halves (lanes j and j+8, then j and j+4, j+2, j+1); e^x is expTile's, a
// float32 evaluation within a few ulps.
// Scores are soft-capped between the dot and the softmax where the model
// asks (softCap * tanh).
//
// A query's result depends on its query, its window and the cache only:
// the kernels take many queries of one sequence at once (a prompt's tokens,
// the query heads of a KV head), converting each tile's keys and values
// once for all of them, but every query goes through the same operations
// alone or in any company. tileScoresGeneric and tileSoftmaxGeneric are
// the definition in Go; the assembly (internal/gen/attnt.go) gives the
// same bits. On AVX512_BF16 the kernel set avx512bf16 runs a bf16 variant
// instead (the end of this file).

// tileLen is the most positions of one tile.
const tileLen = 16

// Bounds of the scratch of one tiled call.
const (
	// tiledRowFloats bounds rows x rd16 of the queries and accumulators.
	tiledRowFloats = 32768
	// tiledMaxRows bounds the rows (query heads x tokens) of one call.
	tiledMaxRows = 512
	// tiledQBlock is the rows of one block of the queries' layout: the
	// scores are computed a block at a time.
	tiledQBlock = 8
)

// tiledScratch is the working memory of one tiled call, kept on a free
// list (tiledScratches) as attnScratch is.
type tiledScratch struct {
	q   [tiledRowFloats + tiledQBlock*MaxAttnHeadDim]float32 // [block][rd16][8] queries, zero padded
	acc [tiledRowFloats]float32                              // [row][rd16] accumulators
	s   [(tiledMaxRows + tiledQBlock) * tileLen]float32      // [row][16] scores, then weights
	ms  [3 * tiledMaxRows]float32                            // m, S and c: [3][row]
	k   [tileLen * MaxAttnHeadDim]float32                    // the tile's keys, [rd16][p]
	v   [tileLen * MaxAttnHeadDim]float32                    // the tile's values, [p][rd16]
	rng [2 * tiledMaxRows]int32                              // [token]: first and end position in the tile
	msk [tiledMaxRows]uint16                                 // [row]: the positions of the tile it sees
	// The bf16 arithmetic's pairs (see tileScoresBF16): queries [block][rd16/2][8],
	// keys [rd16/2][p], values [p/2][rd16], weights [row][p].
	qb [(tiledRowFloats + tiledQBlock*MaxAttnHeadDim) / 2]uint32
	kb [tileLen * MaxAttnHeadDim / 2]uint32
	vb [tileLen * MaxAttnHeadDim / 2]uint32
	wb [tiledMaxRows * tileLen]uint16
	sv [tiledMaxRows * 8]float32 // [row][8]: the running sums S in parts (tileSoftmaxBF16)
}

var tiledScratches freeList[tiledScratch]

// tiledQueries describes the queries of one tiled call: tokens of one
// sequence, and for each the gn query heads h0.. of KV head kvh that it
// asks. Token t's head i has its hd values at q[t*stride+i*hd:], and its
// result goes to the same place in out. Token t sees positions
// start[t] <= p < n[t] of the sequence, whose block table is table.
type tiledQueries struct {
	out, q   []float32
	stride   int
	gn       int
	kvh      int
	table    []int32
	start, n []int32
	scale    float32
	softCap  float32
	// sinks, when not nil, holds the sink logits of the gn heads, folded
	// into each token's softmax after its last tile (foldSink).
	sinks     []float32
	assembler bool // the AVX-512 kernels, else the Go definition
	bf16      bool // the bf16 arithmetic (end of this file), else float32
}

// tiledRow is the length of a head of hd values in the tiled kernels'
// rows: RowDim rounded up to 16.
func tiledRow(hd int) int { return (tensor.KVLayout{HeadDim: hd}.RowDim() + 15) &^ 15 }

// tiledTokens is the most tokens of one call of gn heads of rd16 floats
// (gn <= tiledHeads(rd16)): the queries and accumulators of its rows fit
// the scratch.
func tiledTokens(gn, rd16 int) int { return max(1, tiledHeads(rd16)/gn) }

// tiledHeads is the most query heads of one token in one call for heads of
// rd16 floats.
func tiledHeads(rd16 int) int { return max(1, min(tiledMaxRows, tiledRowFloats/rd16)) }

// attendTiled computes the queries of tq over the F16 cache k, v (layout
// l). len(tq.start) tokens times tq.gn heads must fit the scratch
// (tiledTokens), and every token must see at least one position.
func attendTiled(tq *tiledQueries, k, v []uint16, l tensor.KVLayout) {
	sc := tiledScratches.get()
	defer tiledScratches.put(sc)
	hd, rd, rd16 := l.HeadDim, l.RowDim(), tiledRow(l.HeadDim)
	T, gn := len(tq.start), tq.gn
	rows := T * gn
	qrows := (rows + tiledQBlock - 1) / tiledQBlock * tiledQBlock
	qs, qb, acc := sc.q[:qrows*rd16], sc.qb[:qrows*rd16/2], sc.acc[:rows*rd16]
	if tq.bf16 {
		clear(qb)
	} else {
		clear(qs)
	}
	clear(acc)
	lo, hi := int(tq.start[0]), int(tq.n[0])
	// Tiles within [lastStart, firstEnd) are seen whole by every token.
	lastStart, firstEnd := lo, hi
	qscale := scaleBF16(tq.scale, tq.softCap)
	for t := range T {
		if tq.bf16 {
			queryPairsBF16(qb, t*gn, rd16, tq.q[t*tq.stride:][:gn*hd], hd, qscale, tq.assembler)
		} else {
			for i := range gn {
				blockQuery(qs, t*gn+i, rd16, tq.q[t*tq.stride+i*hd:][:hd])
			}
		}
		lo, hi = min(lo, int(tq.start[t])), max(hi, int(tq.n[t]))
		lastStart, firstEnd = max(lastStart, int(tq.start[t])), min(firstEnd, int(tq.n[t]))
	}
	ms, sv := sc.ms[:], sc.sv[:rows*8]
	for r := range rows {
		ms[r], ms[tiledMaxRows+r] = float32(math.Inf(-1)), 0
	}
	clear(sv)
	scale := cappedScale(tq.scale, tq.softCap)
	bs := l.BlockSize
	// Tiles: within each block, 16 positions from its start on.
	for p0 := lo - lo%bs + (lo%bs)/tileLen*tileLen; p0 < hi; {
		slot := p0 % bs
		cnt := min(tileLen, bs-slot, hi-p0)
		// The tokens that see the tile: a run of them where positions
		// grow with the token (a prompt), else several runs.
		// A tile every token sees whole (most tiles of a long prompt)
		// needs no look at the tokens.
		allWhole := cnt == tileLen && p0 >= lastStart && p0+cnt <= firstEnd
		for t0 := 0; t0 < T; {
			t1 := T
			rng, seen, whole := wholeRanges[:2*T], cnt, true
			if !allWhole {
				if !tileSeen(tq, t0, p0, cnt) {
					t0++
					continue
				}
				t1 = t0 + 1
				for t1 < T && tileSeen(tq, t1, p0, cnt) {
					t1++
				}
				rng, seen = sc.rng[:2*(t1-t0)], 0
				for t := t0; t < t1; t++ {
					a, b := max(int(tq.start[t]), p0)-p0, min(int(tq.n[t]), p0+cnt)-p0
					rng[2*(t-t0)], rng[2*(t-t0)+1] = int32(a), int32(b)
					seen = max(seen, b)
					whole = whole && a == 0 && b == tileLen
				}
			}
			row := l.Row(int(tq.table[p0/bs]), tq.kvh, slot)
			r0, r1 := t0*gn, t1*gn
			// The rows' masks: all 16 positions for every row of a tile
			// all its tokens see whole.
			msk := wholeMasks[:r1-r0]
			if !whole {
				msk = sc.msk[:r1-r0]
				tileMasks(msk, rng, gn)
			}
			// Scores go by whole blocks of rows: those of the blocks'
			// other rows are not read.
			b0, b1 := r0/tiledQBlock, (r1+tiledQBlock-1)/tiledQBlock
			if tq.bf16 {
				// Every value pair is added (with weight 0 where unseen):
				// the pairs of positions past those read are zero.
				keyPairsBF16(sc.kb[:tileLen*rd16/2], k[row:row+seen*rd], seen, rd, rd16, tq.assembler)
				valuePairsBF16(sc.vb[:tileLen*rd16/2], v[row:row+seen*rd], seen, rd, rd16, tq.assembler)
				bq := tiledQBlock * rd16 / 2
				var nk, nv []uint16
				if next := p0 + cnt; next < hi {
					// The next tile's rows, fetched while this one works.
					nslot := next % bs
					nrow, n := l.Row(int(tq.table[next/bs]), tq.kvh, nslot), min(tileLen, bs-nslot, hi-next)*rd
					nk, nv = k[nrow:nrow+n], v[nrow:nrow+n]
				}
				tileScoresBF16(sc.s[b0*tiledQBlock*tileLen:b1*tiledQBlock*tileLen], qb[b0*bq:b1*bq],
					sc.kb[:tileLen*rd16/2], b1-b0, rd16, nk, nv, tq.assembler)
				s := sc.s[r0*tileLen : r1*tileLen]
				if tq.softCap != 0 {
					capScoresLog2(s, tq.softCap)
				}
				tileSoftmaxBF16(s, sc.vb[:tileLen*rd16/2], acc[r0*rd16:r1*rd16], ms[r0:], sv[r0*8:r1*8], msk, sc.wb[:(r1-r0)*tileLen], r1-r0, rd16, tq.assembler)
				t0 = t1
				continue
			}
			halfTile(sc.k[:tileLen*rd16], k[row:row+seen*rd], seen, rd, rd16, true, tq.assembler)
			halfTile(sc.v[:tileLen*rd16], v[row:row+seen*rd], seen, rd, rd16, false, tq.assembler)
			tileScores(sc.s[b0*tiledQBlock*tileLen:b1*tiledQBlock*tileLen], qs[b0*tiledQBlock*rd16:b1*tiledQBlock*rd16],
				sc.k[:tileLen*rd16], b1-b0, rd16, scale, tq.assembler)
			s := sc.s[r0*tileLen : r1*tileLen]
			if tq.softCap != 0 {
				capScores(s, tq.softCap)
			}
			tileSoftmax(s, sc.v[:tileLen*rd16], acc[r0*rd16:r1*rd16], ms[r0:], rng, msk, t1-t0, gn, rd16, tq.assembler)
			t0 = t1
		}
		p0 += cnt
	}
	for t := range T {
		for i := range gn {
			r := t*gn + i
			if tq.bf16 {
				ms[tiledMaxRows+r] = halves8((*[8]float32)(sv[r*8:]))
			}
			if tq.sinks != nil {
				if tq.bf16 {
					ms[r] *= expLn2 // m in natural units
				}
				foldSink(acc[r*rd16:][:hd], &ms[r], &ms[tiledMaxRows+r], tq.sinks[i])
			}
			inv := 1 / ms[tiledMaxRows+r]
			o, a := tq.out[t*tq.stride+i*hd:][:hd], acc[r*rd16:][:hd]
			for d := range o {
				o[d] = a[d] * inv
			}
		}
	}
}

// tileSeen reports whether token t sees a position of the tile of cnt
// positions from p0.
func tileSeen(tq *tiledQueries, t, p0, cnt int) bool {
	return int(tq.start[t]) < p0+cnt && int(tq.n[t]) > p0
}

// blockQuery writes query row r (its hd values, zero padded to rd16) into
// the blocked layout of the scores' queries qs: blocks of tiledQBlock rows,
// element d of the block's row i at [d*tiledQBlock+i], so that the kernel
// broadcasts the rows' elements from consecutive floats.
func blockQuery(qs []float32, r, rd16 int, q []float32) {
	b := qs[r/tiledQBlock*tiledQBlock*rd16:][:tiledQBlock*rd16]
	for d, x := range q {
		b[d*tiledQBlock+r%tiledQBlock] = x
	}
}

// halfTile widens cnt rows of rd halves into rows of rd16 floats, the
// padding zero: for keys transposed (element d of row p at dst[16d+p],
// every lane of the tile written, the rows past cnt zero), for values
// row-major (rows past cnt untouched).
func halfTile(dst []float32, src []uint16, cnt, rd, rd16 int, transposed, asm bool) {
	if asm {
		halfTileSIMD(dst, src, cnt, rd, rd16, transposed)
		return
	}
	if transposed {
		clear(dst[:tileLen*rd16])
	}
	for p := range cnt {
		for d := range rd16 {
			var x float32
			if d < rd {
				x = quant.F16ToF32(src[p*rd+d])
			}
			if transposed {
				dst[d*tileLen+p] = x
			} else {
				dst[p*rd16+d] = x
			}
		}
	}
}

// tileScores sets s[16r+p] = dot(q_r, k_p) * scale for the rows r of
// blocks blocks of the blocked queries q (blockQuery) and the tile's 16
// transposed keys k (see the top of this file for the order).
func tileScores(s, q, k []float32, blocks, rd16 int, scale float32, asm bool) {
	if asm {
		tileScoresSIMD(s, q, k, blocks, rd16, scale)
		return
	}
	tileScoresGeneric(s, q, k, blocks, rd16, scale)
}

func tileScoresGeneric(s, q, k []float32, blocks, rd16 int, scale float32) {
	for r := range blocks * tiledQBlock {
		qb := q[r/tiledQBlock*tiledQBlock*rd16:][:tiledQBlock*rd16]
		for p := range tileLen {
			var a float32
			for d := range rd16 {
				a = fmaF32(qb[d*tiledQBlock+r%tiledQBlock], k[d*tileLen+p], a)
			}
			s[r*tileLen+p] = a * scale
		}
	}
}

// halves16 adds 16 lanes by halves: j and j+8, then j and j+4, j and j+2,
// j and j+1.
func halves16(a *[16]float32) float32 {
	var b [8]float32
	for j := range b {
		b[j] = a[j] + a[j+8]
	}
	c0, c1, c2, c3 := b[0]+b[4], b[1]+b[5], b[2]+b[6], b[3]+b[7]
	return (c0 + c2) + (c1 + c3)
}

// halves8 adds 8 lanes by halves: j and j+4, then j and j+2, j and j+1.
func halves8(a *[8]float32) float32 {
	c0, c1, c2, c3 := a[0]+a[4], a[1]+a[5], a[2]+a[6], a[3]+a[7]
	return (c0 + c2) + (c1 + c3)
}

// wholeMasks are the masks of rows that see all 16 positions of a tile.
var wholeMasks = func() (m [tiledMaxRows]uint16) {
	for i := range m {
		m[i] = 1<<tileLen - 1
	}
	return m
}()

// wholeRanges are the ranges (tileSoftmax's rng) of tokens that see all
// 16 positions of a tile.
var wholeRanges = func() (r [2 * tiledMaxRows]int32) {
	for t := range tiledMaxRows {
		r[2*t+1] = tileLen
	}
	return r
}()

// tileMasks sets masks[r], for the rows of tokens of gn rows each, to the
// bits of the positions its token sees: rng[2t] <= p < rng[2t+1].
func tileMasks(masks []uint16, rng []int32, gn int) {
	for t := range len(masks) / gn {
		lo, hi := rng[2*t], rng[2*t+1]
		m := uint16(1<<hi-1) &^ uint16(1<<lo-1)
		for i := range masks[t*gn : (t+1)*gn] {
			masks[t*gn+i] = m
		}
	}
}

// tileSoftmax runs the online softmax of one tile for tokens x gn rows
// and their value accumulation: s holds the rows' scores (overwritten by
// the weights); ms their m, S and c, row r's at ms[r], ms[tiledMaxRows+r]
// and ms[2*tiledMaxRows+r]; rng each token's first and end position in the
// tile (at least one), masks the same per row (tileMasks). With m' the new
// maximum, c is 1 when m' == m, else e^(m-m').
func tileSoftmax(s, v, acc, ms []float32, rng []int32, masks []uint16, tokens, gn, rd16 int, asm bool) {
	if asm {
		tileSoftmaxSIMD(s, v, acc, ms, rng, masks, tokens, gn, rd16)
		return
	}
	tileSoftmaxGeneric(s, v, acc, ms, rng, tokens, gn, rd16)
}

func tileSoftmaxGeneric(s, v, acc, ms []float32, rng []int32, tokens, gn, rd16 int) {
	inf := float32(math.Inf(-1))
	for t := range tokens {
		lo, hi := int(rng[2*t]), int(rng[2*t+1])
		for i := range gn {
			r := t*gn + i
			x := (*[16]float32)(s[r*tileLen:])
			tmax := inf
			for p := range x {
				if p < lo || p >= hi {
					x[p] = inf
				}
				tmax = max(tmax, x[p])
			}
			m := ms[r]
			m1 := m
			if tmax > m {
				m1 = tmax
			}
			c := float32(1)
			if m1 != m {
				c = expTile(m - m1)
			}
			for p := range x {
				x[p] = expTile(x[p] - m1)
			}
			ms[r], ms[tiledMaxRows+r], ms[2*tiledMaxRows+r] = m1, float32(ms[tiledMaxRows+r]*c)+halves16(x), c
			a := acc[r*rd16 : (r+1)*rd16]
			for d := range a {
				a[d] = float32(a[d] * c)
			}
			for p := lo; p < hi; p++ {
				vp := v[p*rd16:][:rd16]
				for d := range a {
					a[d] = fmaF32(x[p], vp[d], a[d])
				}
			}
		}
	}
}

// expTile is e^x for the tiled softmax, in float32 (the assembly,
// internal/gen/attnt.go's expf16, performs the same operations): x clamped
// to [-104, 89]; k = roundeven(x*log2(e)); r = x - k*ln2, ln2 in two parts
// by fused multiply-adds (exact for the high part); e^r by its Taylor
// polynomial of degree 7 (truncation below 6e-9 for |r| <= ln2/2), by
// Horner's rule with fused multiply-adds; then r scaled by 2^k with one
// rounding (VSCALEFPS), so that e^-104 and below round to 0.
func expTile(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, -104), 89)
	k := float32(math.RoundToEven(float64(x * expTileLog2e)))
	r := fmaF32(-k, expTileLn2Hi, x)
	r = fmaF32(-k, expTileLn2Lo, r)
	p := expTileCoef[0]
	for _, c := range expTileCoef[1:] {
		p = fmaF32(p, r, c)
	}
	return float32(float64(p) * math.Ldexp(1, int(k)))
}

// expTile's constants, as float32 (internal/gen/attnt.go holds their bits).
const (
	expTileLog2e float32 = 1.4426950216293335
	expTileLn2Hi float32 = 0.693145751953125
	expTileLn2Lo float32 = 1.428606765330187e-06
)

// expTileCoef are 1/j! for j = 7 down to 0, rounded to float32.
var expTileCoef = [8]float32{1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1, 1}

// The bf16 variant of the tiled arithmetic (tiledQueries.bf16), for CPUs
// with AVX512_BF16 (VDPBF16PS: two products per float32 lane, twice the
// FMA's multiply rate). It differs from the float32 one above in three
// roundings, in its running maximum and in the shape of its sums:
//
//   - the query, and each key and value (F16, exact in float32), are
//     rounded to bf16 as VCVTNEPS2BF16 rounds (to nearest, ties to even: 8
//     significant bits of the key's and value's 11; a denormal reads as
//     zero; pairNE), the query after it is multiplied by
//     scale*log2(e) (scaleBF16): scores, m and the exponentials are in
//     base 2, s_p = dot(q', k_p) = scale*dot(q, k_p)*log2(e) and w_p =
//     2^(s_p-m'), c = 2^(m-m') (exp2Tile), which saves a multiplication
//     per score and one per exponential; with a soft cap the query takes
//     scale/softCap and the capped score is multiplied by log2(e)
//     (capScoresLog2);
//   - m is not the running maximum but a running bound within
//     lazyMax of it (the maximum as it was when last taken): a tile
//     takes a new m' = max(m, max_p s_p) only for a row where some score
//     exceeds m by more than lazyMax, else it keeps m' = m and c = 1, so
//     that deep in a prompt, where the maximum rarely grows, a row needs
//     neither the tile's maximum nor a rescale, and weights are at most
//     2^lazyMax;
//   - each weight w_p = 2^(s_p-m') is rounded to bf16 before it is used,
//     both in the value sums and in S, so that the output stays a convex
//     combination of the (rounded) values; 2^x is exp2Weight's (exp2Tile's
//     with a minimax polynomial of degree 3: within 7.5e-5, inside bf16's
//     2^-9), and a denormal weight counts as 0 (weightBF16);
//   - S is kept in 8 parts, part j adding the weights of positions 2j+1
//     and 2j of each tile as a value accumulator does (dpbf16 with
//     pairs of ones), and is their sum by halves (halves8) at the end;
//   - a dot sums pairs of elements: per pair j, in order from zero,
//     a = fma(x[2j+1], y[2j+1], a) then a = fma(x[2j], y[2j], a), each
//     rounded once to float32 (VDPBF16PS, products of two bf16 exact),
//     denormal inputs read as zero and denormal results flushed to zero
//     (dpbf16). Scores are such a dot over the head's elements; a value
//     accumulator takes the tile's 8 position pairs the same way, the
//     positions a token does not see weighing 0.
//
// The softmax (m, S, c, 2^x) and the accumulators are float32 as above; a
// sink is folded in after m is taken back to natural units (m*ln2).
// Every result is still a function of the query, its window and the cache
// alone. tileScoresBF16Generic and tileSoftmaxBF16Generic are the
// definition in Go; internal/gen/attntb.go's kernels give the same bits.
//
// llama.cpp computes prompts in float32 (its tiled product widens F16 keys
// and values); against it, bf16 adds about 2^-9 relative noise to each
// score and weight: see engine/model's long-prompt oracle for its effect
// on logits.

// scaleBF16 is the factor of the bf16 arithmetic's queries: scores in
// base 2 (scale*log2(e)), or with a soft cap cappedScale's factor.
func scaleBF16(scale, softCap float32) float32 {
	if softCap != 0 {
		return cappedScale(scale, softCap)
	}
	return scale * expTileLog2e
}

// capScoresLog2 applies the soft cap to scores computed with
// scale/softCap and takes them to base 2.
func capScoresLog2(s []float32, softCap float32) {
	capScores(s, softCap)
	for i := range s {
		s[i] *= expTileLog2e
	}
}

// expLn2 is ln 2 as float32.
const expLn2 float32 = 0.6931471805599453

// exp2Tile is 2^x for x <= lazyMax (or NaN), in float32 (the assembly,
// internal/gen/attntb.go's exp2Neg, performs the same operations): x
// clamped to -150 from below; k = roundeven(x); f = x - k (exact, |f| <=
// 1/2); 2^f = e^(f ln2) by its Taylor polynomial of degree deg in f
// (coefficients ln2^j/j!, exp2Coef; degree 7: truncation below 6e-9),
// by Horner's rule with fused multiply-adds; then scaled by 2^k with one
// rounding (VSCALEFPS), so that 2^-150 and below round to 0.
func exp2Tile(x float32, deg int) float32 {
	return exp2Poly(x, exp2Coef[len(exp2Coef)-1-deg:])
}

// exp2Weight is 2^x for the bf16 weights, as exp2Tile computes it but for
// the polynomial: exp2WeightCoef's, of degree 3, within 7.5e-5 relative
// (the rounding to bf16 that follows is up to 2^-9, 2e-3).
func exp2Weight(x float32) float32 { return exp2Poly(x, exp2WeightCoef[:]) }

// exp2Poly is exp2Tile with the polynomial c, the highest degree's
// coefficient first.
func exp2Poly(x float32, c []float32) float32 {
	if x != x {
		return x
	}
	x = max(x, -150)
	k := float32(math.RoundToEven(float64(x)))
	f := x - k
	p := c[0]
	for _, c := range c[1:] {
		p = fmaF32(p, f, c)
	}
	return float32(float64(p) * math.Ldexp(1, int(k)))
}

// exp2WeightCoef is the polynomial of degree 3 nearest 2^f in relative
// error over |f| <= 1/2 (minimax, by Lawson's iteration), highest degree
// first, rounded to float32 (internal/gen/attntb.go holds their bits).
// Its value at 0 is 0.99993: a common factor, which the softmax's sum
// takes out.
var exp2WeightCoef = [4]float32{0.055171769112348557, 0.2426115721464157, 0.6932610273361206, 0.9999280571937561}

// exp2Coef are ln2^j/j! for j = 7 down to 0, rounded to float32
// (internal/gen/attntb.go holds their bits).
var exp2Coef = func() (c [8]float32) {
	t := 1.0
	for j := range c {
		c[len(c)-1-j] = float32(t)
		t *= math.Ln2 / float64(j+1)
	}
	return c
}()

// weightBF16 rounds a weight to bf16 as VCVTNEPS2BF16 does: to nearest,
// ties to even, a denormal read as zero, a NaN kept a (quiet) NaN.
func weightBF16(x float32) uint16 {
	if math.Float32bits(x)&0x7f800000 == 0 {
		return uint16(math.Float32bits(x) >> 16 & 0x8000)
	}
	return quant.F32ToBF16(x)
}

// queryPairsBF16 writes len(q)/hd consecutive queries of hd values from
// row r0 on, as blockQueryBF16 does.
func queryPairsBF16(qs []uint32, r0, rd16 int, q []float32, hd int, scale float32, asm bool) {
	if asm && hd%32 == 0 {
		queryPairsBF16SIMD(qs, r0, rd16, q, hd, scale)
		return
	}
	for i := range len(q) / hd {
		blockQueryBF16(qs, r0+i, rd16, q[i*hd:][:hd], scale)
	}
}

// blockQueryBF16 writes query row r (hd values times scale, each rounded
// as pairNE rounds, zero padded to rd16) into the blocked pairs qs: blocks
// of tiledQBlock rows, pair j of the block's row i at [j*tiledQBlock+i].
func blockQueryBF16(qs []uint32, r, rd16 int, q []float32, scale float32) {
	b := qs[r/tiledQBlock*tiledQBlock*rd16/2:][:tiledQBlock*rd16/2]
	for j := 0; 2*j < len(q); j++ {
		var hi float32
		if 2*j+1 < len(q) {
			hi = q[2*j+1] * scale
		}
		b[j*tiledQBlock+r%tiledQBlock] = pairNE(q[2*j]*scale, hi)
	}
}

// pairNE is the dword of bf16 lo and hi rounded as VCVTNEPS2BF16 rounds
// (weightBF16), lo in the low half.
func pairNE(lo, hi float32) uint32 { return uint32(weightBF16(lo)) | uint32(weightBF16(hi))<<16 }

// keyPairsBF16 writes a tile's keys as tileScoresBF16's pairs: pair j of
// position p at dst[16j+p], from the cnt rows of rd halves in src, each
// half widened and rounded to bf16 (pairNE: a half is a normal float32,
// so only a signalling NaN rounds otherwise than by integer arithmetic);
// the pairs of positions past cnt and those past
// rd/2 (up to rd16/2) zero. tileLen*rd16/2 dwords.
func keyPairsBF16(dst []uint32, src []uint16, cnt, rd, rd16 int, asm bool) {
	if asm {
		keyPairsBF16SIMD(dst, src, cnt, rd, rd16)
		return
	}
	for j := range rd16 / 2 {
		for p := range tileLen {
			var lo, hi float32
			if p < cnt && 2*j < rd {
				lo, hi = quant.F16ToF32(src[p*rd+2*j]), quant.F16ToF32(src[p*rd+2*j+1])
			}
			dst[j*tileLen+p] = pairNE(lo, hi)
		}
	}
}

// valuePairsBF16 writes a tile's values as tileSoftmaxBF16's pairs: pair
// j of element d at dst[j*rd16+d], the values of positions 2j and 2j+1,
// from the cnt rows of rd halves in src, rounded as keyPairsBF16 rounds;
// positions past cnt and elements past rd zero. tileLen*rd16/2 dwords.
func valuePairsBF16(dst []uint32, src []uint16, cnt, rd, rd16 int, asm bool) {
	if asm {
		valuePairsBF16SIMD(dst, src, cnt, rd, rd16)
		return
	}
	val := func(p, d int) float32 {
		if p < cnt && d < rd {
			return quant.F16ToF32(src[p*rd+d])
		}
		return 0
	}
	for j := range tileLen / 2 {
		for d := range rd16 {
			dst[j*rd16+d] = pairNE(val(2*j, d), val(2*j+1, d))
		}
	}
}

// bf16In reads the bf16 h as VDPBF16PS does: a denormal as zero.
func bf16In(h uint32) float32 {
	if h&0x7f80 == 0 {
		h &= 0x8000
	}
	return math.Float32frombits(h << 16)
}

// ftz flushes a denormal float32 to zero of its sign.
func ftz(x float32) float32 {
	if math.Float32bits(x)&0x7f800000 == 0 {
		return math.Float32frombits(math.Float32bits(x) & 0x80000000)
	}
	return x
}

// dpbf16 is one lane of VDPBF16PS: acc plus the product of the upper
// halves of the pairs x and y, then plus that of their lower halves, each
// a fused multiply-add rounded to nearest even, denormal inputs read as
// zero and denormal results flushed to zero.
func dpbf16(acc float32, x, y uint32) float32 {
	acc = ftz(fmaF32(bf16In(x>>16), bf16In(y>>16), ftz(acc)))
	return ftz(fmaF32(bf16In(x&0xffff), bf16In(y&0xffff), acc))
}

// tileScoresBF16 sets s[16r+p] = dot(q_r, k_p) for the rows r of blocks
// blocks of the blocked query pairs q (blockQueryBF16, the scale already
// in them) and the tile's 16 positions' key pairs k (pair j of position p
// at k[16j+p]). The assembly prefetches nk and nv meanwhile (the next
// tile's rows; nil for none).
func tileScoresBF16(s []float32, q, k []uint32, blocks, rd16 int, nk, nv []uint16, asm bool) {
	if asm {
		tileScoresBF16SIMD(s, q, k, blocks, rd16, nk, nv)
		return
	}
	tileScoresBF16Generic(s, q, k, blocks, rd16)
}

func tileScoresBF16Generic(s []float32, q, k []uint32, blocks, rd16 int) {
	bq := tiledQBlock * rd16 / 2
	for r := range blocks * tiledQBlock {
		qb := q[r/tiledQBlock*bq:][:bq]
		for p := range tileLen {
			var a float32
			for j := range rd16 / 2 {
				a = dpbf16(a, k[j*tileLen+p], qb[j*tiledQBlock+r%tiledQBlock])
			}
			s[r*tileLen+p] = a
		}
	}
}

// lazyMax is how far (in base 2) a score may exceed a row's m in the bf16
// arithmetic before the row takes a new m: weights are at most 2^lazyMax.
const lazyMax = 8

// onesBF16 is the pair of bf16 ones.
const onesBF16 = 0x3f803f80

// tileSoftmaxBF16 runs the online softmax of one tile for rows rows and
// their value accumulation on bf16 pairs: s holds the rows' scores in base
// 2 (the unseen ones set to -Inf), ms their m and c as for tileSoftmax (m
// in base 2, within lazyMax of the running maximum; c = 2^(m-m')), sv
// their sums S in 8 parts each (row r's at sv[8r:]), masks each row's
// positions, wb the scratch of the weights' bf16 bits (16 per row) and v
// the tile's value pairs (pair j of element d at v[j*rd16+d], positions
// past the tile's zero).
func tileSoftmaxBF16(s []float32, v []uint32, acc, ms, sv []float32, masks, wb []uint16, rows, rd16 int, asm bool) {
	if asm {
		tileSoftmaxBF16SIMD(s, v, acc, ms, sv, masks, wb, rows, rd16)
		return
	}
	tileSoftmaxBF16Generic(s, v, acc, ms, sv, masks, wb, rows, rd16)
}

func tileSoftmaxBF16Generic(s []float32, v []uint32, acc, ms, sv []float32, masks, wb []uint16, rows, rd16 int) {
	inf := float32(math.Inf(-1))
	for r := range rows {
		x := (*[16]float32)(s[r*tileLen:])
		m := ms[r]
		tmax, over := inf, false
		for p := range x {
			if masks[r]>>p&1 == 0 {
				x[p] = inf
			}
			tmax = max(tmax, x[p])
			over = over || x[p]-m > lazyMax
		}
		m1, c := m, float32(1)
		if over {
			m1 = max(m, tmax)
			c = exp2Tile(m-m1, 7)
		}
		w := wb[r*tileLen:][:tileLen]
		for p := range x {
			w[p] = weightBF16(exp2Weight(x[p] - m1))
		}
		ms[r], ms[2*tiledMaxRows+r] = m1, c
		sr := sv[r*8:][:8]
		for j := range sr {
			if over {
				sr[j] = float32(sr[j] * c)
			}
			sr[j] = dpbf16(sr[j], uint32(w[2*j])|uint32(w[2*j+1])<<16, onesBF16)
		}
		a := acc[r*rd16 : (r+1)*rd16]
		for d := range a {
			a[d] = float32(a[d] * c)
		}
		for j := range tileLen / 2 {
			wj := uint32(w[2*j]) | uint32(w[2*j+1])<<16
			vj := v[j*rd16:][:rd16]
			for d := range a {
				a[d] = dpbf16(a[d], vj[d], wj)
			}
		}
	}
}
