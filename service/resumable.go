package service

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"rill/store"
)

// Resumable streams (an extension): a streamed chat or completions request
// with "stream_options": {"resumable": true} runs under a context the
// server owns, its chunks go to an event log (eventlog.go), and its SSE
// events carry `id: <seq>` (from 0). A client that dropped reconnects with
// GET /v1/chat/completions/{id} (or /v1/completions/{id}), id being the
// chunks' id, and Last-Event-ID: N (or ?last_event_id=N): the stream
// continues after event N, with no gap and no duplicate, from this process
// or from another that shares the store. Nobody following, the generation
// goes on for the grace period (Options.ResumeGrace), then stops and frees
// its KV; the usage of a resumed stream is that of one that never dropped.

// DefaultResumeGrace is how long a resumable stream nobody follows runs on
// when Options.ResumeGrace is 0.
const DefaultResumeGrace = 30 * time.Second

// errAbandoned is the cause that ends a resumable stream's generation when
// its grace period passed with nobody following it.
var errAbandoned = errors.New("resumable stream abandoned: nobody followed it for the grace period")

// errAbandonedCut is the last event of a stream so ended, for a client that
// comes back after all.
var errAbandonedCut = &apiError{Status: http.StatusGone, Type: typeInvalidRequest, Code: "stream_abandoned",
	Message: "The stream was stopped: nobody followed it for the server's grace period."}

// chatStreamRecord is a resumable stream's store.Stream.Data: which API's
// stream it is (its chunks' object), so that a GET on another path does
// not serve it. Its field names are a stored format.
type chatStreamRecord struct {
	Object string `json:"object"`
}

// logChunks is the chunkWriter of a resumable stream: its log. Chunks and
// a failure's error are events, numbered from 0; done is the log's end,
// which its runner writes.
type logChunks struct {
	l   *eventLog
	seq int64
	buf []byte
}

func (w *logChunks) chunk(data []byte) error {
	w.l.append(w.seq, data)
	w.seq++
	return nil
}

func (w *logChunks) ping() error { return nil }

func (w *logChunks) fail(e *apiError) error {
	w.buf = e.appendJSON(w.buf[:0])
	return w.chunk(w.buf)
}

func (w *logChunks) done() error { return nil }

// chunkObject is the object of the chunks of a job's stream.
func chunkObject(p *job) string {
	if p.kind == kindCompletion {
		return "text_completion"
	}
	return "chat.completion.chunk"
}

// resumableRun is a resumable stream started: its id and log, which the
// starter follows (it counts as a follower until it leaves), and its
// generation, which runs apart under a context of its own (ctx), writing
// to the log (genPump), and reports its usage when it ends.
type resumableRun struct {
	id    string
	model string
	l     *eventLog

	s       *Server
	ctx     context.Context // the generation's, the server's own
	g       *generation
	release func()
	w       logChunks
	genPump
	u atomic.Pointer[Usage] // set as the generation ends (usage)
}

// startResumable starts a resumable stream of p: its generation under a
// context of its own, writing to a log. The caller follows the log and
// then calls run.l.leave.
func (s *Server) startResumable(ctx context.Context, p *job, begun time.Time) (*resumableRun, *apiError) {
	if s.logs == nil {
		return nil, invalid("stream_options.resumable", "invalid_request",
			"Resumable streams need the store; this server stores nothing (--responses-store 0).")
	}
	if s.isDraining() {
		return nil, errDraining
	}
	// A random id: whoever knows it may read the stream.
	id := newObjectID(wirePrefix(p))
	gctx, release := s.bg.start(id)
	// Under the stream's own context, which its generation alone uses
	// (finish ends it).
	g, e := s.launchUnder(gctx, nil, p, id, begun)
	if e != nil {
		release()
		return nil, e
	}
	data, _ := json.Marshal(chatStreamRecord{Object: chunkObject(p)})
	l, err := s.logs.open(ctx, id, statusInProgress, data)
	if err != nil {
		g.cancel()
		release()
		s.log.LogAttrs(ctx, slog.LevelError, "resumable stream: store failed", slog.String("stream", id), slog.Any("err", err))
		return nil, storeFailed()
	}
	// The starter follows from the start: counted before the grace
	// period is armed, which a zero grace would end at once.
	l.join()
	l.whenAbandoned(s.resumeGrace, func() { s.bg.cancel(id, errAbandoned) })
	r := &resumableRun{id: id, model: g.model, l: l, s: s, ctx: gctx, g: g, release: release, w: logChunks{l: l}}
	// The opening chunks go to the log before its starter first looks at
	// it: what it finds then does not say that the stream flows
	// (logSteps.events).
	r.genPump.start(&s.waits, g.newChunkStream(gctx, &r.w, 0), r.finish)
	return r, nil
}

// usage is the stream's usage once its generation ended, else nil: set
// before the log ends, so that a follower that saw the end sees it.
func (r *resumableRun) usage() *Usage { return r.u.Load() }

// generateResumable serves a resumable streamed request over SSE, its
// starter following its log from the start; ctx and dt are the handler's
// sseContext. It reports whether the stream detached (ssedetach.go).
func (s *Server) generateResumable(w http.ResponseWriter, r *http.Request, info *requestInfo, ctx context.Context,
	dt *sseDetach, p *job, begun time.Time) (detached bool) {
	run, e := s.startResumable(ctx, p, begun)
	if e != nil {
		s.fail(w, r, info, e)
		return false
	}
	// Not info.obs: the generation's metrics are its goroutine's, which
	// may outlive this request.
	info.model = run.model
	sw := newSSEWriter(w)
	sink := &sseLogSink{ctx: ctx, sw: sw, l: run.l}
	st := newLogSteps(ctx, run.l, run, sink, -1, s.ping, s.pings)
	run.l.leave() // the starter's join, which st took over
	return s.streamSSE(w, r, info, dt, nil, st, sw, sseAnswer{fail: sw.fail,
		settle: func(u *Usage, err error) { sink.settle(info, u, err) }})
}

// finish ends the log with how the generation ended, hands on its usage
// and waits (a while) for the log to be written.
func (r *resumableRun) finish(u *Usage, err error) {
	defer r.release()
	status := statusCompleted
	cause := context.Cause(r.ctx)
	switch {
	case err == nil:
	case errors.Is(cause, ErrShutdown):
		_ = r.w.fail(errShutdownCut)
		status = statusFailed
	case errors.Is(cause, errAbandoned):
		_ = r.w.fail(errAbandonedCut)
		status = statusCancelled
	default:
		status = statusFailed // next sent the engine's error
	}
	// The engine stops now, if it has not, while the log is written.
	r.s.bg.cancel(r.id, context.Canceled)
	r.u.Store(u)
	r.l.end(status, nil)
	wctx, cancel := context.WithTimeout(context.Background(), 2*storeWait)
	_ = r.l.wait(wctx)
	cancel()
	if status != statusCompleted {
		r.s.log.LogAttrs(context.Background(), slog.LevelInfo, "resumable stream ended early",
			slog.String("stream", r.g.id), slog.String("status", status), slog.Any("err", err))
	}
}

// wirePrefix is the id prefix of a job's chunks.
func wirePrefix(p *job) string {
	if p.kind == kindCompletion {
		return "cmpl-"
	}
	return "chatcmpl-"
}

// followChunks streams resumable stream id's chunks after event after to
// the client, as `id: <seq>` and `data: <chunk>` per event, then
// `data: [DONE]` if it completed. A stream live in this process is
// followed as its starter follows it (logSteps; it may detach), one of
// another process by polling the store. It reports whether the stream
// detached.
func (s *Server) followChunks(w http.ResponseWriter, r *http.Request, info *requestInfo, id string, after int64) bool {
	if l := s.logs.lookup(id); l != nil {
		ctx, dt, release := s.sseContext(r)
		sw := newSSEWriter(w)
		sink := &sseLogSink{ctx: ctx, sw: sw, l: l}
		detached := s.streamSSE(w, r, info, dt, nil, newLogSteps(ctx, l, nil, sink, after, s.ping, s.pings), sw,
			sseAnswer{fail: sw.fail, settle: func(u *Usage, err error) { sink.settle(info, u, err) }})
		release(detached)
		return detached
	}
	sw := newSSEWriter(w)
	if err := sw.start(); err != nil {
		s.transportFailed(r, info, err)
		return false
	}
	var wrote error
	status, _, err := s.logs.follow(r.Context(), id, after, s.ping, func(ev store.Event) error {
		sw.buf = appendLogEvent(sw.buf[:0], ev, false)
		wrote = sw.write()
		return wrote
	}, func() error {
		wrote = sw.ping()
		return wrote
	})
	switch {
	case err == nil:
		if status == statusCompleted {
			_ = sw.done()
		}
	case wrote == nil && isShutdown(r.Context()):
		// The client is still there: tell it why its stream ends here.
		info.status, info.reason = errShutdownCut.Status, reasonShutdown
		_ = sw.fail(errShutdownCut)
	case wrote != nil || r.Context().Err() != nil:
		s.transportFailed(r, info, err)
	case errors.Is(err, errStreamLost):
		_ = sw.fail(&apiError{Status: http.StatusBadGateway, Type: typeServer, Code: "stream_lost",
			Message: "The server that ran this stream stopped before it ended."})
	default:
		s.log.LogAttrs(r.Context(), slog.LevelError, "resumable stream failed", slog.String("stream", id), slog.Any("err", err))
		_ = sw.fail(storeFailed())
	}
	return false
}

// handleResumeStream serves GET /v1/chat/completions/{id} and
// GET /v1/completions/{id}: the resumable stream id after the event the
// Last-Event-ID header (or the last_event_id query parameter) names, or
// from its start without one.
func (s *Server) handleResumeStream(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	object := "chat.completion.chunk"
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/chat/completions/")
	if !ok {
		id = strings.TrimPrefix(r.URL.Path, "/v1/completions/")
		object = "text_completion"
	}
	after := int64(-1)
	last, param := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if v := r.URL.Query().Get("last_event_id"); v != "" {
		last, param = v, "last_event_id"
	}
	if last != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(last), 10, 64)
		if err != nil || n < -1 {
			writeError(w, invalid(param, "invalid_value", "Invalid value for '%s': expected the id of an event of the stream.", param))
			return
		}
		after = n
	}
	if e := s.checkResumable(r.Context(), id, object); e != nil {
		writeError(w, e)
		return
	}
	s.followChunks(w, r, info, id, after)
}
