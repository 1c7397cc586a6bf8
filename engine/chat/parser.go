package chat

import (
	"fmt"
	"strings"
)

// Statements of the template tree. Nodes are immutable once parsed, so one
// tree serves concurrent renders.
type stmt interface {
	exec(r *renderer) error
}

type textStmt struct{ text string }

type outputStmt struct {
	off int
	x   expr
}

type ifStmt struct {
	conds  []expr
	bodies [][]stmt
	els    []stmt
}

type forStmt struct {
	off     int
	targets []string // one name, or several when unpack is set
	unpack  bool
	iter    expr
	cond    expr // the "if" filter of the loop; nil when absent
	body    []stmt
	els     []stmt
}

// setStmt is {% set name = x %}, {% set a, b = x %}, {% set ns.attr = x %}
// or the block form {% set name | filters %}body{% endset %}.
type setStmt struct {
	off     int
	names   []string
	unpack  bool
	attr    string // set when assigning names[0].attr
	x       expr
	body    []stmt
	filters []*filterExpr
}

type macroStmt struct {
	off      int
	name     string
	params   []string
	defaults []expr // defaults of the last len(defaults) params
	body     []stmt
}

type loopCtlStmt struct {
	off int
	brk bool
}

// blockStmt renders its body in place: {% block %}, {% generation %}.
type blockStmt struct{ body []stmt }

type withStmt struct {
	names  []string
	values []expr
	body   []stmt
}

type filterStmt struct {
	off     int
	filters []*filterExpr
	body    []stmt
}

// maxNesting bounds the parser's recursion so that a hostile template
// cannot exhaust the stack.
const maxNesting = 200

type parser struct {
	src  *source
	toks []token
	i    int

	depth     int      // nesting of expressions and statements
	soft      int      // >0 inside if/conditional: unknown filters fail at run time
	loops     int      // >0 inside a for body: break and continue are allowed
	tagStack  []string // open statements, for error messages
	lookingAt []string // end tags the innermost open statement accepts
	unknown   []unknownRef
}

func parse(src *source) ([]stmt, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks}
	body, _, err := p.subparse()
	if err != nil {
		return nil, err
	}
	for _, u := range p.unknown {
		if !u.soft {
			return nil, p.errorf(u.off, "no %s", u.what)
		}
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.i] }
func (p *parser) peek() token { return p.toks[min(p.i+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) errorf(off int, format string, args ...any) error {
	return p.src.errorf(off, format, args...)
}

func (p *parser) isOp(op string) bool  { t := p.cur(); return t.kind == tkOp && t.val == op }
func (p *parser) isName(n string) bool { t := p.cur(); return t.kind == tkName && t.val == n }
func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(n string) bool {
	if p.isName(n) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf(p.cur().off, "expected '%s', got '%s'", op, p.cur().describe())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tkName {
		return "", p.errorf(t.off, "expected name, got '%s'", t.describe())
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectKind(k tokKind) error {
	if t := p.cur(); t.kind != k {
		return p.errorf(t.off, "expected '%s', got '%s'", token{kind: k}.describe(), t.describe())
	}
	p.next()
	return nil
}

func (p *parser) enter(off int) error {
	p.depth++
	if p.depth > maxNesting {
		return p.errorf(off, "template nested too deeply")
	}
	return nil
}

// subparse parses statements until EOF or a block tag named in ends, which
// it leaves unconsumed after reporting its name.
func (p *parser) subparse(ends ...string) ([]stmt, string, error) {
	saved := p.lookingAt
	if len(ends) > 0 {
		p.lookingAt = ends
	}
	defer func() { p.lookingAt = saved }()
	var body []stmt
	for {
		t := p.cur()
		switch t.kind {
		case tkEOF:
			if len(ends) > 0 {
				return nil, "", p.eofError(t.off)
			}
			return body, "", nil
		case tkText:
			p.next()
			body = append(body, &textStmt{text: t.val})
		case tkVarBegin:
			p.next()
			x, err := p.parseTuple(true, false)
			if err != nil {
				return nil, "", err
			}
			if err := p.expectKind(tkVarEnd); err != nil {
				return nil, "", err
			}
			body = append(body, &outputStmt{off: t.off, x: x})
		case tkBlockBegin:
			p.next()
			name := p.cur()
			if name.kind != tkName {
				return nil, "", p.errorf(name.off, "tag name expected")
			}
			for _, e := range ends {
				if name.val == e {
					p.next()
					return body, e, nil
				}
			}
			s, err := p.statement(t.off)
			if err != nil {
				return nil, "", err
			}
			if err := p.expectKind(tkBlockEnd); err != nil {
				return nil, "", err
			}
			body = append(body, s)
		default:
			return nil, "", p.errorf(t.off, "unexpected '%s'", t.describe())
		}
	}
}

func (p *parser) eofError(off int) error {
	var quoted []string
	for _, e := range p.lookingAt {
		quoted = append(quoted, "'"+e+"'")
	}
	msg := "unexpected end of template; looking for " + strings.Join(quoted, " or ")
	if n := len(p.tagStack); n > 0 {
		msg += fmt.Sprintf("; the innermost block that needs to be closed is '%s'", p.tagStack[n-1])
	}
	return p.errorf(off, "%s", msg)
}

// body parses the statements of a block up to one of ends, then the end of
// that closing tag. It returns which end tag closed the block.
func (p *parser) body(ends ...string) ([]stmt, string, error) {
	if err := p.expectKind(tkBlockEnd); err != nil {
		return nil, "", err
	}
	b, end, err := p.subparse(ends...)
	return b, end, err
}

func (p *parser) statement(off int) (stmt, error) {
	if err := p.enter(off); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	name := p.next().val
	p.tagStack = append(p.tagStack, name)
	defer func() { p.tagStack = p.tagStack[:len(p.tagStack)-1] }()
	switch name {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(off)
	case "set":
		return p.parseSet(off)
	case "macro":
		return p.parseMacro(off)
	case "break", "continue":
		if p.loops == 0 {
			return nil, p.errorf(off, "'%s' outside of a loop", name)
		}
		return &loopCtlStmt{off: off, brk: name == "break"}, nil
	case "print":
		x, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		return &outputStmt{off: off, x: x}, nil
	case "generation":
		b, _, err := p.body("endgeneration")
		return &blockStmt{body: b}, err
	case "block":
		if _, err := p.expectName(); err != nil {
			return nil, err
		}
		b, _, err := p.body("endblock")
		if err == nil && p.cur().kind == tkName {
			p.next()
		}
		return &blockStmt{body: b}, err
	case "with":
		return p.parseWith()
	case "filter":
		fs, err := p.parseFilters(nil, true)
		if err != nil {
			return nil, err
		}
		b, _, err := p.body("endfilter")
		return &filterStmt{off: off, filters: fs, body: b}, err
	case "extends", "include", "import", "from", "call", "autoescape", "raw":
		return nil, p.errorf(off, "unsupported tag '%s'", name)
	}
	return nil, p.errorf(off, "encountered unknown tag '%s'", name)
}

func (p *parser) parseIf() (stmt, error) {
	p.soft++
	defer func() { p.soft-- }()
	s := &ifStmt{}
	for {
		c, err := p.parseTuple(false, false)
		if err != nil {
			return nil, err
		}
		b, end, err := p.body("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		s.conds = append(s.conds, c)
		s.bodies = append(s.bodies, b)
		switch end {
		case "elif":
			continue
		case "else":
			s.els, _, err = p.body("endif")
			return s, err
		}
		return s, nil
	}
}

// parseTargets parses assignment targets: a name, names separated by commas
// (optionally parenthesised), or with ns set, a namespace attribute.
func (p *parser) parseTargets(ns bool) (names []string, unpack bool, attr string, err error) {
	paren := p.skipOp("(")
	for {
		n, err := p.expectName()
		if err != nil {
			return nil, false, "", err
		}
		names = append(names, n)
		if ns && len(names) == 1 && !paren && p.isOp(".") {
			p.next()
			attr, err = p.expectName()
			return names, false, attr, err
		}
		if !p.skipOp(",") {
			break
		}
		unpack = true
		if p.isOp(")") || p.isName("in") || p.isOp("=") {
			break
		}
	}
	if paren {
		unpack = true
		if err := p.expectOp(")"); err != nil {
			return nil, false, "", err
		}
	}
	return names, unpack, "", nil
}

func (p *parser) parseFor(off int) (stmt, error) {
	s := &forStmt{off: off}
	var err error
	if s.targets, s.unpack, _, err = p.parseTargets(false); err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errorf(p.cur().off, "expected 'in', got '%s'", p.cur().describe())
	}
	if s.iter, err = p.parseTuple(false, true); err != nil {
		return nil, err
	}
	if p.skipName("if") {
		if s.cond, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errorf(p.cur().off, "recursive loops are not supported")
	}
	p.loops++
	b, end, err := p.body("endfor", "else")
	p.loops--
	if err != nil {
		return nil, err
	}
	s.body = b
	if end == "else" {
		s.els, _, err = p.body("endfor")
	}
	return s, err
}

func (p *parser) parseSet(off int) (stmt, error) {
	s := &setStmt{off: off}
	var err error
	if s.names, s.unpack, s.attr, err = p.parseTargets(true); err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		s.x, err = p.parseTuple(true, false)
		return s, err
	}
	if s.unpack || s.attr != "" {
		return nil, p.errorf(p.cur().off, "a block set assigns one name")
	}
	if p.isOp("|") {
		if s.filters, err = p.parseFilters(nil, false); err != nil {
			return nil, err
		}
	}
	s.body, _, err = p.body("endset")
	return s, err
}

func (p *parser) parseMacro(off int) (stmt, error) {
	s := &macroStmt{off: off}
	var err error
	if s.name, err = p.expectName(); err != nil {
		return nil, err
	}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(s.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		s.params = append(s.params, n)
		if p.skipOp("=") {
			d, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			s.defaults = append(s.defaults, d)
		} else if len(s.defaults) > 0 {
			return nil, p.errorf(p.cur().off, "non-default argument follows default argument")
		}
	}
	p.next()
	loops := p.loops
	p.loops = 0
	s.body, _, err = p.body("endmacro")
	p.loops = loops
	return s, err
}

func (p *parser) parseWith() (stmt, error) {
	s := &withStmt{}
	for p.cur().kind != tkBlockEnd {
		if len(s.names) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		x, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		s.names = append(s.names, n)
		s.values = append(s.values, x)
	}
	var err error
	s.body, _, err = p.body("endwith")
	return s, err
}
