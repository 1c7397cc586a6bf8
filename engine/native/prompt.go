package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"rill/engine"
	"rill/engine/chat"
	"rill/engine/tokenizer"
	"rill/engine/toolcall"
)

// A request's prompt: chat messages rendered by the model's template (with
// the tool calls, tool results and reasoning of earlier turns, the tools
// and the template kwargs), then tokenised so that no string the client
// sent can spell a control token; text prompts tokenised as llama.cpp's
// server does; token ids as given. Tokenising runs on the caller's
// goroutine and stops when the request's context ends; a prompt whose bytes
// already prove it longer than the context is refused before it is
// tokenised at all.

// promptTokens tokenises req's prompt: chat messages through the template,
// text with BOS and special tokens parsed (as llama.cpp's server does),
// token ids as given. For chat it also says where the output starts with
// respect to a thinking block. It returns ctx's error if ctx ends while it
// tokenises.
func (e *Engine) promptTokens(ctx context.Context, req *engine.Request) ([]int32, thinkPhase, error) {
	var ids []int
	phase := phaseNone
	var err error
	switch {
	case req.Messages != nil:
		var text string
		var opts tokenizer.EncodeOptions
		text, opts, err = e.renderChat(chatRender{msgs: req.Messages, tools: req.Tools, kwargs: req.ChatTemplateKwargs, effort: req.ReasoningEffort})
		if err != nil {
			return nil, phaseNone, err
		}
		phase = e.think.startPhase(text)
		ids, err = e.encode(ctx, text, "messages", opts)
	case req.PromptTokens != nil:
		for i, id := range req.PromptTokens {
			if !e.tok.Valid(id) {
				return nil, phaseNone, engine.Errorf("", "prompt", "prompt token %d at index %d is outside the vocabulary of %d tokens", id, i, e.tok.Size())
			}
		}
		ids = req.PromptTokens
	default:
		ids, err = e.encode(ctx, req.Prompt, "prompt", encodeWithBOS)
	}
	if err != nil {
		return nil, phaseNone, err
	}
	if len(ids) == 0 {
		return nil, phaseNone, engine.Errorf("", promptParam(req), "the prompt is empty")
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, phase, nil
}

// encodeWithBOS tokenises prompts as llama.cpp's server does: BOS added per
// the vocabulary, special-token text parsed.
var encodeWithBOS = tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}

// chatRender is what a chat prompt is rendered from. The zero value of
// the flags is what a chat completion renders.
type chatRender struct {
	msgs   []engine.Message
	tools  []engine.Tool
	kwargs map[string]any
	effort string // the request's reasoning_effort
	// noSpecial leaves out the tokens the vocabulary adds (BOS);
	// noGeneration the template's cue for the assistant's reply.
	noSpecial, noGeneration bool
}

// renderChat renders a chat with the model's template and returns the
// prompt text with the options that encode it: special tokens parsed where
// the template wrote them, plain text where the conversation's strings
// spell them, and (unless noSpecial) the tokens the vocabulary adds (BOS)
// in place of the template's own leading BOS, as llama.cpp does. Errors
// are *engine.RequestError.
func (e *Engine) renderChat(c chatRender) (string, tokenizer.EncodeOptions, error) {
	addSpecial := !c.noSpecial
	opts := tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: true}
	if len(c.msgs) == 0 {
		return "", opts, engine.Errorf("", "messages", "messages must not be empty")
	}
	conv, err := e.conversation(c.msgs, c.tools, c.kwargs, c.effort)
	if err != nil {
		return "", opts, err
	}
	conv.AddGenerationPrompt = !c.noGeneration
	p, err := e.tmpl.RenderPrompt(conv, e.controlTexts)
	if err != nil {
		var re *chat.RenderError
		switch {
		case errors.As(err, &re) && re.Raised:
			// The template refused the conversation (roles that do not
			// alternate, say): the client's to fix.
			return "", opts, engine.Errorf("", "messages", "%s", re.Msg)
		case errors.As(err, &re) && re.TooLarge:
			// The template's output limit is the most bytes a prompt
			// that fits can have (maxPromptBytes).
			return "", opts, engine.Errorf(engine.CodeContextLengthExceeded, "messages",
				"This model's maximum context length is %d tokens. However, your messages render to a prompt of more than %d bytes, which is more than %d tokens (at most %d bytes per token).",
				e.ctxLen, maxPromptBytes(e.tok, e.ctxLen), e.ctxLen, e.tok.MaxTokenBytes())
		case errors.As(err, &re):
			return "", opts, engine.Errorf("", "messages", "the model's chat template failed on these messages: %v", err)
		case strings.HasPrefix(err.Error(), "variable "):
			return "", opts, engine.Errorf("invalid_value", "chat_template_kwargs", "chat_template_kwargs: %v", err)
		}
		return "", opts, engine.Errorf("invalid_value", "messages", "the messages cannot be rendered: %v", err)
	}
	if !p.Exact {
		// The template inspects the special-token text the messages hold
		// (it cuts or compares it), so where user text ends and template
		// text begins cannot be told: refuse rather than let user text
		// become control tokens.
		return "", opts, engine.Errorf("invalid_value", "messages",
			"the messages contain special-token text (such as %q) that this model's chat template treats in a way that cannot be kept apart from its own markers; remove it", firstSpecial(c.msgs, e.controlTexts))
	}
	text := p.Text
	cut := 0
	// Templates that write bos_token themselves would get a second BOS
	// from the tokenizer; llama.cpp drops the template's.
	if bos := e.tok.Text(e.tok.BOS()); addSpecial && bos != "" && e.tok.Vocab().AddBOS && strings.HasPrefix(text, bos) {
		cut = len(bos)
		text = text[cut:]
	}
	for _, sp := range p.UserSpecials {
		if sp.Start >= cut {
			opts.Plain = append(opts.Plain, tokenizer.Span{Start: sp.Start - cut, End: sp.End - cut})
		}
	}
	return text, opts, nil
}

// firstSpecial returns the first control-token text a message's content
// holds, for the error that refuses it.
func firstSpecial(msgs []engine.Message, specials []string) string {
	for _, m := range msgs {
		for _, s := range specials {
			if s != "" && (strings.Contains(m.Content, s) || strings.Contains(m.ReasoningContent, s)) {
				return s
			}
		}
	}
	return specials[0]
}

// conversation is the template's view of a chat request: the messages with
// their tool calls (arguments decoded from the JSON text OpenAI sends),
// tool results and earlier reasoning; the tools as OpenAI's tool objects;
// the kwargs as further variables, after today's date as date_string
// ("04 Dec 2026") and datetime ("Dec 04 2026"). Null content (an
// assistant turn that only calls tools) is "", as llama.cpp's server gives
// it to every template (GLM's would print None as "None"). All of it is
// adapted to what the template can show (chat.Template.Adapt: a system
// message folded into the first user turn of a template without the
// system role, arguments as JSON text for a template that prints them as
// text, ...). The request's reasoning effort, if any, is reasoning_effort
// (over the kwargs' own, as llama.cpp's server sets it), except that
// "none" and "minimal" are enable_thinking false unless the kwargs set
// it, as the Responses API's reasoning.effort is. A model that reasons gets
// enable_thinking true unless the client set it, as llama.cpp's server
// passes it (templates that test it for false, like Qwen 3's, render the
// same; those that think only when it is true, like llama.cpp's copies of
// QwQ's and DeepSeek-R1's, then think by default as the models do).
func (e *Engine) conversation(msgs []engine.Message, tools []engine.Tool, kwargs map[string]any, effort string) (chat.Conversation, error) {
	// Tools and documents the request does not have are undefined, not
	// None, as llama.cpp's server leaves them.
	conv := chat.Conversation{Messages: make([]chat.Message, len(msgs)), AddGenerationPrompt: true, AbsentUndefined: true}
	for i, m := range msgs {
		cm := chat.Message{
			Role: string(m.Role), Content: m.Content, Name: m.Name,
			ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID,
		}
		if m.ToolCalls != nil {
			cm.ToolCalls = make([]chat.ToolCall, len(m.ToolCalls))
		}
		for j, tc := range m.ToolCalls {
			// The text as sent (Adapt may pass it on as text), once it is
			// known to hold a JSON object.
			args := json.RawMessage(tc.Arguments)
			if trimmed := strings.TrimSpace(tc.Arguments); trimmed == "" {
				args = nil
			} else if !json.Valid(args) || trimmed[0] != '{' {
				return conv, engine.Errorf("invalid_value", fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j),
					"the arguments of tool call %q are not a JSON object: %.80q", tc.ID, tc.Arguments)
			}
			cm.ToolCalls[j] = chat.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: args}
		}
		conv.Messages[i] = cm
	}
	if len(tools) > 0 {
		js, err := toolsJSON(tools)
		if err != nil {
			return conv, err
		}
		conv.Tools = js
	}
	// Today's date, as llama.cpp's server gives every template (Llama 3.x
	// print date_string, else a fixed "26 Jul 2024"); the kwargs may set
	// their own.
	now := e.now()
	conv.Vars = map[string]any{"date_string": now.Format("02 Jan 2006"), "datetime": now.Format("Jan 02 2006")}
	for k, v := range kwargs {
		conv.Vars[k] = v
	}
	switch effort {
	case "":
	case "none", "minimal":
		if _, set := conv.Vars["enable_thinking"]; !set {
			conv.Vars["enable_thinking"] = false
		}
	default:
		conv.Vars["reasoning_effort"] = effort
	}
	if e.toolFormat == toolcall.Firefunction {
		// Firefunction's template prints the tools from a "functions"
		// string, which it needs even without tools, as llama.cpp's
		// server passes it (the tools' JSON indented by 2, or "").
		functions := ""
		if conv.Tools != nil {
			var b bytes.Buffer
			if err := json.Indent(&b, conv.Tools, "", "  "); err == nil {
				functions = b.String()
			}
		}
		if _, set := conv.Vars["functions"]; !set {
			conv.Vars["functions"] = functions
		}
	}
	if _, set := conv.Vars["enable_thinking"]; !set && e.think.reasons() {
		conv.Vars["enable_thinking"] = true
	}
	return e.tmpl.Adapt(conv), nil
}

// toolsJSON writes tools as the JSON array templates iterate:
// {"type": "function", "function": {"name", "description", "parameters"}}
// per tool, the parameters schema as the client wrote it (key order kept),
// description and parameters left out when the client sent none.
func toolsJSON(tools []engine.Tool) (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, t := range tools {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		b.WriteString(`{"type":"function","function":{"name":`)
		b.Write(name)
		if t.Description != "" {
			desc, _ := json.Marshal(t.Description)
			b.WriteString(`,"description":`)
			b.Write(desc)
		}
		if params := bytes.TrimSpace(t.Parameters); len(params) > 0 {
			if !json.Valid(params) {
				return nil, engine.Errorf("invalid_value", fmt.Sprintf("tools[%d].function.parameters", i), "the parameters of tool %q are not valid JSON", t.Name)
			}
			b.WriteString(`,"parameters":`)
			b.Write(params)
		}
		b.WriteString("}}")
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// encode tokenises text with the context as its limit: a prompt must
// leave room for one generated token, so it may have at most the context
// length less one tokens. The tokenizer refuses a text whose length in
// bytes already proves it longer before merging anything, and otherwise
// stops as soon as it has produced too many tokens, so an oversized prompt
// costs little more than a pass over the bytes it needed to read.
func (e *Engine) encode(ctx context.Context, text, param string, opts tokenizer.EncodeOptions) ([]int, error) {
	opts.MaxTokens = e.ctxLen - 1
	ids, err := e.tok.EncodeContext(ctx, text, opts)
	if tooLong, ok := errors.AsType[*tokenizer.TooLongError](err); ok {
		return nil, engine.Errorf(engine.CodeContextLengthExceeded, param,
			"This model's maximum context length is %d tokens. However, your prompt is at least %d tokens.",
			e.ctxLen, tooLong.Tokens)
	}
	return ids, err
}

// usablePrediction cuts a predicted output to the bytes that can matter:
// drafts never go past maxTokens, and maxTokens tokens cover at most
// MaxTokenBytes each, so what lies beyond is never proposed (the tokens
// at the cut may merge differently; they are past maxTokens). The cut is
// at a character boundary.
func (e *Engine) usablePrediction(text string, maxTokens int) string {
	limit := maxTokens * max(e.tok.MaxTokenBytes(), 1)
	if maxTokens <= 0 || limit <= 0 || len(text) <= limit {
		return text
	}
	for limit > 0 && !utf8.RuneStart(text[limit]) {
		limit--
	}
	return text[:limit]
}
