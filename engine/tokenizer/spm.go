package tokenizer

import "unicode/utf8"

// spmSession holds the scratch space of SentencePiece merging; it lives in
// a pooled encodeState and is used by one goroutine at a time. A chunk of n
// bytes uses 16 bytes per byte (ends and the queue's 12), allocated at
// exactly n the first time a chunk that long comes.
type spmSession struct {
	merge mergeState
	key   []byte // spelling's scratch
}

// maxPooledSymbols bounds the scratch space kept for reuse, so that one huge
// prompt does not pin its buffers.
const maxPooledSymbols = 1 << 16

// small reports whether s is small enough to keep in the pool.
func (s *spmSession) small() bool {
	return cap(s.merge.ends) <= maxPooledSymbols && cap(s.key) <= maxPooledSymbols
}

// utf8Len is the length of the UTF-8 sequence a lead byte announces, by its
// high nibble; continuation and invalid bytes count as one byte, as in
// llama.cpp's unicode_len_utf8.
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// encodeChunked encodes text (spaces already escaped) in pieces of at most
// limit bytes, cut at character starts. Symbol offsets are int32; only a text
// over 2 GiB, which no model could take as a prompt anyway, is cut, and it
// merges as if a piece ended there. It returns false when c says to stop.
func (s *spmSession) encodeChunked(t *Tokenizer, text []byte, out *idBuffer, limit int, c *canceller) bool {
	for len(text) > limit {
		cut := limit
		for back := 0; back < utf8.UTFMax-1 && cut > 1 && !utf8.RuneStart(text[cut]); back++ {
			cut--
		}
		if !s.encodeChunk(t, text[:cut], out, c) {
			return false
		}
		text = text[cut:]
	}
	return s.encodeChunk(t, text, out, c)
}

// encodeChunk merges and emits the tokens of text (canonical or escaped:
// see appendMerged), at most MaxInt32 bytes:
// it starts from one symbol per UTF-8 character and merges the adjacent
// pair whose joined text is the highest-scoring token, the leftmost of
// equal scores (llama.cpp's order), until no pair joins into a token. It
// returns false when c says to stop.
func (s *spmSession) encodeChunk(t *Tokenizer, text []byte, out *idBuffer, c *canceller) bool {
	n := len(text)
	if n == 0 {
		return true
	}
	s.merge.reset(n)
	s.merge.splitChars(text)
	if !mergeSymbols(&s.merge, pairRule{spm: &spmPairs{t: t, text: text, key: &s.key}}, n, c) {
		return false
	}
	ends := s.merge.ends
	for p := int32(0); int(p) < n; p = ends[p] {
		piece := text[p:ends[p]]
		if id, ok := t.byText[string(spelling(piece, &s.key))]; ok {
			out.push(id)
			continue
		}
		// Merged symbols are always tokens, so this is a single character
		// the vocabulary lacks: spell it byte by byte.
		t.pushBytes(piece, out)
	}
	return true
}

// spmPairs is SentencePiece's pair rule for one chunk, text: a pair merges
// when its joined text is a token, at the priority of that token's score.
type spmPairs struct {
	t    *Tokenizer
	text []byte
	key  *[]byte // spelling's scratch
}

// priority returns the priority of merging the live symbols that span
// [left, end) between them, if their joined text is a token.
func (p *spmPairs) priority(left, end int32) (uint32, bool) {
	id, ok := p.t.byText[string(spelling(p.text[left:end], p.key))]
	if !ok {
		return 0, false
	}
	return scorePriority(p.t.vocab.Scores[id]), true
}
