package service

import (
	"context"
	"slices"
	"sync"
)

// A WebSocket connection's books of its requests in flight: each request
// (wsRequest), the connection's list of them by request_id (wsRequests),
// and the group that cancels them together (reqGroup).

// wsRequest is one request in flight on a connection, a member of its
// group.
type wsRequest struct {
	cancel context.CancelCauseFunc // its context's; cancelWith also calls hook
	// mu guards cancelled (the client sent cancel for this request), ended
	// (cancelWith ran) and hook (hookEnd's).
	mu        sync.Mutex
	cancelled bool
	ended     bool
	hook      *waitHook
}

// cancelWith cancels the request's context with cause and calls the hook
// of a wait parked on its end (hookEnd).
func (r *wsRequest) cancelWith(cause error) {
	r.cancel(cause)
	r.mu.Lock()
	r.ended = true
	h := r.hook
	r.hook = nil
	r.mu.Unlock()
	if h != nil {
		h.f()
	}
}

// hookEnd has h.f called when the request is cancelled (cancelWith): a
// parked wait's hook on the request's end (logSteps.parkSelf), without
// the table that a context.AfterFunc on its context would make it keep
// for its children. It reports false, hooking nothing, when the request
// was cancelled already. One hook at a time.
func (r *wsRequest) hookEnd(h *waitHook) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return false
	}
	r.hook = h
	return true
}

// unhookEnd keeps h.f from being called.
func (r *wsRequest) unhookEnd(h *waitHook) {
	r.mu.Lock()
	if r.hook == h {
		r.hook = nil
	}
	r.mu.Unlock()
}

// wsRequests are a connection's requests in flight: a few at a time (at
// most Options.WSMaxRequests), searched in turn. A map's table would cost
// some 200 bytes from its first entry, for as long as the connection
// lasts.
type wsRequests []wsInFlight

type wsInFlight struct {
	id  string
	req *wsRequest
}

// get is request id; nil when none is in flight.
func (rs wsRequests) get(id string) *wsRequest {
	for _, r := range rs {
		if r.id == id {
			return r.req
		}
	}
	return nil
}

// remove takes request id off, when it is req (not another by that id).
func (rs *wsRequests) remove(id string, req *wsRequest) {
	*rs = slices.DeleteFunc(*rs, func(r wsInFlight) bool { return r.id == id && r.req == req })
}

// reqGroup cancels a connection's requests together, each with the cause
// (a shutdown, a stalled peer, the connection's end). A request's context
// derives from the connection's values alone and the request is kept
// here: a shared cancelable parent would keep its children in a map, some
// 200 bytes from the first, for as long as the connection lasts. The zero
// value is ready to use.
type reqGroup struct {
	mu    sync.Mutex
	cause error // set once: the group ended
	live  []groupMember
}

// groupMember is a request of a reqGroup (a pointer): cancelWith cancels
// it with cause.
type groupMember interface{ cancelWith(cause error) }

// add keeps m to cancel with the group; a group that ended cancels it at
// once.
func (g *reqGroup) add(m groupMember) {
	g.mu.Lock()
	cause := g.cause
	if cause == nil {
		g.live = append(g.live, m)
	}
	g.mu.Unlock()
	if cause != nil {
		m.cancelWith(cause)
	}
}

// remove lets go of m, a request that ended.
func (g *reqGroup) remove(m groupMember) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := slices.Index(g.live, m); i >= 0 {
		g.live = slices.Delete(g.live, i, i+1)
	}
}

// cancel ends the group with cause: every request in it is cancelled with
// cause, and every one added later; only the first cause counts.
func (g *reqGroup) cancel(cause error) {
	g.mu.Lock()
	if g.cause != nil {
		g.mu.Unlock()
		return
	}
	g.cause = cause
	live := g.live
	g.live = nil
	g.mu.Unlock()
	for _, m := range live {
		m.cancelWith(cause)
	}
}

// err is the cause the group ended with; nil while it lasts.
func (g *reqGroup) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cause
}

// wasCancelled reports whether the client sent cancel for the request.
func (r *wsRequest) wasCancelled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelled
}
