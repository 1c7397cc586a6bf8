package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
)

// maxRequestIDLen caps a client's request_id, in bytes.
const maxRequestIDLen = 256

// wsConn is one WebSocket connection. Its goroutines, all owned by serve:
// the reader (serve's own, which runs the handler), the writer (outbox.drain),
// the keeper (pings, shutdown) and one per request in flight. All of them
// end before serve returns.
type wsConn struct {
	s      *Server
	conn   *websocket.Conn
	path   string // the endpoint every create on this connection runs against
	connID string // the handshake's request id, for logs
	out    *outbox

	mu   sync.Mutex
	reqs map[string]*wsRequest // in flight, by request_id

	wg sync.WaitGroup
}

// wsRequest is one request in flight on a connection.
type wsRequest struct {
	cancel context.CancelFunc
	// mu guards cancelled: the client sent cancel for this request.
	mu        sync.Mutex
	cancelled bool
}

func newWSConn(s *Server, conn *websocket.Conn, path, connID string) *wsConn {
	return &wsConn{s: s, conn: conn, path: path, connID: connID, reqs: make(map[string]*wsRequest)}
}

// serve runs the connection until the peer leaves, a write fails, a ping
// goes unanswered, or parent ends (server shutdown: the peer gets a close
// frame "going away"). Ending the connection cancels every request in
// flight on it; serve returns when all of its goroutines have.
func (c *wsConn) serve(parent context.Context) {
	ctx, cancel := wsContext(parent)
	c.out = newOutbox(ctx.Done())
	// The library's limit closes the connection; ours answers instead.
	c.conn.SetReadLimit(-1)
	c.wg.Go(func() {
		if err := c.out.drain(c.conn); err != nil {
			c.s.log.Debug("websocket write failed", "id", c.connID, "err", err)
			_ = c.conn.CloseNow()
		}
	})
	c.wg.Go(func() { c.keep(ctx, parent) })
	c.read(ctx)
	cancel()
	// Unblocks a write stuck on a peer that reads nothing; the connection is
	// already closed in every other case.
	_ = c.conn.CloseNow()
	c.wg.Wait()
}

// keep pings the peer every ping interval and closes the connection when a
// pong has not come back by the next one, or when parent ends.
func (c *wsConn) keep(ctx, parent context.Context) {
	var tick <-chan time.Time
	if c.s.ping > 0 {
		t := time.NewTicker(c.s.ping)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-parent.Done():
			_ = c.conn.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-tick:
			pctx, cancel := context.WithTimeout(ctx, c.s.ping)
			err := c.conn.Ping(pctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					c.s.log.Debug("websocket peer did not answer a ping", "id", c.connID, "err", err)
					_ = c.conn.CloseNow()
				}
				return
			}
		}
	}
}

// read handles the client's messages until the connection ends. Messages
// larger than the limit are answered and skipped without being buffered.
func (c *wsConn) read(ctx context.Context) {
	for {
		_, r, err := c.conn.Reader(ctx)
		if err != nil {
			return
		}
		msg, err := io.ReadAll(io.LimitReader(r, c.s.wsMaxMsg+1))
		if err != nil {
			return
		}
		if int64(len(msg)) > c.s.wsMaxMsg {
			c.reject(ctx, nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest,
				Code: "request_too_large", Message: "The message is larger than the " +
					strconv.FormatInt(c.s.wsMaxMsg, 10) + " bytes this server accepts; it was discarded."})
			if _, err := io.Copy(io.Discard, r); err != nil {
				return
			}
			continue
		}
		c.handle(ctx, msg)
	}
}

// wsMessage is a client message. Fields are kept raw so that their types
// are judged here, with OpenAI-style errors.
type wsMessage struct {
	Type      json.RawMessage `json:"type"`
	RequestID json.RawMessage `json:"request_id"`
	Body      json.RawMessage `json:"body"`
}

// handle dispatches one client message. Errors about a message that ends no
// request carry request_id null, so that an error with a request_id always
// ends that request.
func (c *wsConn) handle(ctx context.Context, data []byte) {
	var m wsMessage
	if firstByte(data) != '{' || json.Unmarshal(data, &m) != nil {
		if json.Valid(data) {
			c.reject(ctx, nil, invalid("", "invalid_type", "A message must be a JSON object."))
		} else {
			c.reject(ctx, nil, invalid("", "invalid_json", "We could not parse the JSON of your message."))
		}
		return
	}
	var typ string
	if isNull(m.Type) {
		c.reject(ctx, nil, invalid("type", "missing_required_parameter", "Missing required parameter: 'type'."))
		return
	}
	if firstByte(m.Type) != '"' || json.Unmarshal(m.Type, &typ) != nil {
		c.reject(ctx, nil, invalid("type", "invalid_type", "Invalid type for 'type': expected a string."))
		return
	}
	if typ != "create" && typ != "cancel" {
		c.reject(ctx, nil, invalid("type", "invalid_value",
			"Invalid value for 'type': %q; expected 'create' or 'cancel'.", truncate(typ)))
		return
	}
	id, e := requestIDOf(m.RequestID)
	if e != nil {
		c.reject(ctx, nil, e)
		return
	}
	if typ == "cancel" {
		c.cancel(ctx, id)
		return
	}
	c.create(ctx, id, m.Body)
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

// truncate shortens a client's string for an error message.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// create starts request id with body, unless the id is in flight already or
// the connection is at its limit.
func (c *wsConn) create(ctx context.Context, id string, body json.RawMessage) {
	c.mu.Lock()
	if _, dup := c.reqs[id]; dup {
		c.mu.Unlock()
		c.reject(ctx, nil, &apiError{Status: http.StatusConflict, Type: typeInvalidRequest, Param: "request_id",
			Code: "duplicate_request_id", Message: fmt.Sprintf("Request %q is still in flight on this connection.", truncate(id))})
		return
	}
	if isNull(body) {
		c.mu.Unlock()
		c.reject(ctx, appendString(nil, id), invalid("body", "missing_required_parameter",
			"Missing required parameter: 'body'."))
		return
	}
	if len(c.reqs) >= c.s.wsReqs {
		c.mu.Unlock()
		c.reject(ctx, appendString(nil, id), &apiError{Status: http.StatusTooManyRequests, Type: typeInvalidRequest,
			Code: "too_many_requests", Message: fmt.Sprintf(
				"This connection already has %d requests in flight; wait for one to end or open another connection.", c.s.wsReqs)})
		return
	}
	if !c.s.beginWS() {
		c.mu.Unlock()
		c.reject(ctx, appendString(nil, id), errDraining)
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	req := &wsRequest{cancel: cancel}
	c.reqs[id] = req
	c.mu.Unlock()
	c.wg.Go(func() {
		defer c.s.endWS()
		defer cancel()
		c.run(rctx, id, req, body)
	})
}

// cancel stops request id at once: its engine context ends now; its
// goroutine then answers with the "cancelled" error.
func (c *wsConn) cancel(ctx context.Context, id string) {
	c.mu.Lock()
	req := c.reqs[id]
	c.mu.Unlock()
	if req == nil {
		c.reject(ctx, nil, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "request_id",
			Code: "unknown_request_id", Message: fmt.Sprintf("No request %q is in flight on this connection.", truncate(id))})
		return
	}
	req.mu.Lock()
	req.cancelled = true
	req.mu.Unlock()
	req.cancel()
}

// release takes req off the books, unless id names another request by now.
func (c *wsConn) release(id string, req *wsRequest) {
	c.mu.Lock()
	if c.reqs[id] == req {
		delete(c.reqs, id)
	}
	c.mu.Unlock()
}

// reject answers a message with an error, ahead of the requests' messages.
// id is the request_id as a JSON string, or nil. It waits while the control
// queue is full, which stops reading from a client that floods the server
// with bad messages and reads nothing.
func (c *wsConn) reject(ctx context.Context, id []byte, e *apiError) {
	f := getFrame()
	f.b = appendWSError(f.b, id, e)
	_ = c.out.put(c.out.ctrl, f, ctx.Done())
}

// errCancelled is the last message of a request the client cancelled.
var errCancelled = &apiError{Status: statusClientClosed, Type: typeInvalidRequest, Code: "request_cancelled",
	Message: "The request was cancelled by a cancel message."}

// run serves one request: validate and start it as its POST would be, then
// stream its chunks. ctx is the request's context, which a cancel message
// or the end of the connection cancels. Exactly one done or error message
// ends the request while the connection lasts.
func (c *wsConn) run(ctx context.Context, id string, req *wsRequest, body []byte) {
	start := time.Now()
	w := newWSWriter(c.out, ctx.Done(), id, func() { c.release(id, req) })
	status := http.StatusOK
	var usage *Usage
	defer func() {
		if v := recover(); v != nil {
			c.s.log.Error("websocket request panic", "id", c.connID, "request_id", id, "panic", v)
			status = http.StatusInternalServerError
			_ = w.fail(&apiError{Status: status, Type: typeServer, Message: "Internal server error."})
		}
		w.release() // in case no last message could be queued
		c.logRequest(id, status, start, usage)
	}()

	wasCancelled := func() bool {
		req.mu.Lock()
		defer req.mu.Unlock()
		return req.cancelled
	}
	g, e := c.s.start(ctx, c.path, body, uuid.NewString(), alwaysStreamed)
	if e != nil {
		if wasCancelled() {
			e = errCancelled
		}
		status = e.Status
		_ = w.fail(e)
		return
	}
	defer g.cancel()
	u, err := g.streamTo(ctx, w, 0)
	usage = u
	switch {
	case err == nil:
	case w.ended:
		// streamTo sent the engine's error.
		status = fromEngine(err, g.model).Status
	case wasCancelled():
		status = statusClientClosed
		_ = w.fail(errCancelled)
	default:
		// The connection ended: nobody is left to tell.
		status = statusClientClosed
	}
}

// logRequest writes the log line of one request on the connection.
func (c *wsConn) logRequest(id string, status int, start time.Time, u *Usage) {
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	ctx := context.Background()
	if !c.s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs,
		slog.String("id", c.connID),
		slog.String("request_id", id),
		slog.String("transport", "websocket"),
		slog.String("path", c.path),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(start)))
	attrs = appendUsageAttrs(attrs, u)
	c.s.log.LogAttrs(ctx, level, "request", attrs...)
}
