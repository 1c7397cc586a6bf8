package upstream

import (
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeChunk decodes one upstream chunk into ch (which must be zero).
//
// Chunks are decoded once per token, so this is on the hot path of every
// stream: a small scanner reads the members rill uses — choices (index,
// delta or message content, text, finish_reason) — and skips the rest
// without building them; the rare nested objects (usage, timings,
// logprobs, error) go to encoding/json. Whatever the scanner does not
// handle exactly as encoding/json would (invalid UTF-8, a key that differs
// from a known one only in case, malformed input) makes it give up, and
// encoding/json decodes the whole chunk instead; the result is the same
// either way.
func decodeChunk(data []byte, ch *wireChunk) error {
	s := scanner{b: data}
	if s.chunk(ch) && s.end() {
		return nil
	}
	*ch = wireChunk{}
	return json.Unmarshal(data, ch)
}

// scanner reads JSON from b at i. Its methods report false on anything
// they do not handle, leaving the fallback to decide.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips white space and reports whether the next byte is c, consuming it.
func (s *scanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// null consumes a null literal if one is next.
func (s *scanner) null() bool {
	s.ws()
	if strings.HasPrefix(string(s.b[s.i:min(s.i+4, len(s.b))]), "null") {
		s.i += 4
		return true
	}
	return false
}

// object reads the members of an object, calling member with each key (as
// it appears, unescaped keys only; it aliases b) with the scanner at the
// value, which member must consume.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		s.ws()
		key, ok := s.rawString()
		if !ok || !s.next(':') || !member(key) {
			return false
		}
		if s.next(',') {
			continue
		}
		return s.next('}')
	}
}

// rawString reads a string without escapes and returns its bytes, which
// alias b (for comparing keys); escapes give up.
func (s *scanner) rawString() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// str reads a string value, or null (ok, nil).
func (s *scanner) str() (*string, bool) {
	if s.null() {
		return nil, true
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	j := s.i + 1
	var out []byte // nil until the first escape
	from := j
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			seg := s.b[from:j]
			if !utf8.Valid(seg) {
				return nil, false
			}
			s.i = j + 1
			var v string
			if out == nil {
				v = string(seg)
			} else {
				v = string(append(out, seg...))
			}
			return &v, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			j++
			continue
		}
		if !utf8.Valid(s.b[from:j]) || j+1 >= len(s.b) {
			return nil, false
		}
		out = append(out, s.b[from:j]...)
		switch e := s.b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n := s.unicode(j)
			if n == 0 {
				return nil, false
			}
			out = utf8.AppendRune(out, r)
			j += n
			from = j
			continue
		default:
			return nil, false
		}
		j += 2
		from = j
	}
	return nil, false
}

// unicode reads the \uXXXX escape at j (and its low surrogate, if it is a
// high one) and returns the rune and the bytes read; 0 bytes gives up
// (a lone surrogate, which encoding/json replaces).
func (s *scanner) unicode(j int) (rune, int) {
	r := hex4(s.b, j+2)
	if r < 0 {
		return 0, 0
	}
	if !utf16.IsSurrogate(r) {
		return r, 6
	}
	if j+12 > len(s.b) || s.b[j+6] != '\\' || s.b[j+7] != 'u' {
		return 0, 0
	}
	lo := hex4(s.b, j+8)
	if d := utf16.DecodeRune(r, lo); d != utf8.RuneError {
		return d, 12
	}
	return 0, 0
}

func hex4(b []byte, at int) rune {
	if at+4 > len(b) {
		return -1
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return -1
		}
	}
	return r
}

// index reads a choice index: a non-negative integer of at most 9 digits
// (anything else goes to encoding/json).
func (s *scanner) index() (int, bool) {
	s.ws()
	start := s.i
	if !s.number() || s.i-start > 9 {
		return 0, false
	}
	n := 0
	for _, c := range s.b[start:s.i] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// skip consumes any value, checking that it is valid JSON, and returns its
// bytes.
func (s *scanner) skip() ([]byte, bool) {
	s.ws()
	start := s.i
	ok := s.value(0)
	return s.b[start:s.i], ok
}

// maxDepth bounds the nesting the scanner follows; deeper input goes to
// encoding/json.
const maxDepth = 32

func (s *scanner) value(depth int) bool {
	s.ws()
	if s.i >= len(s.b) || depth > maxDepth {
		return false
	}
	switch s.b[s.i] {
	case '{':
		s.i++
		if s.next('}') {
			return true
		}
		for {
			s.ws()
			if !s.skipString() || !s.next(':') || !s.value(depth+1) {
				return false
			}
			if s.next(',') {
				continue
			}
			return s.next('}')
		}
	case '[':
		s.i++
		if s.next(']') {
			return true
		}
		for {
			if !s.value(depth + 1) {
				return false
			}
			if s.next(',') {
				continue
			}
			return s.next(']')
		}
	case '"':
		return s.skipString()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

func (s *scanner) literal(lit string) bool {
	if strings.HasPrefix(string(s.b[s.i:min(s.i+len(lit), len(s.b))]), lit) {
		s.i += len(lit)
		return true
	}
	return false
}

// skipString steps over a string, checking its escapes.
func (s *scanner) skipString() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if j+1 >= len(s.b) {
				return false
			}
			switch s.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if hex4(s.b, j+2) < 0 {
					return false
				}
				j += 5
			default:
				return false
			}
		}
	}
	return false
}

// number steps over a number as JSON's grammar has it.
func (s *scanner) number() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// known reports whether key is a case variant of one of names: a key
// encoding/json would match to a field, which the scanner leaves to it.
func known(key []byte, names ...string) bool {
	for _, n := range names {
		if len(key) == len(n) && strings.EqualFold(string(key), n) {
			return true
		}
	}
	return false
}

// chunk reads a whole chunk.
func (s *scanner) chunk(ch *wireChunk) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			if s.null() {
				ch.Choices = nil
				return true
			}
			if !s.next('[') {
				return false
			}
			ch.Choices = make([]wireChoice, 0, 1)
			if s.next(']') {
				return true
			}
			for {
				var c wireChoice
				if !s.choice(&c) {
					return false
				}
				ch.Choices = append(ch.Choices, c)
				if s.next(',') {
					continue
				}
				return s.next(']')
			}
		case "usage":
			return s.nested(&ch.Usage)
		case "timings":
			return s.nested(&ch.Timings)
		case "prompt_progress":
			return s.nested(&ch.Progress)
		case "error":
			raw, ok := s.skip()
			ch.Error = append(json.RawMessage(nil), raw...)
			return ok
		}
		if known(key, "choices", "usage", "timings", "prompt_progress", "error") {
			return false
		}
		_, ok := s.skip()
		return ok
	})
}

// nested decodes the next value into *p with encoding/json (null: nil).
func (s *scanner) nested(p any) bool {
	raw, ok := s.skip()
	return ok && json.Unmarshal(raw, p) == nil
}

func (s *scanner) choice(c *wireChoice) bool {
	return s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "index":
			c.Index, ok = s.index()
		case "delta":
			c.Delta, ok = s.content()
		case "message":
			c.Message, ok = s.content()
		case "text":
			c.Text, ok = s.str()
		case "finish_reason":
			c.FinishReason, ok = s.str()
		case "logprobs":
			c.Logprobs = nil
			ok = s.nested(&c.Logprobs)
		default:
			if known(key, "index", "delta", "message", "text", "finish_reason", "logprobs") {
				return false
			}
			_, ok = s.skip()
		}
		return ok
	})
}

// content reads a delta or message object (null: nil) for its content and
// reasoning and tool calls.
func (s *scanner) content() (*wireContent, bool) {
	if s.null() {
		return nil, true
	}
	w := &wireContent{}
	ok := s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "content":
			w.Content, ok = s.str()
		case "reasoning_content":
			w.ReasoningContent, ok = s.str()
		case "reasoning":
			w.Reasoning, ok = s.str()
		case "tool_calls":
			w.ToolCalls = nil
			ok = s.nested(&w.ToolCalls)
		default:
			if known(key, "content", "reasoning_content", "reasoning", "tool_calls") {
				return false
			}
			_, ok = s.skip()
		}
		return ok
	})
	return w, ok
}
