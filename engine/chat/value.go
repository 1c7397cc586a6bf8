package chat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// value is a template value with Python's semantics, as jinja2 sees it:
//
//	nil          None
//	undefined    jinja2's default Undefined (prints empty, falsy; most uses fail)
//	bool         bool
//	int64        int (overflow is an error, not a promotion to big integers)
//	float64      float
//	string       str (UTF-8; indexing and length count code points)
//	*list        list, or tuple when tuple is set
//	*dict        dict (insertion-ordered)
//	*namespace   the namespace() object of {% set ns.x = ... %}
//	*macro, *builtin, *boundMethod   callables
//	*loopInfo    the loop variable of a for loop
//
// Values made while rendering belong to that render; lists and dicts are
// never mutated after construction (the sandbox forbids it), so sharing them
// between variables is safe.
type value = any

// undefined is a missing variable, attribute or item. hint says what was
// missing, for the error raised when the value is used in a way jinja2's
// Undefined rejects (arithmetic, attribute access, calls, comparisons).
type undefined struct{ hint string }

type list struct {
	items []value
	tuple bool
	depth int // nesting: 1 + the deepest item's
}

func newList(items []value) *list   { return mkList(items, false) }
func newTuple(items ...value) *list { return mkList(items, true) }

func mkList(items []value, tuple bool) *list {
	d := 0
	for _, it := range items {
		d = max(d, depthOf(it))
	}
	return &list{items: items, tuple: tuple, depth: d + 1}
}

// maxValueDepth bounds the nesting of values a template stores, so that
// printing, comparing or serialising them cannot recurse without bound.
const maxValueDepth = 500

// depthOf is the nesting depth of v: 0 for scalars.
func depthOf(v value) int {
	switch x := v.(type) {
	case *list:
		return x.depth
	case *dict:
		return x.depth
	case *namespace:
		return x.attrs.depth
	}
	return 0
}

// dict is an insertion-ordered mapping. Keys are str, int (bool and integral
// floats fold into int, as Python's hashing does) or None.
type dict struct {
	keys  []value
	vals  []value
	index map[any]int
	depth int
}

type noneKey struct{}

func newDict() *dict { return &dict{index: map[any]int{}, depth: 1} }

func dictKey(k value) (any, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case int64:
		return k, nil
	case bool:
		if k {
			return int64(1), nil
		}
		return int64(0), nil
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return int64(k), nil
		}
		return k, nil
	case nil:
		return noneKey{}, nil
	}
	return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
}

func (d *dict) set(k, v value) error {
	key, err := dictKey(k)
	if err != nil {
		return err
	}
	d.depth = max(d.depth, depthOf(v)+1)
	if i, ok := d.index[key]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[key] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

func (d *dict) get(k value) (value, bool) {
	key, err := dictKey(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[key]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *dict) len() int { return len(d.keys) }

// namespace is jinja2's namespace(): the one object a template may assign
// attributes to, which is how state escapes a loop body's scope.
type namespace struct{ attrs *dict }

func typeName(v value) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *list:
		if v.tuple {
			return "tuple"
		}
		return "list"
	case *dict:
		return "dict"
	case *namespace:
		return "Namespace"
	case *macro:
		return "Macro"
	case *builtin, *boundMethod:
		return "builtin_function_or_method"
	case *loopInfo:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// truth is Python's bool(v); Undefined is false.
func truth(v value) bool {
	switch v := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *list:
		return len(v.items) > 0
	case *dict:
		return v.len() > 0
	}
	return true
}

// str is Python's str(v) as jinja2 prints it; Undefined prints empty.
func str(v value) string {
	switch v.(type) {
	case string:
		return v.(string)
	case undefined:
		return ""
	}
	var p printer
	p.str(v)
	return p.b.String()
}

// repr is Python's repr(v).
func repr(v value) string {
	var p printer
	p.repr(v)
	return p.b.String()
}

// printer writes str and repr of nested values. A dict met again while it
// is being printed shows as {...}, as Python shows a recursive container;
// that can only happen through a namespace holding itself.
type printer struct {
	b      strings.Builder
	active map[*dict]bool
}

func (p *printer) str(v value) {
	switch v := v.(type) {
	case string:
		p.b.WriteString(v)
	case undefined:
	case *namespace:
		p.b.WriteString("<Namespace ")
		p.repr(v.attrs)
		p.b.WriteString(">")
	case *macro:
		p.b.WriteString("<Macro '" + v.node.name + "'>")
	case *builtin:
		p.b.WriteString("<built-in function " + v.name + ">")
	case *boundMethod:
		p.b.WriteString("<built-in method " + v.name + " of " + typeName(v.recv) + " object>")
	case *loopInfo:
		p.b.WriteString("<LoopContext " + strconv.Itoa(v.index0+1) + "/" + strconv.Itoa(len(v.items)) + ">")
	default:
		p.repr(v)
	}
}

func (p *printer) repr(v value) {
	b := &p.b
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case undefined:
		b.WriteString("Undefined")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(floatRepr(v))
	case string:
		b.WriteString(strRepr(v))
	case *list:
		open, close := "[", "]"
		if v.tuple {
			open, close = "(", ")"
		}
		b.WriteString(open)
		for i, it := range v.items {
			if i > 0 {
				b.WriteString(", ")
			}
			p.repr(it)
		}
		if v.tuple && len(v.items) == 1 {
			b.WriteByte(',')
		}
		b.WriteString(close)
	case *dict:
		if p.active[v] {
			b.WriteString("{...}")
			return
		}
		if p.active == nil {
			p.active = map[*dict]bool{}
		}
		p.active[v] = true
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			p.repr(k)
			b.WriteString(": ")
			p.repr(v.vals[i])
		}
		b.WriteByte('}')
		delete(p.active, v)
	default:
		p.str(v)
	}
}

// floatRepr is Python's repr(float): the shortest string that round-trips,
// in positional notation for exponents -4..15 (with ".0" when integral) and
// in exponent notation otherwise.
func floatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp >= 16 || exp < -4 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// strRepr is Python's repr(str): single quotes unless the text has a single
// quote and no double quote; unprintable characters escaped.
func strRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteRune(r)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// number returns v as a float and whether v is an int (bool counts as int,
// as in Python); ok is false for non-numbers.
func number(v value) (f float64, isInt bool, ok bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true, true
		}
		return 0, true, true
	case int64:
		return float64(v), true, true
	case float64:
		return v, false, true
	}
	return 0, false, false
}

func intOf(v value) (int64, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int64:
		return v, true
	}
	return 0, false
}

// equal is Python's ==.
func equal(a, b value) bool {
	if fa, ia, ok := number(a); ok {
		fb, ib, ok := number(b)
		if !ok {
			return false
		}
		if ia && ib {
			x, _ := intOf(a)
			y, _ := intOf(b)
			return x == y
		}
		return fa == fb
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case undefined:
		_, ok := b.(undefined)
		return ok
	case string:
		s, ok := b.(string)
		return ok && a == s
	case *list:
		l, ok := b.(*list)
		if !ok || l.tuple != a.tuple || len(l.items) != len(a.items) {
			return false
		}
		for i := range a.items {
			if !equal(a.items[i], l.items[i]) {
				return false
			}
		}
		return true
	case *dict:
		d, ok := b.(*dict)
		if !ok || d.len() != a.len() {
			return false
		}
		for i, k := range a.keys {
			w, ok := d.get(k)
			if !ok || !equal(a.vals[i], w) {
				return false
			}
		}
		return true
	}
	return a == b
}

// compare orders a and b as Python's < does: numbers, strings (by code
// point) and sequences of those; anything else is a TypeError.
func compare(a, b value, op string) (int, error) {
	if fa, ia, ok := number(a); ok {
		if fb, ib, ok := number(b); ok {
			if ia && ib {
				x, _ := intOf(a)
				y, _ := intOf(b)
				return cmp3(x < y, x > y), nil
			}
			return cmp3(fa < fb, fa > fb), nil
		}
	}
	switch a := a.(type) {
	case string:
		if s, ok := b.(string); ok {
			return strings.Compare(a, s), nil
		}
	case *list:
		if l, ok := b.(*list); ok && l.tuple == a.tuple {
			for i := 0; i < len(a.items) && i < len(l.items); i++ {
				if equal(a.items[i], l.items[i]) {
					continue
				}
				return compare(a.items[i], l.items[i], op)
			}
			return cmp3(len(a.items) < len(l.items), len(a.items) > len(l.items)), nil
		}
	}
	return 0, fmt.Errorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
}

func cmp3(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

// runeLen is len() of a Python str.
func runeLen(s string) int { return utf8.RuneCountInString(s) }

// isSpace is Python's str.isspace for one character: Go's Unicode White_Space
// plus the ASCII separators U+001C..U+001F that Python also strips.
func isSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }
