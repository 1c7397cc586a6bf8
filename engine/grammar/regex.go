package grammar

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// formatNode returns the pattern of a string body (without quotes) in one of
// the supported formats. Every pattern generates only valid values (a
// subset of them: dates never use February 29, times never a leap second).
func formatNode(name string) (Node, bool) {
	switch name {
	case "date":
		return dateNode, true
	case "time":
		return timeNode, true
	case "date-time":
		return Seq(dateNode, Lit("T"), timeNode), true
	case "uuid":
		hex := Alt(ByteRange('0', '9'), ByteRange('a', 'f'))
		group := func(n int) Node { return Repeat(hex, n, n) }
		return Seq(group(8), Lit("-"), group(4), Lit("-"), group(4), Lit("-"), group(4), Lit("-"), group(12)), true
	case "ipv4":
		octet := natRange(0, 255)
		return Seq(octet, Lit("."), octet, Lit("."), octet, Lit("."), octet), true
	case "email":
		// A conservative subset: dot-separated atoms of letters, digits and
		// _+-, at a host name of two to four labels.
		atom := Repeat(Alt(ByteRange('a', 'z'), ByteRange('A', 'Z'), ByteRange('0', '9'), Bytes("_+-")), 1, 20)
		alnum := Alt(ByteRange('a', 'z'), ByteRange('A', 'Z'), ByteRange('0', '9'))
		label := Seq(alnum, Opt(Seq(Repeat(Alt(alnum, Lit("-")), 0, 20), alnum)))
		return Seq(atom, Repeat(Seq(Lit("."), atom), 0, 2), Lit("@"), label, Repeat(Seq(Lit("."), label), 1, 3)), true
	}
	return nil, false
}

// padded matches lo..hi as fixed-width decimals (two digits for hi < 100).
func padded(lo, hi int64) Node {
	var alts []Node
	for n := lo; n <= hi; n++ {
		alts = append(alts, Lit(fmt.Sprintf("%02d", n)))
	}
	return Alt(alts...)
}

var dateNode = func() Node {
	year := Repeat(digit, 4, 4)
	return Seq(year, Lit("-"), Alt(
		Seq(Alt(Lit("01"), Lit("03"), Lit("05"), Lit("07"), Lit("08"), Lit("10"), Lit("12")), Lit("-"), padded(1, 31)),
		Seq(Alt(Lit("04"), Lit("06"), Lit("09"), Lit("11")), Lit("-"), padded(1, 30)),
		Seq(Lit("02"), Lit("-"), padded(1, 28)),
	))
}()

var timeNode = func() Node {
	hour, minute := padded(0, 23), padded(0, 59)
	return Seq(hour, Lit(":"), minute, Lit(":"), minute,
		Opt(Seq(Lit("."), Repeat(digit, 1, 9))),
		Alt(Lit("Z"), Seq(Bytes("+-"), hour, Lit(":"), minute)))
}()

// patternNode compiles a JSON Schema "pattern" into the pattern of a JSON
// string body (without quotes) whose decoded value matches it. The regular
// expression is read with Go's RE2 syntax, which agrees with ECMA-262 on
// the common subset; lookaround and backreferences are refused. As in JSON
// Schema, a pattern is not anchored unless it says so with ^ and $.
// Characters that JSON must escape are generated escaped.
func patternNode(src string) (Node, error) {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("the pattern does not compile: %v", err)
	}
	re = re.Simplify()
	parts := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		parts = re.Sub
	}
	anchoredStart := len(parts) > 0 && (parts[0].Op == syntax.OpBeginText || parts[0].Op == syntax.OpBeginLine)
	anchoredEnd := len(parts) > 0 && (parts[len(parts)-1].Op == syntax.OpEndText || parts[len(parts)-1].Op == syntax.OpEndLine)
	if anchoredStart {
		parts = parts[1:]
	}
	if anchoredEnd && len(parts) > 0 {
		parts = parts[:len(parts)-1]
	}
	var seqParts []Node
	anyChars := Repeat(jsonChar, 0, -1)
	if !anchoredStart {
		seqParts = append(seqParts, anyChars)
	}
	for _, p := range parts {
		n, err := regexNode(p)
		if err != nil {
			return nil, err
		}
		seqParts = append(seqParts, n)
	}
	if !anchoredEnd {
		seqParts = append(seqParts, anyChars)
	}
	return Seq(seqParts...), nil
}

func regexNode(re *syntax.Regexp) (Node, error) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return Lit(""), nil
	case syntax.OpLiteral:
		var parts []Node
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				parts = append(parts, runeClass(foldRanges(r)))
			} else {
				parts = append(parts, runeClass([]rune{r, r}))
			}
		}
		return Seq(parts...), nil
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return nil, fmt.Errorf("the pattern has a character class that matches nothing")
		}
		return runeClass(re.Rune), nil
	case syntax.OpAnyCharNotNL:
		return runeClass([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}), nil
	case syntax.OpAnyChar:
		return runeClass([]rune{0, unicode.MaxRune}), nil
	case syntax.OpCapture:
		return regexNode(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := regexNode(re.Sub[0])
		if err != nil {
			return nil, err
		}
		lo, hi := 0, -1
		switch re.Op {
		case syntax.OpPlus:
			lo = 1
		case syntax.OpQuest:
			hi = 1
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
		}
		if lo > maxRepeat || hi > maxRepeat {
			return nil, fmt.Errorf("repetition counts above %d are not supported", maxRepeat)
		}
		return Repeat(sub, lo, hi), nil
	case syntax.OpConcat, syntax.OpAlternate:
		var subs []Node
		for _, s := range re.Sub {
			n, err := regexNode(s)
			if err != nil {
				return nil, err
			}
			subs = append(subs, n)
		}
		if re.Op == syntax.OpConcat {
			return Seq(subs...), nil
		}
		return Alt(subs...), nil
	}
	return nil, fmt.Errorf("the pattern uses %s, which is not supported (anchors only at the very start and end)", opName(re))
}

func opName(re *syntax.Regexp) string {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpBeginText:
		return "^ inside the pattern"
	case syntax.OpEndLine, syntax.OpEndText:
		return "$ inside the pattern"
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return "a word boundary"
	case syntax.OpNoMatch:
		return "an empty class"
	}
	return re.String()
}

// foldRanges returns r and its simple case foldings as rune ranges.
func foldRanges(r rune) []rune {
	out := []rune{r, r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, f, f)
	}
	return out
}

// runeClass matches one character of ranges (pairs lo, hi) as it appears in
// a JSON string: '"', '\' and control characters escaped, other code points
// as UTF-8. Surrogates are skipped (they are not characters).
func runeClass(ranges []rune) Node {
	var alts []Node
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		for r := lo; r <= hi && r < 0x20; r++ {
			alts = append(alts, Lit(escapeControl(r)))
		}
		lo = max(lo, 0x20)
		for _, special := range []rune{'"', '\\'} {
			if lo <= special && special <= hi {
				alts = append(alts, Lit(`\`+string(special)))
			}
		}
		for _, band := range [][2]rune{{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x7f}, {0x80, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xffff}, {0x10000, unicode.MaxRune}} {
			a, b := max(lo, band[0]), min(hi, band[1])
			if a <= b {
				alts = append(alts, utf8Range(encodeRune(a), encodeRune(b)))
			}
		}
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}

func escapeControl(r rune) string {
	switch r {
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	return fmt.Sprintf(`\u%04x`, r)
}

func encodeRune(r rune) []byte { return utf8.AppendRune(nil, r) }

// utf8Range matches the UTF-8 encodings from a to b, of equal length and
// within one band where encodings are ordered like code points and every
// byte string in between (continuation bytes 80..BF) is a valid encoding.
func utf8Range(a, b []byte) Node {
	if len(a) == 1 {
		return ByteRange(a[0], b[0])
	}
	if a[0] == b[0] {
		return Seq(ByteRange(a[0], a[0]), utf8Range(a[1:], b[1:]))
	}
	n := len(a) - 1
	minCont, maxCont := make([]byte, n), make([]byte, n)
	for i := range n {
		minCont[i], maxCont[i] = 0x80, 0xbf
	}
	alts := []Node{Seq(ByteRange(a[0], a[0]), utf8Range(a[1:], maxCont))}
	if a[0]+1 <= b[0]-1 {
		alts = append(alts, Seq(ByteRange(a[0]+1, b[0]-1), Repeat(ByteRange(0x80, 0xbf), n, n)))
	}
	alts = append(alts, Seq(ByteRange(b[0], b[0]), utf8Range(minCont, b[1:])))
	return Alt(alts...)
}
