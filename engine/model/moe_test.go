package model_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// moeModels are the mixture-of-experts test models, by the file names
// their oracles (in familyOracles) were recorded on: qwen3moe (16
// experts, 4 used, weights renormalised, query and key norms) and qwen2moe
// (8 experts, 2 used, weights as routed, a gated shared expert, projection
// biases).
var moeModels = map[string]testmodel.Spec{
	"rill-tiny-qwen3moe-F32.gguf": testmodel.Qwen3MoE(quant.F32),
	"rill-tiny-qwen2moe-F32.gguf": testmodel.Qwen2MoE(quant.F32),
}

// TestMoEParams: the total counts every weight of the file, and the active
// count leaves out the experts a token does not use; a dense model's two
// counts are equal; so do their bytes (4 each in F32 files). The expected counts are the specs' shapes multiplied
// out.
func TestMoEParams(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec            testmodel.Spec
		layer, unused   int // per layer: every weight; the routed experts' weights a token does not use
		embd, qd, kvd   int
		headNorms, bias int
	}{
		{spec: testmodel.Target(quant.F32)},
		{spec: testmodel.Qwen3MoE(quant.F32)},
		{spec: testmodel.Qwen2MoE(quant.Q8_0)},
	} {
		s := c.spec
		hd := s.HeadDim
		if hd == 0 {
			hd = s.Embd / s.Heads
		}
		d, qd, kvd := s.Embd, s.Heads*hd, s.KV*hd
		layer := qd*d + 2*kvd*d + d*qd + 2*d // projections, two norms
		unused := 0
		switch s.Arch {
		case "":
			layer += 3 * s.FF * d
		case "qwen3moe":
			layer += 2*hd + s.Experts*d + s.Experts*3*s.ExpertFF*d
			unused = (s.Experts - s.ExpertsUsed) * 3 * s.ExpertFF * d
		case "qwen2moe":
			layer += qd + 2*kvd + s.Experts*d + s.Experts*3*s.ExpertFF*d + 3*s.SharedFF*d + d
			unused = (s.Experts - s.ExpertsUsed) * 3 * s.ExpertFF * d
		}
		total := int64(s.Layers*layer + 2*testmodel.VocabSize*d + d)
		active := total - int64(s.Layers*unused)
		m := fromSpec(t, s)
		if gt, ga := m.Params(); gt != total || ga != active {
			t.Errorf("%s: Params() = %d, %d; want %d, %d", s.Name, gt, ga, total, active)
		}
		if gt, ga := m.WeightBytes(); s.Type == quant.F32 && (gt != 4*total || ga != 4*active) {
			t.Errorf("%s: WeightBytes() = %d, %d; want %d, %d", s.Name, gt, ga, 4*total, 4*active)
		}
	}
}

// TestLoadMoE: the expert metadata and tensors a mixture-of-experts
// architecture requires, and their shapes, are clear errors when wrong.
func TestLoadMoE(t *testing.T) {
	t.Parallel()
	q3, q2 := testmodel.Qwen3MoE(quant.F32), testmodel.Qwen2MoE(quant.F32)
	for _, c := range []struct {
		name    string
		spec    testmodel.Spec
		meta    map[string]any
		tensors map[string][]float32
		want    string // "" when the model must load
	}{
		{"qwen3moe", q3, nil, nil, ""},
		{"qwen2moe", q2, nil, nil, ""},
		{"no expert count", q3, map[string]any{"qwen3moe.expert_count": nil}, nil, "qwen3moe.expert_count is missing"},
		{"no expert used count", q2, map[string]any{"qwen2moe.expert_used_count": nil}, nil, "qwen2moe.expert_used_count is missing"},
		{"more used than there are", q3, map[string]any{"qwen3moe.expert_used_count": uint32(17)}, nil, "no more used than there are"},
		{"per-layer used counts", q3, map[string]any{"qwen3moe.expert_used_count": []uint32{4, 4, 4, 4}}, nil, "per-layer arrays are not supported"},
		{"expert size from the default", q3, map[string]any{"qwen3moe.expert_feed_forward_length": nil, "qwen3moe.feed_forward_length": uint32(256)}, nil, ""},
		{"wrong expert size", q3, map[string]any{"qwen3moe.expert_feed_forward_length": uint32(32)}, nil, "tensor blk.0.ffn_gate_exps.weight has shape [64 64 16], want [64 32 16]"},
		{"expert tensor missing", q3, nil, map[string][]float32{"blk.2.ffn_down_exps.weight": nil}, "tensor blk.2.ffn_down_exps.weight is missing"},
		{"router missing", q3, nil, map[string][]float32{"blk.1.ffn_gate_inp.weight": nil}, "tensor blk.1.ffn_gate_inp.weight is missing"},
		{"shared gate missing", q2, nil, map[string][]float32{"blk.0.ffn_gate_inp_shexp.weight": nil}, "tensor blk.0.ffn_gate_inp_shexp.weight is missing"},
		{"shared gate of the wrong size", q2, nil, map[string][]float32{"blk.0.ffn_gate_inp_shexp.weight": make([]float32, 8)}, "tensor blk.0.ffn_gate_inp_shexp.weight has shape [8], want [64]"},
	} {
		m, err := model.Load(edited(t, c.spec, c.meta, c.tensors))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && m.Config.ExpertFF != 64:
			t.Errorf("%s: expert hidden size %d, want 64", c.name, m.Config.ExpertFF)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestMoEBatching: a token's logits do not depend on its batch, though
// the batch decides how many rows each expert multiplies at once: a
// prompt computed alone and in one batch with another sequence's gives
// the same bits, on plain and on repacked (Q4_0, Q8_0) expert weights.
func TestMoEBatching(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	const bs, promptLen, steps = 16, 29, 4
	for _, spec := range []testmodel.Spec{testmodel.Qwen3MoE(quant.Q4_0), testmodel.Qwen2MoE(quant.Q8_0), testmodel.Qwen3MoE(quant.F16)} {
		m := fromSpec(t, spec)
		r := rand.New(rand.NewPCG(1, 2))
		prompt := make([]int32, promptLen)
		for i := range prompt {
			prompt[i] = int32(r.IntN(m.Config.VocabSize))
		}
		nb := (promptLen + steps + bs) / bs
		run := model.NewRunner(m, be, 2*promptLen)
		kv, err := model.NewKV(&m.Config, model.KVF16, 2*nb, bs)
		if err != nil {
			t.Fatal(err)
		}
		want := seqRun(t, run, kv, contiguousTable(promptLen+steps+1, bs), prompt, steps)

		// One token at a time: every expert multiplies one row.
		var alone [][]float32
		b := &model.Batch{Tables: [][]int32{contiguousTable(promptLen, bs)}}
		for i, tok := range prompt {
			b.Reset()
			b.Tables = append(b.Tables, contiguousTable(promptLen, bs))
			b.Tokens, b.Pos, b.Seq, b.Logits = append(b.Tokens, tok), append(b.Pos, int32(i)), append(b.Seq, 0), append(b.Logits, 0)
			logits, err := run.Forward(b, kv)
			if err != nil {
				t.Fatal(err)
			}
			alone = [][]float32{append([]float32(nil), logits...)}
		}
		sameLogits(t, spec.Name+" token by token", alone, want[:1])

		// Behind another sequence's prompt, in other blocks.
		b = &model.Batch{Tables: [][]int32{contiguousTable(promptLen, bs), make([]int32, nb)}}
		for i := range nb {
			b.Tables[1][i] = int32(nb + i)
		}
		for s, p := range [][]int32{prompt[3:17], prompt} {
			for i, tok := range p {
				b.Tokens, b.Pos, b.Seq = append(b.Tokens, tok), append(b.Pos, int32(i)), append(b.Seq, int32(1-s))
			}
		}
		b.Logits = []int32{int32(len(b.Tokens) - 1)}
		logits, err := run.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		sameLogits(t, spec.Name+" batched", [][]float32{logits}, want[:1])
	}
}
