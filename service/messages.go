package service

import (
	"encoding/json"
	"fmt"

	"rill/engine"
)

// chatMessages converts the messages of a chat request: roles, text
// content, names, the tool calls of assistant turns (content may then be
// null), the tool_call_id of tool results, and the reasoning_content of
// earlier assistant turns, which thinking templates render back.
func chatMessages(msgs []chatMessage) ([]engine.Message, *apiError) {
	out := make([]engine.Message, len(msgs))
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		role := engine.Role(m.Role)
		if m.Role == "function" {
			role = engine.RoleTool // OpenAI's deprecated name for a tool result
		}
		if isNull(m.Content) && role != engine.RoleAssistant {
			return nil, invalid(param+".content", "missing_required_parameter",
				"Missing required parameter: '%s.content'.", param)
		}
		if m.Role == "tool" && m.ToolCallID == "" {
			// A tool result answers a call; which one is not optional
			// (OpenAI refuses it too). The deprecated function role names
			// its function instead.
			return nil, invalid(param+".tool_call_id", "missing_required_parameter",
				"Missing required parameter: '%s.tool_call_id'.", param)
		}
		// Parts joined by a newline, as llama.cpp's server and vLLM join
		// them for templates that take content as a string.
		text, e := textContent(m.Content, param+".content", "\n")
		if e != nil {
			return nil, e
		}
		em := engine.Message{Role: role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID,
			NullContent: role == engine.RoleAssistant && isNull(m.Content)}
		if len(m.ToolCalls) > 0 || m.ReasoningContent != nil {
			if role != engine.RoleAssistant {
				field := "tool_calls"
				if len(m.ToolCalls) == 0 {
					field = "reasoning_content"
				}
				return nil, invalid(param+"."+field, "invalid_value",
					"Invalid value for '%s.%s': only assistant messages carry %s.", param, field, field)
			}
		}
		if m.ReasoningContent != nil {
			em.ReasoningContent = *m.ReasoningContent
		}
		if len(m.ToolCalls) > 0 {
			em.ToolCalls = make([]engine.ToolCall, len(m.ToolCalls))
		}
		for j, tc := range m.ToolCalls {
			if tc.Type != "" && tc.Type != "function" {
				return nil, unsupported(fmt.Sprintf("%s.tool_calls[%d].type", param, j), fmt.Sprintf("A tool call of type '%s'", tc.Type))
			}
			em.ToolCalls[j] = engine.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		}
		out[i] = em
	}
	return out, nil
}

// templateKwargs converts chat_template_kwargs: each value stays the JSON
// the client sent (json.RawMessage), so that integers stay integers and
// objects keep their key order when a template prints them.
func templateKwargs(raw map[string]json.RawMessage) map[string]any {
	if len(raw) == 0 {
		return nil
	}
	out := make(map[string]any, len(raw))
	for k, v := range raw {
		out[k] = v
	}
	return out
}
