package service

import (
	"context"
	"net/http"
)

// Drain lets WebSocket requests in flight finish before shutdown: from now
// on new creates on open connections are refused with a 503, and Drain
// returns when the last running request has ended or ctx is done.
// http.Server.Shutdown cannot do this, because upgraded connections are no
// longer the http.Server's: call Drain after it, then cancel the requests'
// base context to close the connections.
func (s *Server) Drain(ctx context.Context) error {
	s.wsMu.Lock()
	s.draining = true
	if s.wsActive == 0 {
		s.wsMu.Unlock()
		return nil
	}
	if s.wsIdle == nil {
		s.wsIdle = make(chan struct{})
	}
	idle := s.wsIdle
	s.wsMu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beginWS counts a WebSocket request in; it reports false while draining.
func (s *Server) beginWS() bool {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.draining {
		return false
	}
	s.wsActive++
	return true
}

// endWS counts a WebSocket request out and wakes Drain after the last one.
func (s *Server) endWS() {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	s.wsActive--
	if s.wsActive == 0 && s.wsIdle != nil {
		close(s.wsIdle)
		s.wsIdle = nil
	}
}

// errDraining answers a create that arrives during shutdown.
var errDraining = &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "server_shutting_down",
	Message: "The server is shutting down and takes no new requests; retry on a new connection."}
