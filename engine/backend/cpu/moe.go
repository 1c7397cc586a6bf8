package cpu

import (
	"fmt"
	"math"

	"rill/engine/tensor"
)

// The mixture-of-experts operations of engine/model's Backend: routing,
// the weighted mix of expert outputs, and the sigmoid of Qwen2-MoE's
// shared-expert gate. Their work is a few values per token next to the
// experts' matrix products, so they run on the calling goroutine.

// minWeightSum is the least sum Route divides normalised weights by: the
// smallest normal half float, where llama.cpp clamps it.
const minWeightSum = 6.103515625e-5

// Route chooses each token's r.Used experts (see the Backend interface).
// Under GatingSoftmax the logits become probabilities in place (the
// maximum subtracted, e^x rounded to float32, the sum in float64, then
// scaled by its float32 reciprocal, as ggml_soft_max computes). Experts of
// equal preference go in index order. It panics on inconsistent lengths.
func (b *Backend) Route(ids []int32, weights []float32, logits []float32, r tensor.Routing) {
	n, k := r.Experts, r.Used
	if n <= 0 || k <= 0 || k > n || len(logits)%n != 0 || len(ids) != len(logits)/n*k || len(weights) != len(ids) {
		panic(fmt.Sprintf("cpu: Route: %d logits of %d experts into %d ids and %d weights of %d each", len(logits), n, len(ids), len(weights), k))
	}
	for t := range len(logits) / n {
		row := logits[t*n : (t+1)*n]
		if r.Gating == tensor.GatingSoftmax {
			softmax(row)
		}
		id, w := ids[t*k:(t+1)*k], weights[t*k:(t+1)*k]
		topK(id, row)
		for j, e := range id {
			w[j] = row[e]
		}
		if r.Gating == tensor.GatingSoftmaxChosen {
			softmax(w)
		}
		if r.Norm {
			var sum float64
			for _, v := range w {
				sum += float64(v)
			}
			s := max(float32(sum), minWeightSum)
			for j := range w {
				w[j] /= s
			}
		}
		if r.Scale != 0 && r.Scale != 1 {
			for j := range w {
				w[j] *= r.Scale
			}
		}
	}
}

// softmax replaces x by its softmax, as ggml_soft_max computes it.
func softmax(x []float32) {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var sum float64
	for i, v := range x {
		e := expF64Generic(v - m)
		x[i] = e
		sum += float64(e)
	}
	s := float32(1 / sum)
	for i := range x {
		x[i] *= s
	}
}

// topK writes to ids the indices of the len(ids) largest values of x, in
// descending order of value, ties to the lower index. It keeps ids sorted
// as it scans x, so it costs len(x) comparisons and few moves for the
// small k of routers.
func topK(ids []int32, x []float32) {
	k, filled := len(ids), 0
	for i, v := range x {
		if filled == k && v <= x[ids[k-1]] {
			continue
		}
		j := min(filled, k-1)
		for j > 0 && v > x[ids[j-1]] {
			ids[j] = ids[j-1]
			j--
		}
		ids[j] = int32(i)
		if filled < k {
			filled++
		}
	}
}

// Combine mixes expert outputs (see the Backend interface). Each product
// is rounded before it is added (an explicit conversion keeps Go from
// fusing them), as ggml multiplies and then adds. It panics on
// inconsistent lengths.
func (b *Backend) Combine(dst, src []float32, rows []int32, weights []float32, k int) {
	if k <= 0 || len(rows)%k != 0 || len(weights) != len(rows) || len(rows) == 0 || len(dst)%(len(rows)/k) != 0 {
		panic(fmt.Sprintf("cpu: Combine: %d values for %d rows of %d experts", len(dst), len(rows), k))
	}
	T := len(rows) / k
	width := len(dst) / T
	for t := range T {
		d := dst[t*width : (t+1)*width]
		for j := range k {
			r, w := int(rows[t*k+j]), weights[t*k+j]
			s := src[r*width : (r+1)*width]
			if j == 0 {
				for i := range d {
					d[i] = w * s[i]
				}
				continue
			}
			for i := range d {
				d[i] += float32(w * s[i])
			}
		}
	}
}

// Sigmoid sets dst = 1/(1+e^-x) elementwise, in float64 rounded once.
func (b *Backend) Sigmoid(dst, x []float32) {
	sameLen("Sigmoid", len(dst), len(x))
	for i, v := range x {
		dst[i] = float32(1 / (1 + math.Exp(-float64(v))))
	}
}
