package tokenizer

// The merge code this package used before merge.go: a lazy binary heap of
// every pair ever queued, stale entries told apart by their sizes, and
// symbol structs grown by append. It is kept here, unchanged but for its
// names and the merge table's shape, as the reference the new merge path
// is checked against (TestMergeMatchesReference, FuzzMergeMatchesReference).

import (
	"bytes"
	"context"
	"unicode/utf8"
)

// refEncode is encode with the reference merges: the same partition,
// pre-tokenizer and SentencePiece cuts, the old sessions for merging. It
// ignores MaxTokens.
func (t *Tokenizer) refEncode(text string, opts EncodeOptions) []int {
	c := canceller{ctx: context.Background()}
	st := new(encodeState)
	var out idBuffer
	var bpe refBPESession
	var spm refSPMSession
	if opts.AddSpecial && t.vocab.AddBOS {
		out.push(t.vocab.BOS)
	}
	opts.Plain = normalizeSpans(opts.Plain)
	t.partition(st, text, opts, &c)
	prevSpecial := !opts.Continuation
	for _, f := range st.frags {
		if f.token >= 0 {
			out.push(f.token)
			prevSpecial = true
			continue
		}
		piece := text[f.start:f.end]
		switch {
		case t.bpe != nil && !t.bpe.byteLevel:
			t.bpe.pre.split(piece, func(word string) bool {
				bpe.encodeChars(t, t.bpe, appendEscaped(nil, word), &out)
				return true
			})
		case t.bpe != nil:
			if !laxValid(piece) {
				piece = laxNormalize(piece)
			}
			t.bpe.pre.split(piece, func(word string) bool {
				bpe.encodeWord(t, t.bpe, word, &out)
				return true
			})
		default:
			prefix := t.vocab.AddSpacePrefix && prevSpecial
			cut := utf8.ValidString(piece)
			for len(piece) > 0 {
				end := len(piece)
				if cut {
					end = t.spmCuts.next(piece)
				}
				var buf []byte
				if prefix {
					buf = append(buf, spaceMark...)
					prefix = false
				}
				buf = appendEscaped(buf, piece[:end])
				spm.encodeChunked(t, buf, &out, maxSPMChunk)
				piece = piece[end:]
			}
		}
		prevSpecial = false
	}
	if opts.AddSpecial && t.vocab.AddEOS {
		out.push(t.vocab.EOS)
	}
	return out.take()
}

// refBPESession is the scratch space of merging one word; it lives in a
// pooled encodeState.
type refBPESession struct {
	syms    []refBPESymbol
	queue   []refBPEBigram
	encoded []byte
	chars   []byte // the word encodeChars works on
}

// small reports whether s is small enough to keep in the pool.
func (s *refBPESession) small() bool {
	return cap(s.syms) <= maxPooledSymbols && cap(s.queue) <= 2*maxPooledSymbols && cap(s.encoded) <= 4*maxPooledSymbols
}

// refBPESymbol is the run word[start:start+n] that currently forms symbol id
// (-1: no symbol spells it), in a doubly linked list (-1 at the ends); n is
// 0 once merged into its left neighbour.
type refBPESymbol struct {
	id, start, n, prev, next int32
}

// refBPEBigram is a queued merge of symbol left with its right neighbour into
// result; size, the byte length of the pair when it was queued, tells a
// stale entry from a current one (symbols only ever grow).
type refBPEBigram struct {
	rank, left, size, result int32
}

// before orders the queue: lowest rank first, then the leftmost pair.
func (a refBPEBigram) before(b refBPEBigram) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

// encodeWord appends the tokens of one pre-tokenized word (raw bytes; the
// byte-level alphabet is implied by byteSymbol) to out.
func (s *refBPESession) encodeWord(t *Tokenizer, m *bpeModel, word string, out *idBuffer) {
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

func (s *refBPESession) merge(t *Tokenizer, m *bpeModel, word string, out *idBuffer) {
	n := len(word)
	s.syms = s.syms[:0]
	for i := range n {
		s.syms = append(s.syms, refBPESymbol{id: m.byteSymbol[word[i]], start: int32(i), n: 1, prev: int32(i - 1), next: int32(i + 1)})
	}
	s.run(t, m, out)
}

// run merges the symbols in s.syms (the initial segmentation of a word) and
// appends the tokens.
func (s *refBPESession) run(t *Tokenizer, m *bpeModel, out *idBuffer) {
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
func (s *refBPESession) emit(t *Tokenizer, m *bpeModel, id int32, out *idBuffer) {
	if int(id) < t.Size() {
		out.push(int(id))
		return
	}
	s.fallback(t, m, refBPESymbol{id: id}, out)
}

// fallback spells a symbol that is no token, as llama.cpp does: byte-level
// vocabularies look up each byte of its (GPT-2 alphabet) text as a token,
// the others each byte of its raw text as a <0xXX> token; bytes without
// such a token are dropped.
func (s *refBPESession) fallback(t *Tokenizer, m *bpeModel, sym refBPESymbol, out *idBuffer) {
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
func (s *refBPESession) encodeChars(t *Tokenizer, m *bpeModel, word []byte, out *idBuffer) {
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
		s.syms = append(s.syms, refBPESymbol{id: m.lookup(t, word[off:off+n]), start: int32(off), n: int32(n), prev: i - 1, next: i + 1})
		off += n
	}
	if len(s.syms) > 0 {
		s.run(t, m, out)
	}
	s.chars = nil
}

func (s *refBPESession) tryAdd(m *bpeModel, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := s.syms[left], s.syms[right]
	if l.id < 0 || r.id < 0 {
		return
	}
	rank, ok := m.ranks[pairKey(l.id, r.id)]
	if !ok {
		return
	}
	s.push(refBPEBigram{rank: rank, left: left, size: l.n + r.n, result: m.results[rank]})
}

// push and pop keep s.queue a binary heap ordered by before.
func (s *refBPESession) push(b refBPEBigram) {
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

func (s *refBPESession) pop() refBPEBigram {
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

// refSPMSession holds the scratch space of SentencePiece merging; it lives in
// a pooled encodeState and is used by one goroutine at a time.
type refSPMSession struct {
	syms  []refSymbol
	queue []refBigram
}

// refSymbol is a run of text[start:start+n] in a doubly linked list of the
// current segmentation; n is 0 once the refSymbol merged into its left neighbour.
type refSymbol struct {
	start, n   int32
	prev, next int32 // -1 at the ends
}

// refBigram is a candidate merge of symbols left and right (adjacent when it was
// queued) into a token of the given score; size is the byte length of the
// merged text, which tells a stale candidate from a current one.
type refBigram struct {
	left, right int32
	score       float32
	size        int32
}

// before reports whether a merges before b: higher score first, and of equal
// scores the leftmost pair (llama.cpp's priority order).
func (a refBigram) before(b refBigram) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// encodeChunked encodes text (spaces already escaped) in pieces of at most
// limit bytes, cut at character starts. Symbol offsets are int32; only a text
// over 2 GiB, which no model could take as a prompt anyway, is cut, and it
// merges as if a piece ended there.
func (s *refSPMSession) encodeChunked(t *Tokenizer, text []byte, out *idBuffer, limit int) {
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
func (s *refSPMSession) encodeChunk(t *Tokenizer, text []byte, out *idBuffer) {
	s.syms = s.syms[:0]
	s.queue = s.queue[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		i := int32(len(s.syms))
		s.syms = append(s.syms, refSymbol{start: int32(off), n: int32(n), prev: i - 1, next: i + 1})
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
func (s *refSPMSession) tryAdd(t *Tokenizer, text []byte, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := s.syms[left], s.syms[right]
	size := l.n + r.n
	id, ok := t.byText[string(text[l.start:l.start+size])]
	if !ok {
		return
	}
	s.push(refBigram{left: left, right: right, score: t.vocab.Scores[id], size: size})
}

// push and pop keep s.queue a binary heap ordered by refBigram.before; written
// out rather than via container/heap to avoid boxing every refBigram.
func (s *refSPMSession) push(b refBigram) {
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

func (s *refSPMSession) pop() refBigram {
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
