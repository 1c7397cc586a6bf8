package native

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/promptcache"
)

// BenchmarkTTFTAfterRestart measures what the prompt cache's disk tier
// buys: the time to first token of a long prompt on a fresh engine (cold),
// and of the same prompt on a new engine over the directory the first one
// saved its cache to when it closed (a restart with a warm disk tier).
// The prompt has about RILL_BENCH_PROMPT_TOKENS tokens (default 8000); the
// context is stretched to hold it. With RILL_BENCH_BIG=1 it runs on the
// 245M benchmark model too.
func BenchmarkTTFTAfterRestart(b *testing.B) {
	want := 8000
	if s := os.Getenv("RILL_BENCH_PROMPT_TOKENS"); s != "" {
		var err error
		if want, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	for name, load := range benchTargets(b) {
		b.Run(name, func(b *testing.B) {
			var cold, warm time.Duration
			var promptTokens, cached int
			for b.Loop() {
				dir := b.TempDir()
				pc, err := promptcache.Open(dir, promptcache.Options{})
				if err != nil {
					b.Fatal(err)
				}
				opts := Options{ContextLength: want + 256, MaxBatchTokens: 512, PromptCache: pc}
				e := benchEngine(b, load(), opts)
				prompt := benchPrompt(e, want)
				req := &engine.Request{Model: e.Models()[0].ID, Prompt: prompt, MaxTokens: 1}
				cold += firstToken(b, e, req)
				promptTokens = len(e.tok.Encode(prompt, encodeWithBOS))
				e.Close()

				pc, err = promptcache.Open(dir, promptcache.Options{})
				if err != nil {
					b.Fatal(err)
				}
				opts.PromptCache = pc
				e = benchEngine(b, load(), opts)
				warm += firstToken(b, e, req)
				cached = int(e.cache.Stats().Hits)
				e.Close()
			}
			b.ReportMetric(float64(cold.Microseconds())/1000/float64(b.N), "ms/cold-first-token")
			b.ReportMetric(float64(warm.Microseconds())/1000/float64(b.N), "ms/restart-first-token")
			b.ReportMetric(100*float64(warm)/float64(cold), "restart-%-of-cold")
			b.ReportMetric(float64(promptTokens), "prompt-tokens")
			b.ReportMetric(float64(cached), "cached-tokens")
		})
	}
}

// benchPrompt returns a prompt of about n tokens for e's tokenizer, without
// repeated blocks.
func benchPrompt(e *Engine, n int) string {
	var b strings.Builder
	for i := 0; ; i++ {
		fmt.Fprintf(&b, "The fox crossed river %d and sang. ", i)
		if i%64 == 63 && len(e.tok.Encode(b.String(), encodeWithBOS)) >= n {
			return b.String()
		}
	}
}
