package tokenizer

import "unicode/utf8"

// spmSession holds the scratch space of SentencePiece merging; it lives in
// a pooled encodeState and is used by one goroutine at a time. A chunk of n
// bytes uses 16 bytes per byte (ends and the queue's 12), allocated at
// exactly n the first time a chunk that long comes.
type spmSession struct {
	ends  []int32 // as in merge.go
	queue mergeQueue
	key   []byte // spelling's scratch
}

// maxPooledSymbols bounds the scratch space kept for reuse, so that one huge
// prompt does not pin its buffers.
const maxPooledSymbols = 1 << 16

// small reports whether s is small enough to keep in the pool.
func (s *spmSession) small() bool {
	return cap(s.ends) <= maxPooledSymbols && cap(s.key) <= maxPooledSymbols
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
	s.ends = growInt32(s.ends, n)
	q := &s.queue
	q.reset(n)
	for off := 0; off < n; {
		size := min(utf8Len(text[off]), n-off)
		s.ends[off] = int32(off + size)
		for i := off + 1; i < off+size; i++ {
			s.ends[i] = 0
		}
		off += size
	}
	for p := int32(0); int(p) < n; p = s.ends[p] {
		q.at[p] = -1
		if priority, ok := s.joined(t, text, p); ok {
			q.add(priority, p)
		}
	}
	q.init()
	for merges := 1; len(q.heap) > 0; merges++ {
		if merges%mergesPerCheck == 0 && !c.alive() {
			return false
		}
		left, _ := q.top()
		if s.ends[left] == 0 {
			q.popTop() // a tombstone: this symbol merged into its left neighbour
			continue
		}
		right := s.ends[left]
		s.ends[left] = s.ends[right]
		s.ends[right] = 0 // right's candidate, if any, is now a tombstone
		if next, ok := s.joined(t, text, left); ok {
			q.replaceTop(next)
		} else {
			q.popTop()
		}
		if prev := prevStart(s.ends, left); prev >= 0 {
			if next, ok := s.joined(t, text, prev); ok {
				q.set(next, prev)
			} else {
				q.remove(prev)
			}
		}
	}

	for p := int32(0); int(p) < n; p = s.ends[p] {
		piece := text[p:s.ends[p]]
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

// joined returns the priority of merging the live symbol at p with its
// right neighbour: whether their joined text is a token, and its score.
func (s *spmSession) joined(t *Tokenizer, text []byte, p int32) (uint32, bool) {
	right := s.ends[p]
	if int(right) >= len(text) {
		return 0, false
	}
	id, ok := t.byText[string(spelling(text[p:s.ends[right]], &s.key))]
	if !ok {
		return 0, false
	}
	return scorePriority(t.vocab.Scores[id]), true
}
