package cpu

import (
	"math"

	"rill/engine/quant"
)

// The operations of an encoder (BERT and its kin), which a decoder's
// forward pass does not use: LayerNorm with a bias, GELU without a gate,
// tanh, and bidirectional attention over a batch's own rows with no KV
// cache.

// LayerNorm normalises each row of len(weight) values of x to zero mean
// and unit variance, then scales and shifts it:
// dst = (x-mean)/sqrt(var+eps)*weight + bias, as ggml_norm followed by
// the weight and bias computes it (the variance is the mean of the
// centred squares). bias may be nil; dst may be x.
func (b *Backend) LayerNorm(dst, x, weight, bias []float32, eps float32) {
	LayerNorm(dst, x, weight, bias, eps)
}

// LayerNorm is (*Backend).LayerNorm on the calling goroutine.
func LayerNorm(dst, x, weight, bias []float32, eps float32) {
	sameLen("LayerNorm", len(dst), len(x))
	n := len(weight)
	if n == 0 || len(x)%n != 0 || bias != nil && len(bias) != n {
		panic("cpu: LayerNorm: rows do not match the weight")
	}
	for r := 0; r < len(x); r += n {
		xr, yr := x[r:r+n], dst[r:r+n]
		var sum float64
		for _, v := range xr {
			sum += float64(v)
		}
		mean := float32(sum / float64(n))
		var sq float64
		for i, v := range xr {
			c := v - mean
			yr[i] = c
			sq += float64(c) * float64(c)
		}
		scale := float32(1 / math.Sqrt(float64(float32(sq/float64(n))+eps)))
		for i := range yr {
			yr[i] = yr[i] * scale * weight[i]
		}
		if bias != nil {
			for i := range yr {
				yr[i] += bias[i]
			}
		}
	}
}

// GELU sets dst = gelu(x) elementwise with llama.cpp's table GELU, the
// tanh approximation GeGLU uses (ggml_gelu on the CPU); dst may be x.
func (b *Backend) GELU(dst, x []float32) { GELU(dst, x) }

// GELU is (*Backend).GELU on the calling goroutine.
func GELU(dst, x []float32) {
	sameLen("GELU", len(dst), len(x))
	table := geluTable()
	for i, v := range x {
		switch {
		case v <= -geluLimit:
			dst[i] = 0
		case v >= geluLimit:
			dst[i] = v
		default:
			dst[i] = table[quant.F32ToF16(v)]
		}
	}
}

// Tanh sets dst = tanh(x) elementwise (a reranker's classification head);
// dst may be x.
func (b *Backend) Tanh(dst, x []float32) {
	sameLen("Tanh", len(dst), len(x))
	for i, v := range x {
		dst[i] = float32(math.Tanh(float64(v)))
	}
}

// EncoderAttention computes bidirectional attention within each sequence
// of a batch: sequence s is rows seqStart[s] to seqStart[s+1] of q, k and
// v (len(seqStart) is the number of sequences plus one, its last value
// the row count T), and each of its rows attends to every row of its
// sequence, none of another. q and out hold T rows of heads*headDim
// values, k and v T rows of headsKV*headDim (query head h reads key and
// value head h/(heads/headsKV)). Scores are q·k*scale, softmaxed in
// float64; out must not overlap q, k or v.
func (b *Backend) EncoderAttention(out, q, k, v []float32, seqStart []int32, heads, headsKV, headDim int, scale float32) {
	if len(seqStart) < 1 || heads%headsKV != 0 {
		panic("cpu: EncoderAttention: bad shape")
	}
	T := int(seqStart[len(seqStart)-1])
	qw, kw := heads*headDim, headsKV*headDim
	if len(q) != T*qw || len(out) != T*qw || len(k) != T*kw || len(v) != T*kw {
		panic("cpu: EncoderAttention: lengths do not match the shape")
	}
	// One job per (row, head): rows of a sequence are independent.
	group := heads / headsKV
	seqOf := make([]int32, T)
	for s := 0; s+1 < len(seqStart); s++ {
		for t := seqStart[s]; t < seqStart[s+1]; t++ {
			seqOf[t] = int32(s)
		}
	}
	b.ParallelGrain(T*heads, heads, func(lo, hi int) {
		var scores []float64
		acc := make([]float64, headDim)
		for j := lo; j < hi; j++ {
			t, h := j/heads, j%heads
			s := seqOf[t]
			first, last := int(seqStart[s]), int(seqStart[s+1])
			if cap(scores) < last-first {
				scores = make([]float64, last-first)
			}
			sc := scores[:last-first]
			qh := q[t*qw+h*headDim : t*qw+(h+1)*headDim]
			kh := (h / group) * headDim
			mx := math.Inf(-1)
			for u := first; u < last; u++ {
				d := DotF32(qh, k[u*kw+kh:u*kw+kh+headDim]) * scale
				sc[u-first] = float64(d)
				mx = max(mx, float64(d))
			}
			var sum float64
			for i, d := range sc {
				e := math.Exp(d - mx)
				sc[i] = e
				sum += e
			}
			o := out[t*qw+h*headDim : t*qw+(h+1)*headDim]
			clear(acc)
			for u := first; u < last; u++ {
				w := sc[u-first] / sum
				vh := v[u*kw+kh : u*kw+kh+headDim]
				for i, x := range vh {
					acc[i] += w * float64(x)
				}
			}
			for i := range o {
				o[i] = float32(acc[i])
			}
		}
	})
}
