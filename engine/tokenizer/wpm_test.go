package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// wpmVocab is a small WordPiece vocabulary in llama.cpp's GGUF spelling:
// word starts carry U+2581, continuations ("##able") are plain.
func wpmVocab(edit func(v *Vocab)) Vocab {
	texts := []string{
		"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
		"▁un", "▁unaff", "aff", "able", "▁the", "▁a", "▁b", "▁e", "e", "▁é",
		"▁,", "▁!", "▁[", "▁]", "▁漢", "▁字", "▁hello", "▁ab", "▁x", "x", "▁th",
	}
	v := Vocab{Model: ModelBERT, BOS: 2, EOS: -1, UNK: 1, PAD: 0, EOT: -1, SEP: 3,
		AddBOS: true, AddSEP: true, Lowercase: true, StripAccents: true}
	for i, text := range texts {
		v.Tokens = append(v.Tokens, text)
		v.Scores = append(v.Scores, 0)
		typ := Normal
		if i < 5 {
			typ = Control
		}
		v.Types = append(v.Types, typ)
	}
	if edit != nil {
		edit(&v)
	}
	return v
}

func TestWPMEncode(t *testing.T) {
	t.Parallel()
	keepCase := func(v *Vocab) { v.Lowercase = false }
	keepAccents := func(v *Vocab) { v.StripAccents = false }
	cases := []struct {
		name string
		edit func(v *Vocab)
		text string
		opts EncodeOptions
		want []string
	}{
		{"longest match first", nil, "unaffable", EncodeOptions{}, []string{"▁unaff", "able"}},
		{"a word cut short is one UNK", nil, "unaffabley the", EncodeOptions{}, []string{"[UNK]", "▁the"}},
		{"no word start is UNK", nil, "able", EncodeOptions{}, []string{"[UNK]"}},
		{"lowercased", nil, "THE Hello", EncodeOptions{}, []string{"▁the", "▁hello"}},
		{"case kept", keepCase, "THE the", EncodeOptions{}, []string{"[UNK]", "▁the"}},
		{"accents stripped", nil, "é e\u0301 É", EncodeOptions{}, []string{"▁e", "▁e", "▁e"}},
		{"accents kept", keepAccents, "é e\u0301", EncodeOptions{}, []string{"▁é", "[UNK]"}},
		{"punctuation is a word", nil, "a,b!", EncodeOptions{}, []string{"▁a", "▁,", "▁b", "▁!"}},
		{"CJK ideographs are words", nil, "漢字", EncodeOptions{}, []string{"▁漢", "▁字"}},
		{"every whitespace splits", nil, "a\u3000b\tthe\u2028a\u00a0b", EncodeOptions{}, []string{"▁a", "▁b", "▁the", "▁a", "▁b"}},
		{"control, format and U+FFFD vanish", nil, "t\u0000h\u200be\ufeff \ufffd\u0001", EncodeOptions{}, []string{"▁the"}},
		{"invalid UTF-8 vanishes", nil, "th\xffe\xc0", EncodeOptions{}, []string{"▁the"}},
		{"empty", nil, "", EncodeOptions{}, nil},
		{"only spaces", nil, "  \n\t ", EncodeOptions{}, nil},
		{"special tokens added", nil, "the", EncodeOptions{AddSpecial: true}, []string{"[CLS]", "▁the", "[SEP]"}},
		{"special tokens on empty text", nil, "", EncodeOptions{AddSpecial: true}, []string{"[CLS]", "[SEP]"}},
		{"special text is text", nil, "[CLS]the", EncodeOptions{}, []string{"▁[", "[UNK]", "▁]", "▁the"}},
		{"special text parsed", nil, "[CLS]the[SEP]", EncodeOptions{ParseSpecial: true}, []string{"[CLS]", "▁the", "[SEP]"}},
		{"long word", nil, "a" + strings.Repeat("x", 1000), EncodeOptions{}, slices.Concat([]string{"▁a"}, slices.Repeat([]string{"x"}, 1000))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := mustNew(t, wpmVocab(c.edit))
			got := texts(tk, tk.Encode(c.text, c.opts))
			if !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

func TestWPMDecode(t *testing.T) {
	t.Parallel()
	tk := mustNew(t, wpmVocab(nil))
	cases := []struct {
		text string
		want string
	}{
		{"unaffable, the", " unaffable , the"},
		{"[CLS] a", " [ ] a"}, // Control tokens ([CLS], [UNK], [SEP]) render as nothing
		{"", ""},
	}
	for _, c := range cases {
		ids := tk.Encode(c.text, EncodeOptions{AddSpecial: true})
		if got := tk.Decode(ids); got != c.want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestWPMNew(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(v *Vocab)
		want string
	}{
		{"no unknown token", func(v *Vocab) { v.UNK = -1 }, "wordpiece vocabulary has no unknown token"},
		{"no separator to add", func(v *Vocab) { v.SEP = -1 }, "asks to add a sep token but has none"},
		{"separator outside", func(v *Vocab) { v.SEP = len(v.Tokens) }, "sep token id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(wpmVocab(c.edit))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: error %v, want one containing %q", err, c.want)
			}
		})
	}
	if tk := mustNew(t, wpmVocab(nil)); tk.MaxTokenBytes() < 1<<30 {
		t.Errorf("MaxTokenBytes = %d; one [UNK] stands for a word of any length", tk.MaxTokenBytes())
	}
}

// TestWPMLimits checks EncodeContext's token limit, [SEP] counted, and
// cancellation on a WordPiece vocabulary.
func TestWPMLimits(t *testing.T) {
	t.Parallel()
	tk := mustNew(t, wpmVocab(nil))
	text := strings.Repeat("unaffable the ", 5000) // 15,000 tokens and [CLS] [SEP]
	opts := EncodeOptions{AddSpecial: true}
	all := tk.Encode(text, opts)
	for _, limit := range []int{len(all), len(all) + 1} {
		opts.MaxTokens = limit
		got, err := tk.EncodeContext(context.Background(), text, opts)
		if err != nil || !slices.Equal(got, all) {
			t.Errorf("MaxTokens %d: %d tokens, error %v; want all %d", limit, len(got), err, len(all))
		}
	}
	for _, limit := range []int{1, 100, len(all) - 1} {
		opts.MaxTokens = limit
		got, err := tk.EncodeContext(context.Background(), text, opts)
		var tooLong *TooLongError
		if got != nil || !errors.As(err, &tooLong) || tooLong.Tokens <= limit {
			t.Errorf("MaxTokens %d: %d tokens, error %v; want a TooLongError", limit, len(got), err)
		} else if limit == 100 && tooLong.Encoded > 1000 {
			t.Errorf("MaxTokens 100: encoded %d bytes before stopping", tooLong.Encoded)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tk.EncodeContext(ctx, text, EncodeOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: error %v", err)
	}
}

// TestWPMBertBGE checks what llama.cpp resolves for bert-bge beyond the
// recordings: [CLS] text [SEP] with add_special, no EOS, and the pieces.
func TestWPMBertBGE(t *testing.T) {
	t.Parallel()
	tk := loadVocab(t, "bert-bge")
	v := tk.Vocab()
	if v.BOS != 101 || v.SEP != 102 || v.UNK != 100 || v.PAD != 0 || v.EOS != -1 || !v.AddSEP || v.AddEOS {
		t.Errorf("bos %d sep %d unk %d pad %d eos %d add_sep %v add_eos %v", v.BOS, v.SEP, v.UNK, v.PAD, v.EOS, v.AddSEP, v.AddEOS)
	}
	ids := tk.Encode("Hello, embeddings!", EncodeOptions{AddSpecial: true})
	got := texts(tk, ids)
	want := []string{"[CLS]", "▁hello", "▁,", "▁em", "bed", "ding", "s", "▁!", "[SEP]"}
	if !slices.Equal(got, want) {
		t.Errorf("Encode = %q, want %q", got, want)
	}
	if d := tk.Decode(ids); d != " hello , embeddings !" {
		t.Errorf("Decode = %q", d)
	}
}

func TestVocabFromGGUFBert(t *testing.T) {
	t.Parallel()
	tokens := make([]string, 110)
	types := make([]int32, len(tokens))
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("▁w%d", i), 1
	}
	for id, text := range map[int]string{0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"} {
		tokens[id], types[id] = text, 3
	}
	bert := func(kv map[string]any) {
		kv["tokenizer.ggml.model"] = "bert"
		kv["tokenizer.ggml.tokens"] = tokens
		kv["tokenizer.ggml.token_type"] = types
		delete(kv, "tokenizer.ggml.scores")
	}
	cases := []struct {
		name  string
		edit  func(kv map[string]any)
		check func(t *testing.T, v Vocab)
	}{
		{"defaults", func(map[string]any) {}, func(t *testing.T, v Vocab) {
			if v.BOS != 101 || v.EOS != -1 || v.UNK != 100 || v.SEP != 102 || v.PAD != 0 {
				t.Errorf("ids bos %d eos %d unk %d sep %d pad %d", v.BOS, v.EOS, v.UNK, v.SEP, v.PAD)
			}
			if !v.AddBOS || v.AddEOS || !v.AddSEP || v.AddSpacePrefix || !v.Lowercase || !v.StripAccents {
				t.Errorf("flags %+v", v)
			}
		}},
		{"add keys ignored, ids from keys", func(kv map[string]any) {
			kv["tokenizer.ggml.add_bos_token"] = false
			kv["tokenizer.ggml.add_eos_token"] = true
			kv["tokenizer.ggml.eos_token_id"] = uint32(102)
			kv["tokenizer.ggml.seperator_token_id"] = uint32(105)
			kv["tokenizer.ggml.cls_token_id"] = uint32(104)
		}, func(t *testing.T, v Vocab) {
			if !v.AddBOS || v.AddEOS || !v.AddSEP || v.EOS != 102 || v.SEP != 105 || v.BOS != 101 {
				t.Errorf("add_bos %v add_eos %v add_sep %v eos %d sep %d bos %d", v.AddBOS, v.AddEOS, v.AddSEP, v.EOS, v.SEP, v.BOS)
			}
		}},
		{"no lowercase: no accent stripping either", func(kv map[string]any) {
			kv["tokenizer.ggml.normalizer.lowercase"] = false
		}, func(t *testing.T, v Vocab) {
			if v.Lowercase || v.StripAccents {
				t.Errorf("lowercase %v strip_accents %v", v.Lowercase, v.StripAccents)
			}
		}},
		{"strip accents set apart", func(kv map[string]any) {
			kv["tokenizer.ggml.normalizer.lowercase"] = false
			kv["tokenizer.ggml.normalizer.strip_accents"] = true
		}, func(t *testing.T, v Vocab) {
			if v.Lowercase || !v.StripAccents {
				t.Errorf("lowercase %v strip_accents %v", v.Lowercase, v.StripAccents)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			kv := baseKV()
			bert(kv)
			c.edit(kv)
			md := metadata(t, kv)
			v, err := VocabFromGGUF(md)
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, v)
			if _, err := FromGGUF(md); err != nil {
				t.Errorf("FromGGUF: %v", err)
			}
		})
	}
	for _, c := range []struct {
		name string
		edit func(kv map[string]any)
		want string
	}{
		{"lowercase not a bool", func(kv map[string]any) { kv["tokenizer.ggml.normalizer.lowercase"] = "yes" }, "tokenizer.ggml.normalizer.lowercase is not a bool"},
		{"strip_accents not a bool", func(kv map[string]any) { kv["tokenizer.ggml.normalizer.strip_accents"] = int32(1) }, "tokenizer.ggml.normalizer.strip_accents is not a bool"},
		{"too small for an unknown token", func(kv map[string]any) {
			kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"] = tokens[:50], types[:50]
		}, "no unknown token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			kv := baseKV()
			bert(kv)
			c.edit(kv)
			_, err := FromGGUF(metadata(t, kv))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("FromGGUF: error %v, want one containing %q", err, c.want)
			}
		})
	}
}
