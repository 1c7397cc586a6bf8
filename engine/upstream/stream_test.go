package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/upstream"
	"rill/internal/wait"
)

// sse writes events as an upstream stream, flushing each.
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		fmt.Fprintf(w, "data: %s\n\n", e)
		w.(http.Flusher).Flush()
	}
}

// health answers GET /health; the rest goes to h.
func health(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		h(w, r)
	}
}

// run collects a stream: text per choice, final events, and the error
// that ended it (nil for io.EOF).
type run struct {
	text   map[int]string
	finals map[int]engine.Event
	err    error
}

func collect(t *testing.T, st engine.Stream) run {
	t.Helper()
	r := run{text: map[int]string{}, finals: map[int]engine.Event{}}
	for {
		ev, err := engine.Recv(st)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.err = err
			}
			return r
		}
		if ev.Final {
			if _, dup := r.finals[ev.Choice]; dup {
				t.Errorf("two final events for choice %d", ev.Choice)
			}
			r.finals[ev.Choice] = ev
		}
		r.text[ev.Choice] += ev.Text
	}
}

func TestStreamChoices(t *testing.T) {
	t.Parallel()
	t.Run("vllm n=2: totals on choice 0", func(t *testing.T) {
		t.Parallel()
		u, _ := serve(t, health(func(w http.ResponseWriter, r *http.Request) {
			sse(w,
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}},{"index":1,"delta":{"role":"assistant","content":""}}]}`,
				`{"choices":[{"index":1,"delta":{"content":"B"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"A"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}`,
				`{"choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}`,
				`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}`,
				`[DONE]`)
		}))
		e := newUpstream(t, "m", upstream.VLLM, u)
		st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x", N: 2})
		if err != nil {
			t.Fatal(err)
		}
		r := collect(t, st)
		if r.err != nil || r.text[0] != "Aa" || r.text[1] != "B" || len(r.finals) != 2 {
			t.Fatalf("got %+v", r)
		}
		f0, f1 := r.finals[0], r.finals[1]
		if f0.FinishReason != engine.FinishLength || f1.FinishReason != engine.FinishStop {
			t.Errorf("finish reasons %q %q", f0.FinishReason, f1.FinishReason)
		}
		if s := f0.Stats; s.PromptTokens != 10 || s.CompletionTokens != 5 || s.CachedTokens == nil || *s.CachedTokens != 8 {
			t.Errorf("choice 0 stats %+v", s)
		}
		if s := f1.Stats; s.PromptTokens != 10 || s.CompletionTokens != 0 || s.CachedTokens != nil || s.DraftAccepted != nil {
			t.Errorf("choice 1 stats %+v", s)
		}
	})
	t.Run("llamacpp n=2: one request per choice", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var seeds []float64
		u, _ := serve(t, health(func(w http.ResponseWriter, r *http.Request) {
			var req map[string]any
			json.NewDecoder(r.Body).Decode(&req)
			seed, _ := req["seed"].(float64)
			mu.Lock()
			seeds = append(seeds, seed)
			mu.Unlock()
			if _, has := req["n"]; has {
				http.Error(w, `{"error":{"code":400,"message":"n sent"}}`, http.StatusBadRequest)
				return
			}
			word := fmt.Sprintf("s%d", int(seed))
			sse(w,
				fmt.Sprintf(`{"choices":[{"index":0,"text":%q,"finish_reason":null}]}`, word),
				fmt.Sprintf(`{"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":%d},"timings":{"cache_n":%d,"prompt_n":1,"draft_n":4,"draft_n_accepted":3}}`, int(seed), int(seed)-3),
				`[DONE]`)
		}))
		e := newUpstream(t, "m", upstream.LlamaCpp, u)
		seed := int64(7)
		st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x", N: 2, Sampling: engine.Sampling{Seed: &seed}})
		if err != nil {
			t.Fatal(err)
		}
		r := collect(t, st)
		if r.err != nil || r.text[0] != "s7" || r.text[1] != "s8" {
			t.Fatalf("got %+v", r)
		}
		for j, want := range []int{7, 8} {
			s := r.finals[j].Stats
			if s == nil || s.CompletionTokens != want || *s.DraftAccepted != 3 || *s.DraftRejected != 1 {
				t.Errorf("choice %d stats %+v", j, s)
			}
		}
		// The request's cache hit is choice 0's, which went first; a
		// sibling's says nothing about the request.
		if c, w := r.finals[0].Stats.CachedTokens, r.finals[0].Stats.CacheWriteTokens; c == nil || *c != 4 || w == nil || *w != 1 {
			t.Errorf("choice 0 cached %v, written %v; want 4, 1", c, w)
		}
		if c, w := r.finals[1].Stats.CachedTokens, r.finals[1].Stats.CacheWriteTokens; c != nil || w != nil {
			t.Errorf("choice 1 cached %v, written %v; want neither", c, w)
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(seeds) != "[7 8]" {
			t.Errorf("upstream got requests with seeds %v, want [7 8] (choice 0 first)", seeds)
		}
	})
}

// TestStreamFailures covers the ways an upstream breaks: before the first
// event (retried on another replica), mid-stream (an ErrUpstream error),
// silence (the idle timeout), an error event, and an answer that is not a
// stream at all.
func TestStreamFailures(t *testing.T) {
	t.Parallel()
	good := health(func(w http.ResponseWriter, r *http.Request) {
		sse(w, `{"choices":[{"index":0,"text":"fine","finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1}}`, `[DONE]`)
	})
	// cut sends events, then drops the connection.
	cut := func(events ...string) http.HandlerFunc {
		return health(func(w http.ResponseWriter, r *http.Request) {
			sse(w, events...)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		})
	}
	cases := []struct {
		name      string
		replicas  []http.HandlerFunc
		idle      time.Duration
		wantText  string
		wantErr   error // nil: completes
		wantDown  []bool
		wantMatch string
	}{
		{"cut before the first event: retried", []http.HandlerFunc{cut(`{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`), good},
			0, "fine", nil, []bool{true, false}, ""},
		{"cut mid-stream", []http.HandlerFunc{cut(`{"choices":[{"index":0,"text":"par","finish_reason":null}]}`), good},
			0, "par", engine.ErrUpstream, []bool{true, false}, "broke off"},
		{"silent replica: idle timeout, retried", []http.HandlerFunc{health(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}), good}, 100 * time.Millisecond, "fine", nil, []bool{true, false}, ""},
		{"stream ends early", []http.HandlerFunc{health(func(w http.ResponseWriter, r *http.Request) {
			sse(w, `{"choices":[{"index":0,"text":"half","finish_reason":null}]}`)
		})}, 0, "half", engine.ErrUpstream, []bool{false}, "ended before"},
		{"error event of the client's fault", []http.HandlerFunc{health(func(w http.ResponseWriter, r *http.Request) {
			sse(w, `{"error":{"code":400,"message":"the prompt is too long","type":"exceed_context_size_error"}}`)
		})}, 0, "", &engine.RequestError{}, []bool{false}, "too long"},
		{"error event of the server: retried", []http.HandlerFunc{health(func(w http.ResponseWriter, r *http.Request) {
			sse(w, `{"error":{"code":500,"message":"oops","type":"server_error"}}`)
		}), good}, 0, "fine", nil, []bool{false, false}, ""},
		{"a whole JSON answer", []http.HandlerFunc{health(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
		})}, 0, "whole", nil, []bool{false}, ""},
		{"unreadable chunk", []http.HandlerFunc{health(func(w http.ResponseWriter, r *http.Request) {
			sse(w, `{"choices":[{"index":0,"text":"ok"}]}`, `{"choices":[`)
		})}, 0, "ok", engine.ErrUpstream, []bool{false}, "unreadable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := upstream.Options{ID: "m", Kind: upstream.VLLM, PrefixBytes: -1, IdleTimeout: tc.idle,
				HealthInterval: time.Hour, Logger: discard}
			hits := make([]*atomic.Int32, len(tc.replicas))
			scraped := make([]*atomic.Bool, len(tc.replicas))
			for i, h := range tc.replicas {
				hits[i], scraped[i] = new(atomic.Int32), new(atomic.Bool)
				u, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					switch {
					case r.Method == http.MethodPost:
						hits[i].Add(1)
					case r.URL.Path == "/metrics":
						scraped[i].Store(true)
					}
					h(w, r)
				}))
				opts.Replicas = append(opts.Replicas, upstream.Replica{URL: u})
			}
			e, err := upstream.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			// Let the first health checks pass, so that marks come from the
			// request: a check asks for /metrics once it has recorded the
			// replica's health.
			wait.For(t, "the first health check of every replica", func() bool {
				for _, s := range scraped {
					if !s.Load() {
						return false
					}
				}
				return true
			})
			// Without affinity and with equal loads, which replica comes first
			// rotates: ask until the first one (the one under test) was tried.
			var r run
			for range 8 {
				st, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x"})
				if err != nil {
					r = run{err: err}
				} else {
					r = collect(t, st)
				}
				if hits[0].Load() > 0 {
					break
				}
			}
			var re *engine.RequestError
			switch {
			case tc.wantErr == nil && r.err != nil:
				t.Fatalf("err %v", r.err)
			case tc.wantErr == engine.ErrUpstream && !errors.Is(r.err, engine.ErrUpstream):
				t.Fatalf("err %v, want ErrUpstream", r.err)
			case tc.wantErr != nil && tc.wantErr != engine.ErrUpstream && !errors.As(r.err, &re):
				t.Fatalf("err %v, want a RequestError", r.err)
			}
			if r.err != nil && !strings.Contains(r.err.Error(), tc.wantMatch) {
				t.Errorf("err %q does not say %q", r.err, tc.wantMatch)
			}
			if r.text[0] != tc.wantText {
				t.Errorf("text %q, want %q", r.text[0], tc.wantText)
			}
			for i, st := range e.Replicas() {
				if st.Healthy == tc.wantDown[i] {
					t.Errorf("replica %d healthy=%v (%s)", i, st.Healthy, st.LastError)
				}
				if st.InFlight != 0 {
					t.Errorf("replica %d has %d requests in flight after the stream", i, st.InFlight)
				}
			}
		})
	}
}

// TestCancelPropagates checks that cancelling the request's context ends
// the upstream request at once and frees the replica.
func TestCancelPropagates(t *testing.T) {
	t.Parallel()
	upstreamDone := make(chan struct{})
	var first atomic.Bool
	u, _ := serve(t, health(func(w http.ResponseWriter, r *http.Request) {
		sse(w, `{"choices":[{"index":0,"text":"tick","finish_reason":null}]}`)
		first.Store(true)
		<-r.Context().Done()
		close(upstreamDone)
	}))
	e := newUpstream(t, "m", upstream.LlamaCpp, u)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.Generate(ctx, &engine.Request{Model: "m", Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := engine.Recv(st); err != nil || ev.Text != "tick" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	if e.Replicas()[0].InFlight != 1 {
		t.Errorf("in flight %d during the stream", e.Replicas()[0].InFlight)
	}
	cancel()
	select {
	case <-upstreamDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request outlived its context")
	}
	if _, err := engine.Recv(st); !errors.Is(err, context.Canceled) {
		t.Errorf("Recv after cancel: %v, want context.Canceled", err)
	}
	if st := e.Replicas()[0]; st.InFlight != 0 || !st.Healthy {
		t.Errorf("after cancel: %+v", st)
	}
}

func TestGenerateRefusals(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	u, _ := serve(t, health(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	e := newUpstream(t, "m", upstream.OpenAI, u)
	var re *engine.RequestError
	if _, err := e.Generate(context.Background(), &engine.Request{Model: "other", Prompt: "x"}); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x", Sampling: engine.Sampling{TopK: 3}}); !errors.As(err, &re) || re.Param != "top_k" {
		t.Errorf("top_k on openai: %v", err)
	}
	if hits.Load() != 0 {
		t.Error("a refused request went upstream")
	}
	e.Close()
	if _, err := e.Generate(context.Background(), &engine.Request{Model: "m", Prompt: "x"}); !errors.Is(err, engine.ErrUpstream) {
		t.Errorf("after Close: %v", err)
	}
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts upstream.Options
		want string
	}{
		{"no id", upstream.Options{Kind: upstream.VLLM, Replicas: []upstream.Replica{{URL: "http://h"}}}, "id is required"},
		{"no kind", upstream.Options{ID: "m", Replicas: []upstream.Replica{{URL: "http://h"}}}, "unknown kind"},
		{"bad kind", upstream.Options{ID: "m", Kind: "vlm", Replicas: []upstream.Replica{{URL: "http://h"}}}, "unknown kind"},
		{"no replicas", upstream.Options{ID: "m", Kind: upstream.VLLM}, "no replicas"},
		{"bad url", upstream.Options{ID: "m", Kind: upstream.VLLM, Replicas: []upstream.Replica{{URL: "h:80"}}}, "scheme"},
		{"twice", upstream.Options{ID: "m", Kind: upstream.VLLM, Replicas: []upstream.Replica{{URL: "http://h/v1"}, {URL: "http://h"}}}, "listed twice"},
		{"negative", upstream.Options{ID: "m", Kind: upstream.VLLM, IdleTimeout: -1, Replicas: []upstream.Replica{{URL: "http://h"}}}, "negative"},
	}
	for _, tc := range cases {
		e, err := upstream.New(tc.opts)
		if err == nil {
			e.Close()
			t.Errorf("%s: accepted", tc.name)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	e, err := upstream.New(upstream.Options{ID: "m", Kind: "llama.cpp", ContextLength: 4096, Replicas: []upstream.Replica{{URL: "http://h"}, {URL: "http://g"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m := e.Models()[0]
	if m.ID != "m" || m.OwnedBy != "llamacpp" || m.ContextLength != 4096 || !m.PrefixCache || !strings.Contains(m.Description, "2 replicas") {
		t.Errorf("model %+v", m)
	}
}
