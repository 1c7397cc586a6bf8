package toolcall

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// Options tune a Parser. The zero value is usable.
type Options struct {
	// Tools are the names of the functions the request declares; a call to
	// another name is not a call (its text is content). Empty: any name.
	Tools []string
	// Parameters are the JSON Schemas of the tools' arguments, by name.
	// The formats that write each argument as XML text (QwenXML, GLM,
	// MiniMax, SeedOSS) read a value as a JSON string when its property's
	// schema says "string", and as JSON otherwise; a tool or property
	// missing here is read as a string. The JSON formats ignore it.
	Parameters map[string]json.RawMessage
	// NewID returns the id of each call; nil: random, "call_" and 24
	// alphanumerics, or 9 alphanumerics for the Mistral formats. An id the
	// model writes itself before the arguments (Mistral's [CALL_ID], an
	// "id" member) is kept.
	NewID func() string
	// NoCalls reads no calls at all (tool_choice "none", or no tools):
	// what looks like one is content. Only Harmony, whose parser also
	// splits reasoning from the answer, is parsed without tools.
	NoCalls bool
}

// Delta is one streaming event: a piece of content, of reasoning (only
// Harmony's analysis channel), or of a tool call, in the order they occur
// in the output. Exactly one of Content, Reasoning and Call is set.
type Delta struct {
	Content   string
	Reasoning string
	Call      *CallDelta
}

// CallDelta is a piece of tool call index, in the shape of OpenAI's
// streaming tool_calls: the first delta of a call carries its ID and Name
// (and maybe the first arguments); later ones carry further pieces of the
// Arguments JSON text, to be concatenated.
type CallDelta struct {
	Index     int
	ID, Name  string
	Arguments string
}

// Call is a complete tool call: Arguments is JSON text (possibly cut short
// when generation stopped inside it).
type Call struct {
	ID, Name, Arguments string
}

// Parser splits a model's output, fed as it is generated, into content and
// tool calls. It holds back only text that may still turn out to belong to a
// call (a possible marker, the beginning of a call before its name is
// known, whitespace before a marker) and decides everything from the text
// seen so far, so the deltas of any split of the same output concatenate to
// the same result, which Parse returns.
//
// Text that looks like a call but is not one (malformed JSON, an unknown
// function, no arguments in the Llama format) is content. Once a call's name
// and the start of its arguments are seen it is committed: its header is
// sent and its arguments stream; if its JSON breaks later, the call ends
// there and the rest is content.
//
// A Parser is used by one goroutine.
type Parser struct {
	format  Format
	opts    Options
	newID   func() string
	text    []byte
	base    int  // text[:base] is decided
	atStart bool // nothing but whitespace is decided yet: a bare call may start
	next    int  // index of the next call
	region  *region
	harmony harmonyState // Harmony only
	out     []Delta
	types   map[string]map[string]bool // tool -> property -> its value is a string (XML formats)
	// recipient: the output begins with a recipient whose marker the
	// prompt wrote (Functionary v3.2); cleared when that region opens.
	recipient bool
}

// region is an open call region: from start (its marker or '{'), scanned
// anew at each feed.
type region struct {
	start       int
	sent        []sentCall
	contentSent int // Generic {"content": ...}: body bytes decoded and sent
	content     bool
}

type sentCall struct {
	index    int
	argsSent int  // bytes of the arguments text sent
	whole    bool // the arguments were sent in one piece (a string, or "{}")
	rawSent  int  // synthesized arguments: the text sent of the open value
}

// NewParser returns a parser of output in format f.
func NewParser(f Format, opts Options) *Parser {
	p := &Parser{format: f, opts: opts, atStart: true, newID: opts.NewID}
	if spec := namedSpecs[f]; spec != nil && spec.recipients {
		p.recipient = true
	}
	if p.newID == nil {
		p.newID = f.defaultID()
	}
	return p
}

// Feed adds generated text and returns the deltas it decides. The returned
// slice is valid until the next call.
func (p *Parser) Feed(text string) []Delta {
	p.out = p.out[:0]
	p.text = append(p.text, text...)
	if p.format == Harmony {
		p.advanceHarmony(false)
		return p.out
	}
	p.advance(false)
	return p.out
}

// Flush ends the output and returns the last deltas: held-back text becomes
// content, a call cut short ends with the arguments seen so far.
func (p *Parser) Flush() []Delta {
	p.out = p.out[:0]
	if p.format == Harmony {
		p.advanceHarmony(true)
		return p.out
	}
	p.advance(true)
	return p.out
}

// Parse splits a whole output: the non-streaming result, equal to
// Assemble of the deltas of any streaming of the same text.
func Parse(f Format, text string, opts Options) (content string, calls []Call) {
	p := NewParser(f, opts)
	all := slices.Clone(p.Feed(text))
	all = append(all, p.Flush()...)
	return Assemble(all)
}

// Assemble joins deltas into content and complete calls.
func Assemble(deltas []Delta) (content string, calls []Call) {
	var sb strings.Builder
	for _, d := range deltas {
		if d.Call == nil {
			sb.WriteString(d.Content) // reasoning is not content
			continue
		}
		for len(calls) <= d.Call.Index {
			calls = append(calls, Call{})
		}
		c := &calls[d.Call.Index]
		if d.Call.ID != "" {
			c.ID = d.Call.ID
		}
		if d.Call.Name != "" {
			c.Name = d.Call.Name
		}
		c.Arguments += d.Call.Arguments
	}
	return sb.String(), calls
}

func (p *Parser) content(s []byte) {
	if len(s) == 0 {
		return
	}
	if p.atStart && len(bytes.TrimLeft(s, " \t\r\n")) > 0 {
		p.atStart = false
	}
	if n := len(p.out); n > 0 && p.out[n-1].Call == nil && p.out[n-1].Reasoning == "" {
		p.out[n-1].Content += string(s)
		return
	}
	p.out = append(p.out, Delta{Content: string(s)})
}

func (p *Parser) call(d CallDelta) {
	if d.ID == "" && d.Arguments == "" {
		return
	}
	if n := len(p.out); n > 0 && p.out[n-1].Call != nil && p.out[n-1].Call.Index == d.Index && d.ID == "" {
		p.out[n-1].Call.Arguments += d.Arguments
		return
	}
	p.out = append(p.out, Delta{Call: &d})
}

func (p *Parser) advance(final bool) {
	for {
		if p.region == nil {
			start, found, safe := p.findStart(final)
			p.content(p.text[p.base:safe])
			p.base = safe
			if !found {
				return
			}
			// text[base:start] is whitespace: dropped if a call opens
			// here, content if not.
			p.region = &region{start: start}
			continue
		}
		if !p.stepRegion(final) {
			return
		}
	}
}

// findStart looks for the next call region from base. It returns where the
// region starts, whether one was found, and how far text is decided content
// (whitespace right before a region is dropped; text that may start a
// region is held back unless final).
func (p *Parser) findStart(final bool) (start int, found bool, safe int) {
	s := p.text[p.base:]
	if p.recipient {
		p.recipient = false
		return p.base, true, p.base
	}
	if p.atStart && p.format.bareStart() {
		k := skipWS(s, 0)
		if k == len(s) {
			if final {
				return 0, false, len(p.text)
			}
			return 0, false, p.base
		}
		if s[k] == '{' {
			return p.base + k, true, p.base
		}
	}
	markers := p.format.markers()
	if len(markers) == 0 {
		return 0, false, len(p.text)
	}
	first := -1
	for _, m := range markers {
		if i := bytes.Index(s, []byte(m)); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		return p.base + first, true, p.base + len(bytes.TrimRight(s[:first], " \t\r\n"))
	}
	if final {
		return 0, false, len(p.text)
	}
	hold := 0
	for _, marker := range markers {
		for n := min(len(marker)-1, len(s)); n > hold; n-- {
			if bytes.HasSuffix(s, []byte(marker[:n])) {
				hold = n
				break
			}
		}
	}
	keep := len(bytes.TrimRight(s[:len(s)-hold], " \t\r\n"))
	return 0, false, p.base + keep
}

// stepRegion rescans the open region, sends what it newly decides, and
// reports whether the region closed (so scanning goes on after it).
func (p *Parser) stepRegion(final bool) bool {
	r := p.region
	sc := p.scanRegion(r.start)
	if sc.content {
		return p.stepContentEnvelope(sc, final)
	}
	// Commit calls in order, then stream their arguments.
	bad := sc.status == scanBad
	for k := range sc.calls {
		c := &sc.calls[k]
		if k >= len(r.sent) {
			if !p.committable(c) {
				if c.status == scanOK || (c.nameOK && !p.allowed(c.name)) {
					bad = true // a complete object that is no call of ours: stop at it
				}
				break
			}
			id := c.id
			if id == "" {
				id = p.newID()
			}
			r.sent = append(r.sent, sentCall{index: p.next})
			p.next++
			p.call(CallDelta{Index: r.sent[k].index, ID: id, Name: c.name})
		}
		p.sendArgs(&r.sent[k], c)
	}
	switch {
	case bad || (final && sc.status == scanMore && len(r.sent) == 0):
		if len(r.sent) == 0 {
			p.notCall(r.start)
		} else {
			// The rest, from the end of the last call, is content
			// (for a call whose JSON broke, from where it broke).
			p.base = sc.calls[len(r.sent)-1].end
		}
	case sc.status == scanOK:
		p.base = sc.end
	case final: // cut short inside a committed call: close it
		p.base = sc.calls[len(r.sent)-1].end
		if len(r.sent) == len(sc.calls) {
			p.base = len(p.text)
		}
	default:
		return false
	}
	p.region = nil
	p.atStart = false
	return true
}

// notCall turns a region start that is no call into content: its marker
// (or, for a bare start, the text up to it) is content, and scanning goes
// on after the marker.
func (p *Parser) notCall(start int) {
	p.atStart = false
	for _, m := range p.format.markers() {
		if bytes.HasPrefix(p.text[start:], []byte(m)) {
			p.content(p.text[p.base : start+len(m)])
			p.base = start + len(m)
			return
		}
	}
}

func (p *Parser) allowed(name string) bool {
	return len(p.opts.Tools) == 0 || slices.Contains(p.opts.Tools, name)
}

// committable: the call's name is known and allowed and its arguments have
// begun (or its object ended without them, where the format allows that).
func (p *Parser) committable(c *callObject) bool {
	if !c.nameOK || c.name == "" || !p.allowed(c.name) {
		return false
	}
	if c.hasArgs {
		return true
	}
	return c.status == scanOK && p.format != Llama3
}

func (p *Parser) sendArgs(s *sentCall, c *callObject) {
	if s.whole {
		return
	}
	switch {
	case c.synth:
		var piece []byte
		if n := len(c.argsText); n > s.argsSent {
			piece = append(piece, c.argsText[s.argsSent:]...)
			s.argsSent = n
			s.rawSent = c.openStart // an open value begins after argsText
		}
		if c.open && s.argsSent >= len(c.argsText) && c.openEnd > s.rawSent {
			n := len(piece)
			piece = appendEscaped(piece, string(p.text[s.rawSent:c.openEnd]))
			s.argsSent += len(piece) - n
			s.rawSent = c.openEnd
		}
		if len(piece) > 0 {
			p.call(CallDelta{Index: s.index, Arguments: string(piece)})
		}
	case !c.hasArgs:
		if c.status == scanOK {
			s.whole = true
			p.call(CallDelta{Index: s.index, Arguments: "{}"})
		}
	case c.argsIsValue:
		if c.argsDone {
			s.whole = true
			v, _ := decodeString(p.text[c.argsStart:c.argsEnd])
			p.call(CallDelta{Index: s.index, Arguments: v})
		}
	default:
		if n := c.argsEnd - c.argsStart; n > s.argsSent {
			p.call(CallDelta{Index: s.index, Arguments: string(p.text[c.argsStart+s.argsSent : c.argsEnd])})
			s.argsSent = n
		}
	}
}

// stepContentEnvelope streams Generic's {"content": "..."}.
func (p *Parser) stepContentEnvelope(sc regionScan, final bool) bool {
	r := p.region
	r.content = true
	body := p.text[sc.contentStart:sc.contentEnd]
	text, n := decodePartial(body[r.contentSent:])
	if text != "" {
		p.content([]byte(text))
		p.atStart = false
	}
	r.contentSent += n
	switch {
	case sc.status == scanOK:
		p.base = sc.end
	case sc.status == scanBad:
		p.base = max(sc.end, sc.contentStart+r.contentSent)
	case final:
		p.base = len(p.text)
	default:
		return false
	}
	p.region = nil
	return true
}
