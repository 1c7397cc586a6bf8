package toolcall

import (
	"bytes"
	"strings"
)

// namedSpec describes a format that writes a call as its name between
// markers, then its arguments as JSON:
//
//	[open] (callOpen NAME nameEnd {args} [callClose])+ [close]
//
// with whitespace allowed between the parts. Without open (or when the
// output has a callOpen without it), calls follow each other directly.
type namedSpec struct {
	open, close       string // the optional section around the calls
	callOpen, nameEnd string
	callClose         string // "" when the arguments end the call
	// kimiID: the name is written functions.NAME:INDEX, which is also the
	// call's id (Kimi K2).
	kimiID bool
	// recipients: the output begins inside a callOpen (the generation
	// prompt ends with it), and the recipient "all" opens content, not
	// a call (Functionary v3.2's >>>all\ntext).
	recipients bool
}

// allRecipient is Functionary v3.2's recipient of content.
const allRecipient = "all\n"

var namedSpecs = map[Format]*namedSpec{
	KimiK2: {
		open: "<|tool_calls_section_begin|>", close: "<|tool_calls_section_end|>",
		callOpen: "<|tool_call_begin|>", nameEnd: "<|tool_call_argument_begin|>", callClose: "<|tool_call_end|>",
		kimiID: true,
	},
	DeepSeekV31: {
		open: "<｜tool▁calls▁begin｜>", close: "<｜tool▁calls▁end｜>",
		callOpen: "<｜tool▁call▁begin｜>", nameEnd: "<｜tool▁sep｜>", callClose: "<｜tool▁call▁end｜>",
	},
	FunctionaryV31: {callOpen: "<function=", nameEnd: ">", callClose: "</function>"},
	FunctionaryV32: {callOpen: ">>>", nameEnd: "\n", recipients: true},
}

// scanNamed scans a region of a named format from start.
func (p *Parser) scanNamed(spec *namedSpec, start int) regionScan {
	b := p.text
	var sc regionScan
	i := start
	section := spec.open != "" && bytes.HasPrefix(b[start:], []byte(spec.open))
	if section {
		i += len(spec.open)
	}
	prevEnd := -1
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			sc.status, sc.end = scanMore, len(b)
			return sc
		}
		openSt := matchLiteral(b, i, spec.callOpen)
		if spec.recipients && i == start && prevEnd < 0 {
			openSt = scanOK // the first recipient needs no marker
		}
		if openSt != scanOK {
			closeSt := scanBad
			if section {
				closeSt = matchLiteral(b, i, spec.close)
			}
			switch {
			case closeSt == scanOK && len(sc.calls) == 0:
				sc.status, sc.end = scanBad, i // an empty section is no call
			case closeSt == scanOK:
				sc.status, sc.end = scanOK, i+len(spec.close)
			case openSt == scanMore || closeSt == scanMore:
				sc.status, sc.end = scanMore, len(b)
			case prevEnd >= 0:
				sc.status, sc.end = scanOK, prevEnd // the calls end here
			default:
				sc.status, sc.end = scanBad, i
			}
			return sc
		}
		k := i + len(spec.callOpen)
		if spec.recipients && i == start && !bytes.HasPrefix(b[i:], []byte(spec.callOpen)) {
			k = i // the output's first recipient, after the prompt's callOpen
		}
		if spec.recipients {
			switch matchLiteral(b, k, allRecipient) {
			case scanMore:
				sc.status, sc.end = scanMore, len(b)
				return sc
			case scanOK:
				// Content follows: the region is the calls before it, or,
				// with none, the marker and recipient, dropped.
				sc.status, sc.end = scanOK, k+len(allRecipient)
				if prevEnd >= 0 {
					sc.end = prevEnd
				}
				return sc
			}
		}
		co := scanNamedCall(spec, b, k)
		sc.calls = append(sc.calls, co)
		if co.status != scanOK {
			sc.status, sc.end = co.status, co.end
			return sc
		}
		prevEnd, i = co.end, co.end
	}
}

// scanNamedCall scans NAME nameEnd {args} [callClose] at b[i:].
func scanNamedCall(spec *namedSpec, b []byte, i int) callObject {
	var co callObject
	fail := func(at int, st scanStatus) callObject {
		co.end, co.status = at, st
		return co
	}
	e := bytes.Index(b[i:], []byte(spec.nameEnd))
	if e < 0 {
		if rest := b[i:]; len(rest) > maxNameLen || (spec.nameEnd != "\n" && bytes.IndexByte(rest, '\n') >= 0) {
			return fail(i, scanBad)
		}
		return fail(len(b), scanMore)
	}
	name := strings.TrimSpace(string(b[i : i+e]))
	if spec.kimiID {
		id := name
		name = strings.TrimPrefix(name, "functions.")
		if k := strings.LastIndexByte(name, ':'); k >= 0 {
			name = name[:k]
		}
		co.id = id
	}
	if name == "" || strings.ContainsAny(name, "\n<>{} ") {
		return fail(i, scanBad)
	}
	co.name, co.nameOK = name, true
	k := skipWS(b, i+e+len(spec.nameEnd))
	if k >= len(b) {
		return fail(k, scanMore)
	}
	if b[k] != '{' && b[k] != '"' {
		return fail(k, scanBad)
	}
	co.hasArgs, co.argsStart, co.argsIsValue = true, k, b[k] == '"'
	end, st := scanValue(b, k)
	co.argsEnd, co.argsDone = end, st == scanOK
	if st != scanOK {
		return fail(end, st)
	}
	if spec.callClose != "" {
		j := skipWS(b, end)
		switch matchLiteral(b, j, spec.callClose) {
		case scanOK:
			end = j + len(spec.callClose)
		case scanMore:
			return fail(len(b), scanMore)
		}
	}
	return fail(end, scanOK)
}
