package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The Responses API's WebSocket mode, as OpenAI serves it on /v1/responses:
//
//	client → {"type":"response.create", ...the create body..., "stream_id":"a"?}
//	client → {"type":"response.cancel", "response_id":"resp_…"? , "stream_id":"a"?}
//	server → each event of the response, the very JSON of its SSE event
//	         (plus "stream_id" when the create named one)
//	server → {"type":"error","status":400,"error":{…},"stream_id"?,"sequence_number"?}
//
// Responses of one lane (one stream_id; none is a lane of its own) run one
// after the other in the order they were created, as OpenAI's WebSocket
// mode runs them; lanes run side by side. response.cancel is rill's, named
// after the Realtime API's: it stops the running response of a lane (or the
// one named by response_id), which then ends with an error event of status
// 499. The connection remembers its last completed response, whatever its
// store said, for previous_response_id, as OpenAI's does.
//
// The connection machinery (reading, limits, keepalive, the outgoing
// queue, shutdown) is wsConn's; this file is the protocol.

// maxStreamIDLen caps a stream_id, as OpenAI's SDKs do.
const maxStreamIDLen = 256

// responsesWS is the protocol state of one connection. Its methods are
// called by the connection's reader; lane goroutines are owned by the
// wsConn (its WaitGroup), and end with the connection's context.
type responsesWS struct {
	c *wsConn

	mu      sync.Mutex
	lanes   map[string]*responseLane // by stream_id; "" is the default lane
	pending int                      // responses queued or running
	last    *storedResponse          // the last completed response
}

// responseLane is one stream_id's queue. A goroutine runs its creates in
// order while the queue is not empty.
type responseLane struct {
	id      string
	queue   [][]byte // bodies waiting
	running *runningResponse
}

// runningResponse is a lane's response in progress.
type runningResponse struct {
	id        string // "" until the request is converted
	cancel    context.CancelFunc
	cancelled bool
}

func newResponsesWS(c *wsConn) *responsesWS {
	return &responsesWS{c: c, lanes: make(map[string]*responseLane)}
}

// responsesWSMessage is what the protocol reads of a client message; a
// create's body is the message itself (the schema ignores the extra type
// and stream_id members).
type responsesWSMessage struct {
	Type       json.RawMessage `json:"type"`
	StreamID   json.RawMessage `json:"stream_id"`
	ResponseID json.RawMessage `json:"response_id"`
}

// handle dispatches one client message. ctx is the connection's (for the
// answers), reqCtx the responses' parent.
func (w *responsesWS) handle(ctx, reqCtx context.Context, data []byte) {
	var m responsesWSMessage
	if firstByte(data) != '{' || json.Unmarshal(data, &m) != nil {
		if json.Valid(data) {
			w.reject(ctx, "", invalid("", "invalid_type", "A message must be a JSON object."))
		} else {
			w.reject(ctx, "", invalid("", "invalid_json", "We could not parse the JSON of your message."))
		}
		return
	}
	typ, e := stringMember(m.Type, "type", true)
	if e != nil {
		w.reject(ctx, "", e)
		return
	}
	streamID, e := stringMember(m.StreamID, "stream_id", false)
	if e == nil && !validStreamID(streamID) && !isNull(m.StreamID) {
		e = invalid("stream_id", "invalid_value",
			"Invalid value for 'stream_id': expected 1 to %d ASCII letters, digits, '_', '-' or '.'.", maxStreamIDLen)
	}
	if e != nil {
		w.reject(ctx, "", e)
		return
	}
	switch typ {
	case "response.create":
		w.create(ctx, reqCtx, streamID, data)
	case "response.cancel":
		responseID, e := stringMember(m.ResponseID, "response_id", false)
		if e != nil {
			w.reject(ctx, streamID, e)
			return
		}
		w.cancel(ctx, streamID, responseID)
	default:
		w.reject(ctx, streamID, invalid("type", "invalid_value",
			"Invalid value for 'type': %q; expected 'response.create' or 'response.cancel'.", clip(typ, maxEchoBytes)))
	}
}

// stringMember reads an optional (or, with required, mandatory) string member.
func stringMember(raw json.RawMessage, name string, required bool) (string, *apiError) {
	if isNull(raw) {
		if required {
			return "", invalid(name, "missing_required_parameter", "Missing required parameter: '%s'.", name)
		}
		return "", nil
	}
	var s string
	if firstByte(raw) != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalid(name, "invalid_type", "Invalid type for '%s': expected a string.", name)
	}
	return s, nil
}

// validStreamID reports whether id is 1 to maxStreamIDLen ASCII letters,
// digits, '_', '-' or '.'.
func validStreamID(id string) bool {
	if len(id) == 0 || len(id) > maxStreamIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// create queues body on its lane, and starts the lane if it is idle; the
// lane's responses run under reqCtx.
func (w *responsesWS) create(ctx, reqCtx context.Context, streamID string, body []byte) {
	w.mu.Lock()
	if w.pending >= w.c.s.wsReqs {
		w.mu.Unlock()
		w.reject(ctx, streamID, &apiError{Status: http.StatusTooManyRequests, Type: typeInvalidRequest,
			Code: "too_many_requests", Message: fmt.Sprintf(
				"This connection already has %d responses running or queued; wait for one to end or open another connection.", w.c.s.wsReqs)})
		return
	}
	if !w.c.s.beginWS() {
		w.mu.Unlock()
		w.reject(ctx, streamID, errDraining)
		return
	}
	w.pending++
	lane := w.lanes[streamID]
	if lane != nil {
		lane.queue = append(lane.queue, body)
		w.mu.Unlock()
		return
	}
	// An idle lane starts at once: a cancel read after this create finds
	// the response running.
	lane = &responseLane{id: streamID}
	w.lanes[streamID] = lane
	rctx, cancel := context.WithCancel(reqCtx)
	run := &runningResponse{cancel: cancel}
	lane.running = run
	w.mu.Unlock()
	w.c.wg.Go(func() { w.runLane(reqCtx, lane, rctx, run, body) })
}

// runLane runs the lane's responses one after the other, from the first
// (already marked running), until its queue is empty, then retires the
// lane. Once the connection ended, queued responses are dropped unrun.
func (w *responsesWS) runLane(ctx context.Context, lane *responseLane, rctx context.Context, run *runningResponse, body []byte) {
	for {
		if ctx.Err() == nil {
			w.run(rctx, lane.id, run, body)
		}
		run.cancel()
		w.c.s.endWS()

		w.mu.Lock()
		w.pending--
		lane.running = nil
		if len(lane.queue) == 0 {
			delete(w.lanes, lane.id)
			w.mu.Unlock()
			return
		}
		body = lane.queue[0]
		lane.queue = lane.queue[1:]
		var cancel context.CancelFunc
		rctx, cancel = context.WithCancel(ctx)
		run = &runningResponse{cancel: cancel}
		lane.running = run
		w.mu.Unlock()
	}
}

// cancel stops the running response named by responseID, or else the
// running response of the lane streamID.
func (w *responsesWS) cancel(ctx context.Context, streamID, responseID string) {
	w.mu.Lock()
	var target *runningResponse
	if responseID != "" {
		for _, lane := range w.lanes {
			if r := lane.running; r != nil && r.id == responseID {
				target = r
			}
		}
	} else if lane := w.lanes[streamID]; lane != nil {
		target = lane.running
	}
	if target != nil {
		target.cancelled = true
	}
	w.mu.Unlock()
	if target == nil {
		what := "on the default lane"
		switch {
		case responseID != "":
			what = fmt.Sprintf("with id '%s'", clip(responseID, maxEchoBytes))
		case streamID != "":
			what = fmt.Sprintf("on stream_id '%s'", streamID)
		}
		w.reject(ctx, streamID, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "response_not_found",
			Param: "response_id", Message: "No response " + what + " is in progress on this connection."})
		return
	}
	target.cancel()
}

// errResponseCancelled ends a response that a response.cancel stopped.
var errResponseCancelled = &apiError{Status: statusClientClosed, Type: typeInvalidRequest, Code: "response_cancelled",
	Message: "The response was cancelled by a response.cancel message."}

// run serves one response.create: start it as POST /v1/responses would,
// stream its events, remember and store it when it completed. ctx ends with
// a cancel or with the connection.
func (w *responsesWS) run(ctx context.Context, streamID string, run *runningResponse, body []byte) {
	start := time.Now()
	ctx, span := w.c.s.startWSSpan(ctx, w.c.path)
	ev := &wsEvents{out: w.c.out, stop: ctx.Done()}
	status := http.StatusOK
	var usage *Usage
	var model, responseID string
	var obs *requestMetrics
	defer func() {
		if v := recover(); v != nil {
			w.c.s.log.Error("websocket response panic", "id", w.c.connID, "panic", v)
			status = http.StatusInternalServerError
			ev.final(appendResponseWSError(nil, &apiError{Status: status, Type: typeServer, Message: "Internal server error."}, streamID, -1))
		}
		w.c.s.logAccess(context.Background(), &accessEntry{id: w.c.connID, wsRequestID: responseID, method: http.MethodGet,
			path: w.c.path, transport: "websocket", model: model, status: status, start: start,
			ttft: obs.timeToFirstToken(), bytes: -1, usage: usage, span: span})
	}()
	wasCancelled := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return run.cancelled
	}

	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	rp, g, e := w.c.s.startResponse(ctx, body, last)
	if e != nil {
		if wasCancelled() {
			e = errResponseCancelled
		}
		status = e.Status
		ev.final(appendResponseWSError(nil, e, streamID, -1))
		return
	}
	defer g.cancel()
	rp.streamID = streamID
	model, obs, responseID = g.model, g.obs, rp.id
	w.mu.Lock()
	run.id = rp.id
	w.mu.Unlock()

	enc := newResponseEncoder(rp, ev)
	u, st, err := rp.runResponse(ctx, g, enc, 0)
	usage = u
	switch {
	case err == nil:
		if rp.store {
			w.c.s.keep(ctx, st) // before st is shared: keep marks it stored
		}
		w.mu.Lock()
		w.last = st
		w.mu.Unlock()
	case wasCancelled():
		status = statusClientClosed
		ev.final(appendResponseWSError(nil, errResponseCancelled, streamID, enc.seq))
	case !isClientGone(err):
		status = fromEngine(err, g.model).Status // runResponse sent response.failed
	default:
		status = statusClientClosed // the connection ended: nobody is left to tell
	}
}

// reject answers a message with an error event, ahead of the responses'
// events.
func (w *responsesWS) reject(ctx context.Context, streamID string, e *apiError) {
	f := getFrame()
	f.b = appendResponseWSError(f.b, e, streamID, -1)
	_ = w.c.out.put(w.c.out.ctrl, f, ctx.Done())
}

// wsEvents is the eventWriter of one response on a connection: each event
// is one message, unchanged.
type wsEvents struct {
	out  *outbox
	stop <-chan struct{} // the response's context: a cancel or the connection's end
}

func (w *wsEvents) event(_ string, data []byte) error {
	f := getFrame()
	f.b = append(f.b, data...)
	return w.out.put(w.out.data, f, w.stop)
}

// ping is a no-op: the connection's ping frames keep it alive.
func (w *wsEvents) ping() error { return nil }

// final queues the last message of a response that could not run its
// course. It waits for room even when the response was cancelled, so that
// the client hears how it ended while the connection lasts.
func (w *wsEvents) final(data []byte) {
	f := getFrame()
	f.b = append(f.b, data...)
	_ = w.out.put(w.out.data, f, nil)
}

// appendResponseWSError appends the Responses API's WebSocket error event:
// {"type":"error","status":S,"error":{"message","type","param","code"}},
// with "stream_id" when the message named one and "sequence_number" when
// seq >= 0 (the error ends a response whose events had begun).
func appendResponseWSError(b []byte, e *apiError, streamID string, seq int) []byte {
	b = append(b, `{"type":"error"`...)
	if seq >= 0 {
		b = append(b, `,"sequence_number":`...)
		b = appendInt(b, seq)
	}
	if streamID != "" {
		b = append(b, `,"stream_id":`...)
		b = appendString(b, streamID)
	}
	b = append(b, `,"status":`...)
	b = appendInt(b, e.Status)
	b = append(b, `,"error":`...)
	b = e.appendObject(b)
	return append(b, '}')
}
