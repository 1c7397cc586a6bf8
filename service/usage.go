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
	// CacheWriteTokens is how many prompt tokens the request newly wrote
	// into the prefix cache. Only the Responses API shows it
	// (input_tokens_details.cache_write_tokens); chat's usage has no such
	// field.
	CacheWriteTokens *int
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
//   - cache write tokens count each prompt once too: the largest any choice
//     measured (the choice that computed the prompt wrote it; a sibling
//     that found it written wrote nothing), clamped so that cached +
//     written never exceeds prompt_tokens. Present exactly when some
//     choice measured it.
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
	var written int
	measured, measuredWritten := false, false
	var accepted, rejected, reasoning int
	var haveAccepted, haveRejected, haveReasoning bool
	for _, choices := range prompts {
		if len(choices) == 0 {
			continue
		}
		prompt := max(choices[0].PromptTokens, 0)
		u.PromptTokens += prompt
		promptCached := math.Inf(1)
		promptWritten := -1
		for _, st := range choices {
			u.CompletionTokens += max(st.CompletionTokens, 0)
			if st.CachedTokens != nil {
				promptCached = min(promptCached, *st.CachedTokens)
			}
			if st.CacheWriteTokens != nil {
				promptWritten = max(promptWritten, *st.CacheWriteTokens, 0)
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
		promptRead := 0.0
		if !math.IsInf(promptCached, 1) {
			measured = true
			if !math.IsNaN(promptCached) {
				promptRead = min(max(promptCached, 0), float64(prompt))
				cached += promptRead
			}
		}
		if promptWritten >= 0 {
			measuredWritten = true
			written += min(promptWritten, prompt-CachedTokens(promptRead, prompt))
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if measured {
		n := CachedTokens(cached, u.PromptTokens)
		u.CachedTokens = &n
	}
	if measuredWritten {
		// The sum of rounded per-prompt reads can differ from the rounded
		// sum by a token or so; clamp again against the wire's count.
		read := 0
		if u.CachedTokens != nil {
			read = *u.CachedTokens
		}
		written = min(written, u.PromptTokens-read)
		u.CacheWriteTokens = &written
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
// CacheWriteTokens is not part of chat's usage and is left out.
func (u *Usage) AppendJSON(b []byte) []byte {
	b = appendUsageCounts(b, "prompt_tokens", "completion_tokens", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
	b = appendUsageDetails(b, "prompt_tokens_details", usageField{"cached_tokens", u.CachedTokens})
	b = appendUsageDetails(b, "completion_tokens_details",
		usageField{"accepted_prediction_tokens", u.AcceptedPredictionTokens},
		usageField{"rejected_prediction_tokens", u.RejectedPredictionTokens},
		usageField{"reasoning_tokens", u.ReasoningTokens})
	return append(b, '}')
}

// usageField is one optional count of a usage object's output details.
type usageField struct {
	name string
	v    *int
}

// appendUsageCounts opens a usage object in the shape both APIs share:
// {"<in>":I,"<out>":O,"total_tokens":T, left open for the details.
func appendUsageCounts(b []byte, in, out string, inN, outN, total int) []byte {
	b = append(b, `{"`...)
	b = append(b, in...)
	b = append(b, `":`...)
	b = strconv.AppendInt(b, int64(inN), 10)
	b = append(b, `,"`...)
	b = append(b, out...)
	b = append(b, `":`...)
	b = strconv.AppendInt(b, int64(outN), 10)
	b = append(b, `,"total_tokens":`...)
	return strconv.AppendInt(b, int64(total), 10)
}

// appendUsageDetails appends ,"<name>":{...} with the fields that are set,
// in the order given; nothing when none is.
func appendUsageDetails(b []byte, name string, fields ...usageField) []byte {
	sep := byte('{')
	for _, f := range fields {
		if f.v == nil {
			continue
		}
		if sep == '{' {
			b = append(b, `,"`...)
			b = append(b, name...)
			b = append(b, `":`...)
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
	return b
}

// MarshalJSON encodes the usage as AppendJSON does.
func (u Usage) MarshalJSON() ([]byte, error) { return u.AppendJSON(nil), nil }
