package service

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"rill/internal/park"
)

// What an upgraded connection holds between messages (docs/design.md §4):
// an idle WebSocket should cost a few KB, so that one process holds
// 100,000 of them. net/http hands a hijacker its own 4 KB reader and 4 KB
// writer, which the websocket library then keeps for the connection's
// life; these types replace both with small ones, and take a pooled buffer
// only while a message is being written.

// wsBufSize is the size of a connection's own read and write buffers: room
// for a frame header and a control frame (at most 127 bytes), so that
// pings, pongs and close frames go out in one write. Larger reads go
// straight into the reader's buffer.
const wsBufSize = 128

// smallHijacker is the ResponseWriter handed to websocket.Accept: its
// Hijack gives the library a connection with small buffers, not
// net/http's, which stay with net/http (and go when its handler returns).
type smallHijacker struct {
	http.ResponseWriter
	// Set by Hijack: what the library reads from (br, on nc) and writes
	// to (cork).
	cork *corkWriter
	nc   *wsNetConn
	br   *bufio.Reader
}

// Hijack takes the connection from net/http, with any bytes net/http has
// read past the handshake (a client may send its first message at once).
func (h *smallHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("hijack: %w", err)
	}
	// Bytes net/http read past the handshake (a client may send its first
	// message at once) are the connection's first: the library reads
	// through its reader, which reads nc. (The library moves what a
	// reader has buffered behind it, out of Buffered's sight, which a
	// reader that parks when nothing is buffered must not have.)
	nc := &wsNetConn{Conn: conn}
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		nc.early = bytes.Clone(early)
	}
	br := bufio.NewReaderSize(nc, wsBufSize)
	h.cork, h.nc, h.br = &corkWriter{conn: nc}, nc, br
	return nc, bufio.NewReadWriter(br, bufio.NewWriterSize(h.cork, wsBufSize)), nil
}

// wsNetConn is an upgraded connection as the websocket library holds it.
// Its Close first runs beforeClose (a parked reader must hear of the
// close: a descriptor closed in the Poller is forgotten by it), and while
// now is set its reads do not wait (wsConn.takePongs).
type wsNetConn struct {
	net.Conn
	beforeClose atomic.Pointer[func()]
	now         atomic.Bool
	// early are bytes read past the handshake, read first (by the
	// connection's one reader).
	early []byte
}

func (c *wsNetConn) Read(p []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(p, c.early)
		if c.early = c.early[n:]; len(c.early) == 0 {
			c.early = nil
		}
		return n, nil
	}
	if c.now.Load() {
		return park.ReadNow(c.Conn, p)
	}
	return c.Conn.Read(p)
}

func (c *wsNetConn) Close() error {
	if f := c.beforeClose.Load(); f != nil {
		(*f)()
	}
	return c.Conn.Close()
}

// NetConn returns the wrapped connection, whose descriptor the Poller
// waits on.
func (c *wsNetConn) NetConn() net.Conn { return c.Conn }

func (h *smallHijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// corkWriter is what a connection's buffered writer writes to. While
// corked (a message being written by the outbox) it gathers the frame's
// pieces in a pooled buffer, and uncork sends them in one write; otherwise
// (the library's own pongs and close frames) it writes through. Safe for
// concurrent use: bytes reach the connection in the order they came.
type corkWriter struct {
	conn net.Conn

	mu  sync.Mutex
	buf *[]byte // non-nil while corked
}

// corkPool holds the buffers of messages being written. Like frames,
// buffers grown past wsFrameKeep are not kept.
var corkPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (w *corkWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf != nil {
		*w.buf = append(*w.buf, p...)
		return len(p), nil
	}
	return w.conn.Write(p)
}

// cork starts gathering writes.
func (w *corkWriter) cork() {
	w.mu.Lock()
	if w.buf == nil {
		b := corkPool.Get().(*[]byte)
		*b = (*b)[:0]
		w.buf = b
	}
	w.mu.Unlock()
}

// control writes a frame that the library does not know of (the
// pinger's pings) between the library's frames: straight to the
// connection, ahead of a message being gathered, within timeout (0: none).
// Every other write is one whole frame or message under mu, so p never
// lands inside one.
func (w *corkWriter) control(p []byte, timeout time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if timeout > 0 {
		_ = w.conn.SetWriteDeadline(time.Now().Add(timeout))
		defer w.conn.SetWriteDeadline(time.Time{})
	}
	_, err := w.conn.Write(p)
	return err
}

// uncork writes what was gathered, gives the buffer back and writes
// through again.
func (w *corkWriter) uncork() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf
	if b == nil {
		return nil
	}
	w.buf = nil
	var err error
	if len(*b) > 0 {
		_, err = w.conn.Write(*b)
	}
	if cap(*b) <= wsFrameKeep {
		corkPool.Put(b)
	}
	return err
}
