package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// benchTargets are the models the engine benchmarks run on: the embedded
// test model, and with RILL_BENCH_BIG=1 the 245M benchmark model (Q8_0),
// where decode is bound by memory bandwidth and batching pays the most.
func benchTargets(b *testing.B) map[string]func() *model.Model {
	out := map[string]func() *model.Model{
		"rill-tiny": func() *model.Model { return loadSpec(b, testmodel.Target(quant.F32)) },
	}
	if os.Getenv("RILL_BENCH_BIG") != "" {
		out["rill-bench-245m-Q8_0"] = func() *model.Model {
			path := filepath.Join(b.TempDir(), "bench.gguf")
			if err := testmodel.WriteFile(path, testmodel.Bench(quant.Q8_0)); err != nil {
				b.Fatal(err)
			}
			m, err := model.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}
	}
	return out
}

func benchEngine(b *testing.B, m *model.Model, opts Options) *Engine {
	opts.Logger = discard
	e, err := New(m, opts)
	if err != nil {
		b.Fatal(err)
	}
	start(b, e)
	return e
}

// firstToken returns the time until the first event of req.
func firstToken(b *testing.B, e *Engine, req *engine.Request) time.Duration {
	start := time.Now()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := engine.Recv(st); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	for {
		if _, err := engine.Recv(st); err != nil {
			return d
		}
	}
}

// BenchmarkTTFT measures the time to first token of a prompt of about
// 1,000 tokens, cold (a prefix never seen) and warm (the same prompt again).
func BenchmarkTTFT(b *testing.B) {
	for name, load := range benchTargets(b) {
		b.Run(name, func(b *testing.B) {
			e := benchEngine(b, load(), Options{MaxBatchTokens: 1024})
			id := e.Models()[0].ID
			body := strings.Repeat("The river sang a quiet song to the stones and the fox listened. ", 60)
			for _, mode := range []string{"cold", "warm"} {
				b.Run(mode, func(b *testing.B) {
					warm := &engine.Request{Model: id, Prompt: body, MaxTokens: 1}
					firstToken(b, e, warm)
					var total time.Duration
					var promptTokens int
					i := 0
					for b.Loop() {
						req := warm
						if mode == "cold" {
							i++
							req = &engine.Request{Model: id, Prompt: fmt.Sprintf("%d %s", i, body), MaxTokens: 1}
						}
						total += firstToken(b, e, req)
					}
					promptTokens = len(e.tok.Encode(body, encodeWithBOS))
					b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/first-token")
					b.ReportMetric(float64(promptTokens), "prompt-tokens")
				})
			}
		})
	}
}

// BenchmarkConcurrentDecode measures aggregate decode throughput with 1, 8
// and 32 streams of 128 greedy tokens each running at once.
func BenchmarkConcurrentDecode(b *testing.B) {
	for name, load := range benchTargets(b) {
		b.Run(name, func(b *testing.B) {
			e := benchEngine(b, load(), Options{})
			id := e.Models()[0].ID
			for _, streams := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
					var tokens int64
					var mu sync.Mutex
					for b.Loop() {
						var wg sync.WaitGroup
						for i := range streams {
							wg.Go(func() {
								r := collect(b, e, &engine.Request{Model: id, Prompt: fmt.Sprintf("The fox %d", i), MaxTokens: 128, IgnoreEOS: true})
								mu.Lock()
								tokens += int64(r.final[0].Stats.CompletionTokens)
								mu.Unlock()
							})
						}
						wg.Wait()
					}
					b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
				})
			}
		})
	}
}

// BenchmarkSpeculative measures decode throughput at temperature 0 with each
// proposer on a repetitive and a plain prompt, and the acceptance rate. The
// "wrong-prediction" case sends a predicted output unrelated to what the
// model writes: nearly every draft is rejected, and the backoff must keep
// the cost small.
func BenchmarkSpeculative(b *testing.B) {
	prompts := map[string]string{
		"repetitive": repetitive,
		"plain":      "A cached prefix is fast, and a good draft is faster.",
	}
	for name, load := range benchTargets(b) {
		b.Run(name, func(b *testing.B) {
			off := benchEngine(b, load(), Options{})
			engines := map[string]*Engine{
				"off":              off,
				"ngram":            benchEngine(b, load(), Options{NGram: true}),
				"wrong-prediction": off,
			}
			if name == "rill-tiny" {
				engines["draft"] = benchEngine(b, load(), Options{Draft: loadSpec(b, testmodel.Draft(quant.F32))})
			}
			for pname, prompt := range prompts {
				for ename, e := range engines {
					b.Run(pname+"/"+ename, func(b *testing.B) {
						id := e.Models()[0].ID
						var tokens, acc, rej int
						var gen time.Duration
						for b.Loop() {
							req := &engine.Request{Model: id, Prompt: prompt, MaxTokens: 128, IgnoreEOS: true}
							if ename == "wrong-prediction" {
								req.Prediction = strings.Repeat("Tokens stream from the server one by one. ", 12)
							}
							r := collect(b, e, req)
							st := r.final[0].Stats
							tokens += st.CompletionTokens
							gen += st.GenerationTime
							if st.DraftAccepted != nil {
								acc += *st.DraftAccepted
								rej += *st.DraftRejected
							}
						}
						b.ReportMetric(float64(tokens)/gen.Seconds(), "decode-tokens/s")
						if acc+rej > 0 {
							b.ReportMetric(float64(acc)/float64(acc+rej), "acceptance")
						}
					})
				}
			}
		})
	}
}
