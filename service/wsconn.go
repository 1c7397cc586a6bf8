package service

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// maxRequestIDLen caps a client's request_id, in bytes.
const maxRequestIDLen = 256

// wsConn is one WebSocket connection. Its goroutines, all owned by serve:
// the reader (serve's own), the writer (outbox.run, while messages are
// queued), the pinger (while a ping waits for its pong), the shutdown
// (once the server shuts down), one per request in flight (a request
// waiting long for its engine holds none: its wait is parked in the
// server's waitPool, counted in wg; wsTask) and, for a moment, the one
// that decodes a client message. All of them end before serve returns; a panic in any of them (a bug) is logged with
// its stack and ends the connection with 1011, not the process.
type wsConn struct {
	s      *Server
	conn   *websocket.Conn
	path   string // the endpoint every create on this connection runs against
	connID string // the handshake's request id, for logs
	out    *outbox

	mu      sync.Mutex
	reqs    wsRequests     // in flight, by request_id
	closing bool           // shutdown began: creates are refused
	running sync.WaitGroup // request goroutines; Add under mu while !closing

	// onMessage handles a client message in place of handle, for a
	// connection that speaks another protocol (the Responses API's).
	onMessage func(ctx context.Context, data []byte)

	wg sync.WaitGroup
	// shut counts the shutdown's run while it may still come (onShutdown).
	shut sync.WaitGroup

	pinger *wsPinger
	// values are what the connection's requests read from the handler's
	// context (requestValues), their contexts' parent; group cancels them
	// together.
	values context.Context
	group  reqGroup
	// The reader's parking (wspark.go): set by serve when the reader may
	// park. ctx is the reader's, kept for the goroutine that resumes it;
	// finish ends the connection (serve's end), run by the reader that
	// sees it end.
	ctx      context.Context
	finish   func()
	nc       *wsNetConn
	br       *bufio.Reader
	pmu      sync.Mutex
	stopPark func() bool // the Poller's wait, while parked
	noPark   bool        // the connection is closing: the reader reads on
}

func newWSConn(s *Server, conn *websocket.Conn, path, connID string) *wsConn {
	return &wsConn{s: s, conn: conn, path: path, connID: connID}
}

// errWriteIdle is the cause that ends the requests of a connection whose
// peer stopped reading (Options.WriteIdleTimeout).
var errWriteIdle = errors.New("write idle timeout: the client stopped reading")

// serve runs the connection until the peer leaves, a write fails or makes
// no progress for the write idle timeout, a ping goes unanswered, or
// afterShutdown runs its function (the server shuts down: requests in
// flight are cut with a 503 error message, then the peer gets a close frame
// "going away"; the returned func unregisters it and reports whether it was
// still waiting, as context.AfterFunc's stop does). Ending
// the connection cancels every request in flight on it. parent gives the
// connection the values requestValues carries (its cancellation is not
// used); hj is what the
// library reads from and writes to (the connection's small buffers).
//
// With done nil, serve returns when the connection has ended and all of
// its goroutines have, the close handshake included. With done set, the
// connection may outlive serve: its reader parks in the server's Poller
// (when it has one) while the client sends nothing, no goroutine left, and
// resumes on a new one when bytes arrive; done is called once at the
// connection's end.
//
// The caller counts the connection in s.wsConns, before serve if serve
// runs on a goroutine of its own, so that WaitConnections cannot miss it.
//
// An idle connection holds one goroutine, its reader, or none when its
// reader is parked: the writer runs only while messages are queued, and
// pings and shutdown are timers.
func (c *wsConn) serve(parent context.Context, afterShutdown func(func()) func() bool, hj *smallHijacker, done func()) {
	// ctx is the connection's life: it ends when the reader does. Its
	// requests are cancelled together (c.group), by shutdown or a stalled
	// peer first, each with its cause, and the reader's end last.
	c.values = requestValues(parent)
	ctx, cancel := context.WithCancel(c.values)
	c.out = newOutbox(ctx.Done(), c.s.writeIdle)
	c.out.writeTo(c.conn, hj.cork, func(fn func()) { c.spawn("writer", fn) }, func(err error) {
		if err == nil {
			return
		}
		if errors.Is(err, errWriteIdle) {
			c.group.cancel(errWriteIdle)
			c.s.log.Info("websocket peer stopped reading", "id", c.connID, "timeout", c.s.writeIdle)
		} else {
			c.s.log.Debug("websocket write failed", "id", c.connID, "err", err)
		}
		_ = c.conn.CloseNow()
	})
	c.out.beforeClose = c.unpark
	// The library's limit closes the connection; ours answers instead.
	c.conn.SetReadLimit(-1)
	c.pinger = c.startPings(hj.cork)
	stopShutdown := c.onShutdown(afterShutdown)
	c.finish = func() {
		cancel()
		c.group.cancel(context.Canceled)
		// Unblocks a write stuck on a peer that reads nothing; the
		// connection is already closed in every other case.
		_ = c.conn.CloseNow()
		c.pinger.stop()
		stopShutdown()
		c.wg.Wait()
		if done != nil {
			done()
		}
	}
	c.ctx = ctx
	if done != nil && c.s.poller != nil {
		c.nc, c.br = hj.nc, hj.br
		unpark := c.unpark
		hj.nc.beforeClose.Store(&unpark)
	}
	c.runReader(false)
}

// spawn runs fn on a goroutine of the connection, recovering a panic.
// It is called by goroutines of the connection only (or before serve
// waits for them), so that wg never grows from zero while serve waits.
func (c *wsConn) spawn(name string, fn func()) {
	c.wg.Go(func() {
		defer c.recoverConn(name)
		fn()
	})
}

// recoverConn, deferred by a goroutine of the connection, logs a panic
// with its stack and closes the connection with 1011 (internal error),
// which ends its other goroutines and cancels its requests.
func (c *wsConn) recoverConn(name string) {
	v := recover()
	if v == nil {
		return
	}
	c.s.log.Error("websocket panic", slog.String("id", c.connID), slog.String("goroutine", name),
		slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
	c.unpark() // the close handshake reads: the reader must not be parked
	_ = c.conn.Close(websocket.StatusInternalError, "internal server error")
}

// onShutdown arranges, through afterShutdown, for the connection to shut
// down when the server does, without a goroutine waiting for it. The
// returned stop, called when the connection ends, waits for a shutdown that
// began.
func (c *wsConn) onShutdown(afterShutdown func(func()) func() bool) (stop func()) {
	// Done once: by the shutdown that ran, or by stop when it never will.
	c.shut.Add(1)
	unregister := afterShutdown(func() {
		defer c.shut.Done()
		defer c.recoverConn("shutdown")
		c.shutdown()
	})
	return func() {
		if unregister() {
			c.shut.Done()
		}
		c.shut.Wait()
	}
}

// afterContext is the afterShutdown of a connection that ctx's end shuts
// down: its handler's request context, which ends with the server's base
// context.
func afterContext(ctx context.Context) func(func()) func() bool {
	return func(f func()) func() bool { return context.AfterFunc(ctx, f) }
}

// shutdown ends the connection for a server shutdown, in the order that
// lets the peer hear everything: no more creates; every request in flight
// cut (each answers with its 503 error message); those messages written;
// then the close frame 1001 (going away) and its handshake, done by the
// writer. A peer that stops reading meanwhile is dropped by the write idle
// timeout.
func (c *wsConn) shutdown() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.group.cancel(ErrShutdown)
	c.running.Wait()
	c.out.finish()
}

// read handles the client's messages until the connection ends, or
// until its reader parks between messages (then it reports true; readFirst:
// not before one read). Messages larger than the limit are answered and
// skipped without being buffered. ctx is the connection's.
func (c *wsConn) read(ctx context.Context, readFirst bool) (parked bool) {
	for first := true; ; first = false {
		if !(first && readFirst) && c.park() {
			return true
		}
		// The library ends a read when its context ends, watching the
		// context (context.AfterFunc) for every message; the connection's
		// ends only after its reader did (finish), so the reader reads
		// without one: a close ends its reads.
		_, r, err := c.conn.Reader(context.Background())
		if err != nil {
			return false
		}
		msg, err := io.ReadAll(io.LimitReader(r, c.s.wsMaxMsg+1))
		if err != nil {
			return false
		}
		if int64(len(msg)) > c.s.wsMaxMsg {
			c.reject(ctx, nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest,
				Code: "request_too_large", Message: "The message is larger than the " +
					strconv.FormatInt(c.s.wsMaxMsg, 10) + " bytes this server accepts; it was discarded."})
			if _, err := io.Copy(io.Discard, r); err != nil {
				return false
			}
			continue
		}
		// Apart: decoding a message grows a goroutine's stack to 8 KB and
		// more, which the reader would keep for the connection's life.
		apart(func() (struct{}, struct{}) {
			if c.onMessage != nil {
				c.onMessage(ctx, msg)
			} else {
				c.handle(ctx, msg)
			}
			return struct{}{}, struct{}{}
		})
	}
}

// wsMessage is a client message. Fields are kept raw so that their types
// are judged here, with OpenAI-style errors.
type wsMessage struct {
	Type      json.RawMessage `json:"type"`
	RequestID json.RawMessage `json:"request_id"`
	Body      json.RawMessage `json:"body"`
	// A resume's: the resumable stream's id and the last seq its client
	// saw (resumable.go).
	StreamID json.RawMessage `json:"stream_id"`
	LastSeq  json.RawMessage `json:"last_seq"`
}

// wsCommand is a client message that parseWSMessage accepted.
type wsCommand struct {
	create bool // else cancel, or resume
	resume bool
	id     string
	body   json.RawMessage // of a create; may be absent or null, which create answers
	// A resume's stream and the seq it continues after (-1: from the start).
	streamID string
	after    int64
}

// parseWSMessage decodes and checks one client message. Its errors are
// about a message that starts no request: they go out with request_id null.
func parseWSMessage(data []byte) (wsCommand, *apiError) {
	var m wsMessage
	if firstByte(data) != '{' || json.Unmarshal(data, &m) != nil {
		if json.Valid(data) {
			return wsCommand{}, invalid("", "invalid_type", "A message must be a JSON object.")
		}
		return wsCommand{}, invalid("", "invalid_json", "We could not parse the JSON of your message.")
	}
	var typ string
	if isNull(m.Type) {
		return wsCommand{}, invalid("type", "missing_required_parameter", "Missing required parameter: 'type'.")
	}
	if firstByte(m.Type) != '"' || json.Unmarshal(m.Type, &typ) != nil {
		return wsCommand{}, invalid("type", "invalid_type", "Invalid type for 'type': expected a string.")
	}
	if typ != "create" && typ != "cancel" && typ != "resume" {
		return wsCommand{}, invalid("type", "invalid_value",
			"Invalid value for 'type': %q; expected 'create', 'cancel' or 'resume'.", clip(typ, maxEchoBytes))
	}
	id, e := requestIDOf(m.RequestID)
	if e != nil {
		return wsCommand{}, e
	}
	cmd := wsCommand{create: typ == "create", resume: typ == "resume", id: id, body: m.Body, after: -1}
	if cmd.resume {
		if firstByte(m.StreamID) != '"' || json.Unmarshal(m.StreamID, &cmd.streamID) != nil || cmd.streamID == "" {
			return wsCommand{}, invalid("stream_id", "missing_required_parameter",
				"A resume needs 'stream_id': the id of the resumable stream's chunks.")
		}
		if !isNull(m.LastSeq) {
			if json.Unmarshal(m.LastSeq, &cmd.after) != nil || cmd.after < -1 {
				return wsCommand{}, invalid("last_seq", "invalid_type", "Invalid type for 'last_seq': expected an integer.")
			}
		}
	}
	return cmd, nil
}

// handle dispatches one client message. Errors about a message that ends no
// request carry request_id null, so that an error with a request_id always
// ends that request.
func (c *wsConn) handle(ctx context.Context, data []byte) {
	cmd, e := parseWSMessage(data)
	switch {
	case e != nil:
		c.reject(ctx, nil, e)
	case cmd.create:
		c.create(ctx, cmd.id, cmd.body)
	case cmd.resume:
		c.resume(ctx, cmd.id, cmd.streamID, cmd.after)
	default:
		c.cancel(ctx, cmd.id)
	}
}

// requestIDOf reads a request_id: a non-empty string of at most
// maxRequestIDLen bytes.
func requestIDOf(raw json.RawMessage) (string, *apiError) {
	if isNull(raw) {
		return "", invalid("request_id", "missing_required_parameter", "Missing required parameter: 'request_id'.")
	}
	var id string
	if firstByte(raw) != '"' || json.Unmarshal(raw, &id) != nil {
		return "", invalid("request_id", "invalid_type", "Invalid type for 'request_id': expected a string.")
	}
	if id == "" || len(id) > maxRequestIDLen {
		return "", invalid("request_id", "invalid_value",
			"Invalid value for 'request_id': expected 1 to %d bytes, got %d.", maxRequestIDLen, len(id))
	}
	return id, nil
}

// create starts request id with body, unless the id is in flight already or
// the connection is at its limit.
// ctx is the connection's (for the answers).
func (c *wsConn) create(ctx context.Context, id string, body json.RawMessage) {
	if isNull(body) {
		c.mu.Lock()
		dup := c.reqs.get(id) != nil
		c.mu.Unlock()
		if !dup {
			c.reject(ctx, appendString(nil, id), invalid("body", "missing_required_parameter",
				"Missing required parameter: 'body'."))
			return
		}
	}
	rctx, req, release, ok := c.admit(ctx, id)
	if !ok {
		return
	}
	rctx, _ = c.s.startWSSpan(rctx, c.path) // serveRequest ends it
	c.wg.Go(func() {
		if c.path == pathMessages {
			c.runMessage(rctx, id, req, release, body) // anthropic_ws.go
			return
		}
		c.run(rctx, id, req, release, body)
	})
}

// admit takes request id on the books, unless the id is in flight already,
// the connection is at its limit or shutting down (each answered here). The
// request must call release when it ends (serveRequest does).
func (c *wsConn) admit(ctx context.Context, id string) (context.Context, *wsRequest, func(), bool) {
	c.mu.Lock()
	if c.reqs.get(id) != nil {
		c.mu.Unlock()
		c.reject(ctx, nil, &apiError{Status: http.StatusConflict, Type: typeInvalidRequest, Param: "request_id",
			Code: "duplicate_request_id", Message: fmt.Sprintf("Request %q is still in flight on this connection.", clip(id, maxEchoBytes))})
		return nil, nil, nil, false
	}
	if len(c.reqs) >= c.s.wsReqs {
		c.mu.Unlock()
		c.reject(ctx, appendString(nil, id), &apiError{Status: http.StatusTooManyRequests, Type: typeInvalidRequest,
			Code: "too_many_requests", Message: fmt.Sprintf(
				"This connection already has %d requests in flight; wait for one to end or open another connection.", c.s.wsReqs)})
		return nil, nil, nil, false
	}
	if c.closing || !c.s.beginWS() {
		c.mu.Unlock()
		c.reject(ctx, appendString(nil, id), errDraining)
		return nil, nil, nil, false
	}
	rctx, cancel := context.WithCancelCause(c.values)
	req := &wsRequest{cancel: cancel}
	c.reqs = append(c.reqs, wsInFlight{id, req})
	c.running.Add(1)
	c.mu.Unlock()
	c.group.add(req)
	return rctx, req, func() {
		c.group.remove(req)
		cancel(nil)
		c.s.endWS()
		c.running.Done()
	}, true
}

// cancel stops request id at once: its engine context ends now; its
// goroutine then answers with the "cancelled" error.
func (c *wsConn) cancel(ctx context.Context, id string) {
	c.mu.Lock()
	req := c.reqs.get(id)
	c.mu.Unlock()
	if req == nil {
		c.reject(ctx, nil, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "request_id",
			Code: "unknown_request_id", Message: fmt.Sprintf("No request %q is in flight on this connection.", clip(id, maxEchoBytes))})
		return
	}
	req.mu.Lock()
	req.cancelled = true
	req.mu.Unlock()
	req.cancelWith(nil)
}

// release takes req off the books, unless id names another request by now.
func (c *wsConn) release(id string, req *wsRequest) {
	c.mu.Lock()
	c.reqs.remove(id, req)
	c.mu.Unlock()
}

// reject answers a message with an error, ahead of the requests' messages.
// id is the request_id as a JSON string, or nil. It waits while the control
// queue is full, which stops reading from a client that floods the server
// with bad messages and reads nothing.
func (c *wsConn) reject(ctx context.Context, id []byte, e *apiError) {
	f := getFrame()
	switch {
	case c.onMessage != nil:
		f.b = appendResponseWSError(f.b, e, "", -1) // the Responses API's shape
	case c.path == pathMessages:
		f.b = appendMessagesWSError(f.b, id, e) // Anthropic's shape
	default:
		f.b = appendWSError(f.b, id, e)
	}
	_ = c.out.put(c.out.ctrl, f, ctx.Done())
}

// errCancelled is the last message of a request the client cancelled.
var errCancelled = &apiError{Status: statusClientClosed, Type: typeInvalidRequest, Code: "request_cancelled",
	Message: "The request was cancelled by a cancel message."}

// run serves one request: validate and start it as its POST would be, then
// stream its chunks. ctx is the request's context, which a cancel message
// or the end of the connection cancels. Exactly one done or error message
// ends the request while the connection lasts. release is admit's.
func (c *wsConn) run(ctx context.Context, id string, req *wsRequest, release func(), body []byte) {
	w := newWSWriter(c.out, ctx.Done(), id, func() { c.release(id, req) })
	c.serveRequest(ctx, id, req, w, release, func() (*wsRun, *apiError) {
		begun := time.Now()
		p, e := c.s.parse(ctx, c.path, body)
		if e != nil {
			return nil, e
		}
		p.forceStream()
		if p.resumable {
			run, e := c.s.startResumable(ctx, p, begun)
			if e != nil {
				return nil, e
			}
			st := newLogSteps(ctx, run.l, run, &wsLogSink{ctx: ctx, w: w}, -1, 0, nil)
			st.ender = req
			run.l.leave() // the starter's join, which st took over
			return &wsRun{model: run.model, steps: st}, nil
		}
		g, e := c.s.launchUnder(ctx, nil, p, wirePrefix(p)+uuid.NewString(), begun)
		if e != nil {
			return nil, e
		}
		return &wsRun{g: g, model: g.model, steps: g.newChunkStream(ctx, w, 0)}, nil
	})
}

// wsReply is how a WebSocket request's last message is written: chat's
// and the Messages API's writers.
type wsReply interface {
	// fail queues e as the request's last message.
	fail(e *apiError) error
	// free takes the request off its connection's books, in case no last
	// message could be queued (a second call does nothing).
	free()
	// finished reports that the last message is queued.
	finished() bool
}

// wsRun is a WebSocket request's generation, started, and how it streams
// to its writer (sending the engine's error itself, if one ends it): steps,
// which waits for the engine without a goroutine of its own, or stream,
// which streams to the end on the request's goroutine.
type wsRun struct {
	g      *generation // nil for a resumable stream, whose generation is the server's
	model  string
	steps  wsSteps
	stream func() (*Usage, error)
}

// wsSteps is a stream taken apart at its waits for the engine
// (chunkStream, messageStream): next streams what is ready, reporting
// over with the usage or the error once the stream ended; wait, waitFor
// and a parked wait (parkable's channels) wait for more, on whichever
// goroutine, one call at a time.
type wsSteps interface {
	next() (over bool, u *Usage, err error)
	wait()
	waitFor(d time.Duration) bool
	parkable() (waitOn, bool)
}

// serveRequest runs one WebSocket request, whichever API it speaks: start
// validates and starts its generation, whose stream is then run, and every
// way it can end is told to the client through w (unless nobody is left to
// tell) and written to the access log; then release (admit's) runs. A panic
// is a 500 to the client and an error in the log, never the connection's
// end.
//
// serveRequest may return before the request ends: a stream that waits for
// its engine (wsRun.steps) longer than wsWaitInline parks its wait in the
// server's waitPool and holds no goroutine meanwhile; a fresh one streams
// on when the engine has something. The goroutine that validated the
// request and streamed its chunks has grown a stack of 8 to 16 KB, which a
// goroutine keeps for as long as it lives, and even a fresh goroutine that
// only waits keeps the 2 KB (4 KB, when the runtime's adaptive start says
// so) it starts with: for an idle stream, that is most of what it costs.
func (c *wsConn) serveRequest(ctx context.Context, id string, req *wsRequest, w wsReply, release func(), start func() (*wsRun, *apiError)) {
	t := &wsTask{c: c, ctx: ctx, id: id, req: req, w: w, release: release, begun: time.Now(), status: http.StatusOK}
	t.guard(func() bool { return t.begin(start) })
}

// wsTask is one WebSocket request in flight, on the heap so that its
// stream can go on from one goroutine to the next; it holds the request's
// context for that reason. Its parts run one at a time.
type wsTask struct {
	c       *wsConn
	ctx     context.Context
	id      string
	req     *wsRequest
	w       wsReply
	release func()

	begun  time.Time
	status int
	reason string
	usage  *Usage
	model  string
	obs    *requestMetrics
	run    *wsRun
}

// guard runs f, a part of the request, and ends the request when f reports
// it over or panics (a 500 to the client, as a handler's panic is).
func (t *wsTask) guard(f func() (over bool)) {
	over := true
	defer func() {
		if v := recover(); v != nil {
			t.c.s.log.Error("websocket request panic", slog.String("id", t.c.connID), slog.String("request_id", t.id),
				slog.String("path", t.c.path), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			t.status = http.StatusInternalServerError
			_ = t.w.fail(&apiError{Status: t.status, Type: typeServer, Message: "Internal server error."})
			over = true
		}
		if over {
			t.end()
		}
	}()
	over = f()
}

// end takes the request off the books and logs it.
func (t *wsTask) end() {
	if t.run != nil && t.run.g != nil {
		t.run.g.cancel()
	}
	t.w.free()
	t.c.s.logAccess(context.Background(), &accessEntry{id: t.c.connID, wsRequestID: t.id, method: http.MethodGet,
		path: t.c.path, transport: "websocket", model: t.model, status: t.status, start: t.begun,
		ttft: t.obs.timeToFirstToken(), bytes: -1, usage: t.usage, reason: t.reason, span: trace.SpanFromContext(t.ctx)})
	t.release()
}

// begin starts the request and streams it, up to its end or to its first
// wait for the engine; it reports whether the request is over.
func (t *wsTask) begin(start func() (*wsRun, *apiError)) bool {
	run, e := apart(start)
	if e != nil {
		switch {
		case t.req.wasCancelled():
			e = errCancelled
		case isShutdown(t.ctx):
			e, t.reason = errShutdownCut, reasonShutdown
		default:
			t.reason = reasonOf(e)
		}
		t.status = e.Status
		_ = t.w.fail(e)
		return true
	}
	t.model = run.model
	t.run = run
	if run.g != nil {
		t.obs = run.g.obs
	}
	if run.steps != nil {
		return t.pump()
	}
	u, err := run.stream()
	t.settle(u, err)
	return true
}

// wsWaitInline is how long a WebSocket stream waits for its engine on the
// goroutine that streams before it hands the wait to a fresh one: long
// enough that a stream between tokens keeps its goroutine (a new one costs
// a few microseconds, its stack grown anew), short against the time a
// stream waits in the engine's queue or on a long prompt.
const wsWaitInline = 100 * time.Millisecond

// pump streams what the engine has ready, waiting for more up to
// wsWaitInline at a time. When the engine keeps the stream waiting longer,
// a fresh goroutine of the connection waits and pumps on, and pump reports
// the request not over: its caller's goroutine, and its stack, end.
func (t *wsTask) pump() bool {
	for {
		over, u, err := t.run.steps.next()
		if over {
			t.settle(u, err)
			return true
		}
		if !t.run.steps.waitFor(wsWaitInline) {
			t.park()
			return false
		}
	}
}

// park hands the stream's wait to the server's waitPool, which pumps on,
// on a fresh goroutine, once the engine has something or the request
// ended; a stream the pool cannot wait for waits on a fresh goroutine of
// its own. Either way the connection counts the wait (c.wg), so that it
// ends before the connection does.
func (t *wsTask) park() {
	t.c.out.rest()
	if sp, ok := t.run.steps.(selfParker); ok {
		t.c.wg.Add(1)
		if sp.parkSelf(t.pumpOn) {
			return
		}
		t.c.wg.Done()
	}
	on, ok := t.run.steps.parkable()
	if !ok {
		t.c.wg.Go(t.waitAndPump)
		return
	}
	t.c.wg.Add(1)
	t.c.s.waits.park(on, t.pumpOn)
}

// pumpOn is the goroutine of a stream whose parked wait ended.
func (t *wsTask) pumpOn() {
	defer t.c.wg.Done()
	t.guard(t.pump)
}

// waitAndPump is the goroutine of a stream waiting for its engine.
func (t *wsTask) waitAndPump() { t.guard(t.waitThenPump) }

func (t *wsTask) waitThenPump() bool {
	t.run.steps.wait()
	return t.pump()
}

// settle records how the stream ended, and tells the client when the
// stream could not.
func (t *wsTask) settle(u *Usage, err error) {
	t.usage = u
	switch {
	case err == nil:
	case t.w.finished():
		// The stream sent the engine's error.
		e := fromEngine(err, t.model)
		t.status, t.reason = e.Status, reasonOf(e)
	case t.req.wasCancelled():
		t.status = statusClientClosed
		_ = t.w.fail(errCancelled)
	case isShutdown(t.ctx):
		t.status, t.reason = errShutdownCut.Status, reasonShutdown
		_ = t.w.fail(errShutdownCut)
	case errors.Is(context.Cause(t.ctx), errWriteIdle):
		// The peer stopped reading: nobody is listening.
		t.status, t.reason = statusClientClosed, reasonWriteIdle
	default:
		// The connection ended: nobody is left to tell.
		t.status = statusClientClosed
	}
}
