package upstream

import (
	"encoding/json"
	"strconv"

	"rill/engine"
)

// Tool calling, structured outputs and logit_bias on the upstream's wire:
// the request fields rill passes through, and the tool-call fragments it
// relays back unchanged (ids and indices as the upstream sent them).

// wireTool is one element of "tools".
type wireTool struct {
	Type     string           `json:"type"`
	Function wireToolFunction `json:"function"`
}

type wireToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      bool            `json:"strict,omitempty"`
}

// wireToolCall is a tool call in a message (history sent upstream, or a
// non-streamed answer) or a fragment of one in a streamed delta. Index is
// absent in messages.
type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema *wireJSONSchema `json:"json_schema,omitempty"`
}

type wireJSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema,omitempty"`
	Strict bool            `json:"strict,omitempty"`
}

// encodeTools puts req's tools, tool_choice, parallel_tool_calls,
// response_format and logit_bias into w, as the client sent them. A choice
// that forces calls goes only to kinds that enforce it: one that would
// ignore it is refused rather than let through.
func encodeTools(k Kind, req *engine.Request, w *wireRequest) error {
	c := k.caps()
	for _, t := range req.Tools {
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireToolFunction{
			Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	switch req.ToolChoice.Mode {
	case engine.ToolChoiceAuto:
		// Left out: "auto" is the default with tools, and servers that
		// want a flag for it (vLLM) refuse it the same way either way.
	case engine.ToolChoiceNone, engine.ToolChoiceRequired:
		if req.ToolChoice.Mode == engine.ToolChoiceRequired && !c.forcedTools {
			return unsupported(k, "tool_choice")
		}
		w.ToolChoice, _ = json.Marshal(string(req.ToolChoice.Mode))
	case engine.ToolChoiceFunction:
		if !c.forcedTools {
			return unsupported(k, "tool_choice")
		}
		w.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": req.ToolChoice.Name}})
	}
	w.ParallelToolCalls = req.ParallelToolCalls
	if rf := req.ResponseFormat; rf != nil && rf.Type != "" {
		w.ResponseFormat = &wireResponseFormat{Type: string(rf.Type)}
		if rf.Type == engine.FormatJSONSchema {
			name := rf.Name
			if name == "" {
				name = "response" // OpenAI requires one
			}
			w.ResponseFormat.JSONSchema = &wireJSONSchema{Name: name, Schema: rf.Schema, Strict: rf.Strict}
		}
	}
	if len(req.LogitBias) > 0 {
		w.LogitBias = make(map[string]float64, len(req.LogitBias))
		for id, v := range req.LogitBias {
			w.LogitBias[strconv.Itoa(id)] = v
		}
	}
	return nil
}

// wireCalls returns a history message's tool calls in OpenAI's shape.
func wireCalls(calls []engine.ToolCall) []wireToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]wireToolCall, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = c.ID, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
	}
	return out
}

// callDeltas turns the tool calls of a chunk's delta (or of a whole
// message, whose calls have no index: their position is) into the
// engine's fragments, unchanged.
func callDeltas(calls []wireToolCall) []engine.ToolCallDelta {
	if len(calls) == 0 {
		return nil
	}
	out := make([]engine.ToolCallDelta, len(calls))
	for i, c := range calls {
		idx := i
		if c.Index != nil {
			idx = *c.Index
		}
		out[i] = engine.ToolCallDelta{Index: idx, ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments}
	}
	return out
}
