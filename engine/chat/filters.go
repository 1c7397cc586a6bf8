package chat

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// filterFunc applies a filter to v, the value left of the "|".
type filterFunc func(r *renderer, v value, a args) (value, error)

// filters are jinja2's builtin filters that chat templates use, with
// Hugging Face's tojson. Filled in init to break the initialisation cycle of
// filters that apply other filters (map).
var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs":        fAbs,
		"attr":       fAttr,
		"batch":      fBatch,
		"capitalize": strFilter("capitalize", capitalize),
		"center":     fCenter,
		"count":      fLength,
		"d":          fDefault,
		"default":    fDefault,
		"dictsort":   fDictsort,
		"e":          fEscape,
		"escape":     fEscape,
		"first":      fFirst,
		"float":      fFloat,
		"format":     fFormat,
		"indent":     fIndent,
		"int":        fInt,
		"items":      fItems,
		"join":       fJoin,
		"last":       fLast,
		"length":     fLength,
		"list":       fList,
		"lower":      strFilter("lower", pyLower),
		"map":        fMap,
		"max":        minMax(1),
		"min":        minMax(-1),
		"reject":     selectFilter(false, false),
		"rejectattr": selectFilter(false, true),
		"replace":    fReplace,
		"reverse":    fReverse,
		"round":      fRound,
		"safe":       func(_ *renderer, v value, _ args) (value, error) { return v, nil },
		"select":     selectFilter(true, false),
		"selectattr": selectFilter(true, true),
		"sort":       fSort,
		"string":     func(_ *renderer, v value, _ args) (value, error) { return str(v), nil },
		"sum":        fSum,
		"title":      strFilter("title", jinjaTitle),
		"tojson":     fToJSON,
		"trim":       fTrim,
		"unique":     fUnique,
		"upper":      strFilter("upper", pyUpper),
		"wordcount":  fWordcount,
	}
}

func strFilter(name string, f func(string) string) filterFunc {
	return func(_ *renderer, v value, a args) (value, error) {
		if _, err := a.bind(name); err != nil {
			return nil, err
		}
		return f(str(v)), nil
	}
}

func fTrim(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("trim", "chars")
	if err != nil {
		return nil, err
	}
	return stripChars(str(v), or(p[0], nil), true, true)
}

func fLength(_ *renderer, v value, _ args) (value, error) {
	switch o := v.(type) {
	case string:
		return int64(runeLen(o)), nil
	case *list:
		return int64(len(o.items)), nil
	case *dict:
		return int64(o.len()), nil
	case undefined:
		return int64(0), nil
	}
	return nil, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

func fDefault(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("default", "default_value", "boolean")
	if err != nil {
		return nil, err
	}
	_, undef := v.(undefined)
	if undef || (truth(or(p[1], false)) && !truth(v)) {
		return or(p[0], ""), nil
	}
	return v, nil
}

func fReplace(r *renderer, v value, a args) (value, error) {
	p, err := a.bind("replace", "old", "new", "count")
	if err != nil {
		return nil, err
	}
	count := or(p[2], nil)
	if count == nil {
		count = int64(-1)
	}
	return replace(r, str(v), str(p[0]), str(p[1]), count)
}

func fInt(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("int", "default", "base")
	if err != nil {
		return nil, err
	}
	def := or(p[0], int64(0))
	base, ok := intOf(or(p[1], int64(10)))
	if !ok {
		return nil, errors.New("int base must be an integer")
	}
	switch x := v.(type) {
	case bool, int64:
		n, _ := intOf(x)
		return n, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return def, nil
		}
		return int64(x), nil
	case string:
		if n, ok := parseInt(x, int(base)); ok {
			return n, nil
		}
		if f, ok := parseFloat(x); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return int64(f), nil
		}
	}
	return def, nil
}

// parseFloat is Python's float(str).
func parseFloat(s string) (float64, bool) {
	s = strings.ReplaceAll(strings.TrimFunc(s, isSpace), "_", "")
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

func fFloat(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("float", "default")
	if err != nil {
		return nil, err
	}
	if f, _, ok := number(v); ok {
		return f, nil
	}
	if s, ok := v.(string); ok {
		if f, ok := parseFloat(s); ok {
			return f, nil
		}
	}
	return or(p[0], 0.0), nil
}

func fAbs(_ *renderer, v value, _ args) (value, error) {
	if i, ok := intOf(v); ok {
		if i == math.MinInt64 {
			return nil, errOverflow
		}
		return absInt(i), nil
	}
	if f, ok := v.(float64); ok {
		return math.Abs(f), nil
	}
	return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
}

// fRound is jinja2's round: "common" is Python's round (to even on exact
// ties of the binary value), "floor" and "ceil" round that way.
func fRound(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("round", "precision", "method")
	if err != nil {
		return nil, err
	}
	prec, ok := intOf(or(p[0], int64(0)))
	if !ok {
		return nil, errors.New("round precision must be an integer")
	}
	method := or(p[1], "common")
	f, isInt, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("type %s doesn't define __round__", typeName(v))
	}
	switch method {
	case "common":
		if isInt {
			n, _ := intOf(v)
			return n, nil
		}
		if math.IsInf(f, 0) || math.IsNaN(f) || prec > 300 {
			return f, nil
		}
		if prec < 0 {
			scale := math.Pow(10, float64(-prec))
			return math.RoundToEven(f/scale) * scale, nil
		}
		r, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64)
		return r, nil
	case "floor", "ceil":
		scale := math.Pow(10, float64(prec))
		if method == "floor" {
			return math.Floor(f*scale) / scale, nil
		}
		return math.Ceil(f*scale) / scale, nil
	}
	return nil, errors.New("method must be common, ceil or floor")
}

func fEscape(_ *renderer, v value, _ args) (value, error) {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(str(v)), nil
}

func fAttr(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("attr", "name")
	if err != nil {
		return nil, err
	}
	name, ok := p[0].(string)
	if !ok {
		return nil, errors.New("attr name must be a string")
	}
	if _, ok := v.(*dict); ok && !dictMethods[name] {
		// attr looks up attributes only, never items.
		return undefined{hint: fmt.Sprintf("'%s' has no attribute '%s'", objectName(v), name)}, nil
	}
	return getattr(v, name)
}

func fIndent(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("indent", "width", "first", "blank")
	if err != nil {
		return nil, err
	}
	ind := "    "
	switch w := or(p[0], int64(4)).(type) {
	case string:
		ind = w
	default:
		n, ok := intOf(w)
		if !ok {
			return nil, errors.New("indent width must be an integer or a string")
		}
		ind = strings.Repeat(" ", int(max(0, min(n, 1<<10))))
	}
	lines := splitLines(str(v)+"\n", false)
	var out string
	if truth(or(p[2], false)) {
		out = strings.Join(lines, "\n"+ind)
	} else {
		out = lines[0]
		for _, l := range lines[1:] {
			out += "\n"
			if l != "" {
				out += ind + l
			}
		}
	}
	if truth(or(p[1], false)) {
		out = ind + out
	}
	return out, nil
}

func fWordcount(_ *renderer, v value, _ args) (value, error) {
	n, in := int64(0), false
	for _, r := range str(v) {
		word := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
		if word && !in {
			n++
		}
		in = word
	}
	return n, nil
}

func fFormat(_ *renderer, v value, a args) (value, error) {
	if len(a.kwNames) > 0 {
		d := newDict()
		for i, k := range a.kwNames {
			_ = d.set(k, a.kwVals[i])
		}
		return printf(str(v), d)
	}
	return printf(str(v), newTuple(a.pos...))
}

func fCenter(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("center", "width")
	if err != nil {
		return nil, err
	}
	w, ok := intOf(or(p[0], int64(80)))
	if !ok {
		return nil, errors.New("center width must be an integer")
	}
	return pad(str(v), int(min(w, 1<<20)), " ", "center"), nil
}

// fToJSON is Hugging Face's tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False) without HTML escaping.
func fToJSON(r *renderer, v value, a args) (value, error) {
	p, err := a.bind("tojson", "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return nil, err
	}
	out, err := toJSON(v, jsonOptions{
		ensureASCII: truth(or(p[0], false)),
		indent:      or(p[1], nil),
		separators:  or(p[2], nil),
		sortKeys:    truth(or(p[3], false)),
	})
	if err != nil {
		return nil, err
	}
	return out, r.chargeBytes(len(out))
}
