package grammar

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxBound is the largest magnitude a numeric bound keeps; beyond it a bound
// is clamped (integers this large are exact in float64, so every generated
// value is exact too).
const maxBound = 999_999_999_999_999

type bound struct {
	set       bool
	v         float64
	exclusive bool
}

// numberBounds reads minimum/maximum and their exclusive forms (numbers, as
// in draft 2019+, or booleans, as in draft 4).
func numberBounds(o *jsonObject, ptr string) (lo, hi bound, err error) {
	num := func(k string) (float64, bool, error) {
		v, ok := o.get(k)
		if !ok {
			return 0, false, nil
		}
		n, isNum := v.(json.Number)
		if !isNum {
			return 0, false, nil
		}
		f, err := n.Float64()
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, false, schemaErr(ptr+"/"+k, "%q must be a finite number", k)
		}
		return f, true, nil
	}
	pick := func(incl, excl string) (bound, error) {
		var b bound
		f, ok, err := num(incl)
		if err != nil {
			return b, err
		}
		if ok {
			b = bound{set: true, v: f}
		}
		if e, present := o.get(excl); present {
			switch e := e.(type) {
			case bool:
				b.exclusive = e && b.set
			case json.Number:
				f, _, err := num(excl)
				if err != nil {
					return b, err
				}
				// Both given: the stricter wins.
				if !b.set || (incl == "minimum" && f >= b.v) || (incl == "maximum" && f <= b.v) {
					b = bound{set: true, v: f, exclusive: true}
				}
			default:
				return b, schemaErr(ptr+"/"+excl, "%q must be a number", excl)
			}
		}
		return b, nil
	}
	if lo, err = pick("minimum", "exclusiveMinimum"); err != nil {
		return
	}
	hi, err = pick("maximum", "exclusiveMaximum")
	return
}

func (s *schemaCompiler) numberSchema(o *jsonObject, integer bool, ptr string) (Node, error) {
	lo, hi, err := numberBounds(o, ptr)
	if err != nil {
		return nil, err
	}
	if !lo.set && !hi.set {
		if integer {
			return s.c.integer(), nil
		}
		return s.c.number(), nil
	}
	var n Node
	if integer {
		l, h := int64(-maxBound), int64(maxBound)
		if lo.set {
			f := math.Ceil(lo.v)
			if lo.exclusive && f == lo.v {
				f++
			}
			if f > maxBound {
				return nil, schemaErr(ptr, "a lower bound above %d is not supported", maxBound)
			}
			l = max(l, int64(f))
		}
		if hi.set {
			f := math.Floor(hi.v)
			if hi.exclusive && f == hi.v {
				f--
			}
			if f < -maxBound {
				return nil, schemaErr(ptr, "an upper bound below %d is not supported", -maxBound)
			}
			h = min(h, int64(f))
		}
		if l > h {
			return nil, schemaErr(ptr, "no integer lies within the bounds")
		}
		n = intRange(l, h)
	} else {
		for _, b := range []bound{lo, hi} {
			if b.set && b.v != math.Trunc(b.v) {
				return nil, schemaErr(ptr, "bounds of a \"number\" must be whole numbers (got %v)", b.v)
			}
			if b.set && math.Abs(b.v) > maxBound {
				return nil, schemaErr(ptr, "bounds of a \"number\" beyond %d are not supported", maxBound)
			}
		}
		if n, err = numberRange(lo, hi); err != nil {
			return nil, schemaErr(ptr, "%v", err)
		}
	}
	name := fmt.Sprintf("json:%s", strings.ReplaceAll(fmt.Sprintf("%v%v%v", integer, lo, hi), " ", ","))
	return s.c.shared(name, func() Node { return n }), nil
}

// intRange matches the integers lo..hi in canonical form (no leading zeros,
// no "-0").
func intRange(lo, hi int64) Node {
	var alts []Node
	if lo < 0 {
		alts = append(alts, Seq(Lit("-"), natRange(max(-hi, 1), -lo)))
	}
	if hi >= 0 {
		alts = append(alts, natRange(max(lo, 0), hi))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}

// natRange matches the natural numbers lo..hi (0 <= lo <= hi).
func natRange(lo, hi int64) Node {
	var alts []Node
	for n := len(strconv.FormatInt(lo, 10)); n <= len(strconv.FormatInt(hi, 10)); n++ {
		l, h := lo, hi
		if p := pow10(n - 1); n > 1 && l < p {
			l = p
		}
		if p := pow10(n) - 1; h > p {
			h = p
		}
		if l <= h {
			alts = append(alts, sameLength(strconv.FormatInt(l, 10), strconv.FormatInt(h, 10)))
		}
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// sameLength matches the decimal strings from lo to hi, of equal length.
func sameLength(lo, hi string) Node {
	if lo == hi {
		return Lit(lo)
	}
	if len(lo) == 1 {
		return ByteRange(lo[0], hi[0])
	}
	if lo[0] == hi[0] {
		return Seq(Lit(lo[:1]), sameLength(lo[1:], hi[1:]))
	}
	rest := len(lo) - 1
	anyDigits := Repeat(digit, rest, rest)
	var alts []Node
	first, last := lo[0], hi[0]
	if strings.Trim(lo[1:], "0") != "" {
		alts = append(alts, Seq(Lit(lo[:1]), sameLength(lo[1:], strings.Repeat("9", rest))))
		first++
	}
	lastPart := Node(nil)
	if strings.Trim(hi[1:], "9") != "" {
		lastPart = Seq(Lit(hi[:1]), sameLength(strings.Repeat("0", rest), hi[1:]))
		last--
	}
	if first <= last {
		alts = append(alts, Seq(ByteRange(first, last), anyDigits))
	}
	if lastPart != nil {
		alts = append(alts, lastPart)
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}

// numberRange matches decimal numbers (no exponent) within whole-number
// bounds; a missing bound is ±maxBound.
func numberRange(lo, hi bound) (Node, error) {
	l, lIncl := -float64(maxBound), true
	if lo.set {
		l, lIncl = lo.v, !lo.exclusive
	}
	h, hIncl := float64(maxBound), true
	if hi.set {
		h, hIncl = hi.v, !hi.exclusive
	}
	if l > h || (l == h && (!lIncl || !hIncl)) {
		return nil, fmt.Errorf("no number lies within the bounds")
	}
	var alts []Node
	if h >= 0 && !(h == 0 && !hIncl) {
		// Non-negative part: [max(l,0), h].
		pl, plIncl := l, lIncl
		if l < 0 {
			pl, plIncl = 0, true
		}
		if n := magnitudeRange(int64(pl), plIncl, int64(h), hIncl); n != nil {
			alts = append(alts, n)
		}
	}
	if l < 0 {
		// Negative part: magnitudes in [max(-h,0), -l], zero excluded ("-0"
		// is zero, already covered above).
		ml, mlIncl := -h, hIncl
		if h >= 0 {
			ml, mlIncl = 0, false
		}
		if n := magnitudeRange(int64(ml), mlIncl, int64(-l), lIncl); n != nil {
			alts = append(alts, Seq(Lit("-"), n))
		}
	}
	switch len(alts) {
	case 0:
		return nil, fmt.Errorf("no number lies within the bounds")
	case 1:
		return alts[0], nil
	}
	return Alt(alts...), nil
}

// magnitudeRange matches unsigned decimals x with lo <= x <= hi (bounds
// inclusive or not), lo <= hi whole numbers, or nil when there is none.
func magnitudeRange(lo int64, loIncl bool, hi int64, hiIncl bool) Node {
	frac := Opt(Seq(Lit("."), Repeat(digit, 1, maxFracDigits)))
	zeroFrac := Opt(Seq(Lit("."), Repeat(Lit("0"), 1, maxFracDigits)))
	// A fraction that is not zero: some digit 1-9 among at most
	// maxFracDigits digits.
	nonZeroFrac := Seq(Lit("."), Repeat(Lit("0"), 0, maxFracDigits-1), digit1_9, Repeat(digit, 0, maxFracDigits-1))
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	if lo == hi {
		if loIncl && hiIncl {
			return Seq(Lit(num(lo)), zeroFrac)
		}
		return nil
	}
	var alts []Node
	// Integer part lo: lo itself only when inclusive, else a non-zero fraction.
	if loIncl {
		alts = append(alts, Seq(Lit(num(lo)), frac))
	} else {
		alts = append(alts, Seq(Lit(num(lo)), nonZeroFrac))
	}
	// Integer parts strictly between: any fraction.
	if lo+1 <= hi-1 {
		alts = append(alts, Seq(natRange(lo+1, hi-1), frac))
	}
	// Integer part hi: only hi itself.
	if hiIncl {
		alts = append(alts, Seq(Lit(num(hi)), zeroFrac))
	}
	return Alt(alts...)
}
