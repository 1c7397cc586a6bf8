package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// undefinedError is the error of using an Undefined where jinja2 raises.
func undefinedError(u undefined) error { return errors.New(u.hint) }

func (x *constExpr) eval(*renderer) (value, error) { return x.v, nil }

func (x *nameExpr) eval(r *renderer) (value, error) {
	if v, ok := r.scope.lookup(x.name); ok {
		if r.reads != nil {
			r.reads.use(v)
		}
		return v, nil
	}
	if g, ok := globals[x.name]; ok {
		return g, nil
	}
	return undefined{hint: fmt.Sprintf("'%s' is undefined", x.name)}, nil
}

func (x *listExpr) eval(r *renderer) (value, error) {
	items := make([]value, len(x.items))
	for i, it := range x.items {
		v, err := r.eval(it)
		if err != nil {
			return nil, err
		}
		items[i] = v
	}
	return mkList(items, x.tuple), nil
}

func (x *dictExpr) eval(r *renderer) (value, error) {
	d := newDict()
	for i := range x.keys {
		k, err := r.eval(x.keys[i])
		if err != nil {
			return nil, err
		}
		v, err := r.eval(x.vals[i])
		if err != nil {
			return nil, err
		}
		if err := d.set(k, v); err != nil {
			return nil, r.at(x.off, err)
		}
	}
	return d, nil
}

func (x *attrExpr) eval(r *renderer) (value, error) {
	obj, err := r.eval(x.x)
	if err != nil {
		return nil, err
	}
	v, err := getattr(obj, x.name)
	if r.reads != nil {
		r.reads.lookup(obj, x.name, v)
	}
	return v, r.at(x.off, err)
}

func (x *itemExpr) eval(r *renderer) (value, error) {
	obj, err := r.eval(x.x)
	if err != nil {
		return nil, err
	}
	k, err := r.eval(x.key)
	if err != nil {
		return nil, err
	}
	v, err := getitem(obj, k)
	if r.reads != nil {
		r.reads.lookup(obj, k, v)
	}
	return v, r.at(x.off, err)
}

// objectName is how jinja2 names an object in "has no attribute" messages.
func objectName(v value) string {
	if v == nil {
		return "None"
	}
	return typeName(v) + " object"
}

// getattr is jinja2's sandboxed attribute lookup: methods and attributes
// first, then (for dicts) the item of that name; missing gives Undefined,
// and only Undefined itself refuses attribute access.
func getattr(obj value, name string) (value, error) {
	if u, ok := obj.(undefined); ok {
		return nil, undefinedError(u)
	}
	missing := undefined{hint: fmt.Sprintf("'%s' has no attribute '%s'", objectName(obj), name)}
	if strings.HasPrefix(name, "_") {
		return missing, nil
	}
	switch o := obj.(type) {
	case *dict:
		if dictMethods[name] {
			return &boundMethod{recv: o, name: name}, nil
		}
		if unsafeDictMethods[name] {
			return undefined{hint: fmt.Sprintf("access to attribute '%s' of 'dict' object is unsafe", name)}, nil
		}
		if v, ok := o.get(name); ok {
			return v, nil
		}
	case *namespace:
		if v, ok := o.attrs.get(name); ok {
			return v, nil
		}
	case string:
		if _, ok := strMethods[name]; ok {
			return &boundMethod{recv: o, name: name}, nil
		}
	case *list:
		if name == "index" || name == "count" {
			return &boundMethod{recv: o, name: name}, nil
		}
		if unsafeListMethods[name] {
			return undefined{hint: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe", name, typeName(o))}, nil
		}
	case *loopInfo:
		if v, ok := o.attr(name); ok {
			return v, nil
		}
	}
	return missing, nil
}

// getitem is jinja2's subscript: the item first, then for a string key the
// attribute of that name; missing gives Undefined.
func getitem(obj value, key value) (value, error) {
	if u, ok := obj.(undefined); ok {
		return nil, undefinedError(u)
	}
	switch o := obj.(type) {
	case *dict:
		if v, ok := o.get(key); ok {
			return v, nil
		}
	case *list:
		if i, ok := intOf(key); ok {
			if i < 0 {
				i += int64(len(o.items))
			}
			if i >= 0 && i < int64(len(o.items)) {
				return o.items[i], nil
			}
			return undefined{hint: fmt.Sprintf("%s has no element %s", objectName(o), repr(key))}, nil
		}
	case string:
		if i, ok := intOf(key); ok {
			rs := []rune(o)
			if i < 0 {
				i += int64(len(rs))
			}
			if i >= 0 && i < int64(len(rs)) {
				return string(rs[i]), nil
			}
			return undefined{hint: fmt.Sprintf("%s has no element %s", objectName(o), repr(key))}, nil
		}
	}
	if name, ok := key.(string); ok {
		return getattr(obj, name)
	}
	return undefined{hint: fmt.Sprintf("%s has no element %s", objectName(obj), repr(key))}, nil
}

func (x *sliceExpr) eval(r *renderer) (value, error) {
	obj, err := r.eval(x.x)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, b := range []expr{x.lo, x.hi, x.stride} {
		if b == nil {
			continue
		}
		v, err := r.eval(b)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := intOf(v)
		if !ok {
			return nil, r.errorAt(x.off, "slice indices must be integers or None, not %s", typeName(v))
		}
		bounds[i] = &n
	}
	v, err := slice(obj, bounds[0], bounds[1], bounds[2])
	return v, r.at(x.off, err)
}

// slice is Python's seq[lo:hi:stride] over a list, tuple or str.
func slice(obj value, lo, hi, stride *int64) (value, error) {
	var n int
	var rs []rune
	switch o := obj.(type) {
	case undefined:
		return nil, undefinedError(o)
	case *list:
		n = len(o.items)
	case string:
		rs = []rune(o)
		n = len(rs)
	default:
		return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
	}
	step := int64(1)
	if stride != nil {
		step = *stride
	}
	if step == 0 {
		return nil, errors.New("slice step cannot be zero")
	}
	clamp := func(b *int64, def int64) int64 {
		if b == nil {
			return def
		}
		v := *b
		if v < 0 {
			v += int64(n)
		}
		if step > 0 {
			return max(0, min(v, int64(n)))
		}
		return max(-1, min(v, int64(n)-1))
	}
	var start, stop int64
	if step > 0 {
		start, stop = clamp(lo, 0), clamp(hi, int64(n))
	} else {
		start, stop = clamp(lo, int64(n)-1), clamp(hi, -1)
	}
	var idx []int64
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		idx = append(idx, i)
	}
	if o, ok := obj.(*list); ok {
		items := make([]value, len(idx))
		for j, i := range idx {
			items[j] = o.items[i]
		}
		return mkList(items, o.tuple), nil
	}
	out := make([]rune, len(idx))
	for j, i := range idx {
		out[j] = rs[i]
	}
	return string(out), nil
}

func (x *callExpr) eval(r *renderer) (value, error) {
	fn, err := r.eval(x.fn)
	if err != nil {
		return nil, err
	}
	a, err := r.evalArgs(x.args)
	if err != nil {
		return nil, err
	}
	v, err := call(r, fn, a)
	return v, r.at(x.off, err)
}

func (r *renderer) evalArgs(c callArgs) (args, error) {
	a := args{pos: make([]value, len(c.pos)), kwNames: c.kwNames, kwVals: make([]value, len(c.kwVals))}
	for i, x := range c.pos {
		v, err := r.eval(x)
		if err != nil {
			return a, err
		}
		a.pos[i] = v
	}
	for i, x := range c.kwVals {
		v, err := r.eval(x)
		if err != nil {
			return a, err
		}
		a.kwVals[i] = v
	}
	return a, nil
}

func call(r *renderer, fn value, a args) (value, error) {
	switch f := fn.(type) {
	case *builtin:
		return f.fn(r, a)
	case *boundMethod:
		return callMethod(r, f, a)
	case *macro:
		return f.call(r, a)
	case undefined:
		return nil, undefinedError(f)
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func (x *filterExpr) eval(r *renderer) (value, error) {
	v, err := r.eval(x.x)
	if err != nil {
		return nil, err
	}
	return x.apply(r, v)
}

// apply runs the filter on v, the value of its input expression.
func (x *filterExpr) apply(r *renderer, v value) (value, error) {
	if x.fn == nil {
		return nil, r.errorAt(x.off, "no filter named '%s'", x.name)
	}
	a, err := r.evalArgs(x.args)
	if err != nil {
		return nil, err
	}
	if r.reads != nil {
		r.reads.filtered(x.name, v)
	}
	out, err := x.fn(r, v, a)
	return out, r.at(x.off, err)
}

func (x *testExpr) eval(r *renderer) (value, error) {
	if x.fn == nil {
		return nil, r.errorAt(x.off, "no test named '%s'", x.name)
	}
	v, err := r.eval(x.x)
	if err != nil {
		return nil, err
	}
	a, err := r.evalArgs(x.args)
	if err != nil {
		return nil, err
	}
	ok, err := x.fn(r, v, a)
	return ok, r.at(x.off, err)
}

func (x *binExpr) eval(r *renderer) (value, error) {
	l, err := r.eval(x.l)
	if err != nil {
		return nil, err
	}
	rv, err := r.eval(x.r)
	if err != nil {
		return nil, err
	}
	v, err := arith(r, x.op, l, rv)
	return v, r.at(x.off, err)
}

func (x *concatExpr) eval(r *renderer) (value, error) {
	var b strings.Builder
	for _, it := range x.items {
		v, err := r.eval(it)
		if err != nil {
			return nil, err
		}
		b.WriteString(str(v))
	}
	return b.String(), r.at(x.off, r.chargeBytes(b.Len()))
}

func (x *compareExpr) eval(r *renderer) (value, error) {
	l, err := r.eval(x.first)
	if err != nil {
		return nil, err
	}
	for i, op := range x.ops {
		rv, err := r.eval(x.rest[i])
		if err != nil {
			return nil, err
		}
		ok, err := compareOp(op, l, rv)
		if err != nil {
			return nil, r.at(x.off, err)
		}
		if !ok {
			return false, nil
		}
		l = rv
	}
	return true, nil
}

func compareOp(op string, a, b value) (bool, error) {
	switch op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "in":
		return contains(b, a)
	case "notin":
		ok, err := contains(b, a)
		return !ok, err
	}
	for _, v := range []value{a, b} {
		if u, ok := v.(undefined); ok {
			return false, undefinedError(u)
		}
	}
	c, err := compare(a, b, op)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// contains is Python's "item in container".
func contains(container, item value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case *list:
		for _, it := range c.items {
			if equal(it, item) {
				return true, nil
			}
		}
		return false, nil
	case *dict:
		if _, err := dictKey(item); err != nil {
			return false, err
		}
		_, ok := c.get(item)
		return ok, nil
	case undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

// iterate lists what a for loop over v visits: list items, the characters
// of a string, the keys of a dict; Undefined iterates as empty.
func iterate(v value) ([]value, error) {
	switch o := v.(type) {
	case *list:
		return o.items, nil
	case string:
		out := make([]value, 0, utf8.RuneCountInString(o))
		for _, c := range o {
			out = append(out, string(c))
		}
		return out, nil
	case *dict:
		return o.keys, nil
	case undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func (x *andExpr) eval(r *renderer) (value, error) {
	l, err := r.eval(x.l)
	if err != nil || !truth(l) {
		return l, err
	}
	return r.eval(x.r)
}

func (x *orExpr) eval(r *renderer) (value, error) {
	l, err := r.eval(x.l)
	if err != nil || truth(l) {
		return l, err
	}
	return r.eval(x.r)
}

func (x *notExpr) eval(r *renderer) (value, error) {
	v, err := r.eval(x.x)
	return !truth(v), err
}

func (x *condExpr) eval(r *renderer) (value, error) {
	c, err := r.eval(x.test)
	if err != nil {
		return nil, err
	}
	if truth(c) {
		return r.eval(x.yes)
	}
	if x.no == nil {
		return undefined{hint: "the inline if expression evaluated to false and no else section was defined"}, nil
	}
	return r.eval(x.no)
}

func (x *unaryExpr) eval(r *renderer) (value, error) {
	v, err := r.eval(x.x)
	if err != nil {
		return nil, err
	}
	if u, ok := v.(undefined); ok {
		return nil, r.at(x.off, undefinedError(u))
	}
	if i, ok := intOf(v); ok {
		if !x.neg {
			return i, nil
		}
		if i == math.MinInt64 {
			return nil, r.errorAt(x.off, "integer overflow")
		}
		return -i, nil
	}
	if f, ok := v.(float64); ok {
		if x.neg {
			return -f, nil
		}
		return f, nil
	}
	op := "+"
	if x.neg {
		op = "-"
	}
	return nil, r.errorAt(x.off, "bad operand type for unary %s: '%s'", op, typeName(v))
}
