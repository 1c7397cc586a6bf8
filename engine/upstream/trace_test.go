package upstream_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"rill/engine/upstream"
	"rill/internal/wait"
	"rill/service"
)

// traceparents records the traceparent header of each generation request
// a replica gets.
type traceparents struct {
	h    http.Handler
	mu   sync.Mutex
	seen []string
}

func (tp *traceparents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/") && r.Method == http.MethodPost {
		tp.mu.Lock()
		tp.seen = append(tp.seen, r.Header.Get("traceparent"))
		tp.mu.Unlock()
	}
	tp.h.ServeHTTP(w, r)
}

// TestTraceparentToUpstream: a chat completion with a client's traceparent,
// served by rill in front of a real rill replica on loopback. With tracing
// on in front, the replica's request carries the client's trace id with
// the front's upstream call span as its parent, that span is a child of
// the front's request span, and the replica's own request span (its
// tracing on too) joins the same trace under it. With tracing off in
// front, the client's traceparent reaches the replica unchanged.
func TestTraceparentToUpstream(t *testing.T) {
	const (
		traceID  = "0af7651916cd43dd8448eb211c80319c"
		clientID = "b7ad6b7169203331"
	)
	for _, frontTraced := range []bool{true, false} {
		name := "front traced"
		if !frontTraced {
			name = "front not traced"
		}
		t.Run(name, func(t *testing.T) {
			backRec := tracetest.NewSpanRecorder()
			back := &traceparents{h: service.New(service.Options{Engine: nativeEngine(t, "m"), Logger: discard,
				TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(backRec))})}
			backURL, _ := serve(t, back)

			frontRec := tracetest.NewSpanRecorder()
			opts := service.Options{Engine: newUpstream(t, "m", upstream.Rill, backURL), Logger: discard}
			if frontTraced {
				opts.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(frontRec))
			}
			frontURL, _ := serve(t, service.New(opts))

			req, err := http.NewRequest(http.MethodPost, frontURL+"/v1/chat/completions", strings.NewReader(
				`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("traceparent", "00-"+traceID+"-"+clientID+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}

			back.mu.Lock()
			seen := append([]string(nil), back.seen...)
			back.mu.Unlock()
			if len(seen) != 1 {
				t.Fatalf("the replica got %d generation requests (%q), want 1", len(seen), seen)
			}
			parts := strings.Split(seen[0], "-")
			if len(parts) != 4 || parts[1] != traceID {
				t.Fatalf("the replica's traceparent %q does not carry the client's trace id %s", seen[0], traceID)
			}
			if !frontTraced {
				if parts[2] != clientID {
					t.Fatalf("the replica's traceparent %q: parent %s, want the client's span %s", seen[0], parts[2], clientID)
				}
				return
			}
			// A request's span ends with its access log line, just after
			// its answer went out.
			server, client := "POST /v1/chat/completions/"+trace.SpanKindServer.String(), "POST /v1/chat/completions/"+trace.SpanKindClient.String()
			wait.For(t, "the request spans to end", func() bool {
				return byName(frontRec.Ended())[server] != nil && byName(frontRec.Ended())[client] != nil &&
					byName(backRec.Ended())[server] != nil
			})
			spans := byName(frontRec.Ended())
			call, request := spans[client], spans[server]
			if got := call.SpanContext().SpanID().String(); parts[2] != got {
				t.Errorf("the replica's traceparent parent %s, want the front's upstream call span %s", parts[2], got)
			}
			if call.Parent().SpanID() != request.SpanContext().SpanID() {
				t.Errorf("the upstream call span's parent %s, want the request span %s", call.Parent().SpanID(), request.SpanContext().SpanID())
			}
			if got := request.Parent().SpanID().String(); got != clientID {
				t.Errorf("the front's request span's parent %s, want the client's %s", got, clientID)
			}
			backSpans := byName(backRec.Ended())
			backReq := backSpans[server]
			if backReq.SpanContext().TraceID().String() != traceID || backReq.Parent().SpanID() != call.SpanContext().SpanID() {
				t.Errorf("the replica's request span (trace %s, parent %s) is not a child of the front's call span",
					backReq.SpanContext().TraceID(), backReq.Parent().SpanID())
			}
		})
	}
}

// byName indexes spans by name and kind ("name/kind").
func byName(spans []sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	m := make(map[string]sdktrace.ReadOnlySpan)
	for _, s := range spans {
		m[s.Name()+"/"+s.SpanKind().String()] = s
	}
	return m
}
