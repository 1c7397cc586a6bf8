package native

import (
	"time"

	"rill/engine"
	"rill/engine/sched"
)

// reportStart queues the first progress event of r, if it asked for
// progress, as its processing begins: nothing computed yet beyond the
// cached prefix, as llama.cpp's first prompt_progress says, so that a
// client learns that its request left the queue.
func (e *Engine) reportStart(r *request) {
	if !r.req.Progress {
		return
	}
	cached := r.group.CachedTokens()
	r.progressed = cached
	e.push(r, engine.Event{Progress: &engine.Progress{Total: len(r.prompt), Cached: cached, Processed: cached}})
}

// reportProgress queues a progress event (engine.Progress) for each
// request of plan that asked for one and whose prompt this step computed
// a part of, before any token the step samples from it: how many of the
// prompt's tokens are in the KV cache now, the cached ones included, as
// llama.cpp's prompt_progress counts them. A request's reports only grow:
// a prompt computed again after a preemption, or past its first token,
// reports nothing.
func (e *Engine) reportProgress(plan *sched.Plan) {
	var now time.Time
	for i := range plan.Seqs {
		sc := &plan.Seqs[i]
		r := e.choiceOf(sc.Seq).r
		if !r.req.Progress || !r.first.IsZero() || sc.Compute == 0 {
			continue
		}
		done := min(sc.Start+sc.Compute, len(r.prompt))
		if done <= r.progressed {
			continue
		}
		r.progressed = done
		if now.IsZero() {
			now = time.Now()
		}
		e.push(r, engine.Event{Progress: &engine.Progress{
			Total:     len(r.prompt),
			Cached:    r.group.CachedTokens(),
			Processed: done,
			Elapsed:   now.Sub(r.started),
		}})
	}
}
