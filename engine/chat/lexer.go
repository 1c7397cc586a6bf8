package chat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2's, configured as Hugging Face configures it:
// trim_blocks (the first newline after a block or comment tag is dropped),
// lstrip_blocks (spaces and tabs before a block or comment tag on its own line
// are dropped), keep_trailing_newline off, and the "-" and "+" markers that
// strip or preserve whitespace around one tag.

type tokKind uint8

const (
	tkText tokKind = iota
	tkVarBegin
	tkVarEnd
	tkBlockBegin
	tkBlockEnd
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
	tkEOF
)

type token struct {
	kind tokKind
	val  string // text, name, operator or decoded string
	num  value  // int64 or float64 for tkInt and tkFloat
	off  int    // byte offset in the normalised source
}

func (t token) describe() string {
	switch t.kind {
	case tkVarEnd:
		return "end of print statement"
	case tkBlockEnd:
		return "end of statement block"
	case tkEOF:
		return "end of template"
	case tkText:
		return "template data"
	case tkVarBegin:
		return "begin of print statement"
	case tkBlockBegin:
		return "begin of statement block"
	case tkString:
		return "string"
	}
	return t.val
}

// SyntaxError reports a template that does not parse. Line and Column are
// 1-based; Column counts characters.
type SyntaxError struct {
	Line, Column int
	Msg          string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("template syntax error at line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// source is the template text with newlines normalised to "\n" (as jinja2
// does) and a line index for positions.
type source struct {
	text  string
	lines []int // byte offset of each line start
}

func newSource(src string) *source {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n") // keep_trailing_newline=False
	s := &source{text: src, lines: []int{0}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			s.lines = append(s.lines, i+1)
		}
	}
	return s
}

// position turns a byte offset into a 1-based line and character column.
func (s *source) position(off int) (line, col int) {
	lo, hi := 0, len(s.lines)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if s.lines[mid] <= off {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if off > len(s.text) {
		off = len(s.text)
	}
	return lo + 1, utf8.RuneCountInString(s.text[s.lines[lo]:off]) + 1
}

func (s *source) errorf(off int, format string, args ...any) *SyntaxError {
	line, col := s.position(off)
	return &SyntaxError{Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

type lexer struct {
	src  *source
	pos  int
	toks []token
	// lineStart is jinja2's line_starting: the previous match ended a line,
	// so whitespace up to the next tag counts as the start of a line.
	lineStart bool
}

func lex(src *source) ([]token, error) {
	lx := &lexer{src: src, lineStart: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tkEOF, off: len(src.text)})
	return lx.toks, nil
}

func (lx *lexer) run() error {
	text := lx.src.text
	for lx.pos < len(text) {
		rest := text[lx.pos:]
		i := indexTagOpen(rest)
		if i < 0 {
			lx.emitText(rest, lx.pos)
			return nil
		}
		open := rest[i : i+2]
		sign := byte(0)
		if i+2 < len(rest) && (rest[i+2] == '-' || rest[i+2] == '+') {
			sign = rest[i+2]
		}
		data := rest[:i]
		if sign == '-' {
			data = strings.TrimRightFunc(data, isSpace)
		} else if sign != '+' && open != "{{" {
			data = lx.lstrip(data)
		}
		lx.emitText(data, lx.pos)
		tagOff := lx.pos + i
		lx.pos = tagOff + 2
		if sign != 0 {
			lx.pos++
		}
		lx.lineStart = false
		switch open {
		case "{#":
			if err := lx.comment(tagOff); err != nil {
				return err
			}
		case "{{":
			lx.toks = append(lx.toks, token{kind: tkVarBegin, off: tagOff})
			if err := lx.tag(tkVarEnd); err != nil {
				return err
			}
		default:
			if ok, err := lx.raw(tagOff); ok || err != nil {
				if err != nil {
					return err
				}
				continue
			}
			lx.toks = append(lx.toks, token{kind: tkBlockBegin, off: tagOff})
			if err := lx.tag(tkBlockEnd); err != nil {
				return err
			}
		}
	}
	return nil
}

func indexTagOpen(s string) int {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '{' && (s[i+1] == '{' || s[i+1] == '%' || s[i+1] == '#') {
			return i
		}
	}
	return -1
}

// lstrip drops the spaces before a block or comment tag when nothing else
// precedes it on its line.
func (lx *lexer) lstrip(data string) string {
	l := strings.LastIndexByte(data, '\n') + 1
	if l == 0 && !lx.lineStart {
		return data
	}
	tail := data[l:]
	if tail != "" && strings.TrimLeftFunc(tail, isSpace) == "" {
		return data[:l]
	}
	return data
}

func (lx *lexer) emitText(s string, off int) {
	if s != "" {
		lx.toks = append(lx.toks, token{kind: tkText, val: s, off: off})
	}
}

// endTag consumes a block or comment end marker at lx.pos ("%}" or "#}"),
// honouring "-" (strip all following whitespace), "+" (keep it) and
// trim_blocks (drop one newline). It reports whether one was there.
func (lx *lexer) endTag(close string) bool {
	text := lx.src.text
	p := lx.pos
	switch {
	case strings.HasPrefix(text[p:], "-"+close):
		p += 1 + len(close)
		for p < len(text) {
			r, n := utf8.DecodeRuneInString(text[p:])
			if !isSpace(r) {
				break
			}
			p += n
		}
	case close != "}}" && strings.HasPrefix(text[p:], "+"+close):
		p += 1 + len(close)
	case strings.HasPrefix(text[p:], close):
		p += len(close)
		if close != "}}" && p < len(text) && text[p] == '\n' {
			p++
		}
	default:
		return false
	}
	lx.lineStart = p > 0 && text[p-1] == '\n'
	lx.pos = p
	return true
}

func (lx *lexer) comment(off int) error {
	text := lx.src.text
	for p := lx.pos; p < len(text); p++ {
		rest := text[p:]
		if strings.HasPrefix(rest, "#}") || strings.HasPrefix(rest, "-#}") || strings.HasPrefix(rest, "+#}") {
			lx.pos = p
			lx.endTag("#}")
			return nil
		}
	}
	return lx.src.errorf(off, "missing end of comment tag")
}

// raw handles {% raw %}...{% endraw %}: the body is emitted as text.
func (lx *lexer) raw(off int) (bool, error) {
	text := lx.src.text
	p := skipSpace(text, lx.pos)
	if !strings.HasPrefix(text[p:], "raw") || (p+3 < len(text) && isNameRune(rune(text[p+3]))) {
		return false, nil
	}
	lx.pos = skipSpace(text, p+3)
	switch {
	case strings.HasPrefix(text[lx.pos:], "-%}"):
		lx.endTag("%}")
	case strings.HasPrefix(text[lx.pos:], "%}"):
		lx.pos += 2 // no trim_blocks after raw, as in jinja2
		lx.lineStart = false
	default:
		return false, lx.src.errorf(off, "expected end of raw tag")
	}
	body := lx.pos
	for q := body; q < len(text); q++ {
		if !strings.HasPrefix(text[q:], "{%") {
			continue
		}
		e := q + 2
		sign := byte(0)
		if e < len(text) && (text[e] == '-' || text[e] == '+') {
			sign = text[e]
			e++
		}
		e = skipSpace(text, e)
		if !strings.HasPrefix(text[e:], "endraw") {
			continue
		}
		e = skipSpace(text, e+len("endraw"))
		data := text[body:q]
		if sign == '-' {
			data = strings.TrimRightFunc(data, isSpace)
		} else if sign != '+' {
			data = lx.lstrip(data)
		}
		lx.emitText(data, body)
		lx.pos = e
		if !lx.endTag("%}") {
			return true, lx.src.errorf(q, "expected end of endraw tag")
		}
		return true, nil
	}
	return true, lx.src.errorf(off, "missing end of raw directive")
}

func skipSpace(s string, p int) int {
	for p < len(s) {
		r, n := utf8.DecodeRuneInString(s[p:])
		if !isSpace(r) {
			break
		}
		p += n
	}
	return p
}

var operators = []string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// tag lexes the inside of {{ }} or {% %} up to its end marker, which only
// counts when brackets are balanced (so dict literals may close with "}}").
func (lx *lexer) tag(end tokKind) error {
	text := lx.src.text
	close := "%}"
	if end == tkVarEnd {
		close = "}}"
	}
	var brackets []byte
	for {
		if lx.pos >= len(text) {
			return lx.src.errorf(lx.pos, "unexpected end of template, expected '%s'", token{kind: end}.describe())
		}
		off := lx.pos
		if len(brackets) == 0 && lx.endTag(close) {
			lx.toks = append(lx.toks, token{kind: end, off: off})
			return nil
		}
		c := text[lx.pos]
		r, n := utf8.DecodeRuneInString(text[lx.pos:])
		switch {
		case isSpace(r):
			lx.pos += n
		case c >= '0' && c <= '9':
			if err := lx.number(); err != nil {
				return err
			}
		case isNameStart(r):
			p := lx.pos
			for p < len(text) {
				r, n := utf8.DecodeRuneInString(text[p:])
				if !isNameRune(r) {
					break
				}
				p += n
			}
			lx.toks = append(lx.toks, token{kind: tkName, val: text[lx.pos:p], off: off})
			lx.pos = p
		case c == '\'' || c == '"':
			if err := lx.str(); err != nil {
				return err
			}
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(text[lx.pos:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return lx.src.errorf(off, "unexpected char %s", strRepr(string(r)))
			}
			switch op {
			case "(", "[", "{":
				brackets = append(brackets, map[string]byte{"(": ')', "[": ']', "{": '}'}[op])
			case ")", "]", "}":
				if len(brackets) == 0 {
					return lx.src.errorf(off, "unexpected '%s'", op)
				}
				if want := brackets[len(brackets)-1]; want != op[0] {
					return lx.src.errorf(off, "unexpected '%s', expected '%c'", op, want)
				}
				brackets = brackets[:len(brackets)-1]
			}
			lx.toks = append(lx.toks, token{kind: tkOp, val: op, off: off})
			lx.pos += len(op)
		}
	}
}

func isNameStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }
func isNameRune(r rune) bool  { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// number lexes an integer (decimal, 0x, 0o, 0b, with "_" separators) or a
// float (a fraction, an exponent or both).
func (lx *lexer) number() error {
	text := lx.src.text
	off := lx.pos
	digits := func(p int, ok func(byte) bool) int {
		for p < len(text) && (ok(text[p]) || (text[p] == '_' && p+1 < len(text) && ok(text[p+1]))) {
			p++
		}
		return p
	}
	dec := func(b byte) bool { return b >= '0' && b <= '9' }
	if text[off] == '0' && off+1 < len(text) {
		base, ok := 0, func(byte) bool { return false }
		switch text[off+1] | 0x20 {
		case 'x':
			base, ok = 16, func(b byte) bool { return dec(b) || (b|0x20 >= 'a' && b|0x20 <= 'f') }
		case 'o':
			base, ok = 8, func(b byte) bool { return b >= '0' && b <= '7' }
		case 'b':
			base, ok = 2, func(b byte) bool { return b == '0' || b == '1' }
		}
		if base != 0 {
			p := off + 2
			if p < len(text) && text[p] == '_' {
				p++
			}
			end := digits(p, ok)
			if end > p {
				v, err := strconv.ParseInt(strings.ReplaceAll(text[p:end], "_", ""), base, 64)
				if err != nil {
					return lx.src.errorf(off, "integer literal out of range")
				}
				lx.toks = append(lx.toks, token{kind: tkInt, num: v, val: text[off:end], off: off})
				lx.pos = end
				return nil
			}
		}
	}
	p := digits(off, dec)
	isFloat := false
	if p+1 < len(text) && text[p] == '.' && dec(text[p+1]) {
		p = digits(p+1, dec)
		isFloat = true
	}
	if p < len(text) && text[p]|0x20 == 'e' {
		q := p + 1
		if q < len(text) && (text[q] == '+' || text[q] == '-') {
			q++
		}
		if q < len(text) && dec(text[q]) {
			p = digits(q, dec)
			isFloat = true
		}
	}
	lit := strings.ReplaceAll(text[off:p], "_", "")
	lx.pos = p
	if isFloat {
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil && !strings.Contains(err.Error(), "range") {
			return lx.src.errorf(off, "invalid float literal %s", lit)
		}
		lx.toks = append(lx.toks, token{kind: tkFloat, num: f, val: lit, off: off})
		return nil
	}
	v, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return lx.src.errorf(off, "integer literal out of range")
	}
	lx.toks = append(lx.toks, token{kind: tkInt, num: v, val: lit, off: off})
	return nil
}

// str lexes a quoted string and decodes Python's escapes (as jinja2 does with
// the unicode-escape codec); an unknown escape keeps its backslash.
func (lx *lexer) str() error {
	text := lx.src.text
	off := lx.pos
	q := text[off]
	var b strings.Builder
	p := off + 1
	for p < len(text) {
		c := text[p]
		if c == q {
			lx.toks = append(lx.toks, token{kind: tkString, val: b.String(), off: off})
			lx.pos = p + 1
			return nil
		}
		if c != '\\' {
			b.WriteByte(c)
			p++
			continue
		}
		if p+1 >= len(text) {
			break
		}
		e := text[p+1]
		p += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if p+n > len(text) {
				return lx.src.errorf(off, "truncated \\%cXX escape", e)
			}
			v, err := strconv.ParseUint(text[p:p+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return lx.src.errorf(off, "truncated \\%cXX escape", e)
			}
			b.WriteRune(rune(v))
			p += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(e - '0')
			for i := 0; i < 2 && p < len(text) && text[p] >= '0' && text[p] <= '7'; i++ {
				v = v*8 + int(text[p]-'0')
				p++
			}
			b.WriteRune(rune(v))
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return lx.src.errorf(off, "unexpected char %s", strRepr(string(q)))
}
