package model

import (
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// TestMoERoutingSpreads: the test models' routers send a prompt's tokens
// to most experts, none taking the bulk, so that the oracles check every
// expert's slice and the grouping of rows by expert, not one expert.
func TestMoERoutingSpreads(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	for _, s := range []testmodel.Spec{testmodel.Qwen3MoE(quant.F32), testmodel.Qwen2MoE(quant.F32)} {
		data, err := testmodel.Bytes(s)
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		const T = 40
		r := NewRunner(m, be, T)
		kv, err := NewKV(&m.Config, KVF32, 3, 16)
		if err != nil {
			t.Fatal(err)
		}
		b := &Batch{Tables: [][]int32{{0, 1, 2}}}
		for i := range T {
			b.Tokens, b.Pos, b.Seq = append(b.Tokens, int32(3+i*11%300)), append(b.Pos, int32(i)), append(b.Seq, 0)
		}
		if _, err := r.Forward(b, kv); err != nil {
			t.Fatal(err)
		}
		// The scratch holds the last layer's routing.
		c := &m.Config
		count := make([]int, c.Experts)
		for _, e := range r.moe.ids[:T*c.ExpertsUsed] {
			count[e]++
		}
		used, most := 0, 0
		for _, n := range count {
			if n > 0 {
				used++
			}
			most = max(most, n)
		}
		if used < c.Experts*3/4 || most > T*c.ExpertsUsed/3 {
			t.Errorf("%s: %d tokens went to %d of %d experts, the busiest %d times: %v", s.Name, T, used, c.Experts, most, count)
		}
	}
}
