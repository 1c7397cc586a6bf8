package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// WordPiece ("bert") encoding, as llama.cpp's WPM tokenizer does it:
//
//  1. Normalise per code point: with StripAccents each code point becomes
//     the first code point of its canonical decomposition (NFD), so "é" is
//     "e" and a Hangul syllable its leading consonant; with Lowercase it is
//     lowercased (Unicode's simple mapping).
//  2. Split into words: whitespace ends a word; NUL, U+FFFD (and so invalid
//     UTF-8) and control, format, private-use and surrogate code points
//     vanish; with StripAccents so do marks (\p{M}); punctuation, ASCII
//     symbols and CJK ideographs are words of their own.
//  3. Prefix every word with U+2581 (llama.cpp's GGUF conversion stores
//     word-start pieces as "▁piece" and "##piece" continuations as plain
//     "piece") and cut it greedily into the longest tokens from its start;
//     a word that cannot be cut all the way is one UNK token.

// wpmKind is what the word splitter does with a normalised code point.
type wpmKind uint8

const (
	wpmAppend wpmKind = iota // part of the current word
	wpmSpace                 // ends the current word
	wpmDrop                  // vanishes (NUL, U+FFFD, \p{C} but unassigned)
	wpmMark                  // vanishes when accents are stripped (\p{M})
	wpmAlone                 // a word of its own: \p{P}, ASCII \p{S}, CJK ideographs
)

// wpmModel is the WordPiece encoder's configuration.
type wpmModel struct {
	lowercase, stripAccents bool
	// maxLen is the longest token text in bytes: no match is tried longer.
	maxLen int
	// ascii[b] is the kind and normalised byte of ASCII b, the common case.
	asciiKind [utf8.RuneSelf]wpmKind
	asciiRune [utf8.RuneSelf]byte
}

func newWPM(v *Vocab) *wpmModel {
	m := &wpmModel{lowercase: v.Lowercase, stripAccents: v.StripAccents}
	for _, text := range v.Tokens {
		m.maxLen = max(m.maxLen, len(text))
	}
	for b := range rune(utf8.RuneSelf) {
		r, kind := m.normalize(b)
		m.asciiKind[b], m.asciiRune[b] = kind, byte(r)
	}
	return m
}

// normalize returns the code point r becomes and what the splitter does
// with it.
func (m *wpmModel) normalize(r rune) (rune, wpmKind) {
	if m.stripAccents {
		r = nfdFirst(r)
	}
	kind := wpmKindOf(r)
	if kind == wpmMark && !m.stripAccents {
		kind = wpmAppend
	}
	if m.lowercase && kind != wpmDrop {
		r = unicode.ToLower(r)
	}
	return r, kind
}

// wpmKindOf classifies r after normalisation. Code points beyond Unicode
// (which lax decoding yields for some invalid UTF-8) vanish: llama.cpp
// cannot encode them again and fails.
func wpmKindOf(r rune) wpmKind {
	switch {
	case unicode.Is(unicode.White_Space, r):
		return wpmSpace
	case r == 0 || r == utf8.RuneError || r > unicode.MaxRune ||
		unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs):
		return wpmDrop
	case unicode.Is(unicode.M, r):
		return wpmMark
	case unicode.Is(unicode.P, r) || (r < 0x7f && unicode.Is(unicode.S, r)) || isCJKIdeograph(r):
		return wpmAlone
	}
	return wpmAppend
}

// isCJKIdeograph reports whether r is in the CJK ideograph blocks BERT
// splits on. The block after Extension D starts at U+2B920, not U+2B820,
// as in Hugging Face's tokenizers (and llama.cpp).
func isCJKIdeograph(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) ||
		(r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) ||
		(r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) ||
		(r >= 0x2F800 && r <= 0x2FA1F)
}

var (
	nfdOnce  sync.Once
	nfdTable map[rune]rune
)

// nfdFirst is the first code point of r's canonical decomposition, r itself
// when it has none.
func nfdFirst(r rune) rune {
	if r < 0xC0 { // nothing below U+00C0 decomposes
		return r
	}
	nfdOnce.Do(buildNFD)
	if d, ok := nfdTable[r]; ok {
		return d
	}
	return r
}

// buildNFD tabulates nfdFirst for the code points that decompose: about
// 2,000 with a decomposition in the tables and the 11,172 Hangul syllables,
// which decompose by rule.
func buildNFD() {
	nfdTable = make(map[rune]rune, 1<<14)
	var buf [utf8.UTFMax]byte
	for r := rune(0xC0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r < 0xE000 {
			continue
		}
		s := buf[:utf8.EncodeRune(buf[:], r)]
		hangul := r >= 0xAC00 && r <= 0xD7A3
		if !hangul && norm.NFD.Properties(s).Decomposition() == nil {
			continue
		}
		first, _ := utf8.DecodeRune(norm.NFD.Bytes(s))
		if first != r {
			nfdTable[r] = first
		}
	}
}

// wpmSession is the scratch space of WordPiece encoding: the current word
// (U+2581 first) and the tokens of the word being cut. It lives in a pooled
// encodeState.
type wpmSession struct {
	word []byte
	ids  []int32
}

func (s *wpmSession) small() bool {
	return cap(s.word) <= maxPooledSymbols && cap(s.ids) <= maxPooledSymbols
}

// encodeWPM appends the tokens of one piece of raw text. It checks the
// token limit and the context after every word.
func (t *Tokenizer) encodeWPM(st *encodeState, piece string, c *canceller) bool {
	m, s := t.wpm, &st.wpm
	s.word = append(s.word[:0], spaceMark...)
	done := 0 // input bytes accounted for
	flush := func(end int) bool {
		if len(s.word) > len(spaceMark) {
			t.cutWord(s, &st.out)
			s.word = s.word[:len(spaceMark)]
		}
		c.limit.encoded = end
		ok := !c.over(st.out.n) && c.advance(end-done)
		done = end
		return ok
	}
	encoded := c.limit.encoded
	for i := 0; i < len(piece); {
		var r rune
		var kind wpmKind
		n := 1
		if b := piece[i]; b < utf8.RuneSelf {
			r, kind = rune(m.asciiRune[b]), m.asciiKind[b]
		} else {
			r, n = decodeRune(piece, i)
			r, kind = m.normalize(r)
		}
		i += n
		switch kind {
		case wpmAppend:
			s.word = appendLaxRune(s.word, r)
		case wpmMark:
			if !m.stripAccents {
				s.word = appendLaxRune(s.word, r)
			}
		case wpmSpace:
			if !flush(encoded + i) {
				return false
			}
		case wpmAlone:
			if !flush(encoded + i - n) {
				return false
			}
			s.word = appendLaxRune(s.word, r)
			if !flush(encoded + i) {
				return false
			}
		}
	}
	return flush(encoded + len(piece))
}

// cutWord cuts s.word (U+2581 and a word) into the longest tokens from its
// start and appends them to out; UNK when some position starts no token.
// Matching is on bytes, as in llama.cpp.
func (t *Tokenizer) cutWord(s *wpmSession, out *idBuffer) {
	w := s.word
	s.ids = s.ids[:0]
	for i := 0; i < len(w); {
		j := min(len(w), i+t.wpm.maxLen)
		for ; j > i; j-- {
			if id, ok := t.byText[string(w[i:j])]; ok {
				s.ids = append(s.ids, int32(id))
				break
			}
		}
		if j == i {
			out.push(t.vocab.UNK)
			return
		}
		i = j
	}
	for _, id := range s.ids {
		out.push(int(id))
	}
}
