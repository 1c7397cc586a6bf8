package service

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"rill/engine"
)

// The input of a Responses request: a string, or a list of items (messages,
// reasoning, function calls and their outputs, references to stored items), read into
// the engine's chat messages as chat would have them for the same
// conversation, so that a turn costs the same prompt tokens on both APIs.

// responseInputItem is one element of an input list. Content and Output
// stay raw: a string or a list of parts (a reasoning item's content is its
// reasoning_text parts).
type responseInputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	ID      string          `json:"id"`
	// function_call, custom_tool_call and their output items.
	CallID    *string         `json:"call_id"`
	Name      *string         `json:"name"`
	Namespace string          `json:"namespace"`
	Arguments *string         `json:"arguments"` // a function call's
	Input     *string         `json:"input"`     // a custom tool call's
	Output    json.RawMessage `json:"output"`
	// EncryptedContent is a reasoning item's (responses_seal.go).
	EncryptedContent *string `json:"encrypted_content"`
}

// responseInput reads input into messages. A string is one user message; a
// list holds:
//
//   - messages ({"role", "content"}, type "message" or none) with text parts;
//   - function_call items ({"call_id", "name", "arguments"}): a call the
//     assistant made. Calls that follow an assistant message (or other
//     calls) join it, as chat's one assistant message with content and
//     tool_calls; the first of a turn starts an assistant message with
//     null content;
//     A call of a namespace's function carries the namespace, and is
//     the call of the function the model saw (modelToolName);
//   - custom_tool_call items ({"call_id", "name", "input"}): a call of a
//     custom tool, as the call of its function ({"input": ...});
//   - function_call_output and custom_tool_call_output items ({"call_id",
//     "output"}): a tool message answering a call made earlier in the
//     conversation (history, the messages of the stored conversation it
//     continues, or this input);
//   - reasoning items ({"content": [{"type": "reasoning_text", "text"}]},
//     or rill's encrypted_content instead): the reasoning
//     (ReasoningContent, as chat's reasoning_content) of the assistant
//     message or function call that follows; consecutive ones add up.
//     Reasoning that no assistant item follows joins the assistant
//     message before it, or is an assistant message of its own (a response
//     cut while it reasoned, sent back), as the reply of the stored
//     response it came from has it. encrypted_content that does not open
//     adds nothing, and a warning to warn;
//   - item_references to output items of stored responses, read as the
//     items they name.
//
// Other item types and content parts other than text are refused.
func responseInput(ctx context.Context, raw json.RawMessage, conv conversations, history []engine.Message, warn *warnings) ([]engine.Message, *apiError) {
	switch firstByte(raw) {
	case 0, 'n':
		return nil, nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid("input", "invalid_type", "Invalid type for 'input': expected a string.")
		}
		return []engine.Message{{Role: engine.RoleUser, Content: s}}, nil
	}
	var items []responseInputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("input", "invalid_type", "Invalid type for 'input': expected a string or an array of input items.")
	}
	calls := map[string]bool{} // call ids made so far in the conversation
	for _, m := range history {
		for _, c := range m.ToolCalls {
			calls[c.ID] = true
		}
	}
	msgs := make([]engine.Message, 0, len(items))
	// reasoning waits for the assistant item it belongs to.
	var reasoning string
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		var m engine.Message
		switch it.Type {
		case "", "message":
			var e *apiError
			if m, e = messageItem(&it, param); e != nil {
				return nil, e
			}
		case "function_call", "custom_tool_call":
			call, e := callItem(&it, param)
			if e != nil {
				return nil, e
			}
			m = engine.Message{Role: engine.RoleAssistant, NullContent: true, ToolCalls: []engine.ToolCall{call}}
		case "function_call_output", "custom_tool_call_output":
			var e *apiError
			if m, e = functionOutputItem(&it, param, calls); e != nil {
				return nil, e
			}
		case "reasoning":
			text, e := reasoningItem(&it, param, warn)
			if e != nil {
				return nil, e
			}
			m = engine.Message{Role: engine.RoleAssistant, ReasoningContent: text}
		case "item_reference":
			var err error
			if m, err = conv.item(ctx, it.ID); err != nil && !isNotFound(err) {
				return nil, storeFailed()
			} else if err != nil {
				return nil, invalid(param+".id", "item_not_found", "Item with id '%s' not found.", clip(it.ID, maxEchoBytes))
			}
		default:
			return nil, invalid(param+".type", "unsupported_parameter",
				"Input items of type '%s' are not supported by this server yet.", clip(it.Type, maxEchoBytes))
		}
		if it.Type == "reasoning" || isReasoningOnly(m) {
			reasoning += m.ReasoningContent
			continue
		}
		if m.Role == engine.RoleAssistant {
			m.ReasoningContent = reasoning + m.ReasoningContent
		} else {
			msgs = appendReasoning(msgs, reasoning)
		}
		reasoning = ""
		for _, c := range m.ToolCalls {
			calls[c.ID] = true
		}
		msgs = appendInputMessage(msgs, m)
	}
	return appendReasoning(msgs, reasoning), nil
}

// appendReasoning adds reasoning that no assistant item followed to the
// assistant message that ends msgs, or appends it as an assistant message
// of its own; none adds nothing.
func appendReasoning(msgs []engine.Message, reasoning string) []engine.Message {
	switch n := len(msgs); {
	case reasoning == "":
		return msgs
	case n > 0 && msgs[n-1].Role == engine.RoleAssistant:
		msgs[n-1].ReasoningContent += reasoning
		return msgs
	}
	return append(msgs, engine.Message{Role: engine.RoleAssistant, ReasoningContent: reasoning})
}

// appendInputMessage appends m to msgs, joining an assistant message that
// only calls tools to the assistant message before it: its content stays,
// the calls and the reasoning add up. Neither message's calls are modified
// in place (they may be a stored response's).
func appendInputMessage(msgs []engine.Message, m engine.Message) []engine.Message {
	n := len(msgs)
	onlyCalls := m.Role == engine.RoleAssistant && m.Content == "" && len(m.ToolCalls) > 0
	if !onlyCalls || n == 0 || msgs[n-1].Role != engine.RoleAssistant {
		return append(msgs, m)
	}
	prev := &msgs[n-1]
	prev.ToolCalls = append(slices.Clip(prev.ToolCalls), m.ToolCalls...)
	prev.ReasoningContent += m.ReasoningContent
	return msgs
}

// messageItem reads a message item: a role and text content.
func messageItem(it *responseInputItem, param string) (engine.Message, *apiError) {
	if it.Role == "" {
		return engine.Message{}, invalid(param+".role", "missing_required_parameter", "Missing required parameter: '%s.role'.", param)
	}
	if isNull(it.Content) {
		return engine.Message{}, invalid(param+".content", "missing_required_parameter", "Missing required parameter: '%s.content'.", param)
	}
	text, e := responseContent(it.Content, param+".content")
	if e != nil {
		return engine.Message{}, e
	}
	return engine.Message{Role: engine.Role(it.Role), Content: text}, nil
}

// callItem reads a function_call item (call_id, name and arguments, JSON
// text as the model wrote it, are required) or a custom_tool_call item
// (call_id, name and input), either with the namespace of its tool.
func callItem(it *responseInputItem, param string) (engine.ToolCall, *apiError) {
	custom := it.Type == "custom_tool_call"
	payload, payloadName := it.Arguments, "arguments"
	if custom {
		payload, payloadName = it.Input, "input"
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"call_id", it.CallID}, {"name", it.Name}, {payloadName, payload}} {
		if f.v == nil {
			return engine.ToolCall{}, invalid(param+"."+f.name, "missing_required_parameter", "Missing required parameter: '%s.%s'.", param, f.name)
		}
	}
	if *it.CallID == "" {
		return engine.ToolCall{}, invalid(param+".call_id", "invalid_value", "Invalid '%s.call_id': empty string.", param)
	}
	if e := checkName(*it.Name, param); e != nil {
		return engine.ToolCall{}, e
	}
	if it.Namespace != "" && !functionName.MatchString(it.Namespace) {
		return engine.ToolCall{}, invalid(param+".namespace", "invalid_value",
			"Invalid '%s.namespace': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.", param)
	}
	args := *payload
	if custom {
		args = customArguments(*payload)
	}
	return engine.ToolCall{ID: *it.CallID, Name: modelToolName(it.Namespace, *it.Name), Arguments: args}, nil
}

// customArguments are the arguments of a custom tool's function for input.
func customArguments(input string) string {
	b := append([]byte(`{"input":`), appendString(nil, input)...)
	return string(append(b, '}'))
}

// functionOutputItem reads a function_call_output item: the tool message
// that answers call call_id, which must have been made before (calls).
func functionOutputItem(it *responseInputItem, param string, calls map[string]bool) (engine.Message, *apiError) {
	if it.CallID == nil {
		return engine.Message{}, invalid(param+".call_id", "missing_required_parameter", "Missing required parameter: '%s.call_id'.", param)
	}
	if isNull(it.Output) {
		return engine.Message{}, invalid(param+".output", "missing_required_parameter", "Missing required parameter: '%s.output'.", param)
	}
	if !calls[*it.CallID] {
		return engine.Message{}, invalid(param+".call_id", "invalid_value",
			"No tool call found for function call output with call_id '%s': a function_call item with that call_id must come before it (in the input, or in the conversation of previous_response_id).",
			clip(*it.CallID, maxEchoBytes))
	}
	text, e := responseContent(it.Output, param+".output")
	if e != nil {
		return engine.Message{}, e
	}
	return engine.Message{Role: engine.RoleTool, Content: text, ToolCallID: *it.CallID}, nil
}

// responseContent reads a message's content or a function call's output:
// a string, or text parts (input_text, output_text, refusal) concatenated.
func responseContent(raw json.RawMessage, param string) (string, *apiError) {
	if firstByte(raw) == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", invalid(param, "invalid_type", "Invalid type for '%s': expected a string.", param)
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param, "invalid_type", "Invalid type for '%s': expected a string or an array of content parts.", param)
	}
	var b []byte
	for j, part := range parts {
		switch part.Type {
		case "input_text", "output_text", "text":
			if part.Text == nil {
				return "", missingPartField(param, j, "text")
			}
			b = append(b, *part.Text...)
		case "refusal":
			if part.Refusal == nil {
				return "", missingPartField(param, j, "refusal")
			}
			b = append(b, *part.Refusal...)
		default:
			return "", invalid(fmt.Sprintf("%s[%d].type", param, j), "unsupported_parameter",
				"Content of type '%s' is not supported by this server yet.", clip(part.Type, maxEchoBytes))
		}
	}
	return string(b), nil
}
