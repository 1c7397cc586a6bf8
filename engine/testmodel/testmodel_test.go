package testmodel

import (
	"math"
	"slices"
	"strings"
	"testing"

	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/tokenizer"
)

func TestVocab(t *testing.T) {
	t.Parallel()
	v, err := vocab()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	// Corpus words tokenise to whole pieces: no byte fallback anywhere.
	for _, para := range corpus {
		for _, id := range tok.Encode(para, tokenizer.EncodeOptions{}) {
			if v.Types[id] == tokenizer.Byte || id == tokUnk {
				t.Fatalf("corpus paragraph %q needs byte or unknown token %d", para[:20], id)
			}
		}
	}
	ids := tok.Encode("<|im_start|>user\nhi<|im_end|>", tokenizer.EncodeOptions{ParseSpecial: true})
	if ids[0] != tokImStart || ids[len(ids)-1] != tokImEnd {
		t.Fatalf("ChatML control tokens not parsed: %v", ids)
	}
}

func TestWriteParses(t *testing.T) {
	t.Parallel()
	// Tensors per file: global ones (token_embd, output unless gemma or
	// gemma2 ties it, output_norm, RoPE factors), then per layer llama's nine plus
	// qwen2's three biases, qwen3's two norms, gemma2's two post-norms and
	// gemma3's four norms, or phi3's six (fused weights), or gpt-oss's
	// nineteen (four projections and their biases, two norms, the sinks,
	// the router and its bias, three expert tensors and their biases).
	for _, c := range []struct {
		spec             Spec
		global, perLayer int
	}{
		{Target(quant.F32), 3, 9}, {Target(quant.Q8_0), 3, 9}, {Draft(quant.F32), 3, 9}, {Draft(quant.Q8_0), 3, 9},
		{Qwen2(quant.Q8_0), 3, 12}, {Qwen3(quant.F32), 3, 11},
		{Llama3(quant.F32), 4, 9}, {LlamaLinear(quant.Q8_0), 3, 9}, {LlamaYaRN(quant.F32), 3, 9}, {Mistral(quant.F32), 3, 9},
		{Phi3(quant.Q8_0), 5, 6}, {Gemma(quant.F32), 2, 9}, {Gemma2(quant.Q8_0), 2, 11}, {Gemma3(quant.F32), 3, 13},
		{GptOss(quant.F32), 3, 19},
	} {
		s := c.spec
		data, err := Bytes(s)
		if err != nil {
			t.Fatalf("%s %s: %v", s.Name, s.Type, err)
		}
		if len(data) > 4<<20 {
			t.Fatalf("%s %s is %d bytes; test models must stay a few MB", s.Name, s.Type, len(data))
		}
		f, err := gguf.Parse(data)
		if err != nil {
			t.Fatalf("%s %s: %v", s.Name, s.Type, err)
		}
		if name, _ := f.Metadata.String("general.name"); name != s.Name {
			t.Fatalf("general.name = %q, want %q", name, s.Name)
		}
		arch, _ := f.Metadata.String("general.architecture")
		if arch != s.arch() {
			t.Fatalf("general.architecture = %q, want %q", arch, s.arch())
		}
		if n, _ := f.Metadata.Uint(arch + ".block_count"); int(n) != s.Layers {
			t.Fatalf("block_count = %d, want %d", n, s.Layers)
		}
		if n, ok := f.Metadata.Uint(arch + ".attention.key_length"); ok != (s.HeadDim != 0) || ok && int(n) != s.HeadDim {
			t.Fatalf("key_length = %d (present %v), want %d", n, ok, s.HeadDim)
		}
		if n, ok := f.Metadata.Uint(arch + ".attention.sliding_window"); ok != (s.SlidingWindow != 0) || int(n) != s.SlidingWindow {
			t.Fatalf("%s: sliding_window = %d (present %v), want %d", s.Name, n, ok, s.SlidingWindow)
		}
		if typ, ok := f.Metadata.String(arch + ".rope.scaling.type"); ok != (s.RopeScaling == "linear" || s.RopeScaling == "yarn") || ok && typ != s.RopeScaling {
			t.Fatalf("%s: rope.scaling.type = %q (present %v), want %q", s.Name, typ, ok, s.RopeScaling)
		}
		if tmpl, _ := f.Metadata.String("tokenizer.chat_template"); !strings.Contains(tmpl, "<|im_start|>") {
			t.Fatalf("chat template missing")
		}
		if want := c.global + c.perLayer*s.Layers; len(f.Tensors) != want {
			t.Fatalf("%s: %d tensors, want %d", s.Name, len(f.Tensors), want)
		}
	}
}

// TestLlama3Factors: rope_freqs.weight holds Llama 3's factors: 1 for the
// pairs whose wavelength is below the original context/4, the factor for
// those above the original context, and a smooth blend between.
func TestLlama3Factors(t *testing.T) {
	t.Parallel()
	s := Llama3(quant.F32)
	data, err := Bytes(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	tn, ok := f.Tensor("rope_freqs.weight")
	if !ok {
		t.Fatal("no rope_freqs.weight")
	}
	factors := make([]float32, s.headDim()/2)
	if err := quant.Dequantize(tn.Type, factors, tn.Data); err != nil {
		t.Fatal(err)
	}
	var kept, scaled, blended int
	for i, ff := range factors {
		wavelen := 2 * math.Pi * math.Pow(float64(s.ropeBase()), float64(2*i)/float64(len(factors)*2))
		switch {
		case wavelen < float64(s.RopeOrigContext)/4:
			kept++
			if ff != 1 {
				t.Errorf("pair %d (wavelength %.0f): factor %g, want 1", i, wavelen, ff)
			}
		case wavelen > float64(s.RopeOrigContext):
			scaled++
			if ff != s.RopeFactor {
				t.Errorf("pair %d (wavelength %.0f): factor %g, want %g", i, wavelen, ff, s.RopeFactor)
			}
		default:
			blended++
			if ff <= 1 || ff >= s.RopeFactor || i > 0 && ff < factors[i-1] {
				t.Errorf("pair %d (wavelength %.0f): factor %g, want a rising blend", i, wavelen, ff)
			}
		}
	}
	if kept == 0 || scaled == 0 || blended == 0 {
		t.Errorf("pairs kept %d, scaled %d, blended %d: want some of each", kept, scaled, blended)
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	a, err := Bytes(Target(quant.Q8_0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Bytes(Target(quant.Q8_0))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("two generations of the same spec differ")
	}
}

// TestDraftSharesLayers checks that the draft is the target's first layer
// with the same embeddings (what makes its guesses good).
func TestDraftSharesLayers(t *testing.T) {
	t.Parallel()
	td, _ := Bytes(Target(quant.F32))
	dd, _ := Bytes(Draft(quant.F32))
	tf, err := gguf.Parse(td)
	if err != nil {
		t.Fatal(err)
	}
	df, err := gguf.Parse(dd)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight"} {
		a, _ := tf.Tensor(name)
		b, ok := df.Tensor(name)
		if !ok || string(a.Data) != string(b.Data) {
			t.Fatalf("tensor %s differs between target and draft", name)
		}
	}
	if _, ok := df.Tensor("blk.1.attn_q.weight"); ok {
		t.Fatal("draft has a second layer")
	}
}

// TestGptOssExperts: gpt-oss's expert weights are 3-D MXFP4 tensors and
// their biases [rows, experts] in F32, whatever the other matrices' type.
func TestGptOssExperts(t *testing.T) {
	t.Parallel()
	s := GptOss(quant.Q8_0)
	data, err := Bytes(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		typ   quant.Type
		shape []int
	}{
		{"blk.0.ffn_gate_exps.weight", quant.MXFP4, []int{s.Embd, s.ExpertFF, s.Experts}},
		{"blk.3.ffn_down_exps.weight", quant.MXFP4, []int{s.ExpertFF, s.Embd, s.Experts}},
		{"blk.0.ffn_up_exps.bias", quant.F32, []int{s.ExpertFF, s.Experts}},
		{"blk.0.ffn_gate_inp.bias", quant.F32, []int{s.Experts}},
		{"blk.1.attn_sinks.weight", quant.F32, []int{s.Heads}},
		{"blk.1.attn_q.weight", quant.Q8_0, []int{s.Embd, s.Heads * s.HeadDim}},
	} {
		tt, ok := f.Tensor(c.name)
		if !ok {
			t.Errorf("%s is missing", c.name)
			continue
		}
		if tt.Type != c.typ || !slices.Equal(tt.Shape, c.shape) {
			t.Errorf("%s: %s %v, want %s %v", c.name, tt.Type, tt.Shape, c.typ, c.shape)
		}
	}
}

// TestBenchShapes: the real-model-shaped benchmark specs have their
// models' parameter counts (Llama 3.2 1B: 1.24B, Qwen3 1.7B: 1.72B, tied
// embeddings counted once), and a padded vocabulary with tied embeddings
// writes the padded size everywhere, its extra tokens unused, no
// output.weight, and tokenises text as the embedded vocabulary does.
func TestBenchShapes(t *testing.T) {
	t.Parallel()
	params := func(s Spec) float64 {
		hd := s.headDim()
		qd, kvd := s.Heads*hd, s.KV*hd
		layer := s.Embd*(2*qd+2*kvd) + 3*s.Embd*s.FF + 2*s.Embd
		if s.arch() == "qwen3" {
			layer += 2 * hd
		}
		return float64(s.Vocab*s.Embd + s.Layers*layer + s.Embd)
	}
	for _, c := range []struct {
		spec Spec
		want float64
	}{{BenchLlama32(quant.F16), 1.236e9}, {BenchQwen3(quant.F16), 1.721e9}} {
		if got := params(c.spec); math.Abs(got/c.want-1) > 0.005 {
			t.Errorf("%s: %.4g parameters, want %.4g", c.spec.Name, got, c.want)
		}
		if !c.spec.TiedOutput || c.spec.Vocab <= VocabSize {
			t.Errorf("%s: vocabulary %d, tied %v", c.spec.Name, c.spec.Vocab, c.spec.TiedOutput)
		}
	}

	s := BenchLlama32(quant.F32)
	s.Embd, s.Layers, s.Heads, s.KV, s.HeadDim, s.FF, s.Vocab = 64, 1, 4, 2, 16, 128, 2000
	data, err := Bytes(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int{}
	for _, ti := range f.Tensors {
		shapes[ti.Name] = ti.Shape
	}
	if sh := shapes["token_embd.weight"]; !slices.Equal(sh, []int{64, 2000}) {
		t.Fatalf("token_embd.weight shape %v, want [64 2000]", sh)
	}
	if _, ok := shapes["output.weight"]; ok {
		t.Fatal("output.weight written with tied embeddings")
	}
	v, err := tokenizer.VocabFromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 2000 || v.Types[VocabSize-1] == tokenizer.Unused || v.Types[VocabSize] != tokenizer.Unused || v.Types[1999] != tokenizer.Unused {
		t.Fatalf("padded vocabulary: %d tokens, types %v at %d..", len(v.Tokens), v.Types[VocabSize-1:VocabSize+1], VocabSize-1)
	}
	padded, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	base, err := vocab()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := tokenizer.New(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, para := range corpus[:3] {
		if a, b := padded.Encode(para, tokenizer.EncodeOptions{}), plain.Encode(para, tokenizer.EncodeOptions{}); !slices.Equal(a, b) {
			t.Fatalf("padded vocabulary tokenises %q as %v, embedded as %v", para[:20], a, b)
		}
	}
}
