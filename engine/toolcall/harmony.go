package toolcall

import (
	"bytes"
	"strings"
)

// Harmony is gpt-oss's output format (OpenAI's "harmony"). The output is a
// sequence of messages, each a header and a body:
//
//	<|channel|>analysis<|message|>…reasoning…<|end|>
//	<|start|>assistant<|channel|>commentary<|message|>…a preamble…<|end|>
//	<|start|>assistant<|channel|>final<|message|>…the answer…
//	<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}
//
// The generation prompt ends with <|start|>assistant, so the first header
// starts at once; later ones after <|start|> and a role. A body ends at
// <|end|> (or at <|start|>, should the model skip <|end|>); the final answer
// and a call end the generation with <|return|> and <|call|>, which are
// end-of-generation tokens and never reach the parser. The recipient
// (to=functions.NAME) may also stand before <|channel|>, as the template
// writes earlier calls.
//
// Bodies go out by the header, as llama.cpp's gpt-oss parser reads them:
// the analysis channel is reasoning (Delta.Reasoning), a message to a
// declared function is a call whose body streams as its arguments, and
// every other body (final, commentary without recipient, a recipient that
// is no declared function, an unknown channel) is content. Headers and
// markers go to neither. Text at the start of a message that cannot begin
// a header (a model that ignores the format, an output forced to plain
// JSON) is content up to the next <|end|>. One generation holds at most one
// call (<|call|> ends it); the parser takes any number.
const (
	harmonyStart     = "<|start|>"
	harmonyChannel   = "<|channel|>"
	harmonyMessage   = "<|message|>"
	harmonyEnd       = "<|end|>"
	harmonyConstrain = "<|constrain|>"
	harmonyCall      = "<|call|>"
	harmonyReturn    = "<|return|>"
	// harmonyMaxHeader bounds a header: longer text without <|message|>
	// is no header but content.
	harmonyMaxHeader = 1024
)

// Stream says where the text a parser was fed last belongs: to no stream
// (a header or a marker of the Harmony format, or nothing yet), to the
// reasoning, or to the answer (content and calls). Parsers of the other
// formats are always in StreamAnswer.
type Stream uint8

const (
	StreamNone Stream = iota
	StreamReasoning
	StreamAnswer
)

// harmonyBody is what the body of the current message is.
type harmonyBody uint8

const (
	bodyContent harmonyBody = iota
	bodyReasoning
	bodyCall
)

// harmonyState is a Harmony parser's position: in a header (inBody false),
// or in a body of the given kind.
type harmonyState struct {
	inBody   bool
	body     harmonyBody
	call     int  // index of the call whose arguments the body is
	argsSent bool // some of its arguments were sent
	// A call's arguments are a JSON value, read as such so that a marker's
	// text inside a string does not end them: argsAt is where the value
	// starts (0: not yet seen), argsDone that it is complete (the rest of
	// the body is dropped), raw that it broke, after which the body up to
	// the next marker is sent as it is.
	argsAt   int
	argsDone bool
	raw      bool
}

// Stream reports which stream the text fed so far ends in (see Stream).
func (p *Parser) Stream() Stream {
	if p.format != Harmony {
		return StreamAnswer
	}
	switch {
	case !p.harmony.inBody:
		return StreamNone
	case p.harmony.body == bodyReasoning:
		return StreamReasoning
	}
	return StreamAnswer
}

func (p *Parser) reasoning(s []byte) {
	if len(s) == 0 {
		return
	}
	if n := len(p.out); n > 0 && p.out[n-1].Reasoning != "" {
		p.out[n-1].Reasoning += string(s)
		return
	}
	p.out = append(p.out, Delta{Reasoning: string(s)})
}

// advanceHarmony parses what text[base:] decides; final ends the output.
func (p *Parser) advanceHarmony(final bool) {
	h := &p.harmony
	for {
		s := p.text[p.base:]
		if !h.inBody {
			if !p.harmonyHeader(s, final) {
				return
			}
			continue
		}
		if h.body == bodyCall && !h.raw {
			if !p.harmonyArgs(final) {
				return
			}
			continue
		}
		end, next := harmonyBodyEnd(s)
		if end < 0 {
			keep := len(s)
			if !final {
				keep -= heldMarkerPrefix(s, harmonyEnd, harmonyStart)
			}
			p.harmonyText(s[:keep])
			p.base += keep
			if final {
				p.endBody()
			}
			return
		}
		p.harmonyText(s[:end])
		p.base += next
		p.endBody()
	}
}

// harmonyHeader reads the header at the start of s. It reports whether it
// moved on (to a body, or past a header that was no header).
func (p *Parser) harmonyHeader(s []byte, final bool) bool {
	h := &p.harmony
	msg := bytes.Index(s, []byte(harmonyMessage))
	end := bytes.Index(s, []byte(harmonyEnd))
	if !harmonyHeaderPrefix(s) || (msg < 0 && end < 0 && len(s) > harmonyMaxHeader) {
		// No header: the text is content, to the end of the message.
		*h = harmonyState{inBody: true, body: bodyContent}
		return true
	}
	if end >= 0 && (msg < 0 || end < msg) {
		// A message without body: nothing of it is output.
		p.base += end + len(harmonyEnd)
		return true
	}
	if msg < 0 {
		if final {
			p.base = len(p.text) // a header cut short says nothing
		}
		return false
	}
	channel, recipient := parseHarmonyHeader(string(s[:msg]))
	p.base += msg + len(harmonyMessage)
	*h = harmonyState{inBody: true, body: bodyContent}
	name, isFunction := strings.CutPrefix(recipient, "functions.")
	switch {
	case isFunction && name != "" && !p.opts.NoCalls && p.allowed(name):
		h.body, h.call = bodyCall, p.next
		p.next++
		p.call(CallDelta{Index: h.call, ID: p.newID(), Name: name})
	case (recipient == "" || recipient == "assistant") && channel == "analysis":
		h.body = bodyReasoning
	}
	return true
}

// harmonyArgs reads a call's arguments as a JSON value and reports
// whether it moved on: to the end of the message, or to raw text.
func (p *Parser) harmonyArgs(final bool) bool {
	h := &p.harmony
	if h.argsAt == 0 {
		k := skipWS(p.text, p.base)
		p.base = k
		if k == len(p.text) {
			if final {
				p.endBody()
			}
			return false
		}
		h.argsAt = k
	}
	if h.argsDone {
		// Whatever follows the value in its message is dropped.
		if _, next := harmonyBodyEnd(p.text[p.base:]); next >= 0 {
			p.base += next
			p.endBody()
			return true
		}
		if final {
			p.base = len(p.text)
			p.endBody()
		}
		return false
	}
	end, st := scanValue(p.text, h.argsAt)
	p.harmonyText(p.text[p.base:end])
	p.base = end
	switch st {
	case scanOK:
		h.argsDone = true
		return true
	case scanBad:
		h.raw = true
		return true
	}
	if final {
		p.endBody()
	}
	return false
}

// harmonyText sends body text by the current body's kind. A call's
// arguments start at their first non-space byte.
func (p *Parser) harmonyText(s []byte) {
	h := &p.harmony
	switch h.body {
	case bodyReasoning:
		p.reasoning(s)
	case bodyCall:
		if !h.argsSent {
			s = bytes.TrimLeft(s, " \t\r\n")
		}
		if len(s) > 0 {
			h.argsSent = true
			p.call(CallDelta{Index: h.call, Arguments: string(s)})
		}
	default:
		p.content(s)
	}
}

// endBody ends the current message: a call without arguments gets "{}".
func (p *Parser) endBody() {
	h := &p.harmony
	if h.inBody && h.body == bodyCall && !h.argsSent {
		p.call(CallDelta{Index: h.call, Arguments: "{}"})
	}
	*h = harmonyState{}
}

// harmonyBodyEnd finds the end of a body in s: where its text ends and
// where the next message starts (after <|end|>, or at <|start|>); -1 when
// s holds no end.
func harmonyBodyEnd(s []byte) (end, next int) {
	e := bytes.Index(s, []byte(harmonyEnd))
	st := bytes.Index(s, []byte(harmonyStart))
	switch {
	case st >= 0 && (e < 0 || st < e):
		return st, st
	case e >= 0:
		return e, e + len(harmonyEnd)
	}
	return -1, -1
}

// heldMarkerPrefix returns the length of the longest suffix of s that is
// a proper prefix of one of markers: text that may still become a marker.
func heldMarkerPrefix(s []byte, markers ...string) int {
	held := 0
	for _, m := range markers {
		for n := min(len(m)-1, len(s)); n > held; n-- {
			if bytes.HasSuffix(s, []byte(m[:n])) {
				held = n
				break
			}
		}
	}
	return held
}

// harmonyHeaderPrefix reports whether s can be (the start of) a header:
// after optional whitespace, <|start|>, <|channel|> or a recipient.
func harmonyHeaderPrefix(s []byte) bool {
	s = bytes.TrimLeft(s, " \t\r\n")
	for _, open := range []string{harmonyStart, harmonyChannel, "to="} {
		if bytes.HasPrefix(s, []byte(open)) || bytes.HasPrefix([]byte(open), s) {
			return true
		}
	}
	return false
}

// parseHarmonyHeader reads a header (the text before <|message|>): the
// last channel it names and its recipient (to=...), each up to a space or
// a marker. The role after <|start|> is skipped.
func parseHarmonyHeader(h string) (channel, recipient string) {
	h = strings.TrimLeft(h, " \t\r\n")
	if rest, ok := strings.CutPrefix(h, harmonyStart); ok {
		// The role: "assistant", then the rest of the header.
		i := strings.IndexAny(rest, " <")
		if i < 0 {
			i = len(rest)
		}
		h = rest[i:]
	}
	word := func(s string) string {
		if i := strings.IndexAny(s, " \t\r\n<"); i >= 0 {
			return s[:i]
		}
		return s
	}
	if i := strings.LastIndex(h, harmonyChannel); i >= 0 {
		channel = word(h[i+len(harmonyChannel):])
	}
	for i := 0; i < len(h); {
		j := strings.Index(h[i:], "to=")
		if j < 0 {
			break
		}
		j += i
		if j == 0 || h[j-1] == ' ' || h[j-1] == '>' {
			recipient = word(h[j+len("to="):])
		}
		i = j + len("to=")
	}
	return channel, recipient
}

// ParseReasoning splits a whole output as Parse does and also returns its
// reasoning (Harmony's analysis channel; empty for the other formats): the
// non-streaming result, equal to AssembleReasoning and Assemble of the
// deltas of any streaming of the same text.
func ParseReasoning(f Format, text string, opts Options) (reasoning, content string, calls []Call) {
	p := NewParser(f, opts)
	all := append([]Delta(nil), p.Feed(text)...)
	all = append(all, p.Flush()...)
	content, calls = Assemble(all)
	return AssembleReasoning(all), content, calls
}

// AssembleReasoning joins the reasoning of deltas.
func AssembleReasoning(deltas []Delta) string {
	var sb strings.Builder
	for _, d := range deltas {
		sb.WriteString(d.Reasoning)
	}
	return sb.String()
}
