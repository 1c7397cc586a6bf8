package service

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// The access log: one structured line (slog message "request") per
// request, written when it ends: per HTTP request, per request of a
// WebSocket connection, and one for the connection itself when it closes.
// Attributes, present when known:
//
//	id                 the X-Request-Id (a client's, when it sent a plain one;
//	                   echoed in the response); on WebSocket lines the
//	                   connection's
//	request_id         a WebSocket request's client-chosen request_id
//	method, path       as requested; WebSocket requests log GET and the
//	                   connection's path
//	transport          "http" or "websocket"
//	model              the model a generation ran on
//	status             the HTTP status, or a WebSocket error's; 499 when the
//	                   client left or cancelled
//	ttft               time to the first token of a generation
//	duration           until the last byte
//	bytes              response bytes (HTTP)
//	prompt_tokens, completion_tokens, cached_tokens,
//	accepted_prediction_tokens, rejected_prediction_tokens, reasoning_tokens
//	                   the usage of a completed generation, as sent
//
//	reason             why a request was cut when not by the client:
//	                   shutdown, write_idle_timeout
//
// Lines are at level info, error for a 5xx (warn for one cut by a
// shutdown); successful /metrics and
// /health requests (scrapes and probes, every few seconds) are at debug.

// accessEntry is one access log line.
type accessEntry struct {
	id          string
	wsRequestID string
	method      string
	path        string
	transport   string
	model       string
	status      int
	start       time.Time
	ttft        time.Duration // 0: no token came
	bytes       int64         // negative: not counted
	usage       *Usage
	// reason says why the request ended early when that was not the
	// client's doing (reasonShutdown, reasonWriteIdle).
	reason string
	// span is the request's span, which ends with its line; nil for none.
	span trace.Span
}

// logRequest writes the access line of an HTTP request (ServeHTTP's).
func (s *Server) logRequest(r *http.Request, rec *recorder, info *requestInfo, start time.Time) {
	if info.detached {
		return // its stream writes the line at its end
	}
	status := rec.status
	if info.status != 0 {
		status = info.status
	}
	if status == 0 {
		status = http.StatusOK
	}
	transport := "http"
	if isWebSocketUpgrade(r) {
		transport = "websocket"
	}
	s.logAccess(r.Context(), &accessEntry{id: info.id, method: r.Method, path: r.URL.Path, transport: transport,
		model: info.model, status: status, start: start, ttft: info.obs.timeToFirstToken(), bytes: rec.bytes,
		usage: info.usage, reason: info.reason, span: info.span})
}

// logAccess writes e, and ends e's span with the same facts.
func (s *Server) logAccess(ctx context.Context, e *accessEntry) {
	endSpan(e)
	level := logLevel(e.status, e.reason)
	if e.status < 400 && (e.path == "/metrics" || e.path == "/health") {
		level = slog.LevelDebug
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 18)
	attrs = append(attrs, slog.String("id", e.id))
	if e.wsRequestID != "" {
		attrs = append(attrs, slog.String("request_id", e.wsRequestID))
	}
	attrs = append(attrs,
		slog.String("method", e.method),
		slog.String("path", e.path),
		slog.String("transport", e.transport))
	if e.model != "" {
		attrs = append(attrs, slog.String("model", e.model))
	}
	attrs = append(attrs, slog.Int("status", e.status))
	if e.ttft > 0 {
		attrs = append(attrs, slog.Duration("ttft", e.ttft))
	}
	attrs = append(attrs, slog.Duration("duration", time.Since(e.start)))
	if e.bytes >= 0 {
		attrs = append(attrs, slog.Int64("bytes", e.bytes))
	}
	if e.reason != "" {
		attrs = append(attrs, slog.String("reason", e.reason))
	}
	attrs = appendUsageAttrs(attrs, e.usage)
	s.log.LogAttrs(ctx, level, "request", attrs...)
}

// appendUsageAttrs appends the log attributes of u, if any.
func appendUsageAttrs(attrs []slog.Attr, u *Usage) []slog.Attr {
	if u == nil {
		return attrs
	}
	attrs = append(attrs,
		slog.Int("prompt_tokens", u.PromptTokens),
		slog.Int("completion_tokens", u.CompletionTokens))
	optional := func(key string, v *int) {
		if v != nil {
			attrs = append(attrs, slog.Int(key, *v))
		}
	}
	optional("cached_tokens", u.CachedTokens)
	optional("accepted_prediction_tokens", u.AcceptedPredictionTokens)
	optional("rejected_prediction_tokens", u.RejectedPredictionTokens)
	optional("reasoning_tokens", u.ReasoningTokens)
	return attrs
}
