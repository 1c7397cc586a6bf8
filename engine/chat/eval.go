package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// RenderError reports a template that failed while rendering: an error the
// template raised itself with raise_exception (Raised is set: the template
// rejects the conversation, a client error), or a fault such as an undefined
// value used in arithmetic, a type error or an exceeded limit. Line and
// Column locate the expression; 0 when unknown. TooLarge is set when the
// render stopped at Options.MaxOutput: the prompt, or a value built for
// it, would have been larger.
type RenderError struct {
	Line, Column int
	Msg          string
	Raised       bool
	TooLarge     bool
}

func (e *RenderError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Loop control travels up as errors to the enclosing for statement.
var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// scope holds the variables of one level: the template's top level, one
// iteration of a loop body, a macro call or a with block. Assignments go to
// the innermost scope, so a {% set %} in a loop body is gone at the next
// iteration and after the loop, as in jinja2.
type scope struct {
	vars   map[string]value
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]value{}, parent: parent} }

func (s *scope) lookup(name string) (value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

// renderer is the state of one render; it is used by one goroutine.
type renderer struct {
	t     *Template
	out   *strings.Builder
	scope *scope

	steps, maxSteps int
	depth           int // macro calls in progress
	now             func() time.Time
	// reads, during a capability probe, notes what the template reads
	// of its variables; nil otherwise.
	reads *reads
}

func (r *renderer) errorAt(off int, format string, args ...any) *RenderError {
	e := &RenderError{Msg: fmt.Sprintf(format, args...)}
	if off >= 0 {
		e.Line, e.Column = r.t.src.position(off)
	}
	return e
}

// at gives err the position off unless it already has one (the innermost
// position wins) or it is a loop control signal.
func (r *renderer) at(off int, err error) error {
	if err == nil || err == errBreak || err == errContinue {
		return err
	}
	var re *RenderError
	if errors.As(err, &re) {
		if re.Line == 0 && off >= 0 {
			re.Line, re.Column = r.t.src.position(off)
		}
		return re
	}
	return r.errorAt(off, "%s", err.Error())
}

// charge counts n units of work against the step budget.
func (r *renderer) charge(n int) error {
	r.steps += n
	if r.steps > r.maxSteps {
		return &RenderError{Msg: fmt.Sprintf("template exceeded its budget of %d steps", r.maxSteps)}
	}
	return nil
}

// chargeBytes counts the work of building a string or list of n bytes or
// items, and rejects one larger than the output limit.
func (r *renderer) chargeBytes(n int) error {
	if n > r.t.opts.MaxOutput {
		return r.tooBig(fmt.Sprint(n))
	}
	return r.charge(n / 64)
}

func (r *renderer) tooBig(size string) error {
	return &RenderError{Msg: fmt.Sprintf("template built a value of %s, over the limit of %d", size, r.t.opts.MaxOutput), TooLarge: true}
}

func (r *renderer) eval(x expr) (value, error) {
	if err := r.charge(1); err != nil {
		return nil, err
	}
	return x.eval(r)
}

func (r *renderer) write(s string) error {
	if r.out.Len()+len(s) > r.t.opts.MaxOutput {
		return &RenderError{Msg: fmt.Sprintf("template output exceeds the limit of %d bytes", r.t.opts.MaxOutput), TooLarge: true}
	}
	r.out.WriteString(s)
	return r.charge(len(s) / 64)
}

func (r *renderer) execBody(body []stmt) error {
	for _, s := range body {
		if err := r.charge(1); err != nil {
			return err
		}
		if err := s.exec(r); err != nil {
			return err
		}
	}
	return nil
}

// capture renders body into a string instead of the output.
func (r *renderer) capture(body []stmt) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := r.execBody(body)
	r.out = saved
	return b.String(), err
}

func (s *textStmt) exec(r *renderer) error { return r.write(s.text) }

func (s *outputStmt) exec(r *renderer) error {
	v, err := r.eval(s.x)
	if err != nil {
		return r.at(s.off, err)
	}
	return r.at(s.off, r.write(str(v)))
}

func (s *ifStmt) exec(r *renderer) error {
	for i, c := range s.conds {
		v, err := r.eval(c)
		if err != nil {
			return err
		}
		if truth(v) {
			return r.execBody(s.bodies[i])
		}
	}
	return r.execBody(s.els)
}

// bind assigns v to the targets in sc, unpacking a sequence over several.
func bind(sc *scope, names []string, unpack bool, v value) error {
	if !unpack {
		sc.vars[names[0]] = v
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return fmt.Errorf("cannot unpack %s: %w", typeName(v), err)
	}
	if len(items) != len(names) {
		return fmt.Errorf("cannot unpack %d values into %d names", len(items), len(names))
	}
	for i, n := range names {
		sc.vars[n] = items[i]
	}
	return nil
}

func (s *forStmt) exec(r *renderer) error {
	v, err := r.eval(s.iter)
	if err != nil {
		return r.at(s.off, err)
	}
	if r.reads != nil {
		r.reads.iterated(v)
	}
	items, err := iterate(v)
	if err != nil {
		return r.at(s.off, err)
	}
	outer := r.scope
	defer func() { r.scope = outer }()
	if s.cond != nil {
		var kept []value
		for _, it := range items {
			sc := newScope(outer)
			if err := bind(sc, s.targets, s.unpack, it); err != nil {
				return r.at(s.off, err)
			}
			r.scope = sc
			ok, err := r.eval(s.cond)
			if err != nil {
				return r.at(s.off, err)
			}
			if truth(ok) {
				kept = append(kept, it)
			}
		}
		r.scope = outer
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(s.els)
	}
	for i, it := range items {
		sc := newScope(outer)
		if err := bind(sc, s.targets, s.unpack, it); err != nil {
			return r.at(s.off, err)
		}
		sc.vars["loop"] = &loopInfo{items: items, index0: i}
		r.scope = sc
		err := r.execBody(s.body)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

func (s *setStmt) exec(r *renderer) error {
	var v value
	var err error
	if s.x != nil {
		v, err = r.eval(s.x)
	} else {
		var text string
		text, err = r.capture(s.body)
		v = text
		for _, f := range s.filters {
			if err != nil {
				break
			}
			v, err = f.apply(r, v)
		}
	}
	if err != nil {
		return r.at(s.off, err)
	}
	if depthOf(v) > maxValueDepth {
		return r.errorAt(s.off, "value nested deeper than %d levels", maxValueDepth)
	}
	if s.attr != "" {
		obj, _ := r.scope.lookup(s.names[0])
		ns, ok := obj.(*namespace)
		if !ok {
			return r.errorAt(s.off, "cannot assign attribute on non-namespace object")
		}
		return r.at(s.off, ns.attrs.set(s.attr, v))
	}
	return r.at(s.off, bind(r.scope, s.names, s.unpack, v))
}

func (s *macroStmt) exec(r *renderer) error {
	r.scope.vars[s.name] = &macro{node: s, scope: r.scope}
	return nil
}

func (s *loopCtlStmt) exec(*renderer) error {
	if s.brk {
		return errBreak
	}
	return errContinue
}

func (s *blockStmt) exec(r *renderer) error { return r.execBody(s.body) }

func (s *withStmt) exec(r *renderer) error {
	sc := newScope(r.scope)
	for i, n := range s.names {
		v, err := r.eval(s.values[i])
		if err != nil {
			return err
		}
		sc.vars[n] = v
	}
	outer := r.scope
	r.scope = sc
	defer func() { r.scope = outer }()
	return r.execBody(s.body)
}

func (s *filterStmt) exec(r *renderer) error {
	text, err := r.capture(s.body)
	if err != nil {
		return err
	}
	var v value = text
	for _, f := range s.filters {
		if v, err = f.apply(r, v); err != nil {
			return r.at(s.off, err)
		}
	}
	return r.write(str(v))
}

// macro is a {% macro %} bound to the scope it was defined in.
type macro struct {
	node  *macroStmt
	scope *scope
}

// call renders the macro's body with the arguments bound; parameters the
// caller leaves out are Undefined unless they have a default, as in jinja2.
func (m *macro) call(r *renderer, a args) (value, error) {
	n := m.node
	if len(a.pos) > len(n.params) {
		return nil, fmt.Errorf("macro '%s' takes not more than %d argument(s)", n.name, len(n.params))
	}
	if r.depth >= r.t.opts.MaxDepth {
		return nil, &RenderError{Msg: fmt.Sprintf("macro calls nested deeper than %d", r.t.opts.MaxDepth)}
	}
	r.depth++
	outer := r.scope
	sc := newScope(m.scope)
	r.scope = sc
	defer func() { r.scope = outer; r.depth-- }()
	for i, p := range n.params {
		if i < len(a.pos) {
			sc.vars[p] = a.pos[i]
		}
	}
	for i, k := range a.kwNames {
		found := false
		for j, p := range n.params {
			if p == k {
				if j < len(a.pos) {
					return nil, fmt.Errorf("macro '%s' got multiple values for argument '%s'", n.name, k)
				}
				sc.vars[p] = a.kwVals[i]
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("macro '%s' was invoked with unknown keyword argument '%s'", n.name, k)
		}
	}
	firstDefault := len(n.params) - len(n.defaults)
	for i, p := range n.params {
		if _, ok := sc.vars[p]; ok {
			continue
		}
		if i >= firstDefault {
			v, err := r.eval(n.defaults[i-firstDefault])
			if err != nil {
				return nil, err
			}
			sc.vars[p] = v
		} else {
			sc.vars[p] = undefined{hint: fmt.Sprintf("'%s' is undefined", p)}
		}
	}
	return r.capture(n.body)
}

// loopInfo is the loop variable of one iteration.
type loopInfo struct {
	items  []value
	index0 int
}

func (l *loopInfo) attr(name string) (value, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index0 + 1), true
	case "index0":
		return int64(l.index0), true
	case "revindex":
		return int64(n - l.index0), true
	case "revindex0":
		return int64(n - l.index0 - 1), true
	case "first":
		return l.index0 == 0, true
	case "last":
		return l.index0 == n-1, true
	case "length":
		return int64(n), true
	case "depth":
		return int64(1), true
	case "depth0":
		return int64(0), true
	case "previtem":
		if l.index0 > 0 {
			return l.items[l.index0-1], true
		}
		return undefined{hint: "there is no previous item"}, true
	case "nextitem":
		if l.index0 < n-1 {
			return l.items[l.index0+1], true
		}
		return undefined{hint: "there is no next item"}, true
	case "cycle":
		return &boundMethod{recv: l, name: name}, true
	}
	return nil, false
}
