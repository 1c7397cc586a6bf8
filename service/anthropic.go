package service

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"

	"rill/engine"
)

// Anthropic's Messages API: POST /v1/messages (plain JSON or SSE, "?beta=true"
// accepted), POST /v1/messages/count_tokens, and the same over a WebSocket
// (anthropic_ws.go). A request becomes a chat job of one choice, so it runs
// on every engine as chat does. This file holds the wire types of the
// request and their conversion into the engine's request (pure functions);
// anthropic_tools.go converts tools and thinking, anthropic_stream.go makes
// the events and the message object, anthropic_errors.go the error shape,
// anthropic_handlers.go the endpoints.

const (
	pathMessages    = "/v1/messages"
	pathCountTokens = "/v1/messages/count_tokens"
)

// isMessagesPath reports whether path is the Messages API's or under it
// (/v1/messages/batches, which rill does not serve, included): every
// refusal there is in Anthropic's error shape, since only Anthropic's
// clients call them.
func isMessagesPath(path string) bool {
	return path == pathMessages || strings.HasPrefix(path, pathMessages+"/")
}

// messagesRequest is the body of POST /v1/messages (and, without
// max_tokens, of count_tokens), decoded after the OpenAPI validator passed
// it. Members rill does not use (context_management, output_config.effort,
// service_tier, container, cache_control, inference_geo, speed, …) are
// accepted and ignored: the schema allows unknown members, as Anthropic
// does for the betas a client may send.
type messagesRequest struct {
	Model         string               `json:"model"`
	MaxTokens     *int                 `json:"max_tokens"`
	Messages      []anthropicMessage   `json:"messages"`
	System        json.RawMessage      `json:"system"`
	StopSequences []string             `json:"stop_sequences"`
	Stream        *bool                `json:"stream"`
	Temperature   *float64             `json:"temperature"`
	TopP          *float64             `json:"top_p"`
	Tools         []anthropicTool      `json:"tools"`
	ToolChoice    *anthropicToolChoice `json:"tool_choice"`
	Thinking      *anthropicThinking   `json:"thinking"`
	OutputConfig  *struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"output_config"`
	// MCPServers are servers Anthropic's API connects to itself; rill
	// cannot, and says so in the warning.
	MCPServers []struct {
		Name string `json:"name"`
	} `json:"mcp_servers"`
	// top_k (Anthropic's own), and rill's seed, min_p, ignore_eos, no_draft.
	extensions
}

// anthropicMessage is one element of "messages"; content is a string or
// a list of blocks.
type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is one content block of a message, of the system prompt,
// or of a tool result. Only the members of the types rill reads are
// decoded; cache_control, citations and the like are ignored.
type anthropicBlock struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
	// thinking
	Thinking *string `json:"thinking"`
}

// billingHeader matches the attribution line that starts the first
// system block Claude Code sends, "x-anthropic-billing-header:
// cc_version=…; cc_entrypoint=cli; cch=…;", for Anthropic's billing, not
// for the model. Its cch changes with every request, so kept first in the
// prompt it would leave nothing for the prefix cache to reuse (llama.cpp
// rewrites it for the same reason); rill leaves it out. It matches the
// line's "key=value;" pairs only, so that a prompt a client joined onto
// it stays.
var billingHeader = regexp.MustCompile(`^x-anthropic-billing-header:(?:[ \t]*[A-Za-z0-9_.-]+=[^;\n]*;)*[ \t]*\n?`)

// textSeparator joins the text blocks of a user turn and of the system
// prompt: each is a paragraph of its own (Claude Code sends a reminder
// block, then the user's words). An assistant's text blocks are one reply
// cut by its tool calls and are joined as they are.
const textSeparator = "\n\n"

// messagesJob converts a Messages request into a chat job of one choice.
// It checks what the schema cannot and refuses what rill cannot do
// faithfully (images, documents, a prefilled assistant turn). The server
// tools it left out, which the caller warns about, come back in skipped.
func messagesJob(r *messagesRequest) (p *job, skipped []string, e *apiError) {
	req := &engine.Request{Model: r.Model, N: 1, MessagesAPI: true}
	p = &job{kind: kindChat, model: r.Model, n: 1, reqs: []*engine.Request{req}}
	p.stream = r.Stream != nil && *r.Stream
	if r.MaxTokens != nil {
		req.MaxTokens = *r.MaxTokens
	}
	msgs, e := anthropicConversation(r.System, r.Messages)
	if e != nil {
		return nil, nil, e
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == engine.RoleAssistant {
		return nil, nil, invalid(fmt.Sprintf("messages[%d]", len(r.Messages)-1), "unsupported_parameter",
			"A final assistant message (a prefill for the reply to continue) is not supported by this server; end with a user message.")
	}
	req.Messages = msgs
	for _, s := range r.StopSequences {
		if s != "" {
			req.Stop = append(req.Stop, s)
		}
	}
	s := engine.Sampling{Temperature: 1, TopP: 1} // Anthropic's defaults
	if r.Temperature != nil {
		s.Temperature = *r.Temperature
	}
	if r.TopP != nil {
		s.TopP = *r.TopP
		if s.TopP == 0 {
			s.TopP = math.SmallestNonzeroFloat64 // as chat: the most likely token alone
		}
	}
	r.extensions.apply(req, &s)
	req.Sampling = s
	if skipped, e = applyAnthropicTools(r, req); e != nil {
		return nil, nil, e
	}
	if e := applyThinking(r, req); e != nil {
		return nil, nil, e
	}
	if oc := r.OutputConfig; oc != nil && oc.Format != nil {
		if oc.Format.Type != "json_schema" {
			return nil, nil, invalid("output_config.format.type", "invalid_value",
				"Invalid value for 'output_config.format.type': '%s' (want json_schema).", clip(oc.Format.Type, maxEchoBytes))
		}
		rf, e := jsonSchemaFormat("output", oc.Format.Schema, true, "output_config.format")
		if e != nil {
			return nil, nil, e
		}
		req.ResponseFormat = rf
	}
	return p, skipped, nil
}

// anthropicConversation converts the system prompt and the messages into
// the engine's chat messages, as chat would have the same conversation:
//
//   - system (a string or text blocks) is one system message first,
//     without Claude Code's billing header (see billingHeader).
//   - a "system" message inside messages before the first user or
//     assistant message joins the system prompt; one later in the
//     conversation is read as user text, because many chat templates
//     (Qwen 3.5's among them) refuse a system message anywhere but first.
//   - a user message's tool_result blocks are tool messages answering
//     their tool_use_id, in order, before the message's text; is_error
//     prefixes the result with "Error: ", the one way a template can show
//     it. Its text blocks are one user message.
//   - an assistant message's text is its content, its thinking blocks its
//     reasoning (ReasoningContent, for templates that render it), its
//     tool_use blocks its tool calls (input as JSON text);
//     redacted_thinking, which only Anthropic can read, adds nothing.
//   - consecutive turns of one role are one turn, as Anthropic combines
//     them.
//
// Images and documents are refused: no engine rill drives reads them.
func anthropicConversation(system json.RawMessage, in []anthropicMessage) ([]engine.Message, *apiError) {
	sys, e := systemText(system, "system")
	if e != nil {
		return nil, e
	}
	out := make([]engine.Message, 0, len(in)+1)
	begun := false // a user or assistant message came
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system":
			text, e := systemText(m.Content, param+".content")
			if e != nil {
				return nil, e
			}
			if !begun {
				sys = joinText(sys, text)
				continue
			}
			out = appendTurn(out, engine.Message{Role: engine.RoleUser, Content: text})
		case "user":
			begun = true
			msgs, e := userTurn(m.Content, param)
			if e != nil {
				return nil, e
			}
			for _, u := range msgs {
				out = appendTurn(out, u)
			}
		case "assistant":
			begun = true
			a, e := assistantTurn(m.Content, param)
			if e != nil {
				return nil, e
			}
			out = appendTurn(out, a)
		default:
			return nil, invalid(param+".role", "invalid_value",
				"Invalid value for '%s.role': '%s' (want user, assistant or system).", param, clip(m.Role, maxEchoBytes))
		}
	}
	if sys != "" {
		out = append([]engine.Message{{Role: engine.RoleSystem, Content: sys}}, out...)
	}
	return out, nil
}

// joinText joins two paragraphs, either of which may be empty.
func joinText(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + textSeparator + b
}

// appendTurn appends m, combining it with the message before it when both
// are user turns or both assistant turns (Anthropic combines consecutive
// turns of one role); tool messages are never combined.
func appendTurn(msgs []engine.Message, m engine.Message) []engine.Message {
	n := len(msgs)
	if n == 0 || msgs[n-1].Role != m.Role || m.Role == engine.RoleTool || m.Role == engine.RoleSystem {
		return append(msgs, m)
	}
	prev := &msgs[n-1]
	if m.Role == engine.RoleUser {
		prev.Content = joinText(prev.Content, m.Content)
		return msgs
	}
	prev.Content += m.Content
	prev.ReasoningContent += m.ReasoningContent
	prev.ToolCalls = append(prev.ToolCalls, m.ToolCalls...)
	prev.NullContent = prev.Content == "" && len(prev.ToolCalls) > 0
	return msgs
}

// blocks reads content: a string (one text block) or a list of blocks.
func blocks(raw json.RawMessage, param string) ([]anthropicBlock, *apiError) {
	switch firstByte(raw) {
	case 0, 'n':
		return nil, invalid(param, "missing_required_parameter", "Missing required parameter: '%s'.", param)
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid(param, "invalid_type", "Invalid type for '%s': expected a string.", param)
		}
		return []anthropicBlock{{Type: "text", Text: &s}}, nil
	}
	var bs []anthropicBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, invalid(param, "invalid_type", "Invalid type for '%s': expected a string or an array of content blocks.", param)
	}
	return bs, nil
}

// systemText reads a system prompt (or a system message's content): a
// string, or text blocks joined as paragraphs. Absent or null is "".
func systemText(raw json.RawMessage, param string) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	bs, e := blocks(raw, param)
	if e != nil {
		return "", e
	}
	var text string
	for j, b := range bs {
		at := fmt.Sprintf("%s[%d]", param, j)
		if b.Type != "text" {
			return "", invalid(at+".type", "invalid_value", "Invalid value for '%s.type': a system prompt holds text blocks, not '%s'.", at, clip(b.Type, maxEchoBytes))
		}
		if b.Text == nil {
			return "", missingPartField(param, j, "text")
		}
		text = joinText(text, billingHeader.ReplaceAllLiteralString(*b.Text, ""))
	}
	return text, nil
}

// userTurn reads a user message: its tool results as tool messages, then
// its text as one user message.
func userTurn(raw json.RawMessage, param string) ([]engine.Message, *apiError) {
	bs, e := blocks(raw, param+".content")
	if e != nil {
		return nil, e
	}
	var out []engine.Message
	var text string
	hasText := false
	for j, b := range bs {
		at := fmt.Sprintf("%s.content[%d]", param, j)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return nil, missingPartField(param+".content", j, "text")
			}
			text = joinText(text, *b.Text)
			hasText = true
		case "tool_result":
			if b.ToolUseID == "" {
				return nil, invalid(at+".tool_use_id", "missing_required_parameter", "Missing required parameter: '%s.tool_use_id'.", at)
			}
			result, e := toolResultText(b.Content, at+".content")
			if e != nil {
				return nil, e
			}
			if b.IsError != nil && *b.IsError {
				result = "Error: " + result
			}
			out = append(out, engine.Message{Role: engine.RoleTool, Content: result, ToolCallID: b.ToolUseID})
		default:
			return nil, unreadableBlock(b.Type, at, "a user message")
		}
	}
	if hasText || len(out) == 0 {
		out = append(out, engine.Message{Role: engine.RoleUser, Content: text})
	}
	return out, nil
}

// toolResultText reads a tool result's content: absent, a string, or
// text blocks joined as paragraphs.
func toolResultText(raw json.RawMessage, param string) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	bs, e := blocks(raw, param)
	if e != nil {
		return "", e
	}
	var text string
	for j, b := range bs {
		if b.Type != "text" {
			return "", unreadableBlock(b.Type, fmt.Sprintf("%s[%d]", param, j), "a tool result")
		}
		if b.Text == nil {
			return "", missingPartField(param, j, "text")
		}
		text = joinText(text, *b.Text)
	}
	return text, nil
}

// assistantTurn reads an assistant message: text, thinking and tool_use
// blocks, in one engine message.
func assistantTurn(raw json.RawMessage, param string) (engine.Message, *apiError) {
	m := engine.Message{Role: engine.RoleAssistant}
	bs, e := blocks(raw, param+".content")
	if e != nil {
		return m, e
	}
	for j, b := range bs {
		at := fmt.Sprintf("%s.content[%d]", param, j)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return m, missingPartField(param+".content", j, "text")
			}
			m.Content += *b.Text
		case "thinking":
			if b.Thinking != nil {
				m.ReasoningContent += *b.Thinking
			}
		case "redacted_thinking":
		case "tool_use":
			call, e := toolUseCall(&b, at)
			if e != nil {
				return m, e
			}
			m.ToolCalls = append(m.ToolCalls, call)
		default:
			return m, unreadableBlock(b.Type, at, "an assistant message")
		}
	}
	m.NullContent = m.Content == "" && len(m.ToolCalls) > 0
	return m, nil
}

// toolUseCall reads a tool_use block: id, name and an input object,
// which the call carries as JSON text.
func toolUseCall(b *anthropicBlock, at string) (engine.ToolCall, *apiError) {
	for _, f := range []struct{ name, v string }{{"id", b.ID}, {"name", b.Name}} {
		if f.v == "" {
			return engine.ToolCall{}, invalid(at+"."+f.name, "missing_required_parameter", "Missing required parameter: '%s.%s'.", at, f.name)
		}
	}
	input := []byte("{}")
	if !isNull(b.Input) {
		if firstByte(b.Input) != '{' {
			return engine.ToolCall{}, invalid(at+".input", "invalid_type", "Invalid type for '%s.input': expected an object.", at)
		}
		input = compactJSON(b.Input)
	}
	return engine.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(input)}, nil
}

// unreadableBlock is the 400 for a block that cannot stand where it is:
// images and documents (no engine rill drives reads them), blocks of
// Anthropic's server tools, which rill never produces, and blocks in the
// wrong kind of message.
func unreadableBlock(typ, at, where string) *apiError {
	switch typ {
	case "image", "document":
		return invalid(at+".type", "unsupported_parameter",
			"Content blocks of type '%s' are not supported by this server: its models read text only.", typ)
	case "text", "tool_use", "tool_result", "thinking", "redacted_thinking":
		return invalid(at+".type", "invalid_value", "Invalid value for '%s.type': a '%s' block cannot be part of %s.", at, typ, where)
	}
	return invalid(at+".type", "unsupported_parameter",
		"Content blocks of type '%s' are not supported by this server.", clip(typ, maxEchoBytes))
}
