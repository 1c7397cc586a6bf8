package native

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"

	"rill/engine"
	"rill/engine/kvcache"
	"rill/engine/model"
	"rill/engine/sched"
)

// loopState is what the loop keeps between steps. Only Run's goroutine
// touches it.
type loopState struct {
	requests []*request // admitted and not yet ended
	slots    []*choice  // the choices of admitted requests, by sched.Sequence.ID
	free     []int      // unused slot ids
	paused   int        // requests paused because their consumer is behind
	// newlyPaused are requests paused during the last step, whose buffers
	// are released before the next one (not during a step that may still
	// verify their drafts).
	newlyPaused []*request

	batch      model.Batch
	draftBatch model.Batch
	rows       []int     // per planned sequence: its first logits row, or -1
	drafting   []*choice // scratch for runDraft
	live       []*choice // scratch for runDraft
	// The step's outcomes for the scheduler: one per planned sequence,
	// and their forks' (see outcomes).
	outs, forkOuts []sched.Outcome
	// ended are the requests whose last choice finished in this step,
	// whose streams end after it.
	ended []*request
	// pending are the step's events, in order, delivered after the
	// scheduler's Update (see deliver).
	pending []pendingEvent
	steps   int64
}

// errInternal is the error of requests failed by a bug in the engine's step.
var errInternal = errors.New("internal error in the engine")

// Run runs the engine on the calling goroutine: it admits requests, plans
// and runs steps, and streams their events, until ctx ends or Close is
// called. Requests still in flight then fail with ErrClosed, and so does
// every later Generate. A panic in a step fails the requests that were
// running (their streams end with an error), is logged with its stack, and
// the engine serves on. Run may be called once; it returns nil when
// stopped.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("native: Run called more than once")
	}
	defer close(e.done)
	l := &e.loop
	defer e.failAll(ErrClosed)
	for {
		select {
		case <-e.quit:
			return nil
		case <-ctx.Done():
			return nil
		default:
		}
		e.admitPending(ctx)
		e.reap()
		if l.paused > 0 {
			e.resumeCaughtUp()
		}
		e.releasePaused()
		e.publish()
		if e.sched.Idle() {
			select {
			case r := <-e.submit:
				e.admit(r)
			case j := <-e.embeds:
				e.runEmbed(ctx, j)
			case <-e.wake:
			case <-e.quit:
				return nil
			case <-ctx.Done():
				return nil
			}
			continue
		}
		e.safeStep(ctx)
	}
}

// admitPending admits the requests Generate is handing over, and runs the
// embedding jobs Embed is, without waiting.
func (e *Engine) admitPending(ctx context.Context) {
	for {
		select {
		case r := <-e.submit:
			e.admit(r)
		case j := <-e.embeds:
			// Between steps: the loop owns the runner and the cache.
			e.runEmbed(ctx, j)
		default:
			return
		}
	}
}

// admit gives r's choices slots and a scheduler group and queues it, or
// answers Generate that the engine is overloaded.
func (e *Engine) admit(r *request) {
	l := &e.loop
	ids := make([]int, len(r.choices))
	for i, c := range r.choices {
		ids[i] = e.bind(c)
	}
	r.group = sched.NewGroup(r.prompt, ids...)
	if r.req.Priority != nil {
		r.group.SetPriority(*r.req.Priority)
	}
	for i, seq := range r.group.Seqs() {
		r.choices[i].seq = seq
	}
	shed, err := e.sched.Add(r.group)
	if err != nil {
		for _, id := range ids {
			e.unbind(id)
		}
		r.verdict <- err
		return
	}
	if shed != nil {
		e.shed(shed)
	}
	r.live = len(r.choices)
	l.requests = append(l.requests, r)
	r.verdict <- nil
}

// shed ends the queued request whose scheduler group g the scheduler took
// off its queue for one served before it: its stream ends with
// engine.ErrOverloaded, as Generate would have answered had it come last.
func (e *Engine) shed(g *sched.Group) {
	for _, r := range e.loop.requests {
		if r.group == g && r.live > 0 {
			e.log.Warn("shed a queued request for one of higher priority",
				slog.String("model", e.info.ID), slog.Int("priority", g.Priority()))
			e.end(r, fmt.Errorf("%w: shed from the queue for a request of higher priority", engine.ErrOverloaded))
			return
		}
	}
}

// bind gives c a slot and returns its id.
func (e *Engine) bind(c *choice) int {
	l := &e.loop
	if n := len(l.free); n > 0 {
		id := l.free[n-1]
		l.free = l.free[:n-1]
		l.slots[id] = c
		return id
	}
	l.slots = append(l.slots, c)
	return len(l.slots) - 1
}

func (e *Engine) unbind(id int) {
	l := &e.loop
	l.slots[id] = nil
	l.free = append(l.free, id)
}

// choiceOf returns the choice the scheduler's seq stands for.
func (e *Engine) choiceOf(seq *sched.Sequence) *choice { return e.loop.slots[seq.ID] }

// reap drops requests that ended: completed ones, and cancelled ones,
// whose blocks return to the free list before the next step is planned.
func (e *Engine) reap() {
	l := &e.loop
	n := 0
	for _, r := range l.requests {
		if r.live > 0 && !r.cancelled.Load() {
			l.requests[n] = r
			n++
			continue
		}
		if r.live > 0 {
			// Cancelled: the stream already ended with the context's error.
			e.end(r, nil)
		}
	}
	clear(l.requests[n:])
	l.requests = l.requests[:n]
}

// end releases everything of r and ends its stream with err (nil: io.EOF;
// a stream that ended already keeps its end).
func (e *Engine) end(r *request, err error) {
	l := &e.loop
	e.sched.Abort(r.group)
	for _, c := range r.choices {
		c.release()
		e.unbind(c.seq.ID)
	}
	if r.paused {
		r.paused = false
		l.paused--
	}
	r.live = 0
	// The trace first: a consumer that saw the stream end sees its spans.
	if err == nil && r.cancelled.Load() {
		r.trace.end(context.Canceled)
	} else {
		r.trace.end(err)
	}
	r.out.End(err)
	r.unwatch()
}

// resumeCaughtUp resumes paused requests whose consumer took their stream
// down to half its bound.
func (e *Engine) resumeCaughtUp() {
	l := &e.loop
	for _, r := range l.requests {
		if r.paused && r.out.Len() <= e.opts.StreamBuffer*len(r.choices)/2 {
			r.paused = false
			l.paused--
			e.sched.Resume(r.group)
		}
	}
}

// push queues ev for r's stream; deliver sends it at the end of the step.
func (e *Engine) push(r *request, ev engine.Event) {
	e.loop.pending = append(e.loop.pending, pendingEvent{r, ev})
}

// pendingEvent is an event of the step for r's stream.
type pendingEvent struct {
	r  *request
	ev engine.Event
}

// deliver sends the step's events to their streams, in order. They wait
// for the end of the step because a prompt's cache writes are counted when
// the scheduler's Update registers its blocks, after the step sampled the
// first token from it: an event's Stats carry the count as Update left it,
// so that the first event of a request (message_start's usage, a one-token
// answer's final usage) has it too.
func (e *Engine) deliver() {
	l := &e.loop
	for i := range l.pending {
		p := &l.pending[i]
		if st := p.ev.Stats; st != nil && st.CacheWriteTokens != nil {
			*st.CacheWriteTokens = p.r.group.CacheWriteTokens()
		}
		e.send(p.r, p.ev)
	}
	clear(l.pending)
	l.pending = l.pending[:0]
}

// send puts ev on r's stream, and pauses r when its consumer is behind.
func (e *Engine) send(r *request, ev engine.Event) {
	if r.out.Push(ev) && !r.paused && !ev.Final {
		r.paused = true
		e.loop.paused++
		e.loop.newlyPaused = append(e.loop.newlyPaused, r)
		e.sched.Pause(r.group)
	}
}

// releasePaused releases the vocabulary-sized buffers of the requests
// paused in the last step and still paused: they wait for their consumer.
func (e *Engine) releasePaused() {
	l := &e.loop
	for _, r := range l.newlyPaused {
		if r.paused {
			for _, c := range r.choices {
				c.release()
			}
		}
	}
	clear(l.newlyPaused)
	l.newlyPaused = l.newlyPaused[:0]
}

// safeStep runs one step. A panic in it fails every request that was
// running (their state is suspect) and is logged with its stack.
func (e *Engine) safeStep(ctx context.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		e.log.Error("engine step panicked; failing the running requests",
			slog.String("model", e.info.ID), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
		e.failRunning(fmt.Errorf("%w: %v", errInternal, v))
	}()
	if err := e.step(ctx); err != nil {
		e.log.Error("forward pass failed; failing the running requests", slog.String("model", e.info.ID), slog.Any("err", err))
		e.failRunning(err)
	}
}

// failRunning fails every request that has a sequence running.
func (e *Engine) failRunning(err error) {
	l := &e.loop
	for _, r := range l.requests {
		if r.live > 0 && slices.ContainsFunc(r.group.Seqs(), (*sched.Sequence).Running) {
			e.end(r, err)
		}
	}
	e.reap()
}

// failAll fails every request in flight with err.
func (e *Engine) failAll(err error) {
	for _, r := range e.loop.requests {
		if r.live > 0 {
			e.end(r, err)
		}
	}
	e.reap()
}

// publish copies counters for Stats readers.
func (e *Engine) publish() {
	ss := e.sched.Stats()
	st := Stats{
		Cache:       e.cache.Stats(),
		WindowCache: e.windowStats(),
		Preemptions: ss.Preemptions,
		Steps:       e.loop.steps,
		Running:     ss.Running,
		Paused:      ss.Paused,
		Waiting:     ss.Waiting,
		Queued:      ss.Queued,
	}
	e.statsMu.Lock()
	e.stats = st
	e.statsMu.Unlock()
}

// windowStats are the sliding layers' pool's counters (zero without one).
func (e *Engine) windowStats() kvcache.Stats {
	if e.window == nil {
		return kvcache.Stats{}
	}
	return e.window.Stats()
}
