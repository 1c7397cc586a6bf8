package tokenizer

import (
	"encoding/base64"
	"math/rand/v2"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runInputs are the shapes BenchmarkEncodeRuns measures, each n bytes:
// ordinary text (the corpus), one character repeated and random letters
// (no pre-tokenizer split and no SentencePiece cut: one giant word or
// chunk), and a random base64 blob (one chunk for SentencePiece; the
// byte-level pre-tokenizers cut it at digits, '+' and '/').
func runInputs(tb testing.TB, n int) []struct{ name, text string } {
	return []struct{ name, text string }{
		{"text", corpus(tb, n)},
		{"a-run", strings.Repeat("a", n)},
		{"letters", randomLetters(rand.New(rand.NewPCG(9, 9)), n)},
		{"base64", base64Blob(n)},
	}
}

// randomLetters is n random ASCII letters: one word for every pre-tokenizer.
func randomLetters(rng *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return string(b)
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
// nanoseconds (wall clock, and the process's CPU time, which waiting for a
// busy core does not inflate; GC included) and the bytes allocated per
// input byte (the result included).
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
				cpu := cpuTime()
				b.ResetTimer()
				for b.Loop() {
					tk.Encode(in.text, EncodeOptions{})
				}
				b.StopTimer()
				cpu = cpuTime() - cpu
				runtime.ReadMemStats(&after)
				perOp := float64(b.N) * float64(len(in.text))
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perOp, "ns/inputB")
				b.ReportMetric(float64(cpu.Nanoseconds())/perOp, "cpu-ns/inputB")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/perOp, "allocB/inputB")
				b.ReportMetric(float64(tokens), "tokens/op")
			})
		}
	}
}
