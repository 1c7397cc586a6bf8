package native

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"rill/engine"
)

// progressRun is what one request streamed: its progress events in order,
// the index (among all events) of its first output, and its choices'
// final Stats.
type progressRun struct {
	progress    []engine.Progress
	firstOutput int // -1: none
	finals      []engine.Stats
	events      int
}

func runProgress(t *testing.T, e *Engine, req *engine.Request) progressRun {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := progressRun{firstOutput: -1}
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Progress != nil:
			if ev.Text != "" || ev.Final || ev.Stats != nil || ev.Choice != 0 {
				t.Fatalf("a progress event with more in it: %+v", ev)
			}
			r.progress = append(r.progress, *ev.Progress)
		case r.firstOutput < 0:
			r.firstOutput = r.events
		}
		if ev.Final {
			r.finals = append(r.finals, *ev.Stats)
		}
		r.events++
	}
}

// TestPromptProgress: a prompt several prefill chunks long, on the test
// model with a 32-token budget per forward pass, reports its progress
// when asked: one event as processing begins (the cached prefix, after 0
// ms), then one per chunk, all before the first output, processed growing
// strictly to the whole prompt, which is the prompt less its cached
// tokens computed; a repeated prompt reports its cached prefix. Not
// asked, no progress event comes.
func TestPromptProgress(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{MaxBatchTokens: 32})
	id := e.Models()[0].ID
	prompt := strings.Repeat("The river sang a quiet song to the stones. ", 12)
	tests := []struct {
		name   string
		asked  bool
		n      int
		cached bool // the prompt was seen before: its whole blocks are cached
	}{
		{"cold", true, 1, false},
		{"warm", true, 1, true},
		{"two choices", true, 2, true},
		{"not asked", false, 1, true},
	}
	for _, tt := range tests { // in order: each warms the cache for the next
		t.Run(tt.name, func(t *testing.T) {
			r := runProgress(t, e, &engine.Request{Model: id, Prompt: prompt, MaxTokens: 4, IgnoreEOS: true, N: tt.n, Progress: tt.asked})
			st := r.finals[0]
			cached := int(*st.CachedTokens)
			if tt.cached != (cached > 0) {
				t.Fatalf("cached tokens %d; want some: %v", cached, tt.cached)
			}
			if !tt.asked {
				if len(r.progress) != 0 {
					t.Fatalf("%d progress events without asking", len(r.progress))
				}
				return
			}
			// ceil((P-cached)/32) forward passes compute the prompt.
			chunks := (st.PromptTokens - cached + 31) / 32
			if chunks < 2 && !tt.cached {
				t.Fatalf("a prompt of %d tokens is not several chunks of 32", st.PromptTokens)
			}
			if len(r.progress) != 1+chunks {
				t.Fatalf("%d progress events, want one at the start and one per chunk: %d; %+v", len(r.progress), 1+chunks, r.progress)
			}
			if first := r.progress[0]; first.Processed != cached || first.Elapsed != 0 {
				t.Fatalf("first progress %+v: want the cached prefix, %d tokens, at 0", first, cached)
			}
			if r.firstOutput < len(r.progress) {
				t.Fatalf("output at event %d, before the last progress event (%d)", r.firstOutput, len(r.progress))
			}
			prev := cached
			for i, p := range r.progress[1:] {
				if p.Total != st.PromptTokens || p.Cached != cached {
					t.Errorf("progress %d: total %d, cache %d; want %d, %d", i+1, p.Total, p.Cached, st.PromptTokens, cached)
				}
				if p.Processed <= prev || p.Processed > p.Total {
					t.Errorf("progress %d: processed %d after %d (total %d): not growing", i+1, p.Processed, prev, p.Total)
				}
				if p.Elapsed < r.progress[i].Elapsed { // the one before it
					t.Errorf("progress %d: elapsed %v before %v", i+1, p.Elapsed, r.progress[i].Elapsed)
				}
				prev = p.Processed
			}
			last := r.progress[len(r.progress)-1]
			if last.Processed != st.PromptTokens || last.Processed-last.Cached != st.PromptTokens-cached {
				t.Errorf("last progress %+v: want the whole prompt, %d tokens computed of %d", last, st.PromptTokens-cached, st.PromptTokens)
			}
			if st.PromptTime <= 0 || st.GenerationTime <= 0 {
				t.Errorf("prompt time %v, generation time %v: not measured", st.PromptTime, st.GenerationTime)
			}
			if st.PromptTime < last.Elapsed {
				t.Errorf("prompt time %v is shorter than the prompt's progress took (%v)", st.PromptTime, last.Elapsed)
			}
		})
	}
}

// TestRequestPhaseSpans: a request whose context carries a recording span
// gets its queue, prefill and decode spans as that span's children, one
// after the other; one without gets none.
func TestRequestPhaseSpans(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{MaxBatchTokens: 32})
	rec := tracetest.NewSpanRecorder()
	tp := trace.NewTracerProvider(trace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	st, err := e.Generate(ctx, &engine.Request{Model: e.Models()[0].ID, Prompt: strings.Repeat("A song of stones. ", 10), MaxTokens: 3, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := engine.Recv(st); err != nil {
			break
		}
	}
	parent.End()
	if _, err := e.Generate(context.Background(), &engine.Request{Model: e.Models()[0].ID, Prompt: "untraced", MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	var names []string
	var prevEnd int64
	for _, s := range rec.Ended() {
		if s.Name() == "request" {
			continue
		}
		names = append(names, s.Name())
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s span's parent is not the request's span", s.Name())
		}
		if start := s.StartTime().UnixNano(); start < prevEnd {
			t.Errorf("%s span starts before the previous phase ended", s.Name())
		}
		prevEnd = s.EndTime().UnixNano()
	}
	if strings.Join(names, ",") != "queue,prefill,decode" {
		t.Fatalf("engine spans %v, want queue, prefill, decode", names)
	}
}

// TestRunningTimes: with ContinuousUsage the running Stats carry the
// prompt's time, fixed from the first token on, and the generation time
// so far, growing; the final event's match them.
func TestRunningTimes(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{MaxBatchTokens: 32})
	st, err := e.Generate(context.Background(), &engine.Request{Model: e.Models()[0].ID,
		Prompt: strings.Repeat("A song of stones. ", 10), MaxTokens: 8, IgnoreEOS: true, ContinuousUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	var stats []engine.Stats
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stats == nil {
			t.Fatalf("an event without Stats under ContinuousUsage: %+v", ev)
		}
		stats = append(stats, *ev.Stats)
	}
	for i, s := range stats {
		if s.PromptTime <= 0 || s.PromptTime != stats[0].PromptTime {
			t.Errorf("event %d: prompt time %v, want the first event's %v, above 0", i, s.PromptTime, stats[0].PromptTime)
		}
		if i > 0 && s.GenerationTime < stats[i-1].GenerationTime {
			t.Errorf("event %d: generation time %v after %v", i, s.GenerationTime, stats[i-1].GenerationTime)
		}
	}
	if last := stats[len(stats)-1]; last.GenerationTime <= 0 {
		t.Errorf("final generation time %v over %d tokens", last.GenerationTime, last.CompletionTokens)
	}
}
