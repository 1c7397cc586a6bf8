package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"rill/openapi"
)

// The Messages API's rules (docs/design.md §3 rule 13, and Anthropic's
// event flow) as pure checks over what the helpers of messages.go read.

// MessagesUsage is a decoded usage of the Messages API.
type MessagesUsage struct {
	InputTokens, CacheCreationInputTokens, CacheReadInputTokens, OutputTokens int
	// ThinkingTokens is output_tokens_details.thinking_tokens (nil: absent).
	ThinkingTokens *int
}

// Prompt is the whole prompt: input + cache read + cache creation.
func (u *MessagesUsage) Prompt() int {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// ParseMessagesUsage decodes a usage object strictly: the four counts
// required (Anthropic's SDKs read every one), each an integer.
func ParseMessagesUsage(raw json.RawMessage) (*MessagesUsage, error) {
	var w struct {
		In      *json.Number `json:"input_tokens"`
		Created *json.Number `json:"cache_creation_input_tokens"`
		Read    *json.Number `json:"cache_read_input_tokens"`
		Out     *json.Number `json:"output_tokens"`
		Details *struct {
			Thinking *json.Number `json:"thinking_tokens"`
		} `json:"output_tokens_details"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("not a usage object: %w", err)
	}
	u := &MessagesUsage{}
	var errs []error
	for _, f := range []struct {
		name string
		n    *json.Number
		dst  *int
	}{{"input_tokens", w.In, &u.InputTokens}, {"cache_creation_input_tokens", w.Created, &u.CacheCreationInputTokens},
		{"cache_read_input_tokens", w.Read, &u.CacheReadInputTokens}, {"output_tokens", w.Out, &u.OutputTokens}} {
		if f.n == nil {
			errs = append(errs, fmt.Errorf("%s is absent or null", f.name))
			continue
		}
		v, err := f.n.Int64()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is %s, not an integer", f.name, f.n))
			continue
		}
		*f.dst = int(v)
	}
	if w.Details != nil && w.Details.Thinking != nil {
		v, err := w.Details.Thinking.Int64()
		if err != nil {
			errs = append(errs, fmt.Errorf("output_tokens_details.thinking_tokens is %s, not an integer", w.Details.Thinking))
		} else {
			n := int(v)
			u.ThinkingTokens = &n
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return u, nil
}

// CheckMessagesUsage checks a Messages usage (docs/design.md §3 rule 13):
// no negative count, and thinking within the output.
func CheckMessagesUsage(u *MessagesUsage) []string {
	var p []string
	if u.InputTokens < 0 || u.CacheCreationInputTokens < 0 || u.CacheReadInputTokens < 0 || u.OutputTokens < 0 {
		p = append(p, fmt.Sprintf("negative count: %+v", *u))
	}
	if th := u.ThinkingTokens; th != nil && (*th < 0 || *th > u.OutputTokens) {
		p = append(p, fmt.Sprintf("thinking_tokens %d is outside [0, output_tokens %d]: output_tokens counts thinking", *th, u.OutputTokens))
	}
	return p
}

// MessageBlock is one content block of a message.
type MessageBlock struct {
	Type                         string
	Text, Thinking, Signature    string
	ID, Name                     string
	Input                        json.RawMessage // a tool_use block's, as JSON
	streamedInput                strings.Builder
	streamedInputDeltas, stopped bool
}

// MessageObject is what the checks read of a message.
type MessageObject struct {
	ID, Type, Role, Model string
	StopReason            *string
	Content               []*MessageBlock
}

// ParseMessage decodes a message object and its usage.
func ParseMessage(raw json.RawMessage) (*MessageObject, *MessagesUsage, error) {
	var w struct {
		ID         string          `json:"id"`
		Type       string          `json:"type"`
		Role       string          `json:"role"`
		Model      string          `json:"model"`
		StopReason *string         `json:"stop_reason"`
		Content    []wireBlock     `json:"content"`
		Usage      json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, nil, fmt.Errorf("not a message object: %w", err)
	}
	m := &MessageObject{ID: w.ID, Type: w.Type, Role: w.Role, Model: w.Model, StopReason: w.StopReason}
	for _, b := range w.Content {
		m.Content = append(m.Content, b.block())
	}
	if isNull(w.Usage) {
		return m, nil, errors.New("the message has no usage")
	}
	u, err := ParseMessagesUsage(w.Usage)
	if err != nil {
		return m, nil, fmt.Errorf("usage: %w", err)
	}
	return m, u, nil
}

// wireBlock is a content block as the wire has it.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

func (b *wireBlock) block() *MessageBlock {
	return &MessageBlock{Type: b.Type, Text: b.Text, Thinking: b.Thinking, Signature: b.Signature, ID: b.ID, Name: b.Name, Input: b.Input}
}

// Text is the text of the message's text blocks, concatenated.
func (m *MessageObject) Text() string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// Blocks returns the message's blocks of type typ.
func (m *MessageObject) Blocks(typ string) []*MessageBlock {
	var out []*MessageBlock
	for _, c := range m.Content {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// MessageStreamResult is a streamed message put together as Anthropic's
// SDKs accumulate it.
type MessageStreamResult struct {
	Message *MessageObject
	// Start is message_start's usage; Usage the final one (message_delta's
	// counts over message_start's, as the SDKs merge them).
	Start, Usage *MessagesUsage
}

// CheckMessageStream checks one streamed message (docs/design.md §3 rule
// 13 and Anthropic's event flow) and accumulates it: the first event
// (pings aside) is message_start, with an empty message, stop_reason null
// and the usage so far; content blocks start at index 0, 1, 2, … in order,
// each with an empty block (a tool_use's input {}), take deltas of their
// own kind only while open (text_delta; thinking_delta and
// signature_delta; input_json_delta) and stop once; then message_delta,
// with a stop_reason and the cumulative usage, and message_stop last.
// message_delta's input counts, where it sends them, equal
// message_start's, and its output_tokens is no less; a tool_use block's
// input deltas add up to a JSON object unless max_tokens cut it, and
// stop_reason is tool_use exactly when there is one; every event
// validates against MessageStreamEvent.
func CheckMessageStream(tr *MessageTranscript) (*MessageStreamResult, []string) {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if tr.Status != http.StatusOK || tr.Error != nil {
		add("the message failed with status %d: %s", tr.Status, clip(tr.Error))
		return nil, p
	}
	p = append(p, tr.Problems...)
	res := &MessageStreamResult{}
	var evs []MessageEvent
	for _, e := range tr.Events {
		if err := openapi.ValidateSchema("MessageStreamEvent", e.Raw); err != nil {
			add("event %s breaks MessageStreamEvent: %v", e.Type, err)
		}
		if e.Type != "ping" {
			evs = append(evs, e)
		}
	}
	if len(evs) < 3 {
		add("the stream has %d events besides pings; a message has at least message_start, message_delta and message_stop", len(evs))
		return nil, p
	}
	if evs[0].Type != "message_start" {
		add("the first event is %s, not message_start", evs[0].Type)
	}
	if last := evs[len(evs)-1].Type; last != "message_stop" {
		add("the last event is %s, not message_stop", last)
	}
	var ev struct {
		Message *struct {
			StopReason json.RawMessage `json:"stop_reason"`
			Content    []wireBlock     `json:"content"`
			Usage      json.RawMessage `json:"usage"`
		} `json:"message"`
		Index        *int       `json:"index"`
		ContentBlock *wireBlock `json:"content_block"`
		Delta        *struct {
			Type        string  `json:"type"`
			Text        string  `json:"text"`
			Thinking    string  `json:"thinking"`
			Signature   string  `json:"signature"`
			PartialJSON string  `json:"partial_json"`
			StopReason  *string `json:"stop_reason"`
		} `json:"delta"`
		Usage json.RawMessage `json:"usage"`
	}
	msg := &MessageObject{}
	res.Message = msg
	deltas := 0
	for i, e := range evs {
		ev.Message, ev.Index, ev.ContentBlock, ev.Delta, ev.Usage = nil, nil, nil, nil, nil
		if err := json.Unmarshal(e.Raw, &ev); err != nil {
			add("event %d (%s) cannot be read: %v", i, e.Type, err)
			continue
		}
		var open *MessageBlock
		if ev.Index != nil && *ev.Index >= 0 && *ev.Index < len(msg.Content) {
			open = msg.Content[*ev.Index]
		}
		switch e.Type {
		case "message_start":
			if i != 0 {
				add("event %d is a second message_start", i)
				continue
			}
			if ev.Message == nil {
				add("message_start has no message")
				continue
			}
			if !isNull(ev.Message.StopReason) {
				add("message_start's stop_reason is %s, want null", ev.Message.StopReason)
			}
			if len(ev.Message.Content) != 0 {
				add("message_start's message has content; blocks come in content_block events")
			}
			u, err := ParseMessagesUsage(ev.Message.Usage)
			if err != nil {
				add("message_start's usage: %v", err)
				continue
			}
			res.Start = u
		case "content_block_start":
			switch {
			case deltas > 0:
				add("event %d starts a block after message_delta", i)
			case ev.Index == nil || *ev.Index != len(msg.Content):
				add("event %d starts block %s; blocks start at index 0, 1, 2, … (want %d)", i, intOrNull(ev.Index), len(msg.Content))
			case ev.ContentBlock == nil:
				add("event %d starts a block without content_block", i)
			default:
				b := ev.ContentBlock.block()
				if b.Text != "" || b.Thinking != "" || (b.Type == "tool_use" && strings.TrimSpace(string(b.Input)) != "{}") {
					add("event %d starts %s block %d with content %s; content comes in deltas", i, b.Type, *ev.Index, clip(e.Raw))
				}
				b.Input = nil
				msg.Content = append(msg.Content, b)
			}
		case "content_block_delta":
			if open == nil || open.stopped || ev.Delta == nil {
				add("event %d is a delta of block %s, which is not open", i, intOrNull(ev.Index))
				continue
			}
			want := map[string]string{"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "thinking", "input_json_delta": "tool_use"}[ev.Delta.Type]
			if want != open.Type {
				add("event %d is a %s of a %s block", i, ev.Delta.Type, open.Type)
				continue
			}
			switch ev.Delta.Type {
			case "text_delta":
				open.Text += ev.Delta.Text
			case "thinking_delta":
				open.Thinking += ev.Delta.Thinking
			case "signature_delta":
				open.Signature += ev.Delta.Signature
			case "input_json_delta":
				open.streamedInput.WriteString(ev.Delta.PartialJSON)
				open.streamedInputDeltas = true
			}
		case "content_block_stop":
			if open == nil || open.stopped {
				add("event %d stops block %s, which is not open", i, intOrNull(ev.Index))
				continue
			}
			open.stopped = true
		case "message_delta":
			deltas++
			if ev.Delta == nil || ev.Delta.StopReason == nil {
				add("message_delta (event %d) has no stop_reason", i)
			} else {
				msg.StopReason = ev.Delta.StopReason
			}
			if isNull(ev.Usage) {
				add("message_delta (event %d) has no usage; it carries the cumulative usage", i)
				continue
			}
			u, err := mergedUsage(res.Start, ev.Usage)
			if err != nil {
				add("message_delta's usage: %v", err)
				continue
			}
			res.Usage = u
		case "message_stop", "error":
		default:
			add("event %d has an unknown type %q", i, e.Type)
		}
	}
	for _, b := range msg.Content {
		if !b.stopped {
			add("block %s is never stopped (content_block_stop)", b.Type)
		}
		if b.Type == "tool_use" {
			b.Input = json.RawMessage("{}")
			if b.streamedInputDeltas {
				b.Input = json.RawMessage(b.streamedInput.String())
			}
		}
	}
	if deltas == 0 {
		add("the stream has no message_delta")
	}
	p = append(p, checkMessage(msg, res.Usage)...)
	if s, u := res.Start, res.Usage; s != nil && u != nil {
		if s.InputTokens != u.InputTokens || s.CacheReadInputTokens != u.CacheReadInputTokens || s.CacheCreationInputTokens != u.CacheCreationInputTokens {
			add("message_start's input counts (input %d, cache read %d, cache creation %d) are not the message's (%d, %d, %d): the prompt is known when the message starts",
				s.InputTokens, s.CacheReadInputTokens, s.CacheCreationInputTokens, u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens)
		}
		if s.OutputTokens > u.OutputTokens {
			add("message_start's output_tokens %d is more than the final %d: usage is cumulative", s.OutputTokens, u.OutputTokens)
		}
	}
	return res, p
}

func intOrNull(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// mergedUsage reads a message_delta's usage over message_start's: input
// counts message_delta omits keep message_start's, as Anthropic's SDKs
// merge them.
func mergedUsage(start *MessagesUsage, raw json.RawMessage) (*MessagesUsage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("not a usage object: %w", err)
	}
	if start != nil {
		for k, v := range map[string]int{"input_tokens": start.InputTokens, "cache_creation_input_tokens": start.CacheCreationInputTokens,
			"cache_read_input_tokens": start.CacheReadInputTokens} {
			if isNull(m[k]) {
				m[k] = json.RawMessage(strconv.Itoa(v))
			}
		}
	}
	merged, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return ParseMessagesUsage(merged)
}

// CheckMessage checks a complete message (a plain answer, or a stream
// accumulated): type message, role assistant, a stop_reason, usage per
// CheckMessagesUsage, tool_use exactly when a tool_use block is there
// (max_tokens or the context window may cut a call short), each tool_use
// with an id, a name and an object as input.
func CheckMessage(m *MessageObject, u *MessagesUsage) []string {
	var p []string
	if m.Type != "message" || m.Role != "assistant" {
		p = append(p, fmt.Sprintf("type %q role %q, want message and assistant", m.Type, m.Role))
	}
	return append(p, checkMessage(m, u)...)
}

func checkMessage(m *MessageObject, u *MessagesUsage) []string {
	var p []string
	if u == nil {
		p = append(p, "the message has no usage")
	} else {
		p = append(p, CheckMessagesUsage(u)...)
	}
	if m.StopReason == nil {
		return append(p, "the message has no stop_reason")
	}
	calls := m.Blocks("tool_use")
	cut := *m.StopReason == "max_tokens" || *m.StopReason == "model_context_window_exceeded"
	switch sr := *m.StopReason; {
	case cut:
	case len(calls) > 0 && sr != "tool_use":
		p = append(p, fmt.Sprintf("the message has %d tool_use blocks but stop_reason %s", len(calls), sr))
	case len(calls) == 0 && sr == "tool_use":
		p = append(p, "stop_reason is tool_use, but the message has no tool_use block")
	}
	for _, c := range calls {
		var input map[string]any
		if c.ID == "" || c.Name == "" {
			p = append(p, fmt.Sprintf("a tool_use block without id or name: id %q name %q", c.ID, c.Name))
		}
		if err := json.Unmarshal(c.Input, &input); err != nil && !cut {
			p = append(p, fmt.Sprintf("tool_use %s has input %s, not a JSON object", c.ID, clip(c.Input)))
		}
	}
	return p
}

// anthropicTypes is Anthropic's error type for each status.
var anthropicTypes = map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
	404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}

// CheckMessagesError checks a refusal on the Messages API: a 4xx (never a
// 5xx, never success) and a body in Anthropic's shape,
// {"type":"error","error":{"type":…,"message":…}}, whose type is
// Anthropic's for the status (400 invalid_request_error, 404
// not_found_error, …) and which validates against MessagesErrorResponse.
func CheckMessagesError(status int, body []byte) []string {
	var p []string
	if status < 400 || status >= 500 {
		p = append(p, fmt.Sprintf("status %d, want a 4xx (body: %s)", status, clip(body)))
	}
	var doc struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Error == nil || doc.Type != "error" {
		return append(p, fmt.Sprintf("the body is not Anthropic's {\"type\":\"error\",\"error\":{...}}: %s", clip(body)))
	}
	if doc.Error.Message == "" {
		p = append(p, "error.message is missing or empty")
	}
	if want, ok := anthropicTypes[status]; ok && doc.Error.Type != want {
		p = append(p, fmt.Sprintf("error.type is %q; Anthropic's for status %d is %s", doc.Error.Type, status, want))
	}
	if err := openapi.ValidateSchema("MessagesErrorResponse", body); err != nil {
		p = append(p, fmt.Sprintf("the error body breaks MessagesErrorResponse in openapi.yaml: %v", err))
	}
	return p
}
