package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
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

	mu sync.Mutex
	// lanes have a response queued or running, a few at a time (at most
	// Options.WSMaxRequests), searched in turn: a map's table would cost
	// some 200 bytes from its first lane for the connection's life.
	lanes   []*responseLane
	pending int             // responses queued or running
	last    *storedResponse // the last completed response
}

// lane is the lane of stream_id id ("" is the default lane); nil when it
// has nothing queued or running. w.mu is held.
func (w *responsesWS) lane(id string) *responseLane {
	for _, l := range w.lanes {
		if l.id == id {
			return l
		}
	}
	return nil
}

// retire takes lane off; w.mu is held.
func (w *responsesWS) retire(lane *responseLane) {
	if i := slices.Index(w.lanes, lane); i >= 0 {
		w.lanes = slices.Delete(w.lanes, i, i+1)
	}
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
	id        string                  // "" until the request is converted
	cancel    context.CancelCauseFunc // its context's
	cancelled bool
}

// cancelWith cancels the response: it is a member of its connection's
// requests' group.
func (r *runningResponse) cancelWith(cause error) { r.cancel(cause) }

func newResponsesWS(c *wsConn) *responsesWS {
	return &responsesWS{c: c}
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
// answers).
func (w *responsesWS) handle(ctx context.Context, data []byte) {
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
		w.create(ctx, streamID, data)
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

// create queues body on its lane, and starts the lane if it is idle.
func (w *responsesWS) create(ctx context.Context, streamID string, body []byte) {
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
	lane := w.lane(streamID)
	if lane != nil {
		lane.queue = append(lane.queue, body)
		w.mu.Unlock()
		return
	}
	// An idle lane starts at once: a cancel read after this create finds
	// the response running.
	lane = &responseLane{id: streamID}
	w.lanes = append(w.lanes, lane)
	rctx, run := w.newRun()
	lane.running = run
	w.mu.Unlock()
	w.c.wg.Go(func() { w.runLane(lane, rctx, run, body) })
}

// newRun makes a response's books and its context, which its cancel, and
// the connection's requests' group, cancel.
func (w *responsesWS) newRun() (context.Context, *runningResponse) {
	rctx, cancel := context.WithCancelCause(w.c.values)
	run := &runningResponse{cancel: cancel}
	w.c.group.add(run)
	return rctx, run
}

// runLane runs the lane's responses one after the other, from the first
// (already marked running), until its queue is empty, then retires the
// lane. Once the connection ended, queued responses are dropped unrun. A
// response that parks its wait for the engine (responseTask.pump) takes
// the lane with it: runLane returns, and the goroutine that streams the
// response on runs the rest of the lane (goOn).
func (w *responsesWS) runLane(lane *responseLane, rctx context.Context, run *runningResponse, body []byte) {
	for {
		if w.c.group.err() == nil {
			t := w.newTask(lane, rctx, run)
			if !t.guard(func() bool { return t.begin(body) }) {
				return // parked
			}
		}
		var ok bool
		if rctx, run, body, ok = w.advance(lane, run); !ok {
			return
		}
	}
}

// advance ends the lane's running response and takes its next one off the
// queue, with its context and its books; ok false: the queue was empty,
// and the lane is retired.
func (w *responsesWS) advance(lane *responseLane, run *runningResponse) (rctx context.Context, next *runningResponse, body []byte, ok bool) {
	w.c.group.remove(run)
	run.cancel(nil)
	w.c.s.endWS()

	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending--
	lane.running = nil
	if len(lane.queue) == 0 {
		w.retire(lane)
		return nil, nil, nil, false
	}
	body = lane.queue[0]
	lane.queue = lane.queue[1:]
	rctx, next = w.newRun()
	lane.running = next
	return rctx, next, body, true
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
	} else if lane := w.lane(streamID); lane != nil {
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
	target.cancel(nil)
}

// errResponseCancelled ends a response that a response.cancel stopped.
var errResponseCancelled = &apiError{Status: statusClientClosed, Type: typeInvalidRequest, Code: "response_cancelled",
	Message: "The response was cancelled by a response.cancel message."}

// responseTask is one response.create in flight, on the heap so that its
// stream can go on from one goroutine to the next, as wsTask is chat's:
// start it as POST /v1/responses would, stream its events, remember and
// store it when it completed. Its context ends with a cancel or with the
// connection; it holds it because its wait outlives the call that made it.
// Its parts run one at a time.
type responseTask struct {
	w     *responsesWS
	lane  *responseLane
	ctx   context.Context
	run   *runningResponse
	begun time.Time
	span  trace.Span
	ev    *wsEvents

	status     int
	usage      *Usage
	model      string
	responseID string
	obs        *requestMetrics
	g          *generation // nil until started
	steps      *responseStream
}

func (w *responsesWS) newTask(lane *responseLane, rctx context.Context, run *runningResponse) *responseTask {
	begun := time.Now()
	ctx, span := w.c.s.startWSSpan(rctx, w.c.path)
	return &responseTask{w: w, lane: lane, ctx: ctx, run: run, begun: begun, span: span,
		ev: &wsEvents{out: w.c.out, stop: ctx.Done()}, status: http.StatusOK}
}

// guard runs f, a part of the response, and ends the response when f
// reports it over or panics (an error event of status 500 to the client).
func (t *responseTask) guard(f func() (over bool)) (over bool) {
	over = true
	defer func() {
		if v := recover(); v != nil {
			t.w.c.s.log.Error("websocket response panic", "id", t.w.c.connID, "panic", v)
			t.status = http.StatusInternalServerError
			t.ev.final(appendResponseWSError(nil, &apiError{Status: t.status, Type: typeServer, Message: "Internal server error."}, t.lane.id, -1))
			over = true
		}
		if over {
			t.end()
		}
	}()
	return f()
}

// end stops the engine and logs the response.
func (t *responseTask) end() {
	if t.g != nil {
		t.g.cancel()
	}
	t.w.c.s.logAccess(context.Background(), &accessEntry{id: t.w.c.connID, wsRequestID: t.responseID, method: http.MethodGet,
		path: t.w.c.path, transport: "websocket", model: t.model, status: t.status, start: t.begun,
		ttft: t.obs.timeToFirstToken(), bytes: -1, usage: t.usage, span: t.span})
}

func (t *responseTask) wasCancelled() bool {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	return t.run.cancelled
}

// begin starts the response and streams it, up to its end or to its
// first long wait for the engine; it reports whether the response is over.
func (t *responseTask) begin(body []byte) bool {
	w := t.w
	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	// Apart: the start grows a goroutine's stack, which the one that
	// streams would keep for the response's life.
	type started struct {
		rp *responseJob
		g  *generation
	}
	st, e := apart(func() (started, *apiError) {
		rp, g, e := w.c.s.startResponse(t.ctx, body, last)
		return started{rp, g}, e
	})
	if e != nil {
		if t.wasCancelled() {
			e = errResponseCancelled
		}
		t.status = e.Status
		t.ev.final(appendResponseWSError(nil, e, t.lane.id, -1))
		return true
	}
	rp, g := st.rp, st.g
	t.g = g
	rp.streamID = t.lane.id
	t.model, t.obs, t.responseID = g.model, g.obs, rp.id
	w.mu.Lock()
	t.run.id = rp.id
	w.mu.Unlock()
	t.steps = rp.newResponseStream(t.ctx, g, newResponseEncoder(rp, t.ev), 0)
	return t.pump()
}

// pump streams what the engine has ready, waiting for more up to
// wsWaitInline at a time; a longer wait is parked, as wsTask.pump parks
// chat's, and pump reports the response not over.
func (t *responseTask) pump() bool {
	for {
		over, u, err := t.steps.next()
		if over {
			t.settle(u, err)
			return true
		}
		if !t.steps.waitFor(wsWaitInline) {
			t.park()
			return false
		}
	}
}

// park hands the response's wait, and its lane, to the server's waitPool
// (a fresh goroutine of its own when the pool cannot wait for it); the
// connection counts the wait (c.wg).
func (t *responseTask) park() {
	c := t.w.c
	on, ok := t.steps.parkable()
	if !ok {
		c.wg.Go(func() {
			t.steps.wait()
			t.goOn()
		})
		return
	}
	c.wg.Add(1)
	c.s.waits.park(on, func() {
		defer c.wg.Done()
		t.goOn()
	})
}

// goOn streams the response on after a wait, and then the rest of its
// lane.
func (t *responseTask) goOn() {
	if !t.guard(t.pump) {
		return // parked again
	}
	if rctx, run, body, ok := t.w.advance(t.lane, t.run); ok {
		t.w.runLane(t.lane, rctx, run, body)
	}
}

// settle records how the response ended: remembered (and stored) when it
// completed, and an error event when it was cancelled.
func (t *responseTask) settle(u *Usage, err error) {
	t.usage = u
	switch {
	case err == nil:
		st := t.steps.st
		if t.steps.rp.store {
			t.w.c.s.keep(t.ctx, st) // before st is shared: keep marks it stored
		}
		t.w.mu.Lock()
		t.w.last = st
		t.w.mu.Unlock()
	case t.wasCancelled():
		t.status = statusClientClosed
		t.ev.final(appendResponseWSError(nil, errResponseCancelled, t.lane.id, t.steps.enc.seq))
	case !isClientGone(err):
		t.status = fromEngine(err, t.g.model).Status // next sent response.failed
	default:
		t.status = statusClientClosed // the connection ended: nobody is left to tell
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
