package upstream

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"rill/engine"
)

// The upstream's wire: the request rill sends and the chunks it reads back.

// Paths of the OpenAI-compatible endpoints, relative to a replica's base URL.
const (
	pathChat        = "/v1/chat/completions"
	pathCompletions = "/v1/completions"
)

// wireRequest is the body rill sends. Zero-valued optional fields are left
// out, so that the upstream applies its own defaults.
type wireRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages,omitempty"`
	// ChatTemplateKwargs is vLLM's chat_template_kwargs (llama.cpp and
	// SGLang read it too).
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
	// ReasoningEffort is OpenAI's reasoning_effort, which vLLM, SGLang and
	// llama.cpp's server also read (llama.cpp passes it to the chat
	// template, where gpt-oss prints it).
	ReasoningEffort string `json:"reasoning_effort,omitempty"`
	// Prompt is a string or a []int of token ids (completions only).
	Prompt any `json:"prompt,omitempty"`

	Stream        bool              `json:"stream"`
	StreamOptions wireStreamOptions `json:"stream_options"`

	MaxTokens        int      `json:"max_tokens,omitempty"`
	N                int      `json:"n,omitempty"`
	Stop             []string `json:"stop,omitempty"`
	Temperature      float64  `json:"temperature"`
	TopP             float64  `json:"top_p,omitempty"`
	TopK             int      `json:"top_k,omitempty"`
	MinP             float64  `json:"min_p,omitempty"`
	PresencePenalty  float64  `json:"presence_penalty,omitempty"`
	FrequencyPenalty float64  `json:"frequency_penalty,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`

	// Logprobs is a bool for chat and the number of alternatives (an int)
	// for legacy completions.
	Logprobs    any `json:"logprobs,omitempty"`
	TopLogprobs int `json:"top_logprobs,omitempty"`

	// TimingsPerToken asks llama.cpp for its counters on every chunk.
	TimingsPerToken bool `json:"timings_per_token,omitempty"`
	// ReturnProgress asks llama.cpp (or rill) for prompt_progress chunks.
	ReturnProgress bool `json:"return_progress,omitempty"`

	Prediction  *wirePrediction `json:"prediction,omitempty"`
	IgnoreEOS   bool            `json:"ignore_eos,omitempty"`
	BanEOSToken bool            `json:"ban_eos_token,omitempty"` // tabbyAPI's name for ignore_eos
	NoDraft     bool            `json:"no_draft,omitempty"`      // rill's extension

	Tools             []wireTool          `json:"tools,omitempty"`
	ToolChoice        json.RawMessage     `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool               `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    *wireResponseFormat `json:"response_format,omitempty"`
	LogitBias         map[string]float64  `json:"logit_bias,omitempty"`
	PromptCacheKey    string              `json:"prompt_cache_key,omitempty"`
	// Priority is vLLM's and SGLang's request priority (see priorityField).
	Priority *int `json:"priority,omitempty"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is nil (null) for an assistant turn that only calls tools.
	Content          *string        `json:"content"`
	Name             string         `json:"name,omitempty"`
	ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string         `json:"tool_call_id,omitempty"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
}

// wireMessages converts a chat's messages for the upstream.
func wireMessages(msgs []engine.Message) []wireMessage {
	out := make([]wireMessage, len(msgs))
	for i, m := range msgs {
		out[i] = wireMessage{Role: string(m.Role), Name: m.Name, ToolCalls: wireCalls(m.ToolCalls),
			ToolCallID: m.ToolCallID, ReasoningContent: m.ReasoningContent}
		if !m.NullContent {
			out[i].Content = &msgs[i].Content
		}
	}
	return out
}

type wireStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats asks vLLM, SGLang or rill for a usage on every chunk.
	ContinuousUsageStats bool `json:"continuous_usage_stats,omitempty"`
}

type wirePrediction struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

// encodeRequest builds the upstream request for req: its path and JSON
// body, always streamed with usage. model is the upstream's name for the
// model; n the number of choices to ask for. Fields the kind does not
// accept are refused with a *engine.RequestError when set, rather than
// silently dropped, because they would change the result; a prediction only
// speeds generation up and is dropped where unsupported.
func encodeRequest(k Kind, model string, req *engine.Request, n int) (path string, body []byte, err error) {
	c := k.caps()
	w := wireRequest{
		Model:         model,
		Stream:        true,
		StreamOptions: wireStreamOptions{IncludeUsage: true},
		MaxTokens:     req.MaxTokens,
		Stop:          req.Stop,
	}
	if n > 1 {
		w.N = n
	}
	if c.cacheKey {
		w.PromptCacheKey = req.CacheKey
	}
	w.Priority = c.priority.wire(req.Priority)
	s := req.Sampling
	w.Temperature = s.Temperature
	if s.TopP > 0 && s.TopP < 1 {
		w.TopP = s.TopP
	}
	w.PresencePenalty, w.FrequencyPenalty, w.Seed = s.PresencePenalty, s.FrequencyPenalty, s.Seed
	if s.TopK > 0 {
		if !c.topK {
			return "", nil, unsupported(k, "top_k")
		}
		w.TopK = s.TopK
	}
	if s.MinP > 0 {
		if !c.minP {
			return "", nil, unsupported(k, "min_p")
		}
		w.MinP = s.MinP
	}
	if req.IgnoreEOS {
		switch c.eosField {
		case "ignore_eos":
			w.IgnoreEOS = true
		case "ban_eos_token":
			w.BanEOSToken = true
		default:
			return "", nil, unsupported(k, "ignore_eos")
		}
	}
	if req.ContinuousUsage {
		switch c.running {
		case runningTimings:
			w.TimingsPerToken = true
		case runningChoiceUsage, runningRequestUsage:
			w.StreamOptions.ContinuousUsageStats = true
		}
	}
	if req.Progress && c.progress {
		w.ReturnProgress = true
	}
	if req.NoDraft && c.noDraft {
		// Elsewhere there is nothing to turn off that rill can name.
		w.NoDraft = true
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > 20 {
		return "", nil, engine.Errorf("", "top_logprobs", "top_logprobs must be between 0 and 20")
	}
	if err := encodeTools(k, req, &w); err != nil {
		return "", nil, err
	}

	switch {
	case req.Messages != nil:
		if len(req.Messages) == 0 {
			return "", nil, engine.Errorf("", "messages", "messages must not be empty")
		}
		path = pathChat
		w.Messages = wireMessages(req.Messages)
		if len(req.ChatTemplateKwargs) > 0 {
			if !c.templateKwargs {
				return "", nil, unsupported(k, "chat_template_kwargs")
			}
			w.ChatTemplateKwargs = req.ChatTemplateKwargs
		}
		w.ReasoningEffort = req.ReasoningEffort
		if req.Logprobs {
			w.Logprobs = true
			w.TopLogprobs = req.TopLogprobs
		}
		if req.Prediction != "" && c.prediction {
			w.Prediction = &wirePrediction{Type: "content", Content: req.Prediction}
		}
	case req.PromptTokens != nil:
		path = pathCompletions
		w.Prompt = req.PromptTokens
	default:
		path = pathCompletions
		w.Prompt = req.Prompt
	}
	if path == pathCompletions && req.Logprobs {
		w.Logprobs = req.TopLogprobs
	}
	body, err = json.Marshal(&w)
	if err != nil {
		// Only a NaN or infinite sampling parameter gets here.
		return "", nil, engine.Errorf("", "", "the request cannot be encoded for the upstream: %v", err)
	}
	return path, body, nil
}

func unsupported(k Kind, param string) *engine.RequestError {
	return engine.Errorf("unsupported_parameter", param, "%s is not supported by this model's upstream (%s).", param, k)
}

// wireChunk is one streamed chunk, or a whole non-streamed response, or an
// error event. Every member is optional.
type wireChunk struct {
	Choices  []wireChoice  `json:"choices"`
	Usage    *wireUsage    `json:"usage"`
	Timings  *wireTimings  `json:"timings"`
	Progress *wireProgress `json:"prompt_progress"`
	// Error is an error event ({"error": {...}}) in the stream.
	Error json.RawMessage `json:"error"`
	// opening is the usage a Messages stream's message_start reports: the
	// prompt's counts, known before the first token (messagesDecoder).
	opening *wireUsage
}

type wireChoice struct {
	Index        int           `json:"index"`
	Delta        *wireContent  `json:"delta"`
	Message      *wireContent  `json:"message"` // non-streamed chat responses
	Text         *string       `json:"text"`
	FinishReason *string       `json:"finish_reason"`
	Logprobs     *wireLogprobs `json:"logprobs"`
}

type wireContent struct {
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls"`
	// ReasoningContent is the reasoning vLLM, SGLang and llama.cpp stream
	// apart from the content; Reasoning is vLLM's newer name for it.
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
}

// reasoning returns the reasoning text of a delta or message, "" for none.
func (w *wireContent) reasoning() string {
	switch {
	case w == nil:
		return ""
	case w.ReasoningContent != nil:
		return *w.ReasoningContent
	case w.Reasoning != nil:
		return *w.Reasoning
	}
	return ""
}

// wireUsage is the usage object. Counts are floats: some upstreams send
// fractional averages, and a float reads an integer just as well.
type wireUsage struct {
	PromptTokens     *float64 `json:"prompt_tokens"`
	CompletionTokens *float64 `json:"completion_tokens"`
	// CachedTokens is tabbyAPI's top-level cached count.
	CachedTokens            *float64           `json:"cached_tokens"`
	PromptTokensDetails     *wirePromptDetails `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		AcceptedPredictionTokens *float64 `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens *float64 `json:"rejected_prediction_tokens"`
		ReasoningTokens          *float64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// wirePromptDetails is prompt_tokens_details, or the Responses API's
// input_tokens_details: cached_tokens read from the upstream's cache and,
// where it reports them (the Responses API of OpenAI and of another rill),
// cache_write_tokens newly written to it.
type wirePromptDetails struct {
	CachedTokens     *float64 `json:"cached_tokens"`
	CacheWriteTokens *float64 `json:"cache_write_tokens"`
}

// wireProgress is llama.cpp's prompt_progress object (rill's too).
type wireProgress struct {
	Total     int   `json:"total"`
	Cache     int   `json:"cache"`
	Processed int   `json:"processed"`
	TimeMS    int64 `json:"time_ms"`
}

// wireTimings is llama.cpp's timings object.
type wireTimings struct {
	CacheN         *float64 `json:"cache_n"`
	PromptN        *float64 `json:"prompt_n"`
	PromptMS       *float64 `json:"prompt_ms"`
	PredictedN     *float64 `json:"predicted_n"`
	PredictedMS    *float64 `json:"predicted_ms"`
	DraftN         *float64 `json:"draft_n"`
	DraftNAccepted *float64 `json:"draft_n_accepted"`
}

// wireLogprobs reads both shapes: chat's {"content": [...]} (which
// llama.cpp also uses for completions) and the legacy completions shape of
// parallel arrays.
type wireLogprobs struct {
	Content       []wireTokenLogprob   `json:"content"`
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

type wireTokenLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}

// events converts the logprobs of one chunk choice into the engine's form.
func (l *wireLogprobs) events() []engine.TokenLogprob {
	if l == nil {
		return nil
	}
	if len(l.Content) > 0 {
		out := make([]engine.TokenLogprob, len(l.Content))
		for i, c := range l.Content {
			out[i] = engine.TokenLogprob{Token: c.Token, Bytes: tokenBytes(c.Token, c.Bytes), Logprob: c.Logprob}
			if len(c.TopLogprobs) > 0 {
				out[i].Top = make([]engine.TopLogprob, len(c.TopLogprobs))
				for j, t := range c.TopLogprobs {
					out[i].Top[j] = engine.TopLogprob{Token: t.Token, Bytes: tokenBytes(t.Token, t.Bytes), Logprob: t.Logprob}
				}
			}
		}
		return out
	}
	out := make([]engine.TokenLogprob, len(l.Tokens))
	for i, tok := range l.Tokens {
		out[i] = engine.TokenLogprob{Token: tok, Bytes: []byte(tok), Logprob: math.Inf(-1)}
		if i < len(l.TokenLogprobs) && l.TokenLogprobs[i] != nil {
			out[i].Logprob = *l.TokenLogprobs[i]
		}
		if i < len(l.TopLogprobs) {
			out[i].Top = topFromMap(l.TopLogprobs[i])
		}
	}
	return out
}

// topFromMap orders a legacy top_logprobs map, most likely first (ties by
// token, so the order is stable).
func topFromMap(m map[string]float64) []engine.TopLogprob {
	out := make([]engine.TopLogprob, 0, len(m))
	for tok, lp := range m {
		out = append(out, engine.TopLogprob{Token: tok, Bytes: []byte(tok), Logprob: lp})
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && less(&out[j], &out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func less(a, b *engine.TopLogprob) bool {
	if a.Logprob != b.Logprob {
		return a.Logprob > b.Logprob
	}
	return a.Token < b.Token
}

// tokenBytes is a token's UTF-8 bytes as the upstream sent them, or its
// text when it sent none. Values outside a byte make the list unusable.
func tokenBytes(tok string, b []int) []byte {
	if b == nil {
		return []byte(tok)
	}
	out := make([]byte, len(b))
	for i, v := range b {
		if v < 0 || v > 255 {
			return []byte(tok)
		}
		out[i] = byte(v)
	}
	return out
}

// finishReason maps an upstream finish_reason: "length" is the length
// limit, "tool_calls" (and OpenAI's deprecated "function_call") a reply
// that called tools, anything else (stop, eos, content_filter, ...) a stop.
func finishReason(s string) engine.FinishReason {
	switch s {
	case "length":
		return engine.FinishLength
	case "tool_calls", "function_call":
		return engine.FinishToolCalls
	}
	return engine.FinishStop
}

// wireError is what an upstream says when it refuses a request, in any of
// the shapes servers use: {"error": {...}} (OpenAI, llama.cpp, rill),
// {"object": "error", "message": ...} (vLLM), {"detail": ...} (FastAPI).
type wireError struct {
	Message string
	Type    string
	Param   string
	Code    string
}

// parseError reads an error body; it never fails (the raw text is the
// message of last resort).
func parseError(body []byte) wireError {
	var outer struct {
		Error   json.RawMessage `json:"error"`
		Message any             `json:"message"`
		Type    any             `json:"type"`
		Param   any             `json:"param"`
		Code    any             `json:"code"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(body, &outer) != nil {
		return wireError{Message: plain(body)}
	}
	if len(outer.Error) > 0 && outer.Error[0] == '{' {
		return parseError(outer.Error)
	}
	var e wireError
	if len(outer.Error) > 0 && outer.Error[0] == '"' {
		_ = json.Unmarshal(outer.Error, &e.Message)
	}
	if e.Message == "" {
		e.Message = text(outer.Message)
	}
	if e.Message == "" {
		e.Message = detail(outer.Detail)
	}
	if e.Message == "" {
		e.Message = plain(body)
	}
	e.Type, e.Param, e.Code = text(outer.Type), text(outer.Param), text(outer.Code)
	return e
}

// text is a JSON string value; numbers and the rest are not codes rill
// can pass on.
func text(v any) string {
	s, _ := v.(string)
	return s
}

// detail reads FastAPI's detail: a string, or a list of {"loc", "msg"}.
func detail(v any) string {
	switch d := v.(type) {
	case string:
		return d
	case []any:
		var msgs []string
		for _, item := range d {
			if m, ok := item.(map[string]any); ok {
				msg := text(m["msg"])
				if loc, ok := m["loc"].([]any); ok && len(loc) > 0 {
					msg = fmt.Sprint(loc[len(loc)-1]) + ": " + msg
				}
				msgs = append(msgs, msg)
			}
		}
		return strings.Join(msgs, "; ")
	}
	return ""
}

// plain is a body shown as a message: trimmed and cut to a sane length.
func plain(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// requestError turns an upstream's refusal into the client's error: the
// upstream's message, with context-length errors given OpenAI's code
// whatever the upstream called them.
func (e wireError) requestError() *engine.RequestError {
	code := e.Code
	low := strings.ToLower(e.Type + " " + e.Code + " " + e.Message)
	if strings.Contains(low, "context_size") || strings.Contains(low, "context size") ||
		strings.Contains(low, "context length") || strings.Contains(low, "context_length") {
		code = engine.CodeContextLengthExceeded
	}
	msg := e.Message
	if msg == "" {
		msg = "The upstream engine rejected the request."
	}
	return &engine.RequestError{Code: code, Param: e.Param, Message: msg}
}
