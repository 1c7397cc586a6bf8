package upstream

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the spans of upstream calls.
const tracerName = "rill/engine/upstream"

// startCallSpan starts the span of one HTTP call to replica r's path,
// a child of ctx's span, and writes its W3C traceparent (and the
// tracestate ctx carries) into h, so that the upstream's own spans join
// the client's trace. The tracer is the parent span's provider's: with
// tracing off it makes no span, and h then carries the client's own
// traceparent, when it sent one, unchanged.
func startCallSpan(ctx context.Context, r *replica, model, path string, h http.Header) trace.Span {
	tracer := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName)
	ctx, span := tracer.Start(ctx, "POST "+path, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("http.request.method", http.MethodPost),
			attribute.String("url.path", path),
			attribute.Int("rill.upstream.replica", r.idx),
			attribute.String("gen_ai.request.model", model)))
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	return span
}

// endCallSpan ends a call's span with the status the upstream answered
// (0: none) and err, the call's failure if it failed.
func endCallSpan(span trace.Span, status int, err error) {
	if !span.IsRecording() {
		return
	}
	if status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
