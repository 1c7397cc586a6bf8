package tokenizer

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// ugmModel is the unigram (SentencePiece "unigram", GGUF "t5") encoder's
// configuration: the normaliser's replacement table and the tries of the
// tokens that Viterbi search may use.
type ugmModel struct {
	// xcda and replacements are the two parts of the precompiled charsmap:
	// a double-array trie over input bytes whose leaves index the
	// NUL-terminated replacement strings. Both are empty without one.
	xcda         []uint32
	replacements []byte
	// tokens matches Normal, UserDefined and Unused token texts; user
	// matches UserDefined texts only, which normalisation keeps verbatim.
	tokens, user byteTrie
	// unknownScore is what a character no token covers costs: the lowest
	// Normal score less 10, as in SentencePiece.
	unknownScore float32
	addPrefix    bool // add_space_prefix: "▁" before the first word
	mergeSpaces  bool // remove_extra_whitespaces
}

// ugmUnknownPenalty is how much worse than the worst Normal token an
// unknown character scores.
const ugmUnknownPenalty = 10

// newUGM builds the encoder for v; v.Charsmap must already be valid (see
// parseCharsmap).
func newUGM(v *Vocab) (*ugmModel, error) {
	m := &ugmModel{addPrefix: v.AddSpacePrefix, mergeSpaces: v.RemoveExtraWhitespaces}
	var err error
	if m.xcda, m.replacements, err = parseCharsmap(v.Charsmap); err != nil {
		return nil, err
	}
	minScore := float32(math.MaxFloat32)
	var matched, user []int
	for id, typ := range v.Types {
		switch typ {
		case Normal:
			minScore = min(minScore, v.Scores[id])
			matched = append(matched, id)
		case Unused:
			matched = append(matched, id)
		case UserDefined:
			matched = append(matched, id)
			user = append(user, id)
		}
	}
	// float32 arithmetic as llama.cpp's; with no Normal token the
	// penalty vanishes in MaxFloat32's rounding, as there.
	m.unknownScore = minScore - ugmUnknownPenalty
	m.tokens = newByteTrie(v.Tokens, matched)
	m.user = newByteTrie(v.Tokens, user)
	return m, nil
}

// parseCharsmap splits tokenizer.ggml.precompiled_charsmap: a little-endian
// uint32 byte length of the trie, the trie's uint32 entries, then the
// replacement strings, which must not be empty. An empty charsmap is none.
func parseCharsmap(b []byte) ([]uint32, []byte, error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("precompiled charsmap of %d bytes has no size header", len(b))
	}
	size := uint64(binary.LittleEndian.Uint32(b))
	if size+4 >= uint64(len(b)) {
		return nil, nil, fmt.Errorf("precompiled charsmap trie of %d bytes overruns the charsmap of %d", size, len(b))
	}
	xcda := make([]uint32, size/4)
	for i := range xcda {
		xcda[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return xcda, b[4+size:], nil
}

// charsmapMatch finds the longest prefix of s that the charsmap replaces
// and returns its length and replacement; n is 0 when none applies.
// Entries outside the trie, replacement offsets outside the strings and
// unterminated strings end the search (llama.cpp throws on them).
func (m *ugmModel) charsmapMatch(s string) (n int, repl []byte) {
	if len(m.xcda) == 0 {
		return 0, nil
	}
	at := func(i uint32) (uint32, bool) {
		if uint64(i) >= uint64(len(m.xcda)) {
			return 0, false
		}
		return m.xcda[i], true
	}
	base := func(p uint32) uint32 { return (p >> 10) << ((p & (1 << 9)) >> 6) }
	root, ok := at(0)
	if !ok {
		return 0, nil
	}
	node := base(root)
	value := uint32(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0 {
			break
		}
		node ^= uint32(c)
		p, ok := at(node)
		if !ok || p&(1<<31|0xff) != uint32(c) {
			break
		}
		leaf := (p>>8)&1 != 0
		node ^= base(p)
		if leaf {
			q, ok := at(node)
			if !ok {
				break
			}
			n, value = i+1, q&(1<<31-1)
		}
	}
	if n == 0 || uint64(value) >= uint64(len(m.replacements)) {
		return 0, nil
	}
	rest := m.replacements[value:]
	end := slices.Index(rest, 0)
	if end < 0 {
		return 0, nil
	}
	return n, rest[:end]
}

// laxRuneLen is the length of the UTF-8 sequence at s[i] when its lead
// byte and continuation bytes are well formed (overlong forms and
// surrogates pass, as in llama.cpp's unicode_cpt_from_utf8), else 0.
func laxRuneLen(s string, i int) int {
	b := s[i]
	var n int
	switch {
	case b < 0x80:
		return 1
	case b&0x40 == 0:
		return 0
	case b&0x20 == 0:
		n = 2
	case b&0x10 == 0:
		n = 3
	case b&0x08 == 0:
		n = 4
	default:
		return 0
	}
	if i+n > len(s) {
		return 0
	}
	for k := 1; k < n; k++ {
		if s[i+k]&0xC0 != 0x80 {
			return 0
		}
	}
	return n
}

// normalize appends the normalised form of text to dst: each position's
// longest UserDefined token kept verbatim, else its longest charsmap
// replacement, else its character, else U+FFFD for one invalid byte; then
// spaces become U+2581, a run of them collapsed into one before each word
// (and none kept at the end) when mergeSpaces, and one U+2581 put before
// the first word when prefix.
func (m *ugmModel) normalize(dst []byte, text string, prefix bool) []byte {
	prepended, inWord := false, false
	emit := func(chunk []byte) {
		for _, c := range chunk {
			if c != ' ' {
				if !inWord {
					inWord = true
					if (prefix && !prepended) || m.mergeSpaces {
						dst = append(dst, spaceMark...)
						prepended = true
					}
				}
				dst = append(dst, c)
				continue
			}
			inWord = false
			if !m.mergeSpaces {
				dst = append(dst, spaceMark...)
			}
		}
	}
	var scratch [utf8Max]byte
	for i := 0; i < len(text); {
		if n, _ := m.user.longestPrefix(text[i:]); n > 0 {
			emit([]byte(text[i : i+n]))
			i += n
			continue
		}
		if n, repl := m.charsmapMatch(text[i:]); n > 0 {
			emit(repl)
			i += n
			continue
		}
		if n := laxRuneLen(text, i); n > 0 {
			emit(append(scratch[:0], text[i:i+n]...))
			i += n
			continue
		}
		emit(append(scratch[:0], "\uFFFD"...))
		i++
	}
	return dst
}

// utf8Max is the longest UTF-8 sequence.
const utf8Max = 4

// ugmSession is the scratch space of unigram encoding: the normalised
// text and the best path's table, 16 bytes per normalised byte. It lives
// in a pooled encodeState.
type ugmSession struct {
	norm  []byte
	best  []ugmBest
	stack []int32
}

// ugmBest is the best tokenisation of a prefix of the normalised text: its
// last token, where that token starts, and the sum of scores.
type ugmBest struct {
	id    int32
	start int32
	score float64
}

func (s *ugmSession) small() bool {
	return cap(s.norm) <= 4*maxPooledSymbols && cap(s.best) <= 4*maxPooledSymbols && cap(s.stack) <= maxPooledSymbols
}

// encodeUGM appends the tokens of one piece of raw text: normalised, then
// cut along the path of highest total score, where a character that no
// token covers on its own is UNK at unknownScore and runs of UNK fold into
// one. UserDefined tokens score 0. Ties keep the earliest-found path.
func (t *Tokenizer) encodeUGM(st *encodeState, piece string, prefix bool, c *canceller) bool {
	m, s := t.ugm, &st.ugm
	s.norm = m.normalize(s.norm[:0], piece, prefix)
	norm := s.norm
	n := len(norm)
	if n == 0 {
		return t.ugmDone(piece, c, st)
	}
	if n > math.MaxInt32-1 {
		n = math.MaxInt32 - 1 // no prompt comes near; keeps int32 offsets sound
		norm = norm[:n]
	}
	unk := int32(t.vocab.UNK)
	if cap(s.best) < n+1 {
		s.best = make([]ugmBest, n+1)
	}
	best := s.best[:n+1]
	for i := range best {
		best[i] = ugmBest{id: unk, score: -math.MaxFloat64}
	}
	best[0].score = 0
	for i := 0; i < n; {
		size := min(utf8Len(norm[i]), n-i)
		cur := best[i].score
		single := false
		node := int32(0)
		for j := i; j < n; j++ {
			var ok bool
			if node, ok = m.tokens.child(node, norm[j]); !ok {
				break
			}
			id := m.tokens.value[node]
			if id < 0 {
				continue
			}
			if j+1-i == size {
				single = true
			}
			score := float64(t.vocab.Scores[id])
			if t.vocab.Types[id] == UserDefined {
				score = 0
			}
			if cur+score > best[j+1].score {
				best[j+1] = ugmBest{id: id, start: int32(i), score: cur + score}
			}
		}
		if !single {
			if score := cur + float64(m.unknownScore); score > best[i+size].score {
				best[i+size] = ugmBest{id: unk, start: int32(i), score: score}
			}
		}
		i += size
		if !c.advance(size) {
			return false
		}
	}
	s.stack = s.stack[:0]
	prevUnknown := false
	for at := int32(n); ; {
		b := best[at]
		unknown := b.id == unk
		if !(prevUnknown && unknown) {
			s.stack = append(s.stack, b.id)
		}
		if b.start == 0 {
			break
		}
		prevUnknown = unknown
		at = b.start
	}
	for k := len(s.stack) - 1; k >= 0; k-- {
		st.out.push(int(s.stack[k]))
	}
	return t.ugmDone(piece, c, st)
}

// ugmDone accounts for a piece encoded and checks the token limit.
func (t *Tokenizer) ugmDone(piece string, c *canceller, st *encodeState) bool {
	c.limit.encoded += len(piece)
	return !c.over(st.out.n)
}

// byteTrie is a trie over byte strings with each node's children stored
// together, sorted by label: node i's children are kids[first[i]:first[i+1]].
// Node 0 is the root.
type byteTrie struct {
	first []int32
	label []byte
	kids  []int32
	value []int32 // token id ending at the node, -1 for none
}

// newByteTrie builds the trie of texts[id] for the given ids.
func newByteTrie(texts []string, ids []int) byteTrie {
	type entry struct {
		text string
		id   int32
	}
	es := make([]entry, len(ids))
	for i, id := range ids {
		es[i] = entry{texts[id], int32(id)}
	}
	slices.SortFunc(es, func(a, b entry) int {
		switch {
		case a.text < b.text:
			return -1
		case a.text > b.text:
			return 1
		}
		return 0
	})
	// Nodes are numbered breadth first, so each node's children are made
	// one after another; a node is the range of sorted texts under it.
	type span struct{ lo, hi, depth int }
	queue := []span{{0, len(es), 0}}
	var tr byteTrie
	for q := 0; q < len(queue); q++ {
		sp := queue[q]
		tr.first = append(tr.first, int32(len(tr.label)))
		lo := sp.lo
		val := int32(-1)
		if lo < sp.hi && len(es[lo].text) == sp.depth {
			val = es[lo].id
			lo++
		}
		tr.value = append(tr.value, val)
		for lo < sp.hi {
			c := es[lo].text[sp.depth]
			hi := lo + 1
			for hi < sp.hi && es[hi].text[sp.depth] == c {
				hi++
			}
			tr.label = append(tr.label, c)
			tr.kids = append(tr.kids, int32(len(queue)))
			queue = append(queue, span{lo, hi, sp.depth + 1})
			lo = hi
		}
	}
	tr.first = append(tr.first, int32(len(tr.label)))
	return tr
}

// child returns node's child by label c.
func (tr *byteTrie) child(node int32, c byte) (int32, bool) {
	lo, hi := int(tr.first[node]), int(tr.first[node+1])
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if tr.label[mid] < c {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < int(tr.first[node+1]) && tr.label[lo] == c {
		return tr.kids[lo], true
	}
	return 0, false
}

// longestPrefix returns the length and id of the longest text in tr that
// starts s; 0 when none.
func (tr *byteTrie) longestPrefix(s string) (int, int32) {
	if len(tr.value) == 0 {
		return 0, -1
	}
	n, id, node := 0, int32(-1), int32(0)
	for i := 0; i < len(s); i++ {
		var ok bool
		if node, ok = tr.child(node, s[i]); !ok {
			break
		}
		if v := tr.value[node]; v >= 0 {
			n, id = i+1, v
		}
	}
	return n, id
}
