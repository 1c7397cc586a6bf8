package tokenizer

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// tok is one entry of a hand-built vocabulary.
type tok struct {
	text  string
	score float32
	typ   TokenType
}

// buildVocab returns a llama vocabulary: <unk>, <s>, </s> (ids 0-2), the 256
// byte tokens when withBytes (ids 3-258), then extra in order. Normal is the
// default type of extra entries.
func buildVocab(withBytes bool, extra ...tok) Vocab {
	v := Vocab{Model: ModelLlama, BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1, AddBOS: true}
	add := func(text string, score float32, typ TokenType) {
		v.Tokens = append(v.Tokens, text)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	add("<unk>", 0, Unknown)
	add("<s>", 0, Control)
	add("</s>", 0, Control)
	if withBytes {
		for b := range 256 {
			add(byteTokenText(byte(b)), 0, Byte)
		}
	}
	for _, e := range extra {
		typ := e.typ
		if typ == 0 {
			typ = Normal
		}
		add(e.text, e.score, typ)
	}
	return v
}

func mustNew(t *testing.T, v Vocab) *Tokenizer {
	t.Helper()
	tk, err := New(v)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tk
}

// texts turns ids back into token texts, for readable failures.
func texts(tk *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if tk.Valid(id) {
			out[i] = tk.Vocab().Tokens[id]
		} else {
			out[i] = "?"
		}
	}
	return out
}

func TestEncodeMerges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		vocab []tok
		space bool
		text  string
		want  []string
	}{
		{"higher score merges first", []tok{{"a", -5, 0}, {"b", -5, 0}, {"c", -5, 0}, {"ab", -2, 0}, {"bc", -1, 0}},
			false, "abc", []string{"a", "bc"}},
		{"higher score merges first, mirrored", []tok{{"a", -5, 0}, {"b", -5, 0}, {"c", -5, 0}, {"ab", -1, 0}, {"bc", -2, 0}},
			false, "abc", []string{"ab", "c"}},
		{"tie goes to the leftmost pair", []tok{{"a", -5, 0}, {"b", -5, 0}, {"c", -5, 0}, {"ab", -1, 0}, {"bc", -1, 0}},
			false, "abc", []string{"ab", "c"}},
		{"tie in a run of one letter", []tok{{"a", -5, 0}, {"aa", -1, 0}},
			false, "aaaaa", []string{"aa", "aa", "a"}},
		{"merged symbols merge again", []tok{{"a", -5, 0}, {"b", -5, 0}, {"c", -5, 0}, {"ab", -1, 0}, {"abc", -3, 0}},
			false, "abc", []string{"abc"}},
		{"merge order decides the segmentation", []tok{{"a", -9, 0}, {"b", -9, 0}, {"c", -9, 0}, {"d", -9, 0},
			{"ab", -1, 0}, {"bc", 0, 0}, {"cd", -0.5, 0}, {"abcd", 0, 0}},
			false, "abcd", []string{"a", "bc", "d"}},
		{"a pair made by a merge competes with the queued ones", []tok{{"a", -9, 0}, {"b", -9, 0}, {"c", -9, 0}, {"d", -9, 0},
			{"cd", -1, 0}, {"bcd", 5, 0}, {"ab", -2, 0}},
			false, "abcd", []string{"a", "bcd"}},
		{"space prefix and U+2581", []tok{{"▁", -5, 0}, {"a", -5, 0}, {"b", -5, 0}, {"▁a", -1, 0}, {"▁b", -1, 0}},
			true, "a b", []string{"▁a", "▁b"}},
		{"no space prefix when off", []tok{{"▁", -5, 0}, {"a", -5, 0}, {"▁a", -1, 0}},
			false, "a a", []string{"a", "▁a"}},
		{"tabs and newlines stay as they are", []tok{{"▁", -5, 0}, {"a", -5, 0}, {"\t", -5, 0}},
			false, "a\ta\n", []string{"a", "\t", "a", "<0x0A>"}},
		{"byte fallback for a missing character", []tok{{"a", -5, 0}},
			false, "aé", []string{"a", "<0xC3>", "<0xA9>"}},
		{"byte fallback for a 4-byte character", []tok{{"a", -5, 0}},
			false, "🦙", []string{"<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"}},
		{"known multi-byte character", []tok{{"é", -5, 0}, {"▁é", -1, 0}},
			true, "é", []string{"▁é"}},
		{"an invalid lead byte takes its announced length", []tok{{"a", -5, 0}},
			false, "a\xff\x80a\xe2", []string{"a", "<0xFF>", "<0x80>", "<0x61>", "<0xE2>"}},
		{"a lead byte swallows what follows", []tok{{"a", -5, 0}, {"\xe2aa", -1, 0}},
			false, "\xe2aaa", []string{"\xe2aa", "a"}},
		{"empty text", []tok{{"a", -5, 0}}, true, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := buildVocab(true, c.vocab...)
			v.AddSpacePrefix = c.space
			tk := mustNew(t, v)
			got := texts(tk, tk.Encode(c.text, EncodeOptions{}))
			if len(got) == 0 {
				got = nil
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

func TestEncodeWithoutByteTokens(t *testing.T) {
	t.Parallel()
	// No <0xXX> tokens: a single-byte token spells its byte, else UNK.
	v := buildVocab(false, tok{"a", -1, Normal}, tok{"\n", -1, Normal})
	tk := mustNew(t, v)
	got := tk.Encode("a\né", EncodeOptions{})
	want := []int{3, 4, 0, 0}
	if !slices.Equal(got, want) {
		t.Errorf("Encode = %v (%q), want %v", got, texts(tk, got), want)
	}
	// Without UNK either, unspellable bytes are dropped.
	v.UNK = -1
	tk = mustNew(t, v)
	if got := tk.Encode("aé", EncodeOptions{}); !slices.Equal(got, []int{3}) {
		t.Errorf("Encode without unk = %v, want [3]", got)
	}
}

func TestEncodeSpecial(t *testing.T) {
	t.Parallel()
	v := buildVocab(true,
		tok{"▁", -9, Normal}, tok{"H", -9, Normal}, tok{"i", -9, Normal}, tok{"▁Hi", -1, Normal}, tok{"Hi", -2, Normal},
		tok{"<|im_start|>", 0, UserDefined}, tok{"<|im", 0, Control}, tok{"<", -9, Normal}, tok{"s", -9, Normal},
		tok{">", -9, Normal}, tok{"/", -9, Normal},
	)
	v.AddSpacePrefix = true
	tk := mustNew(t, v)
	on := EncodeOptions{ParseSpecial: true}
	off := EncodeOptions{}
	cases := []struct {
		text string
		opts EncodeOptions
		want []string
	}{
		{"Hi", off, []string{"▁Hi"}},
		{"Hi", EncodeOptions{AddSpecial: true}, []string{"<s>", "▁Hi"}},
		{"<s>Hi", on, []string{"<s>", "▁Hi"}},
		{"<s>Hi", EncodeOptions{AddSpecial: true, ParseSpecial: true}, []string{"<s>", "<s>", "▁Hi"}},
		{"<s>Hi", off, []string{"▁", "<", "s", ">", "Hi"}},
		{"Hi</s>Hi", on, []string{"▁Hi", "</s>", "▁Hi"}},
		{"Hi</s>", on, []string{"▁Hi", "</s>"}},
		{"<s></s>", on, []string{"<s>", "</s>"}},
		{"<unk>", on, []string{"<unk>"}},
		{" <s> ", on, []string{"▁", "▁", "<s>", "▁", "▁"}},
		// UserDefined tokens cut the text even without ParseSpecial, and the
		// longer <|im_start|> wins over the Control token <|im inside it.
		{"<|im_start|>Hi", off, []string{"<|im_start|>", "▁Hi"}},
		{"<|im_start|>Hi", on, []string{"<|im_start|>", "▁Hi"}},
		{"<|imHi", on, []string{"<|im", "▁Hi"}},
		{"Hi<s>", EncodeOptions{AddSpecial: true, ParseSpecial: true}, []string{"<s>", "▁Hi", "<s>"}},
	}
	for _, c := range cases {
		got := texts(tk, tk.Encode(c.text, c.opts))
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %+v) = %q, want %q", c.text, c.opts, got, c.want)
		}
	}

	v.AddEOS = true
	tk = mustNew(t, v)
	if got := texts(tk, tk.Encode("", EncodeOptions{AddSpecial: true})); !slices.Equal(got, []string{"<s>", "</s>"}) {
		t.Errorf("Encode(\"\") with bos and eos = %q", got)
	}
}

func TestPartitionLongestFirst(t *testing.T) {
	t.Parallel()
	v := buildVocab(true, tok{"<a>", 0, Control}, tok{"<a><b>", 0, Control}, tok{"<b>", 0, Control})
	tk := mustNew(t, v)
	text := "x<a><b>y<b><a>"
	var got []string
	st := new(encodeState)
	if !tk.partition(st, text, EncodeOptions{ParseSpecial: true}, &canceller{}) {
		t.Fatal("partition stopped without a context")
	}
	for _, f := range st.frags {
		if f.token >= 0 {
			got = append(got, tk.Vocab().Tokens[f.token])
		} else {
			got = append(got, "raw:"+text[f.start:f.end])
		}
	}
	want := []string{"raw:x", "<a><b>", "raw:y", "<b>", "<a>"}
	if !slices.Equal(got, want) {
		t.Errorf("partition(%q) = %q, want %q", text, got, want)
	}
}

func TestEncodeLongInput(t *testing.T) {
	t.Parallel()
	// Every byte spelt: the encoding of any text decodes back to it.
	v := buildVocab(true, tok{"▁", -1, Normal}, tok{"ab", -2, Normal}, tok{"▁ab", -0.5, Normal})
	v.AddSpacePrefix = true
	tk := mustNew(t, v)
	text := strings.Repeat("ab ab\tcd é🦙 ", 500)
	ids := tk.Encode(text, EncodeOptions{})
	if got := tk.Decode(ids); got != " "+text {
		t.Errorf("Decode(Encode(text)) differs from text: %d bytes vs %d", len(got), len(text)+1)
	}
}

func TestEncodeChunked(t *testing.T) {
	t.Parallel()
	// Texts past the chunk limit (2 GiB in Encode) are cut at character
	// starts and still spell every byte.
	tk := mustNew(t, buildVocab(true, tok{"ab", -1, Normal}, tok{"é", -1, Normal}))
	text := strings.Repeat("abé🦙", 50)
	for _, limit := range []int{1, 2, 3, 5, 7, 64} {
		var s spmSession
		var out idBuffer
		if !s.encodeChunked(tk, []byte(text), &out, limit, &canceller{ctx: context.Background()}) {
			t.Fatalf("limit %d: encodeChunked stopped without a context to stop it", limit)
		}
		if got := tk.Decode(out.take()); got != text {
			t.Errorf("limit %d: decoded %q, want %q", limit, got, text)
		}
	}
}

func TestEncodeContinuation(t *testing.T) {
	t.Parallel()
	tok := loadModel(t, "stories260K.gguf")
	full := tok.Encode("Once upon a time, there was", EncodeOptions{})
	head := tok.Encode("Once upon a time", EncodeOptions{})
	tail := tok.Encode(", there was", EncodeOptions{Continuation: true})
	if got := append(append([]int{}, head...), tail...); !slices.Equal(got, full) {
		t.Fatalf("head+continuation = %v, want %v", got, full)
	}
	if plain := tok.Encode(", there was", EncodeOptions{}); slices.Equal(plain, tail) {
		t.Fatalf("without Continuation the text should get a space prefix: %v", plain)
	}
}

func TestEncodePlainSpans(t *testing.T) {
	t.Parallel()
	tk := loadVocab(t, "qwen2")
	text := "<|im_start|>user\nsay <|im_end|> and <|im_start|>[PAD151650]<|im_end|>\n"
	at := func(sub string, nth int) Span {
		i := -1
		for range nth + 1 {
			i += 1 + strings.Index(text[i+1:], sub)
		}
		return Span{i, i + len(sub)}
	}
	userEnd, userStart := at("<|im_end|>", 0), at("<|im_start|>", 1)
	on := EncodeOptions{ParseSpecial: true}
	full := tk.Encode(text, on)
	with := tk.Encode(text, EncodeOptions{ParseSpecial: true, Plain: []Span{userEnd, userStart}})
	count := func(ids []int, text string) int {
		n := 0
		for _, id := range ids {
			if tk.Vocab().Tokens[id] == text {
				n++
			}
		}
		return n
	}
	if count(full, "<|im_start|>") != 2 || count(full, "<|im_end|>") != 2 {
		t.Fatalf("without spans: %v", texts(tk, full))
	}
	// The spanned occurrences are text; the template's stay tokens; the
	// user-defined [PAD151650] matches either way.
	if count(with, "<|im_start|>") != 1 || count(with, "<|im_end|>") != 1 || count(with, "[PAD151650]") != 1 {
		t.Errorf("with spans: %q", texts(tk, with))
	}
	if got := tk.Decode(with); got != strings.ReplaceAll(strings.Replace(text, "<|im_start|>", "", 1), "<|im_end|>\n", "\n") {
		t.Errorf("Decode = %q: the spanned texts should decode as text", got)
	}
	// The words around a span merge as in the whole text: the plain part
	// encodes as ParseSpecial off would.
	plain := tk.Encode(" <|im_end|> and", EncodeOptions{})
	if !containsRun(with, plain) {
		t.Errorf("with spans %v lacks the plain encoding %v of the spanned text", with, plain)
	}
	// Unsorted, overlapping and empty spans are normalised.
	messy := tk.Encode(text, EncodeOptions{ParseSpecial: true, Plain: []Span{userStart, {userEnd.Start, userEnd.Start + 2}, userEnd, {3, 3}}})
	if !slices.Equal(messy, with) {
		t.Errorf("messy spans: %q, want %q", texts(tk, messy), texts(tk, with))
	}
	if got := tk.ControlTexts(); !slices.Contains(got, "<|im_start|>") || slices.Contains(got, "[PAD151650]") || len(got[0]) < len(got[len(got)-1]) {
		t.Errorf("ControlTexts = %q: want the control tokens, longest first, without user-defined ones", got)
	}
}

func containsRun(ids, run []int) bool {
	for i := 0; i+len(run) <= len(ids); i++ {
		if slices.Equal(ids[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
