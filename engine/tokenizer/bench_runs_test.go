package tokenizer

import (
	"encoding/base64"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// runInputs are the shapes BenchmarkEncodeRuns measures, each n bytes:
// ordinary text (the corpus), one character repeated (no pre-tokenizer
// split and no SentencePiece cut: one giant word or chunk), and a random
// base64 blob (likewise one word for the byte-level pre-tokenizers, which
// only split it at '+' and '/').
func runInputs(tb testing.TB, n int) []struct{ name, text string } {
	return []struct{ name, text string }{
		{"text", corpus(tb, n)},
		{"a-run", strings.Repeat("a", n)},
		{"base64", base64Blob(n)},
	}
}

// base64Blob is n bytes of standard base64 of seeded random bytes: the same
// text on every run.
func base64Blob(n int) string {
	rng := rand.New(rand.NewPCG(12, 3))
	raw := make([]byte, base64.StdEncoding.DecodedLen(n)+3)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)[:n]
}

// runVocabs are the vocabularies the run benchmarks and memory tests use:
// SentencePiece, and byte-level BPE with three pre-tokenizers.
var runVocabs = []string{"llama-spm", "llama-bpe", "qwen2", "gpt-2"}

// BenchmarkEncodeRuns encodes 1 MiB of each runInputs shape and reports the
// nanoseconds and the bytes allocated per input byte (the result included).
// It uses only the public API, so that it runs unchanged against an older
// tree for before/after ratios.
func BenchmarkEncodeRuns(b *testing.B) {
	const n = 1 << 20
	for _, set := range runVocabs {
		for _, in := range runInputs(b, n) {
			b.Run(set+"/"+in.name, func(b *testing.B) {
				tk := loadVocab(b, set)
				tokens := len(tk.Encode(in.text, EncodeOptions{}))
				b.SetBytes(int64(len(in.text)))
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				b.ResetTimer()
				for b.Loop() {
					tk.Encode(in.text, EncodeOptions{})
				}
				b.StopTimer()
				runtime.ReadMemStats(&after)
				perOp := float64(b.N) * float64(len(in.text))
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perOp, "ns/inputB")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/perOp, "allocB/inputB")
				b.ReportMetric(float64(tokens), "tokens/op")
			})
		}
	}
}
