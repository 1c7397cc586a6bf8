package testmodel

import (
	"fmt"
	"io"
	"math"
	"os"

	"rill/engine/gguf"
	"rill/engine/quant"
)

// BertSpec is the shape of a test encoder of architecture "bert" (bge,
// e5, all-MiniLM), laid out as llama.cpp reads it: token, position and
// token-type embeddings, LayerNorms with biases, biased projections, and
// for a reranker the classification head cls and cls.output.
//
// With Arch "nomic-bert" it is laid out as nomic-embed-text: no position
// embeddings but RoPE (rope.freq_base RopeBase), a SwiGLU feed-forward
// (ffn_gate, ffn_up, ffn_down), and no biases on any projection.
//
// With Arch "nomic-bert-moe" it is laid out as nomic-embed-text v2: RoPE,
// bert's biased GELU feed-forward, and in every MoEEvery-th layer (i%n
// == 1) a router ffn_gate_inp and Experts GELU experts ffn_up_exps and
// ffn_down_exps without biases, ExpertsUsed of them per token.
//
// Its vocabulary is the test models' SentencePiece one (llama.cpp's bert
// loads any vocabulary); tests that compare numbers give token ids.
type BertSpec struct {
	Name string
	// Arch is general.architecture: "bert" (the default when empty),
	// "nomic-bert" or "nomic-bert-moe".
	Arch                    string
	Embd, Layers, Heads, FF int
	Context                 int
	Type                    quant.Type // type of the 2-D weights; vectors are F32
	Seed                    uint64
	// Pooling is bert.pooling_type: 1 mean, 2 cls, 4 rank (0: not
	// written, llama.cpp's default, mean for bert).
	Pooling uint32
	// Reranker adds the classification head (cls, cls.output of one
	// label).
	Reranker bool
	// FusedQKV writes one attn_qkv projection instead of three.
	FusedQKV bool
	// RopeBase is nomic-bert's rope.freq_base (0: not written, llama.cpp's
	// default 10000).
	RopeBase float32
	// Experts, ExpertsUsed and MoEEvery are nomic-bert-moe's
	// expert_count, expert_used_count and moe_every_n_layers.
	Experts, ExpertsUsed, MoEEvery int
}

// TinyBert is a 2-layer mean-pooled bert encoder of width 32.
func TinyBert() BertSpec {
	return BertSpec{Name: "tiny-bert", Embd: 32, Layers: 2, Heads: 4, FF: 64, Context: 64, Type: quant.F32, Seed: 11, Pooling: 1}
}

// TinyBertReranker is TinyBert with a classification head and rank
// pooling, fused query-key-value projections.
func TinyBertReranker() BertSpec {
	s := TinyBert()
	s.Name, s.Seed, s.Pooling, s.Reranker, s.FusedQKV = "tiny-bert-reranker", 12, 4, true, true
	return s
}

// TinyNomicBert is a 2-layer mean-pooled nomic-bert encoder of width 32
// with fused query-key-value projections and RoPE base 1000, as
// nomic-embed-text v1.5 has.
func TinyNomicBert() BertSpec {
	return BertSpec{Name: "tiny-nomic-bert", Arch: "nomic-bert", Embd: 32, Layers: 2, Heads: 4, FF: 48, Context: 64, Type: quant.F32, Seed: 13, Pooling: 1, FusedQKV: true, RopeBase: 1000}
}

// TinyNomicBertMoE is a 4-layer mean-pooled nomic-bert-moe encoder of
// width 32: layers 1 and 3 route each token to 2 of 4 experts.
func TinyNomicBertMoE() BertSpec {
	return BertSpec{Name: "tiny-nomic-bert-moe", Arch: "nomic-bert-moe", Embd: 32, Layers: 4, Heads: 4, FF: 48, Context: 64, Type: quant.F32, Seed: 14, Pooling: 1, FusedQKV: true, RopeBase: 10000, Experts: 4, ExpertsUsed: 2, MoEEvery: 2}
}

// WriteBertFile writes the GGUF file of s to path.
func WriteBertFile(path string, s BertSpec) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteBert(f, s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteBert writes the GGUF file of s.
func WriteBert(w io.Writer, s BertSpec) error {
	if s.Heads <= 0 || s.Embd%s.Heads != 0 || s.Layers <= 0 || s.FF <= 0 || s.Context <= 0 {
		return fmt.Errorf("test bert shape %+v", s)
	}
	v, err := vocab()
	if err != nil {
		return err
	}
	types := make([]int32, len(v.Types))
	for i, t := range v.Types {
		types[i] = int32(t)
	}
	arch := s.Arch
	switch arch {
	case "":
		arch = "bert"
	case "bert", "nomic-bert", "nomic-bert-moe":
	default:
		return fmt.Errorf("test bert architecture %q", arch)
	}
	nomic := arch == "nomic-bert"
	rope := arch != "bert"
	moe := arch == "nomic-bert-moe"
	if moe && (s.MoEEvery <= 0 || s.Experts <= 0 || s.ExpertsUsed <= 0 || s.ExpertsUsed > s.Experts) {
		return fmt.Errorf("test nomic-bert-moe experts %d, used %d, every %d layers", s.Experts, s.ExpertsUsed, s.MoEEvery)
	}
	if rope && s.Reranker {
		return fmt.Errorf("test nomic-bert has no classification head")
	}
	gw := gguf.NewWriter()
	meta := []struct {
		k string
		v any
	}{
		{"general.architecture", arch},
		{"general.name", s.Name},
		{"general.file_type", fileType(s.Type)},
		{arch + ".context_length", uint32(s.Context)},
		{arch + ".embedding_length", uint32(s.Embd)},
		{arch + ".block_count", uint32(s.Layers)},
		{arch + ".feed_forward_length", uint32(s.FF)},
		{arch + ".attention.head_count", uint32(s.Heads)},
		{arch + ".attention.layer_norm_epsilon", float32(1e-12)},
		{arch + ".attention.causal", false},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", v.Tokens},
		{"tokenizer.ggml.scores", v.Scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.token_type_count", uint32(2)},
		{"tokenizer.ggml.bos_token_id", uint32(v.BOS)},
		{"tokenizer.ggml.eos_token_id", uint32(v.EOS)},
		{"tokenizer.ggml.unknown_token_id", uint32(v.UNK)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", true},
	}
	if s.Pooling != 0 {
		meta = append(meta, struct {
			k string
			v any
		}{arch + ".pooling_type", s.Pooling})
	}
	if s.RopeBase != 0 {
		meta = append(meta, struct {
			k string
			v any
		}{arch + ".rope.freq_base", s.RopeBase})
	}
	if moe {
		meta = append(meta, []struct {
			k string
			v any
		}{
			{arch + ".expert_count", uint32(s.Experts)},
			{arch + ".expert_used_count", uint32(s.ExpertsUsed)},
			{arch + ".moe_every_n_layers", uint32(s.MoEEvery)},
		}...)
	}
	for _, kv := range meta {
		if err := gw.Set(kv.k, kv.v); err != nil {
			return fmt.Errorf("metadata %s: %w", kv.k, err)
		}
	}
	d, ff := s.Embd, s.FF
	wstd := 1 / math.Sqrt(float64(d))
	mat := func(name string, rows, cols int, std float64) error {
		return addMatrix(gw, name, s.Type, rows, cols, gaussian(s.Seed, name, rows*cols, std))
	}
	vec := func(name string, n int, mean, std float64) error {
		x := gaussian(s.Seed, name, n, std)
		for i := range x {
			x[i] += float32(mean)
		}
		return addVector(gw, name, x)
	}
	norm := func(name string) error {
		if err := vec(name+".weight", d, 1, 0.1); err != nil {
			return err
		}
		return vec(name+".bias", d, 0, 0.1)
	}
	lin := func(name string, rows, cols int) error {
		if err := mat(name+".weight", rows, cols, 1/math.Sqrt(float64(cols))); err != nil {
			return err
		}
		if nomic {
			return nil
		}
		return vec(name+".bias", rows, 0, 0.1)
	}
	steps := []func() error{
		func() error { return mat("token_embd.weight", len(v.Tokens), d, 1) },
		func() error { return mat("token_types.weight", 2, d, 0.5) },
	}
	if !rope {
		steps = append(steps, func() error { return mat("position_embd.weight", s.Context, d, 0.5) })
	}
	steps = append(steps, func() error { return norm("token_embd_norm") })
	for i := 0; i < s.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		if s.FusedQKV {
			steps = append(steps, func() error { return lin(p+"attn_qkv", 3*d, d) })
		} else {
			steps = append(steps,
				func() error { return lin(p+"attn_q", d, d) },
				func() error { return lin(p+"attn_k", d, d) },
				func() error { return lin(p+"attn_v", d, d) })
		}
		steps = append(steps,
			func() error { return lin(p+"attn_output", d, d) },
			func() error { return norm(p + "attn_output_norm") },
			func() error { return norm(p + "layer_output_norm") })
		if moe && i%s.MoEEvery == 1 {
			n := s.Experts
			steps = append(steps,
				func() error { return mat(p+"ffn_gate_inp.weight", n, d, 1/math.Sqrt(float64(d))) },
				func() error {
					return addTensor3(gw, p+"ffn_up_exps.weight", s.Type, d, ff, n, gaussian(s.Seed, p+"ffn_up_exps", n*ff*d, 1/math.Sqrt(float64(d))))
				},
				func() error {
					return addTensor3(gw, p+"ffn_down_exps.weight", s.Type, ff, d, n, gaussian(s.Seed, p+"ffn_down_exps", n*ff*d, 1/math.Sqrt(float64(ff))))
				})
			continue
		}
		steps = append(steps,
			func() error { return lin(p+"ffn_up", ff, d) },
			func() error { return lin(p+"ffn_down", d, ff) })
		if nomic {
			steps = append(steps, func() error { return lin(p+"ffn_gate", ff, d) })
		}
	}
	if s.Reranker {
		steps = append(steps,
			func() error { return lin("cls", d, d) },
			func() error { return mat("cls.output.weight", 1, d, 3*wstd) },
			func() error { return vec("cls.output.bias", 1, 0, 0.1) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	_, err = gw.WriteTo(w)
	return err
}

// addTensor3 adds the n matrices of rows x cols in data as one tensor of
// GGML shape [cols, rows, n]: experts' weights.
func addTensor3(w *gguf.Writer, name string, t quant.Type, cols, rows, n int, data []float32) error {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	buf := make([]byte, n*rows*rb)
	if err := quant.Quantize(t, buf, data); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return w.AddTensor(name, t, []int{cols, rows, n}, buf)
}
