package tokenizer

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// maxAllocPerByte is what encoding one giant word or chunk may allocate
// per input byte, the result included: 20 bytes of merge state for BPE, 16
// for SentencePiece, 8 per token of result (at most one per byte) and up to
// 4 per token of id chunks that the pool does not hold yet.
const maxAllocPerByte = 32

// TestGiantWordMemory encodes 1 MiB that no pre-tokenizer or SentencePiece
// cut splits (one letter repeated, spaces, "a b" repeated for Gemma 4's
// words, random letters, a base64 blob, random bytes) and checks the bytes allocated per input byte: the merge state is
// linear and small in the word, with no garbage from growing it.
func TestGiantWordMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes 1 MiB words")
	}
	// Not parallel: the MemStats deltas would count other tests' memory.
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(9, 9))
	inputs := []struct{ name, text string }{
		{"a-run", strings.Repeat("a", n)},
		{"spaces", strings.Repeat(" ", n)},
		{"a-space-b", strings.Repeat("a b", n/3)},
		{"letters", randomLetters(rng, n)},
		{"base64", base64Blob(n)},
		{"bytes", randomBytes(rng, n)},
	}
	for _, set := range append(runVocabs, "gemma-4") {
		tk := loadVocab(t, set)
		for _, in := range inputs {
			tk.Encode(in.text[:4096], EncodeOptions{}) // warm the pools
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ids, err := tk.EncodeContext(context.Background(), in.text, EncodeOptions{})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			perByte := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(in.text))
			result := float64(8*len(ids)) / float64(len(in.text))
			t.Logf("%s %s: %d tokens; %.1f bytes allocated per input byte (result %.1f)", set, in.name, len(ids), perByte, result)
			if perByte > maxAllocPerByte {
				t.Errorf("%s %s: %.1f bytes allocated per input byte, want at most %d", set, in.name, perByte, maxAllocPerByte)
			}
		}
	}
}
