package service

import (
	"time"

	"rill/engine"
)

// Timings is rill's `timings` object, in the shape llama.cpp's server
// gives its final responses: prompt and generation counts, their times in
// milliseconds and rates, the prefix cache's share of the prompt, and the
// draft counts when drafting was active. A client asks for it with the
// request extension "timings": true (chat and legacy completions); it then
// rides on the non-streamed response and on the last chunk of a stream
// (the usage chunk with include_usage, else a chunk of its own with no
// choices). Its counts are the usage's (docs/design.md §3):
//
//	cache_n          = prompt_tokens_details.cached_tokens (0 when not measured)
//	prompt_n         = prompt_tokens - cache_n, the prompt tokens computed
//	predicted_n      = completion_tokens
//	draft_n_accepted = accepted_prediction_tokens
//	draft_n          = accepted_prediction_tokens + rejected_prediction_tokens
//
// Times are wall clock, as the engine measured them (engine.Stats):
// prompt_ms from the prompt's first forward pass to the first token
// (waiting for admission excluded), predicted_ms from there to the last
// token. Choices and prompts of one request run together, so each is the
// longest any choice took; the rates are the request's tokens over them.
type Timings struct {
	CacheN, PromptN, PredictedN int
	PromptTime, PredictedTime   time.Duration
	// DraftN and DraftAccepted are nil when drafting was not active.
	DraftN, DraftAccepted *int
}

// AssembleTimings returns the timings of a finished request from its
// usage u (AssembleUsage of the same Stats) and the Stats of its choices,
// [prompt][choice]. It is pure.
func AssembleTimings(prompts [][]engine.Stats, u *Usage) Timings {
	t := Timings{PredictedN: u.CompletionTokens}
	if u.CachedTokens != nil {
		t.CacheN = *u.CachedTokens
	}
	t.PromptN = u.PromptTokens - t.CacheN
	if u.AcceptedPredictionTokens != nil || u.RejectedPredictionTokens != nil {
		accepted, drafted := 0, 0
		if u.AcceptedPredictionTokens != nil {
			accepted = *u.AcceptedPredictionTokens
		}
		if u.RejectedPredictionTokens != nil {
			drafted = *u.RejectedPredictionTokens
		}
		drafted += accepted
		t.DraftN, t.DraftAccepted = &drafted, &accepted
	}
	for _, choices := range prompts {
		for _, st := range choices {
			t.PromptTime = max(t.PromptTime, st.PromptTime)
			t.PredictedTime = max(t.PredictedTime, st.GenerationTime)
		}
	}
	return t
}

// AppendJSON appends the timings object, llama.cpp's fields in its order.
func (t *Timings) AppendJSON(b []byte) []byte {
	promptMS, predictedMS := millis(t.PromptTime), millis(t.PredictedTime)
	b = append(b, `{"cache_n":`...)
	b = appendInt(b, t.CacheN)
	b = append(b, `,"prompt_n":`...)
	b = appendInt(b, t.PromptN)
	b = appendRates(b, "prompt", promptMS, t.PromptN)
	b = append(b, `,"predicted_n":`...)
	b = appendInt(b, t.PredictedN)
	b = appendRates(b, "predicted", predictedMS, t.PredictedN)
	if t.DraftN != nil {
		b = append(b, `,"draft_n":`...)
		b = appendInt(b, *t.DraftN)
		b = append(b, `,"draft_n_accepted":`...)
		b = appendInt(b, *t.DraftAccepted)
	}
	return append(b, '}')
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// appendRates appends ,"<what>_ms":…,"<what>_per_token_ms":…,"<what>_per_second":…
// for n tokens in ms milliseconds. A rate with nothing to divide by is 0
// (llama.cpp would write inf or NaN, which JSON has no number for).
func appendRates(b []byte, what string, ms float64, n int) []byte {
	perToken, perSecond := 0.0, 0.0
	if n > 0 {
		perToken = ms / float64(n)
	}
	if ms > 0 {
		perSecond = float64(n) * 1000 / ms
	}
	b = append(b, `,"`...)
	b = append(b, what...)
	b = append(b, `_ms":`...)
	b = appendFloat(b, ms)
	b = append(b, `,"`...)
	b = append(b, what...)
	b = append(b, `_per_token_ms":`...)
	b = appendFloat(b, perToken)
	b = append(b, `,"`...)
	b = append(b, what...)
	b = append(b, `_per_second":`...)
	return appendFloat(b, perSecond)
}
