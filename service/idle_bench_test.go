package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rill/engine"
	"rill/internal/wait"
)

// What an idle stream costs the server: N streams whose engine never
// produces a token, held open by raw clients (a socket and a few bytes of
// buffer each, so that the figure is mostly the server's), and N WebSocket
// connections with nothing in flight. The goal is 10 KB a connection
// (100,000 idle connections in 1 GB); scripts/idlestreams measures the
// process's RSS for streams, scripts/idleconns for connections.

// idleStreams is how many streams one benchmark iteration holds open.
const idleStreams = 500

// neverEngine starts requests that produce nothing until cancelled.
func neverEngine() *fakeEngine {
	return &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, hang: true}, nil
	}}
}

// openIdleSSE opens a streamed chat request on a raw connection and reads
// until its opening chunk (the role) has arrived: the stream is running.
func openIdleSSE(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(body), body); err != nil {
		c.Close()
		return nil, err
	}
	if err := readUntil(c, `"role":"assistant"`); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openIdleSSEQuiet sends a streamed chat request on a raw connection and
// reads nothing: a stream that may detach holds even its header until its
// engine's first event, or a second (the caller waits for the engine
// request instead).
func openIdleSSEQuiet(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(body), body); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openIdleKeepAlive opens an HTTP/1.1 connection, makes one request on it
// (GET /v1/models) and reads its answer whole: a keep-alive connection
// between requests, as an SSE client holds it.
func openIdleKeepAlive(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		c.Close()
		return nil, err
	}
	if err := readUntil(c, `"tiny"`); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openIdleWS opens a WebSocket connection on a raw socket, sends one
// chat create and reads until its opening chunk has arrived.
func openIdleWS(addr string) (net.Conn, error) {
	return openIdleWSOn(addr, "/v1/chat/completions", createMsg("r", chatBody("x")), `"role":"assistant"`)
}

// openIdleWSOn opens a WebSocket connection to path on a raw socket, sends
// msg and reads until marker has arrived (nothing, when marker is empty:
// the caller waits for the engine request instead).
func openIdleWSOn(addr, path, msg, marker string) (net.Conn, error) {
	c, err := openIdleWSConnOn(addr, path)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(maskedTextFrame([]byte(msg))); err != nil {
		c.Close()
		return nil, err
	}
	if marker == "" {
		return c, nil
	}
	if err := readUntil(c, marker); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openIdleMessagesWS opens a WebSocket connection to /v1/messages with one
// create in flight. Its first event waits for the engine's first: the
// caller waits for the engine request.
func openIdleMessagesWS(addr string) (net.Conn, error) {
	return openIdleWSOn(addr, "/v1/messages", createMsg("r",
		`{"model":"tiny","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`), "")
}

// openIdleResponsesWS opens a WebSocket connection to /v1/responses with
// one response.create in flight, and reads until response.created.
func openIdleResponsesWS(addr string) (net.Conn, error) {
	return openIdleWSOn(addr, "/v1/responses", `{"type":"response.create","model":"tiny","input":"x","store":false}`,
		`"response.created"`)
}

// openIdleResumableWS opens a WebSocket connection with one resumable chat
// stream in flight (its generation runs apart from its follower).
func openIdleResumableWS(addr string) (net.Conn, error) {
	return openIdleWSOn(addr, "/v1/chat/completions", createMsg("r",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream_options":{"resumable":true}}`), `"role":"assistant"`)
}

// openIdleWS10 opens a WebSocket connection on a raw socket, sends ten
// creates and reads until each one's opening chunk has arrived.
func openIdleWS10(addr string) (net.Conn, error) {
	c, err := openIdleWSConn(addr)
	if err != nil {
		return nil, err
	}
	for i := range 10 {
		id := strconv.Itoa(i)
		if _, err := c.Write(maskedTextFrame([]byte(createMsg(id, chatBody("x"))))); err != nil {
			c.Close()
			return nil, err
		}
		if err := readUntil(c, `"request_id":"`+id+`","chunk":{`); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// openIdleWSConn opens a WebSocket connection on a raw socket and sends
// nothing: a connection with nothing in flight.
func openIdleWSConn(addr string) (net.Conn, error) {
	return openIdleWSConnOn(addr, "/v1/chat/completions")
}

// openIdleWSConnOn opens a WebSocket connection to path on a raw socket.
func openIdleWSConnOn(addr, path string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, addr); err != nil {
		c.Close()
		return nil, err
	}
	if err := readUntil(c, "\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// maskedTextFrame frames payload as a client's text message (RFC 6455:
// clients mask; a zero mask key leaves the payload as it is).
func maskedTextFrame(payload []byte) []byte {
	f := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(f, 0, 0, 0, 0) // the mask key
	return append(f, payload...)
}

// readUntil reads c until marker has been seen.
func readUntil(c net.Conn, marker string) error {
	var seen []byte
	buf := make([]byte, 512)
	for !bytes.Contains(seen, []byte(marker)) {
		n, err := c.Read(buf)
		if err != nil {
			return fmt.Errorf("before %q: %w (read %q)", marker, err, seen)
		}
		seen = append(seen, buf[:n]...)
	}
	return nil
}

// liveBytes is the heap and stacks in use after collections (three: the
// pools' buffers go in the second, and what they held in the third).
func liveBytes() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse
}

// idleKinds are the idle streams BenchmarkIdleStreams measures: how each
// is opened, and how many streams a connection carries.
var idleKinds = []struct {
	name    string
	open    func(addr string) (net.Conn, error)
	streams int // per connection opened; 0: none (a connection alone)
}{
	{"sse", openIdleSSEQuiet, 1},
	{"websocket", openIdleWS, 1},
	{"websocket-10", openIdleWS10, 10},
	{"websocket-conn", openIdleWSConn, 0},
	{"http-keepalive", openIdleKeepAlive, 0},
	{"messages-websocket", openIdleMessagesWS, 1},
	{"responses-websocket", openIdleResponsesWS, 1},
	{"resumable-websocket", openIdleResumableWS, 1},
}

// countingEngine is neverEngine, counting the engine requests it started.
func countingEngine() (*fakeEngine, *atomic.Int64) {
	e := neverEngine()
	var started atomic.Int64
	respond := e.respond
	e.respond = func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		started.Add(1)
		return respond(ctx, req)
	}
	return e, &started
}

// BenchmarkIdleStreams reports the heap and stack bytes (B/stream, and
// both apart) and the goroutines per idle stream of each of idleKinds, the
// raw clients included: per stream of WebSocket connections that carry ten
// each (websocket-10: a stream's own cost, the connection's shared), and
// per WebSocket connection with nothing in flight (websocket-conn), and
// per HTTP/1.1 keep-alive connection between requests (http-keepalive:
// net/http's own loop, what an SSE client's connection costs idle).
// WebSocket connections are served as serve serves them, apart from their
// handshake's handler (Options.Shutdown). Run it with -benchtime=1x.
func BenchmarkIdleStreams(b *testing.B) {
	for _, tr := range idleKinds {
		b.Run(tr.name, func(b *testing.B) {
			e, started := countingEngine()
			ts := newServedTestServer(b, e, Options{})
			addr := ts.Listener.Addr().String()
			// Warm up: the first stream pays for pools and code paths.
			if c, err := tr.open(addr); err != nil {
				b.Fatal(err)
			} else {
				c.Close()
			}
			var heap, stack, goroutines float64
			for b.Loop() {
				heap0, stack0 := liveBytes()
				g0 := runtime.NumGoroutine()
				conns := make([]net.Conn, 0, idleStreams)
				perConn := max(tr.streams, 1)
				want := started.Load() + int64(idleStreams/perConn*tr.streams)
				for range idleStreams / perConn {
					c, err := tr.open(addr)
					if err != nil {
						b.Fatal(err)
					}
					conns = append(conns, c)
				}
				if !wait.Until(func() bool { return started.Load() >= want }) {
					b.Fatalf("%d of %d engine requests started", started.Load()-want+int64(idleStreams/perConn*tr.streams), idleStreams)
				}
				// WebSocket streams hand their wait over after
				// wsWaitInline, SSE streams detach after sseWaitInline.
				time.Sleep(max(2*wsWaitInline, sseWaitInline+wsWaitInline))
				heap1, stack1 := liveBytes()
				heap = (float64(heap1) - float64(heap0)) / idleStreams
				stack = (float64(stack1) - float64(stack0)) / idleStreams
				goroutines = float64(runtime.NumGoroutine()-g0) / idleStreams
				for _, c := range conns {
					c.Close()
				}
			}
			b.ReportMetric(heap+stack, "B/stream")
			b.ReportMetric(heap, "heapB/stream")
			b.ReportMetric(stack, "stackB/stream")
			b.ReportMetric(goroutines, "goroutines/stream")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// TestIdleStreamsEnd: the idle streams of the benchmark are running
// engine requests, and each one's engine context ends when its client
// hangs up, SSE and WebSocket alike.
func TestIdleStreamsEnd(t *testing.T) {
	t.Parallel()
	e := neverEngine()
	var ended atomic.Int32
	respond := e.respond
	e.respond = func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		context.AfterFunc(ctx, func() { ended.Add(1) })
		return respond(ctx, req)
	}
	ts := newTestServer(t, e, Options{})
	addr := ts.Listener.Addr().String()
	const n = 20
	var conns []net.Conn
	for i := range n {
		open := openIdleSSE
		if i%2 == 1 {
			open = openIdleWS
		}
		c, err := open(addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if got := ended.Load(); got != 0 {
		t.Fatalf("%d idle streams ended while their clients were there", got)
	}
	for _, c := range conns {
		c.Close()
	}
	if !wait.Until(func() bool { return ended.Load() >= n }) {
		t.Fatalf("%d of %d engine requests still run after their clients left", n-int(ended.Load()), n)
	}
}

// TestIdleWebSocketStreamStacks: a WebSocket stream waiting for its engine
// holds no grown stack: neither the goroutine that validated and started
// it (it parks the wait in the server's waitPool and ends) nor the
// connection's reader (which decodes messages apart, and parks in the
// Poller where there is one, else keeps 4 KB). The pool's goroutines keep
// a few dozen bytes a wait, and stacks freed but cached by the runtime
// blur the figure by a few KB: less than 12 KB, where one grown stack
// (8 KB or more) would make it 12 KB or more.
func TestIdleWebSocketStreamStacks(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation makes frames, and so stacks, larger")
	}
	const n, limit = 200, 12 << 10
	ts := newServedTestServer(t, neverEngine(), Options{})
	addr := ts.Listener.Addr().String()
	if c, err := openIdleWS(addr); err != nil { // warm up
		t.Fatal(err)
	} else {
		c.Close()
	}
	_, stack0 := liveBytes()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := openIdleWS(addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// Streams wait on the goroutine that streamed them for wsWaitInline
	// before they hand the wait over.
	time.Sleep(2 * wsWaitInline)
	_, stack1 := liveBytes()
	per := (float64(stack1) - float64(stack0)) / n
	t.Logf("%.0f bytes of stacks per idle WebSocket stream", per)
	if per >= limit {
		t.Errorf("an idle WebSocket stream holds %.0f bytes of stacks, want less than %d", per, limit)
	}
}

// BenchmarkWebSocketTokenWait is the round trip of one token that its
// stream waited for: the engine pushes a token, the server streams it and
// the client reads it, then the stream waits again. ns/op is per token; it
// includes the goroutine that each wait for the engine starts.
func BenchmarkWebSocketTokenWait(b *testing.B) {
	q := engine.NewQueue(0, nil)
	e := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		context.AfterFunc(ctx, func() { q.End(ctx.Err()) })
		return q, nil
	}}
	ts := newServedTestServer(b, e, Options{})
	c, err := openIdleWS(ts.Listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	for b.Loop() {
		q.Push(engine.Event{Text: "x"})
		// One chunk, one frame: a read may return it in parts.
		var seen []byte
		for !bytes.Contains(seen, []byte(`"content":"x"`)) {
			n, err := c.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			seen = append(seen, buf[:n]...)
		}
	}
}

// TestParkedWebSocketStreams: WebSocket streams that wait for their
// engines past wsWaitInline hold no goroutine of their own (the server's
// waitPool waits for them: a few goroutines for all), and each streams on
// when its engine has a token, and ends when its engine does: chat's, the
// Messages API's, the Responses API's and a resumable chat stream's (both
// its generation and its follower park).
func TestParkedWebSocketStreams(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	tests := []struct {
		name       string
		open       func(addr string) (net.Conn, error)
		token, end string // what the client reads for the token, and at the end
		// The goroutines a connection holds: its reader, and a resumable
		// stream's log its flusher.
		perConn int
	}{
		{"chat", openIdleWS, `"content":"tok"`, `"type":"done"`, 1},
		{"messages", openIdleMessagesWS, `"text":"tok"`, `"type":"message_stop"`, 1},
		{"responses", openIdleResponsesWS, `"delta":"tok"`, `"type":"response.completed"`, 1},
		{"resumable", openIdleResumableWS, `"content":"tok"`, `"type":"done"`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testParked(t, tt.open, tt.token, tt.end, tt.perConn) })
	}
}

func testParked(t *testing.T, open func(addr string) (net.Conn, error), token, end string, perConn int) {
	const n = 50
	var mu sync.Mutex
	var queues []*engine.Queue
	e := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		q := engine.NewQueue(0, nil)
		context.AfterFunc(ctx, func() { q.End(ctx.Err()) })
		mu.Lock()
		queues = append(queues, q)
		mu.Unlock()
		return q, nil
	}}
	ts := newServedTestServer(t, e, Options{})
	addr := ts.Listener.Addr().String()
	// Warm up: the first connection starts the server's shutdown watch.
	if c, err := openIdleWSConn(addr); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	g0 := runtime.NumGoroutine()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := open(addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	started := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(queues)
	}
	if !wait.Until(func() bool { return started() == n }) {
		t.Fatalf("%d engine requests, want %d", started(), n)
	}
	// Each connection holds its own; its stream, once parked, nothing.
	if limit := perConn*n + n/10; !wait.Until(func() bool { return runtime.NumGoroutine()-g0 <= limit }) {
		t.Fatalf("%d goroutines for %d parked streams, want at most %d", runtime.NumGoroutine()-g0, n, limit)
	}
	mu.Lock()
	qs := append([]*engine.Queue(nil), queues...)
	mu.Unlock()
	// Which queue is whose connection is not known: push to all, then
	// every client reads its token; then end them all.
	for _, q := range qs {
		q.Push(engine.Event{Text: "tok"})
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := readUntil(c, token); err != nil {
			t.Fatalf("stream %d after its park: %v", i, err)
		}
	}
	for _, q := range qs {
		q.Push(engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{}})
		q.End(nil)
	}
	for i, c := range conns {
		if err := readUntil(c, end); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	// The connections' goroutines end with them: none is left behind
	// (nor counted by the next case).
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if !wait.Until(func() bool { return runtime.NumGoroutine() <= g0 }) {
		t.Errorf("%d goroutines after the connections closed, %d before they opened", runtime.NumGoroutine(), g0)
	}
}

// TestParkedResponseLane: a response that parked its wait for the engine
// takes its lane with it: the response queued behind it on the lane runs
// once it completed, and completes in its turn.
func TestParkedResponseLane(t *testing.T) {
	t.Parallel()
	queues := make(chan *engine.Queue, 2)
	e := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		q := engine.NewQueue(0, nil)
		context.AfterFunc(ctx, func() { q.End(ctx.Err()) })
		queues <- q
		return q, nil
	}}
	ts := newServedTestServer(t, e, Options{})
	create := `{"type":"response.create","model":"tiny","input":"x","store":false}`
	c, err := openIdleWSOn(ts.Listener.Addr().String(), "/v1/responses", create, `"response.created"`)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(maskedTextFrame([]byte(create))); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		q := <-queues
		if i == 0 {
			time.Sleep(2 * wsWaitInline) // parked
		}
		q.Push(engine.Event{Text: "tok"})
		q.Push(engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &engine.Stats{}})
		q.End(nil)
		if err := readUntil(c, `"type":"response.completed"`); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
	}
}
