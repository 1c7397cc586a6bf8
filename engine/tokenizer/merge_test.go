package tokenizer

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// mergeTexts are inputs that stress merging: the set's llama.cpp test
// strings, ordinary text, long runs without separators (one letter, base64,
// random letters, token texts glued together) and random bytes.
func mergeTexts(t testing.TB, tk *Tokenizer, set string, rng *rand.Rand) []string {
	texts := []string{
		corpus(t, 32<<10),
		strings.Repeat("a", 5000),
		strings.Repeat("ab", 3001),
		strings.Repeat(" ", 3000),
		strings.Repeat("\u2581", 700),
		strings.Repeat(" \u2581 \u2581\u2581  a\u2581b ", 300),
		strings.Repeat("x\u2581 \u2581\u2581 y\u2581  ", 300),        // one long SentencePiece chunk: no cut before these spaces
		strings.Repeat("\xe2 \xe2\x96 \xf0  \xc3 a\xe2\u2581 ", 200), // lead bytes that swallow escaped spaces
		strings.Repeat("é", 2000),
		base64Blob(20000),
		randomLetters(rng, 20000),
		glueTokens(tk, rng, 3000),
		glueTokens(tk, rng, 3000) + " " + glueTokens(tk, rng, 300),
		glueTexts(tk, rng, 3000),
		randomBytes(rng, 4000),
	}
	for _, c := range readVocabCasesTB(t, set) {
		texts = append(texts, c.text)
	}
	return texts
}

func randomBytes(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return string(b)
}

// glueTokens joins the output texts of n random Normal tokens: text that
// merges in many ways.
func glueTokens(tk *Tokenizer, rng *rand.Rand, n int) string {
	var sb strings.Builder
	for sb.Len() < 8*n {
		id := rng.IntN(tk.Size())
		if tk.Vocab().Types[id] == Normal {
			sb.Write(tk.Piece(id))
		}
	}
	return sb.String()
}

// glueTexts joins the texts of n random Normal tokens, U+2581 and GPT-2's
// byte alphabet as they are.
func glueTexts(tk *Tokenizer, rng *rand.Rand, n int) string {
	var sb strings.Builder
	for sb.Len() < 8*n {
		id := rng.IntN(tk.Size())
		if tk.Vocab().Types[id] == Normal {
			sb.WriteString(tk.Vocab().Tokens[id])
		}
	}
	return sb.String()
}

// alwaysCanonical returns a copy of tk that merges all valid text in
// canonical form (see appendMerged), short text included.
func alwaysCanonical(tk *Tokenizer) *Tokenizer {
	c := *tk
	c.canonicalFrom = 0
	return &c
}

// TestMergeMatchesReference encodes with the new merge path and with the
// reference (the merge code it replaced, reference_test.go) and wants the
// same ids, on every vocabulary set, with the canonical form from its
// usual length and for all text.
func TestMergeMatchesReference(t *testing.T) {
	t.Parallel()
	for _, set := range vocabSets {
		t.Run(set, func(t *testing.T) {
			t.Parallel()
			tk := loadVocab(t, set)
			if tk.Vocab().Model == ModelBERT {
				t.Skip("WordPiece does not merge")
			}
			canonical := alwaysCanonical(tk)
			rng := rand.New(rand.NewPCG(1, uint64(len(set))))
			for _, text := range mergeTexts(t, tk, set, rng) {
				for _, opts := range []EncodeOptions{{}, {AddSpecial: true, ParseSpecial: true}} {
					want := tk.refEncode(text, opts)
					for _, tk := range []*Tokenizer{tk, canonical} {
						got := tk.Encode(text, opts)
						if !slices.Equal(got, want) {
							i := 0
							for i < min(len(got), len(want)) && got[i] == want[i] {
								i++
							}
							t.Errorf("Encode(%q, %+v), canonical from %d bytes: %d tokens, the reference %d; first difference at token %d",
								trim(text), opts, tk.canonicalFrom, len(got), len(want), i)
						}
					}
				}
			}
		})
	}
}

// FuzzMergeMatchesReference compares the new merge path with the reference
// on arbitrary text, for SentencePiece, byte-level BPE and Gemma 4, with
// the canonical form from its usual length and for all text.
func FuzzMergeMatchesReference(f *testing.F) {
	sets := []string{"llama-spm", "llama-bpe", "gpt-2", "qwen2", "gemma-4", "command-r"}
	toks := make([]*Tokenizer, len(sets))
	for i, set := range sets {
		toks[i] = loadVocab(f, set)
		for _, c := range readVocabCasesTB(f, set) {
			f.Add(c.text)
		}
	}
	f.Add("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add("                                                                ----------")
	f.Fuzz(func(t *testing.T, text string) {
		for i, tk := range toks {
			want := tk.refEncode(text, EncodeOptions{})
			for _, tk := range []*Tokenizer{tk, alwaysCanonical(tk)} {
				if got := tk.Encode(text, EncodeOptions{}); !slices.Equal(got, want) {
					t.Errorf("%s: Encode(%q), canonical from %d bytes = %v, the reference %v", sets[i], text, tk.canonicalFrom, got, want)
				}
			}
		}
	})
}

// TestMergeQueue drives the queue with random operations and checks every
// pop against a plain list.
func TestMergeQueue(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	const n = 300
	var q mergeQueue
	for round := range 20 {
		q.reset(n)
		model := map[int32]uint32{} // start -> priority
		for s := range int32(n) {
			q.at[s] = -1
			if rng.IntN(2) == 0 {
				p := uint32(rng.IntN(8))
				q.add(p, s)
				model[s] = p
			}
		}
		q.init()
		for op := 0; op < 2000 && len(model) > 0; op++ {
			s := int32(rng.IntN(n))
			switch rng.IntN(5) {
			case 0:
				p := uint32(rng.IntN(8))
				q.set(p, s)
				model[s] = p
			case 1:
				q.remove(s)
				delete(model, s)
			case 2:
				start, _ := q.top()
				p := uint32(rng.IntN(8))
				q.replaceTop(p)
				model[start] = p
			default:
				start, p := q.top()
				q.popTop()
				best, bestP := int32(-1), uint32(math.MaxUint32)
				for ms, mp := range model {
					if mp < bestP || (mp == bestP && ms < best) {
						best, bestP = ms, mp
					}
				}
				if start != best || p != bestP {
					t.Fatalf("round %d op %d: pop = (%d, %d), want (%d, %d)", round, op, start, p, best, bestP)
				}
				delete(model, start)
			}
			for i := 1; i < len(q.heap); i++ {
				if parent := (i - 1) / heapArity; q.heap[parent] > q.heap[i] || q.at[keyStart(q.heap[i])] != int32(i) {
					t.Fatalf("round %d op %d: heap order or index broken at %d", round, op, i)
				}
			}
			if len(q.heap) != len(model) {
				t.Fatalf("round %d op %d: %d candidates queued, want %d", round, op, len(q.heap), len(model))
			}
		}
	}
}

// TestScorePriority checks that priorities order scores as the reference's
// comparison does: higher first, -0 equal to +0.
func TestScorePriority(t *testing.T) {
	t.Parallel()
	scores := []float32{float32(math.Inf(-1)), -1e30, -2.5, -1, float32(math.Copysign(0, -1)), 0, 1e-30, 1, 3.5, 1e30, float32(math.Inf(1))}
	for i, a := range scores {
		for _, b := range scores[i:] {
			pa, pb := scorePriority(a), scorePriority(b)
			switch {
			case a == b && pa != pb:
				t.Errorf("scores %v and %v are equal; priorities %x and %x differ", a, b, pa, pb)
			case a < b && pa <= pb:
				t.Errorf("score %v < %v but priority %x <= %x", a, b, pa, pb)
			}
		}
	}
	if nan := scorePriority(float32(math.NaN())); nan <= scorePriority(float32(math.Inf(-1))) {
		t.Errorf("NaN's priority %x does not come after -Inf's", nan)
	}
}
