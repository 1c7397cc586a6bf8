package upstream

import "rill/engine"

// running builds the running Stats of a stream's choices for a request
// that asked for continuous usage (engine.Request.ContinuousUsage), from
// what the kind reports while it streams (see runningSource):
//
//   - llama.cpp (timings_per_token): exact. Its counters on each chunk are
//     the choice's own, since rill sends one request per choice.
//   - vLLM, SGLang (continuous_usage_stats): exact, from the usage on each
//     chunk, which counts that chunk's choice.
//   - rill: prompt and cached tokens exact; a choice's completion tokens
//     exact when it is the request's only choice, else counted as below.
//   - any other kind (tabbyAPI, OpenAI): counted. Each chunk with text is
//     one token, or as many as its logprob entries when the client asked
//     for logprobs (then exact); servers that stream one token per chunk,
//     as OpenAI, vLLM and llama.cpp do, are counted exactly either way,
//     and a chunk that holds several tokens (a held-back stop string)
//     is counted as one. The prompt's counts are unknown until the
//     upstream's usage arrives at the end, so running usage shows 0
//     prompt tokens until then.
//
// The final events carry the upstream's totals, as without continuous
// usage. It is owned by the stream's goroutine.
type running struct {
	kind      Kind
	source    runningSource
	predicted bool
	// prompt, cached and written are the prompt's counts as last
	// reported: the final Stats carry the same, so that the running
	// usage's input counts are the request's from the first event on.
	prompt  int
	cached  *float64
	written *int
	// choices are the running Stats last sent, per choice.
	choices []engine.Stats
}

func newRunning(k Kind, n int, predicted bool) *running {
	return &running{kind: k, source: k.caps().running, predicted: predicted, choices: make([]engine.Stats, n)}
}

// chunk returns the counts ch reports while the request streams, or nil.
// Prompt and cached counts are kept for the chunks that report none.
func (r *running) chunk(ch *wireChunk) *engine.Stats {
	var st engine.Stats
	switch {
	case r.source == runningTimings && ch.Timings != nil:
		st = r.kind.stats(nil, ch.Timings, r.predicted)
	case (r.source == runningChoiceUsage || r.source == runningRequestUsage) && ch.Usage != nil && len(ch.Choices) > 0:
		st = r.kind.stats(ch.Usage, nil, r.predicted)
	default:
		return nil
	}
	r.prompt, r.cached, r.written = st.PromptTokens, st.CachedTokens, st.CacheWriteTokens
	return &st
}

// opening takes the prompt's counts that the upstream reported before
// its first token (a Messages stream's message_start); a count of 0
// prompt tokens is none (SGLang's message_start has no counts yet).
func (r *running) opening(st engine.Stats) {
	if st.PromptTokens > 0 {
		r.prompt, r.cached, r.written = st.PromptTokens, st.CachedTokens, st.CacheWriteTokens
	}
}

// event returns the running Stats of choice j after an event of tokens
// tokens (its logprob entries, 0 when none were asked for), with report the
// counts its chunk carried, if any.
func (r *running) event(j, tokens int, report *engine.Stats) *engine.Stats {
	st := r.choices[j]
	st.PromptTokens, st.CachedTokens, st.CacheWriteTokens = r.prompt, r.cached, r.written
	own := report != nil && (r.source != runningRequestUsage || len(r.choices) == 1)
	if own {
		st.CompletionTokens = report.CompletionTokens
		st.DraftAccepted, st.DraftRejected = report.DraftAccepted, report.DraftRejected
		if a := st.DraftAccepted; a != nil && *a > st.CompletionTokens {
			// llama.cpp counts a verified draft as accepted before it has
			// sent its tokens; so far, only the tokens sent are accepted.
			sent := st.CompletionTokens
			st.DraftAccepted = &sent
		}
	} else {
		st.CompletionTokens += max(tokens, 1)
	}
	r.choices[j] = st
	return &st
}

// finals returns the Stats of every choice's final event from the
// request's totals. Choice j > 0 keeps the counts its running Stats last
// showed and choice 0 gets the rest of the totals, so that the service's
// running usage (summed over choices) goes from what it showed to the
// totals without counting anything twice in between.
func (r *running) finals(total engine.Stats) []engine.Stats {
	out := make([]engine.Stats, len(r.choices))
	out[0] = total
	left := total.CompletionTokens
	accLeft, rejLeft := deref(total.DraftAccepted), deref(total.DraftRejected)
	for j := len(out) - 1; j >= 1; j-- {
		run := r.choices[j]
		c := min(run.CompletionTokens, left)
		left -= c
		out[j] = engine.Stats{PromptTokens: total.PromptTokens, CompletionTokens: c}
		if total.DraftAccepted != nil && run.DraftAccepted != nil {
			a, rej := min(*run.DraftAccepted, accLeft), min(deref(run.DraftRejected), rejLeft)
			accLeft, rejLeft = accLeft-a, rejLeft-rej
			out[j].DraftAccepted, out[j].DraftRejected = &a, &rej
		}
	}
	out[0].CompletionTokens = left
	if total.DraftAccepted != nil {
		out[0].DraftAccepted, out[0].DraftRejected = &accLeft, &rejLeft
	}
	return out
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
