package service

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// CORS: browser pages on the origins of Options.CORSAllowedOrigins may call
// the HTTP API. A preflight (OPTIONS with Origin and
// Access-Control-Request-Method) from such an origin is answered 204 with
// the methods and headers the API uses; one from any other origin gets a
// 403 without CORS headers, so the browser blocks the request. Actual
// requests from an allowed origin get Access-Control-Allow-Origin (that
// origin, not "*") and may read X-Request-Id, Retry-After and the
// rate-limit headers of a limited key (keys.go). A preflight
// from an allowed origin may ask for any request headers: the SDKs send
// their own (Anthropic's x-api-key, anthropic-version and anthropic-beta,
// the x-stainless-* of the openai and Anthropic JavaScript SDKs), and the
// origin is trusted already; they are allowed by name, since "*" does not
// cover Authorization. No
// credentials mode: the API key travels in Authorization, which a page
// sets itself, never in a cookie.
//
// The same origins may open a WebSocket (they are part of the Server's
// allowed origins, next to Options.AllowedOrigins); the reverse does not
// hold: --ws-allowed-origins gives no CORS headers.

// CORS header values.
const (
	corsAllowMethods  = "GET, POST, DELETE, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, X-Request-Id"
	corsExposeHeaders = "X-Request-Id, Retry-After, " +
		"X-Ratelimit-Limit-Requests, X-Ratelimit-Remaining-Requests, X-Ratelimit-Reset-Requests, " +
		"X-Ratelimit-Limit-Tokens, X-Ratelimit-Remaining-Tokens, X-Ratelimit-Reset-Tokens"
	// corsMaxAge is how long, in seconds, a browser may cache a preflight's
	// answer (Chromium caps it at 7200).
	corsMaxAge = "600"
)

// isPreflight reports whether r is a CORS preflight request.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" &&
		r.Header.Get("Access-Control-Request-Method") != ""
}

// handleCORS answers a preflight (and reports true: the request is done),
// or adds the CORS headers an actual request from an allowed origin needs
// (and reports false: serve it). Requests without Origin pass untouched.
func (s *Server) handleCORS(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	allowed := s.corsAllowed(r, origin)
	h := w.Header()
	if !isPreflight(r) {
		if allowed {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
			h.Add("Vary", "Origin")
		}
		return false
	}
	h.Add("Vary", "Origin")
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	if !allowed {
		writeError(w, &apiError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "origin_not_allowed",
			Message: fmt.Sprintf("Origin %q may not call this server from a browser; allow it with --cors-allowed-origins.", origin)})
		return true
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", corsAllowMethods)
	h.Set("Access-Control-Allow-Headers", allowHeaders(r.Header.Get("Access-Control-Request-Headers")))
	h.Set("Access-Control-Max-Age", corsMaxAge)
	w.WriteHeader(http.StatusNoContent)
	return true
}

// allowHeaders is the Access-Control-Allow-Headers of a preflight that
// asked for requested (a comma-separated list of header names): the API's
// own headers and the requested ones that are plain header names (RFC 9110
// tokens), at most 1 KiB of them.
func allowHeaders(requested string) string {
	const limit = 1 << 10
	b := []byte(corsAllowHeaders)
	for name := range strings.SplitSeq(requested, ",") {
		name = strings.TrimSpace(name)
		if name == "" || len(b)+2+len(name) > len(corsAllowHeaders)+limit || !isToken(name) {
			continue
		}
		b = append(append(b, ", "...), name...)
	}
	return string(b)
}

// isToken reports whether s is an RFC 9110 token (a header name).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// corsAllowed reports whether origin, of a request r, is the server's own
// or matches one of the CORS patterns.
func (s *Server) corsAllowed(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host) || matchOrigin(s.cors, u)
}

// matchOrigin reports whether origin matches one of patterns: path.Match
// patterns, case-insensitive, against the origin's host, or against
// "scheme://host" for a pattern that contains "://" (the syntax of
// Options.AllowedOrigins).
func matchOrigin(patterns []string, origin *url.URL) bool {
	for _, p := range patterns {
		target := origin.Host
		if strings.Contains(p, "://") {
			target = origin.Scheme + "://" + origin.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}
