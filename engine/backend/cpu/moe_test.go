package cpu

import (
	"math"
	"slices"
	"testing"

	"rill/engine/tensor"
)

// TestRoute: experts are chosen in descending order (ties to the lower
// index) and weighed as each gating says: softmax probabilities, chosen
// logits softmaxed, renormalised to sum 1 (with llama.cpp's clamp of the
// sum), scaled.
func TestRoute(t *testing.T) {
	t.Parallel()
	logits := []float32{1, 3, -2, 3, 0.5, 2}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	p := func(v float64) float64 { return math.Exp(v) / sum }
	for _, c := range []struct {
		name   string
		logits []float32
		r      tensor.Routing
		ids    []int32
		w      []float64
	}{
		{"softmax top 3", logits, tensor.Routing{Experts: 6, Used: 3}, []int32{1, 3, 5}, []float64{p(3), p(3), p(2)}},
		{"softmax top 1", logits, tensor.Routing{Experts: 6, Used: 1}, []int32{1}, []float64{p(3)}},
		{"all experts", logits, tensor.Routing{Experts: 6, Used: 6}, []int32{1, 3, 5, 0, 4, 2}, []float64{p(3), p(3), p(2), p(1), p(0.5), p(-2)}},
		{"normalised", logits, tensor.Routing{Experts: 6, Used: 2, Norm: true}, []int32{1, 3}, []float64{0.5, 0.5}},
		{"normalised and scaled", logits, tensor.Routing{Experts: 6, Used: 3, Norm: true, Scale: 2.5},
			[]int32{1, 3, 5}, []float64{2.5 * p(3) / (2*p(3) + p(2)), 2.5 * p(3) / (2*p(3) + p(2)), 2.5 * p(2) / (2*p(3) + p(2))}},
		{"softmax of the chosen", logits, tensor.Routing{Experts: 6, Used: 2, Gating: tensor.GatingSoftmaxChosen}, []int32{1, 3}, []float64{0.5, 0.5}},
		{"softmax of the chosen, three", []float32{0, 2, 1, -1}, tensor.Routing{Experts: 4, Used: 3, Gating: tensor.GatingSoftmaxChosen}, []int32{1, 2, 0},
			[]float64{math.Exp(2) / (math.Exp(2) + math.E + 1), math.E / (math.Exp(2) + math.E + 1), 1 / (math.Exp(2) + math.E + 1)}},
		// Two tiny probabilities: their sum is clamped at 2^-14, so the
		// weights stay tiny rather than becoming 1/2 each.
		{"clamped sum", []float32{0, 0, 100}, tensor.Routing{Experts: 3, Used: 3, Norm: true}, []int32{2, 0, 1},
			[]float64{1, math.Exp(-100) / minWeightSum, math.Exp(-100) / minWeightSum}},
		{"two tokens", []float32{0, 1, 5, 4}, tensor.Routing{Experts: 2, Used: 1, Norm: true}, []int32{1, 0}, []float64{1, 1}},
	} {
		be := New(Options{Threads: 1})
		ids := make([]int32, len(c.ids))
		w := make([]float32, len(c.ids))
		be.Route(ids, w, slices.Clone(c.logits), c.r)
		be.Close()
		if !slices.Equal(ids, c.ids) {
			t.Errorf("%s: ids %v, want %v", c.name, ids, c.ids)
			continue
		}
		for j := range w {
			if d := math.Abs(float64(w[j]) - c.w[j]); d > 1e-6*math.Abs(c.w[j])+1e-30 {
				t.Errorf("%s: weight %d = %g, want %g", c.name, j, w[j], c.w[j])
			}
		}
	}
}

// TestCombine: each token's row is the weighted sum of its experts' rows,
// products rounded and added in order, and rows may be shared or skipped.
func TestCombine(t *testing.T) {
	t.Parallel()
	src := []float32{
		1, 2, // row 0
		10, 20, // row 1
		100, 200, // row 2
		1e8, 3, // row 3
	}
	for _, c := range []struct {
		name string
		rows []int32
		w    []float32
		k    int
		want []float32
	}{
		{"one expert", []int32{2}, []float32{0.5}, 1, []float32{50, 100}},
		{"two tokens of two", []int32{0, 1, 2, 0}, []float32{1, 0.5, 0.25, 2}, 2, []float32{6, 12, 27, 54}},
		// Added in order: 1e8 + 1 rounds away the 1 before -1e8 comes.
		{"order of the sum", []int32{3, 0, 3}, []float32{1, 1, -1}, 3, []float32{0, 2}},
		{"order of the sum, other way", []int32{3, 3, 0}, []float32{1, -1, 1}, 3, []float32{1, 2}},
	} {
		be := New(Options{Threads: 1})
		dst := make([]float32, len(c.want))
		be.Combine(dst, src, c.rows, c.w, c.k)
		be.Close()
		if !slices.Equal(dst, c.want) {
			t.Errorf("%s: %v, want %v", c.name, dst, c.want)
		}
	}
}

// TestSigmoid: the logistic function, in place too.
func TestSigmoid(t *testing.T) {
	t.Parallel()
	x := []float32{0, 2, -2, 50, -200}
	be := New(Options{Threads: 1})
	defer be.Close()
	be.Sigmoid(x, x)
	for i, want := range []float64{0.5, 1 / (1 + math.Exp(-2)), 1 / (1 + math.Exp(2)), 1, 0} {
		if d := math.Abs(float64(x[i]) - want); d > 1e-7 {
			t.Errorf("sigmoid %d = %g, want %g", i, x[i], want)
		}
	}
}
