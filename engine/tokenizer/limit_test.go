package tokenizer

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestMaxTokensExact encodes texts under limits around their token counts:
// a limit the text fits gives exactly Encode's ids, a smaller one a
// TooLongError whose Tokens is more than the limit and no more than the
// text really has (it is a lower bound). Long runs without separators
// exercise the per-word bounds, ordinary text the stop after each word.
func TestMaxTokensExact(t *testing.T) {
	t.Parallel()
	for _, set := range vocabSets {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			tk := loadVocab(t, set)
			rng := rand.New(rand.NewPCG(3, uint64(len(set))))
			texts := []string{
				corpus(t, 16<<10),
				strings.Repeat("a", 40000),
				strings.Repeat(" ", 40000),
				base64Blob(40000),
				randomLetters(rng, 40000),
				glueTokens(tk, rng, 2000),
				"<s>hello</s> <|im_start|>user\nhi<|im_end|>" + corpus(t, 2000),
			}
			for _, c := range readVocabCases(t, set)[:10] {
				texts = append(texts, c.text)
			}
			for _, text := range texts {
				for _, opts := range []EncodeOptions{{}, {AddSpecial: true, ParseSpecial: true}} {
					want := tk.Encode(text, opts)
					n := len(want)
					for _, limit := range []int{n + 1, n, n - 1, n / 2, n / 10, 2, 1} {
						if limit < 1 {
							continue
						}
						o := opts
						o.MaxTokens = limit
						got, err := tk.EncodeContext(context.Background(), text, o)
						if n <= limit {
							if err != nil || !slices.Equal(got, want) {
								t.Errorf("%q with MaxTokens %d (it has %d): %d tokens, err %v; want Encode's ids",
									trim(text), limit, n, len(got), err)
							}
							continue
						}
						var tooLong *TooLongError
						if !errors.As(err, &tooLong) || !errors.Is(err, ErrTooManyTokens) || got != nil {
							t.Errorf("%q with MaxTokens %d (it has %d): %d tokens, err %v; want a TooLongError",
								trim(text), limit, n, len(got), err)
							continue
						}
						if tooLong.Tokens <= limit || tooLong.Tokens > n || tooLong.MaxTokens != limit || tooLong.Bytes != len(text) {
							t.Errorf("%q with MaxTokens %d (it has %d): %+v; want Tokens in (limit, %d]",
								trim(text), limit, n, *tooLong, n)
						}
					}
				}
			}
		})
	}
}

// prefixBytes returns how many bytes of text its first n tokens cover,
// encoding no more than the first max bytes of it.
func prefixBytes(t *testing.T, tk *Tokenizer, text string, n, max int) int {
	t.Helper()
	ids := tk.Encode(text[:min(len(text), max)], EncodeOptions{})
	if len(ids) < n {
		t.Fatalf("the first %d bytes have %d tokens, fewer than %d", max, len(ids), n)
	}
	return len(tk.Decode(ids[:n]))
}

// TestMaxTokensStopsEarly measures how much of an 8 MiB prompt of ordinary
// text encoding merges before it refuses it: nothing where its length
// alone rules it out, and otherwise about the limit's worth of text.
func TestMaxTokensStopsEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes 8 MiB prompts")
	}
	t.Parallel()
	const size = 8 << 20
	text := corpus(t, size)
	for _, set := range runVocabs {
		tk := loadVocab(t, set)
		// Longer than MaxTokens x MaxTokenBytes: refused before merging.
		short := size / tk.MaxTokenBytes() / 2
		_, err := tk.EncodeContext(context.Background(), text, EncodeOptions{MaxTokens: short})
		var tooLong *TooLongError
		if !errors.As(err, &tooLong) || tooLong.Encoded != 0 {
			t.Errorf("%s: %d bytes with MaxTokens %d (MaxTokenBytes %d): err %v; want refused with nothing merged",
				set, size, short, tk.MaxTokenBytes(), err)
		}

		// A limit the length bound allows: merging stops after it.
		limit := size/tk.MaxTokenBytes() + 1000
		prefix := prefixBytes(t, tk, text, limit, 8*limit)
		_, err = tk.EncodeContext(context.Background(), text, EncodeOptions{MaxTokens: limit})
		if !errors.As(err, &tooLong) {
			t.Fatalf("%s: %d bytes with MaxTokens %d: err %v, want a TooLongError", set, size, limit, err)
		}
		t.Logf("%s: MaxTokens %d: refused %d bytes after merging %d (the first %d tokens cover %d)",
			set, limit, size, tooLong.Encoded, limit, prefix)
		// One word or chunk past the limit at most.
		if tooLong.Encoded > prefix+4096 || tooLong.Encoded < prefix {
			t.Errorf("%s: merged %d bytes before stopping, want %d and at most a word more", set, tooLong.Encoded, prefix)
		}
	}
}

// TestMaxTokensGiantWord sends 8 MiB without a separator under a 128k
// limit, which the MaxTokenBytes bound (128 for Llama 3, Qwen 2) cannot
// refuse: the longest token its bytes can spell refuses it before merging
// anything. A base64 blob is one word only for SentencePiece; the BPE
// pre-tokenizers cut it at digits and '+' and '/', and merging stops after
// the limit's worth of words.
func TestMaxTokensGiantWord(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 8 MiB prompts")
	}
	t.Parallel()
	const size, limit = 8 << 20, 128 << 10
	rng := rand.New(rand.NewPCG(5, 5))
	inputs := []struct{ name, text string }{
		{"a-run", strings.Repeat("a", size)},
		{"letters", randomLetters(rng, size)},
		{"base64", base64Blob(size)},
	}
	for _, set := range runVocabs {
		tk := loadVocab(t, set)
		for _, in := range inputs {
			_, err := tk.EncodeContext(context.Background(), in.text, EncodeOptions{MaxTokens: limit})
			var tooLong *TooLongError
			if !errors.As(err, &tooLong) {
				t.Errorf("%s %s: err %v, want a TooLongError", set, in.name, err)
				continue
			}
			want := 0
			if in.name == "base64" && tk.bpe != nil {
				want = prefixBytes(t, tk, in.text, limit, 1<<20)
			}
			t.Logf("%s %s: at least %d tokens, %d bytes merged (want %d)", set, in.name, tooLong.Tokens, tooLong.Encoded, want)
			if tooLong.Encoded > want+4096 {
				t.Errorf("%s %s: merged %d bytes before refusing, want %d", set, in.name, tooLong.Encoded, want)
			}
		}
	}
}

// TestLongestWithin checks the finer bound's vocabulary scan on its own:
// the longest token of only 'a's, and at least 1 for an empty set.
func TestLongestWithin(t *testing.T) {
	t.Parallel()
	for _, set := range runVocabs {
		tk := loadVocab(t, set)
		var set1 [256]bool
		set1['a'] = true
		want := 1
		for id := range tk.Size() {
			text := string(tk.Piece(id))
			if tk.Vocab().Types[id] == Normal && strings.Trim(text, "a") == "" && !strings.Contains(tk.Vocab().Tokens[id], spaceMark) {
				want = max(want, len(text))
			}
		}
		if got := tk.longestWithin(&set1); got != want {
			t.Errorf("%s: longest token of 'a's = %d, want %d", set, got, want)
		}
		if got := tk.longestWithin(new([256]bool)); got != 1 {
			t.Errorf("%s: longest token of no bytes = %d, want 1", set, got)
		}
	}
}

// TestTooLongError checks the error's text and identity.
func TestTooLongError(t *testing.T) {
	t.Parallel()
	err := error(&TooLongError{MaxTokens: 10, Tokens: 12, Encoded: 40, Bytes: 100})
	if !errors.Is(err, ErrTooManyTokens) {
		t.Error("TooLongError is not ErrTooManyTokens")
	}
	if got, want := err.Error(), "text of 100 bytes has at least 12 tokens, more than the limit of 10"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestEncodeIgnoresMaxTokens: Encode has no error to return, so it encodes
// everything.
func TestEncodeIgnoresMaxTokens(t *testing.T) {
	t.Parallel()
	tk := loadVocab(t, "llama-bpe")
	text := corpus(t, 4096)
	if got, want := tk.Encode(text, EncodeOptions{MaxTokens: 3}), tk.Encode(text, EncodeOptions{}); !slices.Equal(got, want) {
		t.Errorf("Encode with MaxTokens 3 gave %d tokens, want all %d", len(got), len(want))
	}
}

// TestGiantWordCancelled cancels a context before merging a 1 MiB word and
// wants the merge to notice within one check interval.
func TestGiantWordCancelled(t *testing.T) {
	t.Parallel()
	word := strings.Repeat("a", 1<<20)
	for _, set := range []string{"llama-bpe", "llama-spm"} {
		tk := loadVocab(t, set)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c := canceller{ctx: ctx, done: ctx.Done()}
		st := new(encodeState)
		var ok bool
		if tk.bpe != nil {
			ok = st.bpe.encodeWord(tk, tk.bpe, word, &st.out, &c)
		} else {
			ok = st.spm.encodeChunk(tk, []byte(word), &st.out, &c)
		}
		if ok || !errors.Is(c.err, context.Canceled) || st.out.n != 0 {
			t.Errorf("%s: merging 1 MiB with a cancelled context: ok %v, err %v, %d tokens out", set, ok, c.err, st.out.n)
		}
	}
}
