package tokenizer

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// GPT-2's byte-level alphabet: every byte stands for one printable code
// point, so that token texts never hold raw control bytes or spaces. Bytes
// that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 take U+0100, U+0101, ... in byte order (the
// space 0x20 is U+0120 'Ġ', the newline 0x0A is U+010A 'Ċ').
var (
	byteRune  [256]rune
	runeBytes [0x100 + 68]int16 // inverse of byteRune; -1 where none
	byteText  [256]string       // string(byteRune[b])
)

func init() {
	next := rune(0x100)
	for b := range 256 {
		switch {
		case '!' <= b && b <= '~', 0xA1 <= b && b <= 0xAC, 0xAE <= b && b <= 0xFF:
			byteRune[b] = rune(b)
		default:
			byteRune[b] = next
			next++
		}
	}
	for i := range runeBytes {
		runeBytes[i] = -1
	}
	for b, r := range byteRune {
		runeBytes[r] = int16(b)
		byteText[b] = string(r)
	}
}

// decodeByteLevel turns the text of a byte-level token back into the bytes
// it stands for. A code point outside the alphabet (no real vocabulary has
// one) is written as llama.cpp's llama_decode_text writes it:
// "[UNK_BYTE_0x" its UTF-8 in hex, the whole token text, "]".
func decodeByteLevel(text string) []byte {
	out := make([]byte, 0, len(text))
	for _, r := range text {
		if r >= 0 && int(r) < len(runeBytes) && runeBytes[r] >= 0 {
			out = append(out, byte(runeBytes[r]))
			continue
		}
		out = append(out, "[UNK_BYTE_0x"...)
		var buf [utf8.UTFMax]byte
		for _, b := range buf[:utf8.EncodeRune(buf[:], r)] {
			out = fmt.Appendf(out, "%02x", b)
		}
		out = append(out, text...)
		out = append(out, ']')
	}
	return out
}

// bpeModel is the BPE encoder of one vocabulary. Symbols are token ids;
// strings that merges mention but the vocabulary lacks get ids from Size()
// up (extra), so that merging never needs strings.
//
// Byte-level vocabularies (gpt2) start every word from one symbol per byte,
// spelt in GPT-2's alphabet. The others (gemma4) escape spaces as U+2581,
// start from one symbol per UTF-8 character and spell what no token covers
// with <0xXX> byte tokens.
type bpeModel struct {
	pre          preTokenizer
	ignoreMerges bool
	byteLevel    bool
	// newlineWords: a word of newlines only that is a token is that token
	// (llama.cpp's fix for Gemma 4).
	newlineWords bool
	// merges maps a pair of symbols (left<<32 | right) to its rank and the
	// symbol it merges into.
	merges map[uint64]bpeMerge
	// byteSymbol[b] is the symbol of input byte b before any merge.
	byteSymbol [256]int32
	// extra holds the texts of symbols Size(), Size()+1, ...; extraIDs
	// indexes them.
	extra    []string
	extraIDs map[string]int32
}

type bpeMerge struct {
	rank, result int32
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// newBPE builds the merge table. A merge is "left right", split at the first
// space after the first byte; the first of duplicate pairs wins, as in
// llama.cpp. A merge without a space can never apply and is skipped.
func newBPE(t *Tokenizer, spec preSpec, merges []string, ignoreMerges bool) (*bpeModel, error) {
	m := &bpeModel{
		pre:          spec.family.rules(),
		ignoreMerges: ignoreMerges,
		byteLevel:    spec.family != preGemma4,
		newlineWords: spec.family == preGemma4,
		merges:       make(map[uint64]bpeMerge, len(merges)),
		extraIDs:     map[string]int32{},
	}
	symbol := func(text string) int32 {
		if id, ok := t.byText[text]; ok {
			return int32(id)
		}
		if id, ok := m.extraIDs[text]; ok {
			return id
		}
		id := int32(t.Size() + len(m.extra))
		m.extra = append(m.extra, text)
		m.extraIDs[text] = id
		return id
	}
	for b := range 256 {
		m.byteSymbol[b] = symbol(byteText[b])
	}
	if len(merges) >= 1<<31 {
		return nil, fmt.Errorf("%d merges, more than ranks can address", len(merges))
	}
	var joined []byte
	for rank, merge := range merges {
		sp := -1
		if len(merge) > 1 {
			sp = strings.IndexByte(merge[1:], ' ')
		}
		if sp < 0 {
			continue
		}
		left, right := merge[:sp+1], merge[sp+2:]
		key := pairKey(symbol(left), symbol(right))
		if _, dup := m.merges[key]; dup {
			continue
		}
		joined = append(append(joined[:0], left...), right...)
		result, ok := t.byText[string(joined)]
		if !ok {
			result = int(symbol(string(joined)))
		}
		m.merges[key] = bpeMerge{rank: int32(rank), result: int32(result)}
	}
	return m, nil
}

// bpeSession is the scratch space of merging one word; it lives in a
// pooled encodeState.
type bpeSession struct {
	syms    []bpeSymbol
	queue   []bpeBigram
	encoded []byte
	chars   []byte // the word encodeChars works on
}

// small reports whether s is small enough to keep in the pool.
func (s *bpeSession) small() bool {
	return cap(s.syms) <= maxPooledSymbols && cap(s.queue) <= 2*maxPooledSymbols && cap(s.encoded) <= 4*maxPooledSymbols
}

// bpeSymbol is the run word[start:start+n] that currently forms symbol id
// (-1: no symbol spells it), in a doubly linked list (-1 at the ends); n is
// 0 once merged into its left neighbour.
type bpeSymbol struct {
	id, start, n, prev, next int32
}

// bpeBigram is a queued merge of symbol left with its right neighbour into
// result; size, the byte length of the pair when it was queued, tells a
// stale entry from a current one (symbols only ever grow).
type bpeBigram struct {
	rank, left, size, result int32
}

// before orders the queue: lowest rank first, then the leftmost pair.
func (a bpeBigram) before(b bpeBigram) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

// encodeWord appends the tokens of one pre-tokenized word (raw bytes; the
// byte-level alphabet is implied by byteSymbol) to out.
func (s *bpeSession) encodeWord(t *Tokenizer, m *bpeModel, word string, out *idBuffer) {
	if m.ignoreMerges {
		s.encoded = s.encoded[:0]
		for i := 0; i < len(word); i++ {
			s.encoded = append(s.encoded, byteText[word[i]]...)
		}
		if id, ok := t.byText[string(s.encoded)]; ok {
			out.push(id)
			return
		}
	}
	if len(word) == 1 {
		s.emit(t, m, m.byteSymbol[word[0]], out)
		return
	}
	// Words longer than 2 GiB do not fit int32 offsets; cut them, which can
	// only change how the cut bytes merge (no prompt gets near this).
	for len(word) > maxWordBytes {
		s.merge(t, m, word[:maxWordBytes], out)
		word = word[maxWordBytes:]
	}
	s.merge(t, m, word, out)
}

// maxWordBytes bounds the word merge handles at once (int32 offsets).
const maxWordBytes = 1<<31 - 1

func (s *bpeSession) merge(t *Tokenizer, m *bpeModel, word string, out *idBuffer) {
	n := len(word)
	s.syms = s.syms[:0]
	for i := range n {
		s.syms = append(s.syms, bpeSymbol{id: m.byteSymbol[word[i]], start: int32(i), n: 1, prev: int32(i - 1), next: int32(i + 1)})
	}
	s.run(t, m, out)
}

// run merges the symbols in s.syms (the initial segmentation of a word) and
// appends the tokens.
func (s *bpeSession) run(t *Tokenizer, m *bpeModel, out *idBuffer) {
	n := len(s.syms)
	s.queue = s.queue[:0]
	s.syms[n-1].next = -1
	for i := 1; i < n; i++ {
		s.tryAdd(m, int32(i-1), int32(i))
	}
	for len(s.queue) > 0 {
		b := s.pop()
		left := &s.syms[b.left]
		if left.n == 0 || left.next < 0 {
			continue
		}
		right := &s.syms[left.next]
		if left.n+right.n != b.size {
			continue // one side merged elsewhere since b was queued
		}
		left.id = b.result
		left.n += right.n
		right.n = 0
		left.next = right.next
		if left.next >= 0 {
			s.syms[left.next].prev = b.left
		}
		s.tryAdd(m, left.prev, b.left)
		s.tryAdd(m, b.left, left.next)
	}
	for i := int32(0); i != -1; i = s.syms[i].next {
		sym := s.syms[i]
		if sym.id >= 0 && int(sym.id) < t.Size() {
			out.push(int(sym.id))
			continue
		}
		s.fallback(t, m, sym, out)
	}
}

// emit appends one symbol that is known to be a token or a byte.
func (s *bpeSession) emit(t *Tokenizer, m *bpeModel, id int32, out *idBuffer) {
	if int(id) < t.Size() {
		out.push(int(id))
		return
	}
	s.fallback(t, m, bpeSymbol{id: id}, out)
}

// fallback spells a symbol that is no token, as llama.cpp does: byte-level
// vocabularies look up each byte of its (GPT-2 alphabet) text as a token,
// the others each byte of its raw text as a <0xXX> token; bytes without
// such a token are dropped.
func (s *bpeSession) fallback(t *Tokenizer, m *bpeModel, sym bpeSymbol, out *idBuffer) {
	if m.byteLevel {
		text := m.extra[int(sym.id)-t.Size()]
		for i := 0; i < len(text); i++ {
			if tok, ok := t.byText[text[i:i+1]]; ok {
				out.push(tok)
			}
		}
		return
	}
	for _, b := range s.chars[sym.start : sym.start+sym.n] {
		if tok := t.byteToken[b]; tok >= 0 {
			out.push(tok)
		}
	}
}

// encodeChars appends the tokens of one word of a non-byte-level vocabulary
// (spaces already escaped): one symbol per UTF-8 character (a byte that
// starts no valid sequence takes the length it announces, as in
// llama.cpp), merged like a byte-level word. The session keeps word as
// s.chars while it works.
func (s *bpeSession) encodeChars(t *Tokenizer, m *bpeModel, word []byte, out *idBuffer) {
	if m.newlineWords && len(bytes.Trim(word, "\n")) == 0 {
		if id, ok := t.byText[string(word)]; ok {
			out.push(id)
			return
		}
	}
	for len(word) > maxWordBytes {
		cut := maxWordBytes
		for cut > 0 && !utf8.RuneStart(word[cut]) {
			cut--
		}
		s.encodeChars(t, m, word[:cut], out)
		word = word[cut:]
	}
	s.chars = word
	s.syms = s.syms[:0]
	for off := 0; off < len(word); {
		n := min(utf8Len(word[off]), len(word)-off)
		i := int32(len(s.syms))
		s.syms = append(s.syms, bpeSymbol{id: m.lookup(t, word[off:off+n]), start: int32(off), n: int32(n), prev: i - 1, next: i + 1})
		off += n
	}
	if len(s.syms) > 0 {
		s.run(t, m, out)
	}
	s.chars = nil
}

// lookup returns the symbol of text: a token, an extra, or -1.
func (m *bpeModel) lookup(t *Tokenizer, text []byte) int32 {
	if id, ok := t.byText[string(text)]; ok {
		return int32(id)
	}
	if id, ok := m.extraIDs[string(text)]; ok {
		return id
	}
	return -1
}

func (s *bpeSession) tryAdd(m *bpeModel, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := s.syms[left], s.syms[right]
	if l.id < 0 || r.id < 0 {
		return
	}
	mg, ok := m.merges[pairKey(l.id, r.id)]
	if !ok {
		return
	}
	s.push(bpeBigram{rank: mg.rank, left: left, size: l.n + r.n, result: mg.result})
}

// push and pop keep s.queue a binary heap ordered by before.
func (s *bpeSession) push(b bpeBigram) {
	q := append(s.queue, b)
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].before(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
	s.queue = q
}

func (s *bpeSession) pop() bpeBigram {
	q := s.queue
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].before(q[m]) {
			m = l
		}
		if r < len(q) && q[r].before(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	s.queue = q
	return top
}
