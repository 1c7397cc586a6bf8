package conformance

import "fmt"

// RunningWant is what CheckRunning needs to know of a streamed request
// that asked for include_usage and continuous_usage_stats.
type RunningWant struct {
	// Choices is the number of choices the request asked for (n, at least 1).
	Choices int
	// Logprobs: the request asked for one log-probability per token, so the
	// tokens sent so far can be counted.
	Logprobs bool
}

// CheckRunning checks the running usage of a stream (docs/design.md §3 rule 10):
// every chunk with choices carries the usage of the request so far, with
// the arithmetic of CheckUsage; its counts never fall and never pass the
// total of the last chunk; the prompt (one prompt: the suite sends no
// arrays) counts from the first chunk; with logprobs, completion_tokens is
// at least the tokens sent so far and, while every chunk with text carried
// its entries, at most one more per choice (a stop token has no logprob
// entry); and once every choice has finished it is the total. A stream whose counts never rise is named too. CheckStream
// checks the framing (usage objects where they belong).
func CheckRunning(tr *Transcript, want RunningWant) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	total := totalUsage(tr)
	if total == nil {
		return []string{"no total usage to check the running usage against: no chunk with \"choices\": [] carries a usage"}
	}
	n := max(want.Choices, 1)
	var prev *Usage
	prevAt, lastAt, sent := -1, -1, 0
	var last *Usage
	rose := false
	// countable: every chunk with text so far carried logprob entries, so
	// sent counts every token sent (a server may leave them out, as
	// llama.cpp does for tokens its draft model proposed).
	countable := want.Logprobs
	for i, raw := range tr.Chunks {
		c, err := ParseChunk(raw)
		if err != nil || len(c.Choices) == 0 {
			continue // CheckStream names unreadable chunks
		}
		for _, ch := range c.Choices {
			sent += ch.Tokens
			if ch.Text && ch.Tokens == 0 {
				countable = false
			}
		}
		u := c.Usage
		if u == nil {
			add("chunk %d has choices but no running usage", i)
			continue
		}
		for _, q := range CheckUsage(u) {
			add("chunk %d's running usage: %s", i, q)
		}
		if u.PromptTokens != total.PromptTokens {
			add("chunk %d's running prompt_tokens is %d, the request's is %d: the prompt is counted before the first token, so from the first chunk on", i, u.PromptTokens, total.PromptTokens)
		}
		if u.CompletionTokens > total.CompletionTokens {
			add("chunk %d's running completion_tokens %d exceeds the request's total %d", i, u.CompletionTokens, total.CompletionTokens)
		}
		if u.CompletionTokens < total.CompletionTokens {
			rose = true
		}
		if prev != nil && u.CompletionTokens < prev.CompletionTokens {
			add("chunk %d's running completion_tokens %d is below chunk %d's %d: a running count never falls", i, u.CompletionTokens, prevAt, prev.CompletionTokens)
		}
		for _, d := range []struct {
			name            string
			now, was, final *int
		}{
			{"accepted_prediction_tokens", u.AcceptedPredictionTokens, field(prev, accepted), total.AcceptedPredictionTokens},
			{"rejected_prediction_tokens", u.RejectedPredictionTokens, field(prev, rejected), total.RejectedPredictionTokens},
		} {
			switch {
			case d.now == nil:
			case d.final == nil:
				add("chunk %d's running usage has %s %d, the total has none", i, d.name, *d.now)
			case *d.now > *d.final:
				add("chunk %d's running %s %d exceeds the total %d", i, d.name, *d.now, *d.final)
			case d.was != nil && *d.now < *d.was:
				add("chunk %d's running %s %d is below chunk %d's %d: a running count never falls", i, d.name, *d.now, prevAt, *d.was)
			}
		}
		if want.Logprobs {
			switch {
			case u.CompletionTokens < sent:
				add("chunk %d's running completion_tokens is %d, but %d tokens were sent up to it (one logprob entry each)", i, u.CompletionTokens, sent)
			case countable && u.CompletionTokens > sent+n:
				add("chunk %d's running completion_tokens is %d, but only %d tokens were sent up to it (one logprob entry each; at most %d more for stop tokens): it counts tokens not yet sent", i, u.CompletionTokens, sent, n)
			}
		}
		prev, prevAt = u, i
		last, lastAt = u, i
	}
	if last == nil {
		return append(p, "no chunk with choices carries a running usage")
	}
	if last.CompletionTokens != total.CompletionTokens || last.PromptTokens != total.PromptTokens ||
		!sameCount(last.CachedTokens, total.CachedTokens) ||
		!sameCount(last.AcceptedPredictionTokens, total.AcceptedPredictionTokens) ||
		!sameCount(last.RejectedPredictionTokens, total.RejectedPredictionTokens) {
		add("the last chunk with choices (chunk %d) shows %s, the total is %s: once every choice has finished, the running usage is the total",
			lastAt, describe(last), describe(total))
	}
	if !rose && total.CompletionTokens > n {
		add("every chunk with choices shows completion_tokens %d, the total: a running count rises as tokens are sent", total.CompletionTokens)
	}
	return p
}

// totalUsage returns the usage of the last chunk with "choices": [], or nil.
func totalUsage(tr *Transcript) *Usage {
	for i := len(tr.Chunks) - 1; i >= 0; i-- {
		if c, err := ParseChunk(tr.Chunks[i]); err == nil && c.HasChoices && len(c.Choices) == 0 && c.Usage != nil {
			return c.Usage
		}
	}
	return nil
}

func accepted(u *Usage) *int { return u.AcceptedPredictionTokens }
func rejected(u *Usage) *int { return u.RejectedPredictionTokens }

// field returns get(u), or nil for no usage.
func field(u *Usage, get func(*Usage) *int) *int {
	if u == nil {
		return nil
	}
	return get(u)
}

// sameCount reports whether two optional counts are both absent or equal.
func sameCount(a, b *int) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// describe writes a usage's counts compactly for messages.
func describe(u *Usage) string {
	s := fmt.Sprintf("prompt %d, completion %d", u.PromptTokens, u.CompletionTokens)
	opt := func(name string, v *int) {
		if v != nil {
			s += fmt.Sprintf(", %s %d", name, *v)
		}
	}
	opt("cached", u.CachedTokens)
	opt("accepted", u.AcceptedPredictionTokens)
	opt("rejected", u.RejectedPredictionTokens)
	return s
}
