package service

import (
	"context"
	"errors"
	"net/http"
	"sync"
)

// Shutdown, in the order serve runs it:
//
//  1. Drain, at once and alongside http.Server.Shutdown: WebSocket creates
//     (and upgrades) are refused with a 503 from now on, and Drain returns
//     when the WebSocket requests in flight have ended.
//  2. When the grace period is over, cancel the http.Server's BaseContext
//     with the cause ErrShutdown: what still runs is cut, each request
//     answered with a 503 server_shutting_down (an SSE error event, a
//     WebSocket error message, or a plain error response) and logged as
//     cut by the shutdown, and every WebSocket connection is closed with
//     1001 (going away) after its last messages. Connections served apart
//     from their handshakes, and detached SSE streams, hear it through
//     Options.Shutdown, which serve sets to that context's Done.
//  3. WaitConnections, so that the close handshakes complete before the
//     process exits (http.Server.Shutdown does not wait for upgraded
//     connections); then close the engine.

// afterShutdown runs f on a goroutine of its own once Options.Shutdown is
// closed (at once if it is already), and returns a stop that unregisters f
// and reports whether f was still waiting, as context.AfterFunc's does. It
// is how detached WebSocket connections hear of the shutdown with no
// goroutine of their own waiting for it: one goroutine per Server waits.
func (s *Server) afterShutdown(f func()) (stop func() bool) {
	h := &s.shutdownHooks
	h.watch.Do(func() {
		go func() {
			<-s.shutdown
			h.mu.Lock()
			h.fired = true
			hooks := h.hooks
			h.hooks = nil
			h.mu.Unlock()
			for _, f := range hooks {
				go f()
			}
		}()
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fired {
		go f()
		return func() bool { return false }
	}
	if h.hooks == nil {
		h.hooks = make(map[uint64]func())
	}
	id := h.next
	h.next++
	h.hooks[id] = f
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		_, waiting := h.hooks[id]
		delete(h.hooks, id)
		return waiting
	}
}

// shutdownHooks are the functions afterShutdown runs.
type shutdownHooks struct {
	watch sync.Once // starts the goroutine that waits for Options.Shutdown
	mu    sync.Mutex
	hooks map[uint64]func()
	next  uint64
	fired bool
}

// ErrShutdown is the cause (context.WithCancelCause) with which the
// server's base context is cancelled when the grace period is over.
// Requests cut that way are answered and logged as cut by the shutdown
// (503), not as failures or as clients that left.
var ErrShutdown = errors.New("server shutting down")

// isShutdown reports whether ctx ended because the server shut down.
func isShutdown(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrShutdown)
}

// Drain lets WebSocket requests, detached SSE streams (ssedetach.go; a
// stream detaches only while not draining) and detached generations
// (background responses, resumable streams in their grace period) in
// flight finish before shutdown: from now on new creates on open connections, new
// upgrades and new background responses are refused with a 503, and Drain
// returns when the last of them has ended or ctx is done.
func (s *Server) Drain(ctx context.Context) error {
	s.wsMu.Lock()
	s.draining = true
	s.wsMu.Unlock()
	if err := s.wsRequests.wait(ctx); err != nil {
		return err
	}
	return s.bg.running.wait(ctx)
}

// WaitConnections cuts the detached generations still running (a
// background response ends failed, with server_shutting_down, its events
// written to the store) and returns when they, every WebSocket connection
// and every detached SSE stream have ended, or ctx is done. Call it after cancelling the base
// context, which closes the connections with a close handshake, so that
// the handshakes complete.
func (s *Server) WaitConnections(ctx context.Context) error {
	s.bg.cancelAll(ErrShutdown)
	if err := s.bg.running.wait(ctx); err != nil {
		return err
	}
	return s.wsConns.wait(ctx)
}

// isDraining reports whether Drain has been called.
func (s *Server) isDraining() bool {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	return s.draining
}

// beginWS counts a WebSocket request in; it reports false while draining.
func (s *Server) beginWS() bool {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.draining {
		return false
	}
	s.wsRequests.add()
	return true
}

// endWS counts a WebSocket request out.
func (s *Server) endWS() { s.wsRequests.done() }

// inflight counts things in flight and lets shutdown wait until none is
// left. It is safe for concurrent use; its zero value is empty.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // made by a waiter, closed when n drops to 0
}

func (t *inflight) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *inflight) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// wait returns nil once nothing is in flight, or ctx's error.
func (t *inflight) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errDraining answers a create that arrives during shutdown, and a request
// that shutdown cut.
var errDraining = &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_shutting_down",
	RetryAfter: 1, Message: "The server is shutting down and takes no new requests; retry on a new connection."}

// errShutdownCut ends a request that was still running when the grace
// period of a shutdown ran out.
var errShutdownCut = &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_shutting_down",
	RetryAfter: 1, Message: "The server shut down before this request could finish; retry it."}
