package native

import (
	"context"
	"errors"
	"io"
	"testing"

	"rill/engine"
)

// TestContinuousUsageCounts checks the running counts of Request.ContinuousUsage:
// every non-final event with text or logprobs carries its choice's Stats so
// far, which rise to the totals of its final event, and without the flag no
// non-final event carries Stats.
func TestContinuousUsageCounts(t *testing.T) {
	t.Parallel()
	plain := newTestEngine(t, Options{})
	engines := map[string]*Engine{
		"plain":       plain,
		"draft model": newDraftEngine(t, Options{}),
		"ngram":       newTestEngine(t, Options{NGram: true}),
	}
	id := plain.Models()[0].ID
	requests := map[string]engine.Request{
		"one choice to max_tokens": {Prompt: repetitive, MaxTokens: 40, IgnoreEOS: true, Logprobs: true},
		"two choices sampled":      {Prompt: "Once upon a time", MaxTokens: 24, N: 2, Logprobs: true, Sampling: engine.Sampling{Temperature: 1, Seed: seed(7)}},
		"stop string":              {Prompt: repetitive, MaxTokens: 40, IgnoreEOS: true, Logprobs: true, Stop: []string{"fox"}},
		"without logprobs":         {Prompt: repetitive, MaxTokens: 30, IgnoreEOS: true},
	}
	for ename, e := range engines {
		for rname, base := range requests {
			t.Run(ename+"/"+rname, func(t *testing.T) {
				t.Parallel()
				req := base
				req.Model = id
				req.ContinuousUsage = true
				checkRunningCounts(t, e, &req)
				req.ContinuousUsage = false
				for _, ev := range events(t, e, &req) {
					if !ev.Final && ev.Stats != nil {
						t.Fatalf("a non-final event carries Stats without ContinuousUsage: %+v", ev)
					}
				}
			})
		}
	}
}

// checkRunningCounts generates req and checks its running counts against the
// events and the final totals of every choice.
func checkRunningCounts(t *testing.T, e *Engine, req *engine.Request) {
	t.Helper()
	n := req.Choices()
	last := make([]*engine.Stats, n) // the latest running counts per choice
	entries := make([]int, n)        // logprob entries so far per choice
	for _, ev := range events(t, e, req) {
		j := ev.Choice
		st := ev.Stats
		if st == nil {
			t.Fatalf("choice %d: an event without Stats although ContinuousUsage is set: %+v", j, ev)
		}
		entries[j] += len(ev.Logprobs)
		if p := last[j]; p != nil {
			if st.CompletionTokens < p.CompletionTokens {
				t.Fatalf("choice %d: completion tokens fell from %d to %d", j, p.CompletionTokens, st.CompletionTokens)
			}
			if st.PromptTokens != p.PromptTokens || *st.CachedTokens != *p.CachedTokens {
				t.Fatalf("choice %d: prompt %d cached %v, earlier prompt %d cached %v", j, st.PromptTokens, *st.CachedTokens, p.PromptTokens, *p.CachedTokens)
			}
			if (st.DraftAccepted == nil) != (p.DraftAccepted == nil) {
				t.Fatalf("choice %d: draft counters come and go", j)
			}
			if st.DraftAccepted != nil && (*st.DraftAccepted < *p.DraftAccepted || *st.DraftRejected < *p.DraftRejected) {
				t.Fatalf("choice %d: draft counters fell from %d/%d to %d/%d", j, *p.DraftAccepted, *p.DraftRejected, *st.DraftAccepted, *st.DraftRejected)
			}
		}
		if !ev.Final && req.Logprobs && st.CompletionTokens != entries[j] {
			t.Fatalf("choice %d: %d completion tokens so far, but %d tokens were sent with their logprobs", j, st.CompletionTokens, entries[j])
		}
		if st.DraftAccepted != nil && *st.DraftAccepted > st.CompletionTokens {
			t.Fatalf("choice %d: %d accepted drafts of %d tokens", j, *st.DraftAccepted, st.CompletionTokens)
		}
		last[j] = st
		if ev.Final && st.CompletionTokens == 0 {
			t.Fatalf("choice %d: final event counts no tokens", j)
		}
	}
	for j, st := range last {
		if st == nil {
			t.Fatalf("choice %d has no events", j)
		}
	}
}

// events returns every event of req in order, checking that each choice
// ends with exactly one final event.
func events(t *testing.T, e *Engine, req *engine.Request) []engine.Event {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	var out []engine.Event
	finals := 0
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if ev.Final {
			finals++
		}
		out = append(out, ev)
	}
	if finals != req.Choices() {
		t.Fatalf("%d final events for %d choices", finals, req.Choices())
	}
	return out
}
