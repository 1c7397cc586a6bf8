package tokenizer

import "unicode/utf8"

// spmSession holds the scratch space of SentencePiece merging; it lives in
// a pooled encodeState and is used by one goroutine at a time.
type spmSession struct {
	syms  []symbol
	queue []bigram
}

// maxPooledSymbols bounds the scratch space kept for reuse, so that one huge
// prompt does not pin its buffers.
const maxPooledSymbols = 1 << 16

// small reports whether s is small enough to keep in the pool.
func (s *spmSession) small() bool {
	return cap(s.syms) <= maxPooledSymbols && cap(s.queue) <= 2*maxPooledSymbols
}

// symbol is a run of text[start:start+n] in a doubly linked list of the
// current segmentation; n is 0 once the symbol merged into its left neighbour.
type symbol struct {
	start, n   int32
	prev, next int32 // -1 at the ends
}

// bigram is a candidate merge of symbols left and right (adjacent when it was
// queued) into a token of the given score; size is the byte length of the
// merged text, which tells a stale candidate from a current one.
type bigram struct {
	left, right int32
	score       float32
	size        int32
}

// before reports whether a merges before b: higher score first, and of equal
// scores the leftmost pair (llama.cpp's priority order).
func (a bigram) before(b bigram) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
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
// merges as if a piece ended there.
func (s *spmSession) encodeChunked(t *Tokenizer, text []byte, out *idBuffer, limit int) {
	for len(text) > limit {
		cut := limit
		for back := 0; back < utf8.UTFMax-1 && cut > 1 && !utf8.RuneStart(text[cut]); back++ {
			cut--
		}
		s.encodeChunk(t, text[:cut], out)
		text = text[cut:]
	}
	s.encodeChunk(t, text, out)
}

// encodeChunk merges and emits the tokens of text, at most MaxInt32 bytes.
func (s *spmSession) encodeChunk(t *Tokenizer, text []byte, out *idBuffer) {
	s.syms = s.syms[:0]
	s.queue = s.queue[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		i := int32(len(s.syms))
		s.syms = append(s.syms, symbol{start: int32(off), n: int32(n), prev: i - 1, next: i + 1})
		off += n
	}
	if len(s.syms) == 0 {
		return
	}
	s.syms[len(s.syms)-1].next = -1

	for i := 1; i < len(s.syms); i++ {
		s.tryAdd(t, text, int32(i-1), int32(i))
	}
	for len(s.queue) > 0 {
		b := s.pop()
		left, right := &s.syms[b.left], &s.syms[b.right]
		if left.n == 0 || right.n == 0 || left.n+right.n != b.size {
			continue // one side merged elsewhere since b was queued
		}
		left.n += right.n
		right.n = 0
		left.next = right.next
		if left.next >= 0 {
			s.syms[left.next].prev = b.left
		}
		s.tryAdd(t, text, left.prev, b.left)
		s.tryAdd(t, text, b.left, left.next)
	}

	for i := int32(0); i != -1; i = s.syms[i].next {
		sym := s.syms[i]
		piece := text[sym.start : sym.start+sym.n]
		if id, ok := t.byText[string(piece)]; ok {
			out.push(id)
			continue
		}
		// Merged symbols are always tokens, so this is a single character
		// the vocabulary lacks: spell it byte by byte.
		for _, b := range piece {
			if id := t.byteToken[b]; id >= 0 {
				out.push(id)
			}
		}
	}
}

// tryAdd queues the merge of symbols left and right when their joined text
// is a token.
func (s *spmSession) tryAdd(t *Tokenizer, text []byte, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := s.syms[left], s.syms[right]
	size := l.n + r.n
	id, ok := t.byText[string(text[l.start:l.start+size])]
	if !ok {
		return
	}
	s.push(bigram{left: left, right: right, score: t.vocab.Scores[id], size: size})
}

// push and pop keep s.queue a binary heap ordered by bigram.before; written
// out rather than via container/heap to avoid boxing every bigram.
func (s *spmSession) push(b bigram) {
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

func (s *spmSession) pop() bigram {
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
