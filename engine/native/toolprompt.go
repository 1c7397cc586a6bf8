package native

import (
	"encoding/json"
	"strings"

	"rill/engine"
)

// promptRequest returns req as the chat template should see it. For a model
// whose template has no tool syntax (toolcall.Generic) and a request that
// may call tools, that is req with:
//
//   - the generic format's instructions (the tools, and how to call them)
//     at the end of the first system message, or in a system message of
//     their own before the conversation when it has none;
//   - every earlier assistant turn that made tool calls written as the
//     generic reply it stands for, {"tool_calls": [{"name": ..., "arguments":
//     {...}}]} (after its content, if any), since such a template shows no
//     tool_calls; tool results stay "tool" messages.
//
// Everything else (templates with tool syntax, which render req.Tools and
// the calls themselves) gets req unchanged. req is never modified.
func promptRequest(req *engine.Request, k *constraint) *engine.Request {
	if k == nil || k.instructions == "" {
		return req
	}
	out := *req
	msgs := make([]engine.Message, 0, len(req.Messages)+1)
	msgs = append(msgs, engine.Message{Role: engine.RoleSystem, Content: k.instructions})
	for _, m := range req.Messages {
		if m.Role == engine.RoleAssistant && len(m.ToolCalls) > 0 {
			m.Content = joinNonEmpty(m.Content, genericCalls(m.ToolCalls))
			m.NullContent, m.ToolCalls = false, nil
		}
		msgs = append(msgs, m)
	}
	if len(msgs) > 1 && isSystem(msgs[1].Role) {
		// One system prompt: many templates allow no second one.
		sys := msgs[1]
		sys.Content = strings.TrimRight(sys.Content, "\n") + "\n\n" + k.instructions
		sys.NullContent = false
		msgs = msgs[1:]
		msgs[0] = sys
	}
	out.Messages = msgs
	return &out
}

func isSystem(r engine.Role) bool { return r == engine.RoleSystem || r == engine.RoleDeveloper }

func joinNonEmpty(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}

// genericCalls writes calls as the generic format's reply. Arguments that
// are not JSON (a client may send anything) are kept as a JSON string.
func genericCalls(calls []engine.ToolCall) string {
	type call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	reply := struct {
		ToolCalls []call `json:"tool_calls"`
	}{ToolCalls: make([]call, len(calls))}
	for i, c := range calls {
		args := json.RawMessage(c.Arguments)
		if strings.TrimSpace(c.Arguments) == "" {
			args = json.RawMessage("{}")
		} else if !json.Valid(args) {
			args, _ = json.Marshal(c.Arguments) // a string always marshals
		}
		reply.ToolCalls[i] = call{Name: c.Name, Arguments: args}
	}
	b, _ := json.Marshal(reply) // valid raw messages always marshal
	return string(b)
}
