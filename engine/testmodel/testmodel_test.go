package testmodel

import (
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
	// Tensors beyond llama's per layer: qwen2's three biases, qwen3's two norms.
	extra := map[string]int{"llama": 0, "qwen2": 3, "qwen3": 2}
	for _, s := range []Spec{Target(quant.F32), Target(quant.Q8_0), Draft(quant.F32), Draft(quant.Q8_0), Qwen2(quant.Q8_0), Qwen3(quant.F32)} {
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
		if tmpl, _ := f.Metadata.String("tokenizer.chat_template"); !strings.Contains(tmpl, "<|im_start|>") {
			t.Fatalf("chat template missing")
		}
		want := 3 + (9+extra[arch])*s.Layers
		if len(f.Tensors) != want {
			t.Fatalf("%d tensors, want %d", len(f.Tensors), want)
		}
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
