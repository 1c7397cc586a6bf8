package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/coder/websocket"
)

// The WebSocket transport (DESIGN §4): GET /v1/chat/completions and
// GET /v1/completions with an upgrade open a connection that carries many
// streamed requests at once, named by the client:
//
//	client → {"type":"create","request_id":"r1","body":{…the POST body…}}
//	client → {"type":"cancel","request_id":"r1"}
//	server → {"type":"chunk","request_id":"r1","chunk":{…the SSE data…}}
//	server → {"type":"done","request_id":"r1"}
//	server → {"type":"error","request_id":"r1"|null,"status":400,"error":{…}}
//
// This file is the handshake: origin and subprotocol. wsconn.go is the
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

// ParseOriginPatterns splits a comma-separated list of origin host patterns
// (Options.AllowedOrigins) and checks each; empty items are dropped.
func ParseOriginPatterns(list string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := checkOriginPattern(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func checkOriginPattern(p string) error {
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("origin pattern %q: %w", p, err)
	}
	return nil
}

// originAllowed applies the rule websocket.Accept applies (it checks again):
// no Origin (not a browser), the request's own host, or a host that matches
// one of s.origins.
func (s *Server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(r.Host, u.Host) {
		return true
	}
	for _, p := range s.origins {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}

// handleWebSocket upgrades r and serves the connection until it ends; its
// requests run against the endpoint of r's path. The API key was checked by
// ServeHTTP. A browser that sent it as a subprotocol gets that subprotocol
// echoed, as the handshake requires (browsers fail a handshake that offered
// subprotocols and got none back).
func (s *Server) handleWebSocket(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	if !s.originAllowed(r) {
		writeError(w, &apiError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "origin_not_allowed",
			Message: fmt.Sprintf("Origin %q may not open a WebSocket on this server; allow it with --ws-allowed-origins.",
				r.Header.Get("Origin"))})
		return
	}
	opts := &websocket.AcceptOptions{OriginPatterns: s.origins}
	if p := keyProtocol(r); p != "" {
		opts.Subprotocols = []string{p}
	}
	conn, err := websocket.Accept(w, r, opts)
	if err != nil {
		// Accept has answered the malformed handshake.
		s.log.Debug("websocket handshake failed", "id", info.id, "err", err)
		return
	}
	c := newWSConn(s, conn, r.URL.Path, info.id)
	if r.URL.Path == pathResponses {
		c.onMessage = newResponsesWS(c).handle
	}
	c.serve(r.Context())
}

// errWSEnded is the error of a write to a connection or request that ended.
var errWSEnded = errors.New("websocket request ended")

// wsContext returns the context a connection's requests run under: the
// values of parent, cancelled by cancel alone. Server shutdown (parent
// ending) closes the connection with a close frame instead, which then ends
// this context.
func wsContext(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(context.WithoutCancel(parent))
}
