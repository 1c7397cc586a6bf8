package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// charClass is the set of Unicode properties the pre-tokenizers test: the
// general categories of a code point plus membership of White_Space.
type charClass uint8

const (
	classLetter charClass = 1 << iota // \p{L}
	classNumber                       // \p{N}
	classMark                         // \p{M}
	classPunct                        // \p{P}
	classSymbol                       // \p{S}
	classSpace                        // \s: White_Space, the set llama.cpp uses
)

// blockBits is log2 of the block size of the two-level class table.
const blockBits = 8

// classTable maps a code point to its charClass in two levels: index[cp >>
// blockBits] is the first entry of cp's block in blocks, and equal blocks are
// stored once (the table is about 40 KiB instead of 1.1 MiB).
type classTable struct {
	index  []uint16
	blocks []charClass
}

var (
	classesOnce sync.Once
	classes     classTable
	asciiClass  [utf8.RuneSelf]charClass
)

func init() {
	for c := range rune(utf8.RuneSelf) {
		asciiClass[c] = classOfSlow(c)
	}
}

// classOfSlow asks the unicode package; used to build the tables.
func classOfSlow(r rune) charClass {
	var c charClass
	switch {
	case unicode.IsLetter(r):
		c |= classLetter
	case unicode.IsNumber(r):
		c |= classNumber
	case unicode.IsMark(r):
		c |= classMark
	case unicode.IsPunct(r):
		c |= classPunct
	case unicode.IsSymbol(r):
		c |= classSymbol
	}
	if unicode.Is(unicode.White_Space, r) {
		c |= classSpace
	}
	return c
}

// buildClasses fills classes from the unicode package's range tables.
func buildClasses() {
	flat := make([]charClass, unicode.MaxRune+1)
	mark := func(t *unicode.RangeTable, c charClass) {
		for _, r := range t.R16 {
			for x := uint32(r.Lo); x <= uint32(r.Hi); x += uint32(r.Stride) {
				flat[x] |= c
			}
		}
		for _, r := range t.R32 {
			for x := r.Lo; x <= r.Hi; x += r.Stride {
				flat[x] |= c
			}
		}
	}
	mark(unicode.L, classLetter)
	mark(unicode.N, classNumber)
	mark(unicode.M, classMark)
	mark(unicode.P, classPunct)
	mark(unicode.S, classSymbol)
	mark(unicode.White_Space, classSpace)

	const size = 1 << blockBits
	seen := map[[size]charClass]uint16{}
	t := classTable{index: make([]uint16, len(flat)/size)}
	for b := range t.index {
		var blk [size]charClass
		copy(blk[:], flat[b*size:])
		at, ok := seen[blk]
		if !ok {
			at = uint16(len(t.blocks) / size)
			seen[blk] = at
			t.blocks = append(t.blocks, blk[:]...)
		}
		t.index[b] = at
	}
	classes = t
}

// classOf returns the properties of r; code points outside Unicode (which
// the lax decoder can produce) have none.
func classOf(r rune) charClass {
	if r < utf8.RuneSelf {
		if r < 0 {
			return 0
		}
		return asciiClass[r]
	}
	if r > unicode.MaxRune {
		return 0
	}
	classesOnce.Do(buildClasses)
	return classes.blocks[int(classes.index[r>>blockBits])<<blockBits|int(r&(1<<blockBits-1))]
}

// decodeRune reads one code point of s at i the way llama.cpp does
// (unicode_cpt_from_utf8): the lead byte alone decides the length, only the
// continuation bytes' top bits are checked (so overlong forms and surrogates
// decode), and a byte that starts no valid sequence is U+FFFD of length 1.
func decodeRune(s string, i int) (rune, int) {
	b := s[i]
	switch {
	case b < 0x80:
		return rune(b), 1
	case b&0x40 == 0:
		return utf8.RuneError, 1
	case b&0x20 == 0:
		if i+1 < len(s) && isCont(s[i+1]) {
			return rune(b&0x1f)<<6 | rune(s[i+1]&0x3f), 2
		}
	case b&0x10 == 0:
		if i+2 < len(s) && isCont(s[i+1]) && isCont(s[i+2]) {
			return rune(b&0x0f)<<12 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f), 3
		}
	case b&0x08 == 0:
		if i+3 < len(s) && isCont(s[i+1]) && isCont(s[i+2]) && isCont(s[i+3]) {
			return rune(b&0x07)<<18 | rune(s[i+1]&0x3f)<<12 | rune(s[i+2]&0x3f)<<6 | rune(s[i+3]&0x3f), 4
		}
	}
	return utf8.RuneError, 1
}

func isCont(b byte) bool { return b&0xc0 == 0x80 }

// laxValid reports whether decoding s with decodeRune and encoding every code
// point again gives s back, so that byte offsets into s are code point
// boundaries the pre-tokenizers can use as they are. Valid UTF-8 always is.
func laxValid(s string) bool {
	if utf8.ValidString(s) {
		return true
	}
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		if !sameEncoding(s[i:i+n], r) {
			return false
		}
		i += n
	}
	return true
}

// laxNormalize rewrites s as llama.cpp sees it after decoding: every byte
// that starts no sequence becomes U+FFFD, an overlong form becomes the
// shortest form of its code point, and code points above U+10FFFF (which
// llama.cpp cannot encode) become U+FFFD.
func laxNormalize(s string) string {
	out := make([]byte, 0, len(s)+len(s)/2)
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		out = appendLaxRune(out, r)
		i += n
	}
	return string(out)
}

// sameEncoding reports whether appendLaxRune(r) is exactly seq.
func sameEncoding(seq string, r rune) bool {
	var buf [utf8.UTFMax]byte
	return string(appendLaxRune(buf[:0], r)) == seq
}

// appendLaxRune encodes r like llama.cpp's unicode_cpt_to_utf8, which keeps
// surrogates (Go's encoder turns them into U+FFFD).
func appendLaxRune(out []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(out, byte(r))
	case r < 0x800:
		return append(out, 0xc0|byte(r>>6), 0x80|byte(r)&0x3f)
	case r < 0x10000:
		return append(out, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
	case r <= unicode.MaxRune:
		return append(out, 0xf0|byte(r>>18), 0x80|byte(r>>12)&0x3f, 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
	}
	return append(out, "\uFFFD"...)
}
