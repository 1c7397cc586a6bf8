package native

import (
	"rill/engine"
	"rill/engine/toolcall"
)

// gpt-oss writes its output in OpenAI's harmony format (toolcall.Harmony):
// messages on channels, the analysis channel for its reasoning, final for
// the answer, commentary for preambles and calls to functions. For chat
// requests every choice reads its output with a Harmony parser, whatever
// the tools: the analysis streams as Event.Reasoning
// (delta.reasoning_content), final and commentary text as Event.Text, calls
// as Event.ToolCalls, and the headers and markers go to neither stream.
// <|call|> and <|return|> end the generation; a choice that made a call
// ends with finish_reason tool_calls.
//
// What counts as reasoning (Stats.ReasoningTokens): the tokens of the
// analysis messages, each from its first token (<|channel|> at the start of
// the output, <|start|> after an earlier message) through its <|end|>, or
// through the end-of-generation token should the model stop inside one; so
// completion_tokens − reasoning_tokens is exactly the tokens of the other
// messages (final, commentary, calls), their headers included. This is the
// rule reasoning.go states for <think> blocks: the block's markers count,
// and so do a message's header and its end. A header is counted once it is
// read to its <|message|>; one cut short by max_tokens counts as answer.

// harmonySplit is one choice's reading of its harmony output: the parser,
// the count of reasoning tokens and the call deltas not yet sent.
type harmonySplit struct {
	parser *toolcall.Parser
	tokens int // reasoning tokens
	// pending are tokens of the current message's header, not yet known
	// to be reasoning or answer.
	pending int
	calls   []engine.ToolCallDelta // to send with the next event
	begun   int                    // calls begun
}

// newHarmonySplit returns the split of a chat choice on a harmony model:
// calls to tools are read when the request declares some and its
// tool_choice is not "none" (k parses); otherwise a message to a function
// is content.
func newHarmonySplit(k *constraint) *harmonySplit {
	opts := toolcall.Options{NoCalls: true}
	if k != nil && k.parse {
		opts = toolcall.Options{Tools: k.tools}
	}
	return &harmonySplit{parser: toolcall.NewParser(toolcall.Harmony, opts)}
}

// feed reads the text one token adds (token false: text flushed without
// a new token, when a choice is cut) and, when final, ends the output. It
// adds reasoning and content to out and keeps the call deltas for the
// next event.
func (h *harmonySplit) feed(s string, token, final bool, out *output) {
	before := h.parser.Stream()
	h.take(h.parser.Feed(s), out)
	if final {
		h.take(h.parser.Flush(), out)
	}
	if !token {
		return
	}
	after := h.parser.Stream()
	h.pending++
	switch {
	case before == toolcall.StreamReasoning || after == toolcall.StreamReasoning:
		// An analysis message's header (read to its <|message|>), its
		// text, or its end.
		h.tokens += h.pending
		h.pending = 0
	case before == toolcall.StreamNone && after == toolcall.StreamNone:
		// Still in a header: its message decides.
	default:
		h.pending = 0
	}
}

func (h *harmonySplit) take(ds []toolcall.Delta, out *output) {
	for _, d := range ds {
		switch {
		case d.Call != nil:
			if d.Call.ID != "" {
				h.begun++
			} else if n := len(h.calls); n > 0 && h.calls[n-1].Index == d.Call.Index {
				h.calls[n-1].Arguments += d.Call.Arguments
				continue
			}
			h.calls = append(h.calls, engine.ToolCallDelta{Index: d.Call.Index, ID: d.Call.ID, Name: d.Call.Name, Arguments: d.Call.Arguments})
		case d.Reasoning != "":
			out.add(true, d.Reasoning)
		default:
			out.add(false, d.Content)
		}
	}
}

// takeCalls returns the call deltas to send and forgets them.
func (h *harmonySplit) takeCalls() []engine.ToolCallDelta {
	calls := h.calls
	h.calls = nil
	return calls
}

// reasoning reports whether text now goes to the reasoning stream.
func (h *harmonySplit) reasoning() bool {
	return h != nil && h.parser.Stream() == toolcall.StreamReasoning
}
