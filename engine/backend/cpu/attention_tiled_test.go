package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"rill/engine/quant"
)

// TestTileKernelsSIMD compares each tiled assembly kernel with its Go
// definition, bit for bit: head sizes with and without padding, one to
// several groups of rows, partial tiles and windows.
func TestTileKernelsSIMD(t *testing.T) {
	t.Parallel()
	if !hasAVX512 {
		t.Skip("no AVX-512 on this machine: the tiled kernels are not used")
	}
	r := newRand(t, 21)
	for _, rd := range []int{8, 16, 24, 40, 64, 72, 128, 136, 256} {
		rd16 := tiledRow(rd)
		for _, shape := range [][2]int{{1, 1}, {1, 4}, {3, 4}, {2, 5}, {5, 2}, {2, 8}, {1, 3}, {5, 4}, {16, 4}, {11, 3}} {
			tokens, gn := shape[0], shape[1]
			rows := tokens * gn
			t.Run(fmt.Sprintf("rd=%d/tokens=%d/gn=%d", rd, tokens, gn), func(t *testing.T) {
				cnt := 1 + r.IntN(tileLen)
				src := make([]uint16, tileLen*rd)
				f32ToF16Generic(src, randFloats(r, len(src), 1))
				for _, transposed := range []bool{true, false} {
					// Stale data in the scratch: the transposed keys
					// overwrite all of it.
					got, want := randFloats(r, tileLen*rd16, 1), randFloats(r, tileLen*rd16, 1)
					if !transposed {
						copy(got, want)
					}
					halfTile(got, src, cnt, rd, rd16, transposed, true)
					halfTile(want, src, cnt, rd, rd16, transposed, false)
					sameBits(t, fmt.Sprintf("halfTile transposed=%v", transposed), got, want)
				}
				k, v := make([]float32, tileLen*rd16), make([]float32, tileLen*rd16)
				halfTile(k, src, tileLen, rd, rd16, true, false)
				f32ToF16Generic(src, randFloats(r, len(src), 1))
				halfTile(v, src, tileLen, rd, rd16, false, false)
				blocks := (rows + tiledQBlock - 1) / tiledQBlock
				q := make([]float32, blocks*tiledQBlock*rd16)
				for i := range rows {
					blockQuery(q, i, rd16, randFloats(r, rd, 3))
				}
				gs, ss := make([]float32, blocks*tiledQBlock*tileLen), make([]float32, blocks*tiledQBlock*tileLen)
				tileScores(ss, q, k, blocks, rd16, 0.125, true)
				tileScoresGeneric(gs, q, k, blocks, rd16, 0.125)
				sameBits(t, "tileScores", ss, gs)
				gs, ss = gs[:rows*tileLen], ss[:rows*tileLen]

				rng := make([]int32, 2*tokens)
				for i := range tokens {
					lo := r.IntN(cnt)
					rng[2*i], rng[2*i+1] = int32(lo), int32(lo+1+r.IntN(cnt-lo))
				}
				ms := make([]float32, 3*tiledMaxRows)
				acc := randFloats(r, rows*rd16, 1)
				for i := range rows {
					ms[i], ms[tiledMaxRows+i] = float32(r.NormFloat64()*2), float32(1+r.Float64())
					if i%3 == 0 {
						ms[i], ms[tiledMaxRows+i] = float32(math.Inf(-1)), 0
					}
				}
				gms, gacc := slices.Clone(ms), slices.Clone(acc)
				masks := make([]uint16, rows)
				tileMasks(masks, rng, gn)
				tileSoftmax(ss, v, acc, ms, rng, masks, tokens, gn, rd16, true)
				tileSoftmaxGeneric(gs, v, gacc, gms, rng, tokens, gn, rd16)
				sameBits(t, "weights", ss, gs)
				sameBits(t, "ms", ms, gms)
				sameBits(t, "acc", acc, gacc)
			})
		}
	}
}

// tiled runs the fixture's query heads as one token through the tiled
// path over positions start..n-1, in float32 or (bf16) on bf16 pairs.
func (f *attnFixture) tiled(start, n int, softCap float32, asm, bf16 bool) []float32 {
	out := make([]float32, len(f.q))
	hd := f.l.HeadDim
	g := f.group()
	for i := range f.kvHeads {
		tq := tiledQueries{
			out: out[i*g*hd : (i+1)*g*hd], q: f.q[i*g*hd : (i+1)*g*hd], stride: g * hd, gn: g,
			kvh: f.head + i, table: f.table, start: []int32{int32(start)}, n: []int32{int32(n)},
			scale: f.scale, softCap: softCap, assembler: asm, bf16: bf16,
		}
		attendTiled(&tq, f.k16, f.v16, f.l)
	}
	return out
}

// TestAttendTiled checks the tiled path against exact softmax attention
// over the widened cache (same tolerance as TestAttendF32: float32
// arithmetic throughout), the assembly against the Go definition bit for
// bit, and a scattered block table against a contiguous one.
func TestAttendTiled(t *testing.T) {
	t.Parallel()
	for ci, c := range attnCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			r := newRand(t, uint64(300+ci))
			f := newAttnFixture(t, r, c, 2, 2)
			// The exact reference reads k32 and v32: make them the halves.
			for i, h := range f.k16 {
				f.k32[i] = f16ToF32Generic1(h)
				f.v32[i] = f16ToF32Generic1(f.v16[i])
			}
			want := f.refF32(c.n)
			got := f.tiled(0, c.n, 0, false, false)
			for i := range want {
				if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5*max(1, math.Abs(want[i])) {
					t.Fatalf("out[%d] = %g, exact %g", i, got[i], want[i])
				}
			}
			sameBits(t, "contiguous", f.contiguous().tiled(0, c.n, 0, false, false), got)
			if hasAVX512 {
				sameBits(t, "assembly", f.tiled(0, c.n, 0, true, false), got)
				if c.n > 3 {
					start := c.n / 3
					sameBits(t, "window assembly", f.tiled(start, c.n, 0, true, false), f.tiled(start, c.n, 0, false, false))
					sameBits(t, "capped assembly", f.tiled(0, c.n, 30, true, false), f.tiled(0, c.n, 30, false, false))
				}
			}
			// bf16: the queries, keys, values and weights rounded to 8
			// significant bits, so within bf16's relative error (2^-8)
			// of the largest value magnitude; then the assembly, bit for
			// bit, where the machine has AVX512_BF16.
			gotB := f.tiled(0, c.n, 0, false, true)
			vmax := 0.0
			for _, h := range f.v16 {
				vmax = max(vmax, math.Abs(float64(f16ToF32Generic1(h))))
			}
			for i := range want {
				if d := math.Abs(float64(gotB[i]) - want[i]); d > 0x1p-8*vmax {
					t.Fatalf("bf16: out[%d] = %g, exact %g", i, gotB[i], want[i])
				}
			}
			sameBits(t, "bf16 contiguous", f.contiguous().tiled(0, c.n, 0, false, true), gotB)
			if hasBF16Dot {
				sameBits(t, "bf16 assembly", f.tiled(0, c.n, 0, true, true), gotB)
				if c.n > 3 {
					start := c.n / 3
					sameBits(t, "bf16 window assembly", f.tiled(start, c.n, 0, true, true), f.tiled(start, c.n, 0, false, true))
					sameBits(t, "bf16 capped assembly", f.tiled(0, c.n, 30, true, true), f.tiled(0, c.n, 30, false, true))
				}
			}
		})
	}
}

func f16ToF32Generic1(h uint16) float32 {
	var d [1]float32
	f16ToF32Generic(d[:], []uint16{h})
	return d[0]
}

// TestAttendTiledBatch: many tokens of one sequence in one call (a prompt
// under causal attention, with and without a window) give each token the
// bits of the call for that token alone.
func TestAttendTiledBatch(t *testing.T) {
	t.Parallel()
	r := newRand(t, 23)
	for _, c := range []attnCase{{64, 4, 1, 70, 16}, {8, 2, 1, 40, 7}, {72, 3, 1, 33, 32}, {128, 1, 1, 20, 16}} {
		for _, window := range []int{0, 9} {
			t.Run(fmt.Sprintf("%v/window=%d", c, window), func(t *testing.T) {
				f := newAttnFixture(t, r, c, 1, 2)
				hd, g := c.hd, c.group
				T := c.n
				q := randFloats(r, T*g*hd, 2)
				start, n := make([]int32, T), make([]int32, T)
				for tok := range T {
					n[tok] = int32(tok + 1)
					if window > 0 {
						start[tok] = int32(max(0, tok+1-window))
					}
				}
				for _, k := range []struct{ asm, bf16 bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
					asm := k.asm
					if asm && !hasAVX512 || asm && k.bf16 && !hasBF16Dot {
						continue
					}
					out := make([]float32, len(q))
					for t0 := 0; t0 < T; t0 += tiledTokens(g, tiledRow(c.hd)) {
						t1 := min(T, t0+tiledTokens(g, tiledRow(c.hd)))
						tq := tiledQueries{out: out[t0*g*hd:], q: q[t0*g*hd:], stride: g * hd, gn: g, kvh: f.head,
							table: f.table, start: start[t0:t1], n: n[t0:t1], scale: f.scale, assembler: asm, bf16: k.bf16}
						attendTiled(&tq, f.k16, f.v16, f.l)
					}
					for tok := range T {
						one := make([]float32, g*hd)
						tq := tiledQueries{out: one, q: q[tok*g*hd:], stride: g * hd, gn: g, kvh: f.head,
							table: f.table, start: start[tok : tok+1], n: n[tok : tok+1], scale: f.scale, assembler: asm, bf16: k.bf16}
						attendTiled(&tq, f.k16, f.v16, f.l)
						sameBits(t, fmt.Sprintf("asm=%v bf16=%v token %d", asm, k.bf16, tok), out[tok*g*hd:(tok+1)*g*hd], one)
					}
				}
			})
		}
	}
}

// TestExpTile: the tiled softmax's exponential is within 3 ulps of e^x
// where the weights live (x <= 0, down to the smallest normal), exactly 1
// at 0, 0 far below and NaN for NaN.
func TestExpTile(t *testing.T) {
	t.Parallel()
	worst := 0.0
	for i := 0; i <= 200000; i++ {
		x := float32(-87.3 * float64(i) / 200000)
		got, want := float64(expTile(x)), math.Exp(float64(x))
		ulp := float64(math.Nextafter32(float32(want), 2)) - float64(float32(want))
		worst = max(worst, math.Abs(got-want)/ulp)
	}
	if worst > 3 {
		t.Fatalf("largest error %.2f ulps", worst)
	}
	t.Logf("largest error %.2f ulps", worst)
	for _, c := range []struct{ x, want float32 }{{0, 1}, {-104, 0}, {-200, 0}, {float32(math.Inf(-1)), 0}} {
		if got := expTile(c.x); got != c.want {
			t.Fatalf("expTile(%g) = %g, want %g", c.x, got, c.want)
		}
	}
	if nan := float32(math.NaN()); expTile(nan) == expTile(nan) {
		t.Fatal("expTile(NaN) is not NaN")
	}
}

// TestExp2Tile: the bf16 softmax's 2^x is within 3 ulps of 2^x at degree
// 7 (c) and within 7.5e-5 relative for the weights (exp2Weight, rounded
// to bf16 after), where they live (x <= lazyMax, down to the smallest
// normal); exactly 1 at 0 (the weights: 1 once rounded to bf16), 0 far
// below and NaN for NaN.
func TestExp2Tile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		deg       int // 0: exp2Weight
		ulps, rel float64
	}{{7, 3, 0}, {0, 0, 7.6e-5}} {
		exp2 := func(x float32) float32 {
			if c.deg == 0 {
				return exp2Weight(x)
			}
			return exp2Tile(x, c.deg)
		}
		worstUlps, worstRel := 0.0, 0.0
		for i := 0; i <= 200000; i++ {
			x := float32(lazyMax - (lazyMax+125.9)*float64(i)/200000)
			got, want := float64(exp2(x)), math.Exp2(float64(x))
			ulp := float64(math.Nextafter32(float32(want), 2)) - float64(float32(want))
			worstUlps, worstRel = max(worstUlps, math.Abs(got-want)/ulp), max(worstRel, math.Abs(got-want)/want)
		}
		if c.ulps != 0 && worstUlps > c.ulps || c.rel != 0 && worstRel > c.rel {
			t.Fatalf("degree %d: largest error %.2f ulps, %.2g relative", c.deg, worstUlps, worstRel)
		}
		t.Logf("degree %d: largest error %.2f ulps, %.2g relative", c.deg, worstUlps, worstRel)
		for _, z := range []struct{ x, want float32 }{{0, 1}, {-150, 0}, {-200, 0}, {float32(math.Inf(-1)), 0}} {
			got := exp2(z.x)
			if c.deg == 0 {
				got = bf16In(uint32(weightBF16(got)))
			}
			if got != z.want {
				t.Fatalf("degree %d: 2^%g = %g, want %g", c.deg, z.x, got, z.want)
			}
		}
		if nan := float32(math.NaN()); exp2(nan) == exp2(nan) {
			t.Fatal("2^NaN is not NaN")
		}
	}
}

// TestTileKernelsBF16 compares each bf16 tiled kernel with its Go
// definition, bit for bit, as TestTileKernelsSIMD does the float32 ones,
// with scales from ordinary to denormal so that the definition's reading
// of denormal inputs as zero and flushing of denormal results are
// checked against the instruction.
func TestTileKernelsBF16(t *testing.T) {
	t.Parallel()
	if !hasBF16Dot {
		t.Skip("no AVX512_BF16 on this machine: the bf16 tiled kernels are not used")
	}
	r := newRand(t, 29)
	for _, rd := range []int{8, 16, 40, 64, 128, 136} {
		rd16 := tiledRow(rd)
		for _, shape := range [][2]int{{1, 1}, {1, 4}, {3, 4}, {2, 5}, {5, 2}, {2, 8}, {5, 4}, {16, 4}, {11, 3}} {
			for _, c := range []struct {
				tiny  float64
				whole bool // the first half of the tokens see the tile whole
			}{{1, false}, {0x1p-64, false}, {1, true}} {
				tiny, tokens, gn := c.tiny, shape[0], shape[1]
				rows := tokens * gn
				t.Run(fmt.Sprintf("rd=%d/tokens=%d/gn=%d/scale=%g/whole=%v", rd, tokens, gn, tiny, c.whole), func(t *testing.T) {
					src := randFloats(r, tileLen*rd16, 1)
					for i := range src {
						src[i] *= float32(tiny) * float32(math.Ldexp(1, -r.IntN(8)))
					}
					halves := make([]uint16, tileLen*rd)
					for i := range halves {
						halves[i] = quant.F32ToF16(src[i%len(src)])
					}
					halves[r.IntN(len(halves))] = 0x7e00 // a NaN
					for _, cnt := range []int{1, 7, 15, 16} {
						for _, f := range []struct {
							name string
							fn   func([]uint32, []uint16, int, int, int, bool)
						}{{"keyPairsBF16", keyPairsBF16}, {"valuePairsBF16", valuePairsBF16}} {
							got, want := make([]uint32, tileLen*rd16/2), make([]uint32, tileLen*rd16/2)
							for i := range got {
								got[i], want[i] = 0xdeadbeef, 0xfeedface // every dword written
							}
							f.fn(got, halves[:cnt*rd], cnt, rd, rd16, true)
							f.fn(want, halves[:cnt*rd], cnt, rd, rd16, false)
							if !slices.Equal(got, want) {
								t.Fatalf("%s, %d rows: assembly and Go differ", f.name, cnt)
							}
						}
					}
					k, v := make([]uint32, tileLen*rd16/2), make([]uint32, tileLen*rd16/2)
					pairFloats(k, src, tileLen, rd16/2)
					pairFloats(v, randFloats(r, tileLen*rd16, 1), rd16, tileLen/2)
					blocks := (rows + tiledQBlock - 1) / tiledQBlock
					q := make([]uint32, blocks*tiledQBlock*rd16/2)
					for i := range rows {
						blockQueryBF16(q, i, rd16, randFloats(r, rd, 3*tiny), 0.125*expTileLog2e)
					}
					gs, ss := make([]float32, blocks*tiledQBlock*tileLen), make([]float32, blocks*tiledQBlock*tileLen)
					tileScoresBF16(ss, q, k, blocks, rd16, nil, nil, true)
					tileScoresBF16Generic(gs, q, k, blocks, rd16)
					sameBits(t, "tileScoresBF16", ss, gs)
					gs, ss = gs[:rows*tileLen], ss[:rows*tileLen]
					if tiny != 1 {
						// Scores of ordinary size for the softmax.
						for i := range gs {
							gs[i] = float32(r.NormFloat64() * 3)
						}
						copy(ss, gs)
					}
					rng := make([]int32, 2*tokens)
					for i := range tokens {
						lo := r.IntN(tileLen)
						rng[2*i], rng[2*i+1] = int32(lo), int32(lo+1+r.IntN(tileLen-lo))
						if c.whole && 2*i < tokens {
							rng[2*i], rng[2*i+1] = 0, tileLen
						}
					}
					ms := make([]float32, 3*tiledMaxRows)
					acc := randFloats(r, rows*rd16, 1)
					if tiny != 1 {
						// Denormal accumulators: read as zero.
						for i := range acc {
							acc[i] *= 0x1p-130
						}
					}
					// m: a first tile (-Inf), a bound scores exceed by more
					// than lazyMax or not (both ways through a block of 16
					// rows), or one far above every score.
					sv := make([]float32, rows*8)
					for i := range rows {
						ms[i] = float32(r.NormFloat64() * 2)
						switch i % 5 {
						case 0:
							ms[i] = float32(math.Inf(-1))
						case 1:
							ms[i] = 40
						}
						for j := range 8 {
							if !math.IsInf(float64(ms[i]), -1) {
								sv[i*8+j] = float32(r.Float64())
							}
						}
					}
					if c.whole {
						// Rows of whole tiles that all keep m (the block's
						// quick way).
						for i := range min(rows, 16) {
							ms[i] = 40
						}
					}
					gms, gacc, gsv := slices.Clone(ms), slices.Clone(acc), slices.Clone(sv)
					masks := make([]uint16, rows)
					tileMasks(masks, rng, gn)
					gwb, swb := make([]uint16, rows*tileLen), make([]uint16, rows*tileLen)
					tileSoftmaxBF16(ss, v, acc, ms, sv, masks, swb, rows, rd16, true)
					tileSoftmaxBF16Generic(gs, v, gacc, gms, gsv, masks, gwb, rows, rd16)
					sameBits(t, "masked scores", ss, gs)
					if !slices.Equal(swb, gwb) {
						t.Fatal("bf16 weights differ")
					}
					sameBits(t, "ms", ms[:rows], gms[:rows])
					sameBits(t, "c", ms[2*tiledMaxRows:][:rows], gms[2*tiledMaxRows:][:rows])
					sameBits(t, "S parts", sv, gsv)
					sameBits(t, "acc", acc, gacc)
				})
			}
		}
	}
}

// pairFloats writes pairs rows of row dwords: dst row j element i the
// pair of src rows 2j and 2j+1's element i (bf16Pair), so that the kernels
// take tiles of any float32 values, denormal ones included: on a
// transposed key tile (rows of 16 positions per element) that is the keys'
// pairs, on a value tile (rows of rd16 per position) the values'.
func pairFloats(dst []uint32, src []float32, row, pairs int) {
	for j := range pairs {
		for i := range row {
			dst[j*row+i] = bf16Pair(src[2*j*row+i], src[(2*j+1)*row+i])
		}
	}
}

// TestQueryPairsBF16: the queries' conversion to blocked bf16 pairs in
// assembly gives the Go definition's bits, for runs of rows starting
// anywhere in a block, tiny and NaN values included.
func TestQueryPairsBF16(t *testing.T) {
	t.Parallel()
	if !hasBF16Dot {
		t.Skip("no AVX512_BF16 here")
	}
	r := newRand(t, 31)
	for _, hd := range []int{32, 64, 128} {
		rd16 := tiledRow(hd)
		for _, c := range []struct{ r0, rows int }{{0, 1}, {0, 4}, {3, 5}, {7, 9}, {8, 16}} {
			q := randFloats(r, c.rows*hd, 3)
			q[r.IntN(len(q))] = float32(math.NaN())
			q[r.IntN(len(q))] = 0x1p-130
			blocks := (c.r0 + c.rows + tiledQBlock - 1) / tiledQBlock
			got, want := make([]uint32, blocks*tiledQBlock*rd16/2), make([]uint32, blocks*tiledQBlock*rd16/2)
			for i := range got {
				got[i], want[i] = 7, 7 // rows outside the run are left alone
			}
			queryPairsBF16(got, c.r0, rd16, q, hd, 0.125*expTileLog2e, true)
			queryPairsBF16(want, c.r0, rd16, q, hd, 0.125*expTileLog2e, false)
			if !slices.Equal(got, want) {
				t.Fatalf("hd %d, rows %d from %d: assembly and Go differ", hd, c.rows, c.r0)
			}
		}
	}
}

// roundBF16 rounds x to bf16 to nearest, ties to even, by integer
// arithmetic on its bits (a NaN is not treated specially): for tiles
// of any float32 values (bf16Pair).
func roundBF16(x float32) uint16 {
	b := math.Float32bits(x)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// bf16Pair is the dword of bf16 lo and hi, lo in the low half.
func bf16Pair(lo, hi float32) uint32 { return uint32(roundBF16(lo)) | uint32(roundBF16(hi))<<16 }
