package chat

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

var errOverflow = errors.New("integer overflow")

// arith applies a binary operator with Python's semantics: int arithmetic
// (floor division and modulo round towards negative infinity), true division
// to float, str and list concatenation and repetition, and printf-style
// formatting for str % args. Undefined operands are errors.
func arith(r *renderer, op string, a, b value) (value, error) {
	for _, v := range []value{a, b} {
		if u, ok := v.(undefined); ok {
			return nil, undefinedError(u)
		}
	}
	ai, aInt := intOf(a)
	bi, bInt := intOf(b)
	af, _, aNum := number(a)
	bf, _, bNum := number(b)
	if aNum && bNum {
		if aInt && bInt {
			return intArith(op, ai, bi)
		}
		return floatArith(op, af, bf)
	}
	switch op {
	case "+":
		switch x := a.(type) {
		case string:
			if y, ok := b.(string); ok {
				return x + y, r.chargeBytes(len(x) + len(y))
			}
			return nil, fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(b))
		case *list:
			if y, ok := b.(*list); ok && y.tuple == x.tuple {
				if err := r.chargeBytes(len(x.items) + len(y.items)); err != nil {
					return nil, err
				}
				items := make([]value, 0, len(x.items)+len(y.items))
				return mkList(append(append(items, x.items...), y.items...), x.tuple), nil
			}
		}
	case "*":
		if bInt {
			return repeat(r, a, bi)
		}
		if aInt {
			return repeat(r, b, ai)
		}
	case "%":
		if s, ok := a.(string); ok {
			return printf(s, b)
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

func repeat(r *renderer, v value, n int64) (value, error) {
	n = max(n, 0)
	switch x := v.(type) {
	case string:
		if n > 0 && int64(len(x)) > int64(r.t.opts.MaxOutput)/n {
			return nil, r.tooBig(fmt.Sprintf("%d × %d bytes", n, len(x)))
		}
		return strings.Repeat(x, int(n)), r.chargeBytes(len(x) * int(n))
	case *list:
		if n > 0 && int64(len(x.items)) > int64(r.t.opts.MaxOutput)/n {
			return nil, r.tooBig(fmt.Sprintf("%d × %d items", n, len(x.items)))
		}
		if err := r.chargeBytes(len(x.items) * int(n)); err != nil {
			return nil, err
		}
		items := make([]value, 0, len(x.items)*int(n))
		for i := int64(0); i < n; i++ {
			items = append(items, x.items...)
		}
		return mkList(items, x.tuple), nil
	}
	return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(v))
}

func intArith(op string, a, b int64) (value, error) {
	switch op {
	case "+":
		s := a + b
		if (s > a) != (b > 0) {
			return nil, errOverflow
		}
		return s, nil
	case "-":
		s := a - b
		if (s < a) != (b > 0) {
			return nil, errOverflow
		}
		return s, nil
	case "*":
		hi, lo := bits.Mul64(uint64(absInt(a)), uint64(absInt(b)))
		if hi != 0 || lo > math.MaxInt64 || a == math.MinInt64 || b == math.MinInt64 {
			return nil, errOverflow
		}
		if (a < 0) != (b < 0) {
			return -int64(lo), nil
		}
		return int64(lo), nil
	case "/":
		if b == 0 {
			return nil, errors.New("division by zero")
		}
		return float64(a) / float64(b), nil
	case "//", "%":
		if b == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		q, m := a/b, a%b
		if m != 0 && (m < 0) != (b < 0) {
			q--
			m += b
		}
		if op == "//" {
			return q, nil
		}
		return m, nil
	case "**":
		if b < 0 {
			if a == 0 {
				return nil, errors.New("0.0 cannot be raised to a negative power")
			}
			return math.Pow(float64(a), float64(b)), nil
		}
		out := int64(1)
		for i := int64(0); i < b; i++ {
			v, err := intArith("*", out, a)
			if err != nil {
				return nil, err
			}
			out = v.(int64)
			if out == 0 || out == 1 {
				break
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

func absInt(a int64) int64 {
	if a < 0 {
		return -a
	}
	return a
}

func floatArith(op string, a, b float64) (value, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errors.New("float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, errors.New("float floor division by zero")
		}
		return math.Floor(a / b), nil
	case "%":
		if b == 0 {
			return nil, errors.New("float modulo")
		}
		m := math.Mod(a, b)
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	case "**":
		if a == 0 && b < 0 {
			return nil, errors.New("0.0 cannot be raised to a negative power")
		}
		return math.Pow(a, b), nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// printf is Python's printf-style str % args: a tuple supplies the
// arguments in order, a dict serves %(name)s, anything else is one argument.
func printf(format string, arg value) (value, error) {
	var pos []value
	var named *dict
	switch a := arg.(type) {
	case *list:
		if a.tuple {
			pos = a.items
		} else {
			pos = []value{a}
		}
	case *dict:
		named = a
		pos = []value{a}
	default:
		pos = []value{arg}
	}
	next := 0
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, errors.New("incomplete format")
		}
		var v value
		hasV := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || named == nil {
				return nil, errors.New("format requires a mapping")
			}
			key := format[i+1 : i+end]
			x, ok := named.get(key)
			if !ok {
				return nil, fmt.Errorf("KeyError: %s", strRepr(key))
			}
			v, hasV = x, true
			i += end + 1
		}
		j := i
		for j < len(format) && strings.IndexByte("-+ 0#", format[j]) >= 0 {
			j++
		}
		for j < len(format) && (format[j] >= '0' && format[j] <= '9' || format[j] == '.') {
			j++
		}
		if j >= len(format) {
			return nil, errors.New("incomplete format")
		}
		spec, verb := format[i:j], format[j]
		i = j
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if !hasV {
			if next >= len(pos) {
				return nil, errors.New("not enough arguments for format string")
			}
			v = pos[next]
			next++
		}
		s, err := formatOne(spec, verb, v)
		if err != nil {
			return nil, err
		}
		b.WriteString(s)
	}
	if named == nil && next < len(pos) {
		return nil, errors.New("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

func formatOne(spec string, verb byte, v value) (string, error) {
	switch verb {
	case 's':
		return fmt.Sprintf("%"+spec+"s", str(v)), nil
	case 'r', 'a':
		return fmt.Sprintf("%"+spec+"s", repr(v)), nil
	case 'd', 'i', 'u':
		if i, ok := intOf(v); ok {
			return fmt.Sprintf("%"+spec+"d", i), nil
		}
		if f, ok := v.(float64); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return fmt.Sprintf("%"+spec+"d", int64(f)), nil
		}
	case 'f', 'F', 'e', 'E', 'g', 'G':
		if f, _, ok := number(v); ok {
			if !strings.Contains(spec, ".") {
				spec += ".6"
			}
			return fmt.Sprintf("%"+spec+string(verb), f), nil
		}
	case 'x', 'X', 'o':
		if i, ok := intOf(v); ok {
			return fmt.Sprintf("%"+spec+string(verb), i), nil
		}
	case 'c':
		if s, ok := v.(string); ok && runeLen(s) == 1 {
			return s, nil
		}
		if i, ok := intOf(v); ok {
			return string(rune(i)), nil
		}
	default:
		return "", fmt.Errorf("unsupported format character '%c'", verb)
	}
	return "", fmt.Errorf("%%%c format: a number is required, not %s", verb, typeName(v))
}

// parseInt is Python's int(str, base): surrounding whitespace, a sign,
// "_" between digits and, for base 0 or a matching base, a 0x/0o/0b prefix.
func parseInt(s string, base int) (int64, bool) {
	s = strings.TrimFunc(s, isSpace)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) > 1 && s[0] == '0' {
		prefix := map[byte]int{'x': 16, 'o': 8, 'b': 2}[s[1]|0x20]
		if prefix != 0 && (base == 0 || base == prefix) {
			base, s = prefix, strings.TrimPrefix(s[2:], "_")
		}
	}
	if base == 0 {
		base = 10
	}
	if s == "" || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), base, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}
