package service

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"rill/engine"
	"rill/store"
)

// Background responses (OpenAI's background mode): POST /v1/responses with
// "background": true answers at once, queued, and the generation runs on
// under a context the server owns, not the request's. Its events go to an
// event log (eventlog.go) under the response's id, from which
// GET /v1/responses/{id}?stream=true&starting_after=N replays and follows
// it; GET /v1/responses/{id} polls its object; POST …/cancel stops it.
// With "stream": true the creating request follows the log too, so that it
// streams as a normal request does, and the response survives its client
// leaving.

// errCancelRequested is the cause with which POST …/cancel ends a
// background response's context.
var errCancelRequested = errors.New("cancelled by request")

// detached are the generations the server runs for nobody's request:
// background responses, and resumable streams within their grace period.
// Shutdown ends them (see Drain and WaitConnections). Safe for concurrent
// use; its zero value is empty.
type detached struct {
	mu      sync.Mutex
	cancels map[string]context.CancelCauseFunc
	running inflight
}

// start gives id a context of its own, ended by cancel(id), by shutdown, or
// by the returned release, which the work must call when it ends.
func (d *detached) start(id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	d.mu.Lock()
	if d.cancels == nil {
		d.cancels = make(map[string]context.CancelCauseFunc)
	}
	d.cancels[id] = cancel
	d.mu.Unlock()
	d.running.add()
	return ctx, func() {
		d.mu.Lock()
		delete(d.cancels, id)
		d.mu.Unlock()
		cancel(nil)
		d.running.done()
	}
}

// cancel ends id's context with cause; it reports whether id runs here.
func (d *detached) cancel(id string, cause error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.cancels[id]
	if ok {
		c(cause)
	}
	return ok
}

// cancelAll ends every context with cause.
func (d *detached) cancelAll(cause error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.cancels {
		c(cause)
	}
}

// backgroundRecord is a background response's store.Stream.Data: what GET,
// cancel and input_items answer while it has no stored response (running,
// cancelled or failed). Its field names are a stored format.
type backgroundRecord struct {
	Response json.RawMessage   `json:"response"`
	Input    []json.RawMessage `json:"input,omitempty"`
}

func encodeBackground(obj []byte, input []json.RawMessage) []byte {
	b, err := json.Marshal(backgroundRecord{Response: obj, Input: input})
	if err != nil {
		panic("service: a response object is not JSON: " + err.Error()) // the encoder's bug
	}
	return b
}

// logEvents is the eventWriter of a background response: its log. Events
// are numbered as the encoder numbers them, from 0.
type logEvents struct {
	l     *eventLog
	seq   int64
	input []json.RawMessage
}

func (w *logEvents) event(typ string, data []byte) error {
	w.l.append(w.seq, data)
	w.seq++
	if typ == "response.in_progress" {
		// What a poll answers from now on.
		var ev struct {
			Response json.RawMessage `json:"response"`
		}
		if json.Unmarshal(data, &ev) == nil {
			w.l.update(statusInProgress, encodeBackground(ev.Response, w.input))
		}
	}
	return nil
}

func (w *logEvents) ping() error { return nil }

// createBackground serves a background POST /v1/responses: it starts the
// generation under a context of its own and answers with the queued
// response, or follows its events when stream is set.
func (s *Server) createBackground(w http.ResponseWriter, r *http.Request, info *requestInfo, rp *responseJob, begun time.Time) {
	if s.isDraining() {
		writeError(w, errDraining)
		return
	}
	ctx, release := s.bg.start(rp.id)
	g, e := s.launch(ctx, rp.job, rp.id, begun)
	if e != nil {
		release()
		s.fail(w, r, info, responsesError(e))
		return
	}
	info.model = g.model
	enc := newResponseEncoder(rp, nil)
	enc.status = statusQueued
	obj := enc.response()
	l, err := s.logs.open(r.Context(), rp.id, statusQueued, encodeBackground(obj, rp.inputItems()))
	if err != nil {
		g.cancel()
		release()
		s.log.LogAttrs(r.Context(), slog.LevelError, "background response: store failed",
			slog.String("response", rp.id), slog.Any("err", err))
		writeError(w, storeFailed())
		return
	}
	enc.w = &logEvents{l: l, input: rp.inputItems()}
	l.whenCancelled(func() { s.bg.cancel(rp.id, errCancelRequested) })
	b := &backgroundRun{s: s, ctx: ctx, rp: rp, g: g, enc: enc, l: l, release: release}
	// Its opening events go to the log before a streaming creator first
	// looks at it (logSteps.events).
	b.rs = rp.newResponseStream(ctx, g, enc, 0)
	b.genPump.start(&s.waits, b.rs, b.finish)
	if !rp.stream {
		writeJSON(w, r, append(obj, '\n'))
		return
	}
	s.streamLog(w, r, info, rp.id, -1)
}

// backgroundRun is a background response's generation, run by genPump
// (no goroutine while it waits for its engine) to its end, which finish
// writes to its log; it owns g and calls release when done.
type backgroundRun struct {
	s       *Server
	ctx     context.Context // the response's own
	rp      *responseJob
	g       *generation
	enc     *responseEncoder
	l       *eventLog
	release func()
	rs      *responseStream
	genPump
}

// finish ends the response: its status from how it ended, its log's end,
// the log written (a while), the line in the log.
func (b *backgroundRun) finish(u *Usage, err error) {
	s, ctx, rp, g, enc, l := b.s, b.ctx, b.rp, b.g, b.enc, b.l
	defer b.release()
	defer g.cancel()
	st := b.rs.st
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		if rp.store {
			s.keep(ctx, st)
		}
	case errors.Is(cause, errCancelRequested):
		enc.status = statusCancelled
	case errors.Is(cause, ErrShutdown):
		_ = enc.fail(errShutdownCut)
	case enc.status == statusInProgress:
		// Not an engine error (the stream sent response.failed for
		// those): the encoder's own failure.
		_ = enc.fail(fromEngine(err, g.model))
	}
	l.end(enc.status, encodeBackground(enc.response(), rp.inputItems()))
	// The work ends when its log is in the store: shutdown, which waits
	// for it, must not lose the last events.
	wctx, cancel := context.WithTimeout(context.Background(), 2*storeWait)
	_ = l.wait(wctx)
	cancel()
	attrs := []slog.Attr{slog.String("response", rp.id), slog.String("model", g.model), slog.String("status", enc.status)}
	if u != nil {
		attrs = append(attrs, slog.Int("prompt_tokens", u.PromptTokens), slog.Int("completion_tokens", u.CompletionTokens))
	}
	if err != nil && enc.status == statusFailed {
		attrs = append(attrs, slog.Any("err", err))
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "background response ended", attrs...)
}

// getParams are the query (or, as openai-go sends them on a GET, body)
// parameters of GET /v1/responses/{id}.
type getParams struct {
	Stream        bool   `json:"stream"`
	StartingAfter *int64 `json:"starting_after"`
}

// readGetParams reads them; a Last-Event-ID header (an EventSource that
// reconnects) stands for starting_after.
func (s *Server) readGetParams(w http.ResponseWriter, r *http.Request) (getParams, *apiError) {
	var p getParams
	if r.ContentLength != 0 && r.Body != nil {
		body, e := s.readBody(w, r)
		if e != nil {
			return p, e
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &p); err != nil {
				return p, invalid("", "invalid_json", "The request body is not valid JSON: %v", err)
			}
		}
	}
	q := r.URL.Query()
	if v := q.Get("stream"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return p, invalid("stream", "invalid_type", "Invalid value for 'stream': expected true or false.")
		}
		p.Stream = b
	}
	after := q.Get("starting_after")
	param := "starting_after"
	if after == "" && r.Header.Get("Last-Event-ID") != "" {
		after, param = r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if after != "" {
		n, err := strconv.ParseInt(after, 10, 64)
		if err != nil || n < -1 {
			return p, invalid(param, "invalid_value", "Invalid value for '%s': expected a sequence number.", param)
		}
		p.StartingAfter = &n
	}
	return p, nil
}

// handleGetResponse serves GET /v1/responses/{id}: the stored response, or
// a background response as it stands; with stream, its events.
func (s *Server) handleGetResponse(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	id := strings.TrimPrefix(r.URL.Path, pathResponses+"/")
	p, e := s.readGetParams(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	if p.Stream {
		after := int64(-1)
		if p.StartingAfter != nil {
			after = *p.StartingAfter
		}
		s.streamLog(w, r, info, id, after)
		return
	}
	obj, _, err := s.responseObject(r.Context(), id)
	if err != nil {
		s.storeError(w, r, id, err)
		return
	}
	writeJSON(w, r, append(obj[:len(obj):len(obj)], '\n'))
}

// responseObject returns response id as it stands, and its input items:
// the stored response, or else a background response's record.
func (s *Server) responseObject(ctx context.Context, id string) ([]byte, []json.RawMessage, error) {
	st, err := s.responses.one(ctx, id)
	if err == nil {
		return st.body, st.inputItems, nil
	}
	if !isNotFound(err) || s.logs == nil {
		return nil, nil, err
	}
	rec, _, err := s.backgroundRecord(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return rec.Response, rec.Input, nil
}

// backgroundRecord reads background response id's stream. A response
// whose process died while it ran (not live here, and its stream not
// updated for staleAfter) is answered failed: nobody will finish it.
func (s *Server) backgroundRecord(ctx context.Context, id string) (backgroundRecord, string, error) {
	var rec backgroundRecord
	stream, err := s.logs.st.GetStream(ctx, id)
	if err != nil {
		return rec, "", err
	}
	if err := json.Unmarshal(stream.Data, &rec); err != nil || len(rec.Response) == 0 {
		// A stream of another kind under this id (a chat stream's): not
		// a response.
		return rec, "", store.ErrNotFound
	}
	if !isFinal(stream.Status) && time.Since(stream.Updated) > staleAfter && s.logs.lookup(id) == nil {
		if obj, ok := markLost(rec.Response); ok {
			return backgroundRecord{Response: obj, Input: rec.Input}, statusFailed, nil
		}
	}
	return rec, stream.Status, nil
}

// markLost returns response object obj failed, with the error that says its
// server stopped.
func markLost(obj []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return nil, false
	}
	m["status"] = json.RawMessage(`"failed"`)
	m["error"] = json.RawMessage(`{"code":"server_error","message":"The server that ran this response stopped before it finished; retry it."}`)
	out, err := json.Marshal(m)
	return out, err == nil
}

// streamLog streams the events of background response id after seq after,
// live until it ends, as `id: <sequence_number>`, `event: <type>` and
// `data: <event>` per event, so that a client that drops may resume with
// Last-Event-ID or starting_after.
func (s *Server) streamLog(w http.ResponseWriter, r *http.Request, info *requestInfo, id string, after int64) {
	if s.logs == nil {
		writeError(w, responseNotFound(id, false))
		return
	}
	// The store, not the live logs, says what id is: a resumable chat
	// stream's log is not a response's.
	if _, _, err := s.backgroundRecord(r.Context(), id); err != nil {
		if isNotFound(err) {
			if _, err2 := s.responses.one(r.Context(), id); err2 == nil {
				writeError(w, invalid("stream", "invalid_request",
					"Response '%s' was not created with background: true; only background responses can be streamed.", clip(id, maxEchoBytes)))
				return
			}
		}
		s.storeError(w, r, id, err)
		return
	}
	if l := s.logs.lookup(id); l != nil {
		// Live here: followed as a resumable stream's creator follows its
		// log (it may detach).
		ctx, dt, release := s.sseContext(r)
		sw := newSSEWriter(w)
		sink := &sseLogSink{ctx: ctx, sw: sw, l: l, responses: true}
		detached := s.streamSSE(w, r, info, dt, nil, newLogSteps(ctx, l, nil, sink, after, s.ping, s.pings), sw,
			sseAnswer{fail: func(e *apiError) error { return writeResponsesStreamError(sw, cmp.Or(e.Code, e.Type), e.Message) },
				settle: func(u *Usage, err error) { sink.settle(info, u, err) }})
		release(detached)
		return
	}
	sw := newSSEWriter(w)
	if err := sw.start(); err != nil {
		s.transportFailed(r, info, err)
		return
	}
	var wrote error // a write to the client failed: it left, or stopped reading
	_, _, err := s.logs.follow(r.Context(), id, after, s.ping, func(ev store.Event) error {
		sw.buf = appendLogEvent(sw.buf[:0], ev, true)
		wrote = sw.write()
		return wrote
	}, func() error {
		wrote = sw.ping()
		return wrote
	})
	switch {
	case err == nil:
	case wrote == nil && isShutdown(r.Context()):
		// The client is still there: tell it why its stream ends here (the
		// response runs on until the shutdown cuts it, and may be polled).
		info.status, info.reason = errShutdownCut.Status, reasonShutdown
		_ = writeResponsesStreamError(sw, "server_shutting_down", errShutdownCut.Message)
	case wrote != nil || r.Context().Err() != nil:
		s.transportFailed(r, info, err)
	case errors.Is(err, errStreamLost):
		_ = writeResponsesStreamError(sw, "stream_lost", "The server that ran this response stopped before it ended.")
	default:
		s.log.LogAttrs(r.Context(), slog.LevelError, "response stream failed", slog.String("response", id), slog.Any("err", err))
	}
}

// writeResponsesStreamError writes the error event with which a followed
// Responses stream ends early: `event: error` and the Responses API's
// streamed error object.
func writeResponsesStreamError(sw *sseWriter, code, message string) error {
	sw.buf = append(sw.buf[:0], "event: error\ndata: "...)
	sw.buf = append(sw.buf, `{"type":"error","code":`...)
	sw.buf = appendString(sw.buf, code)
	sw.buf = append(sw.buf, `,"message":`...)
	sw.buf = appendString(sw.buf, message)
	sw.buf = append(sw.buf, `,"param":null}`+"\n\n"...)
	return sw.write()
}

// appendLogEvent frames a Responses event of a log for SSE: its id, its
// type (the event's "type", which every event begins with) and its data.
func appendLogEvent(b []byte, ev store.Event, responses bool) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	if responses {
		if rest, ok := bytes.CutPrefix(ev.Data, []byte(`{"type":"`)); ok {
			if i := bytes.IndexByte(rest, '"'); i > 0 {
				b = append(b, "\nevent: "...)
				b = append(b, rest[:i]...)
			}
		}
	}
	b = append(b, "\ndata: "...)
	b = append(b, ev.Data...)
	return append(b, '\n', '\n')
}

// handleCancelResponse serves POST /v1/responses/{id}/cancel: a running
// background response stops, and the answer is the response cancelled; a
// background response that had ended is answered as it is (cancelling is
// idempotent); a response that was not a background one is a 400.
func (s *Server) handleCancelResponse(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, pathResponses+"/"), "/cancel")
	if s.logs == nil {
		writeError(w, responseNotFound(id, false))
		return
	}
	rec, status, err := s.backgroundRecord(r.Context(), id)
	if err == nil && !isFinal(status) {
		if l := s.logs.lookup(id); l != nil && s.bg.cancel(id, errCancelRequested) {
			if err := l.wait(r.Context()); err != nil {
				return // the client left
			}
		} else if err := s.cancelElsewhere(r.Context(), id); err != nil {
			if r.Context().Err() == nil {
				s.storeError(w, r, id, err)
			}
			return
		}
		rec, status, err = s.backgroundRecord(r.Context(), id)
	}
	var obj []byte
	switch {
	case err == nil:
		obj = rec.Response
	case !isNotFound(err):
		s.storeError(w, r, id, err)
		return
	}
	if obj == nil {
		st, err := s.responses.one(r.Context(), id)
		if err != nil {
			s.storeError(w, r, id, err)
			return
		}
		var b struct {
			Background bool `json:"background"`
		}
		if json.Unmarshal(st.body, &b) != nil || !b.Background {
			writeError(w, invalid("", "invalid_request", "Only responses created with background: true can be cancelled."))
			return
		}
		obj, status = st.body, statusCompleted
	}
	if !isFinal(status) {
		// Its process did not answer the request in time.
		writeError(w, &apiError{Status: http.StatusConflict, Type: typeInvalidRequest, Code: "response_elsewhere",
			Message: fmt.Sprintf("Response '%s' runs on another server of this deployment, which has not cancelled it yet; retry.", clip(id, maxEchoBytes))})
		return
	}
	writeJSON(w, r, append(obj[:len(obj):len(obj)], '\n'))
}

// cancelWait bounds how long a cancel waits for another process to stop
// the response it runs.
const cancelWait = 10 * time.Second

// cancelElsewhere asks the process that runs background response id to
// cancel it (it looks every cancelPoll) and waits, bounded by cancelWait,
// until its stream ended.
func (s *Server) cancelElsewhere(ctx context.Context, id string) error {
	if err := s.logs.requestCancel(ctx, id); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	for {
		st, err := s.logs.st.GetStream(wctx, id)
		switch {
		case err != nil && wctx.Err() != nil && ctx.Err() == nil:
			return nil // the caller reads the status again and answers
		case err != nil:
			return err
		case isFinal(st.Status) || time.Since(st.Updated) > staleAfter:
			return nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		case <-time.After(pollInterval):
		}
	}
}

// inputItems is the job's input as GET …/input_items lists it: messages
// (input_text, or output_text for the assistant's), function_call and
// function_call_output items, each with an id of its own, made once.
func (rp *responseJob) inputItems() []json.RawMessage {
	if rp.inputList != nil {
		return rp.inputList
	}
	out := []json.RawMessage{}
	for _, m := range rp.input {
		switch {
		case m.Role == engine.RoleTool:
			b := append([]byte(`{"id":`), appendString(nil, newObjectID("fco_"))...)
			b = append(b, `,"type":"function_call_output","call_id":`...)
			b = appendString(b, m.ToolCallID)
			b = append(b, `,"output":`...)
			b = appendString(b, m.Content)
			out = append(out, append(b, `,"status":"completed"}`...))
			continue
		case m.Role == engine.RoleAssistant:
			if m.Content != "" {
				b := append([]byte(`{"id":`), appendString(nil, newObjectID("msg_"))...)
				b = append(b, `,"type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":`...)
				b = appendString(b, m.Content)
				out = append(out, append(b, `,"annotations":[]}]}`...))
			}
			for _, c := range m.ToolCalls {
				b := append([]byte(`{"id":`), appendString(nil, newObjectID("fc_"))...)
				b = append(b, `,"type":"function_call","status":"completed","call_id":`...)
				b = appendString(b, c.ID)
				b = append(b, `,"name":`...)
				b = appendString(b, c.Name)
				b = append(b, `,"arguments":`...)
				b = appendString(b, c.Arguments)
				out = append(out, append(b, '}'))
			}
			continue
		}
		b := append([]byte(`{"id":`), appendString(nil, newObjectID("msg_"))...)
		b = append(b, `,"type":"message","role":`...)
		b = appendString(b, string(m.Role))
		b = append(b, `,"status":"completed","content":[{"type":"input_text","text":`...)
		b = appendString(b, m.Content)
		out = append(out, append(b, `}]}`...))
	}
	rp.inputList = out
	return out
}

// handleInputItems serves GET /v1/responses/{id}/input_items: a page of the
// response's input items, as OpenAI lists them: order (desc by default)
// by position, after an item id, at most limit (1 to 100, 20 by default).
func (s *Server) handleInputItems(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, pathResponses+"/"), "/input_items")
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, invalid("limit", "invalid_value", "Invalid value for 'limit': expected an integer from 1 to 100."))
			return
		}
		limit = n
	}
	order := q.Get("order")
	switch order {
	case "":
		order = "desc"
	case "asc", "desc":
	default:
		writeError(w, invalid("order", "invalid_value", "Invalid value for 'order': expected 'asc' or 'desc'."))
		return
	}
	_, items, err := s.responseObject(r.Context(), id)
	if err != nil {
		s.storeError(w, r, id, err)
		return
	}
	ids := make([]string, len(items))
	for i, it := range items {
		var v struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(it, &v)
		ids[i] = v.ID
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
		if order == "desc" {
			idx[i] = len(items) - 1 - i
		}
	}
	start := 0
	if after := q.Get("after"); after != "" {
		start = -1
		for k, i := range idx {
			if ids[i] == after {
				start = k + 1
				break
			}
		}
		if start < 0 {
			writeError(w, invalid("after", "invalid_value", "No input item with id '%s' in response '%s'.",
				clip(after, maxEchoBytes), clip(id, maxEchoBytes)))
			return
		}
	}
	page := idx[start:]
	more := len(page) > limit
	if more {
		page = page[:limit]
	}
	b := []byte(`{"object":"list","data":[`)
	for k, i := range page {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, items[i]...)
	}
	b = append(b, `],"first_id":`...)
	if len(page) > 0 {
		b = appendString(b, ids[page[0]])
		b = append(b, `,"last_id":`...)
		b = appendString(b, ids[page[len(page)-1]])
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, more)
	writeJSON(w, r, append(b, "}\n"...))
}
