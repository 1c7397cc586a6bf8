package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/upstream"
)

// allEvents collects every event of a stream, failing on an error.
func allEvents(t *testing.T, st engine.Stream) []engine.Event {
	t.Helper()
	var out []engine.Event
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		out = append(out, ev)
	}
}

// recorder serves the chunks chunks(request) returns and keeps the
// requests it got.
type recorder struct {
	chunks func(req map[string]any) []string
	mu     sync.Mutex
	reqs   []map[string]any
}

func (f *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		return // health
	}
	var req map[string]any
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	sse(w, f.chunks(req)...)
}

func (f *recorder) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.reqs...)
}

// sumRunning checks events as the service assembles them: the running
// completion count, summed over the choices' latest Stats, never falls and
// never passes the final total, which it reaches. It returns the sums.
func sumRunning(t *testing.T, evs []engine.Event, n int) []int {
	t.Helper()
	latest := make([]int, n)
	var sums []int
	for _, ev := range evs {
		if ev.Stats == nil {
			t.Fatalf("event without Stats: %+v", ev)
		}
		latest[ev.Choice] = ev.Stats.CompletionTokens
		sum := 0
		for _, c := range latest {
			sum += c
		}
		if len(sums) > 0 && sum < sums[len(sums)-1] {
			t.Fatalf("running completion fell from %d to %d (%+v)", sums[len(sums)-1], sum, ev)
		}
		sums = append(sums, sum)
	}
	for _, s := range sums {
		if s > sums[len(sums)-1] {
			t.Fatalf("running completion %d passed the total %d: %v", s, sums[len(sums)-1], sums)
		}
	}
	return sums
}

func TestContinuousUsageUpstream(t *testing.T) {
	t.Parallel()
	t.Run("llamacpp: timings on every chunk", func(t *testing.T) {
		t.Parallel()
		f := &recorder{chunks: func(req map[string]any) []string {
			var out []string
			for k := 1; k <= 3; k++ {
				timings := ""
				if req["timings_per_token"] == true {
					// llama.cpp counts a verified draft as accepted before it
					// sends its tokens: 2 accepted after the first token.
					timings = fmt.Sprintf(`,"timings":{"cache_n":3,"prompt_n":2,"predicted_n":%d,"draft_n":%d,"draft_n_accepted":%d}`, k, 2*k+1, k+1)
				}
				out = append(out, fmt.Sprintf(`{"choices":[{"index":0,"text":"t%d","finish_reason":null}]%s}`, k, timings))
			}
			return append(out,
				`{"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":3},"timings":{"cache_n":3,"prompt_n":2,"predicted_n":3,"draft_n":6,"draft_n_accepted":3}}`,
				`[DONE]`)
		}}
		u, _ := serve(t, f)
		e := newUpstream(t, "m", upstream.LlamaCpp, u)
		st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x", ContinuousUsage: true})
		if err != nil {
			t.Fatal(err)
		}
		evs := allEvents(t, st)
		if got := f.requests()[0]["timings_per_token"]; got != true {
			t.Errorf("timings_per_token sent as %v", got)
		}
		for k, ev := range evs[:3] {
			// Accepted drafts so far are the ones sent: at most the tokens sent.
			s := ev.Stats
			if s == nil || s.PromptTokens != 5 || *s.CachedTokens != 3 || s.CompletionTokens != k+1 || *s.DraftAccepted != k+1 || *s.DraftRejected != k+1 {
				t.Errorf("event %d: stats %+v", k, s)
			}
			// The prompt tokens it computed, prompt_n, are the ones it wrote,
			// as on the final event: the input counts do not change.
			if s == nil || s.CacheWriteTokens == nil || *s.CacheWriteTokens != 2 {
				t.Errorf("event %d: stats %+v, want cache write tokens 2", k, s)
			}
		}
		if s := evs[3].Stats; !evs[3].Final || s.CompletionTokens != 3 || *s.DraftAccepted != 3 || s.CacheWriteTokens == nil || *s.CacheWriteTokens != 2 {
			t.Errorf("final %+v", evs[3])
		}

		// Without continuous usage: no timings asked for, no running Stats.
		st, err = e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x"})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range allEvents(t, st) {
			if !ev.Final && ev.Stats != nil {
				t.Errorf("running Stats without continuous usage: %+v", ev)
			}
		}
		if _, asked := f.requests()[1]["timings_per_token"]; asked {
			t.Errorf("timings_per_token sent without continuous usage")
		}
	})

	t.Run("vllm n=2: a usage per choice on every chunk", func(t *testing.T) {
		t.Parallel()
		f := &recorder{chunks: func(req map[string]any) []string {
			opts, _ := req["stream_options"].(map[string]any)
			if opts["continuous_usage_stats"] != true {
				return []string{`{"error":{"message":"continuous_usage_stats not sent","code":400}}`}
			}
			use := func(c int) string {
				return fmt.Sprintf(`"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}`, c, 10+c)
			}
			return []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],` + use(0) + `}`,
				`{"choices":[{"index":0,"delta":{"content":"A"},"finish_reason":null}],` + use(1) + `}`,
				`{"choices":[{"index":1,"delta":{"content":"B"},"finish_reason":null}],` + use(1) + `}`,
				`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],` + use(2) + `}`,
				`{"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}],` + use(2) + `}`,
				`{"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}],` + use(3) + `}`,
				`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}`,
				`[DONE]`}
		}}
		u, _ := serve(t, f)
		e := newUpstream(t, "m", upstream.VLLM, u)
		st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x", N: 2, ContinuousUsage: true})
		if err != nil {
			t.Fatal(err)
		}
		evs := allEvents(t, st)
		if len(evs) != 7 {
			t.Fatalf("%d events: %+v", len(evs), evs)
		}
		for _, ev := range evs[:5] {
			if ev.Final || ev.Stats.PromptTokens != 10 {
				t.Errorf("running event %+v stats %+v", ev, ev.Stats)
			}
		}
		if got := sumRunning(t, evs, 2); fmt.Sprint(got) != "[1 2 3 4 5 5 5]" {
			t.Errorf("running sums %v", got)
		}
		f0, f1 := evs[5].Stats, evs[6].Stats
		if !evs[5].Final || f0.CompletionTokens+f1.CompletionTokens != 5 || *f0.CachedTokens != 8 {
			t.Errorf("finals %+v %+v: want the upstream's 5 completion tokens, cached 8", f0, f1)
		}
	})

	t.Run("openai: counted, the prompt from the final usage", func(t *testing.T) {
		t.Parallel()
		f := &recorder{chunks: func(req map[string]any) []string {
			return []string{
				`{"choices":[{"index":0,"delta":{"content":"A"},"logprobs":{"content":[{"token":"A","logprob":-1},{"token":"x","logprob":-1}]},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"B"},"logprobs":{"content":[{"token":"B","logprob":-1}]},"finish_reason":"stop"}]}`,
				`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
				`[DONE]`}
		}}
		u, _ := serve(t, f)
		e := newUpstream(t, "m", upstream.OpenAI, u)
		st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Messages: []engine.Message{{Role: "user", Content: "x"}}, Logprobs: true, ContinuousUsage: true})
		if err != nil {
			t.Fatal(err)
		}
		evs := allEvents(t, st)
		req := f.requests()[0]
		if opts, _ := req["stream_options"].(map[string]any); opts["continuous_usage_stats"] != nil || req["timings_per_token"] != nil {
			t.Errorf("an OpenAI upstream was sent rill's running-count options: %v", req)
		}
		if s := evs[0].Stats; s.CompletionTokens != 2 || s.PromptTokens != 0 {
			t.Errorf("first event: %+v (two logprob entries, no prompt count yet)", s)
		}
		if s := evs[1].Stats; s.CompletionTokens != 3 {
			t.Errorf("second event: %+v", s)
		}
		if s := evs[2].Stats; !evs[2].Final || s.PromptTokens != 7 || s.CompletionTokens != 3 {
			t.Errorf("final %+v", s)
		}
	})
}

// TestContinuousUsageRillBehindRill: a client of rill in front of rill asks
// for continuous usage; every chunk's running usage comes from the inner
// rill's, rises to the total and counts the prompt from the first chunk.
func TestContinuousUsageRillBehindRill(t *testing.T) {
	t.Parallel()
	inner := front(t, nativeEngine(t, "tiny"))
	e := newUpstream(t, "tiny", upstream.Rill, inner)
	url := front(t, e)
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			t.Parallel()
			body := fmt.Sprintf(`{"model":"tiny","prompt":"Once upon a time","max_tokens":8,"ignore_eos":true,"n":%d,"logprobs":1,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, n)
			a := post(t, url, "/v1/completions", body)
			if a.status != http.StatusOK || !a.done {
				t.Fatalf("status %d, done %v: %s", a.status, a.done, a.body)
			}
			type usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
			var prev usage
			for i, ev := range a.events {
				var c struct {
					Choices []json.RawMessage
					Usage   *usage
				}
				if err := json.Unmarshal(ev, &c); err != nil {
					t.Fatal(err)
				}
				u := c.Usage
				if u == nil {
					t.Fatalf("chunk %d has no usage: %s", i, ev)
				}
				if u.PromptTokens == 0 || u.CompletionTokens < prev.CompletionTokens || (prev.PromptTokens != 0 && u.PromptTokens != prev.PromptTokens) {
					t.Fatalf("chunk %d: usage %+v after %+v", i, u, prev)
				}
				prev = *u
			}
			if prev.CompletionTokens != 8*n {
				t.Errorf("total completion_tokens %d, want %d", prev.CompletionTokens, 8*n)
			}
		})
	}
}

// TestFanOutSendsSiblingsAfterTheFirstToken: for llama.cpp, whose choices
// rill sends as requests of their own, choice 1 goes out only once choice 0
// has sent its first token, so that choice 0's cache hit is what the
// upstream held when the request came, not a sibling's work.
func TestFanOutSendsSiblingsAfterTheFirstToken(t *testing.T) {
	t.Parallel()
	firstSent := make(chan struct{})
	var early atomic.Bool
	u, _ := serve(t, health(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req["seed"] == 1.0 {
			// The prompt takes a while. A real sleep: it is the window in
			// which a fan-out that did not wait would send choice 1; nothing
			// signals a request that is not sent.
			time.Sleep(30 * time.Millisecond)
			// Marked before it is written: once written, choice 1 may
			// arrive before this handler runs on.
			close(firstSent)
			sse(w, `{"choices":[{"index":0,"text":"a","finish_reason":null}]}`)
			sse(w, `{"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":1},"timings":{"cache_n":4,"prompt_n":1,"predicted_n":1}}`, `[DONE]`)
			return
		}
		select {
		case <-firstSent:
		default:
			early.Store(true)
		}
		sse(w, `{"choices":[{"index":0,"text":"b","finish_reason":null}]}`,
			`{"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":1},"timings":{"cache_n":4,"prompt_n":1,"predicted_n":1}}`, `[DONE]`)
	}))
	e := newUpstream(t, "m", upstream.LlamaCpp, u)
	seed := int64(1)
	st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x", N: 2, Sampling: engine.Sampling{Seed: &seed}})
	if err != nil {
		t.Fatal(err)
	}
	evs := allEvents(t, st)
	if early.Load() {
		t.Error("choice 1 was sent before choice 0's first token")
	}
	if len(evs) != 4 {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
}
