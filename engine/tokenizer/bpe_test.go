package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// bpeVocab builds a gpt2 vocabulary: the 256 byte-alphabet tokens (id b for
// byte b), then extra tokens in order; merges as given.
func bpeVocab(pre string, merges []string, extra ...tok) Vocab {
	v := Vocab{Model: ModelGPT2, Pre: pre, Merges: merges, BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1}
	for b := range 256 {
		v.Tokens = append(v.Tokens, byteText[b])
		v.Types = append(v.Types, Normal)
	}
	for _, e := range extra {
		typ := e.typ
		if typ == 0 {
			typ = Normal
		}
		v.Tokens = append(v.Tokens, e.text)
		v.Types = append(v.Types, typ)
	}
	v.Scores = make([]float32, len(v.Tokens))
	return v
}

func TestByteAlphabet(t *testing.T) {
	t.Parallel()
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteRune[b]
		if seen[r] || !unicode.IsPrint(r) || r == ' ' {
			t.Errorf("byte %#x maps to %U, not a fresh printable code point", b, r)
		}
		seen[r] = true
		if got := decodeByteLevel(byteText[b]); len(got) != 1 || got[0] != byte(b) {
			t.Errorf("decodeByteLevel(%q) = %v, want [%d]", byteText[b], got, b)
		}
	}
	if byteText[' '] != "\u0120" || byteText['\n'] != "\u010a" || byteText['a'] != "a" {
		t.Errorf("space, newline, a map to %q %q %q, want U+0120 U+010A a", byteText[' '], byteText['\n'], byteText['a'])
	}
	if got := string(decodeByteLevel("a\u4e00")); got != "a[UNK_BYTE_0xe4b880a\u4e00]" {
		t.Errorf("decodeByteLevel of a code point outside the alphabet = %q", got)
	}
}

func TestBPEMerges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		merges []string
		extra  []tok
		ignore bool
		text   string
		want   []string
	}{
		{"lowest rank merges first", []string{"b c", "a b"}, []tok{{"ab", 0, 0}, {"bc", 0, 0}}, false,
			"abc", []string{"a", "bc"}},
		{"tie in a run goes to the leftmost pair", []string{"a a"}, []tok{{"aa", 0, 0}}, false,
			"aaaaa", []string{"aa", "aa", "a"}},
		{"merged symbols merge again", []string{"a b", "ab c"}, []tok{{"ab", 0, 0}, {"abc", 0, 0}}, false,
			"abc", []string{"abc"}},
		{"words do not merge across the pre-tokenizer's split", []string{"a \u0120", "\u0120 b"}, []tok{{"a\u0120", 0, 0}, {"\u0120b", 0, 0}}, false,
			"a b", []string{"a", "\u0120b"}},
		{"ignore_merges takes a whole-word token", []string{"a b"}, []tok{{"ab", 0, 0}, {"abc", 0, 0}}, true,
			"abc", []string{"abc"}},
		{"without ignore_merges the same word merges", []string{"a b"}, []tok{{"ab", 0, 0}, {"abc", 0, 0}}, false,
			"abc", []string{"ab", "c"}},
		{"a merge result the vocabulary lacks falls back to its one-byte tokens", []string{"a b"}, nil, false,
			"ab", []string{"a", "b"}},
		{"multi-byte characters merge from their bytes", []string{"\u00c3 \u00a9"}, []tok{{"\u00c3\u00a9", 0, 0}}, false,
			"\u00e9", []string{"\u00c3\u00a9"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := bpeVocab("gpt-2", c.merges, c.extra...)
			v.IgnoreMerges = c.ignore
			tk := mustNew(t, v)
			got := texts(tk, tk.Encode(c.text, EncodeOptions{}))
			if !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
			}
			if dec := tk.Decode(tk.Encode(c.text, EncodeOptions{})); dec != c.text {
				t.Errorf("Decode(Encode(%q)) = %q", c.text, dec)
			}
		})
	}
}

func TestBPESpecialTokens(t *testing.T) {
	t.Parallel()
	v := bpeVocab("qwen2", nil, tok{"<|im_start|>", 0, Control}, tok{"<think>", 0, UserDefined})
	tk := mustNew(t, v)
	start, think := 256, 257
	if got := tk.Encode("<|im_start|>", EncodeOptions{ParseSpecial: true}); !slices.Equal(got, []int{start}) {
		t.Errorf("control token with ParseSpecial = %v", got)
	}
	if got := tk.Encode("<|im_start|>", EncodeOptions{}); slices.Contains(got, start) {
		t.Errorf("control token matched out of plain text: %v", got)
	}
	if got := tk.Encode("a<think>b", EncodeOptions{}); !slices.Equal(got, []int{'a', think, 'b'}) {
		t.Errorf("user-defined token in plain text = %v, want it matched", got)
	}
	if string(tk.Piece(start)) != "" || string(tk.Piece(think)) != "<think>" {
		t.Errorf("pieces %q %q: control renders as nothing, user-defined verbatim", tk.Piece(start), tk.Piece(think))
	}
}

func TestStripAttributes(t *testing.T) {
	t.Parallel()
	v := buildVocab(true, tok{"<|end|>", 0, Control}, tok{"<|l|>", 0, Control}, tok{"\u2581", 0, Normal}, tok{"x", 0, Normal})
	end, l := len(v.Tokens)-4, len(v.Tokens)-3
	v.RStrip = []int{end}
	v.LStrip = []int{l}
	tk := mustNew(t, v)
	on := EncodeOptions{ParseSpecial: true}
	cases := []struct {
		text string
		want []string
	}{
		{"x<|end|> \n\tx", []string{"x", "<|end|>", "x"}},
		{"x<|end|>   ", []string{"x", "<|end|>"}},
		{"x \n <|l|>x", []string{"x", "<|l|>", "x"}},
		{"   <|l|>", []string{"<|l|>"}},
		// <|end|> (longer) cuts first and eats the space after it; <|l|> then
		// starts its fragment, so it has nothing on its left to strip.
		{"x <|end|> <|l|> x", []string{"x", "\u2581", "<|end|>", "<|l|>", "\u2581", "x"}},
		{"x<|end|>", []string{"x", "<|end|>"}},
	}
	for _, c := range cases {
		if got := texts(tk, tk.Encode(c.text, on)); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestSpecialTrie(t *testing.T) {
	t.Parallel()
	tr := newSpecialTrie([]string{"<a>", "<a><b>", "<b>", "x"})
	var found []bool
	c := &canceller{}
	for _, tc := range []struct {
		text string
		want []bool
	}{
		{"", []bool{false, false, false, false}},
		{"<a", []bool{false, false, false, false}},
		{"..<a><b..", []bool{true, false, false, false}},
		{"<a><b>", []bool{true, true, true, false}},
		{"yx<b>", []bool{false, false, true, true}},
	} {
		tr.find(tc.text, &found, 4, c)
		if !slices.Equal(found, tc.want) {
			t.Errorf("find(%q) = %v, want %v", tc.text, found, tc.want)
		}
	}
}

func TestDecodeRuneLikeLlamaCpp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		r    rune
		size int
	}{
		{"a", 'a', 1},
		{"\u00e9", 0xe9, 2},
		{"\u20ac", 0x20ac, 3},
		{"\U0001f999", 0x1f999, 4},
		{"\x80", utf8.RuneError, 1},     // lone continuation
		{"\xc3", utf8.RuneError, 1},     // truncated
		{"\xc3a", utf8.RuneError, 1},    // bad continuation
		{"\xc0\x80", 0, 2},              // overlong: decodes, as llama.cpp's does
		{"\xed\xa0\x80", 0xd800, 3},     // surrogate: decodes
		{"\xf8\x80\x80\x80", 0xfffd, 1}, // no such lead byte
	}
	for _, c := range cases {
		if r, n := decodeRune(c.in, 0); r != c.r || n != c.size {
			t.Errorf("decodeRune(%q) = %U, %d; want %U, %d", c.in, r, n, c.r, c.size)
		}
	}
	if got := laxNormalize("a\xffb\xc0\x80c\xed\xa0\x80"); got != "a\ufffdb\x00c\xed\xa0\x80" {
		t.Errorf("laxNormalize = %q", got)
	}
	if !laxValid("ok \u20ac") || laxValid("a\xff") || laxValid("\xc0\x80") || !laxValid("\xed\xa0\x80") {
		t.Error("laxValid disagrees with decodeRune and the encoder")
	}
}

func TestClassOfMatchesUnicode(t *testing.T) {
	t.Parallel()
	for r := rune(0); r <= unicode.MaxRune; r += 7 {
		if got, want := classOf(r), classOfSlow(r); got != want {
			t.Fatalf("classOf(%U) = %b, unicode says %b", r, got, want)
		}
	}
	if classOf(-1) != 0 || classOf(unicode.MaxRune+1) != 0 {
		t.Error("out-of-range code points have classes")
	}
	if classOf('\u3000')&classSpace == 0 || classOf('\u0085')&classSpace == 0 || classOf('\x1c')&classSpace != 0 {
		t.Error("whitespace is not llama.cpp's set (White_Space)")
	}
}

func TestPreTokenizersListed(t *testing.T) {
	t.Parallel()
	names := PreTokenizers()
	for _, want := range []string{"llama-bpe", "qwen2", "qwen35", "smollm", "starcoder", "gpt-2", "deepseek-llm",
		"deepseek-coder", "falcon", "mpt", "refact", "command-r", "default"} {
		if !slices.Contains(names, want) {
			t.Errorf("PreTokenizers() lacks %q", want)
		}
	}
	if !slices.IsSorted(names) {
		t.Error("PreTokenizers() is not sorted")
	}
	for _, name := range names {
		if _, err := New(bpeVocab(name, nil)); err != nil {
			t.Errorf("New with pre %q: %v", name, err)
		}
	}
	if strings.Contains(strings.Join(names, ","), "tekken") {
		t.Error("tekken is listed but not implemented")
	}
}
