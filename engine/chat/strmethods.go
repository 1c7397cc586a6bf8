package chat

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// strMethod is a Python str method as templates call them: "abc".upper(),
// s.split(","), ... The receiver is s; a holds the call's arguments.
type strMethod func(r *renderer, s string, a args) (value, error)

var strMethods map[string]strMethod

func init() {
	noArgs := func(name string, f func(string) value) strMethod {
		return func(_ *renderer, s string, a args) (value, error) {
			if len(a.pos)+len(a.kwNames) > 0 {
				return nil, fmt.Errorf("%s() takes no arguments", name)
			}
			return f(s), nil
		}
	}
	strip := func(name string, left, right bool) strMethod {
		return func(_ *renderer, s string, a args) (value, error) {
			p, err := a.bind(name, "chars")
			if err != nil {
				return nil, err
			}
			return stripChars(s, or(p[0], nil), left, right)
		}
	}
	strMethods = map[string]strMethod{
		"strip":      strip("strip", true, true),
		"lstrip":     strip("lstrip", true, false),
		"rstrip":     strip("rstrip", false, true),
		"upper":      noArgs("upper", func(s string) value { return pyUpper(s) }),
		"lower":      noArgs("lower", func(s string) value { return pyLower(s) }),
		"title":      noArgs("title", func(s string) value { return pyTitle(s) }),
		"capitalize": noArgs("capitalize", func(s string) value { return capitalize(s) }),
		"swapcase":   noArgs("swapcase", func(s string) value { return swapcase(s) }),
		"isdigit":    noArgs("isdigit", func(s string) value { return allRunes(s, unicode.IsDigit) }),
		"isdecimal":  noArgs("isdecimal", func(s string) value { return allRunes(s, unicode.IsDigit) }),
		"isnumeric":  noArgs("isnumeric", func(s string) value { return allRunes(s, unicode.IsNumber) }),
		"isalpha":    noArgs("isalpha", func(s string) value { return allRunes(s, unicode.IsLetter) }),
		"isalnum": noArgs("isalnum", func(s string) value {
			return allRunes(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) })
		}),
		"isspace":    noArgs("isspace", func(s string) value { return allRunes(s, isSpace) }),
		"islower":    noArgs("islower", func(s string) value { return isCase(s, unicode.IsLower) }),
		"isupper":    noArgs("isupper", func(s string) value { return isCase(s, unicode.IsUpper) }),
		"startswith": affixMethod("startswith", strings.HasPrefix),
		"endswith":   affixMethod("endswith", strings.HasSuffix),
		"split":      splitMethod("split"),
		"rsplit":     splitMethod("rsplit"),
		"splitlines": func(_ *renderer, s string, a args) (value, error) {
			p, err := a.bind("splitlines", "keepends")
			if err != nil {
				return nil, err
			}
			return newList(strValues(splitLines(s, truth(or(p[0], false))))), nil
		},
		"replace": func(r *renderer, s string, a args) (value, error) {
			p, err := a.bind("replace", "old", "new", "count")
			if err != nil {
				return nil, err
			}
			return replace(r, s, p[0], p[1], or(p[2], int64(-1)))
		},
		"find":   findMethod("find", false, false),
		"rfind":  findMethod("rfind", true, false),
		"index":  findMethod("index", false, true),
		"rindex": findMethod("rindex", true, true),
		"count": func(_ *renderer, s string, a args) (value, error) {
			p, err := a.bind("count", "sub")
			if err != nil {
				return nil, err
			}
			sub, ok := p[0].(string)
			if !ok {
				return nil, errors.New("count() argument must be str")
			}
			if sub == "" {
				return int64(runeLen(s) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		},
		"join": func(r *renderer, s string, a args) (value, error) {
			p, err := a.bind("join", "iterable")
			if err != nil {
				return nil, err
			}
			items, err := iterate(p[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				v, ok := it.(string)
				if !ok {
					return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = v
			}
			out := strings.Join(parts, s)
			return out, r.chargeBytes(len(out))
		},
		"partition":    partitionMethod(false),
		"rpartition":   partitionMethod(true),
		"removeprefix": affixTrim("removeprefix", strings.TrimPrefix),
		"removesuffix": affixTrim("removesuffix", strings.TrimSuffix),
		"zfill": func(_ *renderer, s string, a args) (value, error) {
			w, err := widthArg(a, "zfill")
			if err != nil {
				return nil, err
			}
			sign := ""
			if s != "" && (s[0] == '+' || s[0] == '-') {
				sign, s = s[:1], s[1:]
			}
			return sign + strings.Repeat("0", max(0, w-runeLen(s)-len(sign))) + s, nil
		},
		"ljust":  padMethod("ljust"),
		"rjust":  padMethod("rjust"),
		"center": padMethod("center"),
		"format": func(_ *renderer, s string, a args) (value, error) { return strFormat(s, a) },
	}
}

func strValues(ss []string) []value {
	out := make([]value, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func allRunes(s string, f func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

// isCase is Python's islower/isupper: some cased character, and every cased
// character in that case.
func isCase(s string, want func(rune) bool) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) {
			if !want(r) {
				return false
			}
			cased = true
		}
	}
	return cased
}

func stripChars(s string, chars value, left, right bool) (value, error) {
	cut := isSpace
	if chars != nil {
		cs, ok := chars.(string)
		if !ok {
			return nil, errors.New("strip arg must be None or str")
		}
		cut = func(r rune) bool { return strings.ContainsRune(cs, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, cut)
	}
	if right {
		s = strings.TrimRightFunc(s, cut)
	}
	return s, nil
}

func affixMethod(name string, has func(string, string) bool) strMethod {
	return func(_ *renderer, s string, a args) (value, error) {
		p, err := a.bind(name, "prefix", "start", "end")
		if err != nil {
			return nil, err
		}
		rs := []rune(s)
		lo, hi, err := spanArgs(len(rs), p[1], p[2])
		if err != nil {
			return nil, err
		}
		if lo > hi {
			return false, nil
		}
		s = string(rs[lo:hi])
		var cands []value
		switch x := p[0].(type) {
		case string:
			cands = []value{x}
		case *list:
			cands = x.items
		default:
			return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p[0]))
		}
		for _, c := range cands {
			cs, ok := c.(string)
			if !ok {
				return nil, fmt.Errorf("tuple for %s must only contain str", name)
			}
			if has(s, cs) {
				return true, nil
			}
		}
		return false, nil
	}
}

func affixTrim(name string, trim func(string, string) string) strMethod {
	return func(_ *renderer, s string, a args) (value, error) {
		p, err := a.bind(name, "affix")
		if err != nil {
			return nil, err
		}
		x, ok := p[0].(string)
		if !ok {
			return nil, fmt.Errorf("%s() argument must be str", name)
		}
		return trim(s, x), nil
	}
}

// spanArgs resolves Python's optional start/end arguments over n runes.
func spanArgs(n int, start, end value) (int, int, error) {
	idx := func(v value, def int) (int, error) {
		if isAbsent(v) || v == nil {
			return def, nil
		}
		i, ok := intOf(v)
		if !ok {
			return 0, errors.New("slice indices must be integers or None")
		}
		if i < 0 {
			i += int64(n)
		}
		return int(max(0, min(i, int64(n)))), nil
	}
	lo, err := idx(start, 0)
	if err != nil {
		return 0, 0, err
	}
	hi, err := idx(end, n)
	return lo, hi, err
}

func splitMethod(name string) strMethod {
	return func(_ *renderer, s string, a args) (value, error) {
		p, err := a.bind(name, "sep", "maxsplit")
		if err != nil {
			return nil, err
		}
		n, ok := intOf(or(p[1], int64(-1)))
		if !ok {
			return nil, errors.New("maxsplit must be an integer")
		}
		sep := or(p[0], nil)
		if sep == nil {
			return newList(strValues(splitSpace(s, int(n), name == "rsplit"))), nil
		}
		ss, ok := sep.(string)
		if !ok {
			return nil, fmt.Errorf("must be str or None, not %s", typeName(sep))
		}
		if ss == "" {
			return nil, errors.New("empty separator")
		}
		if n < 0 {
			return newList(strValues(strings.Split(s, ss))), nil
		}
		if name == "split" {
			return newList(strValues(strings.SplitN(s, ss, int(n)+1))), nil
		}
		var parts []string
		for ; n > 0; n-- {
			i := strings.LastIndex(s, ss)
			if i < 0 {
				break
			}
			parts = append([]string{s[i+len(ss):]}, parts...)
			s = s[:i]
		}
		return newList(strValues(append([]string{s}, parts...))), nil
	}
}

// splitSpace is Python's str.split() without a separator: runs of
// whitespace separate, and leading or trailing whitespace gives no field.
func splitSpace(s string, n int, fromRight bool) []string {
	if n < 0 {
		return strings.FieldsFunc(s, isSpace)
	}
	var out []string
	if !fromRight {
		for n > 0 {
			s = strings.TrimLeftFunc(s, isSpace)
			i := strings.IndexFunc(s, isSpace)
			if s == "" || i < 0 {
				break
			}
			out = append(out, s[:i])
			s = s[i:]
			n--
		}
		if s = strings.TrimLeftFunc(s, isSpace); s != "" {
			out = append(out, s)
		}
		return out
	}
	for n > 0 {
		s = strings.TrimRightFunc(s, isSpace)
		i := strings.LastIndexFunc(s, isSpace)
		if s == "" || i < 0 {
			break
		}
		_, w := decodeLastRune(s[:i+1])
		out = append([]string{s[i+w:]}, out...)
		s = s[:i]
		n--
	}
	if s = strings.TrimRightFunc(s, isSpace); s != "" {
		out = append([]string{s}, out...)
	}
	return out
}

func decodeLastRune(s string) (rune, int) {
	rs := []rune(s)
	if len(rs) == 0 {
		return 0, 0
	}
	r := rs[len(rs)-1]
	return r, len(string(r))
}

// splitLines is Python's str.splitlines, which breaks at \n, \r, \r\n,
// \v, \f, \x1c-\x1e, \x85, \u2028 and \u2029.
func splitLines(s string, keep bool) []string {
	var out []string
	start := 0
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		if !(r == '\n' || r == '\r' || r == '\v' || r == '\f' || (r >= 0x1c && r <= 0x1e) || r == 0x85 || r == 0x2028 || r == 0x2029) {
			continue
		}
		end := i + 1
		if r == '\r' && i+1 < len(rs) && rs[i+1] == '\n' {
			end++
		}
		if keep {
			out = append(out, string(rs[start:end]))
		} else {
			out = append(out, string(rs[start:i]))
		}
		start = end
		i = end - 1
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

func replace(r *renderer, s string, old, new, count value) (value, error) {
	o, ok1 := old.(string)
	n, ok2 := new.(string)
	c, ok3 := intOf(count)
	if !ok1 || !ok2 || !ok3 {
		return nil, errors.New("replace() arguments must be str, str and an int count")
	}
	out := strings.Replace(s, o, n, int(c))
	return out, r.chargeBytes(len(out))
}

func findMethod(name string, last, mustFind bool) strMethod {
	return func(_ *renderer, s string, a args) (value, error) {
		p, err := a.bind(name, "sub", "start", "end")
		if err != nil {
			return nil, err
		}
		sub, ok := p[0].(string)
		if !ok {
			return nil, fmt.Errorf("%s() argument must be str", name)
		}
		rs := []rune(s)
		lo, hi, err := spanArgs(len(rs), p[1], p[2])
		if err != nil {
			return nil, err
		}
		i := -1
		if lo <= hi {
			hay := string(rs[lo:hi])
			if last {
				i = strings.LastIndex(hay, sub)
			} else {
				i = strings.Index(hay, sub)
			}
			if i >= 0 {
				i = runeLen(hay[:i]) + lo
			}
		}
		if i < 0 && mustFind {
			return nil, errors.New("substring not found")
		}
		return int64(i), nil
	}
}

func partitionMethod(last bool) strMethod {
	return func(_ *renderer, s string, a args) (value, error) {
		p, err := a.bind("partition", "sep")
		if err != nil {
			return nil, err
		}
		sep, ok := p[0].(string)
		if !ok || sep == "" {
			return nil, errors.New("partition() needs a non-empty str separator")
		}
		i := strings.Index(s, sep)
		if last {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if last {
				return newTuple("", "", s), nil
			}
			return newTuple(s, "", ""), nil
		}
		return newTuple(s[:i], sep, s[i+len(sep):]), nil
	}
}

func widthArg(a args, name string) (int, error) {
	if len(a.pos) < 1 {
		return 0, fmt.Errorf("%s() takes a width", name)
	}
	w, ok := intOf(a.pos[0])
	if !ok {
		return 0, fmt.Errorf("%s() width must be an integer", name)
	}
	return int(min(w, 1<<20)), nil
}

func padMethod(name string) strMethod {
	return func(_ *renderer, s string, a args) (value, error) {
		p, err := a.bind(name, "width", "fillchar")
		if err != nil {
			return nil, err
		}
		w, ok := intOf(p[0])
		fill, ok2 := or(p[1], " ").(string)
		if !ok || !ok2 || runeLen(fill) != 1 {
			return nil, fmt.Errorf("%s() takes an integer width and a one-character fill", name)
		}
		return pad(s, int(min(w, 1<<20)), fill, name), nil
	}
}

// pad is Python's ljust, rjust and center.
func pad(s string, width int, fill, how string) string {
	n := runeLen(s)
	if width <= n {
		return s
	}
	marg := width - n
	left := 0
	switch how {
	case "rjust":
		left = marg
	case "center":
		left = marg/2 + (marg & width & 1)
	}
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, marg-left)
}

// strFormat is str.format for plain fields: {}, {0}, {name}, with {{ and }}
// as literal braces. Format specs and conversions are not supported.
func strFormat(s string, a args) (value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				i++
			}
			b.WriteByte('}')
			continue
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, errors.New("single '{' encountered in format string")
		}
		field := s[i+1 : i+end]
		i += end
		var v value
		switch n, ok := parseInt(field, 10); {
		case field == "":
			if auto >= len(a.pos) {
				return nil, errors.New("replacement index out of range")
			}
			v = a.pos[auto]
			auto++
		case ok && n >= 0 && int(n) < len(a.pos):
			v = a.pos[n]
		default:
			found := false
			for j, k := range a.kwNames {
				if k == field {
					v, found = a.kwVals[j], true
				}
			}
			if !found {
				return nil, fmt.Errorf("unsupported or missing format field {%s}", field)
			}
		}
		b.WriteString(str(v))
	}
	return b.String(), nil
}
