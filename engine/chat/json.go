package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// jsonOptions are the json.dumps arguments Hugging Face's tojson exposes.
type jsonOptions struct {
	ensureASCII bool
	indent      value // None, an int (spaces) or a string
	separators  value // None or an (item, key) pair of strings
	sortKeys    bool
}

// maxJSONDepth bounds recursion; template values cannot be cyclic, but a
// deeply nested request value could still be deep.
const maxJSONDepth = 500

// toJSON is Python's json.dumps with the given options: ", " and ": "
// separators (","  and ": " when indenting), floats as Python's repr, NaN and
// Infinity allowed, non-string dict keys converted as Python converts them.
func toJSON(v value, o jsonOptions) (string, error) {
	e := jsonEncoder{opts: o, itemSep: ", ", keySep: ": "}
	switch ind := o.indent.(type) {
	case nil:
	case string:
		e.indent, e.pretty = ind, true
	default:
		n, ok := intOf(ind)
		if !ok {
			return "", fmt.Errorf("tojson indent must be an int or a string, not %s", typeName(ind))
		}
		e.indent, e.pretty = strings.Repeat(" ", int(max(0, min(n, 1<<10)))), true
		e.itemSep = ","
	}
	if e.pretty {
		e.itemSep = ","
	}
	if o.separators != nil {
		l, ok := o.separators.(*list)
		if !ok || len(l.items) != 2 {
			return "", fmt.Errorf("tojson separators must be an (item, key) pair")
		}
		is, ok1 := l.items[0].(string)
		ks, ok2 := l.items[1].(string)
		if !ok1 || !ok2 {
			return "", fmt.Errorf("tojson separators must be strings")
		}
		e.itemSep, e.keySep = is, ks
	}
	if err := e.encode(v, 0); err != nil {
		return "", err
	}
	return e.b.String(), nil
}

type jsonEncoder struct {
	b       strings.Builder
	opts    jsonOptions
	pretty  bool
	indent  string
	itemSep string
	keySep  string
}

func (e *jsonEncoder) newline(level int) {
	if e.pretty {
		e.b.WriteByte('\n')
		e.b.WriteString(strings.Repeat(e.indent, level))
	}
}

func (e *jsonEncoder) encode(v value, level int) error {
	if level > maxJSONDepth {
		return fmt.Errorf("tojson: value nested deeper than %d", maxJSONDepth)
	}
	switch x := v.(type) {
	case nil:
		e.b.WriteString("null")
	case bool:
		e.b.WriteString(strconv.FormatBool(x))
	case int64:
		e.b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		e.b.WriteString(jsonFloat(x))
	case string:
		e.str(x)
	case *list:
		if len(x.items) == 0 {
			e.b.WriteString("[]")
			return nil
		}
		e.b.WriteByte('[')
		for i, it := range x.items {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(level + 1)
			if err := e.encode(it, level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.b.WriteByte(']')
	case *dict:
		if x.len() == 0 {
			e.b.WriteString("{}")
			return nil
		}
		keys := make([]string, x.len())
		for i, k := range x.keys {
			s, err := jsonKey(k)
			if err != nil {
				return err
			}
			keys[i] = s
		}
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		if e.opts.sortKeys {
			var cmpErr error
			sort.SliceStable(order, func(i, j int) bool {
				c, err := compare(x.keys[order[i]], x.keys[order[j]], "<")
				if err != nil && cmpErr == nil {
					cmpErr = err
				}
				return c < 0
			})
			if cmpErr != nil {
				return cmpErr
			}
		}
		e.b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(level + 1)
			e.str(keys[i])
			e.b.WriteString(e.keySep)
			if err := e.encode(x.vals[i], level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.b.WriteByte('}')
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return floatRepr(f)
}

// jsonKey converts a dict key as json.dumps does: str as is, numbers by
// their repr, True/False/None as true/false/null.
func jsonKey(k value) (string, error) {
	switch x := k.(type) {
	case string:
		return x, nil
	case nil:
		return "null", nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return jsonFloat(x), nil
	}
	return "", fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
}

// str writes a JSON string: control characters, quote and backslash escaped,
// and with ensure_ascii every character outside printable ASCII as \uXXXX.
func (e *jsonEncoder) str(s string) {
	b := &e.b
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (e.opts.ensureASCII && r > 0x7e && r < 0x10000):
				fmt.Fprintf(b, `\u%04x`, r)
			case e.opts.ensureASCII && r >= 0x10000:
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
