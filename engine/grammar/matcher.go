package grammar

import (
	"fmt"
	"slices"
)

// Matcher tracks one sequence's position in a grammar and says which tokens
// may come next. It is owned by one sequence and is not safe for concurrent
// use; the Grammar and Vocab it reads are shared.
//
// It keeps the state after every accepted token, so Rollback can undo
// tokens (rejected speculative drafts) without copying.
type Matcher struct {
	g       *Grammar
	v       *Vocab
	w       trieWalker
	dist    []int32      // per grammar state, the distance to the end of its rule (distance.go)
	entries []*maskEntry // per grammar state, resolved lazily from the vocabulary's cache
	// hist[i] describes the parse after i accepted tokens: its stacks are
	// stacks[hist[i].lo:hist[i].hi]; the arena was hist[i].arena long.
	hist    []histMark
	stacks  []frame
	scratch [2][]frame
	seen    []frame // stacks already masked during one Mask call
}

type histMark struct {
	lo, hi int32
	arena  int32
	ended  bool // an end-of-generation token was accepted
}

// NewMatcher returns a matcher at the start of g over vocabulary v.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v, dist: g.distances(v.single), entries: make([]*maskEntry, len(g.states))}
	m.w.g = g
	m.stacks = append(m.stacks, frame{state: g.rules[g.root].start, parent: -1})
	m.hist = append(m.hist, histMark{lo: 0, hi: 1})
	return m
}

// Vocab returns the vocabulary the matcher masks over.
func (m *Matcher) Vocab() *Vocab { return m.v }

func (m *Matcher) top() histMark { return m.hist[len(m.hist)-1] }

func (m *Matcher) current() []frame {
	h := m.top()
	return m.stacks[h.lo:h.hi]
}

// Len is the number of tokens accepted so far (end-of-generation included).
func (m *Matcher) Len() int { return len(m.hist) - 1 }

// Done reports whether the grammar is complete here, that is whether an
// end-of-generation token is allowed now. More tokens may be allowed too
// (a JSON number may go on, trailing whitespace may follow).
func (m *Matcher) Done() bool {
	h := m.top()
	if h.ended {
		return false
	}
	for _, f := range m.current() {
		if m.w.canComplete(f) {
			return true
		}
	}
	return false
}

// Ended reports whether an end-of-generation token was accepted: no token is
// allowed after it.
func (m *Matcher) Ended() bool { return m.top().ended }

// Mask sets dst (MaskWords(Vocab().Size()) words, bit id%64 of word id/64)
// to the tokens allowed next: those whose bytes keep the text a prefix of
// some string of the grammar, plus the end-of-generation tokens when the
// grammar is complete. Special tokens (nil bytes in the vocabulary) are never
// allowed. After an end-of-generation token nothing is allowed.
func (m *Matcher) Mask(dst []uint64) { m.mask(dst, unreachable) }

// mask is Mask keeping only the tokens after which the distance is at most
// limit (all of them with limit unreachable); the end-of-generation tokens
// go with Done.
func (m *Matcher) mask(dst []uint64, limit int32) {
	words := MaskWords(m.v.n)
	if len(dst) < words {
		panic(fmt.Sprintf("grammar: mask of %d words for a vocabulary of %d tokens (want %d)", len(dst), m.v.n, words))
	}
	dst = dst[:words]
	clear(dst)
	if m.top().ended {
		return
	}
	m.seen = m.seen[:0]
	for _, f := range m.current() {
		m.maskStack(f, dst, limit)
	}
	if m.Done() {
		for _, id := range m.v.eog {
			dst[id>>6] |= 1 << (id & 63)
		}
	}
}

// maskStack adds the tokens the stack topped by f can consume and after
// which its distance is at most limit (any, with limit unreachable).
func (m *Matcher) maskStack(f frame, dst []uint64, limit int32) {
	bounded := limit < unreachable
	for {
		if slices.Contains(m.seen, f) {
			return // added already, for another stack sharing this tail
		}
		m.seen = append(m.seen, f)
		e := m.entry(f.state)
		if !bounded {
			e.orInside(dst)
		} else if f.parent < 0 {
			e.orWithin(dst, limit)
		} else {
			// After an inside token the frames below f are as they were.
			e.orWithin(dst, limit-chainDist(m.dist, m.w.arena, m.w.arena[f.parent]))
		}
		if f.parent < 0 {
			return
		}
		caller := m.w.arena[f.parent]
		if len(e.rest.nodes) > 1 {
			var init [1]frame
			init[0] = caller
			m.w.walk(&e.rest, init[:], func(node int, alive []frame) {
				toks := e.rest.tokens(node)
				if len(toks) == 0 || (bounded && minChainDist(m.dist, m.w.arena, alive) > limit) {
					return
				}
				for _, id := range toks {
					dst[id>>6] |= 1 << (id & 63)
				}
			})
		}
		if !e.exitAtRoot {
			return
		}
		f = caller
	}
}

// entry returns the mask entry of state s, from the matcher, the
// vocabulary's cache, or by computing it.
func (m *Matcher) entry(s int32) *maskEntry {
	if e := m.entries[s]; e != nil {
		return e
	}
	rule := m.g.states[s].rule
	r := &m.g.rules[rule]
	k := cacheKey{fp: r.fp, local: s - r.start, bottom: rule == m.g.root}
	e := m.v.cache.get(k)
	if e == nil {
		e = m.v.cache.put(k, buildEntry(m.g, m.v, s, k.bottom, m.dist))
	}
	m.entries[s] = e
	return e
}

// Allowed reports whether token id may come next (the bit Mask would set).
// It costs a walk of the token's bytes, not a full mask.
func (m *Matcher) Allowed(id int) bool {
	if id < 0 || id >= m.v.n || m.top().ended {
		return false
	}
	if m.v.isEOG(id) {
		return m.Done()
	}
	b := m.v.tokens[id]
	if b == nil {
		return false
	}
	base := len(m.w.arena)
	ok := len(m.advance(b)) > 0
	m.w.arena = m.w.arena[:base]
	return ok
}

// advance steps the current stacks over b and returns the surviving stacks
// (in scratch storage); it leaves the arena grown.
func (m *Matcher) advance(b []byte) []frame {
	cur := append(m.scratch[0][:0], m.current()...)
	next := m.scratch[1][:0]
	for _, c := range b {
		next = next[:0]
		for _, f := range cur {
			next = m.w.step(f, c, next, 0)
		}
		cur, next = next, cur
		if len(cur) == 0 {
			break
		}
	}
	m.scratch[0], m.scratch[1] = cur, next
	return cur
}

// TokenError says that a token is not allowed by the grammar where it came.
type TokenError struct {
	Token int
	Pos   int // tokens accepted before it
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("grammar: token %d is not allowed after %d tokens", e.Token, e.Pos)
}

// Accept advances past token id. It returns a *TokenError, and leaves the
// matcher unchanged, when the token is not allowed (Mask would not set it).
// An end-of-generation token is accepted exactly when Done; after it the
// matcher allows nothing until rolled back.
func (m *Matcher) Accept(id int) error {
	if !m.Allowed(id) {
		return &TokenError{Token: id, Pos: m.Len()}
	}
	if m.v.isEOG(id) {
		h := m.top()
		m.hist = append(m.hist, histMark{lo: h.lo, hi: h.hi, arena: h.arena, ended: true})
		return nil
	}
	cur := m.advance(m.v.tokens[id])
	lo := int32(len(m.stacks))
	m.stacks = append(m.stacks, cur...)
	m.hist = append(m.hist, histMark{lo: lo, hi: int32(len(m.stacks)), arena: int32(len(m.w.arena))})
	return nil
}

// AcceptBytes advances past raw text, as if tokens spelling it had been
// accepted, counting as one token for Len and Rollback. It is for text the
// engine forces (a prefix the caller injects), not for sampled tokens.
func (m *Matcher) AcceptBytes(b []byte) error {
	if m.top().ended {
		return fmt.Errorf("grammar: text after the end of generation")
	}
	base := len(m.w.arena)
	cur := m.advance(b)
	if len(cur) == 0 {
		m.w.arena = m.w.arena[:base]
		return fmt.Errorf("grammar: text %q is not allowed after %d tokens", b, m.Len())
	}
	lo := int32(len(m.stacks))
	m.stacks = append(m.stacks, cur...)
	m.hist = append(m.hist, histMark{lo: lo, hi: int32(len(m.stacks)), arena: int32(len(m.w.arena))})
	return nil
}

// Rollback undoes the last n accepted tokens. n must be between 0 and Len.
func (m *Matcher) Rollback(n int) error {
	if n < 0 || n > m.Len() {
		return fmt.Errorf("grammar: cannot roll back %d of %d tokens", n, m.Len())
	}
	m.hist = m.hist[:len(m.hist)-n]
	h := m.top()
	m.stacks = m.stacks[:h.hi]
	m.w.arena = m.w.arena[:h.arena]
	return nil
}

// Clone returns an independent matcher at the same position, with the same
// history (for n > 1 choices forked from one prefix, or to explore a draft
// without touching the original).
func (m *Matcher) Clone() *Matcher {
	c := &Matcher{
		g:       m.g,
		v:       m.v,
		dist:    m.dist,
		entries: slices.Clone(m.entries),
		hist:    slices.Clone(m.hist),
		stacks:  slices.Clone(m.stacks),
	}
	c.w.g = m.g
	c.w.arena = slices.Clone(m.w.arena)
	return c
}

// AcceptPrefix accepts tokens from ids in order until one is not allowed and
// returns how many were accepted: the grammar-valid prefix of a speculative
// draft. Roll back with Rollback when the target rejects some of them.
func (m *Matcher) AcceptPrefix(ids []int) int {
	for i, id := range ids {
		if m.Accept(id) != nil {
			return i
		}
	}
	return len(ids)
}
