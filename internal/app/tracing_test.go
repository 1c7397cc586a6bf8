package app

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"rill/internal/wait"
)

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: it decodes
// each ExportTraceServiceRequest (protobuf) and keeps its spans.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string // service.name of each resource seen
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rcv := &otlpReceiver{}
	rcv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces with application/x-protobuf", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					rcv.services = append(rcv.services, kv.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				rcv.spans = append(rcv.spans, ss.Spans...)
			}
		}
		rcv.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rcv.Close)
	return rcv
}

// received returns the spans received so far, by name.
func (rcv *otlpReceiver) received() map[string][]*tracepb.Span {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	by := make(map[string][]*tracepb.Span)
	for _, s := range rcv.spans {
		by[s.Name] = append(by[s.Name], s)
	}
	return by
}

// intAttr returns span's integer attribute key, and whether it has it.
func intAttr(span *tracepb.Span, key string) (int64, bool) {
	for _, kv := range span.Attributes {
		if kv.Key == key {
			return kv.Value.GetIntValue(), true
		}
	}
	return 0, false
}

func stringAttr(span *tracepb.Span, key string) string {
	for _, kv := range span.Attributes {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestServeTraces runs `rill serve --otlp-endpoint` against a real OTLP
// receiver and makes one chat completion with a client's traceparent: at
// shutdown the receiver holds the request's span, a child of the
// client's, with the model and usage, and the engine's queue, prefill and
// decode spans as its children, in that order.
func TestServeTraces(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Serve(ctx, []string{"--addr", addr, "--log-level", "error", "--otlp-endpoint", rcv.URL})
	}()
	defer func() {
		cancel()
		<-errc
	}()
	wait.Options{Bound: 30 * time.Second, Interval: 20 * time.Millisecond}.For(t, "rill serve to come up", func() bool {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("none"),
		option.WithHeader("traceparent", "00-"+traceID+"-"+parentID+"-01"))
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "rill-tiny",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	// The shutdown exports what the batcher holds.
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
	errc <- nil // for the deferred receive

	spans := rcv.received()
	reqs := spans["POST /v1/chat/completions"]
	if len(reqs) != 1 {
		t.Fatalf("got %d request spans (spans: %v), want 1", len(reqs), spanNames(spans))
	}
	req := reqs[0]
	if got := hex.EncodeToString(req.TraceId); got != traceID {
		t.Errorf("request span's trace id %s, want the client's %s", got, traceID)
	}
	if got := hex.EncodeToString(req.ParentSpanId); got != parentID {
		t.Errorf("request span's parent %s, want the client's span %s", got, parentID)
	}
	if req.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("request span kind %v, want server", req.Kind)
	}
	if m := stringAttr(req, "gen_ai.request.model"); m != "rill-tiny" {
		t.Errorf("gen_ai.request.model %q, want rill-tiny", m)
	}
	if tr := stringAttr(req, "rill.transport"); tr != "http" {
		t.Errorf("rill.transport %q, want http", tr)
	}
	for key, want := range map[string]int64{
		"gen_ai.usage.input_tokens":            resp.Usage.PromptTokens,
		"gen_ai.usage.output_tokens":           resp.Usage.CompletionTokens,
		"gen_ai.usage.cache_read.input_tokens": resp.Usage.PromptTokensDetails.CachedTokens,
		"http.response.status_code":            200,
	} {
		if got, ok := intAttr(req, key); !ok || got != want {
			t.Errorf("request span %s = %d (present %v), want %d", key, got, ok, want)
		}
	}
	var last uint64
	for _, name := range []string{"queue", "prefill", "decode"} {
		phase := spans[name]
		if len(phase) != 1 {
			t.Errorf("got %d %s spans, want 1", len(phase), name)
			continue
		}
		s := phase[0]
		if string(s.TraceId) != string(req.TraceId) || string(s.ParentSpanId) != string(req.SpanId) {
			t.Errorf("%s span is not a child of the request's span", name)
		}
		if s.StartTimeUnixNano < last || s.EndTimeUnixNano < s.StartTimeUnixNano ||
			s.StartTimeUnixNano < req.StartTimeUnixNano || s.EndTimeUnixNano > req.EndTimeUnixNano {
			t.Errorf("%s span runs %d..%d: out of order (previous phase ended %d, request %d..%d)",
				name, s.StartTimeUnixNano, s.EndTimeUnixNano, last, req.StartTimeUnixNano, req.EndTimeUnixNano)
		}
		last = s.EndTimeUnixNano
	}
	if p := spans["prefill"]; len(p) == 1 {
		if n, _ := intAttr(p[0], "rill.prompt_tokens"); n != resp.Usage.PromptTokens {
			t.Errorf("prefill span's rill.prompt_tokens %d, want %d", n, resp.Usage.PromptTokens)
		}
	}
	rcv.mu.Lock()
	services := rcv.services
	rcv.mu.Unlock()
	if len(services) == 0 || services[0] != "rill" {
		t.Errorf("resource service.name %v, want rill", services)
	}
}

func spanNames(m map[string][]*tracepb.Span) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestNewTracing: the flag and the standard environment turn tracing on;
// nothing, OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER=none leave it off;
// what rill cannot export is an error that names the setting.
func TestNewTracing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		flag    string
		env     map[string]string
		on      bool
		wantErr string
	}{
		{name: "nothing set"},
		{name: "flag", flag: "http://127.0.0.1:4318", on: true},
		{name: "flag with a path", flag: "http://127.0.0.1:4318/otel/", on: true},
		{name: "endpoint variable", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint variable", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "sdk disabled", flag: "http://127.0.0.1:4318", env: map[string]string{"OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "exporter zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "grpc", flag: "http://127.0.0.1:4317", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "flag without a scheme", flag: "127.0.0.1:4318", wantErr: "--otlp-endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := newTracing(context.Background(), tt.flag, func(k string) string { return tt.env[k] }, "test")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.shutdown(context.Background(), slog.Default())
			if tr.on() != tt.on {
				t.Fatalf("on %v, want %v", tr.on(), tt.on)
			}
			if !tt.on && tr.tracerProvider() != nil {
				t.Fatal("tracing off, but a tracer provider for the service")
			}
		})
	}
}
