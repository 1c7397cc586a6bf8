package park

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func newPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := NewPoller()
	if err != nil {
		t.Skipf("no poller on this system: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPollerWakes: a wait ends, once, with the peer's bytes, its close or
// the Poller's; a stopped wait never ends; stop and ready never both win.
func TestPollerWakes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event func(p *Poller, client net.Conn)
		wake  bool
	}{
		{"peer writes", func(_ *Poller, c net.Conn) { c.Write([]byte("x")) }, true},
		{"peer closes", func(_ *Poller, c net.Conn) { c.Close() }, true},
		{"peer half-closes", func(_ *Poller, c net.Conn) { c.(*net.TCPConn).CloseWrite() }, true},
		{"poller closes", func(p *Poller, _ net.Conn) { p.Close() }, true},
		{"nothing", func(*Poller, net.Conn) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPoller(t)
			server, client := tcpPair(t)
			woke := make(chan struct{}, 2)
			stop, err := p.Wait(server, func() { woke <- struct{}{} })
			if err != nil {
				t.Fatal(err)
			}
			if p.Len() != 1 {
				t.Fatalf("Len %d with one wait", p.Len())
			}
			tc.event(p, client)
			select {
			case <-woke:
				if !tc.wake {
					t.Fatal("woken with nothing to read")
				}
				if stop() {
					t.Error("stop reported true after ready ran")
				}
			case <-time.After(200 * time.Millisecond):
				if tc.wake {
					t.Fatal("not woken")
				}
				if !stop() {
					t.Error("stop reported false for a wait that had not ended")
				}
				client.Write([]byte("late"))
				select {
				case <-woke:
					t.Fatal("a stopped wait was woken")
				case <-time.After(100 * time.Millisecond):
				}
			}
			select {
			case <-woke:
				t.Fatal("woken twice")
			default:
			}
		})
	}
}

// TestPollerLevel: bytes already waiting when the wait begins wake it (the
// set is level-triggered: a reader that left bytes unread may park), and
// a connection may wait again after a wake.
func TestPollerLevel(t *testing.T) {
	p := newPoller(t)
	server, client := tcpPair(t)
	client.Write([]byte("abcdef"))
	for round := range 3 {
		woke := make(chan struct{})
		if _, err := p.Wait(server, func() { close(woke) }); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		select {
		case <-woke:
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: bytes waiting, not woken", round)
		}
		var b [2]byte
		if _, err := io.ReadFull(server, b[:]); err != nil {
			t.Fatal(err)
		}
	}
	if p.Len() != 0 {
		t.Errorf("Len %d after every wait ended", p.Len())
	}
}

// TestPollerRefuses: a connection without a descriptor, a closed one, and
// any after Close.
func TestPollerRefuses(t *testing.T) {
	p := newPoller(t)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := p.Wait(a, func() {}); err == nil {
		t.Error("a pipe (no descriptor) was accepted")
	}
	server, _ := tcpPair(t)
	server.Close()
	if _, err := p.Wait(server, func() {}); err == nil {
		t.Error("a closed connection was accepted")
	}
	s2, _ := tcpPair(t)
	p.Close()
	if _, err := p.Wait(s2, func() {}); err == nil {
		t.Error("a closed poller accepted a wait")
	}
	p.Close() // again: no effect
}

// server is an http.Server on a parking Listener.
type server struct {
	ln   *Listener
	srv  *http.Server
	addr string
	errc chan error
}

func startServer(t *testing.T, after, idle time.Duration) *server {
	t.Helper()
	p := newPoller(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: NewListener(inner, p, ListenerOptions{ParkAfter: after}), addr: inner.Addr().String(),
		errc: make(chan error, 1)}
	s.srv = &http.Server{IdleTimeout: idle, ReadHeaderTimeout: 5 * time.Second, ConnState: s.ln.ConnState,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello %s", r.URL.Path)
		})}
	go func() { s.errc <- s.srv.Serve(s.ln) }()
	t.Cleanup(func() {
		s.srv.Close()
		<-s.errc
	})
	return s
}

// dial opens a client connection to the server, closed at the test's end.
func (s *server) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// get sends a GET for path on c and reads the response.
func get(c net.Conn, br *bufio.Reader, path string) (string, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestListenerParks: a keep-alive connection idle for ParkAfter leaves
// net/http and is served again, on the same TCP connection, when its next
// request comes.
func TestListenerParks(t *testing.T) {
	s := startServer(t, 30*time.Millisecond, time.Minute)
	c, br := s.dial(t)
	for i := range 3 {
		path := fmt.Sprintf("/r%d", i)
		got, err := get(c, br, path)
		if err != nil || got != "hello "+path {
			t.Fatalf("request %d: %q, %v", i, got, err)
		}
		waitFor(t, "the connection parked", func() bool { return s.ln.Parked() == 1 })
	}
	// Requests sooner than ParkAfter stay with net/http.
	s2 := startServer(t, time.Hour, time.Minute)
	c2, br2 := s2.dial(t)
	for i := range 2 {
		if _, err := get(c2, br2, "/"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := s2.ln.Parked(); n != 0 {
		t.Errorf("%d parked with ParkAfter an hour", n)
	}
}

// TestListenerKeepsPipelined: a request's first bytes sent with the
// previous request are net/http's; the connection is not parked (parking
// would lose them) and the request is served when the rest comes.
func TestListenerKeepsPipelined(t *testing.T) {
	s := startServer(t, 20*time.Millisecond, time.Minute)
	c, br := s.dial(t)
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGE"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	time.Sleep(100 * time.Millisecond)
	if n := s.ln.Parked(); n != 0 {
		t.Fatalf("%d parked with a request's start in net/http's buffer", n)
	}
	if _, err := io.WriteString(c, "T /b HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello /b" {
		t.Fatalf("second request: %q", b)
	}
}

// TestListenerIdleTimeout: a parked connection is closed when the
// server's IdleTimeout passes, as net/http would close it.
func TestListenerIdleTimeout(t *testing.T) {
	s := startServer(t, 20*time.Millisecond, 300*time.Millisecond)
	c, br := s.dial(t)
	start := time.Now()
	if _, err := get(c, br, "/"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection parked", func() bool { return s.ln.Parked() == 1 })
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on an idle connection: %v, want EOF at the idle timeout", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout (300ms)", d)
	}
	if n := s.ln.Parked(); n != 0 {
		t.Errorf("%d parked after the idle timeout", n)
	}
}

// TestListenerShutdown: Shutdown closes parked connections as it closes
// idle ones, and returns at once; a client that leaves while parked is
// forgotten.
func TestListenerShutdown(t *testing.T) {
	s := startServer(t, 20*time.Millisecond, time.Minute)
	var conns []net.Conn
	for i := range 4 {
		c, br := s.dial(t)
		if _, err := get(c, br, "/"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	waitFor(t, "four parked", func() bool { return s.ln.Parked() == 4 })
	conns[0].Close()
	waitFor(t, "the closed one forgotten", func() bool { return s.ln.Parked() == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for i, c := range conns[1:] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("connection %d after Shutdown: %v, want EOF", i+1, err)
		}
	}
	if n := s.ln.Parked(); n != 0 {
		t.Errorf("%d parked after Shutdown", n)
	}
	if err := <-s.errc; err != http.ErrServerClosed {
		t.Errorf("Serve: %v", err)
	}
	s.errc <- nil // for the cleanup
}

// TestListenerBodies: requests with bodies, and a client that sends its
// next request in pieces slower than ParkAfter, are served whole.
func TestListenerBodies(t *testing.T) {
	s := startServer(t, 20*time.Millisecond, time.Minute)
	c, br := s.dial(t)
	for i := range 3 {
		req := fmt.Sprintf("POST /p%d HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", i)
		for _, piece := range []string{req[:3], req[3:20], req[20:]} {
			if _, err := io.WriteString(c, piece); err != nil {
				t.Fatal(err)
			}
			time.Sleep(40 * time.Millisecond)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("hello /p%d", i); string(b) != want || resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %q, want %q", i, resp.StatusCode, b, want)
		}
		waitFor(t, "parked", func() bool { return s.ln.Parked() == 1 })
	}
}
