package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/engine"
	"rill/internal/wait"
)

// The WebSocket connection's limits and life: bad messages, limits,
// authentication, origins, keepalive, backpressure, scale, shutdown and
// goroutine ownership.

// TestWSBadMessages: every malformed message and every limit is answered
// with an error message, in order, and the connection carries on.
func TestWSBadMessages(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	ts := e.server(t, Options{PingInterval: -1, WSMaxMessageBytes: 2048, WSMaxRequests: 2})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	const null = "<null>"
	tests := []struct {
		name, msg string
		id        string // request_id of the answer
		status    int
		param     string
		code      string
	}{
		{"broken JSON", `{"type":`, null, 400, "", "invalid_json"},
		{"array", `[1]`, null, 400, "", "invalid_type"},
		{"string", `"create"`, null, 400, "", "invalid_type"},
		{"empty", ``, null, 400, "", "invalid_json"},
		{"no type", `{"request_id":"r"}`, null, 400, "type", "missing_required_parameter"},
		{"type null", `{"type":null}`, null, 400, "type", "missing_required_parameter"},
		{"type number", `{"type":5,"request_id":"r"}`, null, 400, "type", "invalid_type"},
		{"unknown type", `{"type":"frobnicate","request_id":"r"}`, null, 400, "type", "invalid_value"},
		{"create without id", `{"type":"create","body":` + chatBody("x") + `}`, null, 400, "request_id", "missing_required_parameter"},
		{"id number", `{"type":"create","request_id":7,"body":` + chatBody("x") + `}`, null, 400, "request_id", "invalid_type"},
		{"id empty", `{"type":"create","request_id":"","body":` + chatBody("x") + `}`, null, 400, "request_id", "invalid_value"},
		{"id too long", createMsg(strings.Repeat("i", 257), chatBody("x")), null, 400, "request_id", "invalid_value"},
		{"cancel without id", `{"type":"cancel"}`, null, 400, "request_id", "missing_required_parameter"},
		{"cancel unknown", `{"type":"cancel","request_id":"nope"}`, null, 404, "request_id", "unknown_request_id"},
		{"no body", `{"type":"create","request_id":"nb"}`, "nb", 400, "body", "missing_required_parameter"},
		{"body null", `{"type":"create","request_id":"bn","body":null}`, "bn", 400, "body", "missing_required_parameter"},
		{"body not object", createMsg("bs", `"hi"`), "bs", 400, "", "invalid_type"},
		{"body invalid", createMsg("bad", `{"model":"tiny"}`), "bad", 400, "messages", "missing_required_parameter"},
		{"body wrong type", createMsg("bt", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":"ten"}`), "bt", 400, "max_tokens", "invalid_type"},
		{"unknown model", createMsg("nm", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`), "nm", 404, "model", "model_not_found"},
		{"too large", createMsg("big", chatBody(strings.Repeat("x", 3000))), null, 413, "", "request_too_large"},
		{"too large blank", strings.Repeat(" ", 4096), null, 413, "", "request_too_large"},
	}
	for _, tt := range tests {
		sendWS(t, c, tt.msg)
		m := readWS(t, c)
		if m.Type != "error" || m.id() != tt.id || m.Status != tt.status || m.param() != tt.param || m.code() != tt.code {
			t.Errorf("%s: got %s\nwant request_id %s status %d param %q code %q", tt.name, m.raw, tt.id, tt.status, tt.param, tt.code)
		}
		if m.Error == nil || m.Error.Message == "" || m.Error.Type != typeInvalidRequest {
			t.Errorf("%s: error object %s", tt.name, m.raw)
		}
	}

	// In flight: duplicates and the per-connection limit.
	sendWS(t, c, createMsg("h1", chatBody("hang 1")))
	sendWS(t, c, createMsg("h2", chatBody("hang 2")))
	waitFirst(t, c, "h1", "h2")
	sendWS(t, c, createMsg("h1", chatBody("slow")))
	if m := nextNonChunk(t, c); m.id() != "<null>" || m.Status != 409 || m.code() != "duplicate_request_id" {
		t.Errorf("duplicate: %s", m.raw)
	}
	sendWS(t, c, createMsg("h3", chatBody("slow")))
	if m := nextNonChunk(t, c); m.id() != "h3" || m.Status != 429 || m.code() != "too_many_requests" {
		t.Errorf("over the limit: %s", m.raw)
	}
	sendWS(t, c, `{"type":"cancel","request_id":"h1"}`)
	if m := nextNonChunk(t, c); m.id() != "h1" || m.Status != statusClientClosed {
		t.Errorf("cancel: %s", m.raw)
	}
	// Room again: a request completes beside the one still hanging, and a
	// message of exactly the limit is read.
	body := chatBody("slow")
	pad := 2048 - len(createMsg("ok", body))
	sendWS(t, c, createMsg("ok", body)+strings.Repeat(" ", pad))
	msgs := collectWS(t, c, 1)
	if end := msgs[len(msgs)-1]; end.id() != "ok" || end.Type != "done" {
		t.Errorf("after the errors: %s", end.raw)
	}
	if isClosed(e.channel("hang 2")) {
		t.Error("h2 was cancelled by someone else's errors")
	}
}

// TestWSAuth: the API key as a Bearer header or, for browsers, as a
// subprotocol, which is echoed.
func TestWSAuth(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	keyed := e.server(t, Options{PingInterval: -1, APIKey: "sk-secret"})
	open := e.server(t, Options{PingInterval: -1})
	const keyProto = "openai-insecure-api-key.sk-secret"
	tests := []struct {
		name      string
		ts        *httptest.Server
		header    string
		protos    []string
		status    int    // 0: the upgrade succeeds
		subproto  string // echoed subprotocol
		unchanged bool
	}{
		{"no key", keyed, "", nil, 401, "", false},
		{"wrong header", keyed, "Bearer sk-wrong", nil, 401, "", false},
		{"header", keyed, "Bearer sk-secret", nil, 0, "", false},
		{"subprotocol", keyed, "", []string{keyProto}, 0, keyProto, false},
		{"subprotocol among others", keyed, "", []string{"realtime", keyProto}, 0, keyProto, false},
		{"wrong subprotocol", keyed, "", []string{"openai-insecure-api-key.sk-wrong"}, 401, "", false},
		{"other subprotocol only", keyed, "", []string{"realtime"}, 401, "", false},
		{"no key needed", open, "", nil, 0, "", false},
		{"no key needed, subprotocol echoed", open, "", []string{keyProto}, 0, keyProto, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.header != "" {
				h.Set("Authorization", tt.header)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, resp, err := websocket.Dial(ctx, wsURL(tt.ts, "/v1/chat/completions"),
				&websocket.DialOptions{HTTPHeader: h, Subprotocols: tt.protos})
			if tt.status != 0 {
				if err == nil {
					_ = c.CloseNow()
					t.Fatalf("upgrade succeeded, want %d", tt.status)
				}
				if resp == nil || resp.StatusCode != tt.status {
					t.Fatalf("dial: %v (response %v), want status %d", err, resp, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.CloseNow()
			if c.Subprotocol() != tt.subproto {
				t.Errorf("subprotocol %q, want %q", c.Subprotocol(), tt.subproto)
			}
			sendWS(t, c, createMsg("r", chatBody("slow")))
			if msgs := collectWS(t, c, 1); msgs[len(msgs)-1].Type != "done" {
				t.Errorf("request ends with %s", msgs[len(msgs)-1].raw)
			}
		})
	}

	// The subprotocol is for WebSocket handshakes only.
	req, _ := http.NewRequest("GET", keyed.URL+"/v1/models", nil)
	req.Header.Set("Sec-WebSocket-Protocol", keyProto)
	resp, err := keyed.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("subprotocol key on plain HTTP: status %d, want 401", resp.StatusCode)
	}
}

// TestWSHandshakeErrors: malformed upgrades get an error in OpenAI's
// shape, not the WebSocket library's plain text; a good one upgrades.
func TestWSHandshakeErrors(t *testing.T) {
	t.Parallel()
	ts := newCancelEngine().server(t, Options{PingInterval: -1})
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	tests := []struct {
		name    string
		version string
		keys    []string
		status  int
	}{
		{"no key", "13", nil, 400},
		{"two keys", "13", []string{key, key}, 400},
		{"key not base64", "13", []string{"not base64!"}, 400},
		{"key of 8 bytes", "13", []string{"AAAAAAAAAAA="}, 400},
		{"version 8", "8", []string{key}, 426},
		{"no version", "", []string{key}, 426},
		{"good", "13", []string{key}, 101},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest("GET", ts.URL+"/v1/chat/completions", nil)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			if tt.version != "" {
				req.Header.Set("Sec-WebSocket-Version", tt.version)
			}
			for _, k := range tt.keys {
				req.Header.Add("Sec-WebSocket-Key", k)
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status == 101 {
				return
			}
			body, _ := io.ReadAll(resp.Body)
			mustValidate(t, "ErrorResponse", body)
			if e := decodeMap(t, body)["error"].(map[string]any); e["code"] != "invalid_websocket_handshake" {
				t.Errorf("code %v: %s", e["code"], body)
			}
			if tt.status == 426 && resp.Header.Get("Sec-WebSocket-Version") != "13" {
				t.Errorf("426 without Sec-WebSocket-Version: 13")
			}
		})
	}
}

// TestWSOrigin: browsers on other origins need AllowedOrigins; clients
// without an Origin are let in.
func TestWSOrigin(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	strict := e.server(t, Options{PingInterval: -1})
	open := e.server(t, Options{PingInterval: -1, AllowedOrigins: []string{"*.example.com", "https://app.rill.dev", "[bad"}})
	tests := []struct {
		name   string
		ts     *httptest.Server
		origin string
		ok     bool
	}{
		{"no origin", strict, "", true},
		{"same origin", strict, "SELF", true},
		{"other origin", strict, "https://evil.example", false},
		{"allowed host", open, "https://app.example.com", true},
		{"allowed host, case", open, "http://API.Example.com", true},
		{"not allowed host", open, "https://example.org", false},
		{"scheme pattern", open, "https://app.rill.dev", true},
		{"scheme pattern, other scheme", open, "http://app.rill.dev", false},
		{"unparsable origin", open, "::", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			switch tt.origin {
			case "":
			case "SELF":
				h.Set("Origin", tt.ts.URL)
			default:
				h.Set("Origin", tt.origin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, resp, err := websocket.Dial(ctx, wsURL(tt.ts, "/v1/chat/completions"), &websocket.DialOptions{HTTPHeader: h})
			if tt.ok {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				_ = c.CloseNow()
				return
			}
			if err == nil {
				_ = c.CloseNow()
				t.Fatal("upgrade succeeded")
			}
			if resp == nil || resp.StatusCode != 403 {
				t.Fatalf("dial: %v, want 403", err)
			}
		})
	}

	// The 403 is an OpenAI error.
	req, _ := http.NewRequest("GET", strict.URL+"/v1/chat/completions", nil)
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "https://evil.example"} {
		req.Header.Set(k, v)
	}
	resp, err := strict.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mustValidate(t, "ErrorResponse", body)
	if resp.StatusCode != 403 || !bytes.Contains(body, []byte(`"code":"origin_not_allowed"`)) {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
}

func TestParseOriginPatterns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{"", nil, false},
		{" a.com , *.b.com,,https://c.com ", []string{"a.com", "*.b.com", "https://c.com"}, false},
		{"a.com,[bad", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseOriginPatterns(tt.in)
		if (err != nil) != tt.err || fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("ParseOriginPatterns(%q) = %q, %v", tt.in, got, err)
		}
	}
}

// TestWSKeepalive: the server pings; a peer that answers stays, one that
// does not (it reads nothing) is disconnected and its requests cancelled.
func TestWSKeepalive(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	// The interval is also the time a pong has to come back: long enough
	// that a loaded machine under -race answers in time (200 ms was not, in
	// a CI run of the race detector beside the other packages).
	ts := e.server(t, Options{PingInterval: time.Second})

	var pings atomic.Int32
	c := dialWS(t, ts, "/v1/chat/completions", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { pings.Add(1); return true }})
	sendWS(t, c, createMsg("h", chatBody("hang alive")))
	readDone := make(chan error, 1)
	go func() {
		// A reading client answers pings.
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				readDone <- err
				return
			}
		}
	}()
	if !wait.Until(func() bool { return pings.Load() >= 2 }) {
		t.Errorf("%d pings", pings.Load())
	}
	if isClosed(e.channel("hang alive")) {
		t.Error("a connection that answers pings was dropped")
	}
	_ = c.CloseNow()
	<-readDone

	silent := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, silent, createMsg("h", chatBody("hang silent")))
	select {
	case <-e.channel("hang silent"):
	case <-time.After(10 * time.Second):
		t.Fatal("a peer that answers no ping was not disconnected")
	}
}

// floodEngine streams big events until cancelled, counting them.
type floodStream struct {
	ctx  context.Context
	text string
	n    *atomic.Int64
}

func (s *floodStream) TryRecv() (engine.Event, bool, error) {
	if err := s.ctx.Err(); err != nil {
		return engine.Event{}, false, err
	}
	s.n.Add(1)
	return engine.Event{Text: s.text}, true, nil
}

func (s *floodStream) Ready() <-chan struct{} { return readyNow }

// TestWSBackpressure: a client that stops reading stops its request's
// engine stream from being pulled (its queue is bounded), while another
// connection streams on; reading again resumes it.
func TestWSBackpressure(t *testing.T) {
	t.Parallel()
	var pulled atomic.Int64
	big := strings.Repeat("x", 16<<10)
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if req.Messages[0].Content == "flood" {
			return &floodStream{ctx: ctx, text: big, n: &pulled}, nil
		}
		return &fakeStream{ctx: ctx, events: script(1, []string{"a", "b"}, engine.FinishStop, plainStats(1, 2))}, nil
	}}
	ts := newTestServer(t, fake, Options{PingInterval: -1})
	slow := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, slow, createMsg("f", chatBody("flood")))

	// Wait for the pull count to stop growing: the queue and the socket
	// buffers are full. Nothing signals that the server stopped pulling, so
	// this is about time: the count stays the same over three samples 30 ms
	// apart.
	last, same := int64(-1), 0
	if !(wait.Options{Interval: 30 * time.Millisecond}).Until(func() bool {
		if n := pulled.Load(); n != last {
			last, same = n, 0
			return false
		}
		same++
		return same == 3
	}) {
		t.Fatalf("the engine stream is pulled on and on (%d events) by a client that reads nothing", pulled.Load())
	}
	n := last
	t.Logf("%d events pulled for a client that reads nothing", n)
	// A 16 KiB event per message: what is held is the queue, the channel of
	// the stream reader and the kernel's socket buffers, not the stream.
	if limit := int64(64 << 20 / len(big)); n > limit {
		t.Errorf("%d events pulled for a client that reads nothing, want at most %d", n, limit)
	}

	other := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, other, createMsg("o", chatBody("quick")))
	if msgs := collectWS(t, other, 1); msgs[len(msgs)-1].Type != "done" {
		t.Errorf("other connection: %s", msgs[len(msgs)-1].raw)
	}

	for range 200 {
		readWS(t, slow)
	}
	if m := pulled.Load(); m <= n {
		t.Errorf("reading did not resume the stream: %d events, %d before", m, n)
	}
}

// TestWSManyConnections: 200 connections, each streaming a request at once.
func TestWSManyConnections(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, delay: time.Millisecond,
			events: script(1, []string{"a", "b", "c", "d", "e"}, engine.FinishStop, plainStats(1, 5))}, nil
	}}
	ts := newTestServer(t, fake, Options{PingInterval: -1})
	const conns = 200
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { errs <- streamOnce(ctx, ts, fmt.Sprintf("r%d", i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("%d connections streamed in %v", conns, time.Since(start))
}

// streamOnce dials, streams one request to its end, and closes.
func streamOnce(ctx context.Context, ts *httptest.Server, id string) error {
	c, _, err := websocket.Dial(ctx, wsURL(ts, "/v1/chat/completions"), nil)
	if err != nil {
		return fmt.Errorf("%s: dial: %w", id, err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(createMsg(id, chatBody("hi")))); err != nil {
		return fmt.Errorf("%s: send: %w", id, err)
	}
	var text strings.Builder
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return fmt.Errorf("%s: read: %w", id, err)
		}
		switch {
		case bytes.HasPrefix(data, []byte(`{"type":"chunk","request_id":"`+id+`"`)):
			if i := bytes.Index(data, []byte(`"content":"`)); i >= 0 {
				rest := data[i+len(`"content":"`):]
				text.Write(rest[:bytes.IndexByte(rest, '"')])
			}
		case string(data) == `{"type":"done","request_id":"`+id+`"}`:
			if text.String() != "abcde" {
				return fmt.Errorf("%s: text %q", id, text.String())
			}
			return c.Close(websocket.StatusNormalClosure, "")
		default:
			return fmt.Errorf("%s: unexpected %s", id, data)
		}
	}
}

// TestWSShutdown: when the server's base context ends, requests in flight
// are cancelled and answered with a 503, and then the connection is closed
// with "going away": whether the upgrade's handler serves the connection
// (the base context reaches it through the request's) or, with
// Options.Shutdown, the connection is served apart from it.
func TestWSShutdown(t *testing.T) {
	t.Parallel()
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			t.Parallel()
			e := newCancelEngine()
			e.models = testModels
			base, stop := context.WithCancel(context.Background())
			defer stop()
			opts := Options{Engine: &e.fakeEngine, Logger: slog.New(slog.DiscardHandler), PingInterval: -1}
			if detached {
				opts.Shutdown = base.Done()
			}
			ts := httptest.NewUnstartedServer(New(opts))
			ts.Config.BaseContext = func(net.Listener) context.Context { return base }
			ts.Start()
			defer ts.Close()
			c := dialWS(t, ts, "/v1/chat/completions", nil)
			sendWS(t, c, createMsg("h", chatBody("hang shutdown")))
			waitFirst(t, c, "h")
			stop()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var last []byte
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					if status := websocket.CloseStatus(err); status != websocket.StatusGoingAway {
						t.Errorf("read after shutdown: %v (status %v), want going away", err, status)
					}
					break
				}
				last = data
			}
			if !bytes.Contains(last, []byte(`"request_id":"h","status":503`)) || !bytes.Contains(last, []byte(`"server_shutting_down"`)) {
				t.Errorf("last message before the close: %s, want a 503 for h", last)
			}
			select {
			case <-e.channel("hang shutdown"):
			case <-time.After(5 * time.Second):
				t.Fatal("request not cancelled at shutdown")
			}
		})
	}
}

// wsGoroutines counts goroutines that run the WebSocket transport's code.
func wsGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var found []string
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		for _, fn := range []string{"service.(*wsConn)", "service.(*outbox)", "service.(*generation).run"} {
			if bytes.Contains(g, []byte(fn)) {
				n++
				found = append(found, string(g))
				break
			}
		}
	}
	return n, strings.Join(found, "\n\n")
}

// TestWSNoGoroutineLeak: every goroutine of a connection ends with it,
// whichever way it ends. Not parallel: it counts goroutines process-wide.
func TestWSNoGoroutineLeak(t *testing.T) {
	e := newCancelEngine()
	ts := e.server(t, Options{PingInterval: 10 * time.Millisecond, WSMaxRequests: 4})
	// An earlier test's connection may still be ending (a parked reader
	// woken by its server's close runs the end on a goroutine of its own).
	if !wait.Until(func() bool { n, _ := wsGoroutines(); return n == 0 }) {
		n, stacks := wsGoroutines()
		t.Fatalf("%d transport goroutines before the test:\n%s", n, stacks)
	}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, wsURL(ts, "/v1/chat/completions"), nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.CloseNow()
			for j := range 6 { // two over the limit
				msg := createMsg(fmt.Sprint(j), chatBody(fmt.Sprintf("hang %d-%d", i, j)))
				if j%3 == 0 {
					msg = createMsg(fmt.Sprint(j), chatBody("slow"))
				}
				_ = c.Write(ctx, websocket.MessageText, []byte(msg))
			}
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"cancel","request_id":"1"}`))
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":`))
			for range 5 {
				if _, _, err := c.Read(ctx); err != nil {
					break
				}
			}
			switch i % 3 {
			case 0:
				_ = c.Close(websocket.StatusNormalClosure, "")
			case 1:
				_ = c.CloseNow()
			case 2:
				// Stop reading and let the keepalive drop it: request 2,
				// which hangs and is neither cancelled nor over the limit,
				// ends when the connection does.
				select {
				case <-e.channel(fmt.Sprintf("hang %d-2", i)):
				case <-time.After(generous):
					t.Errorf("connection %d: the keepalive did not drop a peer that reads nothing", i)
				}
			}
		})
	}
	wg.Wait()
	// A stack dump stops the world: look every 10 ms, not every one.
	var n int
	var stacks string
	if !(wait.Options{Interval: 10 * time.Millisecond}).Until(func() bool {
		n, stacks = wsGoroutines()
		return n == 0
	}) {
		t.Fatalf("%d transport goroutines left after every connection ended:\n%s", n, stacks)
	}
}
