package cpu

import (
	"fmt"
	"math"

	"rill/engine/quant"
	"rill/engine/tensor"
)

// Attention over a Q8_0 or Q4_0 cache (tensor.KVSpec.Quantized): every
// slot's row of keys and of values is HeadDim/32 GGML blocks, quantised by
// StoreKV with engine/quant's reference quantisers.
//
// The arithmetic follows llama.cpp's CPU flash attention over such a cache
// (which takes its per-position path for prompts and decode steps alike):
// each query head is quantised to Q8_0 (K's vec_dot_type) and dotted with
// the key blocks in integers, by MatMul's row kernels for Q8_0 and Q4_0
// weights (the AVX-512 VNNI or AVX2 kernels where the machine has them);
// values are dequantised to float32 and summed in float32. Prompts and
// decode steps alike take this path: a tile of values is dequantised once
// per KV head and block and used by every query head of the group.
//
// Where llama.cpp updates its running maximum position by position, this
// kernel does so once per block of the cache: the block's scores are
// computed, the accumulator is rescaled once if the block holds a new
// maximum, and the block's weights exp(s-M) are computed in one vector
// call. The two orders agree up to float32 rounding (the same softmax, the
// same products), which the tests bound; they are not bit-identical.

// quantScratch is the working memory of one quantised attention job,
// grown to the largest job seen and kept (attnScratches' reasoning).
type quantScratch struct {
	xq  []byte    // [head][xRowBytes] the group's queries, converted
	acc []float32 // [head][HeadDim] value accumulators
	v   []float32 // [slot][HeadDim] one block's values, dequantised
	sc  []float32 // [head][quantChunk] one chunk's scores, then weights
	m   []float32 // [head] running maximum
	s   []float32 // [head] running sum
}

// quantChunk is how many positions attendQuant scores before it updates
// the softmax: the running maximum, the rescaling of the accumulators and
// the exponentials are paid once per chunk and head, not per block.
const quantChunk = 128

var quantScratches freeList[quantScratch]

// grow returns s resized to n, reusing its memory when it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// storeQuantKV is StoreKV into a Q8_0 or Q4_0 cache: each head's row of
// keys and of values is quantised into its slot's blocks.
func storeQuantKV(host *tensor.HostKV, layer int, k, v []float32, pg tensor.Paging) {
	s := host.Spec()
	l := s.Layout
	hd, dim, rb := l.HeadDim, l.Heads*l.HeadDim, s.RowBytes()
	for t := range pg.Pos {
		block, slot := pg.Slot(t, l.BlockSize)
		for h := range l.Heads {
			row := host.QOffset(l.Row(block, h, slot))
			kh, vh := k[t*dim+h*hd:][:hd], v[t*dim+h*hd:][:hd]
			// The shapes were checked when the cache was made: HeadDim is
			// whole blocks, and a row holds exactly them.
			if err := quant.Quantize(s.Type, host.KQ[layer][row:row+rb], kh); err != nil {
				panic("cpu: " + err.Error())
			}
			if err := quant.Quantize(s.Type, host.VQ[layer][row:row+rb], vh); err != nil {
				panic("cpu: " + err.Error())
			}
		}
	}
}

// attendQuant is one job of attention over a quantised cache: the query
// heads of KV heads g to g+nkv-1 of one token (q, out: nkv groups of
// At.Heads/Heads heads of HeadDim values), over the positions start..n-1
// the window leaves, with the soft cap and sinks of j.at.
//
// The positions go by chunks of whole cache blocks (about quantChunk
// positions): the scores of every query head of the group come first, four
// heads per pass over a block's keys where the row kernels have dots4;
// then each head's softmax update; then the values, each block's read once
// for all heads (vaccQuant where the machine has it).
func (j *attnJob) attendQuant(out, q []float32, g, nkv int, table []int32, n int) error {
	spec := j.kv.Spec()
	l := spec.Layout
	start := windowStart(j.at, n)
	if err := checkTable(l, table, n); err != nil {
		return err
	}
	kr := &j.kern.rows[spec.Type]
	hd, rb, bs := l.HeadDim, spec.RowBytes(), l.BlockSize
	group := j.at.Heads / l.Heads
	xb := kr.xRowBytes(hd)
	scale := cappedScale(j.at.Scale, j.at.SoftCap)
	cb := max(1, quantChunk/bs) // blocks per chunk
	cw := cb * bs               // a head's stride in sc
	vacc := quantValueKernel(spec.Type, hd)
	// Without a soft cap the scores are the dots times a positive scale,
	// applied with the subtraction of the maximum in one pass.
	fast := j.at.SoftCap == 0 && scale > 0

	sc := quantScratches.get()
	defer quantScratches.put(sc)
	sc.xq = grow(sc.xq, group*xb)
	sc.acc = grow(sc.acc, group*hd)
	if vacc == nil {
		sc.v = grow(sc.v, bs*hd)
	}
	sc.sc = grow(sc.sc, group*cw)
	sc.m, sc.s = grow(sc.m, group), grow(sc.s, group)

	keys, vals := j.kv.KQ[j.layer], j.kv.VQ[j.layer]
	for kh := g; kh < g+nkv; kh++ {
		base := (kh - g) * group * hd
		qh, oh := q[base:base+group*hd], out[base:base+group*hd]
		for i := range group {
			kr.convert(sc.xq[i*xb:(i+1)*xb], qh[i*hd:(i+1)*hd])
		}
		clear(sc.acc)
		for i := range group {
			sc.m[i], sc.s[i] = float32(math.Inf(-1)), 0
		}
		for b0 := start / bs; b0*bs < n; b0 += cb {
			b1 := min(b0+cb, (n+bs-1)/bs)
			// The chunk's positions are c0..c1-1; position p's score for
			// head i is sc[i*cw + p-c0].
			c0, c1 := max(start, b0*bs), min(n, b1*bs)
			for b := b0; b < b1; b++ {
				lo, hi := max(start-b*bs, 0), min(n-b*bs, bs)
				off := j.kv.QOffset(l.Row(int(table[b]), kh, lo))
				quantScores(kr, sc.sc[b*bs+lo-c0:], cw, keys[off:], rb, hi-lo, sc.xq, xb, hd, group)
			}
			w := c1 - c0
			for i := range group {
				s := sc.sc[i*cw : i*cw+w]
				var bm float32
				if fast {
					// Scaling is monotonic: the largest score is the
					// largest dot, scaled (and rounded) alike.
					bm = quantMax(s) * scale
				} else {
					bm = float32(math.Inf(-1))
					for r, x := range s {
						x *= scale
						if j.at.SoftCap != 0 {
							x = j.at.SoftCap * float32(math.Tanh(float64(x)))
						}
						s[r] = x
						bm = max(bm, x)
					}
				}
				acc := sc.acc[i*hd : (i+1)*hd]
				if m := sc.m[i]; bm > m {
					if !math.IsInf(float64(m), -1) {
						ms := expF64Generic(m - bm)
						Scale(acc, ms)
						sc.s[i] *= ms
					}
					sc.m[i] = bm
				}
				if fast {
					quantScaleSub(s, scale, sc.m[i])
				} else {
					quantScaleSub(s, 1, sc.m[i])
				}
				expF32s(s, useSIMD)
				sc.s[i] += quantSum(s)
			}
			for b := b0; b < b1; b++ {
				lo, hi := max(start-b*bs, 0), min(n-b*bs, bs)
				rows := hi - lo
				off := j.kv.QOffset(l.Row(int(table[b]), kh, lo))
				wt := sc.sc[b*bs+lo-c0:]
				if vacc != nil {
					vacc(sc.acc, vals[off:off+rows*rb], rb, rows, wt, cw, hd, group)
					continue
				}
				if err := quant.Dequantize(spec.Type, sc.v[:rows*hd], vals[off:off+rows*rb]); err != nil {
					return fmt.Errorf("attention: %w", err)
				}
				for i := range group {
					acc := sc.acc[i*hd : (i+1)*hd]
					for r := range rows {
						AXPY(acc, wt[i*cw+r], sc.v[r*hd:(r+1)*hd])
					}
				}
			}
		}
		for i := range group {
			acc := sc.acc[i*hd : (i+1)*hd]
			if j.at.Sinks != nil {
				foldSink(acc, &sc.m[i], &sc.s[i], j.at.Sinks[kh*group+i])
			}
			inv := 1 / sc.s[i]
			o := oh[i*hd : (i+1)*hd]
			for d, a := range acc {
				o[d] = a * inv
			}
		}
	}
	return nil
}

func quantMaxGeneric(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// quantScaleSubGeneric sets x[i] = x[i]*a - b, rounded once as the FMA
// of the vector kernel.
func quantScaleSubGeneric(x []float32, a, b float32) {
	for i, v := range x {
		x[i] = float32(math.FMA(float64(v), float64(a), -float64(b)))
	}
}

func quantSumGeneric(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}

// quantScores writes the scores of rows cached keys (rb bytes apart from
// k) with the group's converted queries (xb bytes apart in xq): head i's
// score for row r at out[i*stride + r]. Groups of four heads take one
// dots4 call, so each key block is unpacked once for the four.
func quantScores(kr *rowKernel, out []float32, stride int, k []byte, rb, rows int, xq []byte, xb, hd, group int) {
	i := 0
	if kr.dots4 != nil {
		for ; i+4 <= group; i += 4 {
			kr.dots4(hd, k, rb, rows, xq[i*xb:], xb, out[i*stride:], stride)
		}
	}
	for ; i < group; i++ {
		s, x := out[i*stride:i*stride+rows], xq[i*xb:(i+1)*xb]
		if kr.dots != nil {
			kr.dots(hd, k, rb, rows, x, s)
			continue
		}
		for r := range rows {
			s[r] = kr.dot(hd, k[r*rb:(r+1)*rb], x)
		}
	}
}
