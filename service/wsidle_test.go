package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/internal/wait"
)

// TestWSIdleConnGoroutines: a connection with nothing in flight holds one
// goroutine of the transport, its reader; the writer ended with its last
// message and pings are timers. With Options.Shutdown the server forgets
// the connection once it ends. Not parallel: it counts goroutines
// process-wide.
func TestWSIdleConnGoroutines(t *testing.T) {
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			e := newCancelEngine()
			e.models = testModels
			opts := Options{Engine: &e.fakeEngine, Logger: slog.New(slog.DiscardHandler), PingInterval: time.Hour}
			if detached {
				opts.Shutdown = make(chan struct{})
			}
			s := New(opts)
			ts := httptest.NewServer(s)
			defer ts.Close()
			const n = 8
			conns := make([]*websocket.Conn, n)
			for i := range conns {
				c := dialWS(t, ts, "/v1/chat/completions", nil)
				sendWS(t, c, createMsg("r", chatBody("quick")))
				if m := collectWS(t, c, 1); m[len(m)-1].Type != "done" {
					t.Fatalf("connection %d: last message %s", i, m[len(m)-1].raw)
				}
				conns[i] = c
			}
			var got int
			var stacks string
			if !(wait.Options{Interval: 10 * time.Millisecond}).Until(func() bool {
				got, stacks = wsGoroutines()
				return got == n
			}) {
				t.Fatalf("%d transport goroutines for %d idle connections, want one each:\n%s", got, n, stacks)
			}
			for _, c := range conns {
				_ = c.Close(websocket.StatusNormalClosure, "")
			}
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			if err := s.WaitConnections(ctx); err != nil {
				t.Fatalf("connections still open after their clients closed them: %v", err)
			}
			s.shutdownHooks.mu.Lock()
			left := len(s.shutdownHooks.hooks)
			s.shutdownHooks.mu.Unlock()
			if left != 0 {
				t.Errorf("%d shutdown hooks left after every connection ended", left)
			}
		})
	}
}

// TestWSEarlyMessage: a client that sends its first message in the same
// packet as its handshake, before the 101, is served: the bytes net/http
// read past the handshake reach the connection.
func TestWSEarlyMessage(t *testing.T) {
	t.Parallel()
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			t.Parallel()
			e := newCancelEngine()
			opts := Options{}
			if detached {
				opts.Shutdown = make(chan struct{})
			}
			ts := e.server(t, opts)
			addr := ts.Listener.Addr().String()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(generous))
			var b strings.Builder
			fmt.Fprintf(&b, "GET /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
				"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", addr)
			// Two messages, the second larger than the connection's own
			// read buffer.
			b.Write(maskedTextFrame([]byte(createMsg("a", chatBody("quick")))))
			b.Write(maskedTextFrame([]byte(createMsg("b", chatBody(strings.Repeat("x", 3*wsBufSize))))))
			if _, err := c.Write([]byte(b.String())); err != nil {
				t.Fatal(err)
			}
			var seen []byte
			buf := make([]byte, 4096)
			for !strings.Contains(string(seen), `{"type":"done","request_id":"a"}`) ||
				!strings.Contains(string(seen), `{"type":"done","request_id":"b"}`) {
				n, err := c.Read(buf)
				if err != nil {
					t.Fatalf("before both requests were done: %v (read %q)", err, seen)
				}
				seen = append(seen, buf[:n]...)
			}
		})
	}
}

// writesConn records each Write it gets.
type writesConn struct {
	net.Conn
	writes []string
}

func (c *writesConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

// TestCorkWriter: what is written while corked goes out in one write at
// uncork; otherwise writes go straight through.
func TestCorkWriter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(w *corkWriter) error
		want []string
	}{
		{"corked", func(w *corkWriter) error {
			w.cork()
			_, _ = w.Write([]byte("\x81\x05"))
			_, _ = w.Write([]byte("hello"))
			return w.uncork()
		}, []string{"\x81\x05hello"}},
		{"through", func(w *corkWriter) error {
			_, err := w.Write([]byte("\x8a\x00"))
			return err
		}, []string{"\x8a\x00"}},
		{"through after uncork", func(w *corkWriter) error {
			w.cork()
			_, _ = w.Write([]byte("a"))
			if err := w.uncork(); err != nil {
				return err
			}
			_, err := w.Write([]byte("b"))
			return err
		}, []string{"a", "b"}},
		{"uncork with nothing gathered", func(w *corkWriter) error {
			w.cork()
			return w.uncork()
		}, nil},
		{"uncork without cork", func(w *corkWriter) error { return w.uncork() }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &writesConn{}
			if err := tt.run(&corkWriter{conn: c}); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%q", c.writes) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("writes %q, want %q", c.writes, tt.want)
			}
		})
	}
}
