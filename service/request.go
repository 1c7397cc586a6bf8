package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"rill/engine"
)

// The wire request types. They are decoded with encoding/json only after the
// body passed the OpenAPI validator, so their job is to carry values, not to
// judge them; fields whose JSON type varies are kept raw and read by the
// conversion functions in convert.go.

// commonRequest holds the fields chat and legacy completions share.
type commonRequest struct {
	Model            string             `json:"model"`
	MaxTokens        *int               `json:"max_tokens"`
	N                *int               `json:"n"`
	Stop             json.RawMessage    `json:"stop"`
	Stream           *bool              `json:"stream"`
	StreamOptions    *streamOptions     `json:"stream_options"`
	Temperature      *float64           `json:"temperature"`
	TopP             *float64           `json:"top_p"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	LogitBias        map[string]float64 `json:"logit_bias"`
	ResponseFormat   *responseFormat    `json:"response_format"`
	// Timings asks for llama.cpp's timings object (rill's extension,
	// timings.go); TimingsPerToken, llama.cpp's timings_per_token, for it
	// on every chunk of a stream too; ReturnProgress, llama.cpp's
	// return_progress, for prompt_progress chunks while a stream's prompt
	// is processed.
	Timings         *bool `json:"timings"`
	TimingsPerToken *bool `json:"timings_per_token"`
	ReturnProgress  *bool `json:"return_progress"`
	extensions
}

// extensions are the fields chat, legacy completions and the Responses API
// share beyond OpenAI's temperature and top_p: seed (OpenAI's own on chat
// and completions, rill's on Responses), prompt_cache_key (OpenAI's on chat
// and Responses), vLLM's priority and rill's extensions top_k, min_p,
// ignore_eos and no_draft. Each request type embeds them, and apply is their one
// conversion.
type extensions struct {
	Seed      *int64   `json:"seed"`
	TopK      *int     `json:"top_k"`
	MinP      *float64 `json:"min_p"`
	IgnoreEOS *bool    `json:"ignore_eos"`
	NoDraft   *bool    `json:"no_draft"`
	// PromptCacheKey routes requests that share a prefix together
	// (engine.Request.CacheKey).
	PromptCacheKey *string `json:"prompt_cache_key"`
	// Priority is vLLM's request priority (engine.Request.Priority).
	Priority *int `json:"priority"`
}

// apply sets what x asks for on req and its sampling s.
func (x *extensions) apply(req *engine.Request, s *engine.Sampling) {
	if x.TopK != nil {
		s.TopK = *x.TopK
	}
	if x.MinP != nil {
		s.MinP = *x.MinP
	}
	if x.Seed != nil {
		seed := *x.Seed
		s.Seed = &seed
	}
	req.IgnoreEOS = x.IgnoreEOS != nil && *x.IgnoreEOS
	req.NoDraft = x.NoDraft != nil && *x.NoDraft
	if x.PromptCacheKey != nil {
		req.CacheKey = *x.PromptCacheKey
	}
	if x.Priority != nil {
		p := *x.Priority
		req.Priority = &p
	}
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
	// ContinuousUsageStats is vLLM's extension: running usage on every
	// chunk with choices (honoured with include_usage only).
	ContinuousUsageStats *bool `json:"continuous_usage_stats"`
	// Resumable is rill's extension: the stream survives its connection
	// (resumable.go).
	Resumable *bool `json:"resumable"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	commonRequest
	Messages            []chatMessage   `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Prediction          *prediction     `json:"prediction"`
	Tools               []toolParam     `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	FunctionCall        json.RawMessage `json:"function_call"`
	Modalities          []string        `json:"modalities"`
	Audio               json.RawMessage `json:"audio"`
	// ChatTemplateKwargs is vLLM's extension: further variables for the
	// model's chat template, such as {"enable_thinking": false}.
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	// ReasoningEffort is OpenAI's reasoning_effort, for the chat template
	// (engine.Request.ReasoningEffort).
	ReasoningEffort *string `json:"reasoning_effort"`
}

type chatMessage struct {
	Role             string            `json:"role"`
	Content          json.RawMessage   `json:"content"`
	Name             string            `json:"name"`
	ToolCalls        []messageToolCall `json:"tool_calls"`
	ToolCallID       string            `json:"tool_call_id"`
	ReasoningContent *string           `json:"reasoning_content"`
}

// messageToolCall is a call an earlier assistant turn made.
type messageToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// contentPart is one element of an array content (of chat messages and
// of Responses input messages). Only its type and text are read; the other
// members stay unparsed. Text and Refusal are nil when absent: a text part
// must carry its text, a refusal part its refusal (missingPartField).
type contentPart struct {
	Type    string  `json:"type"`
	Text    *string `json:"text"`
	Refusal *string `json:"refusal"`
}

type prediction struct {
	Type    string          `json:"type"`
	Content json.RawMessage `json:"content"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	commonRequest
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     *bool           `json:"echo"`
	Suffix   *string         `json:"suffix"`
	BestOf   *int            `json:"best_of"`
}

// decodeBody decodes a validated body into v. A value the schema let through
// but Go cannot hold (an integer beyond int64) is the client's fault.
func decodeBody(body []byte, v any) *apiError {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// Field is a Go path; promoted fields carry their embedded types' names.
		field := strings.TrimPrefix(strings.TrimPrefix(te.Field, "commonRequest."), "extensions.")
		return invalid(field, "invalid_value", "Invalid value for '%s': %s does not fit in %s.", field, te.Value, te.Type.String())
	}
	return invalid("", "", "We could not parse the JSON body of your request: %v", err)
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// firstByte is the first non-space byte of raw, or 0.
func firstByte(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// textContent reads a message or prediction content: a string, or an array
// of parts whose texts are joined with sep. param names the field for
// errors; a part of another kind than text (or an assistant's refusal) is
// unsupported.
func textContent(raw json.RawMessage, param, sep string) (string, *apiError) {
	switch firstByte(raw) {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", invalid(param, "invalid_type", "Invalid type for '%s': expected a string.", param)
		}
		return s, nil
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", invalid(param, "invalid_type", "Invalid type for '%s': expected an array of content parts.", param)
		}
		var b []byte
		for i, p := range parts {
			if i > 0 {
				b = append(b, sep...)
			}
			switch p.Type {
			case "text":
				if p.Text == nil {
					return "", missingPartField(param, i, "text")
				}
				b = append(b, *p.Text...)
			case "refusal":
				if p.Refusal == nil {
					return "", missingPartField(param, i, "refusal")
				}
				b = append(b, *p.Refusal...)
			default:
				return "", unsupported(fmt.Sprintf("%s[%d]", param, i), fmt.Sprintf("Content of type '%s'", p.Type))
			}
		}
		return string(b), nil
	}
	return "", nil
}

// missingPartField is the 400 for part i of content param that lacks its
// field (text, refusal): OpenAI refuses such a part rather than read it as
// empty.
func missingPartField(param string, i int, field string) *apiError {
	name := fmt.Sprintf("%s[%d].%s", param, i, field)
	return invalid(name, "missing_required_parameter", "Missing required parameter: '%s'.", name)
}

// stopStrings reads stop: null, a string, or an array of strings. Empty
// strings are dropped: they would end every choice before its first token.
func stopStrings(raw json.RawMessage) ([]string, *apiError) {
	var stops []string
	switch firstByte(raw) {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid("stop", "invalid_type", "Invalid type for 'stop': expected a string or an array of strings.")
		}
		stops = []string{s}
	case '[':
		if err := json.Unmarshal(raw, &stops); err != nil {
			return nil, invalid("stop", "invalid_type", "Invalid type for 'stop': expected a string or an array of strings.")
		}
	}
	out := stops[:0]
	for _, s := range stops {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// prompts reads a completion prompt: a string, an array of strings, an array
// of token ids, or an array of token-id arrays. Exactly one of the results
// is non-nil.
func prompts(raw json.RawMessage) (texts []string, tokens [][]int, e *apiError) {
	bad := invalid("prompt", "invalid_type",
		"Invalid type for 'prompt': expected a string, an array of strings, an array of token ids or an array of arrays of token ids.")
	switch firstByte(raw) {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, bad
		}
		return []string{s}, nil, nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
			return nil, nil, bad
		}
		switch firstByte(items[0]) {
		case '"':
			if err := json.Unmarshal(raw, &texts); err != nil {
				return nil, nil, bad
			}
			return texts, nil, nil
		case '[':
			if err := json.Unmarshal(raw, &tokens); err != nil {
				return nil, nil, bad
			}
			return nil, tokens, nil
		default:
			var ids []int
			if err := json.Unmarshal(raw, &ids); err != nil {
				return nil, nil, bad
			}
			return nil, [][]int{ids}, nil
		}
	}
	return nil, nil, bad
}
