package native

import (
	"cmp"
	"context"
	"slices"
	"time"

	"rill/engine"
	"rill/engine/sample"
	"rill/engine/sched"
)

// step runs one step of the scheduler's plan: proposers draft, the target
// computes every planned token in one batched forward pass, each sequence
// that reached its last known token samples (or verifies its drafts) and
// emits, and so does each further choice that forks from it; the scheduler
// then learns what happened in one Update.
func (e *Engine) step(ctx context.Context) error {
	plan := e.sched.Schedule()
	// Requests whose last choice ends in this step end after the Update,
	// which registers their computed blocks in the prefix cache first, and
	// after the step's events, which carry the counts Update leaves.
	defer e.endFinished()
	defer e.deliver()
	for _, seq := range plan.Preempted {
		e.choiceOf(seq).release()
	}
	for _, seq := range plan.Exhausted {
		e.cut(e.choiceOf(seq), engine.FinishLength)
	}
	if len(plan.Seqs) == 0 {
		return nil
	}
	if e.beforeForward != nil {
		e.beforeForward(plan)
	}
	if err := e.propose(ctx, plan); err != nil {
		return err
	}
	e.build(plan)
	e.markStarted(plan)
	logits, err := e.runner.Forward(ctx, &e.loop.batch)
	if err != nil {
		return err
	}
	e.loop.steps++
	e.reportProgress(plan)
	outs := e.outcomes(plan)
	vocab := e.model.Config.VocabSize
	for i := range plan.Seqs {
		sc, o := &plan.Seqs[i], &outs[i]
		row := e.loop.rows[i]
		if row < 0 || sc.Seq.Done() {
			continue // a prompt chunk that does not reach the end yet
		}
		c := e.choiceOf(sc.Seq)
		rows := logits[row*vocab : (row+1+len(c.drafts))*vocab]
		last := rows[:vocab] // the logits after the last known token
		for j, child := range sc.Forks {
			// A further choice's first token comes from the same logits,
			// the logits after the prompt.
			fc := e.choiceOf(child)
			e.sampleNext(fc, last)
			o.Forks[j].Finished = fc.finished
		}
		if n := len(c.drafts); n > 0 {
			o.Drafts = n
			o.Accepted = e.verify(c, rows)
		} else {
			e.sampleNext(c, last)
		}
		o.Finished = c.finished
	}
	for _, f := range e.sched.Update(plan, outs) {
		if f.Copy {
			e.runner.CopyBlock(int(f.Dst), int(f.Src), f.Slots)
			if e.window != nil {
				e.runner.CopyWindowBlock(int(f.WindowDst), int(f.WindowSrc), f.Slots)
			}
			if e.draftRunner != nil {
				e.draftRunner.CopyBlock(int(f.Dst), int(f.Src), f.Slots)
			}
		}
	}
	for i := range plan.Seqs {
		for _, child := range plan.Seqs[i].Forks {
			if child.Waiting() {
				// No block for it now: it waits, as a preempted choice
				// does, without its buffers.
				e.choiceOf(child).release()
			}
		}
	}
	return nil
}

// outcomes returns the loop's outcome buffers for plan, zeroed: one per
// scheduled sequence, with one per further choice forking from it.
func (e *Engine) outcomes(plan *sched.Plan) []sched.Outcome {
	l := &e.loop
	l.outs = slices.Grow(l.outs[:0], len(plan.Seqs))[:len(plan.Seqs)]
	n := 0
	for i := range plan.Seqs {
		n += len(plan.Seqs[i].Forks)
	}
	l.forkOuts = slices.Grow(l.forkOuts[:0], n)[:n]
	clear(l.forkOuts)
	n = 0
	for i := range plan.Seqs {
		k := len(plan.Seqs[i].Forks)
		l.outs[i] = sched.Outcome{Forks: l.forkOuts[n : n+k : n+k]}
		n += k
	}
	return l.outs
}

// endFinished ends the streams of the requests whose last choice finished
// in this step (see finish).
func (e *Engine) endFinished() {
	l := &e.loop
	for _, r := range l.ended {
		e.end(r, nil)
	}
	clear(l.ended)
	l.ended = l.ended[:0]
}

// sampleNext samples c's next token from row, the model's logits after its
// last token, shaped by its constraint, and emits it.
func (e *Engine) sampleNext(c *choice, row []float32) {
	shaped := row
	if c.shaper != nil {
		var ok bool
		if shaped, ok = c.shaper.shape(row, 0); !ok {
			// The grammar allows no token at all here: the output is as
			// complete as it can be.
			e.cut(c, engine.FinishStop)
			return
		}
	}
	tok := c.sampler.Sample(shaped)
	c.sampler.Accept(tok)
	e.emit(c, tok, row)
}

// build lays the plan out as the target's batch: each sequence's planned
// known tokens, then its drafts; logits for the last known token and every
// draft. It records each sequence's first logits row (-1: none).
func (e *Engine) build(plan *sched.Plan) {
	l := &e.loop
	b := &l.batch
	b.Reset()
	l.rows = l.rows[:0]
	for i := range plan.Seqs {
		sc := &plan.Seqs[i]
		seq := sc.Seq
		table := int32(len(b.Tables))
		b.Tables = append(b.Tables, seq.KV.Blocks)
		if e.window != nil {
			b.WindowTables = append(b.WindowTables, seq.WindowKV.Blocks)
		}
		b.Prompt = append(b.Prompt, int32(len(e.choiceOf(seq).r.prompt)))
		for j := range sc.Compute {
			pos := sc.Start + j
			b.Tokens = append(b.Tokens, seq.Tokens[pos])
			b.Pos = append(b.Pos, int32(pos))
			b.Seq = append(b.Seq, table)
		}
		if !sc.Sampled {
			l.rows = append(l.rows, -1)
			continue
		}
		l.rows = append(l.rows, len(b.Logits))
		b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
		for j, d := range e.choiceOf(seq).drafts {
			b.Tokens = append(b.Tokens, d)
			b.Pos = append(b.Pos, int32(sc.Start+sc.Compute+j))
			b.Seq = append(b.Seq, table)
			b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
		}
	}
}

// emit appends tok, sampled from row (the model's logits, unshaped), to
// c's output and streams it. It reports whether the choice finished (end of
// sequence, a stop string, max tokens or the context), in which case c is
// already released.
func (e *Engine) emit(c *choice, tok int, row []float32) bool {
	r := c.r
	seq := c.seq
	seq.Tokens = append(seq.Tokens, int32(tok))
	c.emitted++
	if c.emitted == 1 {
		c.first = time.Now()
		if r.first.IsZero() {
			r.first = c.first
			r.trace.decode(r.first)
		}
	}
	c.shaper.accept(tok)

	ev := engine.Event{Choice: c.index}
	var finish engine.FinishReason
	// ignore_eos keeps going past an end token, but not past the end of a
	// grammar: nothing may follow it.
	eog := e.tok.IsEOG(tok) && (!r.req.IgnoreEOS || c.shaper.ended())
	switch {
	case eog:
		finish = engine.FinishStop
	case c.emitted >= r.maxTokens || len(seq.Tokens) >= e.ctxLen:
		finish = engine.FinishLength
	}
	if !eog && r.req.Logprobs {
		ev.Logprobs = []engine.TokenLogprob{e.logprob(c, row, tok)}
	}
	var stopped bool
	var text string
	ev.Reasoning, text, stopped = c.text(e.think, e.markers, tok, eog, finish != "")
	if stopped {
		finish = engine.FinishStop
	}
	e.output(c, &ev, text, finish != "")
	if finish == "" {
		return false
	}
	e.finish(c, finish)
	return true
}

// text returns the text tok adds to c's output, split at the thinking
// block into reasoning and answer, and passed through the stop strings.
// eog says that tok ends generation (it has no text; what the decoder
// holds is flushed), ending that the choice ends with tok. stopped reports
// that a stop string matched: the output then ends before it. markers are
// the tool-call markers among the control tokens (see decode).
func (c *choice) text(m thinkMarkers, markers map[int]string, tok int, eog, ending bool) (reasoning, text string, stopped bool) {
	var out output
	if c.harmony != nil {
		s := c.dec.Flush()
		if !eog {
			s = c.dec.Add(tok)
			if ending {
				s += c.dec.Flush()
			}
		}
		c.harmony.feed(s, true, ending, &out)
		return c.stopText(&out, ending)
	}
	if eog {
		if c.think.thinking() {
			c.think.tokens++ // the model ended inside its thinking block
		}
		out.add(c.think.thinking(), c.dec.Flush())
	} else {
		if marker, reasoning := c.think.next(m, tok); marker {
			// A marker's text is in neither stream; what the decoder held
			// belongs to the stream the marker ends.
			out.add(reasoning, c.dec.Flush())
		} else {
			out.add(reasoning, c.decode(markers, tok))
		}
		if ending {
			out.add(c.think.thinking(), c.dec.Flush())
		}
	}
	return c.stopText(&out, ending)
}

// decode returns the text tok adds to c's output. Choices that read or
// constrain tool calls see the tool-call markers that the vocabulary makes
// control tokens (markers) as their text.
func (c *choice) decode(markers map[int]string, tok int) string {
	if s := c.shaper; s != nil && (s.matcher != nil || s.parser != nil) {
		if m, ok := markers[tok]; ok {
			return c.dec.Flush() + m
		}
	}
	return c.dec.Add(tok)
}

// output is the text one token adds to a choice, by stream: reasoning (a
// thinking block) first, then the answer. A token adds to at most two.
type output struct {
	reasoning, text string
}

func (o *output) add(reasoning bool, s string) {
	if reasoning {
		o.reasoning += s
	} else {
		o.text += s
	}
}

// stopText passes a token's output through the choice's stop strings, which
// apply to each stream alone (a stop string in the reasoning ends the
// choice there, as it does in vLLM, whose stop strings see the raw text).
// Text that could still become a stop string is held back; ending flushes
// it. stopped reports that a stop string matched.
func (c *choice) stopText(o *output, ending bool) (reasoning, text string, stopped bool) {
	reasoning, stopped = c.stopReasoning.push(o.reasoning)
	if stopped {
		return reasoning, "", true
	}
	if !c.reasoning() || ending {
		// The block is over (or the choice ends): nothing held back in the
		// reasoning can become a stop string any more.
		reasoning += c.stopReasoning.flush()
	}
	text, stopped = c.stop.push(o.text)
	if !stopped && ending {
		text += c.stop.flush()
	}
	return reasoning, text, stopped
}

// reasoning reports whether c's text now goes to the reasoning stream.
func (c *choice) reasoning() bool { return c.think.thinking() || c.harmony.reasoning() }

// output streams the next answer text of c (final: its last) in ev, whose
// Reasoning and Logprobs are set: as content and tool-call deltas when c
// parses tool calls (the reasoning never holds calls), else as text. An
// event with nothing in it is not sent.
func (e *Engine) output(c *choice, ev *engine.Event, text string, final bool) {
	ev.Text = text
	if c.shaper != nil && c.shaper.parser != nil {
		ev.Text, ev.ToolCalls = c.shaper.parse(text, final)
	}
	if c.harmony != nil {
		ev.ToolCalls = c.harmony.takeCalls()
	}
	if ev.Text == "" && ev.Reasoning == "" && ev.Logprobs == nil && len(ev.ToolCalls) == 0 {
		return
	}
	if c.r.req.ContinuousUsage {
		ev.Stats = c.stats(false)
	}
	e.push(c.r, *ev)
}

// cut ends c without a new token (the context or the KV cache is
// exhausted, or the grammar allows nothing more): the text held back for
// stop strings and tool calls is sent, then the final event.
func (e *Engine) cut(c *choice, reason engine.FinishReason) {
	var o output
	if c.harmony != nil {
		c.harmony.feed(c.dec.Flush(), false, true, &o)
	} else {
		o.add(c.think.thinking(), c.dec.Flush())
	}
	ev := engine.Event{Choice: c.index}
	var text string
	var stopped bool
	ev.Reasoning, text, stopped = c.stopText(&o, true)
	if stopped {
		reason = engine.FinishStop
	}
	e.output(c, &ev, text, true)
	e.finish(c, reason)
}

func (e *Engine) logprob(c *choice, row []float32, tok int) engine.TokenLogprob {
	ls := sample.NewLogSoftmax(row)
	piece := e.tok.Piece(tok)
	lp := engine.TokenLogprob{Token: string(piece), Bytes: slices.Clone(piece), Logprob: float64(ls.Of(tok))}
	if n := c.r.req.TopLogprobs; n > 0 {
		c.top = ls.Top(n, c.top)
		lp.Top = make([]engine.TopLogprob, len(c.top))
		for i, t := range c.top {
			p := e.tok.Piece(t.ID)
			lp.Top[i] = engine.TopLogprob{Token: string(p), Bytes: slices.Clone(p), Logprob: float64(t.Logprob)}
		}
	}
	return lp
}

// finish ends choice c with reason: its buffers are released and its final
// event streamed; the step's Update frees its blocks (full ones stay
// cached), and the request's stream ends after its last choice, once the
// step is over (endFinished).
func (e *Engine) finish(c *choice, reason engine.FinishReason) {
	r := c.r
	if reason == engine.FinishStop && (c.shaper != nil && c.shaper.calls > 0 || c.harmony != nil && c.harmony.begun > 0) {
		reason = engine.FinishToolCalls
	}
	c.finished = true
	c.release()
	st := c.stats(true)
	ev := engine.Event{Choice: c.index, Final: true, FinishReason: reason, Stats: st}
	if reason == engine.FinishStop {
		ev.StopSequence = cmp.Or(c.stop.matched, c.stopReasoning.matched)
	}
	e.push(r, ev)
	r.live--
	if r.live == 0 {
		e.loop.ended = append(e.loop.ended, r)
	}
}

// statsBox holds a Stats and the values its pointers point at, so that
// one allocation makes a complete Stats.
type statsBox struct {
	stats              engine.Stats
	cached             float64
	written            int
	accepted, rejected int
	reasoning          int
}

// stats returns c's counts and times so far; final adds the drafts of
// the current step that did not make it into the output to the rejected
// ones.
func (c *choice) stats(final bool) *engine.Stats {
	r := c.r
	b := &statsBox{cached: float64(r.group.CachedTokens()), written: r.group.CacheWriteTokens()}
	b.stats = engine.Stats{PromptTokens: len(r.prompt), CachedTokens: &b.cached, CacheWriteTokens: &b.written,
		CompletionTokens: c.emitted}
	if !c.first.IsZero() {
		b.stats.PromptTime = c.first.Sub(r.started)
		b.stats.GenerationTime = time.Since(c.first)
	}
	if r.draft != draftNone {
		b.accepted, b.rejected = c.accepted, c.rejected
		if final {
			b.rejected += c.undecided
		}
		b.stats.DraftAccepted, b.stats.DraftRejected = &b.accepted, &b.rejected
	}
	switch {
	case r.think != phaseNone:
		b.reasoning = c.think.tokens
		b.stats.ReasoningTokens = &b.reasoning
	case c.harmony != nil:
		b.reasoning = c.harmony.tokens
		b.stats.ReasoningTokens = &b.reasoning
	}
	return &b.stats
}
