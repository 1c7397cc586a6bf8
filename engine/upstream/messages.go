package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"rill/engine"
)

// The Messages API upstream. A request that came through rill's
// /v1/messages (engine.Request.MessagesAPI) goes to the upstream's
// /v1/messages when its kind serves that API (llama.cpp, vLLM, SGLang,
// another rill), so that the upstream counts it as its Messages API does;
// every other request, and every request to the other kinds, goes to chat
// completions as before. A replica that answers 404 there (an older
// server, or a proxy that routes only the OpenAI paths) gets chat
// completions from then on (call.send). Either way rill keeps the ids and
// the usage rules: the upstream's events are read back into engine events
// (messagesDecoder) and its usage, whose input counts each server splits
// its own way, into Stats by the kind's mapping (Kind.messagesUsage).
//
// What a kind's /v1/messages does not carry sends the request to chat
// instead, where encodeRequest carries it or refuses it: several choices,
// logprobs, a prediction, logit_bias, penalties, a request without
// max_tokens (the clamp's retry), and the members of messagesCaps a kind
// lacks.

const pathMessages = "/v1/messages"

// messagesCaps is what a kind's /v1/messages carries beyond the core every
// such server reads: system, user and assistant turns with thinking,
// tool_use and tool_result blocks, max_tokens, stop_sequences,
// temperature, top_p, top_k, and custom tools with tool_choice auto or
// any.
type messagesCaps struct {
	ok bool // the kind's server has /v1/messages
	// toolChoice: tool_choice none and a named tool; llama.cpp makes a
	// named tool "required" and ignores none.
	toolChoice bool
	// noParallel: tool_choice.disable_parallel_tool_use.
	noParallel bool
	// strict: a tool's strict.
	strict bool
	// format: output_config.format of type json_schema.
	format bool
	// templateKwargs: chat_template_kwargs (vLLM's and llama.cpp's
	// extension of the API).
	templateKwargs bool
	// thinkingOff: thinking {"type":"disabled"}, which rill reads as
	// enable_thinking false.
	thinkingOff bool
	// extensions: rill's seed, min_p, ignore_eos and no_draft.
	extensions bool
}

// useMessages reports whether req goes to the upstream's /v1/messages.
func useMessages(k Kind, req *engine.Request, n int) bool {
	c := k.caps().messages
	if !req.MessagesAPI || !c.ok || len(req.Messages) == 0 {
		return false
	}
	s := req.Sampling
	if n > 1 || req.MaxTokens <= 0 || req.Logprobs || req.Prediction != "" || len(req.LogitBias) > 0 ||
		s.PresencePenalty != 0 || s.FrequencyPenalty != 0 {
		return false
	}
	if !c.extensions && (s.Seed != nil || s.MinP > 0 || req.IgnoreEOS) {
		return false
	}
	if len(req.ChatTemplateKwargs) > 0 && !c.templateKwargs && !(c.thinkingOff && thinkingOff(req.ChatTemplateKwargs)) {
		return false
	}
	switch req.ToolChoice.Mode {
	case engine.ToolChoiceNone, engine.ToolChoiceFunction:
		if !c.toolChoice {
			return false
		}
	}
	if p := req.ParallelToolCalls; p != nil && !*p && !c.noParallel {
		return false
	}
	for _, t := range req.Tools {
		if t.Strict && !c.strict {
			return false
		}
		if len(t.Parameters) > 0 && !isObject(t.Parameters) {
			return false
		}
	}
	if rf := req.ResponseFormat; rf != nil && (!c.format || rf.Type != engine.FormatJSONSchema || !isObject(rf.Schema)) {
		return false
	}
	return messagesConversation(req.Messages)
}

// thinkingOff reports whether kwargs are exactly {"enable_thinking": false},
// what rill's Messages API makes of thinking {"type": "disabled"}.
func thinkingOff(kwargs map[string]any) bool {
	if len(kwargs) != 1 {
		return false
	}
	switch v := kwargs["enable_thinking"].(type) {
	case bool:
		return !v
	case json.RawMessage:
		return string(bytes.TrimSpace(v)) == "false"
	}
	return false
}

// messagesConversation reports whether the Messages API can carry msgs as
// they are: a system message first at most, then user, assistant and tool
// messages without names, whose tool calls' arguments are JSON objects
// (a tool_use block's input is one).
func messagesConversation(msgs []engine.Message) bool {
	for i, m := range msgs {
		if m.Name != "" {
			return false
		}
		switch m.Role {
		case engine.RoleSystem:
			if i > 0 {
				return false
			}
		case engine.RoleUser, engine.RoleTool:
		case engine.RoleAssistant:
			for _, c := range m.ToolCalls {
				if !isObject(json.RawMessage(c.Arguments)) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// isObject reports whether b is one valid JSON object.
func isObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// wireMessagesRequest is the body rill sends to an upstream's /v1/messages.
type wireMessagesRequest struct {
	Model         string                   `json:"model"`
	MaxTokens     int                      `json:"max_tokens"`
	System        string                   `json:"system,omitempty"`
	Messages      []wireAnthropicMsg       `json:"messages"`
	Stream        bool                     `json:"stream"`
	StopSequences []string                 `json:"stop_sequences,omitempty"`
	Temperature   float64                  `json:"temperature"`
	TopP          float64                  `json:"top_p,omitempty"`
	TopK          int                      `json:"top_k,omitempty"`
	Tools         []wireAnthropicTool      `json:"tools,omitempty"`
	ToolChoice    *wireAnthropicToolChoice `json:"tool_choice,omitempty"`
	Thinking      *wireAnthropicThinking   `json:"thinking,omitempty"`
	OutputConfig  *wireOutputConfig        `json:"output_config,omitempty"`
	// ChatTemplateKwargs is vLLM's and llama.cpp's extension.
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
	// rill's extensions.
	Seed      *int64  `json:"seed,omitempty"`
	MinP      float64 `json:"min_p,omitempty"`
	IgnoreEOS bool    `json:"ignore_eos,omitempty"`
	NoDraft   bool    `json:"no_draft,omitempty"`
}

// wireAnthropicMsg is one turn: content a string or a list of blocks.
type wireAnthropicMsg struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// wireAnthropicBlock is one content block rill sends: text, thinking,
// tool_use or tool_result.
type wireAnthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   *string         `json:"content,omitempty"`
}

type wireAnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	Strict      bool            `json:"strict,omitempty"`
}

type wireAnthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

type wireAnthropicThinking struct {
	Type string `json:"type"`
}

type wireOutputConfig struct {
	Format struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	} `json:"format"`
}

// encodeMessagesRequest builds the upstream Messages request for req,
// which useMessages accepted: streamed, with what the kind's /v1/messages
// carries. The conversation goes as rill's own Messages API would read it
// back into the same chat messages: the system message as system, a tool
// message's result as a tool_result block in a user turn of its own (the
// servers put a user turn's tool results after its text otherwise), an
// assistant's reasoning as a thinking block (with an empty signature,
// which none of them checks), its calls as tool_use blocks.
func encodeMessagesRequest(k Kind, model string, req *engine.Request) ([]byte, error) {
	c := k.caps().messages
	w := wireMessagesRequest{Model: model, MaxTokens: req.MaxTokens, Stream: true, StopSequences: req.Stop}
	msgs := req.Messages
	if len(msgs) > 0 && msgs[0].Role == engine.RoleSystem {
		w.System = msgs[0].Content
		msgs = msgs[1:]
	}
	w.Messages = make([]wireAnthropicMsg, 0, len(msgs))
	for i := 0; i < len(msgs); i++ {
		m := &msgs[i]
		switch m.Role {
		case engine.RoleUser:
			w.Messages = append(w.Messages, wireAnthropicMsg{Role: "user", Content: m.Content})
		case engine.RoleTool:
			var results []wireAnthropicBlock
			for ; i < len(msgs) && msgs[i].Role == engine.RoleTool; i++ {
				results = append(results, wireAnthropicBlock{Type: "tool_result", ToolUseID: msgs[i].ToolCallID, Content: &msgs[i].Content})
			}
			i--
			w.Messages = append(w.Messages, wireAnthropicMsg{Role: "user", Content: results})
		case engine.RoleAssistant:
			w.Messages = append(w.Messages, wireAnthropicMsg{Role: "assistant", Content: assistantBlocks(m)})
		}
	}
	s := req.Sampling
	w.Temperature = s.Temperature
	if s.TopP > 0 && s.TopP < 1 {
		w.TopP = s.TopP
	}
	w.TopK = s.TopK
	if c.extensions {
		w.Seed, w.MinP, w.IgnoreEOS, w.NoDraft = s.Seed, s.MinP, req.IgnoreEOS, req.NoDraft
	}
	for _, t := range req.Tools {
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`) // any object, as chat's absent parameters
		}
		w.Tools = append(w.Tools, wireAnthropicTool{Name: t.Name, Description: t.Description, InputSchema: schema, Strict: t.Strict})
	}
	tc := &wireAnthropicToolChoice{}
	switch req.ToolChoice.Mode {
	case engine.ToolChoiceAuto:
		tc.Type = "auto"
	case engine.ToolChoiceNone:
		tc.Type = "none"
	case engine.ToolChoiceRequired:
		tc.Type = "any"
	case engine.ToolChoiceFunction:
		tc.Type, tc.Name = "tool", req.ToolChoice.Name
	}
	tc.DisableParallelToolUse = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	if len(req.Tools) > 0 && (tc.Type != "auto" || tc.DisableParallelToolUse) {
		w.ToolChoice = tc
	}
	if rf := req.ResponseFormat; rf != nil {
		w.OutputConfig = &wireOutputConfig{}
		w.OutputConfig.Format.Type, w.OutputConfig.Format.Schema = "json_schema", rf.Schema
	}
	if len(req.ChatTemplateKwargs) > 0 {
		if c.templateKwargs {
			w.ChatTemplateKwargs = req.ChatTemplateKwargs
		} else {
			w.Thinking = &wireAnthropicThinking{Type: "disabled"} // useMessages checked it is that
		}
	}
	body, err := json.Marshal(&w)
	if err != nil {
		return nil, engine.Errorf("", "", "the request cannot be encoded for the upstream: %v", err)
	}
	return body, nil
}

// assistantBlocks is an assistant turn's content: its text alone as a
// string, else its thinking, text and tool_use blocks in that order.
func assistantBlocks(m *engine.Message) any {
	if m.ReasoningContent == "" && len(m.ToolCalls) == 0 {
		return m.Content
	}
	var out []wireAnthropicBlock
	if m.ReasoningContent != "" {
		out = append(out, wireAnthropicBlock{Type: "thinking", Thinking: &m.ReasoningContent, Signature: new(string)})
	}
	if m.Content != "" {
		out = append(out, wireAnthropicBlock{Type: "text", Text: &m.Content})
	}
	for _, c := range m.ToolCalls {
		out = append(out, wireAnthropicBlock{Type: "tool_use", ID: c.ID, Name: c.Name, Input: json.RawMessage(c.Arguments)})
	}
	return out
}

// wireMessagesUsage is a Messages API usage as servers send it; every
// count may be absent.
type wireMessagesUsage struct {
	InputTokens              *float64 `json:"input_tokens"`
	OutputTokens             *float64 `json:"output_tokens"`
	CacheReadInputTokens     *float64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *float64 `json:"cache_creation_input_tokens"`
	// OutputTokensDetails.ThinkingTokens is rill's.
	OutputTokensDetails *struct {
		ThinkingTokens *float64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// over returns u with the counts later has replacing u's: a
// message_delta's usage over message_start's, as Anthropic's SDKs merge
// them (llama.cpp sends the input counts only in message_start).
func (u *wireMessagesUsage) over(later *wireMessagesUsage) *wireMessagesUsage {
	var m wireMessagesUsage
	if u != nil {
		m = *u
	}
	if later == nil {
		return &m
	}
	for _, f := range []struct{ dst, src **float64 }{
		{&m.InputTokens, &later.InputTokens}, {&m.OutputTokens, &later.OutputTokens},
		{&m.CacheReadInputTokens, &later.CacheReadInputTokens}, {&m.CacheCreationInputTokens, &later.CacheCreationInputTokens},
	} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	if later.OutputTokensDetails != nil {
		m.OutputTokensDetails = later.OutputTokensDetails
	}
	return &m
}

// messagesUsage restates a kind's Messages usage in chat's terms, the
// whole prompt and the parts of it read from and written to the cache, so
// that Kind.stats reads it (docs/design.md §3 rule 13 then splits it
// again). The servers split the prompt differently:
//
//   - llama.cpp: input_tokens is the prompt less cache_read_input_tokens,
//     and it sends no cache creation count; it keeps every prompt token
//     it computed in its slot, where the next request that starts the
//     same way reads it, so those it computed, input_tokens, are the
//     tokens it wrote (as timings.prompt_n is on chat).
//   - vLLM, SGLang: input_tokens is chat's prompt_tokens, the whole
//     prompt, cache_read_input_tokens (SGLang's cached_tokens, 0 without
//     --enable-cache-report; vLLM sends none) a part of it. Neither
//     reports what it wrote: not measured.
//   - rill, and Anthropic's own split: the three input counts add up to
//     the prompt.
func (k Kind) messagesUsage(u *wireMessagesUsage) *wireUsage {
	in, read, created := count(u.InputTokens), count(u.CacheReadInputTokens), count(u.CacheCreationInputTokens)
	var prompt int
	cachedP, writtenP := u.CacheReadInputTokens, u.CacheCreationInputTokens
	switch k {
	case VLLM, SGLang:
		prompt = in
		read = min(read, prompt)
		created = min(created, prompt-read)
	case LlamaCpp:
		prompt = in + read + created
		if writtenP == nil && u.InputTokens != nil {
			writtenP, created = u.InputTokens, in
		}
	default:
		prompt = in + read + created
	}
	w := &wireUsage{PromptTokens: ptr(float64(prompt)), CompletionTokens: u.OutputTokens}
	if cachedP != nil || writtenP != nil {
		w.PromptTokensDetails = &wirePromptDetails{}
		if cachedP != nil {
			w.PromptTokensDetails.CachedTokens = ptr(float64(read))
		}
		if writtenP != nil {
			w.PromptTokensDetails.CacheWriteTokens = ptr(float64(created))
		}
	}
	if d := u.OutputTokensDetails; d != nil && d.ThinkingTokens != nil {
		w.CompletionTokensDetails = &struct {
			AcceptedPredictionTokens *float64 `json:"accepted_prediction_tokens"`
			RejectedPredictionTokens *float64 `json:"rejected_prediction_tokens"`
			ReasoningTokens          *float64 `json:"reasoning_tokens"`
		}{ReasoningTokens: d.ThinkingTokens}
	}
	return w
}

// wireMessagesEvent is what rill reads of a Messages stream event, or of
// a whole (non-streamed) message.
type wireMessagesEvent struct {
	Type string `json:"type"`
	// message_start's message (llama.cpp's error object has a string
	// there instead).
	Message json.RawMessage `json:"message"`
	// content_block_start, content_block_delta, content_block_stop.
	Index        int                `json:"index"`
	ContentBlock *wireMessagesBlock `json:"content_block"`
	Delta        *wireMessagesDelta `json:"delta"`
	// message_delta's usage, or a whole message's.
	Usage *wireMessagesUsage `json:"usage"`
	// An error event is {"type":"error","error":{"type","message"}}.
	Error json.RawMessage `json:"error"`
	// A whole message's blocks and stop reason.
	Content    []wireMessagesBlock `json:"content"`
	StopReason *string             `json:"stop_reason"`
}

// wireMessagesDelta is a content_block_delta's delta, or message_delta's.
type wireMessagesDelta struct {
	Type        string  `json:"type"`
	Text        string  `json:"text"`
	Thinking    string  `json:"thinking"`
	PartialJSON string  `json:"partial_json"`
	StopReason  *string `json:"stop_reason"`
}

// wireMessageObject is what rill reads of message_start's message.
type wireMessageObject struct {
	Usage *wireMessagesUsage `json:"usage"`
}

type wireMessagesBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
}

// messagesDecoder reads one Messages stream into chunks, as
// decodeResponseEvent reads a Responses stream: text deltas are choice
// 0's content, thinking deltas its reasoning, a tool_use block a tool
// call (its id and name go with its first input_json_delta, so that a
// call's header and its first arguments are one event, as on chat), and
// message_delta the finish reason and the whole usage. It keeps what the
// stream said before: the blocks' kinds and message_start's usage. A new
// decoder serves each attempt.
type messagesDecoder struct {
	kind  Kind
	start *wireMessagesUsage
	// calls maps a tool_use block's index to its call's index; pending
	// holds a call's header until its first arguments.
	calls   map[int]int
	pending map[int]*wireToolCall
	last    int // the last tool_use block's index, -1 for none
	n       int // tool_use blocks so far
}

func newMessagesDecoder(k Kind) *messagesDecoder {
	return &messagesDecoder{kind: k, calls: map[int]int{}, pending: map[int]*wireToolCall{}, last: -1}
}

// decode reads one event's data into ch. message_start's usage goes to
// ch.opening, the prompt's counts known from the start.
func (d *messagesDecoder) decode(data []byte, ch *wireChunk) error {
	*ch = wireChunk{}
	var ev wireMessagesEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	switch ev.Type {
	case "message_start":
		var m wireMessageObject
		if err := json.Unmarshal(ev.Message, &m); err != nil {
			return fmt.Errorf("message_start: %w", err)
		}
		if m.Usage != nil {
			d.start = m.Usage
			ch.opening = d.kind.messagesUsage(d.start)
		}
	case "content_block_start":
		b := ev.ContentBlock
		if b == nil {
			return fmt.Errorf("content_block_start %d without its block", ev.Index)
		}
		switch b.Type {
		case "text":
			d.content(ch, &wireContent{Content: &b.Text}, b.Text != "")
		case "thinking":
			d.content(ch, &wireContent{ReasoningContent: &b.Thinking}, b.Thinking != "")
		case "tool_use":
			call := &wireToolCall{Index: ptr(d.n), ID: b.ID, Type: "function"}
			call.Function.Name = b.Name
			d.calls[ev.Index], d.pending[ev.Index], d.last = d.n, call, ev.Index
			d.n++
			if in := bytes.TrimSpace(b.Input); len(in) > 0 && !bytes.Equal(in, []byte("{}")) && string(in) != "null" {
				d.arguments(ch, ev.Index, string(in)) // a server that sends the input whole
			}
		}
	case "content_block_delta":
		if ev.Delta == nil {
			return fmt.Errorf("content_block_delta %d without its delta", ev.Index)
		}
		switch ev.Delta.Type {
		case "text_delta":
			d.content(ch, &wireContent{Content: &ev.Delta.Text}, ev.Delta.Text != "")
		case "thinking_delta":
			d.content(ch, &wireContent{ReasoningContent: &ev.Delta.Thinking}, ev.Delta.Thinking != "")
		case "input_json_delta":
			idx := ev.Index
			if _, ok := d.calls[idx]; !ok {
				// llama.cpp numbers a call's deltas by the blocks it has
				// sent so far, which can differ from its start's index.
				if d.last < 0 {
					return fmt.Errorf("input_json_delta for block %d, which is no tool_use block", idx)
				}
				idx = d.last
			}
			d.arguments(ch, idx, ev.Delta.PartialJSON)
		}
	case "content_block_stop":
		if call := d.pending[ev.Index]; call != nil {
			// A call without arguments: its header alone.
			delete(d.pending, ev.Index)
			ch.Choices = []wireChoice{{Delta: &wireContent{ToolCalls: []wireToolCall{*call}}}}
		}
	case "message_delta":
		d.flush(ch)
		ch.Choices = append(ch.Choices, wireChoice{FinishReason: ptr(stopReason(ev.Delta))})
		ch.Usage = d.kind.messagesUsage(d.start.over(ev.Usage))
	case "message":
		return d.whole(&ev, ch)
	case "error":
		if len(ev.Error) > 0 && ev.Error[0] == '{' {
			ch.Error = ev.Error
			break
		}
		return fmt.Errorf("error event without an error object: %s", data)
	case "message_stop", "ping":
	default:
		// llama.cpp's error object, sent with "event: error" and no type
		// of its own: {"code":500,"message":"...","type":"server_error"}.
		var flat struct {
			Message *string `json:"message"`
		}
		if json.Unmarshal(data, &flat) == nil && flat.Message != nil {
			ch.Error = append([]byte(nil), data...)
		}
	}
	return nil
}

// content puts a text or thinking delta into ch, when it has any.
func (d *messagesDecoder) content(ch *wireChunk, c *wireContent, has bool) {
	if has {
		ch.Choices = []wireChoice{{Delta: c}}
	}
}

// arguments puts a fragment of block idx's call's input into ch, after
// the call's header when it is still pending.
func (d *messagesDecoder) arguments(ch *wireChunk, idx int, partial string) {
	var call wireToolCall
	if p := d.pending[idx]; p != nil {
		call = *p
		delete(d.pending, idx)
	} else {
		call.Index = ptr(d.calls[idx])
	}
	call.Function.Arguments = partial
	ch.Choices = []wireChoice{{Delta: &wireContent{ToolCalls: []wireToolCall{call}}}}
}

// flush puts the headers of calls still pending into ch: calls whose
// block never stopped and got no arguments.
func (d *messagesDecoder) flush(ch *wireChunk) {
	calls := make([]wireToolCall, 0, len(d.pending))
	for idx, call := range d.pending {
		calls = append(calls, *call)
		delete(d.pending, idx)
	}
	slices.SortFunc(calls, func(a, b wireToolCall) int { return *a.Index - *b.Index })
	for _, c := range calls {
		ch.Choices = append(ch.Choices, wireChoice{Delta: &wireContent{ToolCalls: []wireToolCall{c}}})
	}
}

// whole reads a complete message (a server that answered a streamed
// request with JSON): its blocks, stop reason and usage in one chunk.
func (d *messagesDecoder) whole(ev *wireMessagesEvent, ch *wireChunk) error {
	msg := &wireContent{}
	var text, reasoning string
	for _, b := range ev.Content {
		switch b.Type {
		case "text":
			text += b.Text
		case "thinking":
			reasoning += b.Thinking
		case "tool_use":
			input := "{}"
			if isObject(b.Input) {
				var buf bytes.Buffer
				if err := json.Compact(&buf, b.Input); err != nil {
					return err
				}
				input = buf.String()
			}
			call := wireToolCall{ID: b.ID, Type: "function"}
			call.Function.Name, call.Function.Arguments = b.Name, input
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
	}
	msg.Content, msg.ReasoningContent = &text, &reasoning
	reason := "end_turn"
	if ev.StopReason != nil {
		reason = *ev.StopReason
	}
	ch.Choices = []wireChoice{{Message: msg, FinishReason: ptr(chatFinish(reason))}}
	if ev.Usage != nil {
		ch.Usage = d.kind.messagesUsage(ev.Usage)
	}
	return nil
}

// stopReason is message_delta's stop_reason as a chat finish reason.
func stopReason(delta *wireMessagesDelta) string {
	if delta == nil || delta.StopReason == nil {
		return "stop"
	}
	return chatFinish(*delta.StopReason)
}

// chatFinish maps an Anthropic stop_reason: max_tokens (and a full
// context window) is the length limit, tool_use a reply that called
// tools, the rest (end_turn, stop_sequence, which llama.cpp reports as
// end_turn, pause_turn, refusal) a stop.
func chatFinish(reason string) string {
	switch reason {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	}
	return "stop"
}
