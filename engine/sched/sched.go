// Package sched is the native engine's scheduler: it decides, step by
// step, which sequences compute how many tokens. It knows sequences only as
// token counts and block tables; it never sees a model, a tokenizer or a
// backend (the vLLM v1 split: the scheduler decides, engine/kvcache
// allocates, the engine's model runner computes).
//
// One rule covers everything: each sequence's computed tokens catch up with
// its known tokens, within a per-step token budget, running sequences first
// (decodes cost one token each), then admissions from the waiting queue,
// in order of priority (Group.SetPriority, lower first) and arrival.
// A prompt longer than the budget is computed over several steps (chunked
// prefill); a prefix found in the cache is computed already (prefix reuse);
// draft tokens ride on top of a decode and only the verified ones count as
// computed. Only verified tokens enter the prefix index.
//
// The engine drives one step as (vLLM v1's schedule and
// update_from_output):
//
//	plan := s.Schedule()          // who computes what; who ran out of room
//	...                           // run the model over the plan; sample,
//	                              // verify drafts, append to seq.Tokens
//	forks := s.Update(plan, outs) // what that did, one Outcome per sequence
//	...                           // copy the forks' partial blocks
//
// Update applies the outcomes in the one order the bookkeeping allows (see
// Update), so that order lives here rather than in the engine.
//
// A Scheduler is not safe for concurrent use: the engine's loop owns it,
// together with its kvcache.Manager.
package sched

import (
	"fmt"
	"slices"

	"rill/engine"
	"rill/engine/kvcache"
)

// Options configure a Scheduler. Zero values mean the defaults.
type Options struct {
	// MaxBatchTokens is the token budget of one step: known tokens plus
	// draft tokens. Default 512.
	MaxBatchTokens int
	// MaxRunning bounds the sequences that are scheduled (running and not
	// paused) at once. Default 64.
	MaxRunning int
	// MaxQueued bounds the requests waiting to start beyond the running
	// slots free now: Add fails with engine.ErrOverloaded past it.
	// Default 256.
	MaxQueued int
	// DraftLen, if set, says how many draft tokens a decoding sequence
	// proposes this step, given the budget left after its own token. The
	// scheduler reserves that many slots on top of the decode and drops them
	// before it would preempt anyone. It is called once per decode scheduled.
	DraftLen func(seq *Sequence, budget int) int
	// LockstepDraft says that a draft model keeps its keys and values in the
	// same blocks as the target (Sequence.DraftComputed), so that a block
	// enters the prefix index only once both models computed it.
	LockstepDraft bool
	// Load, if set, is called with a sequence's tokens each time just
	// before they are matched against the prefix cache (its first
	// admission, and again after a preemption or a wait for blocks), so
	// that a tier below memory can bring the blocks it holds of them in
	// first (kvcache.Manager.Load); they then count as cached tokens.
	Load func(tokens []int32)
	// Window, when set, is the block pool of the model's sliding-window
	// layers (a kvcache.Manager with a Window), kept next to the cache of
	// the other layers: each sequence also holds a table in it
	// (Sequence.WindowKV), whose blocks out of the window are freed as the
	// sequence advances. A prefix hit counts the tokens both pools hold:
	// the full layers' hit is cut to the window's (see Schedule).
	Window *kvcache.Manager
}

// Defaults of Options.
const (
	DefaultMaxBatchTokens = 512
	DefaultMaxRunning     = 64
	DefaultMaxQueued      = 256
)

// Scheduler plans the steps of one engine over one KV cache.
type Scheduler struct {
	cache *kvcache.Manager
	opts  Options

	running []*Sequence // in admission order: the last is the newest
	// waiting is in order of (re)admission: by priority, lowest value
	// first; within a priority preempted sequences first, then the others
	// in the order they were queued (see enqueue).
	waiting  []*Sequence
	queued   int    // groups added whose leader has not run yet
	paused   int    // running sequences of paused groups
	arrivals uint64 // groups added so far: the next one's Group.arrival

	plan        Plan
	forks       []Fork // Update's result
	preemptions int64
}

// Plan is the work of one step. It is owned by the Scheduler and valid
// until the next Schedule.
type Plan struct {
	// Seqs are the scheduled sequences: running ones first, then the ones
	// admitted this step.
	Seqs []Scheduled
	// Exhausted are sequences ended because the cache cannot hold them any
	// longer, not even alone (finish reason "length"); they hold nothing.
	Exhausted []*Sequence
	// Preempted are sequences taken off the running set to free blocks;
	// they wait to be readmitted and hold nothing.
	Preempted []*Sequence
}

// Scheduled is one sequence's share of a step.
type Scheduled struct {
	Seq *Sequence
	// Start is Seq.Computed when planned: the step computes
	// Seq.Tokens[Start:Start+Compute].
	Start, Compute int
	// Sampled says the step computes the last known token, so the engine
	// samples the next one from its logits.
	Sampled bool
	// Drafts is the number of draft-token slots reserved after the known
	// tokens (only when Sampled): the engine may verify up to that many.
	Drafts int
	// Forks are the further choices of Seq's request that start on its
	// prompt, which this step computes to the end for the first time
	// (only when Sampled; Seq is the request's first choice). Their Tokens
	// are the prompt; each one's first token is sampled from Seq's logits
	// and appended by the engine, like Seq's own, and Update starts them.
	// The slice is the request's; do not modify it.
	Forks []*Sequence
}

// Outcome is what the engine did with one scheduled sequence after the
// forward pass, for Update: the tokens it appended to Seq.Tokens are
// there already; the Outcome says what the scheduler cannot see.
type Outcome struct {
	// Drafts is the number of draft tokens the engine verified for the
	// sequence (at most Scheduled.Drafts; 0: it verified none), Accepted
	// how many of them it kept (at most Drafts): they are known tokens now,
	// appended with the token that followed them.
	Drafts, Accepted int
	// Finished says that the sequence ended this step (an end token, a
	// stop string, its length, or a constraint that allows nothing more).
	Finished bool
	// Forks are the outcomes of Scheduled.Forks, one per choice in order:
	// of its first token (only Finished counts).
	Forks []Outcome
}

// Fork is a further choice started on its leader's computed prompt.
type Fork struct {
	Child *Sequence
	// Copy says that the prompt ends inside a block: the engine must copy
	// the first Slots slots of block Src into block Dst (in every KV store
	// that uses the block ids) before the next step.
	Copy     bool
	Src, Dst int32
	// WindowSrc and WindowDst are the same copy in the window pool's
	// memory, with Options.Window (Copy and Slots say for both).
	WindowSrc, WindowDst int32
	Slots                int
}

// Stats are the scheduler's gauges and counters.
type Stats struct {
	Running     int // sequences scheduled each step (not paused)
	Paused      int // running sequences of paused requests, holding blocks
	Waiting     int // sequences waiting for admission
	Queued      int // requests that have not started
	Preemptions int64
}

// New returns a scheduler over cache.
func New(cache *kvcache.Manager, opts Options) *Scheduler {
	if opts.MaxBatchTokens <= 0 {
		opts.MaxBatchTokens = DefaultMaxBatchTokens
	}
	if opts.MaxRunning <= 0 {
		opts.MaxRunning = DefaultMaxRunning
	}
	if opts.MaxQueued <= 0 {
		opts.MaxQueued = DefaultMaxQueued
	}
	return &Scheduler{cache: cache, opts: opts}
}

// Options returns the options in effect, defaults filled in.
func (s *Scheduler) Options() Options { return s.opts }

// Stats returns the current gauges and counters.
func (s *Scheduler) Stats() Stats {
	return Stats{
		Running:     len(s.running) - s.paused,
		Paused:      s.paused,
		Waiting:     len(s.waiting),
		Queued:      s.queued,
		Preemptions: s.preemptions,
	}
}

// Idle reports whether no sequence could be scheduled: nothing waits or
// runs that is not paused.
func (s *Scheduler) Idle() bool {
	if len(s.running) > s.paused {
		return false
	}
	for _, seq := range s.waiting {
		if !seq.group.paused {
			return false
		}
	}
	return true
}

// Add queues g's leader for admission, behind the waiting requests of its
// priority and of lower values; its further choices wait to fork. When
// MaxQueued requests wait to start beyond the running slots free now, the
// queued request served last (the highest priority value, the newest of
// those) makes room for g if g is served before it: Add takes it off the
// queue (it ends, holding nothing, as after Abort) and returns it as shed,
// for the caller to fail with engine.ErrOverloaded. Otherwise Add fails
// with (a wrapped) engine.ErrOverloaded and takes nothing. A paused
// sequence gives up its running slot but waits as a queued request does,
// so stalled readers cannot raise the number admitted past MaxRunning +
// MaxQueued.
func (s *Scheduler) Add(g *Group) (shed *Group, err error) {
	s.arrivals++
	g.arrival = s.arrivals
	free := max(0, s.opts.MaxRunning-(len(s.running)-s.paused))
	if s.queued+s.paused >= s.opts.MaxQueued+free {
		shed = s.lastQueued()
		if shed == nil || !g.before(shed) {
			return nil, fmt.Errorf("%w: %d requests are waiting to start, %d sequences paused", engine.ErrOverloaded, s.queued, s.paused)
		}
		s.Abort(shed)
	}
	for _, seq := range g.seqs[1:] {
		seq.state = stateForking
	}
	g.seqs[0].state = stateWaiting
	s.enqueue(g.seqs[0], false)
	s.queued++
	return shed, nil
}

// lastQueued is the queued request (not started yet) that is served last,
// or nil when none is queued.
func (s *Scheduler) lastQueued() *Group {
	var last *Group
	for _, seq := range s.waiting {
		if g := seq.group; !g.started && seq.choice == 0 && (last == nil || last.before(g)) {
			last = g
		}
	}
	return last
}

// enqueue puts seq on the waiting list among the sequences of its
// priority: first when front (a preempted sequence), else last.
func (s *Scheduler) enqueue(seq *Sequence, front bool) {
	p := seq.group.priority
	i := slices.IndexFunc(s.waiting, func(w *Sequence) bool {
		return w.group.priority > p || front && w.group.priority == p
	})
	if i < 0 {
		i = len(s.waiting)
	}
	s.waiting = slices.Insert(s.waiting, i, seq)
}

// Schedule plans the next step: every running sequence computes the known
// tokens it lacks, as far as the budget goes; a decoding sequence may
// reserve draft slots on top; then waiting sequences are admitted in order
// (by priority, then arrival) while the budget, the running slots and the
// cache allow. When the cache runs out of blocks for a running sequence,
// drafts are dropped first, then sequences are preempted (freed and
// requeued first among their priority; they recompute, mostly from the
// prefix cache) in the order victim says: the highest priority value
// first, paused before running, newest first; a step that preempted so
// admits nobody. A waiting sequence that finds no blocks may preempt a
// paused sequence of its priority or a higher value, or a running one of
// a higher value (which then leaves this step's plan), but never one
// served before it.
func (s *Scheduler) Schedule() *Plan {
	p := &s.plan
	clear(p.Seqs)
	p.Seqs, p.Exhausted, p.Preempted = p.Seqs[:0], p.Exhausted[:0], p.Preempted[:0]
	budget := s.opts.MaxBatchTokens
	preempted := false

	for i := 0; i < len(s.running) && budget > 0; i++ {
		seq := s.running[i]
		pending := len(seq.Tokens) - seq.Computed
		if seq.group.paused || pending <= 0 {
			continue
		}
		compute := min(pending, budget)
		drafts := 0
		if pending == 1 && s.opts.DraftLen != nil {
			drafts = max(0, min(s.opts.DraftLen(seq, budget-compute), budget-compute))
		}
		for s.reserve(seq, seq.Computed+compute+drafts) != nil {
			if drafts > 0 { // drafting is optional: drop it before preempting anyone
				drafts = 0
				continue
			}
			victim := s.victim()
			if victim == seq && len(s.running) == 1 {
				// Alone and still out of room: the cache cannot hold this
				// sequence any longer.
				s.exhaust(seq)
				break
			}
			// A victim before seq may be planned already (a lower
			// priority than seq's): it leaves the plan.
			budget += s.unplan(victim)
			if s.preempt(victim) < i {
				i-- // the victim stood before seq: seq moved down one
			}
			preempted = true
			if victim == seq {
				break
			}
		}
		if seq.state != stateRunning {
			i-- // seq left the running set: the next one took its place
			continue
		}
		p.Seqs = append(p.Seqs, Scheduled{Seq: seq, Start: seq.Computed, Compute: compute,
			Sampled: compute == pending, Drafts: drafts})
		budget -= compute + drafts
	}

	for !preempted && budget > 0 && len(s.running)-s.paused < s.opts.MaxRunning {
		j := slices.IndexFunc(s.waiting, func(seq *Sequence) bool { return !seq.group.paused })
		if j < 0 {
			break
		}
		seq := s.waiting[j]
		g := seq.group
		if len(seq.KV.Blocks) == 0 {
			if s.opts.Load != nil {
				s.opts.Load(seq.Tokens)
			}
			hit := s.match(seq)
			// Committed blocks hold a lockstep draft model's keys too.
			seq.Computed, seq.DraftComputed = hit, hit
			if !g.matched {
				g.cached, g.matched = hit, true
				g.writeMark = hit / s.cache.BlockSize()
				s.cache.Observe(g.promptLen, hit)
			}
		}
		compute := min(len(seq.Tokens)-seq.Computed, budget)
		if err := s.reserve(seq, seq.Computed+compute); err != nil {
			if victim := s.displaceable(seq); victim != nil {
				// A paused sequence holds blocks it does not use now; a
				// running one of a higher priority value yields them.
				budget += s.unplan(victim)
				s.preempt(victim)
				continue
			}
			if len(s.running) == 0 && len(p.Seqs) == 0 && s.alone(seq) {
				s.exhaust(seq) // it cannot fit even alone
				continue
			}
			// Wait for blocks to come free; keep the order.
			s.free(seq)
			seq.Computed, seq.DraftComputed = 0, 0
			break
		}
		s.waiting = slices.Delete(s.waiting, j, j+1)
		seq.state = stateRunning
		s.running = append(s.running, seq)
		if !g.started {
			g.started = true
			s.queued--
		}
		pending := len(seq.Tokens) - seq.Computed
		p.Seqs = append(p.Seqs, Scheduled{Seq: seq, Start: seq.Computed, Compute: compute, Sampled: compute == pending})
		budget -= compute
	}
	for i := range p.Seqs {
		s.planForks(&p.Seqs[i])
	}
	return p
}

// match attaches the cached prefix of seq's tokens to its tables and
// returns its length. With a window pool the hit is what both pools hold:
// the window's, limited to the full layers' hit, and the full layers'
// table is cut back to it, so that the tokens after it are computed in
// every layer into blocks of the sequence's own rather than rewriting
// cached blocks that others may be reading. So a prefix whose window was
// evicted is recomputed from where the window is whole.
func (s *Scheduler) match(seq *Sequence) int {
	hit := s.cache.Match(&seq.KV, seq.Tokens)
	if s.opts.Window == nil {
		return hit
	}
	if w := s.opts.Window.MatchUpTo(&seq.WindowKV, seq.Tokens, hit); w < hit {
		s.cache.Truncate(&seq.KV, w)
		hit = w
	}
	return hit
}

// reserve makes seq's tables cover n positions, in both pools, or takes
// nothing and fails with kvcache.ErrNoBlocks.
func (s *Scheduler) reserve(seq *Sequence, n int) error {
	had := len(seq.KV.Blocks)
	if err := s.cache.Reserve(&seq.KV, n); err != nil {
		return err
	}
	if s.opts.Window == nil {
		return nil
	}
	if err := s.opts.Window.Reserve(&seq.WindowKV, n); err != nil {
		s.cache.Truncate(&seq.KV, had*s.cache.BlockSize())
		return err
	}
	return nil
}

// alone reports whether every block seq does not hold is free, in both
// pools: if seq cannot grow now, it never can.
func (s *Scheduler) alone(seq *Sequence) bool {
	if s.cache.FreeBlocks() != s.cache.NumBlocks()-seq.KV.Held() {
		return false
	}
	w := s.opts.Window
	return w == nil || w.FreeBlocks() == w.NumBlocks()-seq.WindowKV.Held()
}

// free releases seq's blocks in both pools.
func (s *Scheduler) free(seq *Sequence) {
	s.cache.Free(&seq.KV)
	if s.opts.Window != nil {
		s.opts.Window.Free(&seq.WindowKV)
	}
}

// planForks lists the further choices that start on sc's prompt when the
// step computes it to the end for the first time (see Scheduled.Forks) and
// gives them the prompt as their tokens, so that the engine can append
// their first tokens.
func (s *Scheduler) planForks(sc *Scheduled) {
	g := sc.Seq.group
	if !sc.Sampled || sc.Seq.choice != 0 || g.prefilled || len(g.seqs) == 1 {
		return
	}
	sc.Forks = g.seqs[1:]
	prompt := sc.Seq.Tokens[:g.promptLen]
	for _, c := range sc.Forks {
		if c.state == stateForking {
			c.Tokens = slices.Clone(prompt)
		}
	}
}

// victim is the sequence to preempt when blocks run out for a running
// one: see pick.
func (s *Scheduler) victim() *Sequence {
	return s.pick(func(*Sequence) bool { return true })
}

// displaceable is the sequence to preempt so that waiter may be admitted:
// a paused one not served before it, or a running one of a higher
// priority value (see pick); nil when there is none.
func (s *Scheduler) displaceable(waiter *Sequence) *Sequence {
	p := waiter.group.priority
	return s.pick(func(q *Sequence) bool {
		if q.group.paused {
			return q.group.priority >= p
		}
		return q.group.priority > p
	})
}

// pick returns, of the running sequences ok accepts, the one to preempt
// first: the highest priority value (the lowest priority); among equals a
// paused one (it holds blocks it does not use now), then the newest.
func (s *Scheduler) pick(ok func(*Sequence) bool) *Sequence {
	var v *Sequence
	for i := len(s.running) - 1; i >= 0; i-- {
		q := s.running[i]
		if !ok(q) {
			continue
		}
		if v == nil || q.group.priority > v.group.priority ||
			q.group.priority == v.group.priority && q.group.paused && !v.group.paused {
			v = q
		}
	}
	return v
}

// unplan takes seq out of the plan being made, if it is in it, and
// returns the budget its entry took.
func (s *Scheduler) unplan(seq *Sequence) int {
	p := &s.plan
	i := slices.IndexFunc(p.Seqs, func(sc Scheduled) bool { return sc.Seq == seq })
	if i < 0 {
		return 0
	}
	took := p.Seqs[i].Compute + p.Seqs[i].Drafts
	p.Seqs = slices.Delete(p.Seqs, i, i+1)
	return took
}

// preempt takes seq off the running set and frees its blocks; it is
// requeued first and recomputes when readmitted. It returns the index seq
// had in the running set.
func (s *Scheduler) preempt(seq *Sequence) int {
	i := s.leave(seq)
	s.free(seq)
	seq.Computed, seq.DraftComputed = 0, 0
	seq.state = stateWaiting
	s.enqueue(seq, true)
	s.preemptions++
	s.plan.Preempted = append(s.plan.Preempted, seq)
	return i
}

// exhaust ends seq because the cache cannot hold it.
func (s *Scheduler) exhaust(seq *Sequence) {
	s.finish(seq)
	s.plan.Exhausted = append(s.plan.Exhausted, seq)
}

// leave removes seq from the running or waiting list it is on and returns
// its index in the running set (-1 if it was not running).
func (s *Scheduler) leave(seq *Sequence) int {
	switch seq.state {
	case stateRunning:
		i := slices.Index(s.running, seq)
		s.running = slices.Delete(s.running, i, i+1)
		if seq.group.paused {
			s.paused--
		}
		return i
	case stateWaiting:
		if i := slices.Index(s.waiting, seq); i >= 0 {
			s.waiting = slices.Delete(s.waiting, i, i+1)
		}
	}
	return -1
}

// Update records what the step did with the plan p of the last Schedule:
// outcomes[i] is what the engine did with p.Seqs[i] after the forward pass.
// Call it once per step, after the engine has appended every token it
// emitted. For each scheduled sequence, in plan order, it
//
//   - counts the planned tokens computed and registers the sequence's
//     verified full blocks in the prefix index (before anything below can
//     free them);
//   - starts the further choices of Scheduled.Forks on the computed prompt:
//     each shares the full prompt blocks and gets a copy of the partial last
//     one (see Fork), or, when no block is free now, is queued to recompute
//     the prompt, mostly from the prefix cache; a choice that ended with its
//     first token is finished instead;
//   - when the sequence finished, frees its blocks (full ones stay cached
//     for later prefix hits); else, when it verified drafts, counts the
//     accepted ones computed, releases the slots reserved past its known
//     tokens and registers the blocks they filled.
//
// Sequences preempted or exhausted by Schedule are not in p.Seqs and have
// no outcome. Update returns the forks it started, whose partial blocks the
// engine must copy (Fork.Copy) in every KV store before the next step; the
// slice is valid until the next Update. Outcomes that do not match the plan
// are a bug of the caller: Update panics, before it changes anything.
func (s *Scheduler) Update(p *Plan, outcomes []Outcome) []Fork {
	if len(outcomes) != len(p.Seqs) {
		panic(fmt.Sprintf("sched: Update with %d outcomes for %d scheduled sequences", len(outcomes), len(p.Seqs)))
	}
	for i := range p.Seqs {
		sc, o := &p.Seqs[i], &outcomes[i]
		if o.Drafts < 0 || o.Drafts > sc.Drafts || o.Accepted < 0 || o.Accepted > o.Drafts || len(o.Forks) != len(sc.Forks) {
			panic(fmt.Sprintf("sched: outcome %+v of a sequence scheduled with %d drafts and %d forks", *o, sc.Drafts, len(sc.Forks)))
		}
	}
	s.forks = s.forks[:0]
	for i := range p.Seqs {
		sc, o := &p.Seqs[i], &outcomes[i]
		if sc.Seq.Done() {
			continue // ended outside the step (aborted): it holds nothing
		}
		s.advance(sc)
		if len(sc.Forks) > 0 {
			s.fork(sc.Seq, sc.Forks, o.Forks)
		}
		switch {
		case o.Finished:
			s.finish(sc.Seq)
		case o.Drafts > 0:
			s.accept(sc.Seq, o.Accepted)
		}
	}
	return s.forks
}

// advance records that the step computed sc's planned known tokens and
// registers the sequence's verified full blocks in the prefix index.
func (s *Scheduler) advance(sc *Scheduled) {
	sc.Seq.Computed = sc.Start + sc.Compute
	s.commit(sc.Seq)
}

// accept records that the first accepted of the draft tokens verified for
// seq are computed (they are known tokens now, already appended by the
// engine), releases the slots reserved past the known tokens and
// registers the verified blocks.
func (s *Scheduler) accept(seq *Sequence, accepted int) {
	seq.Computed += accepted
	seq.DraftComputed = min(seq.DraftComputed, seq.Computed)
	s.cache.Truncate(&seq.KV, len(seq.Tokens))
	if s.opts.Window != nil {
		s.opts.Window.Truncate(&seq.WindowKV, len(seq.Tokens))
	}
	s.commit(seq)
}

// commit registers seq's computed, verified full blocks in the prefix
// index; with a lockstep draft model only those both models computed. The
// prompt's full blocks it newly indexes count as the group's cache writes,
// up to the blocks an identical request would read: that one must compute
// its last prompt token again, so a prompt of a whole number of blocks
// writes all but its last (which is indexed all the same, and read by a
// longer prompt that shares it).
func (s *Scheduler) commit(seq *Sequence) {
	n := seq.Computed
	if s.opts.LockstepDraft {
		n = min(n, seq.DraftComputed)
	}
	g, bs := seq.group, s.cache.BlockSize()
	if full := max(g.promptLen-1, 0) / bs; seq.KV.Indexed() < full {
		// Commit indexes blocks in order, so committing in three spans
		// tells which blocks it added: up to the blocks the group counted
		// already (a sequence recomputing after preemption, a choice that
		// could not fork), then the rest of the prompt's, counted, then the
		// output's below.
		s.cache.Commit(&seq.KV, seq.Tokens[:min(n, g.writeMark*bs)])
		g.written += s.cache.Commit(&seq.KV, seq.Tokens[:min(n, full*bs)]) * bs
		g.writeMark = max(g.writeMark, seq.KV.Indexed())
	}
	s.cache.Commit(&seq.KV, seq.Tokens[:n])
	if w := s.opts.Window; w != nil {
		// Committed before sliding, so that the blocks it frees stay
		// cached for later hits.
		w.Commit(&seq.WindowKV, seq.Tokens[:n])
		w.Slide(&seq.WindowKV, seq.Computed)
	}
}

// fork starts children, the further choices of leader's group, on the
// leader's computed prompt, except those whose outcome says they ended
// with their first token. A started choice shares the leader's full prompt
// blocks, gets a copy of its partial last block (see Fork.Copy) and runs
// from the next step on. A choice for which no block is free now is queued
// instead, with its first token: it recomputes the prompt, mostly from the
// prefix cache.
func (s *Scheduler) fork(leader *Sequence, children []*Sequence, outcomes []Outcome) {
	g := leader.group
	g.prefilled = true
	for j, c := range children {
		if c.state != stateForking {
			continue
		}
		if outcomes[j].Finished {
			s.finish(c)
			continue
		}
		child, src, dst, copied, err := s.cache.Fork(&leader.KV, g.promptLen)
		var wchild *kvcache.Seq
		var wsrc, wdst int32
		if err == nil && s.opts.Window != nil {
			if wchild, wsrc, wdst, _, err = s.opts.Window.Fork(&leader.WindowKV, g.promptLen); err != nil {
				s.cache.Free(child)
			}
		}
		if err != nil {
			c.state = stateWaiting
			s.enqueue(c, false)
			continue
		}
		c.KV = *child
		if wchild != nil {
			c.WindowKV = *wchild
		}
		c.Computed = g.promptLen
		c.DraftComputed = min(leader.DraftComputed, c.Computed)
		c.state = stateRunning
		s.running = append(s.running, c)
		if g.paused {
			s.paused++
		}
		s.forks = append(s.forks, Fork{Child: c, Copy: copied, Src: src, Dst: dst,
			WindowSrc: wsrc, WindowDst: wdst, Slots: g.promptLen % s.cache.BlockSize()})
	}
}

// finish ends seq: its blocks are freed (full ones stay cached for later
// prefix hits) and it is never scheduled again. Finishing a finished
// sequence does nothing.
func (s *Scheduler) finish(seq *Sequence) {
	if seq.state == stateDone {
		return
	}
	s.leave(seq)
	s.free(seq)
	seq.state = stateDone
}

// Abort ends every sequence of g that has not ended (the request was
// cancelled or failed), releasing its blocks and its place in the queue.
func (s *Scheduler) Abort(g *Group) {
	for _, seq := range g.seqs {
		s.finish(seq)
	}
	if !g.started {
		g.started = true
		s.queued--
	}
}

// Pause stops scheduling g's sequences (its consumer is behind). They keep
// their blocks, do not count against MaxRunning, and are the first to be
// preempted when blocks run out.
func (s *Scheduler) Pause(g *Group) {
	if g.paused {
		return
	}
	g.paused = true
	for _, seq := range g.seqs {
		if seq.state == stateRunning {
			s.paused++
		}
	}
}

// Resume schedules g's sequences again.
func (s *Scheduler) Resume(g *Group) {
	if !g.paused {
		return
	}
	g.paused = false
	for _, seq := range g.seqs {
		if seq.state == stateRunning {
			s.paused--
		}
	}
}
