package grammar

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// Grammar is a compiled grammar: a set of rules, each a deterministic
// automaton over bytes whose edges either consume a byte or call another
// rule. It is immutable and safe to share between goroutines and requests.
type Grammar struct {
	states []state
	rules  []rule
	root   int32 // the root rule
	exp    []expansion
	dists  grammarDists // state distances, computed on first use (distance.go)
}

type rule struct {
	name  string
	start int32    // global index of the rule's first state
	n     int32    // number of states; they are start..start+n-1
	fp    [16]byte // fingerprint of the rule and every rule it reaches
}

type state struct {
	rule   int32
	edges  []edge     // byte edges, sorted by lo; disjoint when the rule is deterministic
	calls  []callEdge // call edges
	accept bool       // the rule may end here
}

type edge struct {
	lo, hi byte
	to     int32
}

type callEdge struct {
	rule int32 // callee
	ret  int32 // state of the caller's rule to continue at when the callee ends
}

// expansion is what a frame at a state can do before consuming a byte: the
// states with byte edges it reaches by entering callees (and leaving callees
// that match the empty string), and whether its rule can end here.
type expansion struct {
	items  []item
	canEnd bool
	first  byteClass // union of the bytes the items' edges accept
}

// item is a state with byte edges reachable from a frame without consuming,
// with the return states to push on the way there, outermost first.
type item struct {
	state  int32
	pushes []int32
}

// maxRuleStates bounds the states of one rule (after expansion of bounded
// repetitions), so that a hostile schema cannot exhaust memory.
const maxRuleStates = 1 << 18

// maxDFAGrowth bounds determinisation: a rule whose deterministic form would
// have more than this many times its nondeterministic states stays
// nondeterministic (correct, only slower at run time).
const maxDFAGrowth = 8

// nstate is a state under construction: epsilon edges are still present.
type nstate struct {
	eps   []int32
	edges []edge
	calls []callEdge
	final bool
}

type ruleBuilder struct {
	states []nstate
	index  map[string]int32 // rule name -> rule index
	err    error
}

func (r *ruleBuilder) newState() int32 {
	r.states = append(r.states, nstate{})
	if len(r.states) > maxRuleStates && r.err == nil {
		r.err = fmt.Errorf("grammar: a rule has more than %d states; reduce repetition bounds", maxRuleStates)
	}
	return int32(len(r.states) - 1)
}

func (r *ruleBuilder) ruleIndex(name string) int32 {
	i, ok := r.index[name]
	if !ok {
		if r.err == nil {
			r.err = fmt.Errorf("grammar: reference to undefined rule %q", name)
		}
		return 0
	}
	return i
}

// compile builds every named rule, order[0] being the root.
func compile(nodes map[string]Node, order []string) (*Grammar, error) {
	index := make(map[string]int32, len(order))
	for i, name := range order {
		index[name] = int32(i)
	}
	g := &Grammar{}
	for i, name := range order {
		if err := validateNode(nodes[name]); err != nil {
			return nil, fmt.Errorf("grammar: rule %q: %w", name, err)
		}
		rb := &ruleBuilder{index: index}
		final := rb.newState()
		rb.states[final].final = true
		entry := nodes[name].build(rb, final)
		if rb.err != nil {
			return nil, rb.err
		}
		dfa := determinize(rb.states, entry)
		start := int32(len(g.states))
		for _, s := range dfa {
			s.rule = int32(i)
			for j := range s.edges {
				s.edges[j].to += start
			}
			for j := range s.calls {
				s.calls[j].ret += start
			}
			g.states = append(g.states, s)
		}
		g.rules = append(g.rules, rule{name: name, start: start, n: int32(len(dfa))})
	}
	// Call edges were built with rule indices only; every rule now has states.
	if err := g.checkProductive(); err != nil {
		return nil, err
	}
	g.exp = make([]expansion, len(g.states))
	for s := range g.states {
		e, err := g.expand(int32(s))
		if err != nil {
			return nil, err
		}
		g.exp[s] = e
	}
	g.fingerprint()
	return g, nil
}

func validateNode(n Node) error {
	switch n := n.(type) {
	case nil:
		return fmt.Errorf("nil pattern")
	case seq:
		for _, p := range n {
			if err := validateNode(p); err != nil {
				return err
			}
		}
	case alt:
		if len(n) == 0 {
			return fmt.Errorf("an alternative with no options matches nothing")
		}
		for _, p := range n {
			if err := validateNode(p); err != nil {
				return err
			}
		}
	case repeat:
		if n.min < 0 || (n.max >= 0 && n.max < n.min) {
			return fmt.Errorf("repetition bounds %d..%d are invalid", n.min, n.max)
		}
		return validateNode(n.n)
	case byteClass:
		if n == (byteClass{}) {
			return fmt.Errorf("an empty byte class matches nothing")
		}
	}
	return nil
}

// determinize removes epsilon edges and runs the subset construction, with
// call edges as labels. States are numbered breadth-first from the entry, so
// that equal patterns give equal automata (the mask cache relies on it).
// When the subset construction would grow too large, the epsilon-free
// nondeterministic automaton is returned instead.
func determinize(ns []nstate, entry int32) []state {
	closure := epsilonClosures(ns)
	var (
		out   []state
		sets  [][]int32
		index = map[string]int32{}
		kbuf  []byte
	)
	intern := func(set []int32) int32 {
		kbuf = kbuf[:0]
		for _, s := range set {
			kbuf = binary.AppendUvarint(kbuf, uint64(s))
		}
		if i, ok := index[string(kbuf)]; ok {
			return i
		}
		i := int32(len(sets))
		index[string(kbuf)] = i
		sets = append(sets, set)
		return i
	}
	intern(closure[entry])
	limit := maxDFAGrowth*len(ns) + 64
	for i := 0; i < len(sets); i++ {
		if len(sets) > limit {
			return epsilonFree(ns, closure, entry)
		}
		set := sets[i]
		var st state
		// Byte edges: the member edges' bounds cut 0..255 into intervals on
		// which the target set is constant.
		var cuts byteClass // cut before byte b
		for _, s := range set {
			for _, e := range ns[s].edges {
				cuts.add(e.lo)
				if e.hi < 255 {
					cuts.add(e.hi + 1)
				}
			}
		}
		prevTo := int32(-1)
		for lo := 0; lo < 256; {
			hi := lo + 1
			for hi < 256 && !cuts.has(byte(hi)) {
				hi++
			}
			var tgt []int32
			for _, s := range set {
				for _, e := range ns[s].edges {
					if byte(lo) >= e.lo && byte(lo) <= e.hi {
						tgt = mergeSorted(tgt, closure[e.to])
					}
				}
			}
			if len(tgt) == 0 {
				prevTo = -1
			} else {
				to := intern(tgt)
				if to == prevTo && int(st.edges[len(st.edges)-1].hi) == lo-1 {
					st.edges[len(st.edges)-1].hi = byte(hi - 1)
				} else {
					st.edges = append(st.edges, edge{lo: byte(lo), hi: byte(hi - 1), to: to})
				}
				prevTo = to
			}
			lo = hi
		}
		// Call edges: per callee, the closure of all return states.
		var callees []int32
		for _, s := range set {
			for _, c := range ns[s].calls {
				if !slices.Contains(callees, c.rule) {
					callees = append(callees, c.rule)
				}
			}
			if ns[s].final {
				st.accept = true
			}
		}
		for _, callee := range callees {
			var tgt []int32
			for _, s := range set {
				for _, c := range ns[s].calls {
					if c.rule == callee {
						tgt = mergeSorted(tgt, closure[c.ret])
					}
				}
			}
			st.calls = append(st.calls, callEdge{rule: callee, ret: intern(tgt)})
		}
		out = append(out, st)
	}
	return out
}

// epsilonFree is the fallback of determinize: one state per reachable
// nondeterministic state, with its closure's edges.
func epsilonFree(ns []nstate, closure [][]int32, entry int32) []state {
	number := map[int32]int32{entry: 0}
	queue := []int32{entry}
	var out []state
	for i := 0; i < len(queue); i++ {
		var st state
		num := func(s int32) int32 {
			if n, ok := number[s]; ok {
				return n
			}
			number[s] = int32(len(queue))
			queue = append(queue, s)
			return number[s]
		}
		for _, s := range closure[queue[i]] {
			for _, e := range ns[s].edges {
				st.edges = append(st.edges, edge{lo: e.lo, hi: e.hi, to: num(e.to)})
			}
			for _, c := range ns[s].calls {
				st.calls = append(st.calls, callEdge{rule: c.rule, ret: num(c.ret)})
			}
			st.accept = st.accept || ns[s].final
		}
		slices.SortStableFunc(st.edges, func(a, b edge) int { return int(a.lo) - int(b.lo) })
		out = append(out, st)
	}
	return out
}

func epsilonClosures(ns []nstate) [][]int32 {
	out := make([][]int32, len(ns))
	seen := make([]int32, len(ns))
	for i := range seen {
		seen[i] = -1
	}
	for s := range ns {
		stack := []int32{int32(s)}
		seen[s] = int32(s)
		var set []int32
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			set = append(set, x)
			for _, e := range ns[x].eps {
				if seen[e] != int32(s) {
					seen[e] = int32(s)
					stack = append(stack, e)
				}
			}
		}
		slices.Sort(set)
		out[s] = set
	}
	return out
}

func mergeSorted(a, b []int32) []int32 {
	if len(a) == 0 {
		return b
	}
	out := make([]int32, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// checkProductive refuses rules that can match no finite string at all
// (every path loops through calls forever); a matcher could get stuck in one.
func (g *Grammar) checkProductive() error {
	productive := make([]bool, len(g.states)) // state can reach its rule's end
	ruleOK := make([]bool, len(g.rules))
	for changed := true; changed; {
		changed = false
		for s := len(g.states) - 1; s >= 0; s-- {
			if productive[s] {
				continue
			}
			st := &g.states[s]
			ok := st.accept
			for _, e := range st.edges {
				ok = ok || productive[e.to]
			}
			for _, c := range st.calls {
				ok = ok || (ruleOK[c.rule] && productive[c.ret])
			}
			if ok {
				productive[s] = true
				changed = true
				if r := st.rule; int32(s) == g.rules[r].start {
					ruleOK[r] = true
				}
			}
		}
	}
	for i, r := range g.rules {
		if !ruleOK[i] {
			return fmt.Errorf("grammar: rule %q matches no finite text", r.name)
		}
	}
	return nil
}

// expand computes the expansion of state s: a depth-first search through
// call edges (pushing return states) and rule ends (popping them).
func (g *Grammar) expand(s int32) (expansion, error) {
	var e expansion
	seen := map[string]bool{}
	var visit func(x int32, pushes []int32, entered []int32) error
	visit = func(x int32, pushes []int32, entered []int32) error {
		k := fmt.Sprint(x, pushes)
		if seen[k] {
			return nil
		}
		seen[k] = true
		st := &g.states[x]
		if len(st.edges) > 0 {
			e.items = append(e.items, item{state: x, pushes: slices.Clone(pushes)})
			for _, ed := range st.edges {
				e.first.addRange(ed.lo, ed.hi)
			}
		}
		for _, c := range st.calls {
			if slices.Contains(entered, c.rule) {
				return fmt.Errorf("grammar: rule %q is left-recursive (it can reach itself without consuming input)", g.rules[c.rule].name)
			}
			if err := visit(g.rules[c.rule].start, append(slices.Clip(pushes), c.ret), append(slices.Clip(entered), c.rule)); err != nil {
				return err
			}
		}
		if st.accept {
			if len(pushes) == 0 {
				e.canEnd = true
			} else {
				if err := visit(pushes[len(pushes)-1], pushes[:len(pushes)-1], entered[:len(entered)-1]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := visit(s, nil, nil); err != nil {
		return expansion{}, err
	}
	return e, nil
}

// fingerprint gives every rule a hash of its automaton and of every rule it
// reaches, with rules numbered in discovery order: structurally equal rules
// of different grammars share a fingerprint, and so the mask cache.
func (g *Grammar) fingerprint() {
	for r := range g.rules {
		h := sha256.New()
		h.Write([]byte("rill-grammar-v1"))
		disc := map[int32]int32{int32(r): 0}
		queue := []int32{int32(r)}
		var buf []byte
		for i := 0; i < len(queue); i++ {
			ru := g.rules[queue[i]]
			buf = binary.AppendUvarint(buf[:0], uint64(ru.n))
			for s := ru.start; s < ru.start+ru.n; s++ {
				st := &g.states[s]
				acc := uint64(0)
				if st.accept {
					acc = 1
				}
				buf = binary.AppendUvarint(buf, acc)
				buf = binary.AppendUvarint(buf, uint64(len(st.edges)))
				for _, e := range st.edges {
					buf = append(buf, e.lo, e.hi)
					buf = binary.AppendUvarint(buf, uint64(e.to-ru.start))
				}
				buf = binary.AppendUvarint(buf, uint64(len(st.calls)))
				for _, c := range st.calls {
					d, ok := disc[c.rule]
					if !ok {
						d = int32(len(queue))
						disc[c.rule] = d
						queue = append(queue, c.rule)
					}
					buf = binary.AppendUvarint(buf, uint64(d))
					buf = binary.AppendUvarint(buf, uint64(c.ret-ru.start))
				}
			}
			h.Write(buf)
		}
		copy(g.rules[r].fp[:], h.Sum(nil))
	}
}

// NumStates is the number of automaton states, a measure of grammar size.
func (g *Grammar) NumStates() int { return len(g.states) }
