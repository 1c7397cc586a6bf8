package model_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// TestPool checks each pooling against a direct computation from the
// forward's hidden states: in a causal model the final-normed state of a
// sequence's token k is the last state of its prefix of k+1 tokens, so
// every pooling of the whole sequence is a function of the prefixes' last
// states, each computed by a pass of its own.
func TestPool(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	const bs, n = 16, 11
	m := fromSpec(t, testmodel.Qwen3Embedding(quant.F32))
	if m.Config.Pooling != model.PoolLast {
		t.Fatalf("pooling_type read as %s, want last", m.Config.Pooling)
	}
	E := m.Config.Embd
	run := model.NewRunner(m, be, 2*n)
	prompts := [][]int32{make([]int32, n), make([]int32, n-4)}
	for s, p := range prompts {
		for i := range p {
			p[i] = int32(3 + (i*7+s*13)%(m.Config.VocabSize-3))
		}
	}
	newKV := func() *model.KV {
		kv, err := model.NewKV(&m.Config, model.KVF16, 4, bs)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	// batch puts each prompt in a sequence of its own, in blocks 2s, 2s+1.
	batch := func(ps ...[]int32) *model.Batch {
		b := &model.Batch{}
		for s, p := range ps {
			b.Tables = append(b.Tables, []int32{int32(2 * s), int32(2*s + 1)})
			for i, tok := range p {
				b.Tokens, b.Pos, b.Seq = append(b.Tokens, tok), append(b.Pos, int32(i)), append(b.Seq, int32(s))
			}
		}
		return b
	}
	// states[s][k] is the last state of prompt s's first k+1 tokens.
	states := make([][][]float32, len(prompts))
	for s, p := range prompts {
		for k := range p {
			v, err := run.Pool(batch(p[:k+1]), newKV(), model.PoolLast)
			if err != nil {
				t.Fatal(err)
			}
			states[s] = append(states[s], slices.Clone(v))
		}
	}
	mean := func(vs [][]float32) []float32 {
		out := make([]float32, E)
		for _, v := range vs {
			for j := range out {
				out[j] += v[j] / float32(len(vs))
			}
		}
		return out
	}
	for _, c := range []struct {
		how  model.Pooling
		want func(s int) []float32
	}{
		{model.PoolLast, func(s int) []float32 { return states[s][len(states[s])-1] }},
		{model.PoolCLS, func(s int) []float32 { return states[s][0] }},
		{model.PoolMean, func(s int) []float32 { return mean(states[s]) }},
	} {
		t.Run(c.how.String(), func(t *testing.T) {
			got, err := run.Pool(batch(prompts...), newKV(), c.how)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(prompts)*E {
				t.Fatalf("got %d floats, want %d", len(got), len(prompts)*E)
			}
			for s := range prompts {
				if d := maxDiff(got[s*E:(s+1)*E], c.want(s)); d > 1e-5 {
					t.Errorf("sequence %d: %s pooling is %g away from the direct computation", s, c.how, d)
				}
			}
		})
	}
	t.Run("rank refused", func(t *testing.T) {
		_, err := run.Pool(batch(prompts[0]), newKV(), model.PoolRank)
		if err == nil || !strings.Contains(err.Error(), "rank") {
			t.Errorf("rank pooling: err = %v, want a refusal naming it", err)
		}
	})
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
