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

	Drafting       bool
	DraftingReason string

	// Tools: a forced tool_choice (a named function) made a tool call.
	Tools       bool
	ToolsReason string
	// JSONSchema: response_format json_schema is accepted.
	JSONSchema       bool
	JSONSchemaReason string
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

// Probe finds out once what t can do: whether GET on the chat endpoint
// upgrades to a WebSocket, whether a repeated prompt reports cached tokens,
// whether usage carries draft counters, whether a forced tool_choice makes a
// tool call and whether response_format json_schema is accepted. It returns
// an error only when the target cannot serve a plain chat completion at all.
func Probe(ctx context.Context, t *Target) (Capabilities, error) {
	var c Capabilities
	c.WebSocket, c.WebSocketReason = ProbeWebSocket(ctx, t)
	c.Tools, c.ToolsReason = probeTools(ctx, t)
	c.JSONSchema, c.JSONSchemaReason = probeJSONSchema(ctx, t)

	body := Chat.Body(t.Model, ProbePrompt(Nonce()), map[string]any{"max_tokens": 4})
	var usages [2]*Usage
	for i := range usages {
		r, err := t.Post(ctx, Chat.Path, body)
		if err != nil {
			return c, fmt.Errorf("probe: %w", err)
		}
		if r.Status != http.StatusOK {
			return c, fmt.Errorf("probe: POST %s answered %d: %s", Chat.Path, r.Status, clip(r.Body))
		}
		_, u, err := ResponseUsage(r.Body)
		if err != nil || u == nil {
			// The usage specs will name this; the probe only learns that
			// neither a cache nor drafting can be observed.
			c.CacheReason = fmt.Sprintf("target's response has no readable usage (%v)", err)
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
	return c, nil
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
	yes(c.Drafting, "drafting", c.DraftingReason)
	yes(c.Tools, "tools", c.ToolsReason)
	yes(c.JSONSchema, "json_schema", c.JSONSchemaReason)
	return strings.Join(parts, "; ")
}
