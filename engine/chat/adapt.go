package chat

import (
	"encoding/json"
	"strings"
)

// Adapt returns c reshaped for what the template can show (its Caps), as
// llama.cpp's server reshapes a conversation before it renders, so that
// nothing the client sent silently vanishes from the prompt:
//
//   - a developer message becomes a system message, except for templates
//     with gpt-oss's channels (<|channel|>), which have a developer role;
//   - for those, an assistant message's reasoning is also its "thinking",
//     the name gpt-oss's template reads, and a message with reasoning and
//     tool calls loses its content (the template refuses both, and shows
//     the one as the analysis before the call), as llama.cpp passes them;
//   - for a template without the system role, a system message is folded
//     into the message after it: the system text, "\n", then that
//     message's content (so Phi-3 sees it at the start of the first user
//     turn). llama.cpp folds only a leading system message and drops one
//     that is alone; Adapt folds every system message, and one with no
//     message after it becomes a user message;
//   - for a template that uses content only as a list of parts, each
//     string content becomes one text part;
//   - for a template that does not use tool-call arguments as an object,
//     the arguments are passed as the JSON text the client sent, which
//     such templates print as it is.
//
// c is not modified: the result has a Messages slice of its own.
func (t *Template) Adapt(c Conversation) Conversation {
	caps := t.caps
	developerIsSystem := !strings.Contains(t.src.text, "<|channel|>")
	typedOnly := caps.TypedContent && !caps.StringContent
	msgs := make([]Message, 0, len(c.Messages))
	for _, m := range c.Messages {
		if m.Role == "developer" && developerIsSystem {
			m.Role = "system"
		}
		if !developerIsSystem && m.ReasoningContent != "" {
			m.Thinking = m.ReasoningContent
			if len(m.ToolCalls) > 0 {
				m.Content, m.NullContent, m.ContentParts = "", false, nil
			}
		}
		if !caps.ObjectArguments && len(m.ToolCalls) > 0 {
			calls := make([]ToolCall, len(m.ToolCalls))
			for i, tc := range m.ToolCalls {
				text, _ := json.Marshal(string(tc.Arguments)) // a string always marshals
				tc.Arguments = text
				calls[i] = tc
			}
			m.ToolCalls = calls
		}
		msgs = append(msgs, m)
	}
	if !caps.SystemRole {
		msgs = foldSystem(msgs)
	}
	if typedOnly {
		for i, m := range msgs {
			if m.ContentParts == nil && !m.NullContent {
				parts, _ := json.Marshal([]map[string]string{{"type": "text", "text": m.Content}})
				msgs[i].ContentParts = parts
			}
		}
	}
	c.Messages = msgs
	return c
}

// foldSystem puts the text of each system message at the start of the
// message after it, and makes a system message with none after it a user
// message. It reuses msgs' array.
func foldSystem(msgs []Message) []Message {
	out := msgs[:0]
	var carry []string // system texts waiting for the next message
	for _, m := range msgs {
		if m.Role == "system" {
			carry = append(carry, m.Content)
			continue
		}
		if carry != nil {
			m.Content = strings.Join(append(carry, m.Content), "\n")
			m.NullContent = false
			carry = nil
		}
		out = append(out, m)
	}
	if carry != nil {
		out = append(out, Message{Role: "user", Content: strings.Join(carry, "\n")})
	}
	return out
}
