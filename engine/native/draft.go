package native

import (
	"context"

	"rill/engine/sched"
	"rill/engine/spec"
)

// Speculative decoding inside the step: the scheduler reserves up to k
// draft slots on top of a decode (draftLen says how many), a proposer fills
// choice.drafts, the target verifies all k+1 positions in the same batched
// forward pass as everyone else's tokens, and verify keeps the agreed
// prefix. Rejected positions are never counted as computed: their slots are
// overwritten later and never enter the prefix index.
//
// A draft model runs in lockstep with the target: every step it first
// computes, for every planned sequence, the same known tokens the target
// computes (so its cache is valid wherever the target's is, prefix hits
// included), then proposes one token per pass for k passes.

// ngram is the n-gram prompt-lookup configuration.
var ngram = spec.Lookup{MinN: 1, MaxN: 4}

// draftLen is the scheduler's sched.Options.DraftLen: how many tokens seq
// drafts this step: its backoff's choice, never past max_tokens (a step
// emits up to k+1 tokens) or the context, and within the token budget left.
func (e *Engine) draftLen(seq *sched.Sequence, budget int) int {
	c := e.choiceOf(seq)
	if c.r.draft == draftNone {
		return 0
	}
	wanted := c.backoff.Next()
	return max(0, min(wanted, c.r.maxTokens-c.emitted-1, e.ctxLen-len(seq.Tokens)-1, budget))
}

// propose fills the drafts of every planned sequence that reserved draft
// slots (and empties everyone else's).
func (e *Engine) propose(ctx context.Context, plan *sched.Plan) error {
	for i := range plan.Seqs {
		sc := &plan.Seqs[i]
		c := e.choiceOf(sc.Seq)
		c.drafts = c.drafts[:0]
		if sc.Drafts == 0 {
			continue
		}
		switch c.r.draft {
		case draftNGram:
			c.drafts = ngram.Propose(c.drafts, sc.Seq.Tokens, sc.Seq.Tokens, true, sc.Drafts)
		case draftPrediction:
			c.drafts = c.prediction.Propose(c.drafts, sc.Drafts)
		}
	}
	if e.draft != nil {
		if err := e.runDraft(ctx, plan); err != nil {
			return err
		}
	}
	// A constrained choice verifies only what its grammar allows: the
	// draft is cut at the first token it refuses (that position is then
	// sampled from the target, so the output stays the target's).
	for i := range plan.Seqs {
		c := e.choiceOf(plan.Seqs[i].Seq)
		if c.draftMatched > 0 {
			c.shaper.rollback(c.draftMatched)
			c.draftMatched = 0
		}
		if c.shaper != nil {
			c.drafts = c.shaper.checkDrafts(c.drafts)
		}
	}
	return nil
}

// runDraft runs the draft model: a catch-up pass over every planned
// sequence's known tokens, which also yields the first proposal of each
// sequence drafting with the model, then one pass per further proposal.
func (e *Engine) runDraft(ctx context.Context, plan *sched.Plan) error {
	l := &e.loop
	vocab := e.draft.Config.VocabSize
	b := &l.draftBatch
	b.Reset()
	drafting := l.drafting[:0]
	defer func() { l.drafting = drafting[:0] }()
	for i := range plan.Seqs {
		sc := &plan.Seqs[i]
		seq := sc.Seq
		end := sc.Start + sc.Compute
		if seq.DraftComputed >= end {
			continue
		}
		table := int32(len(b.Tables))
		b.Tables = append(b.Tables, seq.KV.Blocks)
		b.Prompt = append(b.Prompt, int32(len(e.choiceOf(seq).r.prompt)))
		for pos := seq.DraftComputed; pos < end; pos++ {
			b.Tokens = append(b.Tokens, seq.Tokens[pos])
			b.Pos = append(b.Pos, int32(pos))
			b.Seq = append(b.Seq, table)
		}
		seq.DraftComputed = end
		c := e.choiceOf(seq)
		if sc.Drafts > 0 && c.r.draft == draftModel && end == len(seq.Tokens) {
			b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
			c.draftsWanted = sc.Drafts
			drafting = append(drafting, c)
		}
	}
	if len(b.Tokens) == 0 {
		return nil
	}
	logits, err := e.draftRunner.Forward(ctx, b)
	if err != nil {
		return err
	}
	for j, c := range drafting {
		e.draftOne(c, logits[j*vocab:(j+1)*vocab])
	}
	for pass := 1; ; pass++ {
		b.Reset()
		live := l.live[:0]
		for _, c := range drafting {
			if c.draftsWanted <= pass {
				continue
			}
			seq := c.seq
			table := int32(len(b.Tables))
			b.Tables = append(b.Tables, seq.KV.Blocks)
			b.Prompt = append(b.Prompt, int32(len(c.r.prompt)))
			pos := len(seq.Tokens) + pass - 1
			b.Tokens = append(b.Tokens, c.drafts[pass-1])
			b.Pos = append(b.Pos, int32(pos))
			b.Seq = append(b.Seq, table)
			b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
			seq.DraftComputed = pos + 1
			live = append(live, c)
		}
		if len(live) == 0 {
			return nil
		}
		logits, err := e.draftRunner.Forward(ctx, b)
		if err != nil {
			return err
		}
		for j, c := range live {
			e.draftOne(c, logits[j*vocab:(j+1)*vocab])
		}
		drafting, l.live = live, drafting[:0]
	}
}

// draftOne appends the draft model's next proposal for c from its logits:
// the argmax for greedy requests, else a draw from the draft's distribution
// q, which is kept for verification. A constrained choice drafts from the
// draft's logits shaped like the target's (its grammar matcher advances over
// each proposal and is rolled back after drafting), so that its proposals
// are ones the target may accept; drafting stops at the grammar's end.
func (e *Engine) draftOne(c *choice, row []float32) {
	if s := c.shaper; s != nil && s.k.shapes() {
		shaped, ok := s.shape(row, len(c.drafts))
		if !ok || s.ended() {
			c.draftsWanted = len(c.drafts)
			return
		}
		row = shaped
		defer func() {
			if s.matcher != nil {
				s.accept(int(c.drafts[len(c.drafts)-1]))
				c.draftMatched++
				if s.ended() {
					c.draftsWanted = len(c.drafts)
				}
			}
		}()
	}
	if c.draftSampler == nil {
		best := 0
		for i, x := range row {
			if x > row[best] {
				best = i
			}
		}
		c.drafts = append(c.drafts, int32(best))
		return
	}
	i := len(c.drafts)
	if i >= len(c.draftDists) {
		c.draftDists = append(c.draftDists, make([]float32, len(row)))
	}
	dist := c.draftDists[i]
	copy(dist, c.draftSampler.Dist(row))
	c.drafts = append(c.drafts, int32(c.draftSampler.SampleDist(dist)))
}

// verify checks c's drafts against the target's rows (one for the last
// known token, one per draft), emits the accepted prefix and the target's
// next token, and accounts per docs/design.md §3 rule 5: draft tokens that end up
// in the output are accepted, the rest (including any cut off by a stop
// condition) rejected. It returns how many drafts the target accepted.
func (e *Engine) verify(c *choice, rows []float32) int {
	vocab := e.model.Config.VocabSize
	seq := c.seq
	proposed := len(c.drafts)
	var draftDists [][]float32 // nil: the drafts were deterministic guesses
	if c.draftSampler != nil && c.r.draft == draftModel {
		draftDists = c.draftDists[:proposed]
	}
	drafts := c.drafts
	verifyRows := rows
	if c.shaper != nil {
		verifyRows, drafts = c.shaper.shapeDrafted(rows, vocab, drafts)
		if draftDists != nil {
			draftDists = draftDists[:len(drafts)]
		}
	}
	accepted, next := spec.Verify(c.sampler, verifyRows, vocab, drafts, draftDists)
	c.backoff.Record(proposed, accepted)
	outStart := len(seq.Tokens)
	baseAccepted, baseRejected := c.accepted, c.rejected
	for j := 0; j <= accepted; j++ {
		tok := next
		if j < accepted {
			tok = int(drafts[j])
		}
		// The counts as of this token: the drafts before it are in the
		// output; the step's others are rejected once the target's own
		// token is out, and if the choice ends here.
		kept := min(accepted, j+1)
		c.accepted = baseAccepted + kept
		c.undecided = proposed - kept
		if j == accepted {
			c.rejected, c.undecided = baseRejected+proposed-accepted, 0
		}
		if e.emit(c, tok, rows[j*vocab:(j+1)*vocab]) {
			return accepted
		}
	}
	if c.prediction != nil {
		c.prediction.Advance(seq.Tokens[c.r.group.PromptLen():], len(seq.Tokens)-outStart)
	}
	return accepted
}
