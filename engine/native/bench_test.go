package native

import (
	"context"
	"encoding/json"
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
	"rill/internal/shared"
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
	e, err := New(m, testCompute(b), opts)
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

// BenchmarkConstrainedDecode measures what a grammar costs per decoded
// token: each iteration runs one free and one json_schema-constrained
// request of 256 tokens (sampled at temperature 1, the same seed) on the
// same engine, so that both rates come from the same run and machine
// state. It reports both decode rates, their ratio, and the difference in
// microseconds per token (the mask, the copy of the row and the matcher's
// step). The embedded model has a 512-token vocabulary; with ../shared
// present a model with Qwen2's 151,936-token vocabulary runs too.
func BenchmarkConstrainedDecode(b *testing.B) {
	models := map[string]func() *model.Model{
		"rill-tiny-512": func() *model.Model { return loadSpec(b, testmodel.Target(quant.F32)) },
	}
	if _, ok := shared.Find(); ok {
		models["qwen-vocab-151936"] = func() *model.Model { return qwenVocabModel(b) }
	}
	// An array of free strings: the model can go on for 256 tokens.
	schema := json.RawMessage(`{"type":"object","properties":{"notes":{"type":"array","items":{"type":"string"}}},"required":["notes"]}`)
	for name, load := range models {
		b.Run(name, func(b *testing.B) {
			e := benchEngine(b, load(), Options{KVCacheBytes: 64 << 20})
			id := e.Models()[0].ID
			var free, cons struct {
				tokens int
				gen    time.Duration
			}
			run := func(rf *engine.ResponseFormat) (int, time.Duration) {
				r := collect(b, e, &engine.Request{Model: id, Messages: userTurn("Take notes about the river."), MaxTokens: 256,
					IgnoreEOS: true, ResponseFormat: rf, Sampling: engine.Sampling{Temperature: 1, Seed: seed(1)}})
				st := r.final[0].Stats
				return st.CompletionTokens, st.GenerationTime
			}
			rf := &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: schema}
			run(rf) // warm the vocabulary's mask cache
			for b.Loop() {
				n, d := run(nil)
				free.tokens, free.gen = free.tokens+n, free.gen+d
				n, d = run(rf)
				cons.tokens, cons.gen = cons.tokens+n, cons.gen+d
			}
			freeRate := float64(free.tokens) / free.gen.Seconds()
			consRate := float64(cons.tokens) / cons.gen.Seconds()
			b.ReportMetric(freeRate, "free-tokens/s")
			b.ReportMetric(consRate, "json-schema-tokens/s")
			b.ReportMetric(consRate/freeRate, "ratio")
			b.ReportMetric((1/consRate-1/freeRate)*1e6, "grammar-µs/token")
		})
	}
}
