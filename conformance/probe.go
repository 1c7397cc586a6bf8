package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Capabilities are the optional features of a target. Each has a reason,
// the sentence a spec that needs the feature skips with when it is missing.
type Capabilities struct {
	WebSocket       bool
	WebSocketReason string

	// PrefixCache: a repeated prompt reported cached_tokens > 0.
	// CacheMeasured: prompt_tokens_details.cached_tokens was present at all.
	PrefixCache   bool
	CacheMeasured bool
	CacheReason   string

	// SharedPrefix is, per endpoint name ("chat", "completions"), how many
	// tokens a fresh prompt shares with earlier ones on a cache that reuses
	// single tokens: BOS, a chat template's fixed preamble. The probe sends
	// two fresh prompts to each endpoint, a short and a long one, and keeps
	// the larger cached count (see probeShared). An endpoint is missing when
	// the count could not be learned; SharedReason then says why.
	SharedPrefix map[string]int
	SharedReason map[string]string

	Drafting       bool
	DraftingReason string

	// Tools: a forced tool_choice (a named function) made a tool call.
	Tools       bool
	ToolsReason string
	// JSONSchema: response_format json_schema is accepted.
	JSONSchema       bool
	JSONSchemaReason string
	// ContinuousUsage: a stream that asked for include_usage and
	// continuous_usage_stats (vLLM's extension) had a usage object on a
	// chunk with choices.
	ContinuousUsage       bool
	ContinuousUsageReason string
}

// ProbePrompt returns a prompt that starts with nonce and is long enough
// (about 60 words) to fill several cache blocks of any common size.
func ProbePrompt(nonce string) string {
	const text = "the river runs past the mill and under the old stone bridge where the children " +
		"watch the boats go by in the long light of a summer evening while the miller counts " +
		"his sacks of grain and the baker sets out bread for the morning market by the square " +
		"and the bells of the church ring out across the water to the hills beyond the town"
	return nonce + " " + text
}

// ShortProbePrompt returns a prompt of a few words that starts with nonce.
func ShortProbePrompt(nonce string) string { return nonce + " tell me about the river" }

// probeTokens is the max_tokens of the probe's requests.
const probeTokens = 4

// Probe finds out once what t can do: whether GET on the chat endpoint
// upgrades to a WebSocket, whether a repeated prompt reports cached tokens,
// how many tokens fresh prompts share on each endpoint, whether usage
// carries draft counters, whether a forced tool_choice makes a tool call and
// whether response_format json_schema is accepted. It returns an error only
// when the target cannot serve a plain chat completion at all.
func Probe(ctx context.Context, t *Target) (Capabilities, error) {
	c := Capabilities{SharedPrefix: map[string]int{}, SharedReason: map[string]string{}}
	c.WebSocket, c.WebSocketReason = ProbeWebSocket(ctx, t)
	c.Tools, c.ToolsReason = probeTools(ctx, t)
	c.JSONSchema, c.JSONSchemaReason = probeJSONSchema(ctx, t)

	body := Chat.Body(t.Model, ProbePrompt(Nonce()), map[string]any{"max_tokens": probeTokens})
	var usages [2]*Usage
	for i := range usages {
		u, unreadable, err := probeUsage(ctx, t, Chat, body)
		if err != nil {
			return c, fmt.Errorf("probe: %w", err)
		}
		if u == nil {
			// The usage specs will name this; the probe only learns that
			// neither a cache nor drafting can be observed.
			c.CacheReason = fmt.Sprintf("target's response has no readable usage (%v)", unreadable)
			c.DraftingReason = c.CacheReason
			return c, nil
		}
		usages[i] = u
	}
	second := usages[1]
	switch {
	case second.CachedTokens == nil:
		c.CacheReason = "target reports no prompt_tokens_details.cached_tokens (no prefix cache measured)"
	case *second.CachedTokens == 0:
		c.CacheMeasured = true
		c.CacheReason = fmt.Sprintf("target measures cached_tokens but reported 0 for a repeated %d-token prompt (no prefix reuse observed)", second.PromptTokens)
	default:
		c.CacheMeasured, c.PrefixCache = true, true
	}
	for _, u := range usages {
		if u.AcceptedPredictionTokens != nil || u.RejectedPredictionTokens != nil {
			c.Drafting = true
		}
	}
	if !c.Drafting {
		c.DraftingReason = "target reports no drafting"
	}
	c.ContinuousUsage, c.ContinuousUsageReason = probeContinuousUsage(ctx, t)
	if c.CacheMeasured {
		for _, ep := range []Endpoint{Chat, Completions} {
			n, reason := probeShared(ctx, t, ep)
			if reason != "" {
				c.SharedReason[ep.Name] = reason
				continue
			}
			c.SharedPrefix[ep.Name] = n
		}
	}
	return c, nil
}

// probeShared learns how many tokens fresh prompts share on ep (see
// sharedPrefix). reason is empty when it learned the count.
func probeShared(ctx context.Context, t *Target, ep Endpoint) (shared int, reason string) {
	return sharedPrefix("POST "+ep.Path, func(text string) (prompt int, cached *int, problem string) {
		u, unreadable, err := probeUsage(ctx, t, ep, ep.Body(t.Model, text, map[string]any{"max_tokens": probeTokens}))
		switch {
		case err != nil:
			return 0, nil, err.Error()
		case u == nil:
			return 0, nil, fmt.Sprintf("POST %s answered without a readable usage (%v)", ep.Path, unreadable)
		case u.CachedTokens == nil:
			return 0, nil, fmt.Sprintf("POST %s reported no cached_tokens", ep.Path)
		}
		return u.PromptTokens, u.CachedTokens, ""
	})
}

// sharedPrefix learns how many tokens fresh prompts share where send sends
// them: the larger cached count of two fresh prompts, a short one and a
// long one, sent one after the other (the first follows the probe's other
// prompts). What fresh prompts share is a fixed preamble, so the two
// counts must agree (within NonceSlack): a count that grows with the
// prompt's length is not a shared prefix, and nothing is learned. send
// returns a prompt's token count and cached count, or a problem; where
// names the endpoint for the reason, which is empty when the count was
// learned.
func sharedPrefix(where string, send func(text string) (prompt int, cached *int, problem string)) (shared int, reason string) {
	var counts, prompts [2]int
	for i, text := range []string{ShortProbePrompt(Nonce()), ProbePrompt(Nonce())} {
		prompt, cached, problem := send(text)
		if problem != "" {
			return 0, problem
		}
		counts[i], prompts[i] = *cached, prompt
	}
	if counts[1]-counts[0] > NonceSlack {
		return 0, fmt.Sprintf("fresh prompts of %d and %d tokens on %s reported %d and %d cached tokens: a count that grows with a fresh prompt's length is not a prefix it shares with earlier prompts",
			prompts[0], prompts[1], where, counts[0], counts[1])
	}
	return max(counts[0], counts[1]), ""
}

// probeContinuousUsage streams one chat request over SSE with
// include_usage and continuous_usage_stats, and reports whether a chunk
// with choices carried a usage object, and if not, why.
func probeContinuousUsage(ctx context.Context, t *Target) (bool, string) {
	body := Chat.Body(t.Model, ProbePrompt(Nonce()), map[string]any{"max_tokens": probeTokens,
		"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}})
	tr, err := t.Stream(ctx, Chat.Path, body)
	if err != nil {
		return false, "the continuous-usage probe failed: " + err.Error()
	}
	if tr.Status != http.StatusOK {
		return false, fmt.Sprintf("POST %s with stream_options.continuous_usage_stats answered %d: %s", Chat.Path, tr.Status, clip(tr.Error))
	}
	for _, raw := range tr.Chunks {
		if c, err := ParseChunk(raw); err == nil && len(c.Choices) > 0 && c.Usage != nil {
			return true, ""
		}
	}
	return false, "target ignores stream_options.continuous_usage_stats (vLLM's extension): no chunk with choices carried a usage"
}

// probeUsage sends body to ep and returns the usage of the answer. When the
// answer has none that reads, u is nil and unreadable says why; err is set
// when the request failed.
func probeUsage(ctx context.Context, t *Target, ep Endpoint, body map[string]any) (u *Usage, unreadable, err error) {
	r, err := t.Post(ctx, ep.Path, body)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != http.StatusOK {
		return nil, nil, fmt.Errorf("POST %s answered %d: %s", ep.Path, r.Status, clip(r.Body))
	}
	_, u, unreadable = ResponseUsage(r.Body)
	if u == nil && unreadable == nil {
		unreadable = errors.New("usage is absent or null")
	}
	return u, unreadable, nil
}

// ProbeWebSocket reports whether GET on the chat endpoint with Upgrade:
// websocket upgrades, and if not, why.
func ProbeWebSocket(ctx context.Context, t *Target) (bool, string) {
	s, err := DialWebSocket(ctx, t, Chat.Path)
	switch {
	case err == nil:
		_ = s.Close()
		return true, ""
	case errors.Is(err, ErrNoUpgrade):
		return false, err.Error()
	}
	return false, "target's WebSocket handshake failed: " + err.Error()
}

// String summarises c for the suite's log.
func (c Capabilities) String() string {
	var parts []string
	yes := func(ok bool, name, reason string) {
		if ok {
			parts = append(parts, name+": yes")
		} else {
			parts = append(parts, name+": no ("+reason+")")
		}
	}
	yes(c.WebSocket, "websocket", c.WebSocketReason)
	yes(c.PrefixCache, "prefix cache", c.CacheReason)
	for _, ep := range []Endpoint{Chat, Completions} {
		if n, ok := c.SharedPrefix[ep.Name]; ok {
			parts = append(parts, fmt.Sprintf("fresh %s prompts share %d tokens", ep.Name, n))
		} else if r := c.SharedReason[ep.Name]; r != "" {
			parts = append(parts, fmt.Sprintf("fresh %s prompts share: unknown (%s)", ep.Name, r))
		}
	}
	yes(c.Drafting, "drafting", c.DraftingReason)
	yes(c.Tools, "tools", c.ToolsReason)
	yes(c.JSONSchema, "json_schema", c.JSONSchemaReason)
	yes(c.ContinuousUsage, "continuous usage", c.ContinuousUsageReason)
	return strings.Join(parts, "; ")
}
