package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// testFunc is a jinja2 test, the name after "is".
type testFunc func(r *renderer, v value, a args) (bool, error)

var tests map[string]testFunc

func init() {
	is := func(f func(v value) bool) testFunc {
		return func(_ *renderer, v value, _ args) (bool, error) { return f(v), nil }
	}
	cmp := func(op string) testFunc {
		return func(_ *renderer, v value, a args) (bool, error) {
			if len(a.pos) != 1 {
				return false, fmt.Errorf("test %s takes one argument", op)
			}
			return compareOp(op, v, a.pos[0])
		}
	}
	tests = map[string]testFunc{
		"defined":   is(func(v value) bool { _, u := v.(undefined); return !u }),
		"undefined": is(func(v value) bool { _, u := v.(undefined); return u }),
		"none":      is(func(v value) bool { return v == nil }),
		"boolean":   is(func(v value) bool { _, ok := v.(bool); return ok }),
		"true":      is(func(v value) bool { return v == true }),
		"false":     is(func(v value) bool { return v == false }),
		"integer":   is(func(v value) bool { _, ok := v.(int64); return ok }),
		"float":     is(func(v value) bool { _, ok := v.(float64); return ok }),
		"number":    is(func(v value) bool { _, _, ok := number(v); return ok }),
		"string":    is(func(v value) bool { _, ok := v.(string); return ok }),
		"mapping":   is(func(v value) bool { _, ok := v.(*dict); return ok }),
		"iterable": is(func(v value) bool {
			switch v.(type) {
			case string, *list, *dict, undefined:
				return true
			}
			return false
		}),
		"sequence": is(func(v value) bool {
			switch v.(type) {
			case string, *list, *dict, undefined:
				return true
			}
			return false
		}),
		"callable": is(func(v value) bool {
			switch v.(type) {
			case *macro, *builtin, *boundMethod:
				return true
			}
			return false
		}),
		"lower":       is(func(v value) bool { return isCase(str(v), unicode.IsLower) }),
		"upper":       is(func(v value) bool { return isCase(str(v), unicode.IsUpper) }),
		"escaped":     is(func(value) bool { return false }),
		"odd":         parity(1),
		"even":        parity(0),
		"divisibleby": divisibleBy,
		"sameas": func(_ *renderer, v value, a args) (bool, error) {
			if len(a.pos) != 1 {
				return false, errors.New("test sameas takes one argument")
			}
			return sameAs(v, a.pos[0]), nil
		},
		"in": func(_ *renderer, v value, a args) (bool, error) {
			if len(a.pos) != 1 {
				return false, errors.New("test in takes one argument")
			}
			return contains(a.pos[0], v)
		},
		"eq": cmp("=="), "equalto": cmp("=="), "==": cmp("=="),
		"ne": cmp("!="), "!=": cmp("!="),
		"lt": cmp("<"), "lessthan": cmp("<"), "<": cmp("<"),
		"le": cmp("<="), "<=": cmp("<="),
		"gt": cmp(">"), "greaterthan": cmp(">"), ">": cmp(">"),
		"ge": cmp(">="), ">=": cmp(">="),
	}
}

func parity(rem int64) testFunc {
	return func(_ *renderer, v value, _ args) (bool, error) {
		n, ok := intOf(v)
		if !ok {
			return false, fmt.Errorf("test odd/even needs an integer, not %s", typeName(v))
		}
		return ((n%2)+2)%2 == rem, nil
	}
}

func divisibleBy(_ *renderer, v value, a args) (bool, error) {
	if len(a.pos) != 1 {
		return false, errors.New("test divisibleby takes one argument")
	}
	_, _, ok1 := number(v)
	_, _, ok2 := number(a.pos[0])
	if !ok1 || !ok2 {
		return false, fmt.Errorf("test divisibleby needs numbers, not %s and %s", typeName(v), typeName(a.pos[0]))
	}
	m, err := arith(nil, "%", v, a.pos[0])
	if err != nil {
		return false, err
	}
	return equal(m, int64(0)), nil
}

// sameAs approximates Python's "is": identity for containers, equality of
// None, booleans, numbers of one type and strings (which CPython interns).
func sameAs(a, b value) bool {
	switch x := a.(type) {
	case nil, bool, int64, float64, string:
		return fmt.Sprintf("%T", a) == fmt.Sprintf("%T", b) && a == b
	case *list:
		y, ok := b.(*list)
		return ok && x == y
	case *dict:
		y, ok := b.(*dict)
		return ok && x == y
	}
	return false
}

// globals are the names every template sees: jinja2's range, dict and
// namespace, and Hugging Face's raise_exception and strftime_now.
var globals map[string]value

// maxRange is the sandbox's limit on range(), as in jinja2's sandbox.
const maxRange = 100000

func init() {
	globals = map[string]value{
		"range":           &builtin{name: "range", fn: gRange},
		"dict":            &builtin{name: "dict", fn: gDict},
		"namespace":       &builtin{name: "namespace", fn: gNamespace},
		"raise_exception": &builtin{name: "raise_exception", fn: gRaise},
		"strftime_now":    &builtin{name: "strftime_now", fn: gStrftimeNow},
	}
}

func gRange(r *renderer, a args) (value, error) {
	if len(a.kwNames) > 0 || len(a.pos) == 0 || len(a.pos) > 3 {
		return nil, errors.New("range expects 1 to 3 integer arguments")
	}
	var n [3]int64
	for i, v := range a.pos {
		x, ok := intOf(v)
		if !ok {
			return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(v))
		}
		n[i] = x
	}
	start, stop, step := int64(0), n[0], int64(1)
	if len(a.pos) > 1 {
		start, stop = n[0], n[1]
	}
	if len(a.pos) > 2 {
		step = n[2]
	}
	if step == 0 {
		return nil, errors.New("range() arg 3 must not be zero")
	}
	count := int64(0)
	if step > 0 && stop > start {
		count = (stop - start + step - 1) / step
	} else if step < 0 && start > stop {
		count = (start - stop - step - 1) / -step
	}
	if count > maxRange {
		return nil, fmt.Errorf("range too big: the sandbox blocks ranges larger than %d", maxRange)
	}
	if err := r.charge(int(count)); err != nil {
		return nil, err
	}
	items := make([]value, count)
	for i := range items {
		items[i] = start + int64(i)*step
	}
	return newList(items), nil
}

// dictFrom builds a dict from an optional mapping or sequence of pairs and
// keyword arguments, as dict() and namespace() accept them.
func dictFrom(name string, a args) (*dict, error) {
	d := newDict()
	if len(a.pos) > 1 {
		return nil, fmt.Errorf("%s expected at most 1 positional argument", name)
	}
	if len(a.pos) == 1 {
		switch src := a.pos[0].(type) {
		case *dict:
			for i, k := range src.keys {
				if err := d.set(k, src.vals[i]); err != nil {
					return nil, err
				}
			}
		case *list:
			for _, it := range src.items {
				pair, ok := it.(*list)
				if !ok || len(pair.items) != 2 {
					return nil, fmt.Errorf("%s: sequence elements must be pairs", name)
				}
				if err := d.set(pair.items[0], pair.items[1]); err != nil {
					return nil, err
				}
			}
		default:
			return nil, fmt.Errorf("%s: cannot convert %s to a mapping", name, typeName(src))
		}
	}
	for i, k := range a.kwNames {
		if err := d.set(k, a.kwVals[i]); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func gDict(_ *renderer, a args) (value, error) { return dictFrom("dict", a) }

func gNamespace(_ *renderer, a args) (value, error) {
	d, err := dictFrom("namespace", a)
	if err != nil {
		return nil, err
	}
	return &namespace{attrs: d}, nil
}

func gRaise(_ *renderer, a args) (value, error) {
	msg := ""
	if len(a.pos) > 0 {
		msg = str(a.pos[0])
	}
	return nil, &RenderError{Msg: msg, Raised: true}
}

func gStrftimeNow(r *renderer, a args) (value, error) {
	p, err := a.bind("strftime_now", "format")
	if err != nil {
		return nil, err
	}
	f, ok := p[0].(string)
	if !ok {
		return nil, errors.New("strftime_now() takes a format string")
	}
	return strftime(r.now(), f), nil
}

var (
	weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months   = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// strftime formats t as C's strftime in the C locale does, with glibc's "-"
// flag (no padding) that chat templates use; unknown directives are kept.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		noPad := false
		if f[i] == '-' && i+1 < len(f) {
			noPad = true
			i++
		}
		num := func(n, width int) {
			if noPad {
				fmt.Fprintf(&b, "%d", n)
			} else {
				fmt.Fprintf(&b, "%0*d", width, n)
			}
		}
		h12 := t.Hour() % 12
		if h12 == 0 {
			h12 = 12
		}
		switch f[i] {
		case 'a':
			b.WriteString(weekdays[t.Weekday()][:3])
		case 'A':
			b.WriteString(weekdays[t.Weekday()])
		case 'b', 'h':
			b.WriteString(months[t.Month()-1][:3])
		case 'B':
			b.WriteString(months[t.Month()-1])
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'm':
			num(int(t.Month()), 2)
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num(h12, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'w':
			fmt.Fprintf(&b, "%d", t.Weekday())
		case 'Z', 'z':
		case 'F':
			fmt.Fprintf(&b, "%d-%02d-%02d", t.Year(), t.Month(), t.Day())
		case 'T':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
