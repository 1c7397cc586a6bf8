// Package service is rill's OpenAI-compatible HTTP API: routing, request
// validation against openapi.yaml, chat and legacy completions streamed over
// Server-Sent Events or WebSocket, usage assembly (DESIGN §3), errors in
// OpenAI's shape, authentication and request logs. It knows HTTP and JSON, never tensors:
// everything it generates comes from an engine.Engine.
package service

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"rill/engine"
	"rill/openapi"
)

// Defaults for zero Options fields.
const (
	DefaultPingInterval  = 15 * time.Second
	DefaultMaxBodyBytes  = 16 << 20
	DefaultWSMaxRequests = 32
)

// Options configure a Server. Zero values mean the defaults.
type Options struct {
	// Engine generates every completion. Required.
	Engine engine.Engine
	// APIKey, when set, is required as `Authorization: Bearer <key>` on
	// /v1/*, /tokenize, /detokenize and /metrics; /health and /openapi.yaml
	// stay open. A WebSocket handshake may carry it instead as the
	// subprotocol `openai-insecure-api-key.<key>`
	// (browsers cannot set headers on a WebSocket).
	APIKey string
	// Logger receives one line per request. Nil means slog.Default().
	Logger *slog.Logger
	// PingInterval is how long an SSE stream may stay silent before a
	// `: ping` comment is sent, and how often a WebSocket connection is
	// pinged; a WebSocket peer that has not answered a ping when the next
	// one is due is disconnected. Zero means DefaultPingInterval; negative
	// disables pings.
	PingInterval time.Duration
	// MaxBodyBytes caps request bodies; larger ones get a 413. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// AllowedOrigins lists the host patterns of the browser pages on other
	// origins that may open a WebSocket: path.Match patterns matched case-
	// insensitively against the Origin's host ("*.example.com"), or against
	// "scheme://host" when the pattern contains "://". Same-origin pages and
	// clients that send no Origin (anything but a browser) are always
	// allowed. Invalid patterns are logged and ignored; see
	// ParseOriginPatterns.
	AllowedOrigins []string
	// CORSAllowedOrigins lists the origins, in the syntax of AllowedOrigins,
	// of browser pages that may call the HTTP API (CORS, see cors.go); they
	// may open a WebSocket too. Invalid patterns are logged and ignored.
	CORSAllowedOrigins []string
	// WSMaxRequests caps the requests in flight on one WebSocket connection;
	// a create beyond it is answered with an error message. Zero means
	// DefaultWSMaxRequests.
	WSMaxRequests int
	// WSMaxMessageBytes caps one client message on a WebSocket; a larger one
	// is answered with an error message and discarded, and the connection
	// stays open. Zero means MaxBodyBytes.
	WSMaxMessageBytes int64
}

// Server is the HTTP API. It is an http.Handler, safe for concurrent use;
// it holds no per-request state and needs no shutdown of its own (the
// caller's http.Server drains it).
type Server struct {
	engine    engine.Engine
	apiKey    []byte
	log       *slog.Logger
	ping      time.Duration
	maxBody   int64
	validator *openapi.Validator

	origins  []string // valid AllowedOrigins and CORSAllowedOrigins
	cors     []string // valid CORSAllowedOrigins
	wsReqs   int
	wsMaxMsg int64

	// WebSocket requests in flight, for Drain.
	wsMu     sync.Mutex
	wsActive int
	draining bool
	wsIdle   chan struct{} // closed when draining and the last request ends

	metrics *metrics
}

// New returns a Server for opts. It panics if opts.Engine is nil or the
// embedded OpenAPI document does not load, both programming errors that
// the tests catch.
func New(opts Options) *Server {
	if opts.Engine == nil {
		panic("service: Options.Engine is required")
	}
	v, err := openapi.NewValidator()
	if err != nil {
		panic("service: " + err.Error())
	}
	s := &Server{
		engine:    opts.Engine,
		log:       opts.Logger,
		ping:      opts.PingInterval,
		maxBody:   opts.MaxBodyBytes,
		validator: v,
		metrics:   newMetrics(opts.Engine),
	}
	if opts.APIKey != "" {
		s.apiKey = []byte(opts.APIKey)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.ping == 0 {
		s.ping = DefaultPingInterval
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	for _, p := range opts.AllowedOrigins {
		if err := checkOriginPattern(p); err != nil {
			s.log.Warn("ignoring WebSocket origin pattern", slog.String("pattern", p), slog.Any("err", err))
			continue
		}
		s.origins = append(s.origins, p)
	}
	for _, p := range opts.CORSAllowedOrigins {
		if err := checkOriginPattern(p); err != nil {
			s.log.Warn("ignoring CORS origin pattern", slog.String("pattern", p), slog.Any("err", err))
			continue
		}
		s.cors = append(s.cors, p)
		s.origins = append(s.origins, p)
	}
	s.wsReqs = opts.WSMaxRequests
	if s.wsReqs <= 0 {
		s.wsReqs = DefaultWSMaxRequests
	}
	s.wsMaxMsg = opts.WSMaxMessageBytes
	if s.wsMaxMsg <= 0 {
		s.wsMaxMsg = s.maxBody
	}
	return s
}

// route is one path's handlers by method. upgrade serves a GET that asks
// for a WebSocket; a plain GET on such a path is still a 405.
type route struct {
	methods string // the Allow header
	get     func(*Server, http.ResponseWriter, *http.Request, *requestInfo)
	post    func(*Server, http.ResponseWriter, *http.Request, *requestInfo)
	upgrade func(*Server, http.ResponseWriter, *http.Request, *requestInfo)
}

var (
	routeHealth      = route{methods: "GET, HEAD", get: (*Server).handleHealth}
	routeSpec        = route{methods: "GET, HEAD", get: (*Server).handleSpec}
	routeMetrics     = route{methods: "GET, HEAD", get: (*Server).handleMetrics}
	routePage        = route{methods: "GET, HEAD", get: (*Server).handlePage}
	routeModels      = route{methods: "GET, HEAD", get: (*Server).handleModels}
	routeModel       = route{methods: "GET, HEAD", get: (*Server).handleModel}
	routeChat        = route{methods: "POST", post: (*Server).handleGenerate, upgrade: (*Server).handleWebSocket}
	routeCompletions = route{methods: "POST", post: (*Server).handleGenerate, upgrade: (*Server).handleWebSocket}
	routeTokenize    = route{methods: "POST", post: (*Server).handleTokenize}
	routeDetokenize  = route{methods: "POST", post: (*Server).handleDetokenize}
)

func findRoute(path string) *route {
	switch path {
	case "/health":
		return &routeHealth
	case "/openapi.yaml":
		return &routeSpec
	case "/metrics":
		return &routeMetrics
	case "/v1/models":
		return &routeModels
	case "/v1/chat/completions":
		return &routeChat
	case "/v1/completions":
		return &routeCompletions
	case "/tokenize":
		return &routeTokenize
	case "/detokenize":
		return &routeDetokenize
	}
	if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && id != "" {
		return &routeModel
	}
	if isPagePath(path) {
		return &routePage
	}
	return nil
}

// requestInfo is what the request log line reports, filled in by handlers.
type requestInfo struct {
	id    string
	model string
	obs   *requestMetrics // the generation's, for its time to first token
	usage *Usage
	// status overrides the written status in the log (499: the client left).
	status int
}

// ServeHTTP routes r, after giving it a request id and checking its API key.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	info := &requestInfo{id: requestID(r.Header.Get("X-Request-Id"))}
	rec := &recorder{ResponseWriter: w}
	rec.Header().Set("X-Request-Id", info.id)
	defer s.logRequest(r, rec, info, start)
	defer func() {
		// A bug in a handler answers 500 and is logged; it does not take the
		// connection down. http.ErrAbortHandler keeps its meaning.
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panic", "id", info.id, "panic", v)
			if rec.status == 0 {
				writeError(rec, &apiError{Status: http.StatusInternalServerError, Type: typeServer,
					Message: "Internal server error."})
			}
		}
	}()

	if s.handleCORS(rec, r) {
		return
	}
	path := r.URL.Path
	if (strings.HasPrefix(path, "/v1/") || path == "/metrics" || path == "/tokenize" || path == "/detokenize") && !s.authorized(r) {
		writeError(rec, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest,
			Code: "invalid_api_key", Message: "Missing or incorrect API key. Send it as 'Authorization: Bearer <key>'."})
		return
	}
	rt := findRoute(path)
	if rt == nil {
		writeError(rec, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest,
			Code: "unknown_url", Message: "Invalid URL (" + r.Method + " " + path + ")."})
		return
	}
	switch {
	case rt.upgrade != nil && isWebSocketUpgrade(r):
		rt.upgrade(s, rec, r, info)
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && rt.get != nil:
		rt.get(s, rec, r, info)
	case r.Method == http.MethodPost && rt.post != nil:
		rt.post(s, rec, r, info)
	default:
		rec.Header().Set("Allow", rt.methods)
		writeError(rec, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest,
			Code: "method_not_allowed", Message: "Method " + r.Method + " is not allowed on " + path + "; use " + rt.methods + "."})
	}
}

// authorized reports whether r carries the API key (always, without one):
// as a Bearer token, or, on a WebSocket handshake, as the subprotocol
// openai-insecure-api-key.<key>. The comparison takes the same time
// wherever the keys differ.
func (s *Server) authorized(r *http.Request) bool {
	if s.apiKey == nil {
		return true
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), s.apiKey) == 1 {
		return true
	}
	if isWebSocketUpgrade(r) {
		if p := keyProtocol(r); p != "" {
			key := strings.TrimPrefix(p, keyProtocolPrefix)
			return subtle.ConstantTimeCompare([]byte(key), s.apiKey) == 1
		}
	}
	return false
}

// requestID keeps a client's X-Request-Id when it is short and plain
// (letters, digits, "-", "_", ".", ":"), and makes a new one otherwise.
func requestID(client string) string {
	if len(client) == 0 || len(client) > 128 {
		return uuid.NewString()
	}
	for i := 0; i < len(client); i++ {
		c := client[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':'
		if !ok {
			return uuid.NewString()
		}
	}
	return client
}

// recorder remembers the status and size of a response for the log. It
// unwraps to the real writer, so http.ResponseController can flush it.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
