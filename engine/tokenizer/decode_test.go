package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// decodeVocab has the byte tokens (id 3+b for byte b), <unk> <s> </s> and a
// few text tokens after them.
func decodeVocab(t *testing.T) (*Tokenizer, map[string]int) {
	t.Helper()
	tk := mustNew(t, buildVocab(true, tok{"▁a", 0, Normal}, tok{"b", 0, Normal}, tok{"€", 0, Normal}))
	ids := map[string]int{}
	for id, text := range tk.Vocab().Tokens {
		ids[text] = id
	}
	return tk, ids
}

// step is one Add (or, with flush, the final Flush) and the text it returns.
type step struct {
	token string // token text; "" for Flush
	want  string
}

func TestDecoder(t *testing.T) {
	t.Parallel()
	const bad = "\uFFFD"
	cases := []struct {
		name  string
		steps []step
	}{
		{"2-byte character across byte tokens", []step{{"<0xC3>", ""}, {"<0xA9>", "é"}, {"", ""}}},
		{"3-byte character across byte tokens", []step{{"<0xE2>", ""}, {"<0x82>", ""}, {"<0xAC>", "€"}, {"", ""}}},
		{"4-byte character across byte tokens", []step{{"<0xF0>", ""}, {"<0x9F>", ""}, {"<0xA6>", ""}, {"<0x99>", "🦙"}, {"", ""}}},
		{"text before and after", []step{{"▁a", " a"}, {"<0xC3>", ""}, {"<0xA9>", "é"}, {"b", "b"}}},
		{"control tokens do not disturb held bytes", []step{{"<0xC3>", ""}, {"<s>", ""}, {"<unk>", ""}, {"<0xA9>", "é"}}},
		{"two characters in one run", []step{{"<0xC3>", ""}, {"<0xA9>", "é"}, {"<0xE2>", ""}, {"<0x82>", ""}, {"<0xAC>", "€"}}},
		{"multi-byte text token", []step{{"€", "€"}, {"<0xE2>", ""}, {"€", bad + "€"}}},
		{"lone continuation byte", []step{{"<0x80>", bad}, {"b", "b"}}},
		{"byte that never starts a character", []step{{"<0xFF>", bad}, {"<0xC0>", bad}, {"<0xAF>", bad}}},
		{"broken by text", []step{{"<0xC3>", ""}, {"b", bad + "b"}}},
		{"4-byte start broken after two bytes", []step{{"<0xF0>", ""}, {"<0x9F>", ""}, {"b", bad + "b"}}},
		{"overlong 3-byte form", []step{{"<0xE0>", ""}, {"<0x80>", bad + bad}}},
		{"surrogate", []step{{"<0xED>", ""}, {"<0xA0>", bad + bad}, {"<0x80>", bad}}},
		{"above U+10FFFF", []step{{"<0xF4>", ""}, {"<0x90>", bad + bad}}},
		{"flush of an unfinished character", []step{{"<0xE2>", ""}, {"<0x82>", ""}, {"", bad}, {"", ""}}},
		{"flush of an unfinished 4-byte character", []step{{"▁a", " a"}, {"<0xF0>", ""}, {"<0x9F>", ""}, {"<0xA6>", ""}, {"", bad}}},
		{"decoder reusable after flush", []step{{"<0xC3>", ""}, {"", bad}, {"<0xC3>", ""}, {"<0xA9>", "é"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk, ids := decodeVocab(t)
			d := tk.NewDecoder()
			var all []int
			var whole strings.Builder
			for i, s := range c.steps {
				var got string
				if s.token == "" {
					got = d.Flush()
				} else {
					id, ok := ids[s.token]
					if !ok {
						t.Fatalf("no token %q", s.token)
					}
					all = append(all, id)
					got = d.Add(id)
				}
				if got != s.want {
					t.Errorf("step %d (%q): got %q, want %q", i, s.token, got, s.want)
				}
				whole.WriteString(got)
			}
			whole.WriteString(d.Flush())
			// Decode of the same ids is what the Decoder streams, flushed;
			// a Flush in the middle may split it differently, so only
			// compare runs without one.
			if !slices.ContainsFunc(c.steps[:len(c.steps)-1], func(s step) bool { return s.token == "" }) {
				if got := tk.Decode(all); got != whole.String() {
					t.Errorf("Decode = %q, Decoder gave %q", got, whole.String())
				}
			}
		})
	}
}

func TestDecodeInvalidIDs(t *testing.T) {
	t.Parallel()
	tk, ids := decodeVocab(t)
	if got := tk.Decode([]int{-5, ids["▁a"], tk.Size(), ids["b"]}); got != " ab" {
		t.Errorf("Decode with invalid ids = %q, want %q", got, " ab")
	}
	if got := tk.NewDecoder().Add(-1); got != "" {
		t.Errorf("Add(-1) = %q, want empty", got)
	}
}

// TestDecoderStreamsBytes splits random text into byte tokens and checks that
// every Add returns valid UTF-8, that together they give the text back, and
// that nothing is left to flush.
func TestDecoderStreamsBytes(t *testing.T) {
	t.Parallel()
	tk, ids := decodeVocab(t)
	alphabet := []rune("ab é€ß日本🦙👍🏽\u0301\n\t")
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var sb strings.Builder
		for range rng.IntN(20) {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		text := sb.String()
		var tokens []int
		for i := 0; i < len(text); i++ {
			tokens = append(tokens, 3+int(text[i]))
			if rng.IntN(4) == 0 {
				tokens = append(tokens, ids["<s>"]) // renders as nothing
			}
		}
		d := tk.NewDecoder()
		var got strings.Builder
		for _, id := range tokens {
			out := d.Add(id)
			if !utf8.ValidString(out) {
				t.Fatalf("trial %d: Add returned invalid UTF-8 %q", trial, out)
			}
			got.WriteString(out)
		}
		if rest := d.Flush(); rest != "" {
			t.Errorf("trial %d: Flush = %q after complete text", trial, rest)
		}
		if got.String() != text {
			t.Errorf("trial %d: streamed %q, want %q", trial, got.String(), text)
		}
		if dec := tk.Decode(tokens); dec != text {
			t.Errorf("trial %d: Decode = %q, want %q", trial, dec, text)
		}
	}
}

// TestDecodeRandomBytes feeds arbitrary bytes: Decode and the Decoder agree
// and always return valid UTF-8.
func TestDecodeRandomBytes(t *testing.T) {
	t.Parallel()
	tk, _ := decodeVocab(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		tokens := make([]int, rng.IntN(12))
		for i := range tokens {
			// Mostly high bytes, where the UTF-8 rules are.
			b := 0x80 + rng.IntN(0x80)
			if rng.IntN(4) == 0 {
				b = rng.IntN(0x80)
			}
			tokens[i] = 3 + b
		}
		d := tk.NewDecoder()
		var streamed strings.Builder
		for _, id := range tokens {
			streamed.WriteString(d.Add(id))
		}
		streamed.WriteString(d.Flush())
		dec := tk.Decode(tokens)
		if !utf8.ValidString(dec) || dec != streamed.String() {
			t.Fatalf("trial %d: bytes % x: Decode %q, Decoder %q", trial, tokenBytes(tk, tokens), dec, streamed.String())
		}
		// Valid input passes through unchanged.
		if raw := tokenBytes(tk, tokens); utf8.Valid(raw) && dec != string(raw) {
			t.Fatalf("trial %d: valid bytes % x decoded to %q", trial, raw, dec)
		}
	}
}

func tokenBytes(tk *Tokenizer, ids []int) []byte {
	var b []byte
	for _, id := range ids {
		b = append(b, tk.Piece(id)...)
	}
	return b
}
