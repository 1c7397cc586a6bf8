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
// wsConn.run, and engine streams, which the service reads on goroutines of
// its own, by panicSafeStream.

// errEnginePanic is the error of a stream whose engine panicked.
var errEnginePanic = errors.New("engine panic")

// panicSafeStream turns a panic in an engine stream's Recv into an error
// that ends the request (a 500, as any engine failure), logged with its
// stack. The stream is not used again after that.
type panicSafeStream struct {
	engine.Stream
	log       *slog.Logger
	requestID string
}

func (s *panicSafeStream) Recv() (ev engine.Event, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("engine stream panic", slog.String("id", s.requestID), slog.Any("panic", v),
				slog.String("stack", string(debug.Stack())))
			ev, err = engine.Event{}, fmt.Errorf("%w: %v", errEnginePanic, v)
		}
	}()
	return s.Stream.Recv()
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
	case rec.Header().Get("Content-Type") == "text/event-stream":
		sw := newSSEWriter(rec)
		_ = sw.fail(e)
	default:
		panic(http.ErrAbortHandler)
	}
}
