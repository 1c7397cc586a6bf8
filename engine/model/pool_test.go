package model_test

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
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

// TestPoolRank checks rank pooling of a decoder reranker against a direct
// computation: each sequence's last state (PoolLast of the sequence alone)
// times the file's cls.output rows, through a softmax (qwen3). Two
// sequences share one batch, so each must get its own last token.
func TestPoolRank(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m := fromSpec(t, testmodel.Qwen3Reranker(quant.F32))
	if m.Config.Pooling != model.PoolRank || m.ClassOut() != 2 || m.PoolWidth(model.PoolRank) != 2 {
		t.Fatalf("pooling %s, %d class outputs, width %d: want rank, 2, 2", m.Config.Pooling, m.ClassOut(), m.PoolWidth(model.PoolRank))
	}
	tw, ok := m.File.Tensor("cls.output.weight")
	if !ok {
		t.Fatal("no cls.output.weight")
	}
	E := m.Config.Embd
	head := make([]float32, 2*E)
	for i := range head {
		head[i] = math.Float32frombits(binary.LittleEndian.Uint32(tw.Data[4*i:]))
	}
	prompts := [][]int32{{5, 80, 81, 200, 7, 9, 300}, {40, 41, 42}}
	run := model.NewRunner(m, be, 16)
	newKV := func() *model.KV {
		kv, err := model.NewKV(&m.Config, model.KVF16, 4, 16)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	b := &model.Batch{}
	for s, p := range prompts {
		b.Tables = append(b.Tables, []int32{int32(s)})
		for i, tok := range p {
			b.Tokens, b.Pos, b.Seq = append(b.Tokens, tok), append(b.Pos, int32(i)), append(b.Seq, int32(s))
		}
	}
	got, err := run.Pool(b, newKV(), model.PoolRank)
	if err != nil {
		t.Fatal(err)
	}
	got = slices.Clone(got)
	if len(got) != 2*len(prompts) {
		t.Fatalf("%d values, want %d", len(got), 2*len(prompts))
	}
	for s, p := range prompts {
		one := &model.Batch{Tables: [][]int32{{0}}}
		for i, tok := range p {
			one.Tokens, one.Pos, one.Seq = append(one.Tokens, tok), append(one.Pos, int32(i)), append(one.Seq, 0)
		}
		last, err := run.Pool(one, newKV(), model.PoolLast)
		if err != nil {
			t.Fatal(err)
		}
		var z [2]float64
		for k := range z {
			for j := range E {
				z[k] += float64(head[k*E+j]) * float64(last[j])
			}
		}
		pYes := 1 / (1 + math.Exp(z[1]-z[0]))
		want := []float64{pYes, 1 - pYes}
		for k := range want {
			if d := math.Abs(float64(got[2*s+k]) - want[k]); d > 1e-5 {
				t.Errorf("sequence %d output %d: %g, want %g", s, k, got[2*s+k], want[k])
			}
		}
	}
}

// TestPoolRankRefused checks that rank pooling needs a classification
// head: a model without one refuses it, and a rank file without
// cls.output does not load.
func TestPoolRankRefused(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m := fromSpec(t, testmodel.Qwen3Embedding(quant.F32))
	kv, err := model.NewKV(&m.Config, model.KVF16, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	b := &model.Batch{Tokens: []int32{5, 6}, Pos: []int32{0, 1}, Seq: []int32{0, 0}, Tables: [][]int32{{0}}}
	if _, err := model.NewRunner(m, be, 4).Pool(b, kv, model.PoolRank); err == nil || !strings.Contains(err.Error(), "classification head") {
		t.Errorf("rank pooling without a head: %v, want a refusal naming the classification head", err)
	}
	s := testmodel.Qwen3(quant.F32)
	s.Pooling = 4
	data, err := testmodel.Bytes(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := model.Load(f); err == nil || !strings.Contains(err.Error(), "cls.output.weight") {
		t.Errorf("rank file without cls.output loaded: %v", err)
	}
}
