package toolcall

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// pyLiteralJSON converts a Python literal, as Python's str() writes a
// list or dict ({'a': [1, True, None]}), to JSON text. Templates that
// render argument values with str() (Seed-OSS) teach their models to write
// values that way. ok is false when s is not such a literal.
func pyLiteralJSON(s string) (out string, ok bool) {
	p := pyParser{s: s}
	var sb strings.Builder
	if !p.value(&sb, 0) {
		return "", false
	}
	p.ws()
	return sb.String(), p.i == len(p.s)
}

type pyParser struct {
	s string
	i int
}

func (p *pyParser) ws() {
	for p.i < len(p.s) && isSpace(p.s[p.i]) {
		p.i++
	}
}

func (p *pyParser) value(sb *strings.Builder, depth int) bool {
	p.ws()
	if p.i >= len(p.s) || depth > maxDepth {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '[' || c == '(':
		return p.seq(sb, depth, map[byte]byte{'[': ']', '(': ')'}[c])
	case c == '{':
		return p.dict(sb, depth)
	case c == '\'' || c == '"':
		str, ok := p.str()
		if ok {
			sb.WriteString(quoteJSON(str))
		}
		return ok
	}
	for _, w := range []struct{ py, js string }{{"True", "true"}, {"False", "false"}, {"None", "null"}} {
		if strings.HasPrefix(p.s[p.i:], w.py) {
			p.i += len(w.py)
			sb.WriteString(w.js)
			return true
		}
	}
	j := p.i
	for j < len(p.s) && strings.IndexByte("+-0123456789.eE", p.s[j]) >= 0 {
		j++
	}
	num := p.s[p.i:j]
	if _, err := strconv.ParseFloat(num, 64); err != nil || num == "" {
		return false
	}
	if f := strings.TrimLeft(num, "+"); jsonNumber(f) {
		sb.WriteString(f)
	} else {
		v, _ := strconv.ParseFloat(num, 64)
		sb.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	}
	p.i = j
	return true
}

// jsonNumber reports whether s is a JSON number as written.
func jsonNumber(s string) bool {
	end, st := scanNumber([]byte(s+" "), 0)
	return st == scanOK && end == len(s)
}

func (p *pyParser) seq(sb *strings.Builder, depth int, closer byte) bool {
	p.i++
	sb.WriteByte('[')
	for n := 0; ; n++ {
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == closer {
			p.i++
			sb.WriteByte(']')
			return true
		}
		if n > 0 {
			if p.i >= len(p.s) || p.s[p.i] != ',' {
				return false
			}
			p.i++
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == closer { // a trailing comma
				continue
			}
			sb.WriteString(", ")
		}
		if !p.value(sb, depth+1) {
			return false
		}
	}
}

func (p *pyParser) dict(sb *strings.Builder, depth int) bool {
	p.i++
	sb.WriteByte('{')
	for n := 0; ; n++ {
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			sb.WriteByte('}')
			return true
		}
		if n > 0 {
			if p.i >= len(p.s) || p.s[p.i] != ',' {
				return false
			}
			p.i++
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == '}' {
				continue
			}
			sb.WriteString(", ")
		}
		if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
			return false
		}
		key, ok := p.str()
		if !ok {
			return false
		}
		sb.WriteString(quoteJSON(key))
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return false
		}
		p.i++
		sb.WriteString(": ")
		if !p.value(sb, depth+1) {
			return false
		}
	}
}

// str reads a Python string literal in single or double quotes with the
// common escapes.
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	var sb strings.Builder
	for i := p.i + 1; i < len(p.s); {
		c := p.s[i]
		switch {
		case c == q:
			p.i = i + 1
			return sb.String(), true
		case c == '\n':
			return "", false
		case c == '\\' && i+1 < len(p.s):
			e := p.s[i+1]
			i += 2
			switch e {
			case 'n':
				sb.WriteByte('\n')
			case 't':
				sb.WriteByte('\t')
			case 'r':
				sb.WriteByte('\r')
			case '\\', '\'', '"':
				sb.WriteByte(e)
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if i+n > len(p.s) {
					return "", false
				}
				r, err := strconv.ParseUint(p.s[i:i+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(r)) {
					return "", false
				}
				sb.WriteRune(rune(r))
				i += n
			default:
				sb.WriteByte('\\')
				sb.WriteByte(e)
			}
		default:
			sb.WriteByte(c)
			i++
		}
	}
	return "", false
}
