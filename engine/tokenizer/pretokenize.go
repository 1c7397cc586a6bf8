package tokenizer

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// A splitRule cuts a piece of text into words: every match of the rule and
// every run of text between two matches is a word, in order, as llama.cpp's
// unicode_regex_split turns a regex into offsets. Words are substrings of s
// and never empty. split stops and returns false as soon as yield does.
type splitRule interface {
	split(s string, yield func(word string) bool) bool
}

// preTokenizer is a list of split rules applied in turn: each rule splits
// every word the rule before it produced.
type preTokenizer []splitRule

// PreTokenizers lists the tokenizer.ggml.pre names a ModelGPT2 vocabulary
// may have, with llama.cpp's names for the same rule sets.
func PreTokenizers() []string {
	names := make([]string, 0, len(preNames))
	for name := range preNames {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// preFamily is a set of split rules, named after llama.cpp's pre-tokenizer
// types.
type preFamily int

const (
	preDefault preFamily = iota
	preLlama3
	preQwen2
	preQwen35
	preGPT2
	preStarcoder
	preFalcon
	preDeepseekLLM
	preDeepseekCoder
	preGemma4
	preGPT4O
)

// preSpec is what a tokenizer.ggml.pre name selects: the split rules and
// the defaults llama.cpp's loader sets with them.
type preSpec struct {
	family       preFamily
	ignoreMerges bool // ignore_merges
	addBOS       bool // add_bos when tokenizer.ggml.add_bos_token is absent
}

// preNames maps tokenizer.ggml.pre to its spec, as llama.cpp's vocab loader
// does for the rule families implemented here. Names whose models need more
// than the split rules (a SEP token, strip attributes, another model) are
// left out, so that they fail loudly instead of encoding differently.
var preNames = map[string]preSpec{
	"default": {family: preDefault},

	"llama3": {preLlama3, true, true}, "llama-v3": {preLlama3, true, true}, "llama-bpe": {preLlama3, true, true},
	"falcon3": {preLlama3, true, true}, "falcon-h1": {preLlama3, true, true}, "pixtral": {preLlama3, true, true},
	"midm-2.0": {preLlama3, true, true}, "lfm2": {preLlama3, true, true}, "jina-v5-nano": {preLlama3, true, true},
	"dbrx": {family: preLlama3}, "smaug-bpe": {family: preLlama3},

	"qwen2": {family: preQwen2}, "deepseek-r1-qwen": {family: preQwen2}, "kormo": {family: preQwen2},
	"f2llmv2": {family: preQwen2}, "megrez": {family: preQwen2}, "stablelm2": {family: preQwen2},
	"hunyuan": {family: preQwen2}, "solar-open": {family: preQwen2}, "grok-2": {family: preQwen2},

	"qwen35": {family: preQwen35},

	"gpt-2": {family: preGPT2}, "phi-2": {family: preGPT2}, "gigachat": {family: preGPT2},
	"a.x-4.0": {family: preGPT2}, "mellum": {family: preGPT2}, "exaone4": {family: preGPT2},
	"mpt": {family: preGPT2}, "olmo": {family: preGPT2}, "jais": {family: preGPT2},
	"trillion": {family: preGPT2}, "granite-docling": {family: preGPT2},

	"starcoder": {family: preStarcoder}, "refact": {family: preStarcoder}, "command-r": {family: preStarcoder},
	"smollm": {family: preStarcoder}, "codeshell": {family: preStarcoder}, "exaone": {family: preStarcoder},
	"minerva-7b": {family: preStarcoder}, "mellum2": {family: preStarcoder},

	"falcon": {family: preFalcon},

	// OpenAI's o200k split rules (gpt-oss's o200k_harmony, GPT-4o) and the
	// models that copied them. llama.cpp also turns off clean_spaces for
	// them, which only its llama_detokenize reads; Decode never cleans.
	"gpt-4o": {family: preGPT4O}, "llama4": {family: preGPT4O}, "kanana2": {family: preGPT4O},
	"talkie": {family: preGPT4O},

	"deepseek-llm":   {family: preDeepseekLLM},
	"deepseek-coder": {family: preDeepseekCoder},

	// SentencePiece-style BPE: spaces become U+2581, words are runs of
	// newlines and runs of anything else, no byte-level alphabet; llama.cpp
	// always adds BOS for it.
	"gemma4": {family: preGemma4, addBOS: true},
}

// lookupPre returns the spec of a tokenizer.ggml.pre value; "" is the
// default rule set, as in llama.cpp (which warns that quality suffers).
func lookupPre(name string) (preSpec, error) {
	if name == "" {
		return preSpec{family: preDefault}, nil
	}
	spec, ok := preNames[name]
	if !ok {
		return preSpec{}, fmt.Errorf("unsupported pre-tokenizer %q", name)
	}
	return spec, nil
}

// rules returns the split rules of a family, as llama.cpp's
// llm_tokenizer_bpe lists its regexes for that pre-tokenizer type.
func (f preFamily) rules() preTokenizer {
	switch f {
	case preLlama3:
		return preTokenizer{llama3Rule{digits: 3}}
	case preQwen2:
		return preTokenizer{llama3Rule{digits: 1}}
	case preQwen35:
		return preTokenizer{llama3Rule{digits: 1, marks: true}}
	case preGPT2:
		return preTokenizer{gpt2Rule{}}
	case preStarcoder:
		return preTokenizer{matchRule(oneOf(classNumber)), gpt2Rule{}}
	case preFalcon:
		return preTokenizer{matchRule(runOf(falconPunct)), gpt2Rule{}, matchRule(asciiDigits3)}
	case preDeepseekLLM:
		return preTokenizer{
			matchRule(isCRLF),
			matchRule(spaceThenRun(deepseekLetters.has)),
			matchRule(spaceThenRun(deepseekPunct.has)),
			trailingSpaceRule{},
			matchRule(runOf(cjkHangul.has)),
			matchRule(runOf(classIs(classNumber))),
		}
	case preGemma4:
		return preTokenizer{matchRule(newlineRun)}
	case preGPT4O:
		return preTokenizer{gpt4oRule{}}
	case preDeepseekCoder:
		return preTokenizer{
			matchRule(isCRLF),
			matchRule(spaceThenRun(classIs(classLetter))),
			matchRule(spaceThenRun(classIs(classPunct))),
			matchRule(runOf(cjkHangul.has)),
			matchRule(oneOf(classNumber)),
		}
	}
	return preTokenizer{
		matchRule(runOf(defaultPunct)),
		gpt2Rule{},
		matchRule(runOf(classIs(classNumber))),
		matchRule(asciiDigits3),
	}
}

// split calls yield with every word of s, in order, until yield returns
// false; it reports whether it got to the end.
func (p preTokenizer) split(s string, yield func(word string) bool) bool {
	if s == "" {
		return true
	}
	if len(p) == 0 {
		return yield(s)
	}
	// Each stage's yield feeds the next stage; the closures are made once
	// per call, not once per word.
	stages := make([]func(string) bool, len(p))
	stages[len(p)-1] = yield
	for i := len(p) - 2; i >= 0; i-- {
		next, rule := stages[i+1], p[i+1]
		stages[i] = func(w string) bool { return rule.split(w, next) }
	}
	return p[0].split(s, stages[0])
}

// cursor reads code points of a word by byte offset; offsets at or past the
// end read as "out of range" (no code point, no class), as llama.cpp's
// _get_cpt / _get_flags do outside the current word.
type cursor string

const outOfRange rune = -1

func (c cursor) at(i int) (rune, int) {
	if i >= len(c) {
		return outOfRange, 0
	}
	if b := c[i]; b < utf8.RuneSelf {
		return rune(b), 1
	}
	return decodeRune(string(c), i)
}

func (c cursor) class(i int) charClass {
	r, _ := c.at(i)
	return classOf(r)
}

// next returns the offset of the code point after the one at i.
func (c cursor) next(i int) int {
	_, n := c.at(i)
	return i + n
}

// gpt2Rule is GPT-2's split regex
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written out as a scanner, as llama.cpp's unicode_regex_split_custom_gpt2.
type gpt2Rule struct{}

func (gpt2Rule) split(s string, yield func(string) bool) bool {
	c := cursor(s)
	start := 0
	cut := func(end int) bool {
		ok := end == start || yield(s[start:end])
		start = end
		return ok
	}
	for pos := 0; pos < len(s); {
		r, n := c.at(pos)
		if r == '\'' && pos+n < len(s) {
			if end := contraction(c, pos+n, false); end > 0 {
				pos = end
				if !cut(pos) {
					return false
				}
				continue
			}
		}
		// ' ?' then a run of one class
		body := pos
		if r == ' ' {
			body = pos + n
		}
		if cls := c.class(body); body < len(s) {
			var in func(charClass) bool
			switch {
			case cls&classLetter != 0:
				in = func(k charClass) bool { return k&classLetter != 0 }
			case cls&classNumber != 0:
				in = func(k charClass) bool { return k&classNumber != 0 }
			case cls&(classSpace|classLetter|classNumber) == 0:
				in = func(k charClass) bool { return k&(classSpace|classLetter|classNumber) == 0 }
			}
			if in != nil {
				pos = body
				for pos < len(s) && in(c.class(pos)) {
					pos = c.next(pos)
				}
				if !cut(pos) {
					return false
				}
				continue
			}
		}
		var ok bool
		if pos, ok = whitespaceRun(c, pos, false, cut); !ok {
			return false
		}
	}
	return true
}

// contraction matches 's 't 're 've 'm 'll 'd after the apostrophe, at i,
// and returns the offset after it, or 0. With fold the letters match either
// case.
func contraction(c cursor, i int, fold bool) int {
	lower := func(r rune) rune {
		if fold && 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}
	r1, n1 := c.at(i)
	switch lower(r1) {
	case 's', 't', 'm', 'd':
		return i + n1
	}
	if i+n1 >= len(c) {
		return 0
	}
	r2, n2 := c.at(i + n1)
	switch r1, r2 = lower(r1), lower(r2); {
	case r1 == 'r' && r2 == 'e', r1 == 'v' && r2 == 'e', r1 == 'l' && r2 == 'l':
		return i + n1 + n2
	}
	return 0
}

// whitespaceRun applies the regexes' whitespace alternatives at pos:
// with crlf (the llama3 family) first \s*[\r\n]+, then \s+(?!\S), then \s+;
// a code point no alternative matches becomes a word of its own. It cuts
// and returns the new position and what cut returned.
func whitespaceRun(c cursor, pos int, crlf bool, cut func(int) bool) (int, bool) {
	end, lastCRLF, count := pos, -1, 0
	var beforeLast int
	for end < len(c) {
		r, n := c.at(end)
		if classOf(r)&classSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastCRLF = end + n
		}
		beforeLast = end
		end += n
		count++
	}
	switch {
	case crlf && lastCRLF >= 0:
		pos = lastCRLF // \s*[\r\n]+
	case count > 1 && end < len(c):
		pos = beforeLast // \s+(?!\S): leave the last space to the next word
	case count > 0:
		pos = end // \s+
	default:
		pos = c.next(pos) // no alternative matches
	}
	return pos, cut(pos)
}

// llama3Rule is the split regex of Llama 3 (digits 3), of Qwen 2 (digits
// 1) and of Qwen 3.5 (digits 1, marks):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with \p{N}{1,3} as \p{N} for Qwen 2, and \p{L} as [\p{L}\p{M}] for Qwen
// 3.5; a scanner like llama.cpp's unicode_regex_split_custom_llama3, _qwen2
// and _qwen35.
type llama3Rule struct {
	digits int
	marks  bool
}

func (rule llama3Rule) split(s string, yield func(string) bool) bool {
	c := cursor(s)
	letter := classLetter
	if rule.marks {
		letter |= classMark
	}
	start := 0
	cut := func(end int) bool {
		ok := end == start || yield(s[start:end])
		start = end
		return ok
	}
	for pos := 0; pos < len(s); {
		r, n := c.at(pos)
		cls := classOf(r)
		if r == '\'' && pos+n < len(s) {
			if end := contraction(c, pos+n, true); end > 0 {
				pos = end
				if !cut(pos) {
					return false
				}
				continue
			}
		}
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if r != '\r' && r != '\n' && cls&classNumber == 0 {
			if cls&letter != 0 || c.class(pos+n)&letter != 0 {
				pos += n
				for pos < len(s) && c.class(pos)&letter != 0 {
					pos = c.next(pos)
				}
				if !cut(pos) {
					return false
				}
				continue
			}
		}
		// \p{N}{1,digits}
		if cls&classNumber != 0 {
			for k := 0; pos < len(s) && c.class(pos)&classNumber != 0; {
				pos = c.next(pos)
				if k++; k == rule.digits {
					if !cut(pos) {
						return false
					}
					k = 0
				}
			}
			if !cut(pos) {
				return false
			}
			continue
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*
		other := classSpace | letter | classNumber
		body := pos
		if r == ' ' {
			body = pos + n
		}
		if body < len(s) && c.class(body)&other == 0 {
			pos = body
			for pos < len(s) && c.class(pos)&other == 0 {
				pos = c.next(pos)
			}
			for pos < len(s) && (s[pos] == '\r' || s[pos] == '\n') {
				pos++
			}
			if !cut(pos) {
				return false
			}
			continue
		}
		var ok bool
		if pos, ok = whitespaceRun(c, pos, true, cut); !ok {
			return false
		}
	}
	return true
}

// gpt4oRule is the split regex llama.cpp uses for the GPT-4o family
// (o200k):
//
//	[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+C?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with C the contractions 's 't 're 've 'm 'll 'd in either case. llama.cpp
// has no scanner for it: std::regex runs it over the text with every code
// point above ASCII collapsed to one byte per category. So a letter outside
// ASCII is both "not a-z" and "not A-Z": it counts as upper and as lower
// case, and only ASCII letters have a case. That, not the case-aware
// original of tokenizer.json, is what this scanner follows, alternatives in
// the regex's order and with its backtracking.
type gpt4oRule struct{}

func (gpt4oRule) split(s string, yield func(string) bool) bool {
	c := cursor(s)
	start := 0
	cut := func(end int) bool {
		ok := end == start || yield(s[start:end])
		start = end
		return ok
	}
	for pos := 0; pos < len(s); {
		r, n := c.at(pos)
		cls := classOf(r)
		// the two letter alternatives, after an optional [^\r\n\p{L}\p{N}]
		body := pos
		if r != '\r' && r != '\n' && cls&(classLetter|classNumber) == 0 {
			body = pos + n
		}
		if end := gpt4oWord(c, body); end > 0 {
			pos = end
			if !cut(pos) {
				return false
			}
			continue
		}
		// \p{N}{1,3}
		if cls&classNumber != 0 {
			for k := 0; k < 3 && pos < len(s) && c.class(pos)&classNumber != 0; k++ {
				pos = c.next(pos)
			}
			if !cut(pos) {
				return false
			}
			continue
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n/]*': after a line end, slashes go on.
		const other = classSpace | classLetter | classNumber
		body = pos
		if r == ' ' {
			body = pos + n
		}
		if body < len(s) && c.class(body)&other == 0 {
			pos = body
			for pos < len(s) && c.class(pos)&other == 0 {
				pos = c.next(pos)
			}
			for pos < len(s) && (s[pos] == '\r' || s[pos] == '\n' || s[pos] == '/') {
				pos++
			}
			if !cut(pos) {
				return false
			}
			continue
		}
		var ok bool
		if pos, ok = whitespaceRun(c, pos, true, cut); !ok {
			return false
		}
	}
	return true
}

// gpt4oCase tells whether the code point at i is a letter that matches
// (?=[\p{L}])([^a-z]) (upper) and one that matches (?=[\p{L}])([^A-Z])
// (lower) in llama.cpp's collapsed text: ASCII letters by their case, every
// other letter both.
func gpt4oCase(c cursor, i int) (upper, lower bool) {
	r, _ := c.at(i)
	switch {
	case 'A' <= r && r <= 'Z':
		return true, false
	case 'a' <= r && r <= 'z':
		return false, true
	case r >= utf8.RuneSelf && classOf(r)&classLetter != 0:
		return true, true
	}
	return false, false
}

// gpt4oWord matches U*L+C? else U+L*C? at b (U and L as gpt4oCase, C a
// contraction) and returns the end of the match, or 0 for none.
func gpt4oWord(c cursor, b int) int {
	// U* takes the longest run of upper letters; L+ then needs a lower one
	// after it, or the run gives back letters until one that is lower too
	// (a letter outside ASCII) starts L+ and ends it at once, the letters
	// after it being ASCII capitals.
	uEnd, lastBoth := b, -1
	for uEnd < len(c) {
		upper, lower := gpt4oCase(c, uEnd)
		if !upper {
			break
		}
		if lower {
			lastBoth = uEnd
		}
		uEnd = c.next(uEnd)
	}
	var end int
	if _, lower := gpt4oCase(c, uEnd); lower {
		end = uEnd
		for end < len(c) {
			if _, lower := gpt4oCase(c, end); !lower {
				break
			}
			end = c.next(end)
		}
	} else if lastBoth >= 0 {
		end = c.next(lastBoth)
	} else if uEnd > b {
		end = uEnd // the second alternative: capitals with no lower letter after
	} else {
		return 0
	}
	if end < len(c) && c[end] == '\'' {
		if e := contraction(c, end+1, true); e > 0 {
			end = e
		}
	}
	return end
}

// matchRule splits at the matches of a regex that has no alternatives, as
// std::regex_iterator finds them: the leftmost match, then the next one
// after its end. match returns the byte length of the match starting at i
// (0 for none).
type matchRule func(s cursor, i int) int

func (m matchRule) split(s string, yield func(string) bool) bool {
	c := cursor(s)
	start := 0
	for i := 0; i < len(s); {
		if n := m(c, i); n > 0 {
			if i > start && !yield(s[start:i]) {
				return false
			}
			if !yield(s[i : i+n]) {
				return false
			}
			i += n
			start = i
			continue
		}
		i = c.next(i)
	}
	return start == len(s) || yield(s[start:])
}

// trailingSpaceRule is the regex \s+$: the whitespace that ends the piece.
type trailingSpaceRule struct{}

func (trailingSpaceRule) split(s string, yield func(string) bool) bool {
	c := cursor(s)
	end := 0 // the end of the last code point that is not whitespace
	for i := 0; i < len(s); {
		r, n := c.at(i)
		i += n
		if classOf(r)&classSpace == 0 {
			end = i
		}
	}
	if end > 0 && !yield(s[:end]) {
		return false
	}
	return end == len(s) || yield(s[end:])
}

// classIs is a code point test for one property.
func classIs(k charClass) func(rune) bool {
	return func(r rune) bool { return classOf(r)&k != 0 }
}

// oneOf matches one code point of class k.
func oneOf(k charClass) matchRule {
	return func(c cursor, i int) int {
		r, n := c.at(i)
		if classOf(r)&k != 0 {
			return n
		}
		return 0
	}
}

// runOf matches one or more code points that in accepts: [...]+.
func runOf(in func(rune) bool) matchRule {
	return func(c cursor, i int) int {
		j := i
		for j < len(c) {
			r, n := c.at(j)
			if !in(r) {
				break
			}
			j += n
		}
		return j - i
	}
}

// spaceThenRun matches \s?[...]+ with the backtracking of a regex engine:
// one whitespace code point then the run if the run follows it, else the
// run alone.
func spaceThenRun(in func(rune) bool) matchRule {
	run := runOf(in)
	return func(c cursor, i int) int {
		r, n := c.at(i)
		if classOf(r)&classSpace != 0 {
			if m := run(c, i+n); m > 0 {
				return n + m
			}
		}
		return run(c, i)
	}
}

// newlineRun matches [\n]+; as a split rule it gives [^\n]+|[\n]+, runs
// of newlines and, between them, runs of anything else.
func newlineRun(c cursor, i int) int {
	j := i
	for j < len(c) && c[j] == '\n' {
		j++
	}
	return j - i
}

// isCRLF matches [\r\n].
func isCRLF(c cursor, i int) int {
	if i < len(c) && (c[i] == '\r' || c[i] == '\n') {
		return 1
	}
	return 0
}

// asciiDigits3 matches [0-9][0-9][0-9].
func asciiDigits3(c cursor, i int) int {
	if i+3 <= len(c) && isDigit(c[i]) && isDigit(c[i+1]) && isDigit(c[i+2]) {
		return 3
	}
	return 0
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// falconPunct is [\p{P}\$\+<=>\^~\|`]; defaultPunct is the same class
// without the backtick.
func falconPunct(r rune) bool {
	return classOf(r)&classPunct != 0 || strings.ContainsRune("$+<=>^~|`", r)
}

func defaultPunct(r rune) bool {
	return classOf(r)&classPunct != 0 || strings.ContainsRune("$+<=>^~|", r)
}

// runeSet is a bracket expression of explicit code point ranges, matched as
// std::wregex does: by code point value, except that whitespace outside
// ASCII never matches (llama.cpp hands such code points to the regex as
// U+000B, which no such set contains).
type runeSet []runeRange

type runeRange struct{ lo, hi rune }

// parseRuneSet reads the inside of a bracket expression made only of single
// code points and lo-hi ranges.
func parseRuneSet(expr string) runeSet {
	rs := []rune(expr)
	var set runeSet
	for i := 0; i < len(rs); i++ {
		lo, hi := rs[i], rs[i]
		if i+2 < len(rs) && rs[i+1] == '-' {
			hi = rs[i+2]
			i += 2
		}
		set = append(set, runeRange{lo, hi})
	}
	slices.SortFunc(set, func(a, b runeRange) int { return int(a.lo - b.lo) })
	return set
}

func (set runeSet) has(r rune) bool {
	if r > 0x7f && classOf(r)&classSpace != 0 {
		return false
	}
	i := sort.Search(len(set), func(i int) bool { return set[i].hi >= r })
	return i < len(set) && set[i].lo <= r
}

// The bracket expressions of the DeepSeek pre-tokenizers, from their
// tokenizer.json as llama.cpp lists them; escaped, because an editor's
// Unicode normalisation would turn U+212A KELVIN SIGN into "K" and U+2126
// OHM SIGN into omega, changing the sets.
var (
	deepseekLetters = parseRuneSet("A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943")
	deepseekPunct   = parseRuneSet("!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002")
	cjkHangul       = parseRuneSet("\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF")
)
