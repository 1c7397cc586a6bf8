package service

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/engine"
	"rill/internal/wait"
)

// TestAccessLog: one line per request, HTTP and WebSocket alike, with the
// attributes of issue 17 — method, path, model, status, token counts, time
// to first token, duration and the request id (the client's X-Request-Id,
// echoed) — and scrapes of /metrics at debug level only.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	var sink lockedBuffer
	cached := 3.0
	fake := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, delay: 2 * time.Millisecond, events: script(req.Choices(), []string{"a", "b"}, engine.FinishStop,
			func(int) engine.Stats {
				return engine.Stats{PromptTokens: 7, CompletionTokens: 2, CachedTokens: &cached}
			})}, nil
	}}
	ts := newTestServer(t, fake, Options{Logger: slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: slog.LevelInfo}))})

	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`))
	req.Header.Set("X-Request-Id", "client-7")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != "client-7" {
		t.Errorf("X-Request-Id echoed as %q", got)
	}
	if r, _ := ts.Client().Get(ts.URL + "/metrics"); r != nil {
		r.Body.Close()
	}
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("w1", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"n":2}`))
	if m := nextNonChunk(t, c); m.Type != "done" {
		t.Fatalf("websocket request ended with %+v", m)
	}
	c.Close(websocket.StatusNormalClosure, "")
	// The connection's line comes when its handler returns, which
	// httptest.Server.Close does not wait for (the connection is hijacked).
	// The count is checked below, with the lines.
	wait.Until(func() bool { return len(sink.lines()) >= 3 })
	ts.Close()
	lines := sink.lines()
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3 (SSE, WebSocket request, WebSocket connection; no /metrics):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	sse, wsReq := decodeMap(t, []byte(lines[0])), decodeMap(t, []byte(lines[1]))
	conn := decodeMap(t, []byte(lines[2]))
	for _, tc := range []struct {
		name string
		line map[string]any
		want map[string]any
	}{
		{"sse", sse, map[string]any{"msg": "request", "id": "client-7", "method": "POST", "path": "/v1/chat/completions",
			"transport": "http", "model": "tiny", "status": 200.0, "prompt_tokens": 7.0, "completion_tokens": 2.0, "cached_tokens": 3.0}},
		{"websocket request", wsReq, map[string]any{"msg": "request", "request_id": "w1", "method": "GET", "path": "/v1/chat/completions",
			"transport": "websocket", "model": "tiny", "status": 200.0, "prompt_tokens": 7.0, "completion_tokens": 4.0, "cached_tokens": 3.0}},
		{"websocket connection", conn, map[string]any{"msg": "request", "method": "GET", "path": "/v1/chat/completions",
			"transport": "websocket"}},
	} {
		for k, v := range tc.want {
			if tc.line[k] != v {
				t.Errorf("%s line: %s = %v, want %v", tc.name, k, tc.line[k], v)
			}
		}
	}
	for _, line := range []map[string]any{sse, wsReq} {
		ttft, _ := line["ttft"].(float64)
		duration, _ := line["duration"].(float64)
		if ttft < float64(time.Millisecond) || duration < ttft {
			t.Errorf("ttft %v, duration %v (ns): want 0 < ttft <= duration", line["ttft"], line["duration"])
		}
	}
	if wsReq["id"] != conn["id"] || wsReq["id"] == "" {
		t.Errorf("websocket request logged under id %v, its connection %v", wsReq["id"], conn["id"])
	}
}

// lines returns the complete lines written so far.
func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
