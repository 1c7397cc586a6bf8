package chat

import (
	"errors"
	"fmt"
)

// args are the evaluated arguments of a call, filter or test (the filtered
// value or tested value itself is not among them).
type args struct {
	pos     []value
	kwNames []string
	kwVals  []value
}

// absent marks a parameter the caller did not pass.
type absent struct{}

func isAbsent(v value) bool { _, ok := v.(absent); return ok }

// or returns v, or def when v was not passed.
func or(v, def value) value {
	if isAbsent(v) {
		return def
	}
	return v
}

// bind matches the arguments to the named parameters, positional first,
// like a Python signature; parameters not passed are absent{}.
func (a args) bind(fname string, params ...string) ([]value, error) {
	if len(a.pos) > len(params) {
		return nil, fmt.Errorf("%s() takes at most %d argument(s) (%d given)", fname, len(params), len(a.pos))
	}
	out := make([]value, len(params))
	for i := range out {
		out[i] = absent{}
	}
	copy(out, a.pos)
	for i, k := range a.kwNames {
		j := -1
		for n, p := range params {
			if p == k {
				j = n
			}
		}
		if j < 0 {
			return nil, fmt.Errorf("%s() got an unexpected keyword argument '%s'", fname, k)
		}
		if j < len(a.pos) {
			return nil, fmt.Errorf("%s() got multiple values for argument '%s'", fname, k)
		}
		out[j] = a.kwVals[i]
	}
	return out, nil
}

// boundMethod is a method looked up on a value, such as "abc".upper.
type boundMethod struct {
	recv value
	name string
}

// builtin is a global function: range, namespace, dict, raise_exception,
// strftime_now.
type builtin struct {
	name string
	fn   func(r *renderer, a args) (value, error)
}

var (
	dictMethods       = map[string]bool{"items": true, "keys": true, "values": true, "get": true}
	unsafeDictMethods = map[string]bool{"pop": true, "popitem": true, "update": true, "setdefault": true, "clear": true}
	unsafeListMethods = map[string]bool{"append": true, "extend": true, "insert": true, "pop": true, "remove": true, "sort": true, "reverse": true, "clear": true}
)

func callMethod(r *renderer, m *boundMethod, a args) (value, error) {
	if r.reads != nil {
		r.reads.use(m.recv)
	}
	switch recv := m.recv.(type) {
	case string:
		return strMethods[m.name](r, recv, a)
	case *dict:
		return dictMethod(recv, m.name, a)
	case *list:
		p, err := a.bind(m.name, "value")
		if err != nil || isAbsent(p[0]) {
			return nil, fmt.Errorf("%s() takes exactly one argument", m.name)
		}
		n := int64(0)
		for i, it := range recv.items {
			if equal(it, p[0]) {
				if m.name == "index" {
					return int64(i), nil
				}
				n++
			}
		}
		if m.name == "index" {
			return nil, fmt.Errorf("%s is not in list", repr(p[0]))
		}
		return n, nil
	case *loopInfo:
		if len(a.pos) == 0 {
			return nil, errors.New("no items for cycling given")
		}
		return a.pos[recv.index0%len(a.pos)], nil
	}
	return nil, fmt.Errorf("'%s' object has no method '%s'", typeName(m.recv), m.name)
}

func dictMethod(d *dict, name string, a args) (value, error) {
	switch name {
	case "get":
		p, err := a.bind("get", "key", "default")
		if err != nil {
			return nil, err
		}
		if isAbsent(p[0]) {
			return nil, errors.New("get expected at least 1 argument, got 0")
		}
		if v, ok := d.get(p[0]); ok {
			return v, nil
		}
		return or(p[1], nil), nil
	case "keys":
		return newList(append([]value(nil), d.keys...)), nil
	case "values":
		return newList(append([]value(nil), d.vals...)), nil
	}
	return dictItems(d), nil
}

func dictItems(d *dict) *list {
	items := make([]value, len(d.keys))
	for i, k := range d.keys {
		items[i] = newTuple(k, d.vals[i])
	}
	return newList(items)
}
