package sched

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"rill/engine"
	"rill/engine/kvcache"
	"rill/engine/model"
	"rill/engine/sample"
	"rill/engine/spec"
	"rill/engine/tokenizer"
)

type seqState uint8

const (
	stWaiting seqState = iota // queued for (re)admission
	stRunning                 // in the running set
	stForking                 // a further choice waiting for the shared prompt
	stDone
)

// request is one Generate call as the loop sees it.
type request struct {
	ctx       context.Context
	req       *engine.Request
	prompt    []int32
	maxTokens int
	out       *stream
	arrival   time.Time
	seqs      []*seq
	live      int  // choices not yet finished
	cached    int  // prompt tokens served from the prefix cache at first admission
	matched   bool // cached is set
	prefilled bool // the shared prompt is computed; further choices may fork

	draft      draftKind
	prediction []int32 // the client's predicted output, tokenised
}

// draftKind is the proposer a request drafts with.
type draftKind uint8

const (
	draftNone draftKind = iota
	draftModel
	draftNGram
	draftPrediction
)

// seq is one choice of a request: its tokens and where they are computed.
type seq struct {
	r       *request
	choice  int
	state   seqState
	tokens  []int32 // prompt, then accepted output
	comp    int     // leading tokens whose keys and values are in the cache
	kv      kvcache.Seq
	sampler *sample.Sampler
	dec     *tokenizer.Decoder
	stop    stopper
	gen     int // tokens generated
	first   time.Time
	top     []sample.Logprob

	// Speculative decoding (drafting requests only).
	backoff  spec.Backoff
	pred     *spec.Prediction
	dcomp    int     // leading tokens whose draft-model keys and values are cached
	drafts   []int32 // this step's proposal
	dsampler *sample.Sampler
	q        [][]float32 // draft-model distributions of drafts, when sampling
	accepted int
	rejected int
	// The verification step whose tokens are being emitted (all zero outside
	// one): drafts proposed, drafts the target verified, and verified drafts
	// emitted so far. They are added to accepted and rejected when the step
	// ends; until then draftCounts counts them.
	stepProposed, stepVerified, stepKept int
}

// draftCounts returns the draft counters of s so far, the step being
// emitted included: its emitted drafts are accepted, and the drafts the
// target refused are rejected at once; at the end of the choice (final)
// the verified drafts a stop condition cut off are rejected too.
func (s *seq) draftCounts(final bool) (accepted, rejected int) {
	accepted = s.accepted + s.stepKept
	rejected = s.rejected + s.stepProposed - s.stepVerified
	if final {
		rejected += s.stepVerified - s.stepKept
	}
	return accepted, rejected
}

// stats returns the counts of s so far: its running counts while it
// generates, its totals when final.
func (s *seq) stats(final bool) *engine.Stats {
	r := s.r
	cached := float64(r.cached)
	st := &engine.Stats{
		PromptTokens:     len(r.prompt),
		CachedTokens:     &cached,
		CompletionTokens: s.gen,
	}
	if r.draft != draftNone {
		acc, rej := s.draftCounts(final)
		st.DraftAccepted, st.DraftRejected = &acc, &rej
	}
	return st
}

func (e *Engine) newSeq(r *request, choice int, seed uint64) *seq {
	s := &seq{
		r:      r,
		choice: choice,
		tokens: slices.Clone(r.prompt),
		// Choices of one request differ; each is reproducible from the seed.
		sampler: sample.New(r.req.Sampling, e.tok.Size(), seed+uint64(choice)*0x9e3779b97f4a7c15),
		dec:     e.tok.NewDecoder(),
		stop:    stopper{stops: r.req.Stop},
	}
	if choice > 0 {
		s.state = stForking
	}
	if r.draft != draftNone {
		s.backoff = spec.Backoff{Max: e.opts.DraftTokens}
	}
	switch r.draft {
	case draftPrediction:
		s.pred = &spec.Prediction{Tokens: r.prediction}
	case draftModel:
		if r.req.Sampling.Temperature > 0 {
			// Proposals are drawn from the draft's tempered, filtered
			// distribution q; verification divides by it.
			p := r.req.Sampling
			p.PresencePenalty, p.FrequencyPenalty = 0, 0
			s.dsampler = sample.New(p, e.tok.Size(), seed^uint64(choice+1)*0xd1b54a32d192ed03)
			s.q = make([][]float32, e.opts.DraftTokens)
			for i := range s.q {
				s.q[i] = make([]float32, e.tok.Size())
			}
		}
	}
	return s
}

// planned is one sequence's share of a step's batch.
type planned struct {
	s    *seq
	take int // known tokens computed this step (drafts come on top)
	k    int // draft tokens reserved for this step
	row  int // first logits row, or -1
}

// loop is the engine's only goroutine. It ends when quit closes.
func (e *Engine) loop() {
	defer close(e.done)
	l := &loopState{e: e}
	for {
		if len(l.running) == 0 && len(l.waiting) == 0 {
			select {
			case r := <-e.submit:
				l.add(r)
			case <-e.quit:
				l.shutdown()
				return
			}
		}
	drain:
		for {
			select {
			case r := <-e.submit:
				l.add(r)
			case <-e.quit:
				l.shutdown()
				return
			default:
				break drain
			}
		}
		l.reap()
		if err := l.step(); err != nil {
			e.log.Error("forward pass failed", slog.Any("err", err))
			l.failAll(err)
		}
		l.publish()
	}
}

type loopState struct {
	e        *Engine
	requests []*request
	running  []*seq
	waiting  []*seq
	batch    model.Batch
	dbatch   model.Batch // the draft model's
	drafting []*planned  // scratch for runDraft
	live     []*planned
	plan     []planned
	preempts int64
	steps    int64
}

func (l *loopState) add(r *request) {
	r.live = len(r.seqs)
	l.requests = append(l.requests, r)
	r.seqs[0].state = stWaiting
	l.waiting = append(l.waiting, r.seqs[0])
}

// reap drops requests whose context ended: their blocks return to the free
// list before the next step is planned.
func (l *loopState) reap() {
	n := 0
	for _, r := range l.requests {
		if r.live > 0 && r.ctx.Err() == nil {
			l.requests[n] = r
			n++
			continue
		}
		for _, s := range r.seqs {
			if s.state != stDone {
				l.e.cache.Free(&s.kv)
				s.state = stDone
			}
		}
		if r.live > 0 {
			r.out.end(r.ctx.Err())
		}
	}
	clear(l.requests[n:])
	l.requests = l.requests[:n]
	l.compact()
}

// compact removes finished sequences from the running and waiting lists.
func (l *loopState) compact() {
	keep := func(s *seq, want seqState) bool { return s.state == want }
	l.running = slices.DeleteFunc(l.running, func(s *seq) bool { return !keep(s, stRunning) })
	l.waiting = slices.DeleteFunc(l.waiting, func(s *seq) bool { return !keep(s, stWaiting) })
}

// step plans one batch (running sequences first, then admissions, under the
// token budget), lets proposers draft, runs the batch through the target, and
// turns its logits into tokens.
func (l *loopState) step() error {
	e := l.e
	budget := e.opts.MaxBatchTokens
	l.plan = l.plan[:0]
	preempted := false

	for i := 0; i < len(l.running) && budget > 0; i++ {
		s := l.running[i]
		take := min(len(s.tokens)-s.comp, budget)
		if take <= 0 {
			continue
		}
		k := 0
		if take == 1 && len(s.tokens)-s.comp == 1 {
			k = l.draftLen(s, budget-take)
		}
		for e.cache.Reserve(&s.kv, s.comp+take+k) != nil {
			if k > 0 { // drafting is optional: drop it before preempting anyone
				k = 0
				continue
			}
			victim := l.running[len(l.running)-1]
			if victim == s && len(l.running) == 1 {
				// Alone and still out of room: the cache cannot hold this
				// sequence any longer.
				l.finish(s, engine.FinishLength)
				break
			}
			l.preempt(victim)
			preempted = true
			if victim == s {
				break
			}
		}
		if s.state != stRunning {
			continue
		}
		l.plan = append(l.plan, planned{s: s, take: take, k: k})
		budget -= take + k
	}
	l.compact()

	for !preempted && budget > 0 && len(l.waiting) > 0 && len(l.running) < e.opts.MaxSeqs {
		s := l.waiting[0]
		if len(s.kv.Blocks) == 0 {
			hit := e.cache.Match(&s.kv, s.tokens)
			s.comp, s.dcomp = hit, hit // committed blocks hold draft keys too (lockstep)
			if !s.r.matched {
				s.r.cached, s.r.matched = hit, true
				e.cache.Observe(len(s.r.prompt), hit)
			}
		}
		take := min(len(s.tokens)-s.comp, budget)
		if err := e.cache.Reserve(&s.kv, s.comp+take); err != nil {
			if len(l.running) == 0 && len(l.plan) == 0 && e.cache.FreeBlocks() == e.cache.NumBlocks()-len(s.kv.Blocks) {
				l.finish(s, engine.FinishLength) // cannot fit even alone
				l.compact()
				continue
			}
			e.cache.Free(&s.kv)
			s.comp, s.dcomp = 0, 0
			break
		}
		l.waiting = l.waiting[1:]
		s.state = stRunning
		l.running = append(l.running, s)
		l.plan = append(l.plan, planned{s: s, take: take})
		budget -= take
	}

	if len(l.plan) == 0 {
		return nil
	}
	if err := l.propose(); err != nil {
		return err
	}
	l.build()
	logits, err := e.runner.Forward(&l.batch, e.kv)
	if err != nil {
		return err
	}
	l.steps++
	V := e.model.Config.VocabSize
	for _, p := range l.plan {
		s := p.s
		s.comp += p.take
		if p.row < 0 || s.state != stRunning {
			l.commit(s)
			continue
		}
		if len(s.drafts) > 0 {
			l.verify(s, logits[p.row*V:(p.row+1+len(s.drafts))*V])
			continue
		}
		l.commit(s)
		row := logits[p.row*V : (p.row+1)*V]
		if s.choice == 0 && !s.r.prefilled {
			s.r.prefilled = true
			l.fork(s, row)
		}
		tok := s.sampler.Sample(row)
		s.sampler.Accept(tok)
		l.emit(s, tok, row)
	}
	l.compact()
	return nil
}

// commit registers s's verified, computed blocks in the prefix index. With
// a draft model only blocks the draft has computed too are registered, so
// that a prefix hit is valid for both models.
func (l *loopState) commit(s *seq) {
	n := s.comp
	if l.e.draft != nil {
		n = min(n, s.dcomp)
	}
	l.e.cache.Commit(&s.kv, s.tokens[:n])
}

// build lays the plan out as the target's batch: each sequence's known
// tokens, then its drafts; logits for the last known token and every draft.
func (l *loopState) build() {
	b := &l.batch
	b.Reset()
	for i := range l.plan {
		p := &l.plan[i]
		s := p.s
		table := int32(len(b.Tables))
		b.Tables = append(b.Tables, s.kv.Blocks)
		for j := range p.take {
			pos := s.comp + j
			b.Tokens = append(b.Tokens, s.tokens[pos])
			b.Pos = append(b.Pos, int32(pos))
			b.Seq = append(b.Seq, table)
		}
		p.row = -1
		if s.comp+p.take < len(s.tokens) {
			continue // a prompt chunk that does not reach the end yet
		}
		p.row = len(b.Logits)
		b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
		for j, d := range s.drafts {
			b.Tokens = append(b.Tokens, d)
			b.Pos = append(b.Pos, int32(s.comp+p.take+j))
			b.Seq = append(b.Seq, table)
			b.Logits = append(b.Logits, int32(len(b.Tokens)-1))
		}
	}
}

// fork starts the further choices of leader's request on the computed
// prompt: they share its full blocks, copy its partial last block, and sample
// their first token from the same logits row.
func (l *loopState) fork(leader *seq, row []float32) {
	e := l.e
	for _, c := range leader.r.seqs[1:] {
		if c.state != stForking {
			continue
		}
		child, src, dst, copied, err := e.cache.Fork(&leader.kv, len(leader.r.prompt))
		if err != nil {
			// No block for the copy now: recompute it like a new request
			// (the shared full blocks will be prefix-cache hits).
			c.state = stWaiting
			l.waiting = append(l.waiting, c)
			continue
		}
		if copied {
			n := len(leader.r.prompt) % e.cache.BlockSize()
			e.kv.CopyBlock(int(dst), int(src), n)
			if e.draftKV != nil {
				e.draftKV.CopyBlock(int(dst), int(src), n)
			}
		}
		c.kv = *child
		c.comp = len(leader.r.prompt)
		c.dcomp = min(leader.dcomp, c.comp)
		c.state = stRunning
		l.running = append(l.running, c)
		tok := c.sampler.Sample(row)
		c.sampler.Accept(tok)
		l.emit(c, tok, row)
	}
}

// emit appends tok, sampled from row, to s's output and streams it. It
// reports whether the choice finished (end of sequence, a stop string, max
// tokens or the context), in which case s is already released.
func (l *loopState) emit(s *seq, tok int, row []float32) bool {
	e := l.e
	r := s.r
	s.tokens = append(s.tokens, int32(tok))
	s.gen++
	if s.gen == 1 {
		s.first = time.Now()
	}

	ev := engine.Event{Choice: s.choice}
	var finish engine.FinishReason
	var text string
	if !r.req.IgnoreEOS && e.tok.IsEOG(tok) {
		finish = engine.FinishStop
		text = s.dec.Flush()
	} else {
		if r.req.Logprobs {
			ev.Logprobs = []engine.TokenLogprob{l.logprob(s, row, tok)}
		}
		text = s.dec.Add(tok)
		if s.gen >= r.maxTokens || len(s.tokens) >= e.ctxLen {
			finish = engine.FinishLength
			text += s.dec.Flush()
		}
	}
	emit, stopped := s.stop.push(text)
	if stopped {
		finish = engine.FinishStop
	} else if finish != "" {
		emit += s.stop.flush()
	}
	ev.Text = emit
	if ev.Text != "" || ev.Logprobs != nil {
		if r.req.ContinuousUsage {
			ev.Stats = s.stats(false)
		}
		r.out.push(ev)
	}
	if finish == "" {
		return false
	}
	l.finish(s, finish)
	return true
}

func (l *loopState) logprob(s *seq, row []float32, tok int) engine.TokenLogprob {
	e := l.e
	ls := sample.NewLogSoftmax(row)
	piece := e.tok.Piece(tok)
	lp := engine.TokenLogprob{Token: string(piece), Bytes: slices.Clone(piece), Logprob: float64(ls.Of(tok))}
	if n := s.r.req.TopLogprobs; n > 0 {
		s.top = ls.Top(n, s.top)
		lp.Top = make([]engine.TopLogprob, len(s.top))
		for i, t := range s.top {
			p := e.tok.Piece(t.ID)
			lp.Top[i] = engine.TopLogprob{Token: string(p), Bytes: slices.Clone(p), Logprob: float64(t.Logprob)}
		}
	}
	return lp
}

// finish ends choice s with reason, frees its blocks (they stay cached) and
// emits its final event; the request's stream ends after its last choice.
func (l *loopState) finish(s *seq, reason engine.FinishReason) {
	e := l.e
	r := s.r
	e.cache.Free(&s.kv)
	s.state = stDone
	now := time.Now()
	st := s.stats(true)
	if !s.first.IsZero() {
		st.PromptTime = s.first.Sub(r.arrival)
		st.GenerationTime = now.Sub(s.first)
	}
	r.out.push(engine.Event{Choice: s.choice, Final: true, FinishReason: reason, Stats: st})
	r.live--
	if r.live == 0 {
		r.out.end(nil)
	}
}

// preempt takes s off the running set and frees its blocks; it is requeued
// first and recomputes (mostly from the prefix cache) when readmitted.
func (l *loopState) preempt(s *seq) {
	l.e.cache.Free(&s.kv)
	s.comp, s.dcomp = 0, 0
	s.state = stWaiting
	l.running = slices.DeleteFunc(l.running, func(x *seq) bool { return x == s })
	l.waiting = slices.Insert(l.waiting, 0, s)
	l.preempts++
}

func (l *loopState) failAll(err error) {
	for _, r := range l.requests {
		for _, s := range r.seqs {
			if s.state != stDone {
				l.e.cache.Free(&s.kv)
				s.state = stDone
			}
		}
		r.out.end(err)
	}
	l.requests = l.requests[:0]
	l.compact()
}

func (l *loopState) shutdown() {
	l.failAll(ErrClosed)
}

// publish copies counters for Stats readers.
func (l *loopState) publish() {
	e := l.e
	st := Stats{
		Cache:       e.cache.Stats(),
		Preemptions: l.preempts,
		Steps:       l.steps,
		Running:     len(l.running),
		Waiting:     len(l.waiting),
	}
	e.statsMu.Lock()
	e.stats = st
	e.statsMu.Unlock()
}
