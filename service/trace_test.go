package service

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"rill/engine"
	"rill/internal/wait"
)

// spanAttr returns the value of span's attribute key, and whether it has it.
func spanAttr(span sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range span.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestRequestSpans: each request has a span that ends with its facts
// (transport, status, model, usage as the client got it), and the engine
// sees that span in its context. Over WebSocket each request message has
// its own span, a child of the connection's; over HTTP the span is the
// request's, a child of the client's traceparent.
func TestRequestSpans(t *testing.T) {
	t.Parallel()
	stats := func(int) engine.Stats {
		cached := 3.0
		return engine.Stats{PromptTokens: 7, CachedTokens: &cached, CompletionTokens: 2}
	}
	tests := []struct{ transport string }{{"http"}, {"websocket"}}
	for _, tt := range tests {
		t.Run(tt.transport, func(t *testing.T) {
			t.Parallel()
			rec := tracetest.NewSpanRecorder()
			var seen trace.SpanContext // the span the engine's context carried
			fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				seen = trace.SpanContextFromContext(ctx)
				return replay([]string{"a", "b"}, engine.FinishStop, stats)(ctx, req)
			}}
			ts := newTestServer(t, fake, Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
			const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
			body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`
			switch tt.transport {
			case "http":
				req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
				req.Header.Set("Content-Type", "application/json")
				resp, err := ts.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
			case "websocket":
				c := dialWS(t, ts, "/v1/chat/completions", nil)
				sendWS(t, c, createMsg("r1", body))
				if m := nextNonChunk(t, c); m.Type != "done" {
					t.Fatalf("got %s, want done", m.raw)
				}
			}
			name := "POST /v1/chat/completions"
			if tt.transport == "websocket" {
				name = "websocket /v1/chat/completions"
			}
			var span sdktrace.ReadOnlySpan
			wait.For(t, "the request's span to end", func() bool {
				for _, s := range rec.Ended() {
					if s.Name() == name {
						span = s
					}
				}
				return span != nil
			})
			if seen.SpanID() != span.SpanContext().SpanID() {
				t.Errorf("the engine's context carried span %s, want the request's %s", seen.SpanID(), span.SpanContext().SpanID())
			}
			if tt.transport == "http" && span.SpanContext().TraceID().String() != traceID {
				t.Errorf("trace id %s, want the client's %s", span.SpanContext().TraceID(), traceID)
			}
			if tt.transport == "websocket" {
				// The connection's span is the handshake's, still open.
				var conn sdktrace.ReadOnlySpan
				for _, s := range rec.Started() {
					if s.Name() == "GET /v1/chat/completions" {
						conn = s
					}
				}
				if conn == nil || span.Parent().SpanID() != conn.SpanContext().SpanID() {
					t.Errorf("the request's span is not a child of the connection's")
				}
			}
			want := map[attribute.Key]attribute.Value{
				attrTransport:    attribute.StringValue(tt.transport),
				attrModel:        attribute.StringValue("tiny"),
				attrStatus:       attribute.IntValue(200),
				attrInputTokens:  attribute.IntValue(7),
				attrOutputTokens: attribute.IntValue(2),
				attrCacheRead:    attribute.IntValue(3),
				attrOperation:    attribute.StringValue("chat"),
			}
			for k, v := range want {
				if got, ok := spanAttr(span, k); !ok || got != v {
					t.Errorf("%s = %v (present %v), want %v", k, got.Emit(), ok, v.Emit())
				}
			}
			if _, ok := spanAttr(span, attrAccepted); ok {
				t.Errorf("%s present without drafting", attrAccepted)
			}
		})
	}
}

// BenchmarkRequestTracing serves a short non-streamed chat completion
// through ServeHTTP with tracing off (otel's no-op global provider), off
// with a client's traceparent (passed on, nothing recorded), and on (an
// SDK provider recording every span in memory), to show what the
// request's span costs.
func BenchmarkRequestTracing(b *testing.B) {
	const body = `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for _, tt := range []struct {
		name        string
		provider    trace.TracerProvider
		traceparent string
	}{
		{name: "off"},
		{name: "off,traceparent", traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{name: "on", provider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))},
	} {
		b.Run(tt.name, func(b *testing.B) {
			fake := &fakeEngine{models: testModels, respond: replay([]string{"a", "b"}, engine.FinishStop, plainStats(3, 2))}
			s := New(Options{Engine: fake, Logger: slog.New(slog.DiscardHandler), TracerProvider: tt.provider})
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				if tt.traceparent != "" {
					r.Header.Set("traceparent", tt.traceparent)
				}
				w := httptest.NewRecorder()
				s.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// TestRouteOf: span names never carry an id or a file name from the
// path, and a path rill does not serve gives none.
func TestRouteOf(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/v1/chat/completions", "/v1/chat/completions"},
		{"/v1/responses", "/v1/responses"},
		{"/v1/responses/resp_123", "/v1/responses/{response_id}"},
		{"/v1/models/some-model", "/v1/models/{model}"},
		{"/v1/models", "/v1/models"},
		{"/", "/page"},
		{"/v1/nothing-here", ""},
		{"/wp-admin", ""},
	}
	for _, tt := range tests {
		if got := routeOf(tt.path); got != tt.want {
			t.Errorf("routeOf(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

// TestNoSpansForProbes: health checks and metrics scrapes, which come
// every few seconds, make no span; other requests without a model do.
func TestNoSpansForProbes(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	ts := newTestServer(t, &fakeEngine{}, Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	for _, path := range []string{"/health", "/metrics", "/v1/models"} {
		resp, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	wait.For(t, "the /v1/models span", func() bool { return len(rec.Ended()) > 0 })
	for _, s := range rec.Ended() {
		if s.Name() != "GET /v1/models" {
			t.Errorf("a span %q", s.Name())
		}
	}
}
