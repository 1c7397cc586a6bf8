package chat

import (
	"strings"
	"unicode"
)

// Python's str.upper, str.lower and str.title use Unicode's full case
// mappings, where one character may become several (ß upper-cases to SS).
// Go's unicode package has only the one-to-one mappings, so the
// unconditional multi-character mappings of SpecialCasing.txt for Latin
// letters and ligatures are listed here; other scripts' special cases fall
// back to the simple mapping.

var upperSpecial = map[rune]string{
	'ß': "SS", 'ŉ': "ʼN", 'ǰ': "J̌", 'ẖ': "H̱", 'ẗ': "T̈", 'ẘ': "W̊", 'ẙ': "Y̊", 'ẚ': "Aʾ",
	'ﬀ': "FF", 'ﬁ': "FI", 'ﬂ': "FL", 'ﬃ': "FFI", 'ﬄ': "FFL", 'ﬅ': "ST", 'ﬆ': "ST",
}

var titleSpecial = map[rune]string{
	'ß': "Ss", 'ŉ': "ʼN", 'ǰ': "J̌", 'ẖ': "H̱", 'ẗ': "T̈", 'ẘ': "W̊", 'ẙ': "Y̊", 'ẚ': "Aʾ",
	'ﬀ': "Ff", 'ﬁ': "Fi", 'ﬂ': "Fl", 'ﬃ': "Ffi", 'ﬄ': "Ffl", 'ﬅ': "St", 'ﬆ': "St",
}

func upperRune(b *strings.Builder, r rune) {
	if s, ok := upperSpecial[r]; ok {
		b.WriteString(s)
		return
	}
	b.WriteRune(unicode.ToUpper(r))
}

func titleRune(b *strings.Builder, r rune) {
	if s, ok := titleSpecial[r]; ok {
		b.WriteString(s)
		return
	}
	b.WriteRune(unicode.ToTitle(r))
}

func lowerRune(b *strings.Builder, r rune) {
	if r == 'İ' {
		b.WriteString("i̇")
		return
	}
	b.WriteRune(unicode.ToLower(r))
}

func pyUpper(s string) string {
	var b strings.Builder
	for _, r := range s {
		upperRune(&b, r)
	}
	return b.String()
}

func pyLower(s string) string {
	var b strings.Builder
	for _, r := range s {
		lowerRune(&b, r)
	}
	return b.String()
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyTitle is Python's str.title: a cased character after an uncased one
// starts a word and becomes title case; the rest become lower case.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := isCased(r)
		switch {
		case cased && prevCased:
			lowerRune(&b, r)
		case cased:
			titleRune(&b, r)
		default:
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

// capitalize is Python's str.capitalize: the first character in title
// case, the rest lower case.
func capitalize(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i == 0 {
			titleRune(&b, r)
		} else {
			lowerRune(&b, r)
		}
	}
	return b.String()
}

func swapcase(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case unicode.IsUpper(r):
			lowerRune(&b, r)
		case unicode.IsLower(r):
			upperRune(&b, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// jinjaTitle is jinja2's title filter: words start after whitespace,
// hyphens and opening brackets; each starts upper case (not title case) and
// continues lower case.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, r := range s {
		sep := isSpace(r) || strings.ContainsRune("-({[<", r)
		switch {
		case sep:
			b.WriteRune(r)
		case start:
			upperRune(&b, r)
		default:
			lowerRune(&b, r)
		}
		start = sep
	}
	return b.String()
}
