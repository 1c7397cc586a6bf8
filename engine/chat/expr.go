package chat

// Expression nodes and their parser, which follows jinja2's grammar and
// precedence, loosest first: conditional (x if c else y), or, and, not,
// comparisons and in, + and -, ~, * / // %, **, unary - and +, then postfix
// attribute, item, slice and call, then filters (|) and tests (is).

type expr interface {
	eval(r *renderer) (value, error)
}

type constExpr struct{ v value } // str, int, float, bool or None

type nameExpr struct {
	off  int
	name string
}

type listExpr struct {
	items []expr
	tuple bool
}

type dictExpr struct {
	off        int
	keys, vals []expr
}

type attrExpr struct {
	off  int
	x    expr
	name string
}

type itemExpr struct {
	off    int
	x, key expr
}

type sliceExpr struct {
	off               int
	x, lo, hi, stride expr // nil bounds are absent
}

// callArgs are the arguments of a call, filter or test.
type callArgs struct {
	pos     []expr
	kwNames []string
	kwVals  []expr
}

type callExpr struct {
	off  int
	fn   expr
	args callArgs
}

type filterExpr struct {
	off  int
	x    expr // nil in filter blocks, whose input is the rendered body
	name string
	fn   filterFunc // nil when unknown: an error if evaluated
	args callArgs
}

type testExpr struct {
	off  int
	x    expr
	name string
	fn   testFunc
	args callArgs
}

type binExpr struct {
	off  int
	op   string // + - * / // % **
	l, r expr
}

type concatExpr struct {
	off   int
	items []expr
}

type compareExpr struct {
	off   int
	first expr
	ops   []string // == != < <= > >= in notin
	rest  []expr
}

type andExpr struct{ l, r expr }
type orExpr struct{ l, r expr }
type notExpr struct{ x expr }

type unaryExpr struct {
	off int
	neg bool
	x   expr
}

type condExpr struct{ test, yes, no expr } // no is nil: Undefined

// unknownRef is a filter or test name that is not defined. Like jinja2, the
// parser rejects it unless it sits inside an if statement or a conditional
// expression, where it only fails if evaluated.
type unknownRef struct {
	off  int
	what string
	soft bool
}

func (p *parser) parseExpr(condexpr bool) (expr, error) {
	if condexpr {
		return p.parseCondexpr()
	}
	return p.parseOr()
}

// parseTuple parses expressions separated by commas: one expression, or a
// tuple when there is a comma. forIter stops at "recursive", as a for loop's
// iterable does.
func (p *parser) parseTuple(condexpr, forIter bool) (expr, error) {
	off := p.cur().off
	var items []expr
	tuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t := p.cur()
		if t.kind == tkVarEnd || t.kind == tkBlockEnd || (t.kind == tkOp && t.val == ")") || (forIter && p.isName("recursive")) {
			break
		}
		x, err := p.parseExpr(condexpr)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		if !p.isOp(",") {
			break
		}
		tuple = true
	}
	if !tuple {
		if len(items) == 1 {
			return items[0], nil
		}
		return nil, p.errorf(off, "expected an expression, got '%s'", p.cur().describe())
	}
	return &listExpr{items: items, tuple: true}, nil
}

func (p *parser) parseCondexpr() (expr, error) {
	mark := len(p.unknown)
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.next()
		p.soft++
		c := &condExpr{yes: x}
		c.test, err = p.parseOr()
		if err == nil && p.skipName("else") {
			c.no, err = p.parseCondexpr()
		}
		p.soft--
		if err != nil {
			return nil, err
		}
		for i := mark; i < len(p.unknown); i++ {
			p.unknown[i].soft = true
		}
		x = c
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.skipName("or") {
		var r expr
		r, err = p.parseAnd()
		l = &orExpr{l: l, r: r}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.skipName("and") {
		var r expr
		r, err = p.parseNot()
		l = &andExpr{l: l, r: r}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		off := p.next().off
		if err := p.enter(off); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		x, err := p.parseNot()
		return &notExpr{x: x}, err
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	off := p.cur().off
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{off: off, first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tkOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.peek().kind == tkName && p.peek().val == "in":
			op = "notin"
			p.next()
			p.next()
		default:
			if len(c.ops) == 0 {
				return first, nil
			}
			return c, nil
		}
		x, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, x)
	}
}

// parseBinary parses a left-associative chain of the operators ops over
// operands parsed by next.
func (p *parser) parseBinary(next func() (expr, error), ops ...string) (expr, error) {
	l, err := next()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		found := false
		for _, op := range ops {
			if t.kind == tkOp && t.val == op {
				found = true
			}
		}
		if !found {
			return l, nil
		}
		p.next()
		r, err := next()
		if err != nil {
			return nil, err
		}
		l = &binExpr{off: t.off, op: t.val, l: l, r: r}
	}
}

func (p *parser) parseMath1() (expr, error) { return p.parseBinary(p.parseConcat, "+", "-") }

func (p *parser) parseConcat() (expr, error) {
	off := p.cur().off
	x, err := p.parseMath2()
	if err != nil || !p.isOp("~") {
		return x, err
	}
	c := &concatExpr{off: off, items: []expr{x}}
	for p.skipOp("~") {
		x, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		c.items = append(c.items, x)
	}
	return c, nil
}

func (p *parser) parseMath2() (expr, error) {
	return p.parseBinary(p.parsePow, "*", "/", "//", "%")
}

func (p *parser) parsePow() (expr, error) {
	return p.parseBinary(func() (expr, error) { return p.parseUnary(true) }, "**")
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	t := p.cur()
	if err := p.enter(t.off); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	var x expr
	var err error
	if t.kind == tkOp && (t.val == "-" || t.val == "+") {
		p.next()
		var inner expr
		inner, err = p.parseUnary(false)
		x = &unaryExpr{off: t.off, neg: t.val == "-", x: inner}
	} else {
		x, err = p.parsePrimary()
	}
	if err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tkName:
		switch t.val {
		case "true", "True":
			return &constExpr{v: true}, nil
		case "false", "False":
			return &constExpr{v: false}, nil
		case "none", "None":
			return &constExpr{v: nil}, nil
		}
		return &nameExpr{off: t.off, name: t.val}, nil
	case tkString:
		s := t.val
		for p.cur().kind == tkString {
			s += p.next().val
		}
		return &constExpr{v: s}, nil
	case tkInt, tkFloat:
		return &constExpr{v: t.num}, nil
	case tkOp:
		switch t.val {
		case "(":
			if p.skipOp(")") {
				return &listExpr{tuple: true}, nil
			}
			x, err := p.parseTuple(true, false)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.next()
			return l, nil
		case "{":
			d := &dictExpr{off: t.off}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.errorf(t.off, "unexpected '%s'", t.describe())
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		t := p.cur()
		switch {
		case t.kind == tkOp && t.val == ".":
			p.next()
			a := p.next()
			switch a.kind {
			case tkName:
				x = &attrExpr{off: t.off, x: x, name: a.val}
			case tkInt:
				x = &itemExpr{off: t.off, x: x, key: &constExpr{v: a.num}}
			default:
				return nil, p.errorf(a.off, "expected name or number")
			}
		case t.kind == tkOp && t.val == "[":
			p.next()
			var err error
			if x, err = p.parseSubscript(t.off, x); err != nil {
				return nil, err
			}
		case t.kind == tkOp && t.val == "(":
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

func (p *parser) parseSubscript(off int, x expr) (expr, error) {
	var keys []expr
	for !p.isOp("]") {
		if len(keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		k, err := p.parseSubscribed(off, x)
		if err != nil {
			return nil, err
		}
		if s, ok := k.(*sliceExpr); ok {
			if len(keys) > 0 || !p.isOp("]") {
				return nil, p.errorf(off, "multi-dimensional slices are not supported")
			}
			p.next()
			return s, nil
		}
		keys = append(keys, k)
	}
	p.next()
	switch len(keys) {
	case 0:
		return nil, p.errorf(off, "expected subscript expression")
	case 1:
		return &itemExpr{off: off, x: x, key: keys[0]}, nil
	}
	return &itemExpr{off: off, x: x, key: &listExpr{items: keys, tuple: true}}, nil
}

// parseSubscribed parses one subscript: an expression, or a slice
// [lo]:[hi][:[stride]] returned as a *sliceExpr over x.
func (p *parser) parseSubscribed(off int, x expr) (expr, error) {
	s := &sliceExpr{off: off, x: x}
	if !p.isOp(":") {
		k, err := p.parseExpr(true)
		if err != nil || !p.isOp(":") {
			return k, err
		}
		s.lo = k
	}
	p.next()
	bound := func() (expr, error) {
		if p.isOp("]") || p.isOp(",") || p.isOp(":") {
			return nil, nil
		}
		return p.parseExpr(true)
	}
	var err error
	if s.hi, err = bound(); err != nil {
		return nil, err
	}
	if p.skipOp(":") {
		if s.stride, err = bound(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (p *parser) parseCallArgs() (callArgs, error) {
	var a callArgs
	if err := p.expectOp("("); err != nil {
		return a, err
	}
	for !p.isOp(")") {
		if len(a.pos)+len(a.kwVals) > 0 {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return a, p.errorf(p.cur().off, "*args and **kwargs are not supported")
		}
		if p.cur().kind == tkName && p.peek().kind == tkOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			v, err := p.parseExpr(true)
			if err != nil {
				return a, err
			}
			a.kwNames = append(a.kwNames, name)
			a.kwVals = append(a.kwVals, v)
			continue
		}
		if len(a.kwVals) > 0 {
			return a, p.errorf(p.cur().off, "positional argument follows keyword argument")
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return a, err
		}
		a.pos = append(a.pos, v)
	}
	p.next()
	return a, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	off := p.cur().off
	a, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{off: off, fn: fn, args: a}, nil
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			fs, err := p.parseFilters(x, false)
			if err != nil {
				return nil, err
			}
			x = fs[len(fs)-1]
		case p.isName("is"):
			var err error
			if x, err = p.parseTest(x); err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	for err == nil && p.isOp(".") {
		p.next()
		var more string
		more, err = p.expectName()
		name += "." + more
	}
	return name, err
}

// parseFilters parses a chain of filters applied to x (nil in filter and
// set blocks); inline is set when the first filter has no leading "|".
func (p *parser) parseFilters(x expr, inline bool) ([]*filterExpr, error) {
	var out []*filterExpr
	for inline || p.isOp("|") {
		if !inline {
			p.next()
		}
		inline = false
		off := p.cur().off
		name, err := p.dottedName()
		if err != nil {
			return nil, err
		}
		f := &filterExpr{off: off, x: x, name: name, fn: filters[name]}
		if f.fn == nil {
			p.unknown = append(p.unknown, unknownRef{off: off, what: "filter named '" + name + "'", soft: p.soft > 0})
		}
		if p.isOp("(") {
			if f.args, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
		}
		out = append(out, f)
		x = f
	}
	return out, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	off := p.next().off // "is"
	negated := p.skipName("not")
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	t := &testExpr{off: off, x: x, name: name, fn: tests[name]}
	if t.fn == nil {
		p.unknown = append(p.unknown, unknownRef{off: off, what: "test named '" + name + "'", soft: p.soft > 0})
	}
	c := p.cur()
	switch {
	case c.kind == tkOp && c.val == "(":
		if t.args, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case c.kind == tkName && c.val == "is":
		return nil, p.errorf(c.off, "tests cannot be chained with 'is'")
	case (c.kind == tkName && c.val != "else" && c.val != "or" && c.val != "and") ||
		c.kind == tkString || c.kind == tkInt || c.kind == tkFloat ||
		(c.kind == tkOp && (c.val == "[" || c.val == "{")):
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		t.args.pos = []expr{arg}
	}
	if negated {
		return &notExpr{x: t}, nil
	}
	return t, nil
}
