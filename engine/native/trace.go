package native

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"rill/engine/sched"
)

// tracerName names the spans of the embedded engine.
const tracerName = "rill/engine/native"

// requestTrace follows one request through the engine's phases as child
// spans of the span its context carried: "queue" from Generate until the
// first forward pass that computes part of its prompt, "prefill" from
// there to its first token, and "decode" from there to its end. Only the
// loop's goroutine touches it once the request is admitted (Generate's
// before). A nil *requestTrace traces nothing: the request's context
// carried no recording span (tracing is off), and then a request costs
// no more than a nil check per phase.
type requestTrace struct {
	tracer trace.Tracer
	parent trace.Span
	phase  trace.Span // the phase now open; nil after end
}

// newRequestTrace starts the queue span of a request that arrived at
// arrival, as a child of ctx's span; nil when that span does not record.
// The tracer comes from the parent span's provider, so that the engine
// needs no global: the service's provider (or none) decides.
func newRequestTrace(ctx context.Context, model string, arrival time.Time) *requestTrace {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return nil
	}
	t := &requestTrace{tracer: parent.TracerProvider().Tracer(tracerName), parent: parent}
	t.open("queue", arrival, attribute.String("gen_ai.request.model", model))
	return t
}

// open ends the phase now open at at and opens the next one.
func (t *requestTrace) open(name string, at time.Time, attrs ...attribute.KeyValue) {
	if t.phase != nil {
		t.phase.End(trace.WithTimestamp(at))
	}
	ctx := trace.ContextWithSpan(context.Background(), t.parent)
	_, t.phase = t.tracer.Start(ctx, name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
}

// prefill marks the start of the prompt's processing: prompt tokens in
// all, cached of them from the prefix cache.
func (t *requestTrace) prefill(at time.Time, prompt, cached int) {
	if t == nil {
		return
	}
	t.open("prefill", at, attribute.Int("rill.prompt_tokens", prompt), attribute.Int("rill.cached_tokens", cached))
}

// decode marks the request's first token.
func (t *requestTrace) decode(at time.Time) {
	if t == nil {
		return
	}
	t.open("decode", at)
}

// end closes the phase now open; err, when not nil, is why the request
// failed (its context's end included).
func (t *requestTrace) end(err error) {
	if t == nil || t.phase == nil {
		return
	}
	if err != nil {
		t.phase.RecordError(err)
		t.phase.SetStatus(codes.Error, err.Error())
	}
	t.phase.End()
	t.phase = nil
}

// markStarted notes, for each request of plan whose prompt this step
// begins to compute, when processing began: the end of its wait in the
// queue and the start of its prefill, from which Stats.PromptTime counts,
// and the first progress report of those that asked for progress.
func (e *Engine) markStarted(plan *sched.Plan) {
	var now time.Time
	for i := range plan.Seqs {
		r := e.choiceOf(plan.Seqs[i].Seq).r
		if !r.started.IsZero() {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		r.started = now
		r.trace.prefill(now, len(r.prompt), r.group.CachedTokens())
		e.reportStart(r)
	}
}
