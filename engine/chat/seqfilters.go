package chat

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The filters over sequences (first, last, join, sort, unique, select, map,
// ...) iterate their input as a for loop does: list items, string
// characters, dict keys, nothing for Undefined.

func fFirst(_ *renderer, v value, _ args) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "no first item, sequence was empty"}, nil
	}
	return items[0], nil
}

func fLast(_ *renderer, v value, _ args) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{hint: "no last item, sequence was empty"}, nil
	}
	return items[len(items)-1], nil
}

func fJoin(r *renderer, v value, a args) (value, error) {
	p, err := a.bind("join", "d", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if attr := or(p[1], nil); attr != nil {
		if items, err = mapAttr(items, attr, absent{}); err != nil {
			return nil, err
		}
	}
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = str(it)
	}
	out := strings.Join(parts, str(or(p[0], "")))
	return out, r.chargeBytes(len(out))
}

func fList(_ *renderer, v value, _ args) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return newList(append([]value(nil), items...)), nil
}

func fItems(_ *renderer, v value, _ args) (value, error) {
	switch o := v.(type) {
	case undefined:
		return newList(nil), nil
	case *dict:
		return dictItems(o), nil
	}
	return nil, errors.New("can only get item pairs from a mapping")
}

func fDictsort(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("dictsort", "case_sensitive", "by", "reverse")
	if err != nil {
		return nil, err
	}
	d, ok := v.(*dict)
	if !ok {
		return nil, errors.New("dictsort requires a mapping")
	}
	pos := 0
	switch or(p[1], "key") {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, errors.New("you can only sort by either \"key\" or \"value\"")
	}
	items := dictItems(d).items
	err = sortValues(items, func(x value) (value, error) {
		return x.(*list).items[pos], nil
	}, truth(or(p[0], false)), truth(or(p[2], false)))
	return newList(items), err
}

// sortKey lower-cases strings for the case-insensitive comparisons of sort,
// unique, min, max and dictsort.
func sortKey(v value, caseSensitive bool) value {
	if s, ok := v.(string); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

func sortValues(items []value, key func(value) (value, error), caseSensitive, reverse bool) error {
	keys := make([]value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		keys[i] = sortKey(k, caseSensitive)
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	sort.SliceStable(idx, func(i, j int) bool {
		c, err := compare(keys[idx[i]], keys[idx[j]], "<")
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	sorted := make([]value, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return cmpErr
}

// attrGetter resolves a dotted attribute path ("a.b", "0") on an item the
// way jinja2's make_attrgetter does: by subscript, integers as indexes.
func attrGetter(attr value) func(value) (value, error) {
	var parts []value
	switch a := attr.(type) {
	case string:
		for _, s := range strings.Split(a, ".") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				parts = append(parts, n)
			} else {
				parts = append(parts, s)
			}
		}
	default:
		parts = []value{attr}
	}
	return func(v value) (value, error) {
		for _, p := range parts {
			var err error
			if v, err = getitem(v, p); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
}

func mapAttr(items []value, attr, def value) ([]value, error) {
	get := attrGetter(attr)
	out := make([]value, len(items))
	for i, it := range items {
		v, err := get(it)
		if err != nil {
			return nil, err
		}
		if _, undef := v.(undefined); undef && !isAbsent(def) {
			v = def
		}
		out[i] = v
	}
	return out, nil
}

func fSort(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("sort", "reverse", "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	items = append([]value(nil), items...)
	key := func(x value) (value, error) { return x, nil }
	if attr := or(p[2], nil); attr != nil {
		key = attrGetter(attr)
	}
	err = sortValues(items, key, truth(or(p[1], false)), truth(or(p[0], false)))
	return newList(items), err
}

func fUnique(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("unique", "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	key := func(x value) (value, error) { return x, nil }
	if attr := or(p[1], nil); attr != nil {
		key = attrGetter(attr)
	}
	seen := newDict()
	var out []value
	for _, it := range items {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		k = sortKey(k, truth(or(p[0], false)))
		if _, ok := seen.get(k); ok {
			continue
		}
		if err := seen.set(k, true); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return newList(out), nil
}

func minMax(sign int) filterFunc {
	return func(_ *renderer, v value, a args) (value, error) {
		p, err := a.bind("min", "case_sensitive", "attribute")
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{hint: "no aggregated item, sequence was empty"}, nil
		}
		key := func(x value) (value, error) { return x, nil }
		if attr := or(p[1], nil); attr != nil {
			key = attrGetter(attr)
		}
		best, bestKey := items[0], value(nil)
		for i, it := range items {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			k = sortKey(k, truth(or(p[0], false)))
			if i > 0 {
				c, err := compare(k, bestKey, "<")
				if err != nil {
					return nil, err
				}
				if c*sign <= 0 {
					continue
				}
			}
			best, bestKey = it, k
		}
		return best, nil
	}
}

func fSum(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("sum", "attribute", "start")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if attr := or(p[0], nil); attr != nil {
		if items, err = mapAttr(items, attr, absent{}); err != nil {
			return nil, err
		}
	}
	total := or(p[1], int64(0))
	for _, it := range items {
		_, _, ok1 := number(total)
		_, _, ok2 := number(it)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("unsupported operand type(s) for +: '%s' and '%s'", typeName(total), typeName(it))
		}
		if total, err = arith(nil, "+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func fReverse(_ *renderer, v value, _ args) (value, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]value, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return newList(out), nil
}

// selectFilter builds select, reject, selectattr and rejectattr: keep the
// items (or their attribute) that pass a test, truthiness by default.
func selectFilter(keep, byAttr bool) filterFunc {
	return func(r *renderer, v value, a args) (value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		rest := a.pos
		get := func(x value) (value, error) { return x, nil }
		if byAttr {
			if len(rest) == 0 {
				return nil, errors.New("missing parameter for attribute name")
			}
			get, rest = attrGetter(rest[0]), rest[1:]
		}
		test := func(_ *renderer, x value, _ args) (bool, error) { return truth(x), nil }
		var targs args
		if len(rest) > 0 {
			name, ok := rest[0].(string)
			if !ok || tests[name] == nil {
				return nil, fmt.Errorf("no test named %s", repr(rest[0]))
			}
			test, targs = tests[name], args{pos: rest[1:], kwNames: a.kwNames, kwVals: a.kwVals}
		}
		var out []value
		for _, it := range items {
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(r, x, targs)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return newList(out), nil
	}
}

func fMap(r *renderer, v value, a args) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(a.pos) == 0 {
		p, err := a.bind("map", "attribute", "default")
		if err != nil || isAbsent(p[0]) {
			return nil, errors.New("map requires a filter name or attribute=")
		}
		out, err := mapAttr(items, p[0], or(p[1], absent{}))
		return newList(out), err
	}
	name, ok := a.pos[0].(string)
	f := filters[name]
	if !ok || f == nil {
		return nil, fmt.Errorf("no filter named %s", repr(a.pos[0]))
	}
	fa := args{pos: a.pos[1:], kwNames: a.kwNames, kwVals: a.kwVals}
	out := make([]value, len(items))
	for i, it := range items {
		if out[i], err = f(r, it, fa); err != nil {
			return nil, err
		}
	}
	return newList(out), nil
}

func fBatch(_ *renderer, v value, a args) (value, error) {
	p, err := a.bind("batch", "linecount", "fill_with")
	if err != nil {
		return nil, err
	}
	n, ok := intOf(p[0])
	if !ok || n <= 0 {
		return nil, errors.New("batch needs a positive line count")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var out []value
	for i := 0; i < len(items); i += int(n) {
		row := append([]value(nil), items[i:min(len(items), i+int(n))]...)
		for fill := or(p[1], nil); fill != nil && len(row) < int(n); {
			row = append(row, fill)
		}
		out = append(out, newList(row))
	}
	return newList(out), nil
}
