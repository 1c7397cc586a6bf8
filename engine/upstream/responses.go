package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"

	"rill/engine"
)

// The Responses API upstream. A request that came through rill's
// /v1/responses (engine.Request.Responses) goes to the upstream's
// /v1/responses when its kind has that API (OpenAI, vLLM, another rill), so
// that the upstream counts it as its Responses API does (reasoning tokens
// included); every other request, and every request to the other kinds,
// goes to chat completions as before. Either way rill keeps the ids, the
// store and the usage rules: the upstream's events are read back into
// engine events and its final usage into Stats, as chunks are.
//
// What the Responses API cannot carry sends the request to chat instead:
// several choices, stop strings, logprobs, a prediction, and for kind
// openai an output cap under OpenAI's minimum of 16 tokens. So do tools, a
// response format and conversations with tool calls or results: chat
// completions already carries tools, tool_choice, parallel_tool_calls,
// response_format, assistant tool_calls and tool messages to every kind,
// and relays tool-call deltas, which the service turns into function_call
// items; the Responses wire would need a second translation of each, for
// the same counts.

const pathResponses = "/v1/responses"

// openAIMinOutputTokens is the smallest max_output_tokens OpenAI accepts.
const openAIMinOutputTokens = 16

// wireResponsesRequest is the body rill sends to an upstream's /v1/responses.
type wireResponsesRequest struct {
	Model           string        `json:"model"`
	Input           []wireMessage `json:"input"`
	Stream          bool          `json:"stream"`
	Store           bool          `json:"store"`
	MaxOutputTokens int           `json:"max_output_tokens,omitempty"`
	Temperature     float64       `json:"temperature"`
	TopP            float64       `json:"top_p,omitempty"`
	TopK            int           `json:"top_k,omitempty"`
	MinP            float64       `json:"min_p,omitempty"`
	Seed            *int64        `json:"seed,omitempty"`
	IgnoreEOS       bool          `json:"ignore_eos,omitempty"`
	NoDraft         bool          `json:"no_draft,omitempty"`
	PromptCacheKey  string        `json:"prompt_cache_key,omitempty"`
	Priority        *int          `json:"priority,omitempty"` // vLLM's and rill's
}

// useResponses reports whether req goes to the upstream's /v1/responses.
func useResponses(k Kind, req *engine.Request, n int) bool {
	if !req.Responses || !k.caps().responses || req.Messages == nil {
		return false
	}
	if n > 1 || len(req.Stop) > 0 || req.Logprobs || req.Prediction != "" {
		return false
	}
	if len(req.Tools) > 0 || req.ResponseFormat != nil || hasToolTurns(req.Messages) {
		return false
	}
	return k != OpenAI || req.MaxTokens == 0 || req.MaxTokens >= openAIMinOutputTokens
}

// hasToolTurns reports whether msgs hold a tool call or a tool result,
// which Responses message items cannot carry.
func hasToolTurns(msgs []engine.Message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 || m.Role == engine.RoleTool || m.ToolCallID != "" {
			return true
		}
	}
	return false
}

// encodeResponsesRequest builds the upstream Responses request for req:
// streamed, not stored upstream (rill keeps the conversation). Fields the
// kind does not accept are refused as encodeRequest refuses them.
func encodeResponsesRequest(k Kind, model string, req *engine.Request) ([]byte, error) {
	c := k.caps()
	if len(req.Messages) == 0 {
		return nil, engine.Errorf("", "input", "input must not be empty")
	}
	w := wireResponsesRequest{Model: model, Stream: true, MaxOutputTokens: req.MaxTokens}
	if c.cacheKey {
		w.PromptCacheKey = req.CacheKey
	}
	w.Priority = c.priority.wire(req.Priority)
	w.Input = make([]wireMessage, len(req.Messages))
	for i, m := range req.Messages {
		content := m.Content // Responses message items always carry text
		w.Input[i] = wireMessage{Role: string(m.Role), Content: &content}
	}
	s := req.Sampling
	w.Temperature = s.Temperature
	if s.TopP > 0 && s.TopP < 1 {
		w.TopP = s.TopP
	}
	if s.TopK > 0 {
		if !c.topK {
			return nil, unsupported(k, "top_k")
		}
		w.TopK = s.TopK
	}
	if s.MinP > 0 {
		if !c.minP {
			return nil, unsupported(k, "min_p")
		}
		w.MinP = s.MinP
	}
	if req.IgnoreEOS {
		if c.eosField != "ignore_eos" {
			return nil, unsupported(k, "ignore_eos")
		}
		w.IgnoreEOS = true
	}
	if k == Rill {
		// rill's extensions; OpenAI and vLLM take no seed on this API.
		w.Seed, w.NoDraft = s.Seed, req.NoDraft
	}
	body, err := json.Marshal(&w)
	if err != nil {
		return nil, engine.Errorf("", "", "the request cannot be encoded for the upstream: %v", err)
	}
	return body, nil
}

// wireResponseEvent is what rill reads of an upstream's Responses event.
type wireResponseEvent struct {
	Type     string  `json:"type"`
	Delta    *string `json:"delta"`
	Response *struct {
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		Error json.RawMessage     `json:"error"`
		Usage *wireResponsesUsage `json:"usage"`
	} `json:"response"`
	// An error event is {"type":"error","code","message","param"} or, on
	// OpenAI's WebSocket mode and rill's, {"type":"error","error":{…}}.
	Error   json.RawMessage `json:"error"`
	Code    any             `json:"code"`
	Message string          `json:"message"`
	Param   any             `json:"param"`
}

// wireResponsesUsage is the Responses API's usage.
type wireResponsesUsage struct {
	InputTokens         *float64           `json:"input_tokens"`
	OutputTokens        *float64           `json:"output_tokens"`
	InputTokensDetails  *wirePromptDetails `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens          *float64 `json:"reasoning_tokens"`
		AcceptedPredictionTokens *float64 `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens *float64 `json:"rejected_prediction_tokens"`
	} `json:"output_tokens_details"`
}

// chat restates the usage in chat's names, so that Kind.stats reads it.
func (u *wireResponsesUsage) chat() *wireUsage {
	w := &wireUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens}
	w.PromptTokensDetails = u.InputTokensDetails
	if d := u.OutputTokensDetails; d != nil {
		w.CompletionTokensDetails = &struct {
			AcceptedPredictionTokens *float64 `json:"accepted_prediction_tokens"`
			RejectedPredictionTokens *float64 `json:"rejected_prediction_tokens"`
			ReasoningTokens          *float64 `json:"reasoning_tokens"`
		}{d.AcceptedPredictionTokens, d.RejectedPredictionTokens, d.ReasoningTokens}
	}
	return w
}

// decodeResponseEvent reads one Responses event into the chunk it stands
// for: a text delta is choice 0's content, a terminal event its finish
// reason and the request's usage, a failure an error event. Every other
// event (the opening ones, item and part boundaries, reasoning deltas,
// whose tokens the usage counts all the same) is an empty chunk.
func decodeResponseEvent(data []byte, ch *wireChunk) error {
	*ch = wireChunk{}
	var ev wireResponseEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	switch ev.Type {
	case "response.output_text.delta":
		if ev.Delta != nil {
			ch.Choices = []wireChoice{{Delta: &wireContent{Content: ev.Delta}}}
		}
	case "response.completed", "response.incomplete":
		reason := "stop"
		if ev.Response != nil && ev.Response.IncompleteDetails != nil && ev.Response.IncompleteDetails.Reason == "max_output_tokens" {
			reason = "length"
		}
		ch.Choices = []wireChoice{{FinishReason: &reason}}
		if ev.Response != nil && ev.Response.Usage != nil {
			ch.Usage = ev.Response.Usage.chat()
		} // else the stream's end completes the request, without counts
	case "response.failed":
		msg := []byte(`{"message":"the upstream's response failed"}`)
		if ev.Response != nil && len(bytes.TrimSpace(ev.Response.Error)) > 0 && string(ev.Response.Error) != "null" {
			msg = ev.Response.Error
		}
		ch.Error = msg
	case "error":
		if len(ev.Error) > 0 && ev.Error[0] == '{' {
			ch.Error = ev.Error
			break
		}
		b, err := json.Marshal(map[string]any{"message": ev.Message, "code": ev.Code, "param": ev.Param})
		if err != nil {
			return fmt.Errorf("error event: %w", err)
		}
		ch.Error = b
	}
	return nil
}
