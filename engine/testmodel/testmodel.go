// Package testmodel writes deterministic models for tests, the demo server
// and benchmarks: GGUF files made by code, no download. They are llama
// models unless a Spec names another architecture (qwen2, qwen3, phi3,
// gemma, gemma2, gemma3, qwen2moe, qwen3moe, gpt-oss), which lays out that architecture's tensors and
// metadata over the same recipe, as llama.cpp reads them.
//
// All models share one 512-token SentencePiece vocabulary. Their weights are
// random from a fixed seed, except that the output projection is built from
// bigram statistics of a small corpus, so greedy decoding produces
// corpus-like text rather than noise. The transformer layers are random and
// scaled down: they perturb the next-token distribution without drowning it.
// A draft model is the target's first layers with the same embeddings, so it
// agrees with the target often but not always, which is what speculative
// decoding needs to be tested.
//
// The models prove the pipes, not the prose.
package testmodel

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"

	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/tokenizer"
)

// Spec is the shape of a test model.
type Spec struct {
	Name                    string
	Embd, Layers, Heads, KV int
	FF, Context             int
	Type                    quant.Type // type of the 2-D weights; norms are F32
	Seed                    uint64
	// Arch is general.architecture: "llama" (also when empty), "qwen2"
	// (biased query, key and value projections), "qwen3" (per-head RMS
	// norms of queries and keys), "phi3" (fused query-key-value and
	// gate-up weights), "gemma" (tied output), "gemma2" (tied output,
	// post-norms), "gemma3" (post-norms, per-head norms), "qwen3moe"
	// (qwen3 with experts), "qwen2moe" (qwen2 with experts and a shared
	// expert) or "gpt-oss" (biases everywhere, attention sinks, experts
	// with the clamped SwiGLU, windowed even layers).
	Arch string
	// HeadDim is the size of an attention head; 0 means Embd/Heads.
	HeadDim int

	// RopeBase is rope.freq_base; 0 means 10000.
	RopeBase float32
	// RopeScaling is "" (no scaling keys), "linear" or "yarn"
	// (rope.scaling.type and .factor = RopeFactor), or "llama3": Llama 3's
	// rope_freqs.weight for factor RopeFactor and no scaling keys.
	RopeScaling string
	RopeFactor  float32
	// RopeOrigContext is rope.scaling.original_context_length (0: not
	// written): YaRN's and Llama 3's reference context, and for phi3 the
	// context its long and short RoPE factors switch at (rope_factors_long,
	// rope_factors_short and rope.scaling.attn_factor are written with it).
	RopeOrigContext int
	// SlidingWindow is attention.sliding_window (0: not written).
	SlidingWindow int
	// AttnSoftCap and FinalSoftCap are attn_logit_softcapping and
	// final_logit_softcapping (0: not written).
	AttnSoftCap, FinalSoftCap float32

	// Experts, ExpertsUsed, ExpertFF and SharedFF shape the mixture of
	// experts of arches "qwen3moe" and "qwen2moe" (expert_count,
	// expert_used_count, expert_feed_forward_length and, for qwen2moe's
	// shared expert, expert_shared_feed_forward_length); other
	// architectures ignore them.
	Experts, ExpertsUsed, ExpertFF, SharedFF int
	// MXFP4Experts stores the experts' 3-D weights as MXFP4, as gpt-oss
	// ships them, whatever Type the other matrices have.
	MXFP4Experts bool

	// Shapes of real models for benchmarks (BenchLlama32, BenchQwen3):
	// Vocab pads the vocabulary to that many tokens (0, or at most
	// VocabSize: the embedded 512) with unused ones, whose embeddings are
	// random and whose output rows are zero, so that the embedding and
	// output matrices have a real vocabulary's size; TiedOutput drops
	// output.weight, the token embedding serving as the output projection.
	Vocab      int
	TiedOutput bool
	// Pooling is pooling_type (0: not written, a text generator): 1
	// mean, 2 cls, 3 last, 4 rank, as llama.cpp numbers them.
	Pooling uint32
	// Reranker shapes the file as llama.cpp converts Qwen3-Reranker: no
	// output.weight, a cls.output.weight of two rows (the output rows of
	// the first tokens of "yes" and "no"), classifier.output_labels and
	// the RerankTemplate as tokenizer.chat_template.rerank. Set Pooling
	// to 4 with it.
	Reranker bool
}

// RerankTemplate is the rerank prompt of the Reranker test models, in
// the form llama.cpp's converter writes for Qwen3-Reranker: the query and
// the document go where {query} and {document} stand.
const RerankTemplate = "<|im_start|>system\nJudge whether the Document meets the requirements. Answer yes or no.<|im_end|>\n<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n"

// moe reports whether s's feed-forward is a mixture of experts.
func (s Spec) moe() bool {
	return s.arch() == "qwen3moe" || s.arch() == "qwen2moe" || s.arch() == "gpt-oss"
}

// arch is s.Arch with its default.
func (s Spec) arch() string {
	if s.Arch == "" {
		return "llama"
	}
	return s.Arch
}

// headDim is s.HeadDim with its default.
func (s Spec) headDim() int {
	if s.HeadDim == 0 {
		return s.Embd / s.Heads
	}
	return s.HeadDim
}

// Target is the embedded default model: 4 layers of width 64 (about 0.27M
// parameters, 1 MiB in F32).
func Target(t quant.Type) Spec {
	return Spec{Name: "rill-tiny", Embd: 64, Layers: 4, Heads: 4, KV: 2, FF: 192, Context: 2048, Type: t, Seed: 1}
}

// Draft is Target's first layer alone: the draft model for speculative decoding.
func Draft(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Layers = "rill-tiny-draft", 1
	return s
}

// Qwen2 is Target as a qwen2 model: NEOX RoPE and random biases on the
// query, key and value projections.
func Qwen2(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Arch, s.Seed = "rill-tiny-qwen2", "qwen2", 3
	return s
}

// Qwen3 is Target as a qwen3 model: NEOX RoPE, per-head query and key norms
// with random weights, and heads of 32 values, twice Embd/Heads, as Qwen3
// models' heads are larger than their width allows.
func Qwen3(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Arch, s.Seed, s.HeadDim = "rill-tiny-qwen3", "qwen3", 4, 32
	return s
}

// Qwen3Embedding is Qwen3 as a decoder embedder, as Qwen3-Embedding
// ships: pooling_type 3, the last token's final-normed state.
func Qwen3Embedding(t quant.Type) Spec {
	s := Qwen3(t)
	s.Name, s.Pooling = "rill-tiny-qwen3-embedding", 3
	return s
}

// Qwen3Reranker is Qwen3 as a decoder reranker, as llama.cpp converts
// Qwen3-Reranker: rank pooling of the last token through a two-row
// "yes"/"no" head (see Spec.Reranker).
func Qwen3Reranker(t quant.Type) Spec {
	s := Qwen3(t)
	s.Name, s.Pooling, s.Reranker = "rill-tiny-qwen3-reranker", 4, true
	return s
}

// Qwen3MoE is Qwen3 as a qwen3moe model: every layer's feed-forward is 16
// experts of hidden size 64, of which each token uses 4, their weights
// renormalised. The router's logits spread by about 2, so tokens go to
// many experts.
func Qwen3MoE(t quant.Type) Spec {
	s := Qwen3(t)
	s.Name, s.Arch, s.Seed = "rill-tiny-qwen3moe", "qwen3moe", 13
	s.Experts, s.ExpertsUsed, s.ExpertFF = 16, 4, 64
	return s
}

// Qwen2MoE is Qwen2 as a qwen2moe model: 8 experts of hidden size 64, 2
// used per token with the router's probabilities as weights, and a shared
// expert of hidden size 128 behind a sigmoid gate.
func Qwen2MoE(t quant.Type) Spec {
	s := Qwen2(t)
	s.Name, s.Arch, s.Seed = "rill-tiny-qwen2moe", "qwen2moe", 14
	s.Experts, s.ExpertsUsed, s.ExpertFF, s.SharedFF = 8, 2, 64, 128
	return s
}

// BenchMoE is a qwen3moe model shaped like Qwen3-30B-A3B scaled down to
// a small machine: 12 layers of width 1024, 16 query heads sharing 2 key
// and value heads, 64 experts of hidden size 256 per layer of which each
// token uses 8: about 610M parameters, 105M of them active per token. Its
// widths are multiples of 256, so every K-quant applies. Write it to a
// temporary folder; never commit it.
func BenchMoE(t quant.Type) Spec {
	return Spec{Name: "rill-bench-moe", Arch: "qwen3moe", Embd: 1024, Layers: 12, Heads: 16, KV: 2, HeadDim: 64,
		FF: 2048, Context: 4096, Type: t, Seed: 15, Experts: 64, ExpertsUsed: 8, ExpertFF: 256}
}

// GptOss is a gpt-oss model: heads of 32 values (twice Embd/Heads, as
// gpt-oss's are wider than its width allows), biases on every projection,
// attention sinks, a sliding window of 8 tokens on the even layers, YaRN
// by 4 from an original context of 256, and every layer's feed-forward 8
// experts of hidden size 64 (MXFP4, as gpt-oss ships them), of which each
// token uses 2, weighed by a softmax over their biased router logits,
// with the clamped SwiGLU.
func GptOss(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Arch, s.Seed, s.HeadDim = "rill-tiny-gpt-oss", "gpt-oss", 16, 32
	s.SlidingWindow, s.RopeScaling, s.RopeFactor, s.RopeOrigContext = 8, "yarn", 4, 256
	s.Experts, s.ExpertsUsed, s.ExpertFF, s.MXFP4Experts = 8, 2, 64, true
	return s
}

// Llama3 is Target with Llama 3's RoPE: base 500000 and the
// rope_freqs.weight factors of rope_type llama3 (factor 8 over an original
// context of 256, so that the tiny heads have pairs of every kind: kept,
// scaled, and blended).
func Llama3(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Seed, s.RopeBase, s.RopeScaling, s.RopeFactor, s.RopeOrigContext = "rill-tiny-llama3", 5, 500000, "llama3", 8, 256
	return s
}

// LlamaLinear is Target with linear RoPE scaling by 4.
func LlamaLinear(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Seed, s.RopeScaling, s.RopeFactor = "rill-tiny-llama-linear", 6, "linear", 4
	return s
}

// LlamaYaRN is Target with YaRN RoPE scaling by 4 from an original context
// of 256.
func LlamaYaRN(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Seed, s.RopeScaling, s.RopeFactor, s.RopeOrigContext = "rill-tiny-llama-yarn", 7, "yarn", 4, 256
	return s
}

// Mistral is Target with a sliding window in its metadata, as
// Mistral-style llama files may carry (llama.cpp applies no window to the
// llama architecture). The window is 2 tokens, so that applying it would
// show.
func Mistral(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Seed, s.SlidingWindow = "rill-tiny-mistral", 8, 2
	return s
}

// Phi3 is Target as a long-context phi3 model: fused query-key-value and
// gate-up weights, long and short RoPE factors that switch at an original
// context of 512 (of 4096) with their attention factor, and a sliding
// window of 2 tokens in the metadata (llama.cpp applies none to phi3). Its name avoids
// "phi3": llama.cpp gives the special tokens of models so named extra
// attributes and fails on a vocabulary without Phi-3's <|endoftext|>.
func Phi3(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Arch, s.Seed, s.Context, s.RopeOrigContext, s.SlidingWindow = "rill-tiny-phi", "phi3", 9, 4096, 512, 2
	return s
}

// Gemma is Target as a gemma model: heads of 32 values (twice Embd/Heads),
// embeddings that the model scales by sqrt(Embd), GELU, the token
// embedding as output projection.
func Gemma(t quant.Type) Spec {
	s := Target(t)
	s.Name, s.Arch, s.Seed, s.HeadDim = "rill-tiny-gemma", "gemma", 10, 32
	return s
}

// Gemma2 is Gemma as a gemma2 model: random post-attention and
// post-feed-forward norms, a sliding window of 8 tokens on every second
// layer, attention scores soft-capped at 2 and logits at 15 (tight, so
// that the caps matter on a tiny model).
func Gemma2(t quant.Type) Spec {
	s := Gemma(t)
	s.Name, s.Arch, s.Seed, s.SlidingWindow, s.AttnSoftCap, s.FinalSoftCap = "rill-tiny-gemma2", "gemma2", 11, 8, 2, 15
	return s
}

// Gemma3 is a six-layer gemma3 model: per-head query and key norms,
// post-norms, a sliding window of 8 tokens on all layers but the sixth
// (the default pattern), RoPE base 1e6 with linear scaling by 8 on the
// global layer and the default base 10000 unscaled on the local ones, and
// its own output projection (which gemma3, unlike gemma and gemma2, may
// have).
func Gemma3(t quant.Type) Spec {
	s := Gemma(t)
	s.Name, s.Arch, s.Seed, s.Layers, s.SlidingWindow = "rill-tiny-gemma3", "gemma3", 12, 6, 8
	s.RopeBase, s.RopeScaling, s.RopeFactor = 1e6, "linear", 8
	return s
}

// Bench is a model of about 245M parameters, for decode-speed measurements
// where memory bandwidth dominates. Write it to a temporary folder; never
// commit it.
func Bench(t quant.Type) Spec {
	return Spec{Name: "rill-bench-245m", Embd: 1024, Layers: 22, Heads: 16, KV: 4, FF: 2816, Context: 2048, Type: t, Seed: 2}
}

// BenchLlama32 has the shape of Llama 3.2 1B (1.24B parameters): width
// 2048, 16 layers, 32 query heads of 64 over 8 KV heads, feed-forward 8192,
// a 128,256-token vocabulary (the embedded one padded) and tied
// embeddings. For benchmarks at a real model's size and attention shape;
// write it to a temporary folder, never commit it.
func BenchLlama32(t quant.Type) Spec {
	return Spec{Name: "rill-bench-llama3.2-1b", Embd: 2048, Layers: 16, Heads: 32, KV: 8, HeadDim: 64, FF: 8192,
		Context: 131072, Type: t, Seed: 31, RopeBase: 500000, Vocab: 128256, TiedOutput: true}
}

// BenchQwen3 has the shape of Qwen3 1.7B (1.72B parameters with tied
// embeddings): width 2048, 28 layers, 16 query heads of 128 over 8 KV
// heads with per-head query and key norms, feed-forward 6144, a
// 151,936-token vocabulary (the embedded one padded) and tied embeddings.
// As BenchLlama32, for benchmarks only.
func BenchQwen3(t quant.Type) Spec {
	return Spec{Name: "rill-bench-qwen3-1.7b", Arch: "qwen3", Embd: 2048, Layers: 28, Heads: 16, KV: 8, HeadDim: 128, FF: 6144,
		Context: 40960, Type: t, Seed: 32, RopeBase: 1000000, Vocab: 151936, TiedOutput: true}
}

// padVocab returns v with unused tokens appended up to n (their pieces
// "<unused%d>", never produced by tokenizing text).
func padVocab(v tokenizer.Vocab, n int) tokenizer.Vocab {
	v.Tokens, v.Scores, v.Types = slices.Clone(v.Tokens), slices.Clone(v.Scores), slices.Clone(v.Types)
	for i := len(v.Tokens); i < n; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("<unused%d>", i))
		v.Scores = append(v.Scores, 0)
		v.Types = append(v.Types, tokenizer.Unused)
	}
	return v
}

// Bytes returns the GGUF file of s.
func Bytes(s Spec) ([]byte, error) {
	var b bytes.Buffer
	if err := Write(&b, s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteFile writes the GGUF file of s to path.
func WriteFile(path string, s Spec) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Write writes the GGUF file of s.
func Write(w io.Writer, s Spec) error {
	switch s.Type {
	case quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0:
	default:
		return fmt.Errorf("test model type %s is not supported (F32, F16, BF16, Q8_0, Q4_0)", s.Type)
	}
	switch s.arch() {
	case "llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "qwen2moe", "qwen3moe", "gpt-oss":
	default:
		return fmt.Errorf("test model architecture %q is not supported (llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3, qwen2moe, qwen3moe, gpt-oss)", s.Arch)
	}
	if s.arch() == "gpt-oss" && s.SlidingWindow <= 0 {
		return fmt.Errorf("test model gpt-oss needs a sliding window (llama.cpp requires attention.sliding_window)")
	}
	if s.moe() && (s.Experts <= 0 || s.ExpertsUsed <= 0 || s.ExpertsUsed > s.Experts || s.ExpertFF <= 0 || (s.arch() == "qwen2moe") != (s.SharedFF > 0)) {
		return fmt.Errorf("test model experts: %d, %d used, hidden size %d, shared %d", s.Experts, s.ExpertsUsed, s.ExpertFF, s.SharedFF)
	}
	if s.HeadDim == 0 && s.Embd%s.Heads != 0 || s.Heads%s.KV != 0 || s.HeadDim < 0 {
		return fmt.Errorf("test model shape %+v: heads must divide the width and kv heads the heads", s)
	}
	switch s.RopeScaling {
	case "", "linear", "yarn", "llama3":
	default:
		return fmt.Errorf("test model rope scaling %q is not supported (linear, yarn, llama3)", s.RopeScaling)
	}
	v, err := vocab()
	if err != nil {
		return err
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		return fmt.Errorf("test vocabulary: %w", err)
	}
	nv := VocabSize
	if s.Vocab > VocabSize {
		nv = s.Vocab
		v = padVocab(v, nv)
	}
	gw := gguf.NewWriter()
	arch, headDim := s.arch(), s.headDim()
	types := make([]int32, len(v.Types))
	for i, t := range v.Types {
		types[i] = int32(t)
	}
	type keyValue struct {
		k string
		v any
	}
	meta := []keyValue{
		{"general.architecture", arch},
		{"general.name", s.Name},
		{"general.file_type", fileType(s.Type)},
		{arch + ".context_length", uint32(s.Context)},
		{arch + ".embedding_length", uint32(s.Embd)},
		{arch + ".block_count", uint32(s.Layers)},
		{arch + ".feed_forward_length", uint32(s.FF)},
		{arch + ".attention.head_count", uint32(s.Heads)},
		{arch + ".attention.head_count_kv", uint32(s.KV)},
	}
	if s.HeadDim != 0 {
		meta = append(meta,
			keyValue{arch + ".attention.key_length", uint32(headDim)},
			keyValue{arch + ".attention.value_length", uint32(headDim)})
	}
	meta = append(meta, []keyValue{
		{arch + ".rope.dimension_count", uint32(headDim)},
		{arch + ".rope.freq_base", s.ropeBase()},
		{arch + ".attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", v.Tokens},
		{"tokenizer.ggml.scores", v.Scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.bos_token_id", uint32(v.BOS)},
		{"tokenizer.ggml.eos_token_id", uint32(v.EOS)},
		{"tokenizer.ggml.unknown_token_id", uint32(v.UNK)},
		{"tokenizer.ggml.eot_token_id", uint32(v.EOT)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
		{"tokenizer.chat_template", ChatTemplate},
	}...)
	// Keys of the newer features come last, so that files without them
	// keep their bytes.
	if s.RopeScaling == "linear" || s.RopeScaling == "yarn" {
		meta = append(meta, keyValue{arch + ".rope.scaling.type", s.RopeScaling}, keyValue{arch + ".rope.scaling.factor", s.RopeFactor})
	}
	if s.RopeOrigContext != 0 && s.RopeScaling != "llama3" {
		meta = append(meta, keyValue{arch + ".rope.scaling.original_context_length", uint32(s.RopeOrigContext)})
	}
	if s.arch() == "phi3" && s.RopeOrigContext != 0 {
		meta = append(meta, keyValue{arch + ".rope.scaling.attn_factor", longRopeAttnFactor(s)})
	}
	if s.Pooling != 0 {
		meta = append(meta, keyValue{arch + ".pooling_type", s.Pooling})
	}
	if s.SlidingWindow != 0 {
		meta = append(meta, keyValue{arch + ".attention.sliding_window", uint32(s.SlidingWindow)})
	}
	if s.AttnSoftCap != 0 {
		meta = append(meta, keyValue{arch + ".attn_logit_softcapping", s.AttnSoftCap})
	}
	if s.FinalSoftCap != 0 {
		meta = append(meta, keyValue{arch + ".final_logit_softcapping", s.FinalSoftCap})
	}
	if s.Reranker {
		meta = append(meta, keyValue{arch + ".classifier.output_labels", []string{"yes", "no"}},
			keyValue{"tokenizer.chat_template.rerank", RerankTemplate})
	}
	if s.moe() {
		meta = append(meta, keyValue{arch + ".expert_count", uint32(s.Experts)},
			keyValue{arch + ".expert_used_count", uint32(s.ExpertsUsed)},
			keyValue{arch + ".expert_feed_forward_length", uint32(s.ExpertFF)})
		if s.SharedFF > 0 {
			meta = append(meta, keyValue{arch + ".expert_shared_feed_forward_length", uint32(s.SharedFF)})
		}
	}
	for _, kv := range meta {
		if err := gw.Set(kv.k, kv.v); err != nil {
			return fmt.Errorf("metadata %s: %w", kv.k, err)
		}
	}

	d := s.Embd
	qd := s.Heads * headDim
	kvd := s.KV * headDim
	embd, out := embeddings(tok, s.Seed, d)
	if s.gemma() {
		// Gemma scales its embeddings by sqrt(d): store them 1/sqrt(d) as
		// large, so the residual stream starts as in the other models.
		scale := float32(1 / math.Sqrt(float64(d)))
		for i := range embd {
			embd[i] *= scale
		}
	}
	if nv > VocabSize {
		embd = append(embd, gaussian(s.Seed, "token_embd.weight.pad", (nv-VocabSize)*d, 1)...)
		out = append(out, make([]float32, (nv-VocabSize)*d)...)
	}
	if err := addMatrix(gw, "token_embd.weight", s.Type, nv, d, embd); err != nil {
		return err
	}
	if !s.tiedOutput() {
		if err := addMatrix(gw, "output.weight", s.Type, nv, d, out); err != nil {
			return err
		}
	}
	if s.Reranker {
		var rows []float32
		for _, word := range []string{"yes", "no"} {
			id := tok.Encode(word, tokenizer.EncodeOptions{})[0]
			rows = append(rows, out[id*d:(id+1)*d]...)
		}
		if err := addMatrix(gw, "cls.output.weight", s.Type, 2, d, rows); err != nil {
			return err
		}
	}
	if err := addVector(gw, "output_norm.weight", ones(d)); err != nil {
		return err
	}
	if err := addRopeFactors(gw, s); err != nil {
		return err
	}
	// Residual contributions are scaled by beta: small enough that the
	// bigram signal survives four layers, large enough to matter.
	const beta = 0.15
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		for _, m := range []struct {
			name       string
			rows, cols int
			std        float64
		}{
			{"attn_q.weight", qd, d, 1 / math.Sqrt(float64(d))},
			{"attn_k.weight", kvd, d, 1 / math.Sqrt(float64(d))},
			{"attn_v.weight", kvd, d, 1 / math.Sqrt(float64(d))},
			{"attn_output.weight", d, qd, beta / math.Sqrt(float64(qd))},
			{"ffn_gate.weight", s.FF, d, 1 / math.Sqrt(float64(d))},
			{"ffn_up.weight", s.FF, d, 1 / math.Sqrt(float64(d))},
			{"ffn_down.weight", d, s.FF, beta / math.Sqrt(float64(s.FF))},
		} {
			if s.arch() == "phi3" && m.name != "attn_output.weight" && m.name != "ffn_down.weight" {
				continue // fused below
			}
			if s.moe() && m.name[:4] == "ffn_" {
				continue // experts below
			}
			w := gaussian(s.Seed, p+m.name, m.rows*m.cols, m.std)
			if err := addMatrix(gw, p+m.name, s.Type, m.rows, m.cols, w); err != nil {
				return err
			}
		}
		if s.arch() == "phi3" {
			if err := addPhi3Fused(gw, s, p, qd, kvd); err != nil {
				return err
			}
		}
		ffnNorm := "ffn_norm.weight"
		if s.arch() == "gpt-oss" {
			ffnNorm = "post_attention_norm.weight" // gpt-oss's name for it
		}
		for _, n := range []string{"attn_norm.weight", ffnNorm} {
			if err := addVector(gw, p+n, ones(d)); err != nil {
				return err
			}
		}
		if err := addArchTensors(gw, s, p, qd, kvd); err != nil {
			return err
		}
		if s.moe() {
			if err := addExperts(gw, s, p, beta); err != nil {
				return err
			}
		}
	}
	_, err = gw.WriteTo(w)
	return err
}

// ropeBase is s.RopeBase with its default.
func (s Spec) ropeBase() float32 {
	if s.RopeBase == 0 {
		return 10000
	}
	return s.RopeBase
}

// gemma reports whether s is of the Gemma family (scaled embeddings).
func (s Spec) gemma() bool {
	return s.arch() == "gemma" || s.arch() == "gemma2" || s.arch() == "gemma3"
}

// tiedOutput reports whether s has no output.weight: gemma and gemma2,
// which llama.cpp only runs with the token embedding as output projection.
// (Their greedy text echoes the last token; gemma3 keeps the bigram output
// so that its text does not.)
func (s Spec) tiedOutput() bool {
	return s.TiedOutput || s.Reranker || s.arch() == "gemma" || s.arch() == "gemma2"
}

// addPhi3Fused adds phi3's fused weights of layer prefix p: attn_qkv (the
// query, key and value rows in that order) and ffn_up (gate rows, then up
// rows), each part drawn as the separate weight of that name would be.
func addPhi3Fused(gw *gguf.Writer, s Spec, p string, qd, kvd int) error {
	d := s.Embd
	std := 1 / math.Sqrt(float64(d))
	var qkv, gateUp []float32
	for _, part := range []struct {
		name string
		rows int
	}{{"attn_q.weight", qd}, {"attn_k.weight", kvd}, {"attn_v.weight", kvd}} {
		qkv = append(qkv, gaussian(s.Seed, p+part.name, part.rows*d, std)...)
	}
	for _, name := range []string{"ffn_gate.weight", "ffn_up.weight"} {
		gateUp = append(gateUp, gaussian(s.Seed, p+name, s.FF*d, std)...)
	}
	if err := addMatrix(gw, p+"attn_qkv.weight", s.Type, qd+2*kvd, d, qkv); err != nil {
		return err
	}
	return addMatrix(gw, p+"ffn_up.weight", s.Type, 2*s.FF, d, gateUp)
}

// addRopeFactors adds the RoPE frequency factors of s: Llama 3's
// rope_freqs.weight, computed as llama.cpp's converter computes it from
// rope_type llama3 (low_freq_factor 1, high_freq_factor 4), or phi3's
// rope_factors_short (random, near 1) and rope_factors_long (growing from
// 1 to 8 over the pairs, as long-context Phi-3 factors do).
func addRopeFactors(gw *gguf.Writer, s Spec) error {
	dims := s.headDim()
	switch {
	case s.RopeScaling == "llama3":
		const lowFreqFactor, highFreqFactor = 1, 4
		old := float64(s.RopeOrigContext)
		lowWavelen, highWavelen := old/lowFreqFactor, old/highFreqFactor
		factors := make([]float32, dims/2)
		for i := range factors {
			freq := 1 / math.Pow(float64(s.ropeBase()), float64(2*i)/float64(dims))
			wavelen := 2 * math.Pi / freq
			switch {
			case wavelen < highWavelen:
				factors[i] = 1
			case wavelen > lowWavelen:
				factors[i] = s.RopeFactor
			default:
				smooth := (old/wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
				factors[i] = float32(1 / ((1-smooth)/float64(s.RopeFactor) + smooth))
			}
		}
		return addVector(gw, "rope_freqs.weight", factors)
	case s.arch() == "phi3" && s.RopeOrigContext != 0:
		short := gaussian(s.Seed, "rope_factors_short.weight", dims/2, 0.1)
		long := make([]float32, dims/2)
		for i := range short {
			short[i] = 1 + float32(math.Abs(float64(short[i])))
			long[i] = 1 + 7*float32(i)/float32(len(long)-1)
		}
		if err := addVector(gw, "rope_factors_long.weight", long); err != nil {
			return err
		}
		return addVector(gw, "rope_factors_short.weight", short)
	}
	return nil
}

// longRopeAttnFactor is the rope.scaling.attn_factor llama.cpp's converter
// writes for long-context Phi-3: sqrt(1 + ln(scale)/ln(original context)),
// scale = context / original context.
func longRopeAttnFactor(s Spec) float32 {
	scale := float64(s.Context) / float64(s.RopeOrigContext)
	if scale <= 1 {
		return 1
	}
	return float32(math.Sqrt(1 + math.Log(scale)/math.Log(float64(s.RopeOrigContext))))
}

// addArchTensors adds the tensors of layer prefix p that s's architecture
// has beyond llama's: qwen2's projection biases, large enough to move the
// logits (a projection's outputs have an RMS of about 1); qwen3's and
// gemma3's per-head norm weights, random around 1 so that a norm applied
// to the wrong values, or not at all, shows; gemma2's and gemma3's
// post-attention and post-feed-forward norm weights, random around 0.3 so
// that the normalised outputs add to the residual stream about as much as
// the other models' do.
func addArchTensors(gw *gguf.Writer, s Spec, p string, qd, kvd int) error {
	vecs := map[string][]float32{}
	if s.arch() == "qwen2" || s.arch() == "qwen2moe" || s.arch() == "gpt-oss" {
		for name, n := range map[string]int{"attn_q.bias": qd, "attn_k.bias": kvd, "attn_v.bias": kvd} {
			vecs[name] = gaussian(s.Seed, p+name, n, 0.5)
		}
	}
	if s.arch() == "gpt-oss" {
		// The output bias adds to the residual stream as the layer's
		// output does (about 0.15); sinks of about the scores' size, so
		// that they take a share of each softmax without swamping it.
		vecs["attn_output.bias"] = gaussian(s.Seed, p+"attn_output.bias", s.Embd, 0.05)
		vecs["attn_sinks.weight"] = gaussian(s.Seed, p+"attn_sinks.weight", s.Heads, 1)
	}
	if s.arch() == "qwen3" || s.arch() == "qwen3moe" || s.arch() == "gemma3" {
		for _, name := range []string{"attn_q_norm.weight", "attn_k_norm.weight"} {
			w := gaussian(s.Seed, p+name, s.headDim(), 0.3)
			for i := range w {
				w[i]++
			}
			vecs[name] = w
		}
	}
	if s.arch() == "gemma2" || s.arch() == "gemma3" {
		for _, name := range []string{"post_attention_norm.weight", "post_ffw_norm.weight"} {
			w := gaussian(s.Seed, p+name, s.Embd, 0.1)
			for i := range w {
				w[i] += 0.15
			}
			vecs[name] = w
		}
	}
	for _, name := range slices.Sorted(maps.Keys(vecs)) {
		if err := addVector(gw, p+name, vecs[name]); err != nil {
			return err
		}
	}
	return nil
}

// addExperts adds the mixture of experts of layer prefix p: the router
// (ffn_gate_inp, F32 as llama.cpp's quantiser keeps it) with logits of
// standard deviation 2 over a normalised input, so that tokens spread
// over the experts; the experts' gate, up and down weights as 3-D tensors
// (GGML shape [cols, rows, experts]), drawn as a dense feed-forward's of
// their size; and qwen2moe's shared expert and its gate logit's weights
// (ffn_gate_inp_shexp, a vector).
func addExperts(gw *gguf.Writer, s Spec, p string, beta float64) error {
	d, n, f := s.Embd, s.Experts, s.ExpertFF
	sd := 1 / math.Sqrt(float64(d))
	if err := addMatrix(gw, p+"ffn_gate_inp.weight", quant.F32, n, d, gaussian(s.Seed, p+"ffn_gate_inp.weight", n*d, 2*sd)); err != nil {
		return err
	}
	et := s.Type
	if s.MXFP4Experts {
		et = quant.MXFP4
	}
	for _, m := range []struct {
		name       string
		rows, cols int
		std        float64
	}{
		{"ffn_gate_exps.weight", f, d, sd},
		{"ffn_up_exps.weight", f, d, sd},
		{"ffn_down_exps.weight", d, f, beta / math.Sqrt(float64(f))},
	} {
		w := gaussian(s.Seed, p+m.name, n*m.rows*m.cols, m.std)
		rb, err := et.RowBytes(m.cols)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		buf := make([]byte, n*m.rows*rb)
		if err := quant.Quantize(et, buf, w); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if err := gw.AddTensor(p+m.name, et, []int{m.cols, m.rows, n}, buf); err != nil {
			return err
		}
	}
	if s.arch() == "gpt-oss" {
		return addGptOssBiases(gw, s, p)
	}
	if s.SharedFF == 0 {
		return nil
	}
	sf := s.SharedFF
	for _, m := range []struct {
		name       string
		rows, cols int
		std        float64
	}{
		{"ffn_gate_shexp.weight", sf, d, sd},
		{"ffn_up_shexp.weight", sf, d, sd},
		{"ffn_down_shexp.weight", d, sf, beta / math.Sqrt(float64(sf))},
	} {
		if err := addMatrix(gw, p+m.name, s.Type, m.rows, m.cols, gaussian(s.Seed, p+m.name, m.rows*m.cols, m.std)); err != nil {
			return err
		}
	}
	return addVector(gw, p+"ffn_gate_inp_shexp.weight", gaussian(s.Seed, p+"ffn_gate_inp_shexp.weight", d, sd))
}

// addGptOssBiases adds gpt-oss's biases of the router and the experts
// (GGML shape [rows, experts]): the router's of the logits' size, so
// that they move the choice; the gate's and up's of half the size of
// their products (an RMS of about 1), so that they matter; the down
// projection's small, as its output joins the residual stream.
func addGptOssBiases(gw *gguf.Writer, s Spec, p string) error {
	d, n, f := s.Embd, s.Experts, s.ExpertFF
	if err := addVector(gw, p+"ffn_gate_inp.bias", gaussian(s.Seed, p+"ffn_gate_inp.bias", n, 1)); err != nil {
		return err
	}
	for _, b := range []struct {
		name string
		rows int
		std  float64
	}{{"ffn_gate_exps.bias", f, 0.5}, {"ffn_up_exps.bias", f, 0.5}, {"ffn_down_exps.bias", d, 0.05}} {
		buf := make([]byte, 4*b.rows*n)
		if err := quant.Quantize(quant.F32, buf, gaussian(s.Seed, p+b.name, b.rows*n, b.std)); err != nil {
			return err
		}
		if err := gw.AddTensor(p+b.name, quant.F32, []int{b.rows, n}, buf); err != nil {
			return err
		}
	}
	return nil
}

// embeddings returns the input embeddings and the output projection. The
// corpus tokens that matter most (up to d of them, by frequency) get
// orthogonal embeddings of RMS 1, so that their bigram statistics can be
// written into the output projection without cross-talk: row j of the output
// is alpha * sum_i P(j|i) * E_i over those tokens, and after the final RMSNorm
// the logit of j given token i is alpha*d*P(j|i) = 32*P(j|i). Other tokens get random
// embeddings (their continuations are noise).
func embeddings(tok *tokenizer.Tokenizer, seed uint64, d int) (embd, out []float32) {
	p := bigrams(tok)
	embd = gaussian(seed, "token_embd.weight", VocabSize*d, 1)
	basis := orthonormal(seed, d, min(d, VocabSize))
	for k, id := range frequentTokens(tok, len(basis)) {
		e := embd[id*d : (id+1)*d]
		for x := range e {
			e[x] = basis[k][x] * float32(math.Sqrt(float64(d)))
		}
	}
	alpha := float32(32) / float32(d)
	out = make([]float32, VocabSize*d)
	for _, i := range frequentTokens(tok, len(basis)) {
		e := embd[i*d : (i+1)*d]
		for j, pj := range p[i] {
			if pj == 0 {
				continue
			}
			o := out[j*d : (j+1)*d]
			for x, v := range e {
				o[x] += alpha * pj * v
			}
		}
	}
	return embd, out
}

// frequentTokens returns up to n token ids in order of corpus frequency
// (BOS first: every paragraph starts with it), ties to the lower id.
func frequentTokens(tok *tokenizer.Tokenizer, n int) []int {
	freq := make([]int, VocabSize)
	for _, para := range corpus {
		for _, id := range tok.Encode(para, tokenizer.EncodeOptions{AddSpecial: true}) {
			freq[id]++
		}
	}
	freq[tokBOS] = 1 << 30
	ids := make([]int, 0, VocabSize)
	for id, f := range freq {
		if f > 0 {
			ids = append(ids, id)
		}
	}
	sort.SliceStable(ids, func(a, b int) bool { return freq[ids[a]] > freq[ids[b]] })
	return ids[:min(n, len(ids))]
}

// orthonormal returns n orthonormal vectors of dimension d (n <= d) from a
// seeded Gram-Schmidt over Gaussian vectors.
func orthonormal(seed uint64, d, n int) [][]float32 {
	g := gaussian(seed, "orthonormal", n*d, 1)
	vs := make([][]float64, n)
	for i := range vs {
		v := make([]float64, d)
		for x := range v {
			v[x] = float64(g[i*d+x])
		}
		for _, u := range vs[:i] {
			var dot float64
			for x := range v {
				dot += v[x] * u[x]
			}
			for x := range v {
				v[x] -= dot * u[x]
			}
		}
		var norm float64
		for _, x := range v {
			norm += x * x
		}
		norm = math.Sqrt(norm)
		for x := range v {
			v[x] /= norm
		}
		vs[i] = v
	}
	out := make([][]float32, n)
	for i, v := range vs {
		out[i] = make([]float32, d)
		for x := range v {
			out[i][x] = float32(v[x])
		}
	}
	return out
}

// gaussian returns n normal values of standard deviation std from a
// generator seeded by the model seed and the tensor name, so that models
// sharing a seed share every tensor of the same name.
func gaussian(seed uint64, name string, n int, std float64) []float32 {
	h := fnv.New64a()
	h.Write([]byte(name))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * std)
	}
	return out
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

func addMatrix(w *gguf.Writer, name string, t quant.Type, rows, cols int, data []float32) error {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	buf := make([]byte, rows*rb)
	if err := quant.Quantize(t, buf, data); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return w.AddTensor(name, t, []int{cols, rows}, buf)
}

func addVector(w *gguf.Writer, name string, data []float32) error {
	buf := make([]byte, 4*len(data))
	if err := quant.Quantize(quant.F32, buf, data); err != nil {
		return err
	}
	return w.AddTensor(name, quant.F32, []int{len(data)}, buf)
}

// fileType is GGUF's general.file_type for a model whose matrices are t.
func fileType(t quant.Type) uint32 {
	switch t {
	case quant.F16:
		return 1
	case quant.Q4_0:
		return 2
	case quant.Q8_0:
		return 7
	case quant.BF16:
		return 32
	}
	return 0
}
