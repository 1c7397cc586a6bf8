package native

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"rill/engine"
	"rill/engine/sample"
	"rill/engine/sched"
	"rill/engine/spec"
	"rill/engine/tokenizer"
	"rill/engine/toolcall"
)

// request is one Generate call. Generate builds it; from then on the loop
// owns it, except for cancelled, which the request context's AfterFunc sets.
type request struct {
	req       *engine.Request
	prompt    []int32
	think     thinkPhase // where each choice's output starts (chat on a reasoning model)
	harmony   bool       // chat on a harmony model: each choice reads its output with a harmonySplit
	maxTokens int
	out       *engine.Queue
	arrival   time.Time
	// started is when the first forward pass that computed part of the
	// prompt began; first when the request's first token came (zero
	// before). Stats.PromptTime runs between them.
	started, first time.Time
	// progressed is how far the prompt's processing was last reported
	// (Request.Progress).
	progressed int
	trace      *requestTrace // nil: not traced
	group      *sched.Group  // set on admission
	choices    []*choice
	live       int  // choices not yet finished
	paused     bool // the scheduler holds the request: its consumer is behind

	draft      draftKind
	prediction []int32 // the client's predicted output, tokenised
	// constraint is what the request asks of its output beyond sampling
	// (a grammar, tool-call parsing, a logit bias); nil for none.
	constraint *constraint

	verdict   chan error  // the loop's admission answer to Generate (cap 1)
	cancelled atomic.Bool // the request's context ended
	unwatch   func() bool // stops watching the request's context
}

// draftKind is the proposer a request drafts with.
type draftKind uint8

const (
	draftNone draftKind = iota
	draftModel
	draftNGram
	draftPrediction
)

// Seeds of a request's samplers: choice i of a request with seed s samples
// with s + i*choiceSeedStride, so that choices differ and each is
// reproducible (choice 0 uses s itself). The stride is 2^64/φ, SplitMix64's
// increment, which spreads consecutive choices over the whole seed space.
// A draft model's sampler gets (choice+1)*draftSeedMultiplier folded in, an
// odd 64-bit multiplier with good spectral properties (Steele and Vigna's
// tables for LCGs), so that its stream is unrelated to the target's.
const (
	choiceSeedStride    = 0x9e3779b97f4a7c15
	draftSeedMultiplier = 0xd1b54a32d192ed03
)

// Generate implements engine.Engine. It validates and tokenises req on the
// caller's goroutine, then hands it to the loop, which admits it or, with
// MaxQueuedRequests requests waiting to start, refuses it with
// engine.ErrOverloaded. Requests wait for Run.
func (e *Engine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q (this server has %q)", engine.ErrUnknownModel, req.Model, e.info.ID)
	}
	k, err := e.constraintFor(req)
	if err != nil {
		return nil, err
	}
	prompt, think, err := e.promptTokens(ctx, promptRequest(req, k))
	if err != nil {
		return nil, err
	}
	if think != phaseNone && k != nil && k.grammar != nil {
		// A grammar holds the output from its first token (a response
		// format, forced tool calls): there is no thinking block to split
		// off, and what the grammar allows is the answer.
		think = phaseAnswer
	}
	// A budget beyond the context is the room left, or a refusal, as the
	// model's policy says; a prompt that alone fills it is always refused.
	maxTokens, err := e.opts.MaxTokensPolicy.Budget(e.ctxLen, len(prompt), req.MaxTokens, promptParam(req))
	if err != nil {
		return nil, err
	}
	if need := e.cache.BlocksFor(len(prompt) + 1); need > e.cache.NumBlocks() {
		return nil, engine.Errorf(engine.CodeContextLengthExceeded, promptParam(req),
			"the prompt of %d tokens does not fit in this server's KV cache of %d tokens", len(prompt), e.cache.NumBlocks()*e.cache.BlockSize())
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > 20 {
		return nil, engine.Errorf("", "top_logprobs", "top_logprobs must be between 0 and 20")
	}

	n := req.Choices()
	r := &request{
		req:        req,
		prompt:     prompt,
		think:      think,
		harmony:    req.Messages != nil && e.toolFormat == toolcall.Harmony,
		maxTokens:  maxTokens,
		arrival:    time.Now(),
		verdict:    make(chan error, 1),
		constraint: k,
	}
	r.out = engine.NewQueue(e.opts.StreamBuffer*n, e.signal)
	r.trace = newRequestTrace(ctx, e.info.ID, r.arrival)
	if !req.NoDraft {
		switch {
		case req.Prediction != "":
			r.draft = draftPrediction
			ids, err := e.tok.EncodeContext(ctx, e.usablePrediction(req.Prediction, maxTokens), tokenizer.EncodeOptions{Continuation: true})
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				r.prediction = append(r.prediction, int32(id))
			}
		case e.draft != nil:
			r.draft = draftModel
		case e.opts.NGram:
			r.draft = draftNGram
		}
	}
	seed := rand.Uint64()
	if req.Sampling.Seed != nil {
		seed = uint64(*req.Sampling.Seed)
	}
	r.choices = make([]*choice, n)
	for i := range n {
		r.choices[i] = e.newChoice(r, i, seed)
	}
	// Watch the context from now on: a cancellation ends the stream at once
	// and wakes the loop, which frees the request's blocks.
	r.unwatch = context.AfterFunc(ctx, func() {
		r.out.End(ctx.Err()) // first: the loop's own End must not win
		r.cancelled.Store(true)
		e.signal()
	})
	select {
	case e.submit <- r:
	case <-ctx.Done():
		r.unwatch()
		r.trace.end(ctx.Err())
		return nil, ctx.Err()
	case <-e.quit:
		r.unwatch()
		r.trace.end(ErrClosed)
		return nil, ErrClosed
	case <-e.done:
		r.unwatch()
		r.trace.end(ErrClosed)
		return nil, ErrClosed
	}
	if err := <-r.verdict; err != nil {
		r.unwatch()
		r.trace.end(err)
		return nil, err
	}
	return r.out, nil
}

// signal wakes the loop if it waits; it never blocks.
func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// choice is the engine's state of one choice of a request: what samples,
// detokenises, stops and drafts it. The scheduler's view of it is seq.
type choice struct {
	r       *request
	seq     *sched.Sequence // set on admission
	index   int
	sampler *sample.Sampler
	dec     *tokenizer.Decoder
	stop    stopper // of the answer
	// think splits the output at a thinking block; stopReasoning holds
	// the block's text back as stop does the answer's.
	think         thinkSplit
	stopReasoning stopper
	// harmony reads a harmony model's output (chat only; see harmony.go);
	// think is then unused.
	harmony  *harmonySplit
	emitted  int       // completion tokens emitted
	first    time.Time // when the first token was emitted
	finished bool      // ended (see Engine.finish); the step tells the scheduler
	top      []sample.Logprob
	// shaper applies the request's constraint to this choice (its grammar
	// matcher, logit bias and tool-call parser); nil for none.
	shaper *shaper

	// Speculative decoding (drafting requests only).
	backoff      spec.Backoff
	prediction   *spec.Prediction
	drafts       []int32         // this step's proposal
	draftsWanted int             // this step's reserved draft slots, while the draft model proposes
	draftSampler *sample.Sampler // draws proposals from the draft model (sampling requests)
	draftDists   [][]float32     // the draft model's distribution of each proposal, when sampling
	draftMatched int             // proposals the grammar matcher advanced over while the draft model drafted
	accepted     int             // draft tokens in the output
	rejected     int             // draft tokens known not to be in the output
	undecided    int             // this step's drafts not (yet) in the output: rejected if the choice ends now
}

func (e *Engine) newChoice(r *request, i int, seed uint64) *choice {
	c := &choice{
		r:             r,
		index:         i,
		sampler:       sample.New(r.req.Sampling, e.tok.Size(), seed+uint64(i)*choiceSeedStride),
		dec:           e.tok.NewDecoder(),
		stop:          stopper{stops: r.req.Stop},
		think:         thinkSplit{phase: r.think},
		stopReasoning: stopper{stops: r.req.Stop},
		shaper:        newShaper(r.constraint, r.maxTokens),
	}
	if r.harmony {
		c.harmony = newHarmonySplit(r.constraint)
	}
	if r.draft != draftNone {
		c.backoff = spec.Backoff{Max: e.opts.DraftTokens}
	}
	switch r.draft {
	case draftPrediction:
		c.prediction = &spec.Prediction{Tokens: r.prediction}
	case draftModel:
		if r.req.Sampling.Temperature > 0 {
			// Proposals are drawn from the draft's tempered, filtered
			// distribution q; verification divides by it.
			p := r.req.Sampling
			p.PresencePenalty, p.FrequencyPenalty = 0, 0
			c.draftSampler = sample.New(p, e.tok.Size(), seed^uint64(i+1)*draftSeedMultiplier)
		}
	}
	return c
}

// release drops c's vocabulary-sized buffers: c finished, was preempted or
// is paused. They come back when it samples again.
func (c *choice) release() {
	c.sampler.Release()
	c.shaper.release()
	if c.draftSampler != nil {
		c.draftSampler.Release()
	}
	c.draftDists = nil
}

func promptParam(req *engine.Request) string {
	if req.Messages != nil {
		return "messages"
	}
	return "prompt"
}
