package service

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
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
	cork *corkWriter // set by Hijack
}

// Hijack takes the connection from net/http, with any bytes net/http has
// read past the handshake (a client may send its first message at once).
func (h *smallHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("hijack: %w", err)
	}
	// The library reads on from what the reader has buffered, then from
	// conn: the early bytes go into the reader's buffer.
	br := bufio.NewReaderSize(conn, wsBufSize)
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn), max(n, wsBufSize))
		if _, err := br.Peek(n); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("hijack: keep the bytes read ahead: %w", err)
		}
	}
	h.cork = &corkWriter{conn: conn}
	return conn, bufio.NewReadWriter(br, bufio.NewWriterSize(h.cork, wsBufSize)), nil
}

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
