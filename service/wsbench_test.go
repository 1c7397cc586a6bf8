package service

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/engine"
	"rill/internal/wait"
)

// discardConn is a net.Conn that swallows writes and whose reads block until
// it is closed: a peer at infinite speed that never talks.
type discardConn struct {
	once   sync.Once
	closed chan struct{}
}

func newDiscardConn() *discardConn { return &discardConn{closed: make(chan struct{})} }

func (c *discardConn) Read([]byte) (int, error)         { <-c.closed; return 0, net.ErrClosed }
func (c *discardConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *discardConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *discardConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *discardConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *discardConn) SetDeadline(time.Time) error      { return nil }
func (c *discardConn) SetReadDeadline(time.Time) error  { return nil }
func (c *discardConn) SetWriteDeadline(time.Time) error { return nil }

// hijackWriter is a ResponseWriter whose connection is a discardConn.
type hijackWriter struct {
	discardWriter
	conn *discardConn
}

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// acceptDiscard returns the server side of a WebSocket over a discardConn.
// It has the buffers handleWebSocket gives it, and its cork.
func acceptDiscard(tb testing.TB) (*websocket.Conn, *corkWriter) {
	tb.Helper()
	r, _ := http.NewRequest("GET", "/v1/chat/completions", nil)
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket",
		"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="} {
		r.Header.Set(k, v)
	}
	w := &hijackWriter{discardWriter: discardWriter{h: http.Header{}}, conn: newDiscardConn()}
	hj := &smallHijacker{ResponseWriter: w}
	c, err := websocket.Accept(hj, r, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c, hj.cork
}

// benchChunk is a typical chat content chunk, as the chunker makes it.
func benchChunk(tb testing.TB) []byte {
	g := &generation{job: &job{kind: kindChat, model: "tiny", stream: true, includeUsage: true, n: 1},
		id: "chatcmpl-0123456789abcdef", created: 1796030631}
	w := &recordingWriter{}
	if err := newChunker(g, w).event(0, &engine.Event{Text: " little"}); err != nil {
		tb.Fatal(err)
	}
	return w.chunks[0]
}

// BenchmarkChunkWriter is the per-chunk cost of each transport's writer on
// the same chunk, with a peer that reads at infinite speed: SSE framing and
// flush into a ResponseWriter, against the WebSocket envelope, the
// connection's queue, the writer goroutine and the frame written to the
// connection. ns/op and allocs/op are per chunk.
func BenchmarkChunkWriter(b *testing.B) {
	data := benchChunk(b)
	b.Run("sse", func(b *testing.B) {
		b.ReportAllocs()
		sw := newSSEWriter(&discardWriter{h: http.Header{}})
		for b.Loop() {
			if err := sw.chunk(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("websocket", func(b *testing.B) {
		b.ReportAllocs()
		conn, cork := acceptDiscard(b)
		ctx, cancel := context.WithCancel(context.Background())
		out := newOutbox(ctx.Done(), DefaultWriteIdleTimeout)
		failed := make(chan error, 1)
		out.writeTo(conn, cork, func(fn func()) { go fn() }, func(err error) { failed <- err })
		w := newWSWriter(out, nil, "r1", func() {})
		for b.Loop() {
			if err := w.chunk(data); err != nil {
				b.Fatal(err)
			}
		}
		// Count the messages still queued too.
		wait.For(b, "the queued messages to be written", func() bool {
			out.mu.Lock()
			defer out.mu.Unlock()
			return len(out.data.frames) == 0 && !out.active
		})
		select {
		case err := <-failed:
			b.Fatal(err)
		default:
		}
		cancel()
		_ = conn.CloseNow()
	})
}

// TestChunkWriterFraming: over the same chunk, SSE writes `data: <chunk>`
// and the WebSocket writer `{"type":"chunk",…,"chunk":<chunk>}`, both with
// the chunk's bytes unchanged.
func TestChunkWriterFraming(t *testing.T) {
	t.Parallel()
	data := benchChunk(t)
	sink := &discardWriter{h: http.Header{}}
	rec := &bodyWriter{discardWriter: sink}
	if err := newSSEWriter(rec).chunk(data); err != nil {
		t.Fatal(err)
	}
	if got, want := string(rec.body), "data: "+string(data)+"\n\n"; got != want {
		t.Errorf("sse %q, want %q", got, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newOutbox(ctx.Done(), DefaultWriteIdleTimeout)
	w := newWSWriter(out, nil, `r"1`, func() {})
	if err := w.chunk(data); err != nil {
		t.Fatal(err)
	}
	f := out.data.pop()
	if got, want := string(f.b), `{"type":"chunk","request_id":"r\"1","chunk":`+string(data)+`}`; got != want {
		t.Errorf("websocket %q, want %q", got, want)
	}
	mustValidate(t, "WebSocketServerMessage", f.b)
}

// bodyWriter keeps what is written.
type bodyWriter struct {
	*discardWriter
	body []byte
}

func (b *bodyWriter) Write(p []byte) (int, error) { b.body = append(b.body, p...); return len(p), nil }
