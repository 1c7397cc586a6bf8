package grammar

// frame is one level of a parse stack: a state of some rule, and the index
// in the arena of the frame to return to when that rule ends (-1: none, the
// bottom of the stack). A stack is a chain of frames; stacks share their
// tails, so a step that forks a parse copies nothing.
//
// The top frame of a live stack is "pre-expansion": its state was reached by
// consuming a byte and it has not yet entered callees or left its rule; its
// expansion says what it can do next.
type frame struct {
	state  int32
	parent int32
}

// stepper advances parse stacks over bytes. Its arena only grows within a
// step; callers truncate it to drop the frames of abandoned parses.
type stepper struct {
	g     *Grammar
	arena []frame
}

// step appends to dst the stacks that f becomes after consuming b, and
// returns dst. A stack equal to one in dst[from:] is not appended again.
func (s *stepper) step(f frame, b byte, dst []frame, from int) []frame {
	g := s.g
	for {
		ex := &g.exp[f.state]
		if ex.first.has(b) {
			for i := range ex.items {
				it := &ex.items[i]
				parent := f.parent
				materialised := len(it.pushes) == 0
				for _, e := range g.states[it.state].edges {
					if b < e.lo {
						break
					}
					if b > e.hi {
						continue
					}
					if !materialised {
						for _, r := range it.pushes {
							s.arena = append(s.arena, frame{state: r, parent: parent})
							parent = int32(len(s.arena) - 1)
						}
						materialised = true
					}
					dst = s.appendUnique(dst, from, frame{state: e.to, parent: parent})
				}
			}
		}
		if !ex.canEnd || f.parent < 0 {
			return dst
		}
		f = s.arena[f.parent]
	}
}

// appendUnique appends f to dst unless an equal stack is in dst[from:].
func (s *stepper) appendUnique(dst []frame, from int, f frame) []frame {
	for _, d := range dst[from:] {
		if d.state == f.state && s.sameStack(d.parent, f.parent) {
			return dst
		}
	}
	return append(dst, f)
}

// sameStack reports whether the chains from arena indices a and b hold the
// same states.
func (s *stepper) sameStack(a, b int32) bool {
	for a != b {
		if a < 0 || b < 0 {
			return false
		}
		fa, fb := s.arena[a], s.arena[b]
		if fa.state != fb.state {
			return false
		}
		a, b = fa.parent, fb.parent
	}
	return true
}

// canComplete reports whether the stack topped by f can end without
// consuming more input (every rule on it can end where it stands).
func (s *stepper) canComplete(f frame) bool {
	for {
		if !s.g.exp[f.state].canEnd {
			return false
		}
		if f.parent < 0 {
			return true
		}
		f = s.arena[f.parent]
	}
}

// trieWalker walks a trie depth-first while stepping a set of stacks over
// each node's byte, skipping every subtree where no stack survives.
type trieWalker struct {
	stepper
	frames []frame // the stacks alive at each level, level after level
	levels []level
}

type level struct {
	lo, hi int32 // frames[lo:hi] are this level's stacks
	arena  int32 // arena length when this level was made
}

// walk visits, in preorder, every node of t whose byte string the stacks
// init can consume, calling visit with the node and its surviving stacks
// (init itself for the root). The arena is restored on return.
func (w *trieWalker) walk(t *trie, init []frame, visit func(node int, alive []frame)) {
	base := int32(len(w.arena))
	w.frames = append(w.frames[:0], init...)
	w.levels = append(w.levels[:0], level{lo: 0, hi: int32(len(init)), arena: base})
	visit(0, w.frames)
	for i := 1; i < len(t.nodes); {
		nd := &t.nodes[i]
		p := w.levels[nd.depth-1]
		w.frames = w.frames[:p.hi]
		w.arena = w.arena[:p.arena]
		lo := len(w.frames)
		for j := p.lo; j < p.hi; j++ {
			w.frames = w.step(w.frames[j], nd.b, w.frames, lo)
		}
		if len(w.frames) == lo {
			i = int(nd.end)
			continue
		}
		w.levels = append(w.levels[:nd.depth], level{lo: int32(lo), hi: int32(len(w.frames)), arena: int32(len(w.arena))})
		visit(i, w.frames[lo:])
		i++
	}
	w.arena = w.arena[:base]
}
