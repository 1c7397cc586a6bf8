package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"rill/engine"
)

// A panic is a bug; it must fail the request or connection it happened in,
// be logged with its stack, and leave the server up. Handlers are covered
// by recoverHandler, WebSocket goroutines by wsConn.recoverConn and
// wsConn.run, and engine streams by panicSafeStream, so that a panic in an
// engine fails its request as an engine error rather than as a handler bug.

// errEnginePanic is the error of a stream whose engine panicked.
var errEnginePanic = errors.New("engine panic")

// panicSafeStream turns a panic in an engine stream's TryRecv into an
// error that ends the request (a 500, as any engine failure), logged with
// its stack. The stream is not read again after that: TryRecv keeps
// returning the error.
type panicSafeStream struct {
	engine.Stream
	log       *slog.Logger
	requestID string
	err       error // set by a panic
}

// Unwrap is the engine's stream, whose Ready this one shares.
func (s *panicSafeStream) Unwrap() engine.Stream { return s.Stream }

func (s *panicSafeStream) TryRecv() (ev engine.Event, ok bool, err error) {
	if s.err != nil {
		return engine.Event{}, false, s.err
	}
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("engine stream panic", slog.String("id", s.requestID), slog.Any("panic", v),
				slog.String("stack", string(debug.Stack())))
			s.err = fmt.Errorf("%w: %v", errEnginePanic, v)
			ev, ok, err = engine.Event{}, false, s.err
		}
	}()
	return s.Stream.TryRecv()
}

// recoverHandler turns a panic in a handler (a bug) into a failed request
// that is logged with its stack, without taking the server down: a 500
// when nothing was sent yet, a last error event on an SSE stream, and
// otherwise an aborted connection, so that the client cannot take a cut
// response for a whole one. http.ErrAbortHandler keeps its meaning. It
// runs deferred by ServeHTTP.
func (s *Server) recoverHandler(rec *recorder, info *requestInfo) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	s.log.Error("handler panic", slog.String("id", info.id), slog.Any("panic", v),
		slog.String("stack", string(debug.Stack())))
	e := &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: "Internal server error."}
	info.status = e.Status
	switch {
	case rec.status == 0:
		writeError(rec, e)
	case rec.Header().Get("Content-Type") == "text/event-stream" && rec.anthropic:
		_ = messagesSSE{newSSEWriter(rec)}.fail(e)
	case rec.Header().Get("Content-Type") == "text/event-stream":
		sw := newSSEWriter(rec)
		_ = sw.fail(e)
	default:
		panic(http.ErrAbortHandler)
	}
}
