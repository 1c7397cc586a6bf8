package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// ToolCall is one complete tool call of a choice: from a non-streamed
// message.tool_calls, or reassembled from a stream's delta.tool_calls
// fragments.
type ToolCall struct {
	ID, Type, Name string
	// Arguments is the arguments object as JSON text.
	Arguments string
}

// SameArguments reports whether two calls' arguments are the same JSON
// value (servers may space them differently), or the same text when either
// is not JSON.
func SameArguments(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return a == b
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// ToolCallChoice is what a choice said: its content (nil when null or
// absent), its tool calls, and its finish_reason.
type ToolCallChoice struct {
	Content      *string
	Calls        []ToolCall
	FinishReason string
}

type wireToolCall struct {
	Index    *int    `json:"index"`
	ID       *string `json:"id"`
	Type     *string `json:"type"`
	Function *struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

// ResponseToolCalls reads choices 0..n-1 of a non-streamed chat response.
// It reports as problems what breaks OpenAI's shape: a call without id,
// type "function", name or arguments.
func ResponseToolCalls(body []byte, n int) ([]ToolCallChoice, []string, error) {
	var r struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content   *string        `json:"content"`
				ToolCalls []wireToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, nil, fmt.Errorf("the response is not a chat completion: %w", err)
	}
	out := make([]ToolCallChoice, n)
	var p []string
	for _, c := range r.Choices {
		if c.Index < 0 || c.Index >= n {
			return nil, nil, fmt.Errorf("choice index %d, want 0..%d", c.Index, n-1)
		}
		o := &out[c.Index]
		o.Content, o.FinishReason = c.Message.Content, c.FinishReason
		for k, tc := range c.Message.ToolCalls {
			call := ToolCall{}
			switch {
			case tc.ID == nil || *tc.ID == "":
				p = append(p, fmt.Sprintf("choice %d: tool_calls[%d] has no id", c.Index, k))
			case tc.Type == nil || *tc.Type != "function":
				p = append(p, fmt.Sprintf("choice %d: tool_calls[%d] has type %v, want \"function\"", c.Index, k, deref(tc.Type)))
			case tc.Function == nil || tc.Function.Name == nil || tc.Function.Arguments == nil:
				p = append(p, fmt.Sprintf("choice %d: tool_calls[%d] has no function name or arguments", c.Index, k))
			default:
				call = ToolCall{ID: *tc.ID, Type: *tc.Type, Name: *tc.Function.Name, Arguments: *tc.Function.Arguments}
			}
			o.Calls = append(o.Calls, call)
		}
	}
	return out, p, nil
}

// StreamToolCalls reassembles choices 0..n-1 of a chat stream: content
// pieces concatenated, tool-call fragments joined by index (the first
// fragment of a call carries its id, type and name; later ones pieces of
// the arguments, appended), the finish_reason. It reports as problems what
// a client assembling fragments cannot handle: a first fragment without id,
// type "function" or name, an index that skips one, an id or name that
// changes, a chunk that mixes choices' fragments up.
func (t *Transcript) StreamToolCalls(n int) ([]ToolCallChoice, []string, error) {
	out := make([]ToolCallChoice, n)
	var p []string
	for i, raw := range t.Chunks {
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content   *string        `json:"content"`
					ToolCalls []wireToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		for _, ch := range c.Choices {
			if ch.Index < 0 || ch.Index >= n {
				return nil, nil, fmt.Errorf("chunk %d has choice index %d, want 0..%d", i, ch.Index, n-1)
			}
			o := &out[ch.Index]
			if d := ch.Delta.Content; d != nil {
				if o.Content == nil {
					o.Content = new(string)
				}
				*o.Content += *d
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				o.FinishReason = *ch.FinishReason
			}
			for _, tc := range ch.Delta.ToolCalls {
				p = append(p, o.addFragment(i, ch.Index, tc)...)
			}
		}
	}
	return out, p, nil
}

// addFragment adds one delta.tool_calls element of chunk i to o.
func (o *ToolCallChoice) addFragment(i, choice int, tc wireToolCall) []string {
	where := fmt.Sprintf("chunk %d, choice %d", i, choice)
	if tc.Index == nil {
		return []string{where + ": a tool_calls fragment has no index"}
	}
	k := *tc.Index
	var name, args *string
	if tc.Function != nil {
		name, args = tc.Function.Name, tc.Function.Arguments
	}
	switch {
	case k == len(o.Calls):
		var p []string
		if tc.ID == nil || *tc.ID == "" {
			p = append(p, fmt.Sprintf("%s: the first fragment of tool call %d has no id", where, k))
		}
		if tc.Type == nil || *tc.Type != "function" {
			p = append(p, fmt.Sprintf("%s: the first fragment of tool call %d has type %v, want \"function\"", where, k, deref(tc.Type)))
		}
		if name == nil || *name == "" {
			p = append(p, fmt.Sprintf("%s: the first fragment of tool call %d has no function name", where, k))
		}
		o.Calls = append(o.Calls, ToolCall{ID: deref(tc.ID), Type: deref(tc.Type), Name: deref(name), Arguments: deref(args)})
		return p
	case k < 0 || k > len(o.Calls):
		return []string{fmt.Sprintf("%s: tool call index %d after %d calls", where, k, len(o.Calls))}
	}
	c := &o.Calls[k]
	var p []string
	if tc.ID != nil && *tc.ID != "" && *tc.ID != c.ID {
		p = append(p, fmt.Sprintf("%s: tool call %d changes its id from %q to %q", where, k, c.ID, *tc.ID))
	}
	if name != nil && *name != "" && *name != c.Name {
		p = append(p, fmt.Sprintf("%s: tool call %d changes its name from %q to %q", where, k, c.Name, *name))
	}
	c.Arguments += deref(args)
	return p
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ProbeTool is the tool the probe (and the tools specs) declare: any model
// can call it, since the forced call's arguments are a short string.
var ProbeTool = map[string]any{
	"type": "function",
	"function": map[string]any{
		"name":        "get_weather",
		"description": "Current weather in a city.",
		"parameters": map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
			"required":             []any{"city"},
			"additionalProperties": false,
		},
	},
}

// ForceProbeTool is the tool_choice that forces ProbeTool.
var ForceProbeTool = map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}

// probeTools asks for a forced call of ProbeTool and reports whether the
// target made one, and if not, why.
func probeTools(ctx context.Context, t *Target) (bool, string) {
	body := Chat.Body(t.Model, "What is the weather in Oslo?", map[string]any{
		"tools": []any{ProbeTool}, "tool_choice": ForceProbeTool, "parallel_tool_calls": false,
		"temperature": 0, "max_tokens": 400,
	})
	r, err := t.Post(ctx, Chat.Path, body)
	if err != nil {
		return false, "tools probe: " + err.Error()
	}
	if r.Status != http.StatusOK {
		return false, fmt.Sprintf("target refuses tools with a forced tool_choice (%d: %s)", r.Status, clip(r.Body))
	}
	choices, _, err := ResponseToolCalls(r.Body, 1)
	if err != nil || len(choices[0].Calls) == 0 {
		return false, fmt.Sprintf("target accepts a forced tool_choice but made no tool call (%s)", clip(r.Body))
	}
	return true, ""
}

// probeJSONSchema asks for a response_format json_schema and reports
// whether the target accepted it.
func probeJSONSchema(ctx context.Context, t *Target) (bool, string) {
	body := Chat.Body(t.Model, "Say yes.", map[string]any{"max_tokens": 4, "response_format": map[string]any{
		"type": "json_schema", "json_schema": map[string]any{"name": "probe", "strict": true, "schema": map[string]any{
			"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}},
			"required": []any{"ok"}, "additionalProperties": false}}}})
	r, err := t.Post(ctx, Chat.Path, body)
	if err != nil {
		return false, "response_format probe: " + err.Error()
	}
	if r.Status != http.StatusOK {
		return false, fmt.Sprintf("target refuses response_format json_schema (%d: %s)", r.Status, clip(r.Body))
	}
	return true, ""
}
