package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
)

// Deadlines on the wire: a body that stops arriving (slowloris) and a
// client that stops reading its stream are bounded in time, and cost no
// engine work once they are given up. Every test uses small timeouts and
// only asserts that things end within a generous bound.

// generous is the bound within which something that a timeout of a few
// dozen milliseconds ends must have ended, on a loaded machine.
const generous = 10 * time.Second

// dialRaw opens a raw TCP connection to ts, for clients that misbehave at
// the byte level.
func dialRaw(t testing.TB, ts *httptest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestBodyReadTimeout: a POST whose chunked body stops after one chunk,
// and one whose Content-Length is never reached, are answered 408 in
// OpenAI's shape once the read timeout passes, and the connection is
// closed. The engine never sees them.
func TestBodyReadTimeout(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a"}, engine.FinishStop, plainStats(1, 1))}
	ts := newTestServer(t, fake, Options{ReadTimeout: 50 * time.Millisecond})
	tests := []struct {
		name, head, body string
	}{
		{"chunked, one chunk then nothing", "Transfer-Encoding: chunked\r\n", "5\r\n{\"mod\r\n"},
		{"content-length not reached", "Content-Length: 100\r\n", `{"model":"tiny",`},
		{"headers only", "Content-Length: 100\r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialRaw(t, ts)
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s\r\n%s",
				ts.Listener.Addr(), tt.head, tt.body)
			_ = c.SetReadDeadline(time.Now().Add(generous))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a stalled body: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408: %s", resp.StatusCode, body)
			}
			mustValidate(t, "ErrorResponse", body)
			if !strings.Contains(string(body), `"code":"request_timeout"`) {
				t.Errorf("body %s", body)
			}
			// The server hangs up: the descriptor is not held.
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("the connection stays open after the 408")
			}
		})
	}
	if n := len(fake.requests()); n != 0 {
		t.Errorf("the engine saw %d requests", n)
	}

	// A body that arrives in time on the same server is served, and the
	// connection stays reusable: the deadline is the body's, not the
	// stream's.
	c := dialRaw(t, ts)
	br := bufio.NewReader(c)
	for i := range 2 {
		body := `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		// Past the body deadline, mid-response: a real sleep, since the
		// deadline is the real socket's and nothing announces that it
		// passed (and synctest cannot fake a socket's time).
		time.Sleep(100 * time.Millisecond)
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(string(data), "data: [DONE]\n\n") {
			t.Fatalf("request %d: status %d, %v: %s", i, resp.StatusCode, err, data)
		}
	}
}

// TestRefusedStalledBody: a request that is refused before its body is
// read (a Host the DNS-rebinding guard refuses, a missing API key, an
// unknown path, a wrong method), and whose body then stalls, is answered
// and its connection closed within the read timeout. net/http reads what
// is left of an unread body before it sends the answer, so without a
// deadline such a request held its connection, unanswered, for ever.
func TestRefusedStalledBody(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a"}, engine.FinishStop, plainStats(1, 1))}
	ts := newTestServer(t, fake, Options{ReadTimeout: 50 * time.Millisecond, HostCheck: true, APIKey: "k"})
	tests := []struct {
		name, line, host, auth string
		status                 int
		code                   string
	}{
		{"host refused", "POST /v1/chat/completions", "rebind.example", "Authorization: Bearer k\r\n", http.StatusForbidden, "host_not_allowed"},
		{"no API key", "POST /v1/chat/completions", "localhost", "", http.StatusUnauthorized, "invalid_api_key"},
		{"unknown path", "POST /nowhere", "localhost", "", http.StatusNotFound, "unknown_url"},
		{"wrong method", "PUT /v1/chat/completions", "localhost", "Authorization: Bearer k\r\n", http.StatusMethodNotAllowed, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialRaw(t, ts)
			fmt.Fprintf(c, "%s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":",
				tt.line, tt.host, tt.auth)
			_ = c.SetReadDeadline(time.Now().Add(generous))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a refused request with a stalled body: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(body), `"code":"`+tt.code+`"`) {
				t.Fatalf("status %d, want %d with code %s: %s", resp.StatusCode, tt.status, tt.code, body)
			}
			mustValidate(t, "ErrorResponse", body)
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("the connection stays open after the refusal")
			}
		})
	}
	if n := len(fake.requests()); n != 0 {
		t.Errorf("the engine saw %d requests", n)
	}
}

// floodEngine answers "flood" requests with an endless stream of big
// events and others with a short script; it records when the flood's
// context ends.
type floodEngine struct {
	fakeEngine
	pulled    atomic.Int64
	cancelled chan struct{}
}

func newFloodEngine() *floodEngine {
	e := &floodEngine{cancelled: make(chan struct{})}
	big := strings.Repeat("x", 16<<10)
	e.models = testModels
	e.respond = func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		content := req.Prompt
		if len(req.Messages) > 0 {
			content = req.Messages[0].Content
		}
		if content == "flood" {
			context.AfterFunc(ctx, func() { close(e.cancelled) })
			return &floodStream{ctx: ctx, text: big, n: &e.pulled}, nil
		}
		return &fakeStream{ctx: ctx, events: script(req.Choices(), []string{"a", "b"}, engine.FinishStop, plainStats(1, 2))}, nil
	}
	return e
}

// TestSSEStalledReader: a client that stops reading an endless stream is
// given up after the write idle timeout: its engine context ends and the
// server closes the connection, while another stream is served meanwhile.
func TestSSEStalledReader(t *testing.T) {
	t.Parallel()
	e := newFloodEngine()
	ts := newTestServer(t, &e.fakeEngine, Options{WriteIdleTimeout: 100 * time.Millisecond, PingInterval: -1})
	c := dialRaw(t, ts)
	body := `{"model":"tiny","messages":[{"role":"user","content":"flood"}],"stream":true}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Read nothing.

	// Another stream is not held up.
	resp, data := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"quick"}],"stream":true}`)
	if resp.StatusCode != 200 || !strings.HasSuffix(string(data), "data: [DONE]\n\n") {
		t.Errorf("the other stream: %d %s", resp.StatusCode, data)
	}

	select {
	case <-e.cancelled:
	case <-time.After(generous):
		t.Fatalf("the engine still generates for a client that reads nothing (%d events pulled)", e.pulled.Load())
	}
	// The server hung up: reading what it had sent ends.
	_ = c.SetReadDeadline(time.Now().Add(generous))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("the connection was not closed: %v", err)
	}
	t.Logf("%d events pulled for a client that read nothing", e.pulled.Load())
}

// TestWSStalledReader: a WebSocket client that stops reading, without
// pings to notice it, is given up after the write idle timeout: the engine
// work of its requests is cancelled and the connection closed.
func TestWSStalledReader(t *testing.T) {
	t.Parallel()
	e := newFloodEngine()
	ts := newTestServer(t, &e.fakeEngine, Options{WriteIdleTimeout: 100 * time.Millisecond, PingInterval: -1})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("f", chatBody("flood")))
	// Read nothing.

	other := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, other, createMsg("o", chatBody("quick")))
	if msgs := collectWS(t, other, 1); msgs[len(msgs)-1].Type != "done" {
		t.Errorf("other connection: %s", msgs[len(msgs)-1].raw)
	}

	select {
	case <-e.cancelled:
	case <-time.After(generous):
		t.Fatalf("the engine still generates for a client that reads nothing (%d events pulled)", e.pulled.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the connection was not closed")
			}
			break
		}
	}
}

// TestWSStalledReaderIdleIsKept: a WebSocket client that reads nothing
// while nothing is sent costs no write and is not dropped by the write
// idle timeout.
func TestWSStalledReaderIdleIsKept(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	ts := e.server(t, Options{WriteIdleTimeout: 20 * time.Millisecond, PingInterval: -1})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("h", chatBody("hang idle")))
	waitFirst(t, c, "h")
	// Ten write idle timeouts pass with nothing to send. A real sleep: the
	// check is that nothing happens (no signal marks a cut that did not
	// come), and the timeout is on a real socket, out of synctest's reach.
	time.Sleep(200 * time.Millisecond)
	if isClosed(e.channel("hang idle")) {
		t.Fatal("an idle request was cut by the write idle timeout")
	}
	sendWS(t, c, `{"type":"cancel","request_id":"h"}`)
	if m := nextNonChunk(t, c); m.id() != "h" || m.Status != statusClientClosed {
		t.Errorf("cancel: %s", m.raw)
	}
}
