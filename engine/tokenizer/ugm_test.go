package tokenizer

import (
	"slices"
	"testing"
	"unicode/utf8"
)

// ugmVocab is a small unigram vocabulary: <pad>, </s>, <unk> (ids 0-2),
// then "▁" 3, "▁a" 4, "b" 5, "▁ab" 6, "a" 7, "<u>" 8 (UserDefined), "c" 9.
func ugmVocab(prefix, merge bool) Vocab {
	v := Vocab{Model: ModelT5, BOS: -1, EOS: 1, UNK: 2, PAD: 0, EOT: -1, SEP: -1,
		AddSpacePrefix: prefix, RemoveExtraWhitespaces: merge}
	for _, e := range []tok{
		{"<pad>", 0, Control}, {"</s>", 0, Control}, {"<unk>", 0, Unknown},
		{"▁", -4, Normal}, {"▁a", -1, Normal}, {"b", -2, Normal}, {"▁ab", -2.5, Normal},
		{"a", -1.5, Normal}, {"<u>", -100, UserDefined}, {"c", -3, Normal},
	} {
		v.Tokens = append(v.Tokens, e.text)
		v.Scores = append(v.Scores, e.score)
		v.Types = append(v.Types, e.typ)
	}
	return v
}

// TestEncodeUGM checks the best-path search and the whitespace rules on a
// vocabulary small enough to work out by hand.
func TestEncodeUGM(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		prefix, merge bool
		text          string
		want          []int
	}{
		{"best total score wins over longest first", true, false, "ab", []int{6}},
		{"cheaper split beats one token", true, false, "abc", []int{6, 9}},
		{"no prefix without add_space_prefix", false, false, "ab", []int{7, 5}},
		{"spaces kept one by one", false, false, "a  b", []int{7, 3, 3, 5}},
		{"unknown characters fold into one unk", true, false, "zzb", []int{3, 2, 5}},
		{"merge drops ends and collapses runs", false, true, "  a   b  ", []int{4, 3, 5}},
		{"user-defined token cut out and kept", false, false, "a<u>b", []int{7, 8, 5}},
		{"prefix again after a user-defined token", true, false, "a<u>a", []int{4, 8, 4}},
		{"invalid byte is U+FFFD, unknown", false, false, "\xffb", []int{2, 5}},
		{"only spaces merged away", false, true, "   ", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk, err := New(ugmVocab(c.prefix, c.merge))
			if err != nil {
				t.Fatal(err)
			}
			got := tk.Encode(c.text, EncodeOptions{})
			if !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
			}
		})
	}
}

// TestUGMSpecialAndDecode checks nomic-bert-moe's special tokens (<s> 0
// first and </s> 2 last with AddSpecial, as the GGUF asks; "<s>" in text
// only with ParseSpecial) and that decoding gives the normalised text with
// U+2581 as spaces.
func TestUGMSpecialAndDecode(t *testing.T) {
	t.Parallel()
	tk := loadVocab(t, "nomic-bert-moe")
	plain := tk.Encode("Hello world", EncodeOptions{})
	framed := tk.Encode("Hello world", EncodeOptions{AddSpecial: true})
	if want := append(append([]int{0}, plain...), 2); !slices.Equal(framed, want) {
		t.Errorf("AddSpecial: %v, want %v", framed, want)
	}
	if got := tk.Encode("<s>", EncodeOptions{ParseSpecial: true}); !slices.Equal(got, []int{0}) {
		t.Errorf("ParseSpecial <s>: %v, want [0]", got)
	}
	if got := tk.Encode("<s>", EncodeOptions{}); slices.Contains(got, 0) {
		t.Errorf("<s> as text gave the BOS id: %v", got)
	}
	cases := []struct{ text, want string }{
		{"Hello world", " Hello world"},
		{"  Hello   world  ", " Hello world"},
		{"café ½", " café 1⁄2"},
	}
	for _, c := range cases {
		if got := tk.Decode(tk.Encode(c.text, EncodeOptions{AddSpecial: true})); got != c.want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", c.text, got, c.want)
		}
	}
}

// FuzzEncodeUGM encodes arbitrary text with nomic-bert-moe's unigram
// vocabulary: it never panics, gives valid ids, frames them with <s> and
// </s>, decodes to valid UTF-8, and agrees with EncodeContext.
func FuzzEncodeUGM(f *testing.F) {
	f.Add("Hello, world! ½ ²  \u3000 \t\n")
	f.Add("a\xffb\xc0\x80 \xed\xa0\x80\xf4\x90\x80\x80 \x00x")
	f.Add("<s>text</s><unk>\u2581\u2581")
	tk := loadVocab(f, "nomic-bert-moe")
	f.Fuzz(func(t *testing.T, a string) {
		ids := tk.Encode(a, EncodeOptions{AddSpecial: true, ParseSpecial: true})
		for _, id := range ids {
			if !tk.Valid(id) {
				t.Fatalf("Encode(%q) gave invalid id %d", a, id)
			}
		}
		if len(ids) < 2 || ids[0] != tk.BOS() || ids[len(ids)-1] != tk.EOS() {
			t.Fatalf("Encode(%q) = %v, want <s> ... </s>", a, ids)
		}
		if d := tk.Decode(ids); !utf8.ValidString(d) {
			t.Errorf("Decode gave invalid UTF-8 %q", d)
		}
		got, err := tk.EncodeContext(t.Context(), a, EncodeOptions{AddSpecial: true, ParseSpecial: true, MaxTokens: len(ids)})
		if err != nil || !slices.Equal(got, ids) {
			t.Errorf("EncodeContext(%q) = %v, %v; want %v", a, got, err, ids)
		}
	})
}
