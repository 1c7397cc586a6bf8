package tokenizer

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeContextMatchesEncode(t *testing.T) {
	t.Parallel()
	for _, set := range []string{"llama-spm", "qwen2"} {
		tk := loadVocab(t, set)
		text := corpus(t, 64<<10) + " <|im_start|><s></s>"
		for _, opts := range []EncodeOptions{{}, {AddSpecial: true, ParseSpecial: true}} {
			got, err := tk.EncodeContext(context.Background(), text, opts)
			if err != nil {
				t.Fatal(err)
			}
			if want := tk.Encode(text, opts); !slices.Equal(got, want) {
				t.Errorf("%s %+v: EncodeContext differs from Encode (%d vs %d tokens)", set, opts, len(got), len(want))
			}
		}
	}
}

func TestEncodeContextCancelled(t *testing.T) {
	t.Parallel()
	tk := loadVocab(t, "llama-bpe")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ids, err := tk.EncodeContext(ctx, "Hello world", EncodeOptions{})
	if !errors.Is(err, context.Canceled) || ids != nil {
		t.Errorf("EncodeContext with a cancelled context = %v, %v; want nil, context.Canceled", ids, err)
	}
}

// TestEncodeStopsPromptly cancels a context and checks, for each stage of an
// encode, that it stops within about CheckBytes of input once it looks.
func TestEncodeStopsPromptly(t *testing.T) {
	t.Parallel()
	text := corpus(t, 1<<20)
	// Special tokens everywhere keep partition busy; "<s>" is in both
	// vocabularies' texts or not, which only changes what it finds.
	special := strings.Repeat("a<s>b</s>", 1<<16)
	for _, set := range []string{"llama-spm", "qwen2"} {
		tk := loadVocab(t, set)
		for _, input := range []string{text, special} {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			st := new(encodeState)
			c := canceller{ctx: ctx, done: ctx.Done()}
			ok := tk.partition(st, input, EncodeOptions{ParseSpecial: true}, &c)
			if ok {
				for _, f := range st.frags {
					if f.token >= 0 {
						continue
					}
					piece := input[f.start:f.end]
					if tk.bpe != nil {
						ok = tk.encodeBPE(st, piece, &c)
					} else {
						ok = tk.encodeSPM(st, piece, true, &c)
					}
					if !ok {
						break
					}
				}
			}
			st.out.release()
			if ok || !errors.Is(c.err, context.Canceled) {
				t.Errorf("%s: encode of %d bytes did not stop: ok %v, err %v", set, len(input), ok, c.err)
			}
			// One check interval, plus the longest word or chunk that was in
			// progress when the interval ran out.
			if c.seen > 2*CheckBytes+4096 {
				t.Errorf("%s: went through %d bytes before stopping, want about %d", set, c.seen, CheckBytes)
			}
		}
	}
	// And through the public entry point, cancelled while it runs.
	tk := loadVocab(t, "llama-spm")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tk.EncodeContext(ctx, corpus(t, 8<<20), EncodeOptions{})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("EncodeContext cancelled while running: err %v, want context.Canceled", err)
	}
}

// TestMaxTokenBytes checks the documented bound: no token stands for more
// input bytes than MaxTokenBytes, so B bytes give at least B/MaxTokenBytes
// tokens.
func TestMaxTokenBytes(t *testing.T) {
	t.Parallel()
	for _, set := range vocabSets {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			tk := loadVocab(t, set)
			if tk.Vocab().Model == ModelBERT {
				// One [UNK] stands for a whole word: no bound.
				if got := tk.MaxTokenBytes(); got != math.MaxInt32 {
					t.Errorf("MaxTokenBytes = %d, want math.MaxInt32 for WordPiece", got)
				}
				return
			}
			want := 0
			for id, text := range tk.Vocab().Tokens {
				n := len(text)
				switch typ := tk.Vocab().Types[id]; {
				case typ == Byte:
					n = 1
				case typ == Normal && tk.byteLevel:
					n = len(tk.Piece(id)) // the bytes it decodes to
				}
				want = max(want, n)
			}
			if got := tk.MaxTokenBytes(); got != want || got < 1 {
				t.Fatalf("MaxTokenBytes = %d, want the longest token in input bytes, %d", got, want)
			}
			strip := len(tk.Vocab().LStrip)+len(tk.Vocab().RStrip) > 0
			texts := []string{corpus(t, 32<<10), strings.Repeat(" ", 10000), strings.Repeat("=", 5000)}
			for _, c := range readVocabCases(t, set) {
				texts = append(texts, c.text)
			}
			for _, text := range texts {
				for _, parse := range []bool{false, true} {
					ids := tk.Encode(text, EncodeOptions{ParseSpecial: parse})
					if strip && strings.ContainsAny(text, " \t\n\v\f\r") {
						continue // whitespace next to strip tokens is dropped
					}
					if min := (len(text) + want - 1) / want; len(ids) < min {
						t.Errorf("Encode(%q) gave %d tokens, fewer than %d bytes / MaxTokenBytes %d", trim(text), len(ids), len(text), want)
					}
				}
			}
		})
	}
}

func trim(s string) string {
	if len(s) <= 40 {
		return s
	}
	for i := 40; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "..."
		}
	}
	return s[:40]
}

// TestSPMCutsExact encodes with and without the chunk cuts and wants the
// same ids.
func TestSPMCutsExact(t *testing.T) {
	t.Parallel()
	for _, set := range []string{"llama-spm", "phi-3"} {
		tk := loadVocab(t, set)
		whole := *tk
		whole.spmCuts = spmCuts{}
		if !tk.spmCuts.beforeSpace || !tk.spmCuts.isolated['\n'] {
			t.Errorf("%s: cuts %+v, want before spaces and around newlines", set, tk.spmCuts.beforeSpace)
		}
		texts := []string{corpus(t, 128<<10), "a  b\u2581 c \u2581d\n\n e\tf \n"}
		for _, c := range readVocabCases(t, set) {
			texts = append(texts, c.text)
		}
		for _, text := range texts {
			got, want := tk.Encode(text, EncodeOptions{}), whole.Encode(text, EncodeOptions{})
			if !slices.Equal(got, want) {
				t.Errorf("%s: Encode(%q) with cuts differs from the whole (%d vs %d tokens)", set, trim(text), len(got), len(want))
			}
		}
	}
}
