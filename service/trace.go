package service

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traces (OpenTelemetry): one span per HTTP request, and one per request
// of a WebSocket connection (a child of the connection's), started when
// the request arrives and ended with its access log line, with the same
// facts as attributes. A client's W3C traceparent and tracestate make the
// request's span a child of the client's; the span rides the request's
// context into the engine, whose own spans (queueing, prefill, decode, an
// upstream call) are its children, and an engine behind HTTP passes it on
// in its calls' traceparent. With Options.TracerProvider unset, tracing
// is off and costs next to nothing: no span is made, and only a client's
// traceparent rides the context, for engines behind HTTP to pass on.
//
// Attributes follow OpenTelemetry's semantic conventions for HTTP and
// generative AI where they name the thing; rill's own start with rill.

// tracerName names the service's spans.
const tracerName = "rill/service"

// traceContext reads and writes W3C traceparent and tracestate headers.
var traceContext propagation.TraceContext

// Span attribute keys.
const (
	attrModel          = attribute.Key("gen_ai.request.model")
	attrOperation      = attribute.Key("gen_ai.operation.name")
	attrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	attrCacheRead      = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	attrAccepted       = attribute.Key("rill.usage.accepted_prediction_tokens")
	attrRejected       = attribute.Key("rill.usage.rejected_prediction_tokens")
	attrReasoning      = attribute.Key("rill.usage.reasoning_tokens")
	attrTransport      = attribute.Key("rill.transport")
	attrRequestID      = attribute.Key("rill.request_id")
	attrWSRequestID    = attribute.Key("rill.websocket.request_id")
	attrReason         = attribute.Key("rill.reason")
	attrMethod         = attribute.Key("http.request.method")
	attrRoute          = attribute.Key("http.route")
	attrStatus         = attribute.Key("http.response.status_code")
	attrTimeToFirstTok = attribute.Key("rill.time_to_first_token_ms")
)

// startRequestSpan starts the span of HTTP request r, a child of the
// client's trace when r carries a traceparent, and returns r with the
// span in its context. With tracing off it makes none (nil) and puts
// only the client's span context there, if it sent one. Health checks
// and metrics scrapes get no span. Its name is the method and the route, or the
// method alone for a path rill does not serve (a path is the client's
// to choose, and span names must not be).
func (s *Server) startRequestSpan(r *http.Request, id string) (*http.Request, trace.Span) {
	if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
		// Probes and scrapes, every few seconds: noise in a trace store.
		return r, nil
	}
	if s.tracer == nil {
		if r.Header.Get("Traceparent") == "" {
			return r, nil
		}
		return r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))), nil
	}
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := r.Method
	attrs := []attribute.KeyValue{attrMethod.String(r.Method), attrRequestID.String(id)}
	if route := routeOf(r.URL.Path); route != "" {
		name += " " + route
		attrs = append(attrs, attrRoute.String(route))
		if op := operationOf(r.URL.Path); op != "" {
			attrs = append(attrs, attrOperation.String(op))
		}
	}
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), span
}

// startWSSpan starts the span of one request of the WebSocket connection
// on path, as a child of ctx's (the connection's); nil when tracing is off.
func (s *Server) startWSSpan(ctx context.Context, path string) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attrRoute.String(path), attrTransport.String("websocket")}
	if op := operationOf(path); op != "" {
		attrs = append(attrs, attrOperation.String(op))
	}
	return s.tracer.Start(ctx, "websocket "+path, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// requestValues returns a context that carries what rill reads from a
// request's context, its span (or its client's span context) and its API
// key's client, and nothing else of it: no cancellation, and none of
// net/http's contexts. A WebSocket connection and a detached SSE stream
// outlive their handler; context.WithoutCancel of the handler's context
// would keep net/http's connection and request contexts alive with them,
// some 300 bytes each for values nothing reads. A value a later change puts
// in the request's context for the service to read must be carried here.
func requestValues(ctx context.Context) context.Context {
	out := context.Background()
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() || span.IsRecording() {
		out = trace.ContextWithSpan(out, span)
	}
	if c := clientFrom(ctx); c != nil {
		out = withClient(out, c)
	}
	return out
}

// routeOf is the route of path as a span names it: the path of a fixed
// route, a template for the routes with an id in them, "" for a path rill
// does not serve. The web page's files are one route.
func routeOf(path string) string {
	switch rt := findRoute(path); rt {
	case nil:
		return ""
	case &routeResponse:
		return pathResponses + "/{response_id}"
	case &routeModel:
		return "/v1/models/{model}"
	case &routePage:
		return "/page"
	}
	return path
}

// operationOf is the GenAI operation name of a generation path; "" for
// the others.
func operationOf(path string) string {
	switch path {
	case "/v1/chat/completions", pathResponses, pathMessages:
		return "chat"
	case "/v1/completions":
		return "text_completion"
	case pathEmbeddings:
		return "embeddings"
	}
	return ""
}

// endSpan ends e's span, if it has one, with e's facts as attributes: a
// 5xx, or a request cut when not by its client, marks it as an error.
func endSpan(e *accessEntry) {
	span := e.span
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(spanAttrs(e)...)
	if e.status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(e.status))
	}
	span.End()
}

// spanAttrs are the attributes of e's span that are known at its end.
func spanAttrs(e *accessEntry) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, attrTransport.String(e.transport), attrStatus.Int(e.status))
	if e.wsRequestID != "" {
		attrs = append(attrs, attrWSRequestID.String(e.wsRequestID))
	}
	if e.model != "" {
		attrs = append(attrs, attrModel.String(e.model))
	}
	if e.reason != "" {
		attrs = append(attrs, attrReason.String(e.reason))
	}
	if e.ttft > 0 {
		attrs = append(attrs, attrTimeToFirstTok.Float64(float64(e.ttft.Microseconds())/1000))
	}
	if u := e.usage; u != nil {
		attrs = append(attrs, attrInputTokens.Int(u.PromptTokens), attrOutputTokens.Int(u.CompletionTokens))
		optional := func(k attribute.Key, v *int) {
			if v != nil {
				attrs = append(attrs, k.Int(*v))
			}
		}
		optional(attrCacheRead, u.CachedTokens)
		optional(attrAccepted, u.AcceptedPredictionTokens)
		optional(attrRejected, u.RejectedPredictionTokens)
		optional(attrReasoning, u.ReasoningTokens)
	}
	return attrs
}
