package tokenizer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncodeRoundTrip encodes arbitrary text with the BPE vocabularies,
// which add no space prefix and spell every byte: decoding gives the text
// back (for valid UTF-8 without U+2581, which Gemma 4 reads as a space), and
// EncodeContext agrees with Encode. The seeds are llama.cpp's test strings.
func FuzzEncodeRoundTrip(f *testing.F) {
	for _, set := range []string{"llama-bpe", "deepseek-llm"} {
		for _, c := range readVocabCasesTB(f, set) {
			f.Add(c.text)
		}
	}
	f.Add("a\xffb\xc0\x80 \xed\xa0\x80  \u3000\n\n x")
	sets := []string{"llama-bpe", "qwen35", "deepseek-llm", "falcon", "gemma-4"}
	toks := make([]*Tokenizer, len(sets))
	lossless := make([]bool, len(sets))
	for i, set := range sets {
		toks[i] = loadVocab(f, set)
		lossless[i] = spellsEveryByte(toks[i])
	}
	if lossless[3] {
		f.Fatal("falcon spells every byte; llama.cpp drops 14 control bytes with it")
	}
	f.Fuzz(func(t *testing.T, text string) {
		for i, tk := range toks {
			ids := tk.Encode(text, EncodeOptions{})
			for _, id := range ids {
				if !tk.Valid(id) {
					t.Fatalf("%s: Encode(%q) gave invalid id %d", sets[i], text, id)
				}
			}
			if !lossless[i] {
				continue // Falcon has no token for some control bytes; llama.cpp drops them too
			}
			if utf8.ValidString(text) && !strings.Contains(text, spaceMark) {
				if got := tk.Decode(ids); got != text {
					t.Errorf("%s: Decode(Encode(%q)) = %q", sets[i], text, got)
				}
			}
			if min := (len(text) + tk.MaxTokenBytes() - 1) / tk.MaxTokenBytes(); utf8.ValidString(text) && len(ids) < min {
				t.Errorf("%s: %d tokens for %d bytes, below the MaxTokenBytes bound", sets[i], len(ids), len(text))
			}
		}
	})
}

// spellsEveryByte reports whether every byte has a token (a byte-level
// character or a <0xXX> token), so that no input byte can be dropped.
func spellsEveryByte(tk *Tokenizer) bool {
	for b := range 256 {
		if tk.byteLevel && int(tk.bpe.byteSymbol[b]) >= tk.Size() {
			return false
		}
		if !tk.byteLevel && tk.byteToken[b] < 0 {
			return false
		}
	}
	return true
}

// FuzzSPMCuts checks that merging SentencePiece text in chunks gives what
// merging it whole gives.
func FuzzSPMCuts(f *testing.F) {
	for _, c := range readVocabCasesTB(f, "llama-spm") {
		f.Add(c.text)
	}
	tk := loadVocab(f, "llama-spm")
	whole := *tk
	whole.spmCuts = spmCuts{}
	f.Fuzz(func(t *testing.T, text string) {
		got, want := tk.Encode(text, EncodeOptions{}), whole.Encode(text, EncodeOptions{})
		if !slices.Equal(got, want) {
			t.Errorf("Encode(%q) in chunks = %v, whole = %v", text, got, want)
		}
	})
}

// FuzzEncodeWPM encodes arbitrary text with the WordPiece vocabulary
// (bert-bge): it never panics, gives valid ids, and is word-local, as
// WordPiece is: text, a space and more text encode to the two encodings
// one after the other. EncodeContext agrees with Encode and honours a
// token limit of one less.
func FuzzEncodeWPM(f *testing.F) {
	for _, c := range readVocabCasesTB(f, "bert-bge") {
		f.Add(c.text, "x")
	}
	f.Add("a\xffb\xc0\x80 \xed\xa0\x80\xf4\x90\x80\x80  \u3000\n", "\xe2\x96")
	f.Add("[CLS]hello[SEP]", "Ǆ\u0301漢\U0002B820")
	tk := loadVocab(f, "bert-bge")
	f.Fuzz(func(t *testing.T, a, b string) {
		ids := tk.Encode(a, EncodeOptions{AddSpecial: true})
		for _, id := range ids {
			if !tk.Valid(id) {
				t.Fatalf("Encode(%q) gave invalid id %d", a, id)
			}
		}
		if len(ids) < 2 || ids[0] != tk.BOS() || ids[len(ids)-1] != tk.Vocab().SEP {
			t.Fatalf("Encode(%q) = %v, want [CLS] ... [SEP]", a, ids)
		}
		if d := tk.Decode(ids); !utf8.ValidString(d) {
			t.Errorf("Decode gave invalid UTF-8 %q", d)
		}
		joined := tk.Encode(a+" "+b, EncodeOptions{})
		apart := append(tk.Encode(a, EncodeOptions{}), tk.Encode(b, EncodeOptions{})...)
		if !slices.Equal(joined, apart) {
			t.Errorf("Encode(%q + \" \" + %q) = %v, apart %v", a, b, joined, apart)
		}
		got, err := tk.EncodeContext(context.Background(), a, EncodeOptions{AddSpecial: true, MaxTokens: len(ids)})
		if err != nil || !slices.Equal(got, ids) {
			t.Errorf("EncodeContext(%q, MaxTokens %d) = %v, %v; want %v", a, len(ids), got, err, ids)
		}
		if _, err := tk.EncodeContext(context.Background(), a, EncodeOptions{AddSpecial: true, MaxTokens: len(ids) - 1}); !errors.Is(err, ErrTooManyTokens) {
			t.Errorf("EncodeContext(%q, MaxTokens %d): error %v, want ErrTooManyTokens", a, len(ids)-1, err)
		}
	})
}
