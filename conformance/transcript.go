package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
)

// Endpoint is one of the two generation endpoints with the names of its
// OpenAPI component schemas.
type Endpoint struct {
	Name     string // "chat", "completions"
	Path     string
	Response string // component of the non-streamed response
	Chunk    string // component of one stream chunk
}

// The generation endpoints.
var (
	Chat = Endpoint{Name: "chat", Path: "/v1/chat/completions",
		Response: "CreateChatCompletionResponse", Chunk: "CreateChatCompletionStreamResponse"}
	Completions = Endpoint{Name: "completions", Path: "/v1/completions",
		Response: "CreateCompletionResponse", Chunk: "CreateCompletionStreamResponse"}
)

// Body returns a request body for model with text as the user message (chat)
// or the prompt (completions), plus the members of extra. It never sets
// "stream": transports add it.
func (e Endpoint) Body(model, text string, extra map[string]any) map[string]any {
	b := map[string]any{"model": model}
	if e.Path == Chat.Path {
		b["messages"] = []map[string]any{{"role": "user", "content": text}}
	} else {
		b["prompt"] = text
	}
	maps.Copy(b, extra)
	return b
}

// Logprobs returns the request members that ask e for one log-probability
// per emitted token, the observable per-choice token count.
func (e Endpoint) Logprobs() map[string]any {
	if e.Path == Chat.Path {
		return map[string]any{"logprobs": true}
	}
	return map[string]any{"logprobs": 1}
}

// Transcript is everything one streamed request produced, in order.
type Transcript struct {
	// Transport is "SSE" or "WebSocket".
	Transport string
	// Status is the HTTP status on SSE; on WebSocket 200, or the status of
	// the error message that ended the request.
	Status int
	// ContentType is the response's Content-Type (SSE only).
	ContentType string
	// Chunks are the chunk objects, as sent.
	Chunks []json.RawMessage
	// Done is set when the end marker arrived: data: [DONE] or a done message.
	Done bool
	// Error is an ErrorResponse document: the body of a non-200 answer, an
	// error event of a stream, or a WebSocket error message's "error" member
	// wrapped as {"error": ...}. Nil when there was none.
	Error json.RawMessage
	// Problems are framing faults found while reading, as sentences.
	Problems []string
	// Pings counts SSE comment lines (heartbeats).
	Pings int
}

// endMarker names the transport's end of stream for messages.
func (t *Transcript) endMarker() string {
	if t.Transport == "WebSocket" {
		return `a "done" message`
	}
	return "data: [DONE]"
}

// Presence says how a JSON member appears.
type Presence int

const (
	Absent Presence = iota // no such key
	Null                   // the key with value null
	Object                 // the key with an object value
)

func (p Presence) String() string {
	switch p {
	case Absent:
		return "absent"
	case Null:
		return "null"
	}
	return "an object"
}

// ChunkChoice is what the checks need of one choice of a chunk.
type ChunkChoice struct {
	Index int
	// FinishReason is "" while the choice continues (null or absent).
	FinishReason string
	// Tokens counts the log-probability entries of this chunk for the
	// choice: one per emitted token when logprobs were asked for.
	Tokens int
	// Text reports whether the choice carries text (delta.content for
	// chat, text for completions) that is not empty.
	Text bool
}

// Chunk is a decoded stream chunk.
type Chunk struct {
	Object string
	// HasChoices reports whether the "choices" key is there at all.
	HasChoices bool
	Choices    []ChunkChoice
	// UsageKey is how "usage" appears; Usage is set when it is an object.
	UsageKey Presence
	Usage    *Usage
}

// ParseChunk decodes one chunk object of either endpoint.
func ParseChunk(raw json.RawMessage) (*Chunk, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	c := &Chunk{}
	if v, ok := top["object"]; ok {
		_ = json.Unmarshal(v, &c.Object) // a wrong type is the schema check's to report
	}
	if v, ok := top["choices"]; ok {
		c.HasChoices = true
		var choices []struct {
			Index        *int            `json:"index"`
			FinishReason *string         `json:"finish_reason"`
			Logprobs     json.RawMessage `json:"logprobs"`
			Text         any             `json:"text"`
			Delta        *struct {
				Content any `json:"content"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(v, &choices); err != nil {
			return nil, fmt.Errorf("choices: %w", err)
		}
		for i, ch := range choices {
			if ch.Index == nil {
				return nil, fmt.Errorf("choices[%d] has no index", i)
			}
			cc := ChunkChoice{Index: *ch.Index, Tokens: countLogprobs(ch.Logprobs)}
			// A wrong type is the schema check's to report, not an error here.
			if t, ok := ch.Text.(string); ok && t != "" {
				cc.Text = true
			}
			if ch.Delta != nil {
				if t, ok := ch.Delta.Content.(string); ok && t != "" {
					cc.Text = true
				}
			}
			if ch.FinishReason != nil {
				cc.FinishReason = *ch.FinishReason
			}
			c.Choices = append(c.Choices, cc)
		}
	}
	var err error
	if c.UsageKey, c.Usage, err = usageMember(top); err != nil {
		return nil, err
	}
	return c, nil
}

// usageMember reads the "usage" member of a decoded object.
func usageMember(top map[string]json.RawMessage) (Presence, *Usage, error) {
	v, ok := top["usage"]
	if !ok {
		return Absent, nil, nil
	}
	if isNull(v) {
		return Null, nil, nil
	}
	u, err := ParseUsage(v)
	if err != nil {
		return Object, nil, fmt.Errorf("usage: %w", err)
	}
	return Object, u, nil
}

// countLogprobs counts the tokens of a logprobs object of either shape:
// chat's {"content": [...]} or the legacy {"tokens": [...]}.
func countLogprobs(raw json.RawMessage) int {
	if isNull(raw) {
		return 0
	}
	var lp struct {
		Content []json.RawMessage `json:"content"`
		Tokens  []json.RawMessage `json:"tokens"`
	}
	if json.Unmarshal(raw, &lp) != nil {
		return 0
	}
	return len(lp.Content) + len(lp.Tokens)
}

// Usage is a decoded usage object. Pointer fields are nil when the member,
// or the details object holding it, is absent or null: docs/design.md §3 rule 8
// treats the two alike.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int

	CachedTokens             *int
	AcceptedPredictionTokens *int
	RejectedPredictionTokens *int
	ReasoningTokens          *int
}

// ParseUsage decodes a usage object strictly: every count must be a
// non-fractional JSON number (a fractional cached count is an error here,
// not something to round).
func ParseUsage(raw json.RawMessage) (*Usage, error) {
	var w struct {
		Prompt     *json.Number `json:"prompt_tokens"`
		Completion *json.Number `json:"completion_tokens"`
		Total      *json.Number `json:"total_tokens"`
		Prompt2    *struct {
			Cached *json.Number `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		Completion2 *struct {
			Accepted  *json.Number `json:"accepted_prediction_tokens"`
			Rejected  *json.Number `json:"rejected_prediction_tokens"`
			Reasoning *json.Number `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("not a usage object: %w", err)
	}
	u := &Usage{}
	var errs []error
	need := func(name string, n *json.Number, dst *int) {
		if n == nil {
			errs = append(errs, fmt.Errorf("%s is missing", name))
			return
		}
		v, err := n.Int64()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is %s, not an integer", name, n))
			return
		}
		*dst = int(v)
	}
	opt := func(name string, n *json.Number) *int {
		if n == nil {
			return nil
		}
		v, err := n.Int64()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is %s, not an integer", name, n))
			return nil
		}
		i := int(v)
		return &i
	}
	need("prompt_tokens", w.Prompt, &u.PromptTokens)
	need("completion_tokens", w.Completion, &u.CompletionTokens)
	need("total_tokens", w.Total, &u.TotalTokens)
	if d := w.Prompt2; d != nil {
		u.CachedTokens = opt("prompt_tokens_details.cached_tokens", d.Cached)
	}
	if d := w.Completion2; d != nil {
		u.AcceptedPredictionTokens = opt("completion_tokens_details.accepted_prediction_tokens", d.Accepted)
		u.RejectedPredictionTokens = opt("completion_tokens_details.rejected_prediction_tokens", d.Rejected)
		u.ReasoningTokens = opt("completion_tokens_details.reasoning_tokens", d.Reasoning)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return u, nil
}

// ResponseUsage returns the usage of a non-streamed response body, and
// whether the key was there at all.
func ResponseUsage(body []byte) (Presence, *Usage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return Absent, nil, fmt.Errorf("response is not a JSON object: %w", err)
	}
	return usageMember(top)
}

// FinalUsage returns the usage of the last chunk that carries one, or an
// error that says why there is none.
func (t *Transcript) FinalUsage() (*Usage, error) {
	for i := len(t.Chunks) - 1; i >= 0; i-- {
		c, err := ParseChunk(t.Chunks[i])
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		if c.Usage != nil {
			return c.Usage, nil
		}
	}
	if t.Status != 200 || t.Error != nil {
		return nil, fmt.Errorf("the request failed (status %d): %s", t.Status, clip(t.Error))
	}
	return nil, fmt.Errorf("none of the %d chunks carries usage", len(t.Chunks))
}

// ChoiceTokens returns, per choice index, the log-probability entries the
// stream carried and the finish reason, for choices 0..n-1.
func (t *Transcript) ChoiceTokens(n int) (tokens []int, finish []string, err error) {
	tokens, finish = make([]int, n), make([]string, n)
	for i, raw := range t.Chunks {
		c, err := ParseChunk(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		for _, ch := range c.Choices {
			if ch.Index < 0 || ch.Index >= n {
				return nil, nil, fmt.Errorf("chunk %d has choice index %d, want 0..%d", i, ch.Index, n-1)
			}
			tokens[ch.Index] += ch.Tokens
			if ch.FinishReason != "" {
				finish[ch.Index] = ch.FinishReason
			}
		}
	}
	return tokens, finish, nil
}

// ResponseChoiceTokens is ChoiceTokens for a non-streamed response body.
func ResponseChoiceTokens(body []byte, n int) (tokens []int, finish []string, err error) {
	t := &Transcript{Chunks: []json.RawMessage{body}}
	return t.ChoiceTokens(n)
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}
