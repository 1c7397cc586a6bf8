package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"rill/engine"
)

// Limits on what one request may ask for and on what an error echoes back,
// and panics that must fail one request, not the server.

// TestMaxChoices: prompts × n beyond Options.MaxChoices is a 400 that
// names the limit, on HTTP and WebSocket alike, and reaches no engine.
func TestMaxChoices(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a"}, engine.FinishStop, plainStats(1, 1))}
	ts := newTestServer(t, fake, Options{PingInterval: -1})
	small := newTestServer(t, fake, Options{PingInterval: -1, MaxChoices: 8})
	prompts := func(n int) string {
		return `["` + strings.TrimSuffix(strings.Repeat(`p","`, n), `","`) + `"]`
	}
	tests := []struct {
		name  string
		ts    *httptest.Server
		path  string
		body  string
		param string // "": accepted
	}{
		{"2048 prompts × n 128", ts, "/v1/completions", `{"model":"tiny","prompt":` + prompts(2048) + `,"n":128}`, "n"},
		{"257 prompts", ts, "/v1/completions", `{"model":"tiny","prompt":` + prompts(257) + `}`, "prompt"},
		{"256 prompts", ts, "/v1/completions", `{"model":"tiny","prompt":` + prompts(256) + `}`, ""},
		{"2 prompts × n 128", ts, "/v1/completions", `{"model":"tiny","prompt":` + prompts(2) + `,"n":128}`, ""},
		{"3 prompts × n 128", ts, "/v1/completions", `{"model":"tiny","prompt":` + prompts(3) + `,"n":128}`, "n"},
		{"chat n 9, limit 8", small, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"n":9}`, "n"},
		{"chat n 8, limit 8", small, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"n":8}`, ""},
	}
	t.Run("http", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				resp, body := post(t, tt.ts.Client(), tt.ts.URL+tt.path, tt.body)
				if tt.param == "" {
					if resp.StatusCode != 200 {
						t.Fatalf("status %d: %.300s", resp.StatusCode, body)
					}
					return
				}
				if resp.StatusCode != 400 {
					t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, body)
				}
				mustValidate(t, "ErrorResponse", body)
				var e struct {
					Error struct{ Message, Param, Code string }
				}
				_ = json.Unmarshal(body, &e)
				limit := "256"
				if tt.ts == small {
					limit = "8"
				}
				if e.Error.Param != tt.param || e.Error.Code != "too_many_choices" || !strings.Contains(e.Error.Message, "at most "+limit+" choices") {
					t.Errorf("error %+v", e.Error)
				}
			})
		}
	})

	// The WebSocket transport answers the same with an error message.
	c := dialWS(t, ts, "/v1/completions", nil)
	sendWS(t, c, createMsg("big", `{"model":"tiny","prompt":`+prompts(2048)+`,"n":128}`))
	if m := readWS(t, c); m.Type != "error" || m.id() != "big" || m.Status != 400 || m.code() != "too_many_choices" {
		t.Errorf("websocket: %s", m.raw)
	}
	// Only the accepted requests reached the engine: 256 + 2 + 1 of them.
	if n := len(fake.requests()); n != 259 {
		t.Errorf("the engine saw %d requests, want 259", n)
	}
}

// TestEchoCaps: errors that quote a client's value quote at most a few
// hundred bytes of it, however long it is.
func TestEchoCaps(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a"}, engine.FinishStop, plainStats(1, 1))}
	ts := newTestServer(t, fake, Options{PingInterval: -1})
	huge := strings.Repeat("é", 50000) // 100 KB, two bytes a rune: cuts must respect them
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"` + huge + `","messages":[{"role":"user","content":"x"}]}`, 404},
		{"unknown model, completions", "POST", "/v1/completions", `{"model":"` + huge + `","prompt":"x"}`, 404},
		{"unknown model GET", "GET", "/v1/models/" + huge, "", 404},
		{"unknown path", "GET", "/" + huge, "", 404},
		{"wrong method", "PUT", "/v1/chat/completions", "", 405},
		{"bad enum", "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"` + huge + `","content":"x"}]}`, 400},
		{"bad key type", "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"logit_bias":{"` + huge + `":"x"}}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tt.status, body)
			}
			mustValidate(t, "ErrorResponse", body)
			if len(body) > 2*maxEchoBytes+300 {
				t.Errorf("a %d-byte error for a %d-byte value: %.300s…", len(body), len(huge), body)
			}
			if !json.Valid(body) || bytes.Contains(body, []byte(`\ufffd`)) {
				t.Errorf("a cut split a rune: %.600s", body)
			}
		})
	}
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, `{"type":"`+huge[:5000]+`","request_id":"r"}`)
	if m := readWS(t, c); m.Type != "error" || len(m.raw) > 2*maxEchoBytes+300 {
		t.Errorf("websocket: %d bytes: %.300s", len(m.raw), m.raw)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"aé", 2, "a…"}, // é is two bytes: the cut goes before it
		{"日本語", 4, "日…"},
		{"", 0, ""},
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// panicStream sends one event, then panics, as a buggy engine would.
type panicStream struct {
	sent bool
}

func (s *panicStream) TryRecv() (engine.Event, bool, error) {
	if !s.sent {
		s.sent = true
		return engine.Event{Text: "first"}, true, nil
	}
	panic("engine bug")
}

// Ready is always ready: TryRecv has something (or panics) at once.
func (s *panicStream) Ready() <-chan struct{} { return alwaysReady }

var alwaysReady = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// TestPanics: an engine whose stream panics, or whose Generate panics,
// fails that request (a 500, an SSE error event, a WebSocket error
// message), logs the panic with its stack, and the server goes on serving.
func TestPanics(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		switch req.Messages[0].Content {
		case "panic in stream":
			return &panicStream{}, nil
		case "panic in generate":
			panic("generate bug")
		}
		return &fakeStream{ctx: ctx, events: script(1, []string{"ok"}, engine.FinishStop, plainStats(1, 1))}, nil
	}}
	ts := newTestServer(t, fake, Options{PingInterval: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	chat := func(content string, stream bool) string {
		return fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":%q}],"stream":%v}`, content, stream)
	}
	var served atomic.Int32
	check := func(name string) {
		t.Helper()
		resp, body := post(t, ts.Client(), ts.URL+"/v1/chat/completions", chat("fine", false))
		if resp.StatusCode != 200 {
			t.Fatalf("after %s: the server answers %d: %s", name, resp.StatusCode, body)
		}
		served.Add(1)
	}

	resp, body := post(t, ts.Client(), ts.URL+"/v1/chat/completions", chat("panic in stream", false))
	if resp.StatusCode != 500 {
		t.Errorf("stream panic, not streamed: %d %s", resp.StatusCode, body)
	}
	check("a stream panic")
	resp, body = post(t, ts.Client(), ts.URL+"/v1/chat/completions", chat("panic in stream", true))
	evs := parseSSE(t, body)
	if last := evs[len(evs)-1]; resp.StatusCode != 200 || !bytes.Contains(last.data, []byte(`"type":"server_error"`)) {
		t.Errorf("stream panic, streamed: last event %s", last.data)
	}
	check("a streamed stream panic")
	resp, body = post(t, ts.Client(), ts.URL+"/v1/chat/completions", chat("panic in generate", true))
	if resp.StatusCode != 500 {
		t.Errorf("generate panic: %d %s", resp.StatusCode, body)
	}
	mustValidate(t, "ErrorResponse", body)
	check("a generate panic")

	c := dialWS(t, ts, "/v1/chat/completions", nil)
	for _, content := range []string{"panic in stream", "panic in generate"} {
		sendWS(t, c, createMsg("p", chatBody(content)))
		if m := nextNonChunk(t, c); m.Type != "error" || m.id() != "p" || m.Status != 500 {
			t.Errorf("websocket, %s: %s", content, m.raw)
		}
	}
	sendWS(t, c, createMsg("ok", chatBody("fine")))
	if msgs := collectWS(t, c, 1); msgs[len(msgs)-1].Type != "done" {
		t.Errorf("websocket after the panics: %s", msgs[len(msgs)-1].raw)
	}
	check("websocket panics")

	log := logs.String()
	for _, want := range []string{"engine stream panic", "handler panic", "websocket request panic", "goroutine "} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestWSConnPanic: a panic on one of a connection's own goroutines (a bug
// in the transport) closes that connection with 1011 and cancels its
// requests; the server goes on.
func TestWSConnPanic(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	e := newCancelEngine()
	e.models = testModels
	s := New(Options{Engine: &e.fakeEngine, Logger: slog.New(slog.NewTextHandler(&logs, nil)), PingInterval: -1})
	var conns atomic.Pointer[wsConn]
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			// What a bug in one of the connection's goroutines does.
			conns.Load().spawn("test", func() { panic("transport bug") })
			return
		}
		hj := &smallHijacker{ResponseWriter: w}
		conn, err := websocket.Accept(hj, r, nil)
		if err != nil {
			return
		}
		c := newWSConn(s, conn, "/v1/chat/completions", "conn")
		conns.Store(c)
		c.serve(r.Context(), afterContext(r.Context()), hj, nil)
	}))
	t.Cleanup(ts.Close)
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("h", chatBody("hang boom")))
	waitFirst(t, c, "h")
	resp, err := ts.Client().Get(ts.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusInternalError {
				t.Errorf("connection ended with %v, want 1011", err)
			}
			break
		}
	}
	select {
	case <-e.channel("hang boom"):
	case <-ctx.Done():
		t.Fatal("the request outlived its connection")
	}
	if !strings.Contains(logs.String(), "websocket panic") || !strings.Contains(logs.String(), "transport bug") {
		t.Errorf("log: %s", logs.String())
	}
}
