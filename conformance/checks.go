package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"

	"rill/openapi"
)

// The checks below are docs/design.md §3 and §4 as pure functions. Each returns the
// problems it found as sentences that name the difference; nil means none.

// StreamWant is what a streamed request asked for.
type StreamWant struct {
	// IncludeUsage is stream_options.include_usage as sent (false for {}).
	IncludeUsage bool
	// Choices is the number of choices the request asked for (n, at least 1).
	Choices int
	// ContinuousUsage is stream_options.continuous_usage_stats as sent, with
	// include_usage true: chunks with choices carry the running usage.
	ContinuousUsage bool
}

// CheckStream checks the framing and the usage rules of one stream: it
// ended with its end marker; without include_usage no chunk has a usage key;
// with it every chunk has one, null on all but exactly one last chunk that
// has "choices": [] and the usage, after every choice got its finish_reason.
// With continuous usage the chunks with choices carry a usage object
// instead of null (CheckRunning checks what it counts). It also checks the
// usage itself with CheckUsage.
func CheckStream(tr *Transcript, want StreamWant) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if tr.Status != http.StatusOK {
		add("the request failed with status %d: %s", tr.Status, clip(tr.Error))
		return p
	}
	p = append(p, tr.Problems...)
	if tr.Error != nil {
		add("the stream ended with an error: %s", clip(tr.Error))
	}
	if !tr.Done {
		add("the stream has no end marker (%s)", tr.endMarker())
	}
	if len(tr.Chunks) == 0 {
		add("the stream has no chunks")
		return p
	}
	n := max(want.Choices, 1)
	finished := make([]int, n) // chunk of each choice's finish_reason, -1 none
	for i := range finished {
		finished[i] = -1
	}
	var usageAt []int
	var usage *Usage
	last := len(tr.Chunks) - 1
	for i, raw := range tr.Chunks {
		c, err := ParseChunk(raw)
		if err != nil {
			add("chunk %d cannot be read: %v", i, err)
			continue
		}
		switch {
		case !want.IncludeUsage && c.UsageKey != Absent:
			add("chunk %d has a usage key (%s) although include_usage is not true", i, c.UsageKey)
		case want.IncludeUsage && c.UsageKey == Absent:
			add("chunk %d has no usage key although include_usage is true (every chunk must carry \"usage\": null)", i)
		}
		running := want.ContinuousUsage && len(c.Choices) > 0
		if c.Usage != nil && !running {
			usageAt = append(usageAt, i)
			usage = c.Usage
		}
		if !c.HasChoices {
			add("chunk %d has no choices key", i)
		}
		isUsageChunk := want.IncludeUsage && c.Usage != nil && !running
		switch {
		case running && c.Usage == nil && c.UsageKey != Absent:
			add("chunk %d has %d choice(s) and \"usage\": %s although continuous_usage_stats is true (every chunk with choices must carry the running usage)", i, len(c.Choices), c.UsageKey)
		case isUsageChunk && len(c.Choices) > 0:
			add("chunk %d carries usage together with %d choice(s); the usage chunk must have \"choices\": []", i, len(c.Choices))
		case c.HasChoices && len(c.Choices) == 0 && !isUsageChunk:
			add("chunk %d has \"choices\": [] but is not the usage chunk", i)
		}
		for _, ch := range c.Choices {
			if ch.Index < 0 || ch.Index >= n {
				add("chunk %d has choice index %d; the request asked for %d choices", i, ch.Index, n)
				continue
			}
			if f := finished[ch.Index]; f >= 0 {
				add("chunk %d continues choice %d after its finish_reason in chunk %d", i, ch.Index, f)
				continue
			}
			if ch.FinishReason != "" {
				finished[ch.Index] = i
			}
		}
	}
	for j, f := range finished {
		if f < 0 {
			add("choice %d never got a finish_reason", j)
		}
	}
	if !want.IncludeUsage {
		return p
	}
	switch {
	case len(usageAt) == 0:
		add("no chunk carries usage although include_usage is true (want one last chunk with \"choices\": [] and the usage before %s)", tr.endMarker())
	case len(usageAt) > 1:
		add("%d chunks carry a usage object (chunks %v); exactly one, the last, must", len(usageAt), usageAt)
	case usageAt[0] != last:
		add("the usage chunk is chunk %d of %d; it must be the last before %s", usageAt[0], len(tr.Chunks), tr.endMarker())
	}
	if len(usageAt) == 1 {
		for j, f := range finished {
			if f > usageAt[0] {
				add("choice %d finishes in chunk %d, after the usage chunk %d", j, f, usageAt[0])
			}
		}
	}
	if usage != nil {
		for _, q := range CheckUsage(usage) {
			add("usage: %s", q)
		}
	}
	return p
}

// CheckUsage checks the arithmetic every usage must satisfy (docs/design.md §3):
// total_tokens = prompt_tokens + completion_tokens, no negative count,
// cached_tokens <= prompt_tokens, the draft counters present together, and
// accepted_prediction_tokens <= completion_tokens.
func CheckUsage(u *Usage) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		add("total_tokens %d != prompt_tokens %d + completion_tokens %d", u.TotalTokens, u.PromptTokens, u.CompletionTokens)
	}
	for _, f := range []struct {
		name string
		v    *int
	}{
		{"prompt_tokens", &u.PromptTokens}, {"completion_tokens", &u.CompletionTokens},
		{"total_tokens", &u.TotalTokens}, {"cached_tokens", u.CachedTokens},
		{"accepted_prediction_tokens", u.AcceptedPredictionTokens},
		{"rejected_prediction_tokens", u.RejectedPredictionTokens},
		{"reasoning_tokens", u.ReasoningTokens},
	} {
		if f.v != nil && *f.v < 0 {
			add("%s is negative (%d)", f.name, *f.v)
		}
	}
	if c := u.CachedTokens; c != nil && *c > u.PromptTokens {
		add("cached_tokens %d exceeds prompt_tokens %d", *c, u.PromptTokens)
	}
	if (u.AcceptedPredictionTokens == nil) != (u.RejectedPredictionTokens == nil) {
		add("only one of accepted_prediction_tokens and rejected_prediction_tokens is present; drafting reports both")
	}
	if a := u.AcceptedPredictionTokens; a != nil && *a > u.CompletionTokens {
		add("accepted_prediction_tokens %d exceeds completion_tokens %d", *a, u.CompletionTokens)
	}
	if r := u.ReasoningTokens; r != nil && *r > u.CompletionTokens {
		add("reasoning_tokens %d exceeds completion_tokens %d", *r, u.CompletionTokens)
	}
	return p
}

// NonceSlack is how many cached tokens beyond the shared prefix a cold
// prompt may report by chance: the suite cannot tokenize, and a fresh
// nonce (see Nonce) can start like an earlier prompt's, each matching
// character letting a token-grained cache reuse at most one more token,
// and a separator token before the nonce (SentencePiece's "▁") may be
// shared or merged into the first letter. Three tokens cover a separator
// and two matching characters, or three characters. More happens by
// chance about once in 200,000 checks per cached prompt the server
// compares against. llama.cpp's prompt cache compares a new prompt with
// every earlier one it holds in RAM: after 2,100 requests, 100 fresh chat
// prompts on stories260K showed 1 extra token 7 times, 2 once, 3 or more
// never (with lowercase nonces 2 extra tokens came 1 time in 8, hence
// mixed case).
const NonceSlack = 3

// ColdBound is what the suite knows of a cold prompt's cache hit: one that
// starts, after what every prompt of its endpoint shares, with a fresh nonce.
type ColdBound struct {
	// Shared is L, the tokens every fresh prompt of the endpoint shares with
	// earlier ones (BOS, a chat template's preamble), as the probe measured
	// it: the cached count of a fresh prompt sent after another.
	Shared int
	// BlockSize is the cache's grain in tokens; 0 means unknown (for
	// example a token-grained cache, as llama.cpp's).
	BlockSize int
}

// CheckCold checks the cached count of a cold prompt (docs/design.md §3 rules 3
// and 11): present when the target measures a prefix cache, and no more
// than the prefix the prompt shares with earlier prompts. That is L (plus
// NonceSlack for chance matches of the nonce) on a token-grained cache, and
// the whole blocks of that, floor((L+NonceSlack)/B)*B, on a cache of B-token
// blocks: 0 on rill's, unless a long fixed preamble fills a 16-token block.
func CheckCold(u *Usage, b ColdBound) []string {
	if u.CachedTokens == nil {
		return []string{"prompt_tokens_details.cached_tokens is absent although the target measures a prefix cache (absent means \"not measured\"; a cold prompt reports 0, or the prefix it shares with earlier prompts)"}
	}
	cached, p := *u.CachedTokens, u.PromptTokens
	shares := fmt.Sprintf("the %s every fresh prompt shares with earlier ones (BOS, a chat template's preamble; learned by the probe)", tokens(b.Shared))
	if b.Shared == 0 {
		shares = "nothing every fresh prompt shares with earlier ones (the probe saw 0)"
	}
	if bs := b.BlockSize; bs > 0 {
		var q []string
		if cached%bs != 0 {
			q = append(q, fmt.Sprintf("a cold %d-token prompt reported %s cached, not a whole number of %d-token blocks", p, tokens(cached), bs))
		}
		if limit := (b.Shared + NonceSlack) / bs * bs; cached > limit {
			q = append(q, fmt.Sprintf("a cold %d-token prompt reported %s cached; it shares %s, plus at most %d tokens its fresh nonce can match by chance, which fill %d whole %d-token blocks: want at most %d",
				p, tokens(cached), shares, NonceSlack, limit/bs, bs, limit))
		}
		return q
	}
	if limit := b.Shared + NonceSlack; cached > limit {
		return []string{fmt.Sprintf("a cold %d-token prompt reported %s cached; it shares %s, plus at most %d tokens its fresh nonce can match by chance: want at most %d",
			p, tokens(cached), shares, NonceSlack, limit)}
	}
	return nil
}

// tokens says "1 token" or "n tokens".
func tokens(n int) string {
	if n == 1 {
		return "1 token"
	}
	return fmt.Sprintf("%d tokens", n)
}

// CheckDraft checks the draft counters of a request with choices choices
// whose verification steps propose at most k tokens (docs/design.md §3 rule 5): each
// step emits the accepted tokens plus one, so a choice took at least
// completion - accepted steps and at most one more, and
// accepted + rejected <= k * (completion_tokens - accepted + choices).
func CheckDraft(u *Usage, k, choices int) []string {
	if u.AcceptedPredictionTokens == nil || u.RejectedPredictionTokens == nil {
		return []string{"accepted_prediction_tokens and rejected_prediction_tokens are not both present although drafting was active"}
	}
	a, r := *u.AcceptedPredictionTokens, *u.RejectedPredictionTokens
	var p []string
	if a > u.CompletionTokens {
		p = append(p, fmt.Sprintf("accepted_prediction_tokens %d exceeds completion_tokens %d", a, u.CompletionTokens))
	}
	if bound := k * (u.CompletionTokens - a + max(choices, 1)); a+r > bound {
		p = append(p, fmt.Sprintf("accepted %d + rejected %d draft tokens exceed %d = k %d × (completion_tokens %d − accepted %d + %d choice(s)): more tokens were drafted than %d per step allows",
			a, r, bound, k, u.CompletionTokens, a, max(choices, 1), k))
	}
	return p
}

// CheckError checks a failed request's answer: a 4xx status (never a 5xx,
// never success) and a body in OpenAI's error shape,
// {"error": {"message": string, "type": string, "param": string|null, "code": string|null}}.
func CheckError(status int, body []byte) []string {
	var p []string
	if status < 400 || status >= 500 {
		p = append(p, fmt.Sprintf("status %d, want a 4xx (body: %s)", status, clip(body)))
	}
	var doc struct {
		Error *struct {
			Message *string         `json:"message"`
			Type    *string         `json:"type"`
			Param   json.RawMessage `json:"param"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Error == nil {
		return append(p, fmt.Sprintf("the body is not {\"error\": {...}}: %s", clip(body)))
	}
	e := doc.Error
	if e.Message == nil || *e.Message == "" {
		p = append(p, "error.message is missing or empty")
	}
	if e.Type == nil || *e.Type == "" {
		p = append(p, "error.type is missing or empty")
	}
	for name, v := range map[string]json.RawMessage{"param": e.Param, "code": e.Code} {
		if v == nil {
			p = append(p, fmt.Sprintf("error.%s is missing (OpenAI sends it, null when there is none)", name))
			continue
		}
		var s *string
		if json.Unmarshal(v, &s) != nil {
			p = append(p, fmt.Sprintf("error.%s is %s, want a string or null", name, clip(v)))
		}
	}
	if err := openapi.ValidateSchema("ErrorResponse", body); err != nil {
		p = append(p, fmt.Sprintf("the error body breaks ErrorResponse in openapi.yaml: %v", err))
	}
	return p
}

// ValidateTranscript validates every chunk of tr against ep's chunk schema
// in rill's openapi.yaml, and its error document, if any, against
// ErrorResponse.
func ValidateTranscript(tr *Transcript, ep Endpoint) []string {
	var p []string
	for i, c := range tr.Chunks {
		if err := openapi.ValidateSchema(ep.Chunk, c); err != nil {
			p = append(p, fmt.Sprintf("chunk %d breaks %s: %v (chunk: %s)", i, ep.Chunk, err, clip(c)))
		}
	}
	if tr.Error != nil {
		if err := openapi.ValidateSchema("ErrorResponse", tr.Error); err != nil {
			p = append(p, fmt.Sprintf("the error breaks ErrorResponse: %v (%s)", err, clip(tr.Error)))
		}
	}
	return p
}

// ValidateResponse validates a non-streamed response body against component.
func ValidateResponse(component string, body []byte) []string {
	if err := openapi.ValidateSchema(component, body); err != nil {
		return []string{fmt.Sprintf("the response breaks %s: %v (body: %s)", component, err, clip(body))}
	}
	return nil
}
