package toolcall

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// scanStatus is the verdict of scanning text that may still grow.
type scanStatus int

const (
	scanOK   scanStatus = iota // a complete value
	scanMore                   // the text ends inside the value; all of it is a valid prefix
	scanBad                    // not JSON at the returned offset
)

// maxDepth bounds nesting, so hostile output cannot exhaust the stack.
const maxDepth = 256

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanValue scans the JSON value at b[i:] (no leading whitespace) and
// returns the offset after it. With scanMore the offset is len(b); with
// scanBad it is the first offending byte. A number at the very end is
// scanMore: more digits may follow.
func scanValue(b []byte, i int) (int, scanStatus) { return scanDepth(b, i, 0) }

func scanDepth(b []byte, i, depth int) (int, scanStatus) {
	if i >= len(b) {
		return i, scanMore
	}
	if depth > maxDepth {
		return i, scanBad
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		return scanContainer(b, i, depth)
	case c == '"':
		return scanString(b, i)
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return i, scanBad
}

func scanContainer(b []byte, i, depth int) (int, scanStatus) {
	closer := byte('}')
	if b[i] == '[' {
		closer = ']'
	}
	object := closer == '}'
	i = skipWS(b, i+1)
	if i >= len(b) {
		return i, scanMore
	}
	if b[i] == closer {
		return i + 1, scanOK
	}
	for {
		if object {
			if i >= len(b) {
				return i, scanMore
			}
			if b[i] != '"' {
				return i, scanBad
			}
			var st scanStatus
			if i, st = scanString(b, i); st != scanOK {
				return i, st
			}
			if i = skipWS(b, i); i >= len(b) {
				return i, scanMore
			}
			if b[i] != ':' {
				return i, scanBad
			}
			i = skipWS(b, i+1)
		}
		var st scanStatus
		if i, st = scanDepth(b, i, depth+1); st != scanOK {
			return i, st
		}
		if i = skipWS(b, i); i >= len(b) {
			return i, scanMore
		}
		switch b[i] {
		case closer:
			return i + 1, scanOK
		case ',':
			i = skipWS(b, i+1)
		default:
			return i, scanBad
		}
	}
}

func scanString(b []byte, i int) (int, scanStatus) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, scanOK
		case c < 0x20:
			return i, scanBad
		case c == '\\':
			if i+1 >= len(b) {
				return len(b), scanMore
			}
			i++
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if i+k >= len(b) {
						return len(b), scanMore
					}
					if !isHex(b[i+k]) {
						return i + k, scanBad
					}
				}
				i += 4
			default:
				return i, scanBad
			}
		}
	}
	return i, scanMore
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func scanNumber(b []byte, i int) (int, scanStatus) {
	if b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i >= len(b) {
		return i, scanMore
	}
	if b[i] == '0' {
		i++
	} else if digits() == 0 {
		return i, scanBad
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			if i >= len(b) {
				return i, scanMore
			}
			return i, scanBad
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			if i >= len(b) {
				return i, scanMore
			}
			return i, scanBad
		}
	}
	if i >= len(b) {
		return i, scanMore // more digits may come
	}
	return i, scanOK
}

func scanLiteral(b []byte, i int, lit string) (int, scanStatus) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(b) {
			return len(b), scanMore
		}
		if b[i+k] != lit[k] {
			return i + k, scanBad
		}
	}
	return i + len(lit), scanOK
}

// decodeString decodes a complete JSON string literal.
func decodeString(lit []byte) (string, bool) {
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", false
	}
	return s, true
}

// decodePartial decodes the body of a JSON string literal that may still
// grow (body: the bytes after the opening quote, without the closing one)
// and returns the text of its complete characters and how many body bytes
// they took. An escape, a surrogate pair or a UTF-8 sequence cut by the end
// of body is left for later.
func decodePartial(body []byte) (string, int) {
	out := make([]byte, 0, len(body))
	i := 0
	for i < len(body) {
		c := body[i]
		if c != '\\' {
			if c < utf8.RuneSelf {
				out = append(out, c)
				i++
				continue
			}
			if !utf8.FullRune(body[i:]) {
				break
			}
			r, n := utf8.DecodeRune(body[i:])
			out = utf8.AppendRune(out, r)
			i += n
			continue
		}
		if i+1 >= len(body) {
			break
		}
		if body[i+1] != 'u' {
			s, ok := decodeString([]byte{'"', '\\', body[i+1], '"'})
			if !ok {
				break
			}
			out = append(out, s...)
			i += 2
			continue
		}
		n := 6
		if i+n > len(body) {
			break
		}
		if r := hex4(body[i+2 : i+6]); r >= 0xd800 && r < 0xdc00 {
			n = 12 // a high surrogate: wait for its pair
			if i+n > len(body) {
				break
			}
		}
		s, ok := decodeString(append(append([]byte{'"'}, body[i:i+n]...), '"'))
		if !ok {
			break
		}
		out = append(out, s...)
		i += n
	}
	return string(out), i
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

// callObject is what scanning a call object found so far.
type callObject struct {
	status      scanStatus
	end         int // after the object (scanOK), or where scanning stopped
	name        string
	nameOK      bool // the name is complete
	id          string
	hasArgs     bool // the arguments value has begun
	argsStart   int
	argsEnd     int // end of the arguments scanned so far
	argsDone    bool
	argsIsValue bool // the arguments are a JSON string holding JSON text
	// synth: the arguments are JSON built from the call's text (the XML
	// formats) rather than a span of it. What is decided so far is
	// argsText, then, when a string value is open, the JSON escaping of
	// text[openStart:openEnd] (kept as a span, so that a long value is not
	// copied at every feed). It only ever grows as the text does.
	synth              bool
	argsText           string
	open               bool
	openStart, openEnd int
}

// scanCallObject scans {"name": "...", <argKey>: {...}, ...} at b[i:] (i
// at '{'). Members may come in any order; others are skipped ("id" is
// kept).
func scanCallObject(b []byte, i int, argKeys []string) callObject {
	return scanCallObjectKeys(b, i, nameKey, argKeys)
}

var nameKey = []string{"name"}

// scanCallObjectKeys is scanCallObject with the call's name in the first
// of nameKeys present.
func scanCallObjectKeys(b []byte, i int, nameKeys, argKeys []string) callObject {
	var co callObject
	fail := func(at int, st scanStatus) callObject {
		co.end, co.status = at, st
		return co
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return fail(i, scanMore)
	}
	if b[i] == '}' {
		return fail(i+1, scanOK)
	}
	for {
		if i >= len(b) {
			return fail(i, scanMore)
		}
		if b[i] != '"' {
			return fail(i, scanBad)
		}
		keyStart := i
		var st scanStatus
		if i, st = scanString(b, i); st != scanOK {
			return fail(i, st)
		}
		key, _ := decodeString(b[keyStart:i])
		if i = skipWS(b, i); i >= len(b) {
			return fail(i, scanMore)
		}
		if b[i] != ':' {
			return fail(i, scanBad)
		}
		i = skipWS(b, i+1)
		valStart := i
		isArgs := false
		for _, k := range argKeys {
			isArgs = isArgs || (k == key && !co.hasArgs) // a repeated arguments member is skipped
		}
		if isArgs && i < len(b) {
			co.hasArgs, co.argsStart, co.argsIsValue = true, i, b[i] == '"'
		}
		i, st = scanValue(b, i)
		if isArgs {
			co.argsEnd, co.argsDone = i, st == scanOK
		}
		if st != scanOK {
			return fail(i, st)
		}
		switch {
		case slices.Contains(nameKeys, key):
			s, ok := decodeString(b[valStart:i])
			if !ok {
				return fail(valStart, scanBad)
			}
			co.name, co.nameOK = s, true
		case key == "id":
			if !co.hasArgs { // only an id seen before the call is committed counts
				co.id, _ = decodeString(b[valStart:i])
			}
		}
		if i = skipWS(b, i); i >= len(b) {
			return fail(i, scanMore)
		}
		switch b[i] {
		case '}':
			return fail(i+1, scanOK)
		case ',':
			i = skipWS(b, i+1)
		default:
			return fail(i, scanBad)
		}
	}
}
