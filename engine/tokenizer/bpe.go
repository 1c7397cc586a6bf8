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
	// ranks maps a pair of symbols (left<<32 | right) to its rank, the
	// index of its line in the merges; results[rank] is the symbol it merges
	// into.
	ranks   map[uint64]int32
	results []int32
	// byteSymbol[b] is the symbol of input byte b before any merge.
	byteSymbol [256]int32
	// extra holds the texts of symbols Size(), Size()+1, ...; extraIDs
	// indexes them.
	extra    []string
	extraIDs map[string]int32
	// longestText is the length in bytes of the longest token text: no
	// longer word can be a token whole.
	longestText int
	// spaceSymbol is the symbol of U+2581 (-1: none), what a space in
	// canonical text starts as (see appendMerged).
	spaceSymbol int32
	// specialSymbols are the input bytes of the tokens that are not Normal
	// but merging can make (byte symbols and merge results: Qwen 2 merges
	// "</s>", DeepSeek's byte alphabet has UserDefined letters); see
	// longestWithin.
	specialSymbols [][]byte
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
		ranks:        make(map[uint64]int32, len(merges)),
		results:      make([]int32, len(merges)),
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
	for _, text := range t.vocab.Tokens {
		m.longestText = max(m.longestText, len(text))
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
		if _, dup := m.ranks[key]; dup {
			continue
		}
		joined = append(append(joined[:0], left...), right...)
		result, ok := t.byText[string(joined)]
		if !ok {
			result = int(symbol(string(joined)))
		}
		m.ranks[key] = int32(rank)
		m.results[rank] = int32(result)
		m.noteSpecial(t, int32(result))
	}
	for _, sym := range m.byteSymbol {
		m.noteSpecial(t, sym)
	}
	m.spaceSymbol = m.lookup(t, []byte(spaceMark))
	return m, nil
}

// noteSpecial adds symbol id to specialSymbols when it is a token that is
// not Normal and not there yet.
func (m *bpeModel) noteSpecial(t *Tokenizer, id int32) {
	if !m.byteLevel || int(id) >= t.Size() || t.vocab.Types[id] == Normal {
		return
	}
	spelt := decodeByteLevel(t.vocab.Tokens[id])
	for _, known := range m.specialSymbols {
		if bytes.Equal(known, spelt) {
			return
		}
	}
	m.specialSymbols = append(m.specialSymbols, spelt)
}

// bpeSession is the scratch space of merging one word; it lives in a
// pooled encodeState. A word of n bytes uses 20 bytes per byte (ids, ends,
// and the queue's 12), allocated at exactly n the first time a word that
// long comes.
type bpeSession struct {
	// ids[s] is the symbol of the live symbol that starts at byte s (-1:
	// a character no symbol spells).
	ids     []int32
	merge   mergeState
	encoded []byte
	chars   []byte // the word encodeChars works on
}

// small reports whether s is small enough to keep in the pool.
func (s *bpeSession) small() bool {
	return cap(s.ids) <= maxPooledSymbols && cap(s.encoded) <= 4*maxPooledSymbols
}

// reset sizes the session for a word of n bytes.
func (s *bpeSession) reset(n int) {
	s.ids = growInt32(s.ids, n)
	s.merge.reset(n)
}

// encodeWord appends the tokens of one pre-tokenized word (raw bytes; the
// byte-level alphabet is implied by byteSymbol) to out. It returns false
// when c says to stop.
func (s *bpeSession) encodeWord(t *Tokenizer, m *bpeModel, word string, out *idBuffer, c *canceller) bool {
	// A word whose text is longer than every token's cannot be one; its
	// text has at least a byte per byte of the word.
	if m.ignoreMerges && len(word) <= m.longestText {
		s.encoded = s.encoded[:0]
		for i := 0; i < len(word); i++ {
			s.encoded = append(s.encoded, byteText[word[i]]...)
		}
		if id, ok := t.byText[string(s.encoded)]; ok {
			out.push(id)
			return true
		}
	}
	if len(word) == 1 {
		s.emit(t, m, m.byteSymbol[word[0]], out)
		return true
	}
	// Words longer than 2 GiB do not fit int32 offsets; cut them, which can
	// only change how the cut bytes merge (no prompt gets near this).
	for len(word) > maxWordBytes {
		if !s.mergeBytes(t, m, word[:maxWordBytes], out, c) {
			return false
		}
		word = word[maxWordBytes:]
	}
	return s.mergeBytes(t, m, word, out, c)
}

// maxWordBytes bounds the word merge handles at once (int32 offsets).
const maxWordBytes = 1<<31 - 1

// mergeBytes appends the tokens of a word of a byte-level vocabulary, from
// one symbol per byte.
func (s *bpeSession) mergeBytes(t *Tokenizer, m *bpeModel, word string, out *idBuffer, c *canceller) bool {
	n := len(word)
	s.reset(n)
	ends := s.merge.ends
	for i := range n {
		s.ids[i] = m.byteSymbol[word[i]]
		ends[i] = int32(i + 1)
	}
	return s.run(t, m, n, out, c)
}

// run merges the symbols that s.ids and s.merge hold (the initial
// segmentation of a word of n bytes) and appends the tokens. It returns
// false when c says to stop.
func (s *bpeSession) run(t *Tokenizer, m *bpeModel, n int, out *idBuffer, c *canceller) bool {
	if !mergeSymbols(&s.merge, pairRule{bpe: m, ids: s.ids}, n, c) {
		return false
	}
	ends := s.merge.ends
	for p := int32(0); int(p) < n; p = ends[p] {
		if id := s.ids[p]; id >= 0 && int(id) < t.Size() {
			out.push(int(id))
			continue
		}
		s.fallback(t, m, s.ids[p], p, ends[p], out)
	}
	return true
}

// rank returns the rank of merging symbols left and right, if they merge.
func (m *bpeModel) rank(left, right int32) (uint32, bool) {
	if left < 0 || right < 0 {
		return 0, false
	}
	rank, ok := m.ranks[pairKey(left, right)]
	return uint32(rank), ok
}

// emit appends one symbol that is known to be a token or a byte.
func (s *bpeSession) emit(t *Tokenizer, m *bpeModel, id int32, out *idBuffer) {
	if int(id) < t.Size() {
		out.push(int(id))
		return
	}
	s.fallback(t, m, id, 0, 0, out)
}

// fallback spells symbol id, which is no token and covers s.chars[start:end],
// as llama.cpp does: byte-level vocabularies look up each byte of its
// (GPT-2 alphabet) text as a token, the others each byte of its raw text as
// a <0xXX> token; bytes without such a token are dropped.
func (s *bpeSession) fallback(t *Tokenizer, m *bpeModel, id, start, end int32, out *idBuffer) {
	if m.byteLevel {
		text := m.extra[int(id)-t.Size()]
		for i := 0; i < len(text); i++ {
			if tok, ok := t.byText[text[i:i+1]]; ok {
				out.push(tok)
			}
		}
		return
	}
	t.pushBytes(s.chars[start:end], out)
}

// encodeChars appends the tokens of one word of a non-byte-level vocabulary
// (canonical or escaped: see appendMerged): one symbol per UTF-8 character (a byte that
// starts no valid sequence takes the length it announces, as in
// llama.cpp), merged like a byte-level word. The session keeps word as
// s.chars while it works. It returns false when c says to stop.
func (s *bpeSession) encodeChars(t *Tokenizer, m *bpeModel, word []byte, out *idBuffer, c *canceller) bool {
	if m.newlineWords && len(bytes.Trim(word, "\n")) == 0 {
		if id, ok := t.byText[string(word)]; ok {
			out.push(id)
			return true
		}
	}
	for len(word) > maxWordBytes {
		cut := maxWordBytes
		for cut > 0 && !utf8.RuneStart(word[cut]) {
			cut--
		}
		if !s.encodeChars(t, m, word[:cut], out, c) {
			return false
		}
		word = word[cut:]
	}
	n := len(word)
	if n == 0 {
		return true
	}
	s.chars = word
	s.reset(n)
	s.merge.splitChars(word)
	for p := int32(0); int(p) < n; p = s.merge.ends[p] {
		s.ids[p] = m.lookup(t, word[p:s.merge.ends[p]])
	}
	ok := s.run(t, m, n, out, c)
	s.chars = nil
	return ok
}

// lookup returns the symbol of text, one character: a token, an extra, or
// -1. A space (canonical text) is U+2581.
func (m *bpeModel) lookup(t *Tokenizer, text []byte) int32 {
	if len(text) == 1 && text[0] == ' ' {
		return m.spaceSymbol
	}
	if id, ok := t.byText[string(text)]; ok {
		return int32(id)
	}
	if id, ok := m.extraIDs[string(text)]; ok {
		return id
	}
	return -1
}
