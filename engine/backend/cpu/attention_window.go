package cpu

import (
	"fmt"
	"math"

	"rill/engine/tensor"
)

// Attention variants for sliding-window layers and soft-capped scores
// (Gemma 2 and 3, Mistral-style windows). They are AttendF16 and AttendF32
// with two changes, each exactly as llama.cpp's CPU flash attention makes
// it:
//
//   - the query attends to positions start..n-1 only. llama.cpp masks the
//     positions before the window and skips masked positions, so its
//     online softmax starts at the first one inside; starting the loop
//     there is the same arithmetic.
//   - with softCap > 0, scores are computed with scale/softCap (rounded to
//     float32, as ggml divides its scale) and then capped:
//     s = softCap * tanh(s), tanh rounded to float32, before the softmax.
//   - with sinks (gpt-oss's attention sinks), each query head's sink
//     logit joins the softmax's denominator after the positions, as one
//     more step of the online softmax without a value (foldSink).
//
// Contracts are those of AttendF16 and AttendF32; 0 <= start < n; sinks
// is nil or holds one logit per query head of q, in q's order.

// AttendF16Window is AttendF16 over positions start..n-1 with optional
// soft-capping of the scores and attention sinks.
func AttendF16Window(out, q []float32, k, v []uint16, l tensor.KVLayout, head, kvHeads int, table []int32, start, n int, scale, softCap float32, sinks []float32) error {
	group, err := checkAttn(len(out), len(q), len(k), len(v), l, head, kvHeads, table, n)
	if err != nil {
		return err
	}
	if err := checkWindow(start, n, softCap, sinks, len(q)/l.HeadDim); err != nil {
		return err
	}
	attendF16Window(out, q, k, v, l, head, group, table, start, n, scale, softCap, sinks, useSIMD)
	return nil
}

// AttendF32Window is AttendF32 over positions start..n-1 with optional
// soft-capping of the scores and attention sinks.
func AttendF32Window(out, q []float32, k, v []float32, l tensor.KVLayout, head, kvHeads int, table []int32, start, n int, scale, softCap float32, sinks []float32) error {
	group, err := checkAttn(len(out), len(q), len(k), len(v), l, head, kvHeads, table, n)
	if err != nil {
		return err
	}
	if err := checkWindow(start, n, softCap, sinks, len(q)/l.HeadDim); err != nil {
		return err
	}
	attendF32Window(out, q, k, v, l, head, group, table, start, n, scale, softCap, sinks, useSIMD)
	return nil
}

func checkWindow(start, n int, softCap float32, sinks []float32, heads int) error {
	switch {
	case start < 0 || start >= n:
		return fmt.Errorf("attention: window starts at position %d of %d", start, n)
	case softCap < 0 || softCap != softCap:
		return fmt.Errorf("attention: soft cap %g", softCap)
	case sinks != nil && len(sinks) != heads:
		return fmt.Errorf("attention: %d sinks for %d query heads", len(sinks), heads)
	}
	return nil
}

// foldSink adds a sink logit to the softmax of one query head whose
// running maximum is *m, sum *s and value accumulator acc, as llama.cpp's
// flash attention does after the last position: the sink is a position
// whose value is zero, so a larger maximum rescales acc and the sum, and
// the sink's weight joins the sum. expf is float32(e^x), correctly
// rounded but for a vanishing fraction of arguments.
func foldSink(acc []float32, m, s *float32, sink float32) {
	if sink > *m {
		ms := float32(math.Exp(float64(*m - sink)))
		for d := range acc {
			acc[d] *= ms
		}
		*m, *s = sink, float32(*s*ms)+1
		return
	}
	*s += float32(math.Exp(float64(sink - *m)))
}

// capScores applies the soft cap to scores already scaled by
// scale/softCap.
func capScores(s []float32, softCap float32) {
	for i, x := range s {
		s[i] = softCap * float32(math.Tanh(float64(x)))
	}
}

// cappedScale is the factor the scores are computed with.
func cappedScale(scale, softCap float32) float32 {
	if softCap != 0 {
		return scale / softCap
	}
	return scale
}

// attendF16Window is attendF16 from position start on, with soft-capping.
func attendF16Window(out, q []float32, k, v []uint16, l tensor.KVLayout, head, group int, table []int32, start, n int, scale, softCap float32, sinks []float32, simd bool) {
	sc := attnScratches.get()
	defer attnScratches.put(sc)
	hd, rd := l.HeadDim, l.RowDim()
	heads := len(q) / hd
	gs := min(heads, attnMaxGroup, attnQDim/rd)
	tile := min(attnTile, l.BlockSize, attnKDim/rd)
	scale = cappedScale(scale, softCap)
	for h0 := 0; h0 < heads; h0 += gs {
		gn := min(gs, heads-h0)
		var sk []float32
		if sinks != nil {
			sk = sinks[h0 : h0+gn]
		}
		attendF16WindowPass(sc, out[h0*hd:(h0+gn)*hd], q[h0*hd:(h0+gn)*hd], k, v, l, head, group, h0, gn, tile, table, start, n, scale, softCap, sk, simd)
	}
}

// attendF16WindowPass is attendF16Pass over positions start..n-1, with the
// scores of each tile capped before the softmax bookkeeping and the sinks
// (of the pass's gn heads, or nil) folded in at the end.
func attendF16WindowPass(sc *attnScratch, out, q []float32, k, v []uint16, l tensor.KVLayout, head, group, h0, gn, tile int, table []int32, start, n int, scale, softCap float32, sinks []float32, simd bool) {
	hd, rd := l.HeadDim, l.RowDim()
	nb := (gn + 7) / 8
	qd, acc := sc.qd[:gn*rd], sc.acc[:gn*rd]
	for i := range gn {
		roundQuery(qd[i*rd:(i+1)*rd], q[i*hd:(i+1)*hd], simd)
	}
	clear(acc)
	clear(sc.sc[:nb*tile*8])
	m, s := sc.m[:nb*8], sc.s[:nb*8]
	for i := range m {
		m[i], s[i] = float32(math.Inf(-1)), 0
	}
	kv0, kv1 := head+h0/group, head+(h0+gn-1)/group
	headStride := l.BlockSize * rd
	voff := sc.voff[:gn]
	for i := range gn {
		voff[i] = 2 * headStride * (head + (h0+i)/group - kv0)
	}
	for p0 := start; p0 < n; {
		slot := p0 % l.BlockSize
		cnt := min(tile, l.BlockSize-slot, n-p0)
		row := l.Row(int(table[p0/l.BlockSize]), kv0, slot)
		kd := sc.kd[:cnt*rd]
		for i := 0; i < gn; {
			kvh := head + (h0+i)/group
			j := min(gn, (kvh-head+1)*group-h0)
			kr := row + (kvh-kv0)*headStride
			halfToF64(kd, k[kr:kr+cnt*rd], simd)
			for ; i < j; i++ {
				o := (i/8*tile)*8 + i%8
				scores(sc.sc[o:o+8*(cnt-1)+1], qd[i*rd:(i+1)*rd], kd, cnt, rd, scale, simd)
			}
		}
		if softCap != 0 {
			for b := range nb {
				capScores(sc.sc[b*tile*8:(b*tile+cnt)*8], softCap)
			}
		}
		flags, w := sc.flags[:cnt], sc.w[:cnt*16*nb]
		clear(flags)
		for b := range nb {
			lanes := uint(1)<<min(8, gn-8*b) - 1
			weights(sc.sc[b*tile*8:(b*tile+cnt)*8], w[16*b:], flags, m[8*b:8*b+8], s[8*b:8*b+8], cnt, 16*nb, lanes, simd)
		}
		values(acc, v[row:row+(kv1-kv0)*headStride+cnt*rd], w, flags, voff, cnt, rd, gn, simd)
		p0 += cnt
	}
	for i, sink := range sinks {
		foldSink(acc[i*rd:i*rd+hd], &m[i], &s[i], sink)
	}
	for i := range gn {
		inv := 1 / s[i]
		o, a := out[i*hd:(i+1)*hd], acc[i*rd:i*rd+hd]
		for d := range o {
			o[d] = a[d] * inv
		}
	}
}

// attendF32Window implements AttendF32Window (and, from 0 without a cap,
// AttendF32), one query head at a time.
func attendF32Window(out, q []float32, k, v []float32, l tensor.KVLayout, head, group int, table []int32, start, n int, scale, softCap float32, sinks []float32, simd bool) {
	hd, rd := l.HeadDim, l.RowDim()
	tile := min(attnTile, l.BlockSize)
	sc := attnScratches.get()
	defer attnScratches.put(sc)
	acc := sc.acc[:hd]
	vec := simd && hd >= simdMin
	scale = cappedScale(scale, softCap)
	for i := range len(q) / hd {
		kvh := head + i/group
		qi := q[i*hd : (i+1)*hd]
		runMax := float32(math.Inf(-1))
		var sum float32
		clear(acc)
		for p0 := start; p0 < n; {
			slot := p0 % l.BlockSize
			cnt := min(tile, l.BlockSize-slot, n-p0)
			row := l.Row(int(table[p0/l.BlockSize]), kvh, slot)
			s := sc.sc[:cnt]
			for p := range s {
				kp := k[row+p*rd:][:hd]
				if vec {
					s[p] = dotF32SIMD(qi, kp) * scale
				} else {
					s[p] = dotF32Generic(qi, kp) * scale
				}
			}
			if softCap != 0 {
				capScores(s, softCap)
			}
			tileMax := float32(math.Inf(-1))
			for _, x := range s {
				tileMax = max(tileMax, x)
			}
			if tileMax > runMax {
				c := sc.w[:1]
				c[0] = runMax - tileMax
				expF32s(c, simd)
				if vec {
					scaleSIMD(acc, c[0])
				} else {
					scaleGeneric(acc, c[0])
				}
				sum *= c[0]
				runMax = tileMax
			}
			for p := range s {
				s[p] -= runMax
			}
			expF32s(s, simd)
			for p, wt := range s {
				sum += wt
				vp := v[row+p*rd:][:hd]
				if vec {
					axpySIMD(acc, wt, vp)
				} else {
					axpyGeneric(acc, wt, vp)
				}
			}
			p0 += cnt
		}
		if sinks != nil {
			foldSink(acc, &runMax, &sum, sinks[i])
		}
		inv := 1 / sum
		o := out[i*hd : (i+1)*hd]
		for d := range o {
			o[d] = acc[d] * inv
		}
	}
}
