package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Message is one chat message as a template sees it: a dict with "role"
// and "content", then "reasoning_content", "thinking", "name",
// "tool_calls" and "tool_call_id" when they are set, in that order.
type Message struct {
	Role    string
	Content string
	// NullContent makes content None instead of Content: OpenAI's
	// "content": null on an assistant turn that only calls tools. Many
	// templates cannot print None (Qwen 3's raises a TypeError); callers
	// that want those to render pass "" instead, as llama.cpp and vLLM do.
	NullContent bool
	// ContentParts, when not nil, is content instead of Content: a JSON
	// value, usually an array of parts ([{"type": "text", "text": "..."}])
	// for templates that iterate them.
	ContentParts json.RawMessage
	// ReasoningContent is the reasoning of an earlier assistant turn, which
	// thinking templates (Qwen 3) put back between <think> tags.
	ReasoningContent string
	// Thinking is the same for templates that read it under that name
	// (gpt-oss's; Adapt sets it).
	Thinking  string
	Name      string
	ToolCalls []ToolCall
	// ToolCallID is the id of the call a "tool" message answers.
	ToolCallID string
}

// ToolCall is a function call of an assistant turn. It becomes the dict
// {"id": ID, "type": Type, "function": {"name": Name, "arguments": ...}}
// ("id" only when set).
type ToolCall struct {
	ID   string
	Type string // "" means "function"
	Name string
	// Arguments is a JSON object: templates print it with tojson or iterate
	// its items. (The OpenAI API sends a JSON string; decode it first.)
	// Empty means {}. It may also be a JSON string, which templates then
	// see as a string: the arguments' JSON text, for templates that print
	// them as they are (see Template.Adapt).
	Arguments json.RawMessage
}

// Conversation is everything a template renders: the variables Hugging
// Face's apply_chat_template passes.
type Conversation struct {
	Messages []Message
	// Tools is a JSON array of tool definitions ({"type": "function",
	// "function": {...}}); nil makes tools None.
	Tools json.RawMessage
	// Documents is a JSON array for retrieval templates; nil makes
	// documents None.
	Documents json.RawMessage
	// AbsentUndefined leaves tools and documents undefined when they are
	// nil, as llama.cpp's server does, instead of None, as Hugging Face's
	// apply_chat_template does: a template that loops over tools without
	// testing them first (Hermes 2 Pro's tool_use variant) then renders a
	// chat without tools instead of failing.
	AbsentUndefined     bool
	AddGenerationPrompt bool
	// Vars are further top-level variables: a request's
	// chat_template_kwargs (enable_thinking, reasoning_effort, ...) or
	// what a template reads (date_string, builtin_tools). A value may be a
	// string, bool, any Go integer or float, nil, []any, map[string]any
	// (keys in sorted order) or json.RawMessage (key order kept). Vars may
	// not set the names Conversation and Options already set (messages,
	// tools, documents, add_generation_prompt, bos_token, eos_token) nor
	// hide a builtin (raise_exception, strftime_now, range, namespace, dict).
	Vars map[string]any
}

// reservedVars are the variables Vars may not set.
var reservedVars = []string{"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"}

// RenderConversation renders c. Bad input (invalid JSON, a reserved or
// unsupported variable) is an error that is not a *RenderError; a template
// that rejects the conversation or fails gives a *RenderError, as Render.
func (t *Template) RenderConversation(c Conversation) (string, error) {
	vars, err := t.conversationVars(c)
	if err != nil {
		return "", err
	}
	return t.execute(vars)
}

// conversationVars builds the template variables of c.
func (t *Template) conversationVars(c Conversation) (map[string]value, error) {
	msgs := make([]value, len(c.Messages))
	for i, m := range c.Messages {
		d, err := messageDict(m)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs[i] = d
	}
	vars := map[string]value{
		"messages":              newList(msgs),
		"add_generation_prompt": c.AddGenerationPrompt,
		"bos_token":             t.opts.BOS,
		"eos_token":             t.opts.EOS,
	}
	if !c.AbsentUndefined {
		vars["tools"], vars["documents"] = nil, nil
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"tools", c.Tools}, {"documents", c.Documents}} {
		if f.raw == nil {
			continue
		}
		v, err := decodeJSON(f.raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		vars[f.name] = v
	}
	names := make([]string, 0, len(c.Vars))
	for name := range c.Vars {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if slices.Contains(reservedVars, name) {
			return nil, fmt.Errorf("variable %q is set by the conversation itself", name)
		}
		if _, builtin := globals[name]; builtin {
			return nil, fmt.Errorf("variable %q would hide a template builtin", name)
		}
		v, err := fromGo(c.Vars[name], 0)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", name, err)
		}
		vars[name] = v
	}
	return vars, nil
}

// messageDict is the dict a template sees for m.
func messageDict(m Message) (*dict, error) {
	d := newDict()
	_ = d.set("role", m.Role)
	var content value = m.Content
	switch {
	case m.ContentParts != nil:
		v, err := decodeJSON(m.ContentParts)
		if err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		content = v
	case m.NullContent:
		content = nil
	}
	if err := d.set("content", content); err != nil {
		return nil, err
	}
	if m.ReasoningContent != "" {
		_ = d.set("reasoning_content", m.ReasoningContent)
	}
	if m.Thinking != "" {
		_ = d.set("thinking", m.Thinking)
	}
	if m.Name != "" {
		_ = d.set("name", m.Name)
	}
	if m.ToolCalls != nil {
		calls := make([]value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			call, err := toolCallDict(tc)
			if err != nil {
				return nil, fmt.Errorf("tool_calls[%d]: %w", i, err)
			}
			calls[i] = call
		}
		_ = d.set("tool_calls", newList(calls))
	}
	if m.ToolCallID != "" {
		_ = d.set("tool_call_id", m.ToolCallID)
	}
	return d, nil
}

func toolCallDict(tc ToolCall) (*dict, error) {
	var args value = newDict()
	if len(bytes.TrimSpace(tc.Arguments)) > 0 {
		v, err := decodeJSON(tc.Arguments)
		if err != nil {
			return nil, fmt.Errorf("arguments: %w", err)
		}
		switch v.(type) {
		case *dict, string:
		default:
			return nil, errors.New("arguments: not a JSON object or string")
		}
		args = v
	}
	fn := newDict()
	_ = fn.set("name", tc.Name)
	_ = fn.set("arguments", args)
	call := newDict()
	if tc.ID != "" {
		_ = call.set("id", tc.ID)
	}
	typ := tc.Type
	if typ == "" {
		typ = "function"
	}
	_ = call.set("type", typ)
	_ = call.set("function", fn)
	return call, nil
}

// decodeJSON decodes one JSON value into template values the way Python's
// json.loads does: objects keep their key order (a repeated key keeps its
// first place and takes the last value), integers stay ints (floats where
// they do not fit int64), and nesting is bounded by maxValueDepth.
func decodeJSON(data []byte) (value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("invalid JSON: more than one value")
	}
	return v, nil
}

func readJSON(dec *json.Decoder, depth int) (value, error) {
	if depth >= maxValueDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d", maxValueDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	switch x := tok.(type) {
	case json.Delim:
		if x == '[' {
			var items []value
			for dec.More() {
				v, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			return newList(items), nil
		}
		d := newDict()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			v, err := readJSON(dec, depth+1)
			if err != nil {
				return nil, err
			}
			if err := d.set(k.(string), v); err != nil {
				return nil, err
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil, fmt.Errorf("invalid JSON: %w", err)
		}
		return d, nil
	case json.Number:
		if !strings.ContainsAny(x.String(), ".eE") {
			if i, err := x.Int64(); err == nil {
				return i, nil
			}
		}
		f, err := x.Float64()
		if err != nil && !math.IsInf(f, 0) {
			return nil, fmt.Errorf("invalid JSON number %s", x)
		}
		return f, nil
	case string, bool, nil:
		return x, nil
	}
	return nil, fmt.Errorf("invalid JSON token %v", tok)
}

// fromGo converts a Vars value to a template value.
func fromGo(v any, depth int) (value, error) {
	if depth >= maxValueDepth {
		return nil, fmt.Errorf("value nested deeper than %d", maxValueDepth)
	}
	switch x := v.(type) {
	case nil, string, bool, int64, float64:
		return x, nil
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint:
		if uint64(x) > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d too large", x)
		}
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d too large", x)
		}
		return int64(x), nil
	case float32:
		return float64(x), nil
	case json.RawMessage:
		return decodeJSON(x)
	case json.Number:
		return decodeJSON([]byte(x))
	case []any:
		items := make([]value, len(x))
		for i, it := range x {
			cv, err := fromGo(it, depth+1)
			if err != nil {
				return nil, err
			}
			items[i] = cv
		}
		return newList(items), nil
	case []string:
		items := make([]value, len(x))
		for i, it := range x {
			items[i] = it
		}
		return newList(items), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := newDict()
		for _, k := range keys {
			cv, err := fromGo(x[k], depth+1)
			if err != nil {
				return nil, err
			}
			if err := d.set(k, cv); err != nil {
				return nil, err
			}
		}
		return d, nil
	}
	return nil, fmt.Errorf("unsupported type %T", v)
}
