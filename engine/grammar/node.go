package grammar

import (
	"fmt"
	"maps"
	"slices"
)

// Node is a pattern over bytes, the unit grammars are made of. Nodes are
// immutable values; one Node may appear in several places.
type Node interface {
	// build appends the states of this pattern to r, continuing at next, and
	// returns the entry state. Patterns are built back to front
	// (continuation-passing), so a shared tail is built once.
	build(r *ruleBuilder, next int32) int32
}

// Lit matches s exactly.
func Lit(s string) Node { return literal(s) }

// ByteRange matches one byte in lo..hi.
func ByteRange(lo, hi byte) Node {
	var c byteClass
	c.addRange(lo, hi)
	return c
}

// Bytes matches one byte of set.
func Bytes(set string) Node {
	var c byteClass
	for i := 0; i < len(set); i++ {
		c.add(set[i])
	}
	return c
}

// Seq matches its parts one after another.
func Seq(parts ...Node) Node { return seq(slices.Clone(parts)) }

// Alt matches any one of its alternatives.
func Alt(alts ...Node) Node { return alt(slices.Clone(alts)) }

// Opt matches n or nothing.
func Opt(n Node) Node { return Repeat(n, 0, 1) }

// Repeat matches n between min and max times; max < 0 means no upper bound.
func Repeat(n Node, min, max int) Node { return repeat{n: n, min: min, max: max} }

// Ref matches the rule named name, defined in the same Builder. A reference is
// a call: it is how grammars recurse.
func Ref(name string) Node { return ref(name) }

type (
	literal   string
	byteClass [4]uint64
	seq       []Node
	alt       []Node
	ref       string
	repeat    struct {
		n        Node
		min, max int
	}
)

func (c *byteClass) add(b byte)      { c[b>>6] |= 1 << (b & 63) }
func (c *byteClass) has(b byte) bool { return c[b>>6]&(1<<(b&63)) != 0 }
func (c *byteClass) addRange(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		c.add(byte(b))
	}
}

// Builder collects named rules and compiles them, with a root pattern, into
// a Grammar. It is not safe for concurrent use; build a grammar per request
// (or cache compiled grammars) and share the result.
type Builder struct {
	rules map[string]Node
	order []string
	json  *jsonCompiler // lazily created by the JSON Schema methods
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder { return &Builder{rules: map[string]Node{}} }

// Define names the pattern n as a rule and returns a reference to it. A name
// may be defined once; rules may refer to each other and to themselves, but
// not without consuming input first (left recursion is refused by Build).
func (b *Builder) Define(name string, n Node) Node {
	if _, dup := b.rules[name]; !dup {
		b.order = append(b.order, name)
	}
	b.rules[name] = n
	return Ref(name)
}

// Defined reports whether a rule of that name exists.
func (b *Builder) Defined(name string) bool {
	_, ok := b.rules[name]
	return ok
}

// uniqueName returns base, or base with a numeric suffix, not yet defined.
func (b *Builder) uniqueName(base string) string {
	if !b.Defined(base) {
		return base
	}
	for i := 2; ; i++ {
		if n := fmt.Sprintf("%s-%d", base, i); !b.Defined(n) {
			return n
		}
	}
}

// Build compiles root, with every rule it reaches, into a Grammar. The
// Builder may be used again afterwards.
func (b *Builder) Build(root Node) (*Grammar, error) {
	rules := maps.Clone(b.rules)
	order := slices.Clone(b.order)
	rootName := "<root>"
	rules[rootName] = root
	order = append([]string{rootName}, order...)
	return compile(rules, order)
}

func (l literal) build(r *ruleBuilder, next int32) int32 {
	for i := len(l) - 1; i >= 0; i-- {
		s := r.newState()
		r.states[s].edges = append(r.states[s].edges, edge{lo: l[i], hi: l[i], to: next})
		next = s
	}
	return next
}

func (c byteClass) build(r *ruleBuilder, next int32) int32 {
	s := r.newState()
	r.states[s].edges = classEdges(c, next, nil)
	return s
}

// classEdges appends the edges of c, as maximal byte ranges, to dst.
func classEdges(c byteClass, to int32, dst []edge) []edge {
	for b := 0; b < 256; {
		if !c.has(byte(b)) {
			b++
			continue
		}
		lo := b
		for b < 256 && c.has(byte(b)) {
			b++
		}
		dst = append(dst, edge{lo: byte(lo), hi: byte(b - 1), to: to})
	}
	return dst
}

func (s seq) build(r *ruleBuilder, next int32) int32 {
	for i := len(s) - 1; i >= 0; i-- {
		next = s[i].build(r, next)
	}
	return next
}

func (a alt) build(r *ruleBuilder, next int32) int32 {
	s := r.newState()
	for _, n := range a {
		e := n.build(r, next)
		r.states[s].eps = append(r.states[s].eps, e)
	}
	return s
}

func (p repeat) build(r *ruleBuilder, next int32) int32 {
	cur := next
	if p.max < 0 {
		loop := r.newState()
		body := p.n.build(r, loop)
		r.states[loop].eps = append(r.states[loop].eps, body, next)
		cur = loop
	} else {
		for i := p.max; i > p.min; i-- {
			s := r.newState()
			body := p.n.build(r, cur)
			r.states[s].eps = append(r.states[s].eps, body, next)
			cur = s
		}
	}
	for range p.min {
		cur = p.n.build(r, cur)
	}
	return cur
}

func (f ref) build(r *ruleBuilder, next int32) int32 {
	s := r.newState()
	r.states[s].calls = append(r.states[s].calls, callEdge{rule: r.ruleIndex(string(f)), ret: next})
	return s
}
