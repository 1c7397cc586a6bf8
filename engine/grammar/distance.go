package grammar

import (
	"container/heap"
	"math"
	"sync"
)

// Distances to the end of the grammar, for budget-aware masks.
//
// The distance of an automaton state is the fewest bytes that take a frame
// there to the end of its rule: a byte edge costs one, a call the callee's
// shortest text. Only bytes the vocabulary has as a token on their own
// count (an edge whose bytes none is a token of is not taken), so that the
// bytes of such a path are also that many tokens: the distance is an upper
// bound on the tokens the shortest completion needs. Every byte is a token
// in byte-level BPE vocabularies and in SentencePiece ones with byte
// fallback; where some are not, the distance goes around them (or is
// unreachable) and is still the length of a path of single-byte tokens.
//
// A stack's distance is the sum of its frames' (the innermost rule goes to
// its end, then each caller from its return state to its own), and a
// matcher's the least over its stacks. Distances are computed once per
// grammar and set of single-byte tokens (in practice: once per grammar).

// unreachable is the distance of a state from which no end can be reached
// by single-byte tokens. Sums saturate at it.
const unreachable int32 = math.MaxInt32 / 4

// addDist adds distances, saturating at unreachable.
func addDist(a, b int32) int32 { return min(a+b, unreachable) }

// distTable is a grammar's state distances under one set of single-byte
// tokens.
type distTable struct {
	single byteClass
	dist   []int32
}

// grammarDists memoises a grammar's distance tables. A grammar is usually
// used with one vocabulary, so a short list suffices.
type grammarDists struct {
	mu     sync.Mutex
	tables []distTable
}

// distances returns the distance of every state of g when the bytes of
// single are tokens. Safe for concurrent use.
func (g *Grammar) distances(single byteClass) []int32 {
	g.dists.mu.Lock()
	defer g.dists.mu.Unlock()
	for _, t := range g.dists.tables {
		if t.single == single {
			return t.dist
		}
	}
	d := g.computeDistances(single)
	g.dists.tables = append(g.dists.tables, distTable{single: single, dist: d})
	return d
}

// computeDistances is Knuth's generalisation of Dijkstra's algorithm to
// grammars: a state's distance is the least of 0 (it accepts), 1 + the
// target's (a byte edge) and the callee's start's + the return state's (a
// call), each no less than the distances it is made of, so the state taken
// off the queue with the least tentative distance has its final one.
func (g *Grammar) computeDistances(single byteClass) []int32 {
	n := len(g.states)
	dist := make([]int32, n)
	for i := range dist {
		dist[i] = unreachable
	}
	// dependents[x] are the states whose distance reads x's, as CSR.
	count := make([]int32, n+1)
	g.eachDependency(single, func(s, x int32) { count[x+1]++ })
	for i := 1; i <= n; i++ {
		count[i] += count[i-1]
	}
	dependents := make([]int32, count[n])
	fill := append([]int32(nil), count[:n]...)
	g.eachDependency(single, func(s, x int32) {
		dependents[fill[x]] = s
		fill[x]++
	})
	eval := func(s int32) int32 {
		st := &g.states[s]
		if st.accept {
			return 0
		}
		best := unreachable
		for _, e := range st.edges {
			if single.anyIn(e.lo, e.hi) {
				best = min(best, addDist(1, dist[e.to]))
			}
		}
		for _, c := range st.calls {
			best = min(best, addDist(dist[g.rules[c.rule].start], dist[c.ret]))
		}
		return best
	}
	q := &distQueue{}
	for s := range g.states {
		if g.states[s].accept {
			dist[s] = 0
			heap.Push(q, distItem{s: int32(s)})
		}
	}
	done := make([]bool, n)
	for q.Len() > 0 {
		it := heap.Pop(q).(distItem)
		if done[it.s] || it.d != dist[it.s] {
			continue
		}
		done[it.s] = true
		for _, s := range dependents[count[it.s]:count[it.s+1]] {
			if done[s] {
				continue
			}
			if d := eval(s); d < dist[s] {
				dist[s] = d
				heap.Push(q, distItem{s: s, d: d})
			}
		}
	}
	return dist
}

// eachDependency calls f(s, x) for every state x whose distance state s's
// distance reads.
func (g *Grammar) eachDependency(single byteClass, f func(s, x int32)) {
	for s := range g.states {
		st := &g.states[s]
		for _, e := range st.edges {
			if single.anyIn(e.lo, e.hi) {
				f(int32(s), e.to)
			}
		}
		for _, c := range st.calls {
			f(int32(s), g.rules[c.rule].start)
			f(int32(s), c.ret)
		}
	}
}

type distItem struct {
	s, d int32
}

type distQueue []distItem

func (q distQueue) Len() int           { return len(q) }
func (q distQueue) Less(i, j int) bool { return q[i].d < q[j].d }
func (q distQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *distQueue) Push(x any)        { *q = append(*q, x.(distItem)) }
func (q *distQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

// anyIn reports whether c holds a byte in lo..hi.
func (c *byteClass) anyIn(lo, hi byte) bool {
	for w := int(lo) >> 6; w <= int(hi)>>6; w++ {
		m := c[w]
		if w == int(lo)>>6 {
			m &= ^uint64(0) << (lo & 63)
		}
		if w == int(hi)>>6 {
			m &= ^uint64(0) >> (63 - hi&63)
		}
		if m != 0 {
			return true
		}
	}
	return false
}

// chainDist is the distance of the stack topped by f, whose frames below
// it are in arena.
func chainDist(dist []int32, arena []frame, f frame) int32 {
	d := dist[f.state]
	for f.parent >= 0 {
		f = arena[f.parent]
		d = addDist(d, dist[f.state])
	}
	return d
}

// minChainDist is the least distance of the stacks topped by fs.
func minChainDist(dist []int32, arena []frame, fs []frame) int32 {
	best := unreachable
	for _, f := range fs {
		best = min(best, chainDist(dist, arena, f))
	}
	return best
}

// Distance returns how many tokens suffice to complete the grammar from
// here, the end-of-generation token not counted: the shortest completion
// in bytes, each byte a token of its own, so an upper bound (a vocabulary's
// longer tokens may do it in fewer). 0 means Done (or Ended); -1 that no
// completion can be spelled byte by byte with this vocabulary's tokens.
func (m *Matcher) Distance() int {
	if m.top().ended {
		return 0
	}
	d := minChainDist(m.dist, m.w.arena, m.current())
	if d >= unreachable {
		return -1
	}
	return int(d)
}

// MaskBudget is Mask for a sequence that may emit at most budget more
// tokens, its end-of-generation token included: it keeps only the tokens
// after which the grammar can still be completed, and the end token
// emitted, within the budget (by Distance: a non-end token is kept when
// the distance after it is at most budget-2; the end tokens when the
// grammar is complete). A sequence masked so from a point where it could
// finish in time always can (the first byte of a shortest completion is a
// token that keeps it so). Output that finishes in time anyway is left as
// it is as long as each of its tokens leaves room for the byte-counted
// completion: only tokens after which that does not fit are removed.
//
// When no token fits the budget (it was too small from the start), dst is
// the plain Mask and MaskBudget returns false: the sequence runs out of
// tokens as it would without a budget.
func (m *Matcher) MaskBudget(dst []uint64, budget int) bool {
	if budget < 1 {
		m.Mask(dst)
		return false
	}
	limit := int32(min(budget-2, int(unreachable)-1))
	m.mask(dst, limit)
	for _, w := range dst[:MaskWords(m.v.n)] {
		if w != 0 {
			return true
		}
	}
	m.Mask(dst)
	return false
}
