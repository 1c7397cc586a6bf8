package sched

import "rill/engine/spec"

// Speculative decoding inside the step: a decoding sequence that drafts
// reserves k extra slots, a proposer fills s.drafts, the target verifies all
// k+1 positions in the same batched forward pass as everyone else's tokens,
// and verify keeps the agreed prefix. Rejected positions are simply not
// counted as computed: their slots are overwritten later and never enter the
// prefix index.
//
// A draft model runs in lockstep with the target: every step it first
// computes, for every planned sequence, the same known tokens the target
// computes (so its cache is valid wherever the target's is, prefix hits
// included), then proposes one token per pass for k passes.

// ngram is the n-gram prompt-lookup configuration.
var ngram = spec.Lookup{MinN: 1, MaxN: 4}

// draftLen returns how many tokens s may draft this step: its backoff's
// choice, never past max_tokens (a step emits up to k+1 tokens) or the
// context, and within the token budget left.
func (l *loopState) draftLen(s *seq, budget int) int {
	if s.r.draft == draftNone {
		return 0
	}
	k := s.backoff.Next()
	k = min(k, s.r.maxTokens-s.gen-1, l.e.ctxLen-len(s.tokens)-1, budget)
	return max(k, 0)
}

// propose fills s.drafts for every planned sequence that reserved draft slots.
func (l *loopState) propose() error {
	for i := range l.plan {
		p := &l.plan[i]
		s := p.s
		s.drafts = s.drafts[:0]
		if p.k == 0 {
			continue
		}
		switch s.r.draft {
		case draftNGram:
			s.drafts = ngram.Propose(s.drafts, s.tokens, s.tokens, true, p.k)
		case draftPrediction:
			s.drafts = s.pred.Propose(s.drafts, p.k)
		}
	}
	if l.e.draft != nil {
		return l.runDraft()
	}
	return nil
}

// runDraft runs the draft model: a catch-up pass over every planned
// sequence's known tokens, which also yields the first proposal of each
// sequence drafting with the model, then one pass per further proposal.
func (l *loopState) runDraft() error {
	e := l.e
	V := e.draft.Config.VocabSize
	b := &l.dbatch
	b.Reset()
	drafting := l.drafting[:0]
	defer func() { l.drafting = drafting[:0] }()
	for i := range l.plan {
		p := &l.plan[i]
		s := p.s
		end := s.comp + p.take
		if s.dcomp >= end {
			continue
		}
		table := int32(len(b.Tables))
		b.Tables = append(b.Tables, s.kv.Blocks)
		for pos := s.dcomp; pos < end; pos++ {
			b.Tokens = append(b.Tokens, s.tokens[pos])
			b.Pos = append(b.Pos, int32(pos))
			b.Seq = append(b.Seq, table)
		}
		s.dcomp = end
		if p.k > 0 && s.r.draft == draftModel && end == len(s.tokens) {
			b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
			drafting = append(drafting, p)
		}
	}
	if len(b.Tokens) == 0 {
		return nil
	}
	logits, err := e.draftRunner.Forward(b, e.draftKV)
	if err != nil {
		return err
	}
	for j, p := range drafting {
		l.draftOne(p.s, logits[j*V:(j+1)*V])
	}
	for pass := 1; ; pass++ {
		b.Reset()
		live := l.live[:0]
		for _, p := range drafting {
			if p.k <= pass {
				continue
			}
			s := p.s
			table := int32(len(b.Tables))
			b.Tables = append(b.Tables, s.kv.Blocks)
			pos := len(s.tokens) + pass - 1
			b.Tokens = append(b.Tokens, s.drafts[pass-1])
			b.Pos = append(b.Pos, int32(pos))
			b.Seq = append(b.Seq, table)
			b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
			s.dcomp = pos + 1
			live = append(live, p)
		}
		if len(live) == 0 {
			return nil
		}
		logits, err := e.draftRunner.Forward(b, e.draftKV)
		if err != nil {
			return err
		}
		for j, p := range live {
			l.draftOne(p.s, logits[j*V:(j+1)*V])
		}
		drafting, l.live = live, drafting[:0]
	}
}

// draftOne appends the draft model's next proposal for s from its logits:
// the argmax for greedy requests, else a draw from the draft's distribution
// q, which is kept for verification.
func (l *loopState) draftOne(s *seq, row []float32) {
	if s.dsampler == nil {
		best := 0
		for i, x := range row {
			if x > row[best] {
				best = i
			}
		}
		s.drafts = append(s.drafts, int32(best))
		return
	}
	q := s.q[len(s.drafts)]
	copy(q, s.dsampler.Dist(row))
	s.drafts = append(s.drafts, int32(s.dsampler.SampleDist(q)))
}

// verify checks s's drafts against the target's rows (one for the last known
// token, one per draft), emits the accepted prefix and the target's next
// token, and accounts per DESIGN §3 rule 5: draft tokens that end up in the
// output are accepted, the rest (including any cut off by a stop condition)
// rejected.
func (l *loopState) verify(s *seq, rows []float32) {
	V := l.e.model.Config.VocabSize
	proposed := len(s.drafts)
	var q [][]float32
	if s.dsampler != nil && s.r.draft == draftModel {
		q = s.q[:proposed]
	}
	drafts := s.drafts
	a, next := spec.Verify(s.sampler, rows, V, drafts, q)
	s.backoff.Record(proposed, a)
	outStart := len(s.tokens)
	// emit reports the counters with the step's counts in them (draftCounts),
	// the final event of a choice that stops within the step included.
	s.stepProposed, s.stepVerified = proposed, a
	for j := 0; j <= a; j++ {
		tok := next
		s.stepKept = min(a, j+1)
		if j < a {
			tok = int(drafts[j])
		}
		if l.emit(s, tok, rows[j*V:(j+1)*V]) {
			s.accepted, s.rejected = s.draftCounts(true)
			s.stepProposed, s.stepVerified, s.stepKept = 0, 0, 0
			return
		}
	}
	s.accepted, s.rejected = s.draftCounts(false)
	s.stepProposed, s.stepVerified, s.stepKept = 0, 0, 0
	// The accepted drafts' keys and values are valid; the rejected ones'
	// slots will be overwritten.
	s.comp += a
	s.dcomp = min(s.dcomp, s.comp)
	l.e.cache.Truncate(&s.kv, len(s.tokens))
	l.commit(s)
	if s.pred != nil {
		s.pred.Advance(s.tokens[len(s.r.prompt):], len(s.tokens)-outStart)
	}
}
