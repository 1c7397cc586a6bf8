package sched

import "rill/engine/kvcache"

// state is where a sequence is in the scheduler.
type state uint8

const (
	stateNew     state = iota // created, not yet added
	stateWaiting              // queued for (re)admission
	stateRunning              // in the running set, holding blocks
	stateForking              // a further choice waiting for its leader's prompt
	stateDone                 // finished, aborted or exhausted; holds nothing
)

// Sequence is one choice of a request as the scheduler sees it: token
// counts and a block table. The scheduler and the engine share it: the
// engine appends emitted tokens to Tokens and advances DraftComputed; the
// scheduler owns everything else. Both run on the engine's loop goroutine.
type Sequence struct {
	// ID is the engine's handle for the sequence; the scheduler does not
	// interpret it.
	ID int

	// Tokens are the sequence's known tokens: the prompt, then its verified
	// output. The engine appends every token it emits; the scheduler has
	// them computed in later steps. Unverified draft tokens are never here.
	Tokens []int32

	// Computed counts the leading Tokens whose keys and values are in the
	// cache (the computed tokens that catch up with the known ones).
	Computed int

	// DraftComputed counts the leading tokens whose keys and values a
	// lockstep draft model has in the same blocks (Options.LockstepDraft).
	// The engine's draft runner advances it; the scheduler lowers it when
	// tokens are dropped. Blocks enter the prefix index only when both
	// models have computed them.
	DraftComputed int

	// KV is the sequence's block table.
	KV kvcache.Seq
	// WindowKV is its block table in the pool of sliding-window layers
	// (Options.Window); empty without one.
	WindowKV kvcache.Seq

	group  *Group
	choice int
	state  state
}

// Group returns the request the sequence is a choice of.
func (s *Sequence) Group() *Group { return s.group }

// Choice is the sequence's index in its group.
func (s *Sequence) Choice() int { return s.choice }

// Running reports whether the sequence is in the running set.
func (s *Sequence) Running() bool { return s.state == stateRunning }

// Waiting reports whether the sequence waits for (re)admission: queued,
// preempted, or a further choice that found no block to fork into.
func (s *Sequence) Waiting() bool { return s.state == stateWaiting }

// Done reports whether the sequence has ended (finished, aborted or
// exhausted) and holds no blocks.
func (s *Sequence) Done() bool { return s.state == stateDone }

// Group is one request: the choices that share its prompt. The first
// sequence, the leader, is queued when the group is added; the others wait
// until the leader's prompt is computed and then fork from it (sharing its
// full prompt blocks), so that a prompt is computed once for all choices.
type Group struct {
	seqs      []*Sequence
	promptLen int
	// priority orders groups (lower first, see SetPriority); arrival
	// breaks ties, in the order Add took them.
	priority int
	arrival  uint64

	cached    int  // prompt tokens served from the prefix cache at first admission
	matched   bool // cached is set
	started   bool // the leader has run: the request is no longer queued
	prefilled bool // the leader's prompt is computed: further choices may fork
	paused    bool // the consumer is behind: schedule none of the group's sequences

	// written counts the prompt tokens whose full blocks the group's
	// sequences newly indexed; writeMark is the number of leading prompt
	// blocks already counted (read at first admission or written), so that
	// a block indexed again after preemption and eviction counts once.
	written, writeMark int
}

// NewGroup returns a request over prompt (which the group takes over as
// the leader's Tokens) with one sequence per id; ids[i] becomes the ID of
// choice i.
func NewGroup(prompt []int32, ids ...int) *Group {
	g := &Group{promptLen: len(prompt), seqs: make([]*Sequence, len(ids))}
	for i, id := range ids {
		g.seqs[i] = &Sequence{ID: id, group: g, choice: i}
	}
	g.seqs[0].Tokens = prompt
	return g
}

// SetPriority sets the group's priority before Add (default 0): a lower
// value is admitted first, preempted last and shed last (see Add and
// Schedule), as vLLM's request priority.
func (g *Group) SetPriority(p int) { g.priority = p }

// Priority is the group's priority.
func (g *Group) Priority() int { return g.priority }

// before reports whether g is served before h: a lower priority, or the
// same one and an earlier arrival.
func (g *Group) before(h *Group) bool {
	if g.priority != h.priority {
		return g.priority < h.priority
	}
	return g.arrival < h.arrival
}

// Seqs returns the group's sequences in choice order. The slice is the
// group's; do not modify it.
func (g *Group) Seqs() []*Sequence { return g.seqs }

// PromptLen is the number of prompt tokens.
func (g *Group) PromptLen() int { return g.promptLen }

// CachedTokens is the number of prompt tokens served from the prefix cache
// when the request was first admitted (0 before that, and on a cold cache).
func (g *Group) CachedTokens() int { return g.cached }

// CacheWriteTokens is the number of prompt tokens the request newly wrote
// into the prefix cache for an identical request to read: the full prompt
// blocks before the one of the last prompt token that its sequences indexed,
// each counted once however many choices share it or how often it was
// computed, never one it read at first admission and never a block that
// another request indexed first. A partial last prompt block is not
// indexed, so it never counts; a block that mixes prompt and output is not
// prompt. So CachedTokens + CacheWriteTokens <= PromptLen. It is final once
// the leader's prompt is computed (0 before).
func (g *Group) CacheWriteTokens() int { return g.written }

// Paused reports whether the group is paused.
func (g *Group) Paused() bool { return g.paused }
