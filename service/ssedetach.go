package service

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
)

// An SSE stream that waits long for its engine leaves net/http's hands:
// net/http holds, for each request in flight, a connection goroutine with
// a grown stack, a background reader, a 4 KB read buffer, a 4 KB write
// buffer and a 2 KB chunking buffer, about 22 KB that an idle stream only
// waits with.
//
// A stream that may detach (mayDetach) holds its status and headers until
// its engine's first event. When that comes within sseWaitInline, the
// stream goes on on net/http's path, keep-alive included, as if it had not
// waited. Otherwise it detaches: it takes the connection over (a hijack),
// writes its status and header itself, with Connection: close (a hijacked
// connection cannot go back to net/http's keep-alive loop, and the client
// must not send its next request on it), then its chunked body, taking a
// buffer only while it writes; it parks its waits in the server's waitPool
// as WebSocket streams do, and closes the connection at its end. The
// connection waits in the server's Poller (one small goroutine of its own
// without one) for the client to go, so that the stream ends at once when
// it does.
//
// HTTP/2 streams (they cannot be hijacked), HTTP/1.0 ones (their bodies
// are not chunked), streams that wait while the server drains and those
// of a server without Options.Shutdown (a detached stream hears of the
// shutdown as a WebSocket connection served apart from its handshake
// does) stay on net/http's path.

// sseWaitInline is how long an SSE stream waits for its engine's first
// event before it detaches: its status and headers wait that long at most,
// and a stream whose first token comes sooner keeps its keep-alive
// connection; short against a wait in the engine's queue or on a long
// prompt.
const sseWaitInline = time.Second

// sseDetach is the context of a streamed request that may detach: it
// follows the handler's (the values requestValues carries, its end, the
// cause of its end) until
// detached, then ends only with the client, the server's shutdown or the
// stream.
type sseDetach struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool // unhooks ctx from the handler's
}

func newSSEDetach(parent context.Context) *sseDetach {
	ctx, cancel := context.WithCancelCause(requestValues(parent))
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return &sseDetach{ctx: ctx, cancel: cancel, stop: stop}
}

// sseContext is the context a streamed request's generation runs under:
// the handler's, or, for a request that may detach, dt's, which can
// outlive the handler. The handler must call release as it returns, with
// whether its stream detached.
func (s *Server) sseContext(r *http.Request) (ctx context.Context, dt *sseDetach, release func(detached bool)) {
	if !s.mayDetach(r) {
		return r.Context(), nil, func(bool) {}
	}
	dt = newSSEDetach(r.Context())
	return dt.ctx, dt, func(detached bool) {
		if !detached {
			dt.release()
		}
	}
}

// release frees a context that did not detach.
func (d *sseDetach) release() {
	d.stop()
	d.cancel(context.Canceled)
}

// sseDetached is a detached stream: what it needs to stream on, to end the
// connection and to write its access line.
type sseDetached struct {
	s    *Server
	dt   *sseDetach
	info *requestInfo
	// The access line's: the request's method and path, the status and
	// bytes the recorder counted before the detach.
	method, path string
	status       int
	bytes        int64

	conn      net.Conn
	writeIdle time.Duration
	broken    bool // a write failed: the body cannot be ended cleanly
	ended     bool // end ran (a panic in it must not run it twice)

	g            *generation
	st           sseSteps
	idle         func() time.Duration // st.idleFor's
	sw           *sseWriter
	a            sseAnswer
	stopShutdown func() bool

	// watchMu guards the watch on the connection: its Poller wait, and
	// unwatched (the stream ended: no more waits).
	watchMu   sync.Mutex
	stopWatch func() bool
	unwatched bool
}

// sseSteps is a streamed answer taken apart at its waits (chunkStream,
// messageStream, responseStream), as an SSE stream that may detach runs
// it: wsSteps, the pings of a parked wait (parkableTicking's ticks are
// handed to ticked), how many engine events it took, and idleFor.
type sseSteps interface {
	wsSteps
	parkableTicking() (waitOn, bool)
	ticked()
	events() int
	idleFor() func() time.Duration
}

// sseAnswer is what an API's SSE stream does besides its steps: fail
// writes an error event in the API's shape (a panic's 500), and settle
// records how the stream ended (the usage and error its steps reported),
// telling a client that is still there that a shutdown cut it. Both run
// on whichever goroutine streams, the handler's or, once detached, the
// stream's own.
type sseAnswer struct {
	fail   func(e *apiError) error
	settle func(u *Usage, err error)
}

// streamSSE streams st, which writes to sw, to w's client: a stream that
// may detach (dt not nil) holds its status and headers until its first
// engine event, and detaches when none came within sseWaitInline. It
// reports whether the stream detached: the handler must then return at
// once, leaving g running (its cancel is the stream's; a follower of a
// log has none); otherwise the stream ended, settled.
func (s *Server) streamSSE(w http.ResponseWriter, r *http.Request, info *requestInfo, dt *sseDetach,
	g *generation, st sseSteps, sw *sseWriter, a sseAnswer) (detached bool) {
	if sw.held = dt != nil; !sw.held {
		if err := sw.start(); err != nil {
			s.transportFailed(r, info, err)
			return false
		}
	}
	held := time.Now()
	for {
		over, u, err := st.next()
		if sw.held && (over || st.events() > 0) {
			if err := sw.release(); err != nil {
				s.transportFailed(r, info, err)
				return false
			}
		}
		if over {
			a.settle(u, err)
			return false
		}
		if !sw.held {
			st.wait()
			continue
		}
		if left := sseWaitInline - time.Since(held); left > 0 && st.waitFor(left) {
			continue
		}
		if s.detachSSE(w, r, info, dt, g, st, sw, a) {
			return true
		}
		if err := sw.release(); err != nil {
			s.transportFailed(r, info, err)
			return false
		}
	}
}

// mayDetach reports whether r's stream may detach: HTTP/1.1 (HTTP/2
// streams cannot be hijacked, and HTTP/1.0 bodies are not chunked) on a
// server with Options.Shutdown, which a detached stream hears the
// shutdown by.
func (s *Server) mayDetach(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.ProtoMinor == 1 && s.shutdown != nil
}

// detachSSE detaches the stream of g, which st streams through sw to w,
// held (its status and headers not sent yet), unless the server or the
// writer does not allow it (then it reports false and nothing changed).
// Once it reports true the handler must return at once, leaving g
// running; the stream then writes its own access line.
func (s *Server) detachSSE(w http.ResponseWriter, r *http.Request, info *requestInfo, dt *sseDetach,
	g *generation, st sseSteps, sw *sseWriter, a sseAnswer) bool {
	rec, ok := w.(*recorder)
	if !ok || !sw.held {
		return false
	}
	// Drain waits for it as for a WebSocket request; while draining, the
	// stream stays where http.Server.Shutdown waits for it.
	if !s.beginWS() {
		return false
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.endWS()
		return false
	}
	// The bufio.ReadWriter net/http hands over is dropped with its
	// buffers: bytes it read ahead would be a pipelined request, which
	// this connection, closed at the stream's end, does not serve.
	rec.status = http.StatusOK
	rec.limitHeaders()
	d := &sseDetached{s: s, dt: dt, info: info, method: r.Method, path: r.URL.Path, status: rec.status,
		conn: conn, writeIdle: s.writeIdle, g: g, st: st, idle: st.idleFor(), sw: sw, a: a}
	s.wsConns.add()
	d.stopShutdown = s.afterShutdown(func() { dt.cancel(ErrShutdown) })
	// The handler's context ends when the handler returns; from now on the
	// stream's ends with the client (watch), the shutdown or the stream.
	// The watch, unhooked, still holds the handler's context, and with it
	// net/http's: let go of it.
	dt.stop()
	dt.stop = nil
	info.detached = true
	// What net/http would have sent, and Connection: close: the client
	// knows not to send another request on this connection.
	sseHead(sw, rec.Header())
	pending := sw.pending
	// Let go of net/http's response (its buffers, its connection's).
	sw.d, sw.w, sw.rc, sw.held, sw.pending = d, nil, nil, false, nil
	if err := d.write(sw.buf); err != nil || len(pending) > 0 && d.writeChunk(pending) != nil {
		dt.cancel(context.Canceled) // nobody is listening: the stream ends at once
	}
	sw.buf = nil
	d.watch()
	d.park()
	return true
}

// sseHead puts in sw.buf the status line and header of a detached stream:
// h (the handler's header) with an event stream's fields, Date, chunked
// coding and Connection: close.
func sseHead(sw *sseWriter, h http.Header) {
	b := bytes.NewBuffer(append(sw.buf[:0], "HTTP/1.1 200 OK\r\n"...))
	setSSEHeader(h)
	if _, ok := h["Date"]; !ok {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	h.Set("Transfer-Encoding", "chunked")
	h.Set("Connection", "close")
	_ = h.Write(b)
	b.WriteString("\r\n")
	sw.buf = b.Bytes()
}

// watch waits for the connection to become readable, in the server's
// Poller when it has one: the client left, which ends the stream's
// context as net/http's background read ends a request's (or it sent
// bytes, a pipelined request that this connection, closed at the
// stream's end, does not serve: they are read and dropped).
func (d *sseDetached) watch() {
	if d.s.poller == nil {
		go d.readAll()
		return
	}
	d.watchMu.Lock()
	defer d.watchMu.Unlock()
	if d.unwatched {
		return
	}
	stop, err := d.s.poller.Wait(d.conn, func() { go d.readOnce() })
	if err != nil {
		go d.readAll()
		return
	}
	d.stopWatch = stop
}

// readOnce reads what woke the watch, and waits again unless the client
// left.
func (d *sseDetached) readOnce() {
	var b [256]byte
	if _, err := d.conn.Read(b[:]); err != nil {
		d.dt.cancel(context.Canceled)
		return
	}
	d.watch()
}

// readAll reads the connection until it fails: the watch on a goroutine.
func (d *sseDetached) readAll() {
	var b [1]byte
	for {
		if _, err := d.conn.Read(b[:]); err != nil {
			d.dt.cancel(context.Canceled)
			return
		}
	}
}

// unwatch ends the watch, before the connection closes (a descriptor
// closed while in the Poller would leave its wait behind).
func (d *sseDetached) unwatch() {
	d.watchMu.Lock()
	d.unwatched = true
	stop := d.stopWatch
	d.stopWatch = nil
	d.watchMu.Unlock()
	if stop != nil {
		stop()
	}
}

// park hands the stream's wait to the server's waitPool (a goroutine of its
// own when the pool cannot wait for it: several engine streams).
func (d *sseDetached) park() {
	d.sw.buf = nil // taken again by the next write
	on, ok := d.st.parkableTicking()
	if !ok {
		go func() {
			d.st.wait()
			d.pump()
		}()
		return
	}
	d.s.waits.parkTicking(on, d.wake)
}

// wake is the goroutine of a parked wait that ended.
func (d *sseDetached) wake(ticked bool) {
	if ticked {
		d.st.ticked()
	}
	d.pump()
}

// pump streams what the engine has ready, waiting for more on its own
// goroutine while the stream went without an event for less than
// wsWaitInline (it flows: a park per token would cost more than it
// saves), then parks; at the end it finishes. A panic is a 500 error event
// and the stream's end, as a handler's is.
func (d *sseDetached) pump() {
	defer func() {
		if v := recover(); v != nil {
			d.s.log.Error("handler panic", slog.String("id", d.info.id), slog.Any("panic", v),
				slog.String("stack", string(debug.Stack())))
			e := &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: "Internal server error."}
			d.info.status = e.Status
			_ = d.a.fail(e)
			d.end()
		}
	}()
	for {
		if over, u, err := d.st.next(); over {
			d.a.settle(u, err)
			d.end()
			return
		}
		if left := wsWaitInline - d.idle(); left <= 0 || !d.st.waitFor(left) {
			d.park()
			return
		}
	}
}

// end ends the chunked body and the connection, stops the generation and
// writes the access line.
func (d *sseDetached) end() {
	if d.ended {
		return
	}
	d.ended = true
	if !d.broken {
		_ = d.write([]byte("0\r\n\r\n"))
	}
	d.unwatch()
	_ = d.conn.Close()
	if d.g != nil {
		d.g.cancel()
	}
	d.dt.cancel(context.Canceled)
	d.stopShutdown()
	status := d.status
	if d.info.status != 0 {
		status = d.info.status
	}
	if status == 0 {
		status = http.StatusOK
	}
	d.s.logAccess(context.Background(), &accessEntry{id: d.info.id, method: d.method, path: d.path, transport: "http",
		model: d.info.model, status: status, start: d.info.start, ttft: d.info.obs.timeToFirstToken(), bytes: d.bytes,
		usage: d.info.usage, reason: d.info.reason, span: d.info.span})
	d.s.endWS()
	d.s.wsConns.done()
}

// writeChunk writes p as one chunk of the body (HTTP/1.1 chunked coding:
// its size in hex, CRLF, p, CRLF), in one write, within the write idle
// timeout.
func (d *sseDetached) writeChunk(p []byte) error {
	var size [20]byte
	head := strconv.AppendInt(size[:0], int64(len(p)), 16)
	head = append(head, '\r', '\n')
	if err := d.write(head, p, crlf); err != nil {
		return err
	}
	d.bytes += int64(len(p))
	return nil
}

var crlf = []byte("\r\n")

// write writes parts in one system call (writev), within the write idle
// timeout; a failure marks the connection broken.
func (d *sseDetached) write(parts ...[]byte) error {
	if d.writeIdle > 0 {
		_ = d.conn.SetWriteDeadline(time.Now().Add(d.writeIdle))
	}
	bufs := net.Buffers(parts)
	if _, err := bufs.WriteTo(d.conn); err != nil {
		d.broken = true
		return err
	}
	return nil
}

// endSSE records how a chat, completions or Messages stream ended (ctx is
// the stream's), and tells a client still there, through fail, that a
// shutdown cut it.
func endSSE(ctx context.Context, info *requestInfo, fail func(*apiError) error, g *generation, err error) {
	switch {
	case err == nil:
	case isShutdown(ctx):
		// The client is still there: tell it why its stream ends.
		info.status, info.reason = errShutdownCut.Status, reasonShutdown
		_ = fail(errShutdownCut)
	default:
		var te *transportError
		if errors.As(err, &te) || ctx.Err() != nil {
			transportFailedCtx(ctx, info, err)
		} else {
			engineFailed(info, err, g.model)
		}
	}
}

// transportFailedCtx is transportFailed for a request whose context is ctx.
func transportFailedCtx(ctx context.Context, info *requestInfo, err error) {
	info.status = statusClientClosed
	if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
		info.reason = reasonWriteIdle
	}
}
