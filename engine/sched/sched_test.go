package sched

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"rill/engine"
	"rill/engine/kvcache"
)

// The scheduler is tested as the engine drives it, with no model: a step
// "computes" what the plan says and appends a made-up token to every
// sequence that reached its last known token.

const blockSize = 4

func newScheduler(t *testing.T, blocks int, opts Options) (*Scheduler, *kvcache.Manager) {
	t.Helper()
	cache, err := kvcache.New(kvcache.Options{NumBlocks: blocks, BlockSize: blockSize})
	if err != nil {
		t.Fatal(err)
	}
	return New(cache, opts), cache
}

// prompt returns n distinct tokens starting at from.
func prompt(from, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(from + i)
	}
	return p
}

// group adds a request of n choices over p and fails the test if it is refused.
func group(t *testing.T, s *Scheduler, p []int32, n int) *Group {
	t.Helper()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	g := NewGroup(p, ids...)
	if _, err := s.Add(g); err != nil {
		t.Fatal(err)
	}
	return g
}

// entry is a plan entry in a comparable form.
type entry struct {
	seq             *Sequence
	compute, drafts int
	sampled         bool
}

func entries(p *Plan) []entry {
	out := make([]entry, len(p.Seqs))
	for i, sc := range p.Seqs {
		out[i] = entry{sc.Seq, sc.Compute, sc.Drafts, sc.Sampled}
	}
	return out
}

// step runs one step: every planned sequence computes its tokens, sampled
// ones get a token (and keep accepted of their drafts), and so do the
// choices that fork from them, which start.
func step(s *Scheduler, accepted int) *Plan {
	p := s.Schedule()
	s.Update(p, sample(p, accepted))
	return p
}

// sample does what the engine does after the forward pass of p: a token for
// every sampled sequence and every choice forking from it, accepted of each
// sequence's drafts kept. It returns the outcomes, none finished.
func sample(p *Plan, accepted int) []Outcome {
	outs := make([]Outcome, len(p.Seqs))
	for i := range p.Seqs {
		sc := &p.Seqs[i]
		if !sc.Sampled {
			continue
		}
		outs[i].Forks = make([]Outcome, len(sc.Forks))
		for _, c := range sc.Forks {
			c.Tokens = append(c.Tokens, 9000)
		}
		seq := sc.Seq
		a := min(accepted, sc.Drafts)
		for j := range a + 1 {
			seq.Tokens = append(seq.Tokens, int32(8000+j))
		}
		if sc.Drafts > 0 {
			outs[i].Drafts, outs[i].Accepted = sc.Drafts, a
		}
	}
	return outs
}

func check(t *testing.T, s *Scheduler, cache *kvcache.Manager, groups ...*Group) {
	t.Helper()
	var live []*kvcache.Seq
	for _, g := range groups {
		for _, seq := range g.seqs {
			live = append(live, &seq.KV)
		}
	}
	if err := cache.Check(live...); err != nil {
		t.Fatal(err)
	}
}

func TestChunkedPrefill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		prompt int
		budget int
		want   [][]int // per step: computed tokens (a trailing sampled step has 1 token)
	}{
		{"fits in one step", 10, 16, [][]int{{10}, {1}, {1}}},
		{"three chunks", 40, 16, [][]int{{16}, {16}, {8}, {1}}},
		{"budget of one token", 3, 1, [][]int{{1}, {1}, {1}, {1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, cache := newScheduler(t, 64, Options{MaxBatchTokens: tc.budget})
			g := group(t, s, prompt(1, tc.prompt), 1)
			seq := g.seqs[0]
			for i, want := range tc.want {
				p := step(s, 0)
				got := []int{}
				for _, e := range entries(p) {
					got = append(got, e.compute)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("step %d computed %v, want %v", i, got, want)
				}
				sampled := seq.Computed >= tc.prompt
				if p.Seqs[0].Sampled != sampled {
					t.Fatalf("step %d: sampled %v, want %v", i, p.Seqs[0].Sampled, sampled)
				}
			}
			if seq.Computed != len(seq.Tokens)-1 {
				t.Fatalf("computed %d of %d known tokens", seq.Computed, len(seq.Tokens))
			}
			check(t, s, cache, g)
		})
	}
}

func TestDecodesFirst(t *testing.T) {
	t.Parallel()
	s, cache := newScheduler(t, 64, Options{MaxBatchTokens: 8})
	a := group(t, s, prompt(1, 5), 1)
	step(s, 0) // a's prompt
	b := group(t, s, prompt(100, 20), 1)
	p := step(s, 0)
	want := []entry{{a.seqs[0], 1, 0, true}, {b.seqs[0], 7, 0, false}}
	if got := entries(p); !slices.Equal(got, want) {
		t.Fatalf("plan %+v, want the decode first, then a 7-token chunk", got)
	}
	check(t, s, cache, a, b)
}

func TestPrefixHit(t *testing.T) {
	t.Parallel()
	s, cache := newScheduler(t, 64, Options{})
	p := prompt(1, 11) // 2 full blocks and 3 tokens
	a := group(t, s, slices.Clone(p), 1)
	step(s, 0)
	s.finish(a.seqs[0])
	if a.CachedTokens() != 0 {
		t.Fatalf("cold request cached %d", a.CachedTokens())
	}
	tests := []struct {
		name   string
		prompt []int32
		cached int
	}{
		{"same prompt", slices.Clone(p), 8},
		{"prompt of whole blocks keeps its last token to compute", prompt(1, 8), 4},
		{"different first block", append([]int32{99}, p[1:]...), 0},
	}
	for _, tc := range tests {
		g := group(t, s, tc.prompt, 1)
		plan := step(s, 0)
		if g.CachedTokens() != tc.cached || plan.Seqs[0].Compute != len(tc.prompt)-tc.cached {
			t.Errorf("%s: cached %d, computed %d; want cached %d", tc.name, g.CachedTokens(), plan.Seqs[0].Compute, tc.cached)
		}
		s.finish(g.seqs[0])
	}
	check(t, s, cache)
}

// TestCacheWriteTokens pins Group.CacheWriteTokens: the prompt's full
// blocks the request newly indexed, once per request. Blocks are 4 tokens.
func TestCacheWriteTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prompts [][]int32 // requests run one after the other
		budget  int       // MaxBatchTokens; 0 means the default
		choices int
		// cached and written are each request's counts.
		cached, written []int
	}{
		{"cold, then the same prompt", [][]int32{prompt(1, 11), prompt(1, 11)}, 0, 1, []int{0, 8}, []int{8, 0}},
		{"chunked prefill counts every chunk's blocks", [][]int32{prompt(1, 11)}, 3, 1, []int{0}, []int{8}},
		{"shorter than a block", [][]int32{prompt(1, 3)}, 0, 1, []int{0}, []int{0}},
		// The repeat computes the last block again, finds it indexed; it
		// reads what the first wrote.
		{"exact multiple", [][]int32{prompt(1, 8), prompt(1, 8)}, 0, 1, []int{0, 4}, []int{4, 0}},
		{"a longer prompt writes past the shared prefix", [][]int32{prompt(1, 6), prompt(1, 14)}, 0, 1, []int{0, 4}, []int{4, 8}},
		{"n choices share one prompt: counted once", [][]int32{prompt(1, 10)}, 0, 3, []int{0}, []int{8}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, cache := newScheduler(t, 64, Options{MaxBatchTokens: tc.budget})
			for i, p := range tc.prompts {
				g := group(t, s, slices.Clone(p), tc.choices)
				// Until every choice has computed the prompt and decoded a
				// few tokens (output blocks are not prompt).
				for range len(p) + 12 {
					step(s, 0)
				}
				if g.CachedTokens() != tc.cached[i] || g.CacheWriteTokens() != tc.written[i] {
					t.Fatalf("request %d: cached %d, written %d; want %d, %d", i, g.CachedTokens(), g.CacheWriteTokens(), tc.cached[i], tc.written[i])
				}
				check(t, s, cache, g)
				for _, seq := range g.seqs {
					s.finish(seq)
				}
			}
		})
	}

	t.Run("a choice that could not fork reads the prompt, writes nothing more", func(t *testing.T) {
		t.Parallel()
		s, cache := newScheduler(t, 2, Options{})
		g := group(t, s, prompt(1, 6), 2)
		step(s, 0)
		if g.seqs[1].state != stateWaiting {
			t.Fatalf("choice 1 is %v, want waiting for a block", g.seqs[1].state)
		}
		s.finish(g.seqs[0])
		step(s, 0)
		step(s, 0)
		if !g.seqs[1].Running() || g.CacheWriteTokens() != 4 {
			t.Fatalf("choice 1 running %v, written %d; want the leader's 4", g.seqs[1].Running(), g.CacheWriteTokens())
		}
		check(t, s, cache, g)
	})

	t.Run("preempted, evicted and recomputed: counted once", func(t *testing.T) {
		t.Parallel()
		s, cache := newScheduler(t, 4, Options{})
		g := group(t, s, prompt(1, 9), 1)
		step(s, 0)
		if g.CacheWriteTokens() != 8 {
			t.Fatalf("written %d after the prompt, want 8", g.CacheWriteTokens())
		}
		seq := g.seqs[0]
		s.preempt(seq)
		// Another sequence takes every block: the prompt's are evicted.
		var other kvcache.Seq
		if err := cache.Reserve(&other, 4*blockSize); err != nil {
			t.Fatal(err)
		}
		cache.Free(&other)
		step(s, 0)
		if seq.Computed < 9 || g.CachedTokens() != 0 {
			t.Fatalf("computed %d, cached %d: want the prompt recomputed from scratch", seq.Computed, g.CachedTokens())
		}
		if g.CacheWriteTokens() != 8 {
			t.Fatalf("written %d after indexing the prompt a second time, want 8", g.CacheWriteTokens())
		}
		check(t, s, cache, g)
	})
}

func TestPreemptsNewestAndRequeuesFirst(t *testing.T) {
	t.Parallel()
	// 6 blocks of 4 tokens. Three sequences with 7-token prompts take 2
	// blocks each; their first decodes need a third block each.
	s, cache := newScheduler(t, 6, Options{})
	var gs []*Group
	for i := range 3 {
		gs = append(gs, group(t, s, prompt(100*i, 7), 1))
	}
	step(s, 0) // prompts: 6 blocks used
	p := step(s, 0)
	// Position 7 fits in the second block; position 8 needs a new one.
	p = step(s, 0)
	if len(p.Preempted) == 0 || p.Preempted[0] != gs[2].seqs[0] {
		t.Fatalf("preempted %v, want the newest sequence", p.Preempted)
	}
	if s.waiting[0] != gs[2].seqs[0] || gs[2].seqs[0].Computed != 0 || len(gs[2].seqs[0].KV.Blocks) != 0 {
		t.Fatal("the preempted sequence is not requeued first, freed")
	}
	if s.Stats().Preemptions != 1 {
		t.Fatalf("%d preemptions", s.Stats().Preemptions)
	}
	for _, sc := range p.Seqs {
		if sc.Seq == gs[2].seqs[0] {
			t.Fatal("a preempted sequence is in the plan")
		}
	}
	check(t, s, cache, gs...)
	// When the others finish, it is readmitted and recomputes its tokens.
	s.finish(gs[0].seqs[0])
	s.finish(gs[1].seqs[0])
	p = step(s, 0)
	// (step appended the token sampled after the recomputation)
	if len(p.Seqs) != 1 || p.Seqs[0].Seq != gs[2].seqs[0] || p.Seqs[0].Compute != len(gs[2].seqs[0].Tokens)-1 {
		t.Fatalf("after the others finished: %+v", entries(p))
	}
	check(t, s, cache, gs...)
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	s, cache := newScheduler(t, 2, Options{})
	g := group(t, s, prompt(1, 7), 1)
	step(s, 0)
	step(s, 0) // position 7: the second block's last slot
	p := step(s, 0)
	if len(p.Exhausted) != 1 || p.Exhausted[0] != g.seqs[0] || !g.seqs[0].Done() {
		t.Fatalf("exhausted %v: a sequence alone in a full cache must end", p.Exhausted)
	}
	check(t, s, cache, g)

	// A prompt that can never fit ends at admission.
	big := group(t, s, prompt(1, 12), 1)
	p = step(s, 0)
	if len(p.Exhausted) != 1 || p.Exhausted[0] != big.seqs[0] {
		t.Fatalf("a prompt larger than the cache: exhausted %v", p.Exhausted)
	}
	check(t, s, cache, big)
}

func TestDraftsReservedAndDroppedFirst(t *testing.T) {
	t.Parallel()
	draftLen := func(seq *Sequence, budget int) int { return min(3, budget) }
	t.Run("reserved on a decode within the budget", func(t *testing.T) {
		t.Parallel()
		s, cache := newScheduler(t, 16, Options{MaxBatchTokens: 3, DraftLen: draftLen})
		g := group(t, s, prompt(1, 3), 1)
		step(s, 0)
		p := step(s, 1)
		want := []entry{{g.seqs[0], 1, 2, true}}
		if got := entries(p); !slices.Equal(got, want) {
			t.Fatalf("plan %+v, want a decode with 2 drafts (the budget's rest)", got)
		}
		// One draft accepted: 3 + 1 sampled + 1 accepted + 1 next.
		if seq := g.seqs[0]; seq.Computed != 5 || len(seq.Tokens) != 6 || len(seq.KV.Blocks) != 2 {
			t.Fatalf("after verification: computed %d, tokens %d, blocks %d", seq.Computed, len(seq.Tokens), len(seq.KV.Blocks))
		}
		check(t, s, cache, g)
	})
	t.Run("dropped before preempting", func(t *testing.T) {
		t.Parallel()
		// 2 blocks: two sequences of 3 tokens, one block each. Their
		// decodes fit; drafts would need a second block each.
		s, cache := newScheduler(t, 2, Options{DraftLen: draftLen})
		a := group(t, s, prompt(1, 3), 1)
		b := group(t, s, prompt(10, 3), 1)
		step(s, 0)
		p := step(s, 0)
		for _, e := range entries(p) {
			if e.drafts != 0 {
				t.Fatalf("drafts reserved with no block for them: %+v", entries(p))
			}
		}
		if len(p.Seqs) != 2 || len(p.Preempted) != 0 {
			t.Fatalf("plan %+v, preempted %v: want both decodes, no preemption", entries(p), p.Preempted)
		}
		check(t, s, cache, a, b)
	})
}

func TestForks(t *testing.T) {
	t.Parallel()
	t.Run("share full blocks, copy the partial one", func(t *testing.T) {
		t.Parallel()
		s, cache := newScheduler(t, 16, Options{})
		g := group(t, s, prompt(1, 6), 3)
		leader := g.seqs[0]
		p := s.Schedule()
		if len(p.Seqs) != 1 || p.Seqs[0].Seq != leader {
			t.Fatalf("plan %+v: only the leader computes the prompt", entries(p))
		}
		if fs := p.Seqs[0].Forks; !slices.Equal(fs, g.seqs[1:]) {
			t.Fatalf("forks %v, want the other choices", fs)
		}
		for i, c := range p.Seqs[0].Forks {
			if !slices.Equal(c.Tokens, leader.Tokens) || c.Running() {
				t.Fatalf("planned fork %d: tokens %v, running %v; want the prompt, not yet running", i, c.Tokens, c.Running())
			}
		}
		forks := slices.Clone(s.Update(p, sample(p, 0)))
		if len(forks) != 2 {
			t.Fatalf("%d forks, want 2", len(forks))
		}
		for i, f := range forks {
			c := f.Child
			if c != g.seqs[i+1] || !f.Copy || f.Slots != 2 || f.Src != leader.KV.Blocks[1] || f.Dst == f.Src {
				t.Fatalf("fork %d: %+v", i, f)
			}
			if c.KV.Blocks[0] != leader.KV.Blocks[0] || c.Computed != 6 || !slices.Equal(c.Tokens, append(prompt(1, 6), 9000)) || !c.Running() {
				t.Fatalf("fork %d does not share the prompt: %v vs %v, computed %d, tokens %v", i, c.KV.Blocks, leader.KV.Blocks, c.Computed, c.Tokens)
			}
		}
		p = s.Schedule()
		for _, sc := range p.Seqs {
			if len(sc.Forks) != 0 {
				t.Fatal("a group forked twice")
			}
		}
		s.Update(p, sample(p, 0))
		check(t, s, cache, g)
	})
	t.Run("no block for the copy: the choice waits", func(t *testing.T) {
		t.Parallel()
		s, cache := newScheduler(t, 2, Options{})
		g := group(t, s, prompt(1, 6), 2)
		p := s.Schedule()
		if forks := s.Update(p, sample(p, 0)); len(forks) != 0 {
			t.Fatalf("forked with no free block: %+v", forks)
		}
		// It keeps the token sampled from the leader's logits and
		// recomputes the prompt when readmitted.
		if c := g.seqs[1]; c.state != stateWaiting || !slices.Equal(c.Tokens, append(prompt(1, 6), 9000)) {
			t.Fatalf("the choice is %v with tokens %v, want waiting on the prompt and its first token", c.state, c.Tokens)
		}
		check(t, s, cache, g)
	})
}

// TestUpdate checks the order in which Update applies a step's outcomes:
// computed tokens first (their full blocks registered), forks next, then
// the sequence's drafts or its end.
func TestUpdate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		choices int
		prompt  int
		drafts  int // per decode (Options.DraftLen)
		// The step under test computes the prompt (atPrompt) or the first
		// decode after it; the engine keeps accepted of its drafts, and
		// outcome edits what sample says of it.
		atPrompt bool
		accepted int
		outcome  func(o []Outcome)
		check    func(t *testing.T, g *Group)
		// cached is what the first choice's tokens, asked again as a
		// prompt after the step, find in the prefix cache: the blocks the
		// step filled are registered before anything frees them.
		cached int
	}{
		{
			name: "accepted drafts count, rejected slots go", prompt: 3, drafts: 3, choices: 1, accepted: 1,
			check: func(t *testing.T, g *Group) {
				// 3 prompt tokens, 1 sampled, 1 accepted, 1 next.
				if seq := g.seqs[0]; seq.Computed != 5 || len(seq.Tokens) != 6 || len(seq.KV.Blocks) != 2 {
					t.Fatalf("computed %d, tokens %d, blocks %d", seq.Computed, len(seq.Tokens), len(seq.KV.Blocks))
				}
			},
			cached: 4,
		},
		{
			name: "all drafts rejected", prompt: 3, drafts: 3, choices: 1,
			check: func(t *testing.T, g *Group) {
				if seq := g.seqs[0]; seq.Computed != 4 || len(seq.Tokens) != 5 || len(seq.KV.Blocks) != 2 {
					t.Fatalf("computed %d, tokens %d, blocks %d", seq.Computed, len(seq.Tokens), len(seq.KV.Blocks))
				}
			},
			cached: 4,
		},
		{
			// The step computed position 7, which fills the second block.
			name: "accept then finish: finish wins, computed blocks stay cached", prompt: 7, drafts: 3, choices: 1, accepted: 1,
			outcome: func(o []Outcome) { o[0].Finished = true },
			check: func(t *testing.T, g *Group) {
				if seq := g.seqs[0]; !seq.Done() || len(seq.KV.Blocks) != 0 {
					t.Fatalf("done %v with %d blocks", seq.Done(), len(seq.KV.Blocks))
				}
			},
			cached: 8,
		},
		{
			name: "a finished prompt stays cached", prompt: 9, choices: 1, atPrompt: true,
			outcome: func(o []Outcome) { o[0].Finished = true },
			check: func(t *testing.T, g *Group) {
				if !g.seqs[0].Done() {
					t.Fatal("not done")
				}
			},
			cached: 8,
		},
		{
			name: "the leader ends with its first token: the forks start on its blocks", prompt: 6, choices: 3, atPrompt: true,
			outcome: func(o []Outcome) { o[0].Finished = true },
			check: func(t *testing.T, g *Group) {
				for _, c := range g.seqs[1:] {
					if !c.Running() || c.Computed != 6 || len(c.KV.Blocks) != 2 {
						t.Fatalf("fork running %v, computed %d, %d blocks", c.Running(), c.Computed, len(c.KV.Blocks))
					}
				}
				if !g.seqs[0].Done() {
					t.Fatal("the leader did not end")
				}
			},
			cached: 4,
		},
		{
			name: "a fork that ends with its first token never starts", prompt: 6, choices: 3, atPrompt: true,
			outcome: func(o []Outcome) { o[0].Forks[0].Finished = true },
			check: func(t *testing.T, g *Group) {
				if c := g.seqs[1]; !c.Done() || len(c.KV.Blocks) != 0 {
					t.Fatalf("the ended fork: done %v, %d blocks", c.Done(), len(c.KV.Blocks))
				}
				if c := g.seqs[2]; !c.Running() || c.Computed != 6 {
					t.Fatalf("the other fork: running %v, computed %d", c.Running(), c.Computed)
				}
			},
			cached: 4,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := Options{}
			if tc.drafts > 0 {
				opts.DraftLen = func(*Sequence, int) int { return tc.drafts }
			}
			s, cache := newScheduler(t, 16, opts)
			g := group(t, s, prompt(1, tc.prompt), tc.choices)
			if !tc.atPrompt {
				step(s, 0)
			}
			p := s.Schedule()
			outs := sample(p, tc.accepted)
			if tc.outcome != nil {
				tc.outcome(outs)
			}
			s.Update(p, outs)
			tc.check(t, g)
			check(t, s, cache, g)
			again := group(t, s, slices.Clone(g.seqs[0].Tokens), 1)
			step(s, 0)
			if again.CachedTokens() != tc.cached {
				t.Fatalf("the same prompt again found %d cached tokens, want %d", again.CachedTokens(), tc.cached)
			}
			check(t, s, cache, g, again)
		})
	}
}

// TestUpdatePreempted: sequences a step preempted have no outcome and stay
// as Schedule left them, freed and first in line.
func TestUpdatePreempted(t *testing.T) {
	t.Parallel()
	s, cache := newScheduler(t, 6, Options{})
	var gs []*Group
	for i := range 3 {
		gs = append(gs, group(t, s, prompt(100*i, 7), 1))
	}
	step(s, 0)
	step(s, 0)
	p := s.Schedule()
	victim := gs[2].seqs[0]
	if len(p.Preempted) != 1 || p.Preempted[0] != victim {
		t.Fatalf("preempted %v", p.Preempted)
	}
	tokens := len(victim.Tokens)
	s.Update(p, sample(p, 0))
	if victim.Computed != 0 || len(victim.KV.Blocks) != 0 || len(victim.Tokens) != tokens || s.waiting[0] != victim {
		t.Fatalf("the preempted sequence: computed %d, %d blocks, %d tokens (was %d)", victim.Computed, len(victim.KV.Blocks), len(victim.Tokens), tokens)
	}
	check(t, s, cache, gs...)
}

// TestUpdateMismatch: outcomes that do not fit the plan are the engine's
// bug, and Update says so instead of corrupting the cache's books: it
// changes nothing.
func TestUpdateMismatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(o []Outcome) []Outcome
	}{
		{"one outcome missing", func(o []Outcome) []Outcome { return o[:1] }},
		{"more drafts than reserved", func(o []Outcome) []Outcome { o[0].Drafts = 4; return o }},
		{"more accepted than verified", func(o []Outcome) []Outcome { o[0].Drafts, o[0].Accepted = 1, 2; return o }},
		{"a fork outcome too many", func(o []Outcome) []Outcome { o[1].Forks = make([]Outcome, 1); return o }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newScheduler(t, 16, Options{DraftLen: func(*Sequence, int) int { return 3 }})
			group(t, s, prompt(1, 3), 1)
			step(s, 0)
			group(t, s, prompt(20, 3), 1)
			p := s.Schedule() // a decode with 3 drafts, a prompt
			outs := tc.edit(sample(p, 0))
			decode := p.Seqs[0].Seq
			computed := decode.Computed
			defer func() {
				if recover() == nil {
					t.Fatal("Update took outcomes that do not fit the plan")
				}
				if decode.Computed != computed {
					t.Fatalf("Update applied part of the outcomes before it panicked: computed %d, was %d", decode.Computed, computed)
				}
			}()
			s.Update(p, outs)
		})
	}
}

func TestPaused(t *testing.T) {
	t.Parallel()
	s, cache := newScheduler(t, 16, Options{MaxRunning: 2, MaxQueued: 1})
	a := group(t, s, prompt(1, 3), 1)
	b := group(t, s, prompt(10, 3), 1)
	step(s, 0)
	s.Pause(a)
	p := step(s, 0)
	if got := entries(p); len(got) != 1 || got[0].seq != b.seqs[0] {
		t.Fatalf("plan %+v: a paused sequence was scheduled", got)
	}
	if !a.seqs[0].Running() || len(a.seqs[0].KV.Blocks) == 0 {
		t.Fatal("a paused sequence lost its place or its blocks")
	}
	// A paused sequence does not hold a running slot.
	c := group(t, s, prompt(20, 3), 1)
	if p := step(s, 0); len(p.Seqs) != 2 {
		t.Fatalf("plan %+v: a new request waits behind a paused one", entries(p))
	}
	if st := s.Stats(); st.Running != 2 || st.Paused != 1 {
		t.Fatalf("stats %+v", st)
	}
	// It waits as a queued request does: with MaxQueued 1, b and c
	// running and a paused, nothing more is admitted.
	if _, err := s.Add(NewGroup(prompt(30, 3), 1)); !errors.Is(err, engine.ErrOverloaded) {
		t.Fatalf("Add with a paused sequence holding the queue's place: %v", err)
	}
	s.Resume(a)
	if p := step(s, 0); len(p.Seqs) != 3 {
		t.Fatalf("plan %+v after resuming", entries(p))
	}
	check(t, s, cache, a, b, c)

	t.Run("preempted first when blocks run out", func(t *testing.T) {
		t.Parallel()
		s, cache := newScheduler(t, 3, Options{})
		a := group(t, s, prompt(1, 3), 1)
		b := group(t, s, prompt(10, 3), 1)
		step(s, 0)
		s.Pause(a) // a is the older one: without the pause b would go
		c := group(t, s, prompt(20, 7), 1)
		p := step(s, 0)
		if len(p.Preempted) != 1 || p.Preempted[0] != a.seqs[0] {
			t.Fatalf("preempted %v, want the paused sequence", p.Preempted)
		}
		if !slices.ContainsFunc(p.Seqs, func(sc Scheduled) bool { return sc.Seq == c.seqs[0] }) {
			t.Fatalf("plan %+v: the new request was not admitted into the freed blocks", entries(p))
		}
		s.Resume(a)
		check(t, s, cache, a, b, c)
	})
}

func TestAdmissionBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		running, queued int
		arrive          int
		wantAdmitted    int
	}{
		{running: 2, queued: 1, arrive: 10, wantAdmitted: 3}, // 2 free slots + 1 queued
		{running: 4, queued: 4, arrive: 64, wantAdmitted: 8}, // the HTTP test's setting
		{running: 64, queued: 256, arrive: 10, wantAdmitted: 10},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("running %d queued %d", tc.running, tc.queued), func(t *testing.T) {
			t.Parallel()
			s, cache := newScheduler(t, 256, Options{MaxRunning: tc.running, MaxQueued: tc.queued})
			var admitted []*Group
			for i := range tc.arrive {
				g := NewGroup(prompt(10*i, 3), i)
				switch _, err := s.Add(g); {
				case err == nil:
					admitted = append(admitted, g)
				case !errors.Is(err, engine.ErrOverloaded):
					t.Fatalf("Add: %v", err)
				}
			}
			if len(admitted) != tc.wantAdmitted {
				t.Fatalf("%d admitted, want %d", len(admitted), tc.wantAdmitted)
			}
			// Once the running slots are taken, only MaxQueued wait.
			step(s, 0)
			if st := s.Stats(); st.Queued != max(0, tc.wantAdmitted-tc.running) {
				t.Fatalf("stats %+v", st)
			}
			late := NewGroup(prompt(5000, 3), 0)
			_, err := s.Add(late)
			if (len(admitted) >= tc.running+tc.queued) != errors.Is(err, engine.ErrOverloaded) {
				t.Fatalf("with %d admitted: Add = %v", len(admitted), err)
			}
			if err == nil {
				admitted = append(admitted, late)
			}
			// An aborted request leaves the queue.
			if st := s.Stats(); st.Queued > 0 {
				var last *Group
				for _, g := range admitted {
					if !g.started {
						last = g
					}
				}
				s.Abort(last)
				if s.Stats().Queued != st.Queued-1 {
					t.Fatalf("queued %d after aborting a queued request, was %d", s.Stats().Queued, st.Queued)
				}
			}
			check(t, s, cache, admitted...)
		})
	}
}

// TestLoadBeforeMatch: Options.Load sees a sequence's tokens before each
// match, at admission and again after a preemption, and blocks it brings
// into the cache count as cached tokens.
func TestLoadBeforeMatch(t *testing.T) {
	t.Parallel()
	// A tier below memory that holds the blocks of p.
	lower := make(map[uint64]bool)
	var cache *kvcache.Manager
	var calls [][]int32
	load := func(tokens []int32) {
		calls = append(calls, slices.Clone(tokens))
		cache.Load(tokens, func(l kvcache.Link) bool { return lower[l.Hash] }, func(int32) {})
	}
	cache, err := kvcache.New(kvcache.Options{NumBlocks: 6, BlockSize: blockSize,
		Evict: func(_ int32, l kvcache.Link) { lower[l.Hash] = true }})
	if err != nil {
		t.Fatal(err)
	}
	s := New(cache, Options{Load: load})
	p := prompt(0, 9) // 2 full blocks before the last token's
	g := group(t, s, p, 1)
	step(s, 0)
	s.finish(g.seqs[0])
	// Another prompt takes every block: p's two go to the lower tier.
	other := group(t, s, prompt(500, 21), 1)
	step(s, 0)
	s.finish(other.seqs[0])
	if len(lower) < 2 {
		t.Fatalf("%d blocks evicted to the lower tier, want p's 2 at least", len(lower))
	}
	calls = nil
	again := group(t, s, p, 1)
	step(s, 0)
	if len(calls) != 1 || !slices.Equal(calls[0], p) {
		t.Fatalf("Load called with %v, want once with the prompt", calls)
	}
	if again.CachedTokens() != 8 {
		t.Fatalf("cached %d tokens, want the 8 the lower tier held", again.CachedTokens())
	}
	// Preempted, it is loaded and matched again when readmitted.
	s.preempt(again.seqs[0])
	calls = nil
	step(s, 0)
	if len(calls) != 1 {
		t.Fatalf("Load called %d times on readmission, want 1", len(calls))
	}
	check(t, s, cache, again)
}
