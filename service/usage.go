package service

import (
	"math"
	"strconv"

	"rill/engine"
)

// Usage is the wire `usage` of one request (docs/design.md §3). Pointer fields are
// the optional details: nil means "not measured" and the key is left out,
// a non-nil 0 means "measured, none".
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int

	// CachedTokens is prompt_tokens_details.cached_tokens.
	CachedTokens *int
	// AcceptedPredictionTokens and RejectedPredictionTokens are the draft
	// counters of completion_tokens_details, set only when drafting was active.
	AcceptedPredictionTokens *int
	RejectedPredictionTokens *int
	// ReasoningTokens is completion_tokens_details.reasoning_tokens.
	ReasoningTokens *int
}

// AssembleUsage turns the Stats of a finished request into its wire usage.
// prompts holds, per prompt of the request, the Stats of each of its choices
// (prompts[p][j] is choice j of prompt p). The rules of docs/design.md §3:
//
//   - prompt_tokens and cached_tokens count each prompt once, however many
//     choices share it: the prompt's count is its first choice's, its cached
//     count the smallest any choice measured (choices that reuse blocks a
//     sibling just computed did not find them in the cache before the request).
//   - completion and draft counters are summed over every choice.
//   - cached_tokens is present exactly when some choice measured a prefix
//     cache; the sum over prompts is rounded half to even and clamped to
//     [0, prompt_tokens].
//   - each completion_tokens_details counter is present exactly when some
//     choice reported it; the object is absent when all are.
//   - total_tokens = prompt_tokens + completion_tokens.
//
// AssembleUsage is pure; it never fails.
func AssembleUsage(prompts [][]engine.Stats) Usage {
	var u Usage
	var cached float64
	measured := false
	var accepted, rejected, reasoning int
	var haveAccepted, haveRejected, haveReasoning bool
	for _, choices := range prompts {
		if len(choices) == 0 {
			continue
		}
		prompt := max(choices[0].PromptTokens, 0)
		u.PromptTokens += prompt
		promptCached := math.Inf(1)
		for _, st := range choices {
			u.CompletionTokens += max(st.CompletionTokens, 0)
			if st.CachedTokens != nil {
				promptCached = min(promptCached, *st.CachedTokens)
			}
			if st.DraftAccepted != nil {
				accepted += max(*st.DraftAccepted, 0)
				haveAccepted = true
			}
			if st.DraftRejected != nil {
				rejected += max(*st.DraftRejected, 0)
				haveRejected = true
			}
			if st.ReasoningTokens != nil {
				reasoning += max(*st.ReasoningTokens, 0)
				haveReasoning = true
			}
		}
		if !math.IsInf(promptCached, 1) {
			measured = true
			if !math.IsNaN(promptCached) {
				cached += min(max(promptCached, 0), float64(prompt))
			}
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if measured {
		n := CachedTokens(cached, u.PromptTokens)
		u.CachedTokens = &n
	}
	if haveAccepted {
		u.AcceptedPredictionTokens = &accepted
	}
	if haveRejected {
		u.RejectedPredictionTokens = &rejected
	}
	if haveReasoning {
		u.ReasoningTokens = &reasoning
	}
	return u
}

// CachedTokens is the wire cached_tokens for an engine's (possibly
// fractional) count: rounded half to even, as Python's round does, and
// clamped to [0, promptTokens]. NaN counts as 0.
func CachedTokens(cached float64, promptTokens int) int {
	if math.IsNaN(cached) || cached <= 0 {
		return 0
	}
	r := math.RoundToEven(cached)
	if r >= float64(promptTokens) {
		return max(promptTokens, 0)
	}
	return int(r)
}

// AppendJSON appends the usage object. Without details it is exactly
// {"prompt_tokens":P,"completion_tokens":C,"total_tokens":T}.
func (u *Usage) AppendJSON(b []byte) []byte {
	return appendUsageJSON(b, "prompt_tokens", "completion_tokens",
		u.PromptTokens, u.CompletionTokens, u.TotalTokens, u.CachedTokens,
		usageField{"accepted_prediction_tokens", u.AcceptedPredictionTokens},
		usageField{"rejected_prediction_tokens", u.RejectedPredictionTokens},
		usageField{"reasoning_tokens", u.ReasoningTokens})
}

// usageField is one optional count of a usage object's output details.
type usageField struct {
	name string
	v    *int
}

// appendUsageJSON appends a usage object in the shape both APIs share:
// {"<in>":I,"<out>":O,"total_tokens":T}, then "<in>_details" with
// cached_tokens when cached is set, then "<out>_details" with the fields
// that are set, in the order given, when any is.
func appendUsageJSON(b []byte, in, out string, inN, outN, total int, cached *int, details ...usageField) []byte {
	b = append(b, `{"`...)
	b = append(b, in...)
	b = append(b, `":`...)
	b = strconv.AppendInt(b, int64(inN), 10)
	b = append(b, `,"`...)
	b = append(b, out...)
	b = append(b, `":`...)
	b = strconv.AppendInt(b, int64(outN), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	if cached != nil {
		b = append(b, `,"`...)
		b = append(b, in...)
		b = append(b, `_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(*cached), 10)
		b = append(b, '}')
	}
	sep := byte('{')
	for _, f := range details {
		if f.v == nil {
			continue
		}
		if sep == '{' {
			b = append(b, `,"`...)
			b = append(b, out...)
			b = append(b, `_details":`...)
		}
		b = append(b, sep, '"')
		b = append(b, f.name...)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, int64(*f.v), 10)
		sep = ','
	}
	if sep == ',' {
		b = append(b, '}')
	}
	return append(b, '}')
}

// MarshalJSON encodes the usage as AppendJSON does.
func (u Usage) MarshalJSON() ([]byte, error) { return u.AppendJSON(nil), nil }
