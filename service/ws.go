package service

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// The WebSocket transport (docs/design.md §4): GET /v1/chat/completions,
// GET /v1/completions and GET /v1/messages (anthropic_ws.go) with an
// upgrade open a connection that carries many streamed requests at once,
// named by the client:
//
//	client → {"type":"create","request_id":"r1","body":{…the POST body…}}
//	client → {"type":"cancel","request_id":"r1"}
//	server → {"type":"chunk","request_id":"r1","chunk":{…the SSE data…}}
//	server → {"type":"done","request_id":"r1"}
//	server → {"type":"error","request_id":"r1"|null,"status":400,"error":{…}}
//
// This file is the handshake: subprotocol and upgrade (the origin is
// checked for every request by the browser policy, origin.go). wsconn.go is the
// connection (reader, requests, keepalive), wswriter.go the outgoing queue
// and the chunkWriter that frames the chunks SSE would send.

// keyProtocolPrefix is the subprotocol prefix that carries an API key from a
// browser, as OpenAI's Realtime API accepts it.
const keyProtocolPrefix = "openai-insecure-api-key."

// isWebSocketUpgrade reports whether r is a GET that asks for a WebSocket.
// Other malformations of the handshake are left for websocket.Accept to
// answer.
func isWebSocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether the comma-separated header name holds
// token, compared case-insensitively.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// keyProtocol returns the first offered subprotocol that carries an API
// key, or "".
func keyProtocol(r *http.Request) string {
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); strings.HasPrefix(t, keyProtocolPrefix) {
				return t
			}
		}
	}
	return ""
}

// handleWebSocket upgrades r and serves the connection until it ends; its
// requests run against the endpoint of r's path. The API key was checked by
// ServeHTTP. A browser that sent it as a subprotocol gets that subprotocol
// echoed, as the handshake requires (browsers fail a handshake that offered
// subprotocols and got none back).
//
// With Options.Shutdown the connection is served on a goroutine of its own
// and the handler returns at once, so that net/http lets go of the
// connection's state (its buffers, the request, the goroutine's grown
// stack): the access line of the upgrade is then written at the upgrade.
// Without it, the handler serves the connection and its request's context
// carries the shutdown.
func (s *Server) handleWebSocket(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	if s.isDraining() {
		writeError(w, errDraining)
		return
	}
	if e := checkHandshake(w, r); e != nil {
		writeError(w, e)
		return
	}
	// ServeHTTP applied the browser policy (origin.go), which may allow
	// more origins than the library's own check knows of: skip that one.
	opts := &websocket.AcceptOptions{InsecureSkipVerify: true}
	if p := keyProtocol(r); p != "" {
		opts.Subprotocols = []string{p}
	}
	hj := &smallHijacker{ResponseWriter: w}
	c := newWSConn(s, nil, r.URL.Path, info.id)
	// Pongs the library's reader reads answer the connection's pinger
	// (set by serve, before anything is read).
	opts.OnPongReceived = func(_ context.Context, p []byte) { c.pinger.pong(p) }
	conn, err := websocket.Accept(hj, r, opts)
	if err != nil {
		// Accept has answered the malformed handshake.
		s.log.Debug("websocket handshake failed", "id", info.id, "err", err)
		return
	}
	c.conn = conn
	if r.URL.Path == pathResponses {
		c.onMessage = newResponsesWS(c).handle
	}
	s.wsConns.add()
	if s.shutdown == nil {
		defer s.wsConns.done()
		c.serve(r.Context(), afterContext(r.Context()), hj, nil)
		return
	}
	go func() {
		// No handler's recover is above this goroutine: a panic in
		// serve's setup (serve recovers its reader's) ends the
		// connection, not the process. Once set up, the connection
		// ends (s.wsConns.done) when its reader sees it end, which may
		// be after serve returned (its reader parked).
		setUp := false
		defer func() {
			if !setUp {
				s.wsConns.done()
			}
		}()
		defer c.recoverConn("serve")
		c.serve(r.Context(), s.afterShutdown, hj, s.wsConns.done)
		setUp = true
	}()
}

// checkHandshake refuses, in OpenAI's error shape, the malformed upgrades
// that websocket.Accept would answer in plain text: not HTTP/1.1, a
// version other than 13 (426, with the Sec-WebSocket-Version the server
// speaks, RFC 6455 4.4), a missing, repeated or malformed
// Sec-WebSocket-Key. isWebSocketUpgrade has checked the method and the
// Connection and Upgrade headers.
func checkHandshake(w http.ResponseWriter, r *http.Request) *apiError {
	bad := func(status int, msg string) *apiError {
		return &apiError{Status: status, Type: typeInvalidRequest, Code: "invalid_websocket_handshake", Message: msg}
	}
	if !r.ProtoAtLeast(1, 1) {
		return bad(http.StatusBadRequest, "A WebSocket handshake needs HTTP/1.1; this request is "+clip(r.Proto, maxEchoBytes)+".")
	}
	if v := r.Header.Get("Sec-WebSocket-Version"); v != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		return bad(http.StatusUpgradeRequired, "WebSocket version "+clip(v, maxEchoBytes)+" is not supported; use 13.")
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return bad(http.StatusBadRequest, "A WebSocket handshake needs exactly one Sec-WebSocket-Key header.")
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(k) != 16 {
		return bad(http.StatusBadRequest, "Sec-WebSocket-Key must be 16 bytes in base64.")
	}
	return nil
}

// errWSEnded is the error of a write to a connection or request that ended.
var errWSEnded = errors.New("websocket request ended")
