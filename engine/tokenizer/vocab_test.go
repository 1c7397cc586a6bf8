package tokenizer

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"rill/engine/gguf"
)

func TestNewRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(v *Vocab)
		want   string
	}{
		{"other model", func(v *Vocab) { v.Model = "rwkv" }, `unsupported tokenizer model "rwkv"`},
		{"unigram without unk", func(v *Vocab) { v.Model, v.UNK = ModelT5, -1 }, "unigram vocabulary has no unknown token"},
		{"charsmap without header", func(v *Vocab) { v.Model, v.Charsmap = ModelT5, []byte{1, 0} }, "no size header"},
		{"charsmap trie overruns", func(v *Vocab) { v.Model, v.Charsmap = ModelT5, []byte{8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8} }, "overruns"},
		{"unknown pre-tokenizer", func(v *Vocab) { v.Model, v.Pre = ModelGPT2, "no-such-pre" }, `unsupported pre-tokenizer "no-such-pre"`},
		{"strip id out of range", func(v *Vocab) { v.RStrip = []int{len(v.Tokens)} }, "strip token id"},
		{"no tokens", func(v *Vocab) { v.Tokens, v.Scores, v.Types = nil, nil, nil }, "no tokens"},
		{"short scores", func(v *Vocab) { v.Scores = v.Scores[1:] }, "scores"},
		{"short types", func(v *Vocab) { v.Types = v.Types[1:] }, "token types"},
		{"bos out of range", func(v *Vocab) { v.BOS = len(v.Tokens) }, "bos token id"},
		{"eos below -1", func(v *Vocab) { v.EOS = -2 }, "eos token id"},
		{"unk out of range", func(v *Vocab) { v.UNK = 1 << 20 }, "unk token id"},
		{"pad out of range", func(v *Vocab) { v.PAD = len(v.Tokens) }, "pad token id"},
		{"eot out of range", func(v *Vocab) { v.EOT = len(v.Tokens) }, "eot token id"},
		{"eog out of range", func(v *Vocab) { v.EOG = []int{-1} }, "end-of-generation"},
		{"add bos without bos", func(v *Vocab) { v.BOS = -1 }, "bos token but has none"},
		{"add eos without eos", func(v *Vocab) { v.AddEOS, v.EOS = true, -1 }, "eos token but has none"},
		{"empty token", func(v *Vocab) { v.Tokens[5] = "" }, "token 5 is empty"},
		{"duplicate token", func(v *Vocab) { v.Tokens[5] = v.Tokens[4] }, "both"},
		{"malformed byte token", func(v *Vocab) { v.Tokens[3] = "<0xZZ>" }, "byte token 3"},
		{"byte token of another shape", func(v *Vocab) { v.Tokens[3] = "\x00" }, "byte token 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := buildVocab(true, tok{"a", 0, Normal})
			c.mutate(&v)
			_, err := New(v)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestNewCopiesVocab(t *testing.T) {
	t.Parallel()
	v := buildVocab(true, tok{"a", 0, Normal})
	tk := mustNew(t, v)
	v.Tokens[len(v.Tokens)-1] = "b"
	v.Types[len(v.Types)-1] = Control
	if got := tk.Vocab().Tokens[tk.Size()-1]; got != "a" {
		t.Errorf("tokenizer sees the caller's later change: token %q", got)
	}
	if got := string(tk.Piece(tk.Size() - 1)); got != "a" {
		t.Errorf("Piece = %q, want %q", got, "a")
	}
}

func TestPiece(t *testing.T) {
	t.Parallel()
	v := buildVocab(true,
		tok{"▁a▁b", 0, Normal}, tok{"▁x", 0, UserDefined}, tok{"<pad>", 0, Unused}, tok{"odd", 0, 0}, tok{"odd2", 0, 9})
	v.Types[len(v.Types)-2] = 0 // buildVocab turns 0 into Normal
	tk := mustNew(t, v)
	n := tk.Size()
	cases := []struct {
		id   int
		want string
	}{
		{n - 5, " a b"},    // U+2581 becomes a space, the leading one too
		{n - 4, "▁x"},      // user-defined tokens are verbatim
		{n - 3, ""},        // unused
		{n - 2, ""},        // undefined type
		{n - 1, ""},        // unknown type number
		{0, ""},            // <unk>
		{1, ""},            // <s>
		{2, ""},            // </s>
		{3 + 0x41, "A"},    // <0x41>
		{3 + 0xE2, "\xe2"}, // half a character
		{-1, ""},
		{n, ""},
	}
	for _, c := range cases {
		if got := string(tk.Piece(c.id)); got != c.want {
			t.Errorf("Piece(%d) = %q, want %q", c.id, got, c.want)
		}
	}
	if tk.Valid(-1) || tk.Valid(n) || !tk.Valid(0) || !tk.Valid(n-1) {
		t.Errorf("Valid disagrees with the vocabulary size %d", n)
	}
}

// TestPieceDoesNotAllocate is not parallel: AllocsPerRun forbids it.
func TestPieceDoesNotAllocate(t *testing.T) {
	tk := mustNew(t, buildVocab(true, tok{"▁a▁b", 0, Normal}))
	id := tk.Size() - 1
	if allocs := testing.AllocsPerRun(100, func() { _ = tk.Piece(id) }); allocs != 0 {
		t.Errorf("Piece allocates %v times per call", allocs)
	}
}

func TestIsEOG(t *testing.T) {
	t.Parallel()
	v := buildVocab(true, tok{"<|eot_id|>", 0, Control}, tok{"<|eom_id|>", 0, Control}, tok{"a", 0, Normal})
	n := len(v.Tokens)
	v.EOT, v.EOG = n-3, []int{n - 2}
	tk := mustNew(t, v)
	for id := range tk.Size() {
		want := id == 2 || id == n-3 || id == n-2
		if got := tk.IsEOG(id); got != want {
			t.Errorf("IsEOG(%d %q) = %v, want %v", id, v.Tokens[id], got, want)
		}
	}
	if tk.IsEOG(-1) {
		t.Error("IsEOG(-1) is true")
	}
	if tk.BOS() != 1 || tk.EOS() != 2 {
		t.Errorf("BOS, EOS = %d, %d, want 1, 2", tk.BOS(), tk.EOS())
	}
}

// metadata writes keys through gguf.Writer and parses them back.
func metadata(t *testing.T, kv map[string]any) *gguf.Metadata {
	t.Helper()
	w := gguf.NewWriter()
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := w.Set(k, kv[k]); err != nil {
			t.Fatalf("Set(%s): %v", k, err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f.Metadata
}

// baseKV is a small llama vocabulary: <unk> <s> </s> <0x0A> ▁a a.
func baseKV() map[string]any {
	return map[string]any{
		"tokenizer.ggml.model":      "llama",
		"tokenizer.ggml.tokens":     []string{"<unk>", "<s>", "</s>", "<0x0A>", "▁a", "a"},
		"tokenizer.ggml.scores":     []float32{0, 0, 0, 0, -1, -2},
		"tokenizer.ggml.token_type": []int32{2, 3, 3, 6, 1, 1},
	}
}

// gpt2KV turns baseKV into a gpt2 vocabulary of 12 tokens with
// pre-tokenizer pre ("": no key) and two merges.
func gpt2KV(pre string) func(kv map[string]any) {
	return func(kv map[string]any) {
		kv["tokenizer.ggml.model"] = "gpt2"
		kv["tokenizer.ggml.tokens"] = []string{"a", "b", "ab", "<|endoftext|>", "c", "d", "e", "f", "g", "h", "i", "j"}
		kv["tokenizer.ggml.token_type"] = []int32{1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1}
		delete(kv, "tokenizer.ggml.scores")
		kv["tokenizer.ggml.merges"] = []string{"a b", "ab c"}
		if pre != "" {
			kv["tokenizer.ggml.pre"] = pre
		}
	}
}

func TestVocabFromGGUF(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		edit  func(kv map[string]any)
		check func(t *testing.T, v Vocab)
	}{
		{"llama defaults", func(map[string]any) {}, func(t *testing.T, v Vocab) {
			if v.BOS != 1 || v.EOS != 2 || v.UNK != 0 || v.PAD != -1 || v.EOT != -1 || len(v.EOG) != 0 {
				t.Errorf("ids bos %d eos %d unk %d pad %d eot %d eog %v", v.BOS, v.EOS, v.UNK, v.PAD, v.EOT, v.EOG)
			}
			if !v.AddBOS || v.AddEOS || !v.AddSpacePrefix {
				t.Errorf("flags add_bos %v add_eos %v add_space_prefix %v, want true false true", v.AddBOS, v.AddEOS, v.AddSpacePrefix)
			}
			if !slices.Equal(v.Types, []TokenType{Unknown, Control, Control, Byte, Normal, Normal}) {
				t.Errorf("types %v", v.Types)
			}
		}},
		{"flags from keys", func(kv map[string]any) {
			kv["tokenizer.ggml.add_bos_token"] = false
			kv["tokenizer.ggml.add_eos_token"] = true
			kv["tokenizer.ggml.add_space_prefix"] = false
		}, func(t *testing.T, v Vocab) {
			if v.AddBOS || !v.AddEOS || v.AddSpacePrefix {
				t.Errorf("flags add_bos %v add_eos %v add_space_prefix %v, want false true false", v.AddBOS, v.AddEOS, v.AddSpacePrefix)
			}
		}},
		{"ids from keys, out of range keeps the default", func(kv map[string]any) {
			kv["tokenizer.ggml.bos_token_id"] = uint32(4)
			kv["tokenizer.ggml.eos_token_id"] = uint32(99)
			kv["tokenizer.ggml.unknown_token_id"] = int32(-1)
			kv["tokenizer.ggml.padding_token_id"] = uint32(0xFFFFFFFF)
			kv["tokenizer.ggml.eot_token_id"] = uint64(1 << 63)
		}, func(t *testing.T, v Vocab) {
			if v.BOS != 4 || v.EOS != 2 || v.UNK != 0 || v.PAD != -1 || v.EOT != -1 {
				t.Errorf("ids bos %d eos %d unk %d pad %d eot %d, want 4 2 0 -1 -1", v.BOS, v.EOS, v.UNK, v.PAD, v.EOT)
			}
		}},
		{"defaults beyond a tiny vocabulary are dropped", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>"}
			kv["tokenizer.ggml.scores"] = []float32{0, 0}
			kv["tokenizer.ggml.token_type"] = []int32{2, 3}
		}, func(t *testing.T, v Vocab) {
			if v.BOS != 1 || v.EOS != -1 {
				t.Errorf("bos %d eos %d, want 1 -1", v.BOS, v.EOS)
			}
		}},
		{"no scores or types", func(kv map[string]any) {
			delete(kv, "tokenizer.ggml.scores")
			delete(kv, "tokenizer.ggml.token_type")
		}, func(t *testing.T, v Vocab) {
			if slices.ContainsFunc(v.Scores, func(s float32) bool { return s != 0 }) || len(v.Scores) != 6 {
				t.Errorf("scores %v, want six zeros", v.Scores)
			}
			// </s> ends generation by its text, which makes it Control.
			if !slices.Equal(v.Types, []TokenType{Normal, Normal, Control, Normal, Normal, Normal}) {
				t.Errorf("types %v, want Normal but for </s>", v.Types)
			}
		}},
		{"int32 scores, longer arrays cut", func(kv map[string]any) {
			kv["tokenizer.ggml.scores"] = []int32{0, 0, 0, 0, -1, -2, 7}
			kv["tokenizer.ggml.token_type"] = []int32{2, 3, 3, 6, 1, 1, 1}
		}, func(t *testing.T, v Vocab) {
			if !slices.Equal(v.Scores, []float32{0, 0, 0, 0, -1, -2}) || len(v.Types) != 6 {
				t.Errorf("scores %v types %v", v.Scores, v.Types)
			}
		}},
		{"empty token renamed", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>", "</s>", "<0x0A>", "", "a"}
		}, func(t *testing.T, v Vocab) {
			if v.Tokens[4] != "[EMPTY_4]" {
				t.Errorf("token 4 = %q, want [EMPTY_4]", v.Tokens[4])
			}
		}},
		{"end-of-turn tokens found by text", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>", "</s>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<PRE>"}
			kv["tokenizer.ggml.scores"] = make([]float32, 7)
			kv["tokenizer.ggml.token_type"] = []int32{2, 3, 3, 1, 4, 1, 1}
		}, func(t *testing.T, v Vocab) {
			// "<|eot_id|>" sorts before "<|im_end|>", so it is EOT; both end
			// generation, as does EOM; all found by text become Control.
			if v.EOT != 4 || !slices.Equal(v.EOG, []int{3, 5}) {
				t.Errorf("eot %d eog %v, want 4 [3 5]", v.EOT, v.EOG)
			}
			if !slices.Equal(v.Types, []TokenType{Unknown, Control, Control, Control, Control, Control, Control}) {
				t.Errorf("types %v, want all but <unk> Control", v.Types)
			}
		}},
		{"gpt2 defaults for qwen2", gpt2KV("qwen2"), func(t *testing.T, v Vocab) {
			if v.Model != ModelGPT2 || v.Pre != "qwen2" || len(v.Merges) != 2 || v.IgnoreMerges {
				t.Errorf("model %q pre %q merges %v ignore_merges %v", v.Model, v.Pre, v.Merges, v.IgnoreMerges)
			}
			// llama.cpp's gpt2 defaults: BOS and EOS 11, no UNK, no flags;
			// <|endoftext|> ends turns by its text.
			if v.BOS != 11 || v.EOS != 11 || v.UNK != -1 || v.EOT != 3 || v.AddBOS || v.AddEOS {
				t.Errorf("bos %d eos %d unk %d eot %d add_bos %v add_eos %v, want 11 11 -1 3 false false",
					v.BOS, v.EOS, v.UNK, v.EOT, v.AddBOS, v.AddEOS)
			}
		}},
		{"gpt2 defaults for llama-bpe", gpt2KV("llama-bpe"), func(t *testing.T, v Vocab) {
			if !v.IgnoreMerges || !v.AddBOS || v.BOS != 11 {
				t.Errorf("ignore_merges %v add_bos %v bos %d, want true true 11", v.IgnoreMerges, v.AddBOS, v.BOS)
			}
		}},
		{"gpt2 without pre uses the default rules", gpt2KV(""), func(t *testing.T, v Vocab) {
			if v.Pre != "" || v.AddBOS {
				t.Errorf("pre %q add_bos %v", v.Pre, v.AddBOS)
			}
		}},
		{"gemma4 forces add_bos", func(kv map[string]any) {
			gpt2KV("")(kv)
			kv["tokenizer.ggml.model"] = "gemma4"
			kv["tokenizer.ggml.add_bos_token"] = false
			kv["tokenizer.ggml.bos_token_id"] = uint32(1)
		}, func(t *testing.T, v Vocab) {
			if v.Model != ModelGemma4 || v.Pre != "gemma4" || !v.AddBOS || v.BOS != 1 || v.EOS != -1 {
				t.Errorf("model %q pre %q add_bos %v bos %d eos %d", v.Model, v.Pre, v.AddBOS, v.BOS, v.EOS)
			}
		}},
		{"phi-3 strips after its special tokens", func(kv map[string]any) {
			kv["general.name"] = "Phi-3 mini"
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>", "</s>", "<0x0A>", "<|end|>", "<|user|>", "<|endoftext|>", "a"}
			kv["tokenizer.ggml.scores"] = make([]float32, 8)
			kv["tokenizer.ggml.token_type"] = []int32{2, 3, 4, 6, 3, 3, 3, 1}
		}, func(t *testing.T, v Vocab) {
			if !slices.Equal(v.RStrip, []int{2, 4, 5}) || v.LStrip != nil {
				t.Errorf("rstrip %v lstrip %v, want [2 4 5] (</s> <|end|> <|user|>) and none", v.RStrip, v.LStrip)
			}
		}},
		{"other models do not strip", func(kv map[string]any) { kv["general.name"] = "Llama 2" }, func(t *testing.T, v Vocab) {
			if v.RStrip != nil {
				t.Errorf("rstrip %v", v.RStrip)
			}
		}},
		{"</s> is text beside <|tool_response>", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>", "</s>", "<|tool_response>", "<eos>"}
			kv["tokenizer.ggml.scores"] = make([]float32, 5)
			kv["tokenizer.ggml.token_type"] = []int32{2, 3, 3, 4, 3}
			kv["tokenizer.ggml.eos_token_id"] = uint32(4)
		}, func(t *testing.T, v Vocab) {
			if !slices.Equal(v.EOG, []int{3}) || v.Types[2] != Normal || v.Types[3] != Control {
				t.Errorf("eog %v types %v, want [3], </s> Normal, <|tool_response> Control", v.EOG, v.Types)
			}
		}},
		{"<|end|> ends no generation beside <|return|> and <|call|>", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>", "</s>", "<|end|>", "<|return|>", "<|call|>", "<|channel|>"}
			kv["tokenizer.ggml.scores"] = make([]float32, 7)
			kv["tokenizer.ggml.token_type"] = []int32{2, 3, 3, 3, 3, 3, 3}
		}, func(t *testing.T, v Vocab) {
			if v.EOT != -1 || !slices.Equal(v.EOG, []int{4, 5}) || v.Types[3] != UserDefined || v.Types[6] != UserDefined {
				t.Errorf("eot %d eog %v types %v, want -1 [4 5] and <|end|>, <|channel|> UserDefined", v.EOT, v.EOG, v.Types)
			}
		}},
		{"end-of-turn key wins over text", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>", "</s>", "<|im_end|>", "<|eot_id|>"}
			kv["tokenizer.ggml.scores"] = make([]float32, 5)
			kv["tokenizer.ggml.token_type"] = []int32{2, 3, 3, 3, 3}
			kv["tokenizer.ggml.eot_token_id"] = uint32(3)
		}, func(t *testing.T, v Vocab) {
			if v.EOT != 3 || !slices.Equal(v.EOG, []int{4}) {
				t.Errorf("eot %d eog %v, want 3 [4]", v.EOT, v.EOG)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			kv := baseKV()
			c.edit(kv)
			v, err := VocabFromGGUF(metadata(t, kv))
			if err != nil {
				t.Fatalf("VocabFromGGUF: %v", err)
			}
			c.check(t, v)
			if _, err := New(v); err != nil {
				t.Errorf("New(VocabFromGGUF(...)): %v", err)
			}
		})
	}
}

func TestVocabFromGGUFErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(kv map[string]any)
		want string
	}{
		{"no model", func(kv map[string]any) { delete(kv, "tokenizer.ggml.model") }, "tokenizer.ggml.model is missing"},
		{"model not a string", func(kv map[string]any) { kv["tokenizer.ggml.model"] = uint32(1) }, "tokenizer.ggml.model is not a string"},
		{"rwkv model", func(kv map[string]any) { kv["tokenizer.ggml.model"] = "rwkv" }, `unsupported tokenizer model "rwkv"`},
		{"t5 charsmap of another type", func(kv map[string]any) {
			kv["tokenizer.ggml.model"], kv["tokenizer.ggml.precompiled_charsmap"] = "t5", []int32{1}
		}, "tokenizer.ggml.precompiled_charsmap is not an array of uint8 or int8"},
		{"t5 remove_extra_whitespaces not a bool", func(kv map[string]any) {
			kv["tokenizer.ggml.model"], kv["tokenizer.ggml.remove_extra_whitespaces"] = "t5", "yes"
		}, "tokenizer.ggml.remove_extra_whitespaces is not a bool"},
		{"gpt2 without merges", func(kv map[string]any) { kv["tokenizer.ggml.model"] = "gpt2" }, "tokenizer.ggml.merges is missing"},
		{"gpt2 with an unknown pre-tokenizer", func(kv map[string]any) {
			kv["tokenizer.ggml.model"], kv["tokenizer.ggml.merges"], kv["tokenizer.ggml.pre"] = "gpt2", []string{"a b"}, "tekken"
		}, `unsupported pre-tokenizer "tekken"`},
		{"gpt2 merges of another type", func(kv map[string]any) {
			kv["tokenizer.ggml.model"], kv["tokenizer.ggml.merges"] = "gpt2", []int32{1}
		}, "tokenizer.ggml.merges is not an array of strings"},
		{"pre of another type", func(kv map[string]any) {
			kv["tokenizer.ggml.model"], kv["tokenizer.ggml.merges"], kv["tokenizer.ggml.pre"] = "gpt2", []string{"a b"}, int32(1)
		}, "tokenizer.ggml.pre is not a string"},
		{"no tokens", func(kv map[string]any) { delete(kv, "tokenizer.ggml.tokens") }, "tokenizer.ggml.tokens is missing"},
		{"tokens not strings", func(kv map[string]any) { kv["tokenizer.ggml.tokens"] = []int32{1} }, "not an array of strings"},
		{"empty token list", func(kv map[string]any) { kv["tokenizer.ggml.tokens"] = []string{} }, "tokenizer.ggml.tokens is empty"},
		{"duplicate tokens", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"] = []string{"<unk>", "<s>", "</s>", "<0x0A>", "a", "a"}
		}, `tokens 4 and 5 are both "a"`},
		{"short scores", func(kv map[string]any) { kv["tokenizer.ggml.scores"] = []float32{0} }, "tokenizer.ggml.scores has 1 entries for 6 tokens"},
		{"scores of strings", func(kv map[string]any) { kv["tokenizer.ggml.scores"] = []string{"x"} }, "tokenizer.ggml.scores is not"},
		{"short types", func(kv map[string]any) { kv["tokenizer.ggml.token_type"] = []int32{1} }, "tokenizer.ggml.token_type has 1 entries"},
		{"types of floats", func(kv map[string]any) { kv["tokenizer.ggml.token_type"] = []float32{1} }, "tokenizer.ggml.token_type is not"},
		{"flag not a bool", func(kv map[string]any) { kv["tokenizer.ggml.add_bos_token"] = uint8(1) }, "tokenizer.ggml.add_bos_token is not a bool"},
		{"id not an integer", func(kv map[string]any) { kv["tokenizer.ggml.bos_token_id"] = "1" }, "tokenizer.ggml.bos_token_id is not an integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			kv := baseKV()
			c.edit(kv)
			md := metadata(t, kv)
			_, err := VocabFromGGUF(md)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("VocabFromGGUF: error %v, want one containing %q", err, c.want)
			}
			if _, err := FromGGUF(md); err == nil {
				t.Error("FromGGUF succeeded")
			}
		})
	}
}
