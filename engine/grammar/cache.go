package grammar

import (
	"bytes"
	"math/bits"
	"slices"
	"sync"
)

// maskEntry is the context-independent part of the mask of one automaton
// state, computed once per vocabulary by walking the token trie from a stack
// holding only that state:
//
//   - inside: the tokens that stack can consume while its rule is still
//     active (or that end exactly where the rule ends). They are allowed
//     whatever lies below the state on the real stack. Each has a distance:
//     from the end of the token to the end of the rule (see distance.go),
//     to which budget-aware masks add the distance of the frames below.
//     Most inside tokens share one (inside a JSON string, nearly all of
//     them are one byte, the closing quote, from the end): that is bulk,
//     and only the others are listed with theirs, so that the plain mask
//     stays one bitset OR.
//   - exits: tokens whose bytes run past the end of the rule. Whether they
//     are allowed depends on the caller's frame, so only their remainders are
//     kept, merged into a small trie (rest) walked at run time from the
//     caller's frame; exitAtRoot says the rule can end before the first
//     byte, so the caller's own mask applies in full.
//
// This is the adaptive token-mask cache of XGrammar in spirit: inside a JSON
// string almost every token is in inside, and only the few that contain a
// closing quote are checked against the context.
type maskEntry struct {
	dense      []uint64 // inside as a bitset, when many tokens are in it
	sparse     []int32  // inside as ids, when few are
	bulk       int32    // the distance of the inside tokens not in others
	farthest   int32    // the largest distance of an inside token
	others     []tokenDist
	exitAtRoot bool
	rest       trie // remainders of tokens that exit below the root; nil nodes when none
	size       int  // bytes held, for the cache budget
}

// tokenDist is an inside token whose distance is not the bulk's, by id.
type tokenDist struct {
	id, dist int32
}

func (e *maskEntry) orInside(dst []uint64) {
	if e.dense != nil {
		for i, w := range e.dense {
			dst[i] |= w
		}
		return
	}
	for _, id := range e.sparse {
		dst[id>>6] |= 1 << (id & 63)
	}
}

// orWithin adds the inside tokens whose distance is at most limit.
func (e *maskEntry) orWithin(dst []uint64, limit int32) {
	switch {
	case limit >= e.farthest:
		e.orInside(dst)
	case limit >= e.bulk:
		// All but the others too far: inside with their bits cleared.
		j := 0
		if e.dense != nil {
			for i, w := range e.dense {
				for ; j < len(e.others) && int(e.others[j].id>>6) == i; j++ {
					if x := e.others[j]; x.dist > limit {
						w &^= 1 << (x.id & 63)
					}
				}
				dst[i] |= w
			}
			return
		}
		for _, id := range e.sparse {
			for j < len(e.others) && e.others[j].id < id {
				j++
			}
			if j < len(e.others) && e.others[j].id == id && e.others[j].dist > limit {
				continue
			}
			dst[id>>6] |= 1 << (id & 63)
		}
	default:
		// The bulk is too far: only others can fit.
		for _, x := range e.others {
			if x.dist <= limit {
				dst[x.id>>6] |= 1 << (x.id & 63)
			}
		}
	}
}

// buildEntry computes the mask entry of state s over vocabulary v, with
// dist the grammar's state distances over v (see distances). With bottom,
// s is known to be at the bottom of every stack (a state of the root
// rule): its rule has no caller, so tokens that run past its end are
// simply not allowed and no remainders are kept.
func buildEntry(g *Grammar, v *Vocab, s int32, bottom bool, dist []int32) *maskEntry {
	w := &trieWalker{stepper: stepper{g: g}}
	e := &maskEntry{}
	words := MaskWords(v.n)
	// The inside tokens by distance, while the walk runs: few as ids, many
	// as a bitset (as the entry keeps them).
	type group struct {
		dist  int32
		ids   []int32  // while at most words
		bits  []uint64 // then
		count int
	}
	var groups []group
	last := -1 // the group of the last token, usually the next one's too
	type exit struct {
		node  int
		depth int
	}
	var exits []exit
	init := []frame{{state: s, parent: -1}}
	w.walk(&v.trie, init, func(node int, alive []frame) {
		if toks := v.trie.tokens(node); len(toks) > 0 {
			d := minChainDist(dist, w.arena, alive)
			if last < 0 || groups[last].dist != d {
				last = slices.IndexFunc(groups, func(g group) bool { return g.dist == d })
				if last < 0 {
					groups = append(groups, group{dist: d})
					last = len(groups) - 1
				}
			}
			gr := &groups[last]
			gr.count += len(toks)
			if gr.bits == nil && gr.count > words {
				gr.bits = make([]uint64, words)
				for _, id := range gr.ids {
					gr.bits[id>>6] |= 1 << (id & 63)
				}
				gr.ids = nil
			}
			if gr.bits == nil {
				gr.ids = append(gr.ids, toks...)
			} else {
				for _, id := range toks {
					gr.bits[id>>6] |= 1 << (id & 63)
				}
			}
		}
		for _, f := range alive {
			if !bottom && w.canComplete(f) {
				if node == 0 {
					e.exitAtRoot = true
				} else {
					exits = append(exits, exit{node: node, depth: int(v.trie.nodes[node].depth)})
				}
				break
			}
		}
	})
	// The largest group is the bulk; the others' tokens are listed with
	// their distances.
	count, bulk := 0, 0
	for i, gr := range groups {
		count += gr.count
		if gr.count > groups[bulk].count {
			bulk = i
		}
		e.farthest = max(e.farthest, gr.dist)
	}
	for i, gr := range groups {
		if i == bulk {
			continue
		}
		for _, id := range gr.ids {
			e.others = append(e.others, tokenDist{id: id, dist: gr.dist})
		}
		for j, w := range gr.bits {
			for ; w != 0; w &= w - 1 {
				e.others = append(e.others, tokenDist{id: int32(j*64 + bits.TrailingZeros64(w)), dist: gr.dist})
			}
		}
	}
	slices.SortFunc(e.others, func(a, b tokenDist) int { return int(a.id - b.id) })
	e.size = 8 * len(e.others)
	if len(groups) > 0 {
		e.bulk = groups[bulk].dist
	}
	switch {
	case count > words:
		b := &groups[bulk]
		if e.dense = b.bits; e.dense == nil {
			e.dense = make([]uint64, words)
			for _, id := range b.ids {
				e.dense[id>>6] |= 1 << (id & 63)
			}
		}
		for _, x := range e.others {
			e.dense[x.id>>6] |= 1 << (x.id & 63)
		}
		e.size += 8 * words
	case count > 0:
		e.sparse = make([]int32, 0, count)
		e.sparse = append(e.sparse, groups[bulk].ids...)
		for _, x := range e.others {
			e.sparse = append(e.sparse, x.id)
		}
		slices.Sort(e.sparse)
		e.size += 4 * count
	}
	// Remainders: for each exit node, every token strictly below it.
	type rest struct {
		b  []byte
		id int32
	}
	var rests []rest
	for _, x := range exits {
		end := int(v.trie.nodes[x.node].end)
		for j := x.node + 1; j < end; j++ {
			for _, id := range v.trie.tokens(j) {
				rests = append(rests, rest{b: v.tokens[id][x.depth:], id: id})
			}
		}
	}
	if len(rests) > 0 {
		slices.SortFunc(rests, func(a, b rest) int {
			if c := bytes.Compare(a.b, b.b); c != 0 {
				return c
			}
			return int(a.id - b.id)
		})
		rests = slices.CompactFunc(rests, func(a, b rest) bool { return a.id == b.id && bytes.Equal(a.b, b.b) })
		e.rest = buildTrieSorted(len(rests), func(i int) ([]byte, int32) { return rests[i].b, rests[i].id })
		e.size += 12*len(e.rest.nodes) + 4*len(e.rest.toks)
	}
	return e
}

// defaultCacheBytes bounds the memory of a vocabulary's mask cache.
const defaultCacheBytes = 256 << 20

type cacheKey struct {
	fp     [16]byte // rule fingerprint
	local  int32    // state index within the rule
	bottom bool     // built for the root rule (no remainders)
}

// maskCache holds mask entries of one vocabulary for every grammar compiled
// against it, keyed by rule fingerprint, so that requests with the same
// schema (or the same JSON building blocks) share them. When it outgrows its
// budget it is emptied; entries already handed out stay valid (they are
// immutable).
type maskCache struct {
	mu      sync.Mutex
	entries map[cacheKey]*maskEntry
	bytes   int
	limit   int
}

func newMaskCache(limit int) *maskCache {
	return &maskCache{entries: map[cacheKey]*maskEntry{}, limit: limit}
}

func (c *maskCache) get(k cacheKey) *maskEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[k]
}

func (c *maskCache) put(k cacheKey, e *maskEntry) *maskEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[k]; ok {
		return old // another sequence built it meanwhile
	}
	if c.bytes+e.size > c.limit {
		clear(c.entries)
		c.bytes = 0
	}
	c.entries[k] = e
	c.bytes += e.size
	return e
}
