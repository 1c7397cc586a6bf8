// Package testmodel writes deterministic models for tests, the demo server
// and benchmarks: GGUF files made by code, no download. They are llama
// models unless a Spec names another architecture (qwen2, qwen3), which
// adds that architecture's tensors to the same recipe.
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
	// (biased query, key and value projections) or "qwen3" (per-head RMS
	// norms of queries and keys).
	Arch string
	// HeadDim is the size of an attention head; 0 means Embd/Heads.
	HeadDim int
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

// Bench is a model of about 245M parameters, for decode-speed measurements
// where memory bandwidth dominates. Write it to a temporary folder; never
// commit it.
func Bench(t quant.Type) Spec {
	return Spec{Name: "rill-bench-245m", Embd: 1024, Layers: 22, Heads: 16, KV: 4, FF: 2816, Context: 2048, Type: t, Seed: 2}
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
	case "llama", "qwen2", "qwen3":
	default:
		return fmt.Errorf("test model architecture %q is not supported (llama, qwen2, qwen3)", s.Arch)
	}
	if s.HeadDim == 0 && s.Embd%s.Heads != 0 || s.Heads%s.KV != 0 || s.HeadDim < 0 {
		return fmt.Errorf("test model shape %+v: heads must divide the width and kv heads the heads", s)
	}
	v, err := vocab()
	if err != nil {
		return err
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		return fmt.Errorf("test vocabulary: %w", err)
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
	for _, kv := range append(meta, []keyValue{
		{arch + ".rope.dimension_count", uint32(headDim)},
		{arch + ".rope.freq_base", float32(10000)},
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
	}...) {
		if err := gw.Set(kv.k, kv.v); err != nil {
			return fmt.Errorf("metadata %s: %w", kv.k, err)
		}
	}

	d := s.Embd
	qd := s.Heads * headDim
	kvd := s.KV * headDim
	embd, out := embeddings(tok, s.Seed, d)
	if err := addMatrix(gw, "token_embd.weight", s.Type, VocabSize, d, embd); err != nil {
		return err
	}
	if err := addMatrix(gw, "output.weight", s.Type, VocabSize, d, out); err != nil {
		return err
	}
	if err := addVector(gw, "output_norm.weight", ones(d)); err != nil {
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
			w := gaussian(s.Seed, p+m.name, m.rows*m.cols, m.std)
			if err := addMatrix(gw, p+m.name, s.Type, m.rows, m.cols, w); err != nil {
				return err
			}
		}
		for _, n := range []string{"attn_norm.weight", "ffn_norm.weight"} {
			if err := addVector(gw, p+n, ones(d)); err != nil {
				return err
			}
		}
		if err := addArchTensors(gw, s, p, qd, kvd); err != nil {
			return err
		}
	}
	_, err = gw.WriteTo(w)
	return err
}

// addArchTensors adds the tensors of layer prefix p that s's architecture
// has beyond llama's: qwen2's projection biases, large enough to move the
// logits (a projection's outputs have an RMS of about 1), and qwen3's
// per-head norm weights, random around 1 so that a norm applied to the
// wrong values, or not at all, shows.
func addArchTensors(gw *gguf.Writer, s Spec, p string, qd, kvd int) error {
	vecs := map[string][]float32{}
	switch s.arch() {
	case "qwen2":
		for name, n := range map[string]int{"attn_q.bias": qd, "attn_k.bias": kvd, "attn_v.bias": kvd} {
			vecs[name] = gaussian(s.Seed, p+name, n, 0.5)
		}
	case "qwen3":
		for _, name := range []string{"attn_q_norm.weight", "attn_k_norm.weight"} {
			w := gaussian(s.Seed, p+name, s.headDim(), 0.3)
			for i := range w {
				w[i]++
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
