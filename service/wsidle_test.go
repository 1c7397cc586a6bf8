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
// goroutine of the transport, its reader, or none when its reader is
// parked in the server's Poller; the writer ended with its last message
// and pings are timers. With Options.Shutdown the server forgets
// the connection once it ends. Not parallel: it counts goroutines
// process-wide.
func TestWSIdleConnGoroutines(t *testing.T) {
	for _, mode := range wsModes {
		t.Run(mode.name, func(t *testing.T) {
			e := newCancelEngine()
			e.models = testModels
			opts := Options{Engine: &e.fakeEngine, Logger: slog.New(slog.DiscardHandler), PingInterval: time.Hour}
			s, ts := mode.serve(t, opts)
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
			want := n
			if mode.parked {
				want = 0
			}
			if !(wait.Options{Interval: 10 * time.Millisecond}).Until(func() bool {
				got, stacks = wsGoroutines()
				return got == want && (!mode.parked || s.poller.Len() == n)
			}) {
				t.Fatalf("%d transport goroutines for %d idle connections, want %d; %d parked:\n%s",
					got, n, want, s.poller.Len(), stacks)
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
	for _, mode := range wsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := newCancelEngine()
			e.models = testModels
			_, ts := mode.serve(t, Options{Engine: &e.fakeEngine, Logger: slog.New(slog.DiscardHandler)})
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

// wsModes are the ways a WebSocket connection is served: by its
// handshake's handler; apart from it (Options.Shutdown); apart, its reader
// parking in a Poller between messages, as rill serve serves it.
var wsModes = []struct {
	name   string
	parked bool
	serve  func(t *testing.T, opts Options) (*Server, *httptest.Server)
}{
	{"attached", false, func(t *testing.T, opts Options) (*Server, *httptest.Server) {
		s := New(opts)
		ts := httptest.NewServer(s)
		t.Cleanup(ts.Close)
		return s, ts
	}},
	{"detached", false, func(t *testing.T, opts Options) (*Server, *httptest.Server) {
		opts.Shutdown = make(chan struct{})
		s := New(opts)
		ts := httptest.NewServer(s)
		t.Cleanup(ts.Close)
		return s, ts
	}},
	{"parked", true, func(t *testing.T, opts Options) (*Server, *httptest.Server) {
		opts.Shutdown, opts.Poller = make(chan struct{}), testPoller(t)
		s := New(opts)
		ts := httptest.NewServer(s)
		t.Cleanup(ts.Close)
		return s, ts
	}},
}

// TestWSParkedPings: a connection whose reader is parked is pinged as any
// other. A client that answers keeps it (its pongs taken by a woken reader
// that parks again), and it serves requests between pings; one that never
// answers is closed when the next ping is due.
func TestWSParkedPings(t *testing.T) {
	t.Parallel()
	const interval = 60 * time.Millisecond
	e := newCancelEngine()
	e.models = testModels
	p := testPoller(t)
	s := New(Options{Engine: &e.fakeEngine, Logger: slog.New(slog.DiscardHandler), PingInterval: interval,
		Shutdown: make(chan struct{}), Poller: p})
	ts := httptest.NewServer(s)
	defer ts.Close()

	t.Run("answered", func(t *testing.T) {
		c := dialWS(t, ts, "/v1/chat/completions", nil)
		// The client answers pings while it reads (coder/websocket's
		// reader does).
		msgs, errc := make(chan []byte, 64), make(chan error, 1)
		go func() {
			for {
				_, b, err := c.Read(context.Background())
				if err != nil {
					errc <- err
					return
				}
				msgs <- b
			}
		}()
		time.Sleep(15 * interval)
		select {
		case err := <-errc:
			t.Fatalf("connection ended while its client answered pings: %v", err)
		default:
		}
		if !wait.Until(func() bool { return p.Len() == 1 }) {
			t.Error("the reader did not park again between pings")
		}
		sendWS(t, c, createMsg("r", chatBody("quick")))
		for done := false; !done; {
			select {
			case b := <-msgs:
				done = strings.Contains(string(b), `"type":"done"`)
			case err := <-errc:
				t.Fatalf("before the request's end: %v", err)
			case <-time.After(generous):
				t.Fatal("no done message")
			}
		}
	})
	t.Run("unanswered", func(t *testing.T) {
		c, err := openIdleWSConn(ts.Listener.Addr().String()) // a raw socket: no pongs
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(generous))
		buf := make([]byte, 64)
		for {
			if _, err := c.Read(buf); err != nil {
				break // closed by the server
			}
		}
		if d := time.Since(start); d < 2*interval || d > 20*interval {
			t.Errorf("closed after %v; want about two ping intervals (%v)", d, 2*interval)
		}
		// The parked reader heard of the close and ended the connection.
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		if err := s.WaitConnections(ctx); err != nil {
			t.Errorf("the connection closed by its pinger did not end: %v", err)
		}
	})
}

// TestWSParkedPeerLeaves: a peer that leaves a parked connection without a
// close frame (its socket closed, or reset) ends it, as it ends one whose
// reader waits in Read.
func TestWSParkedPeerLeaves(t *testing.T) {
	t.Parallel()
	for _, mode := range wsModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := newCancelEngine()
			e.models = testModels
			s, ts := mode.serve(t, Options{Engine: &e.fakeEngine, Logger: slog.New(slog.DiscardHandler)})
			for i := range 3 {
				c, err := openIdleWSConn(ts.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				if mode.parked && !wait.Until(func() bool { return s.poller.Len() == 1 }) {
					t.Fatalf("connection %d: its reader did not park", i)
				}
				if i == 2 {
					c.(*net.TCPConn).SetLinger(0) // a reset
				}
				c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), generous)
				if err := s.WaitConnections(ctx); err != nil {
					t.Fatalf("connection %d still served after its peer left: %v", i, err)
				}
				cancel()
			}
		})
	}
}
