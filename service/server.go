// Package service is rill's OpenAI-compatible HTTP API: routing, request
// validation against openapi.yaml, chat and legacy completions streamed over
// Server-Sent Events or WebSocket, the Responses API and Anthropic's Messages
// API, usage assembly (docs/design.md §3), errors in OpenAI's shape (and in
// Anthropic's on the Messages API), authentication and request logs. It
// knows HTTP and JSON, never tensors: everything it generates comes from an
// engine.Engine.
package service

import (
	"cmp"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"rill/engine"
	"rill/internal/park"
	"rill/internal/wheel"
	"rill/keys"
	"rill/openapi"
	"rill/store"
)

// pingSlots is how finely the ping wheel cuts a ping interval: a
// connection is pinged up to 1/pingSlots of an interval late.
const pingSlots = 16

// Defaults for zero Options fields.
const (
	DefaultPingInterval     = 15 * time.Second
	DefaultMaxBodyBytes     = 16 << 20
	DefaultWSMaxRequests    = 32
	DefaultReadTimeout      = 30 * time.Second
	DefaultWriteIdleTimeout = 60 * time.Second
	DefaultMaxChoices       = 256
)

// Options configure a Server. Zero values mean the defaults.
type Options struct {
	// Engine generates every completion. Required.
	Engine engine.Engine
	// APIKey, when set, is required as `Authorization: Bearer <key>` (or,
	// as Anthropic's clients send it, `x-api-key: <key>`) on /v1/*,
	// /tokenize, /detokenize and /metrics; /health and /openapi.yaml stay
	// open. A WebSocket handshake may carry it instead as the
	// subprotocol `openai-insecure-api-key.<key>`
	// (browsers cannot set headers on a WebSocket).
	APIKey string
	// Keys, when set, holds further API keys (a keys file), accepted as
	// APIKey is, each with its own limits: a request over one is answered
	// 429, and every response to a limited key carries its rate-limit
	// headers (keys.go). APIKey, if also set, stays valid and unlimited.
	Keys KeyRing
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
	// ReadTimeout bounds the reading of a request body, from the end of
	// its headers (which http.Server.ReadHeaderTimeout bounds): a body not
	// complete by then is answered 408 and its connection closed. Zero
	// means DefaultReadTimeout; negative disables it.
	ReadTimeout time.Duration
	// WriteIdleTimeout bounds every write to a client: a write (an SSE
	// event, a WebSocket message, a response) that makes no progress for
	// this long ends the request, or the WebSocket connection with every
	// request on it, and cancels their engine work. A stream that has
	// nothing to send is not affected. Zero means DefaultWriteIdleTimeout;
	// negative disables it.
	WriteIdleTimeout time.Duration
	// MaxChoices caps the choices of one request, prompts × n; a request
	// that asks for more gets a 400 that names the limit. Zero means
	// DefaultMaxChoices.
	MaxChoices int

	// AllowedOrigins lists the origins of browser pages, other than the
	// server's own, that may use the server (open a WebSocket, send a
	// request): path.Match patterns matched case-insensitively against the
	// Origin's host ("*.example.com"), or against "scheme://host" when the
	// pattern contains "://". A request with another Origin gets a 403;
	// clients that send no Origin (anything but a browser) are not
	// affected. Invalid patterns are logged and ignored; see
	// ParseOriginPatterns and browserPolicy (origin.go), the one rule for
	// browsers.
	AllowedOrigins []string
	// CORSAllowedOrigins lists the origins, in the syntax of AllowedOrigins,
	// of browser pages that may call the HTTP API (CORS, see cors.go); they
	// may open a WebSocket too. Invalid patterns are logged and ignored.
	CORSAllowedOrigins []string
	// HostCheck turns on the Host header check against DNS rebinding: a
	// request is served only when its Host names a loopback IP, localhost
	// (or a name under .localhost), or matches AllowedHosts; others get a
	// 403. serve turns it on when it listens on a loopback address or
	// --allowed-hosts is given. Off, every Host is accepted.
	HostCheck bool
	// AllowedHosts are path.Match patterns of further host names (without
	// port, case-insensitive) the Host check accepts: "rill.internal",
	// "*.example.com".
	AllowedHosts []string
	// WSMaxRequests caps the requests in flight on one WebSocket connection;
	// a create beyond it is answered with an error message. Zero means
	// DefaultWSMaxRequests.
	WSMaxRequests int
	// WSMaxMessageBytes caps one client message on a WebSocket; a larger one
	// is answered with an error message and discarded, and the connection
	// stays open. Zero means MaxBodyBytes.
	WSMaxMessageBytes int64
	// Store keeps what outlives a request: stored responses of the
	// Responses API (previous_response_id, GET /v1/responses/{id}) and the
	// event logs of background responses and resumable streams. Nil means
	// a store.Memory of ResponsesStore responses and DefaultMemoryStoreBytes
	// in all (the oldest responses and streams go first). The caller that made a
	// Store closes it, after the server's shutdown.
	Store store.Store
	// TracerProvider makes the spans of requests (see trace.go). Nil means
	// no tracing: no span is made, and a client's traceparent is only
	// passed on to engines behind HTTP.
	TracerProvider trace.TracerProvider
	// ResponsesStore is how many responses of the Responses API the
	// default memory store keeps (when Store is nil), least recently
	// stored first out. Zero means DefaultResponsesStore; negative keeps
	// none, and turns off what needs a store (background responses,
	// resumable streams).
	ResponsesStore int
	// Shutdown, closed when a shutdown's grace period is over (serve
	// passes the Done of the http.Server's BaseContext, which it cancels
	// with ErrShutdown then), closes the WebSocket connections still open
	// with 1001 after cutting their requests. With it set, an upgraded
	// connection is served apart from its handshake's handler, which
	// returns at once, and an idle connection costs a few KB (one goroutine
	// with a small stack and small buffers) instead of net/http's state for
	// a request in progress. With it set too, an HTTP/1.1 SSE stream of
	// chat or completions that waits for its engine longer than a second
	// leaves net/http's hands (ssedetach.go), and Shutdown cuts it as the
	// BaseContext cuts the others. Nil: each connection is served by its
	// handshake's handler, and the end of that request's context (the
	// BaseContext's) closes it; no SSE stream detaches. One goroutine of
	// the Server waits for it.
	Shutdown <-chan struct{}
	// ResumeGrace is how long a resumable stream (stream_options.resumable)
	// that nobody follows keeps generating before it stops and frees its
	// KV, waiting for its client to reconnect. Zero means
	// DefaultResumeGrace; negative stops it as soon as nobody follows.
	ResumeGrace time.Duration
	// Poller, when set, holds connections that have nothing to read
	// without a goroutine each: those of detached SSE streams, waiting
	// for their client's departure, and, with Shutdown set, WebSocket
	// connections between their client's messages (wspark.go). Nil: one
	// goroutine each. The caller closes it after the server's shutdown.
	Poller *park.Poller
}

// Server is the HTTP API. It is an http.Handler, safe for concurrent use;
// it holds no per-request state and needs no shutdown of its own (the
// caller's http.Server drains it).
type Server struct {
	engine      engine.Engine
	apiKey      []byte
	keys        KeyRing // nil: no keys file
	log         *slog.Logger
	ping        time.Duration
	pings       *wheel.Wheel // the WebSocket connections' pings; nil without pings
	maxBody     int64
	bodyTimeout time.Duration // 0: no body deadline
	writeIdle   time.Duration // 0: no write deadline
	maxChoices  int
	validator   *openapi.Validator
	tracer      trace.Tracer // nil: tracing is off
	// waits holds the waits of WebSocket streams that wait long for
	// their engines (wsTask.pump).
	waits waitPool
	// poller is Options.Poller; nil: none.
	poller *park.Poller

	browser  *browserPolicy
	cors     []string // valid CORSAllowedOrigins, for preflights and CORS headers
	wsReqs   int
	wsMaxMsg int64

	// Shutdown (drain.go): draining refuses new WebSocket requests;
	// wsRequests and wsConns are what Drain and WaitConnections wait for.
	wsMu       sync.Mutex
	draining   bool
	wsRequests inflight
	wsConns    inflight
	// shutdown is Options.Shutdown; shutdownHooks are what it runs.
	shutdown      <-chan struct{}
	shutdownHooks shutdownHooks

	metrics *metrics
	// responses keeps stored responses; nil keeps none.
	responses *responseStore
	// logs are the event logs of background responses and resumable
	// streams; nil without a store. bg runs their generations.
	logs        *eventLogs
	bg          detached
	resumeGrace time.Duration
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
		shutdown:  opts.Shutdown,
		poller:    opts.Poller,
	}
	switch {
	case opts.Store != nil:
		s.responses = &responseStore{st: opts.Store}
	case opts.ResponsesStore >= 0:
		s.responses = &responseStore{st: store.NewMemory(store.Retention{
			MaxResponses: cmp.Or(opts.ResponsesStore, DefaultResponsesStore), MaxBytes: DefaultMemoryStoreBytes})}
	}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	if opts.APIKey != "" {
		s.apiKey = []byte(opts.APIKey)
	}
	s.keys = opts.Keys
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.responses != nil {
		s.logs = newEventLogs(s.responses.st, s.log)
	}
	if s.ping == 0 {
		s.ping = DefaultPingInterval
	}
	if s.ping > 0 {
		s.pings = wheel.New(s.ping, pingSlots)
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	s.resumeGrace = orDefault(opts.ResumeGrace, DefaultResumeGrace)
	s.bodyTimeout = orDefault(opts.ReadTimeout, DefaultReadTimeout)
	s.writeIdle = orDefault(opts.WriteIdleTimeout, DefaultWriteIdleTimeout)
	s.maxChoices = opts.MaxChoices
	if s.maxChoices <= 0 {
		s.maxChoices = DefaultMaxChoices
	}
	for _, p := range opts.CORSAllowedOrigins {
		if checkOriginPattern(p) == nil { // newBrowserPolicy logs the invalid ones
			s.cors = append(s.cors, p)
		}
	}
	s.browser = newBrowserPolicy(s.log, opts.HostCheck, opts.AllowedHosts, opts.AllowedOrigins, opts.CORSAllowedOrigins)
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

// orDefault reads a timeout option: zero means def, negative means none (0).
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// route is one path's handlers by method, and its API key rule. upgrade
// serves a GET that asks for a WebSocket; a plain GET on such a path is
// still a 405.
type route struct {
	methods string // the Allow header
	// open routes are served without the API key: the health check, the
	// contract and the page (which asks for the key itself). Every other
	// route needs it, so a new route is behind the key unless it says so.
	open    bool
	get     func(*Server, http.ResponseWriter, *http.Request, *requestInfo)
	post    func(*Server, http.ResponseWriter, *http.Request, *requestInfo)
	del     func(*Server, http.ResponseWriter, *http.Request, *requestInfo)
	upgrade func(*Server, http.ResponseWriter, *http.Request, *requestInfo)
}

var (
	routeHealth      = route{methods: "GET, HEAD", open: true, get: (*Server).handleHealth}
	routeSpec        = route{methods: "GET, HEAD", open: true, get: (*Server).handleSpec}
	routeMetrics     = route{methods: "GET, HEAD", get: (*Server).handleMetrics}
	routePage        = route{methods: "GET, HEAD", open: true, get: (*Server).handlePage}
	routeModels      = route{methods: "GET, HEAD", get: (*Server).handleModels}
	routeModel       = route{methods: "GET, HEAD", get: (*Server).handleModel}
	routeChat        = route{methods: "POST", post: (*Server).handleGenerate, upgrade: (*Server).handleWebSocket}
	routeCompletions = route{methods: "POST", post: (*Server).handleGenerate, upgrade: (*Server).handleWebSocket}
	// A resumable stream's reconnection (resumable.go).
	routeResumeStream = route{methods: "GET, HEAD", get: (*Server).handleResumeStream}
	routeTokenize     = route{methods: "POST", post: (*Server).handleTokenize}
	routeDetokenize   = route{methods: "POST", post: (*Server).handleDetokenize}
	// The Responses API (responses.go, responses_ws.go).
	routeResponses = route{methods: "POST", post: (*Server).handleCreateResponse, upgrade: (*Server).handleWebSocket}
	routeResponse  = route{methods: "GET, HEAD, DELETE", get: (*Server).handleGetResponse, del: (*Server).handleDeleteResponse}
	// Background responses (background.go).
	routeCancelResponse = route{methods: "POST", post: (*Server).handleCancelResponse}
	routeInputItems     = route{methods: "GET, HEAD", get: (*Server).handleInputItems}
	// Anthropic's Messages API (anthropic*.go).
	routeMessages    = route{methods: "POST", post: (*Server).handleMessages, upgrade: (*Server).handleWebSocket}
	routeCountTokens = route{methods: "POST", post: (*Server).handleCountTokens}
	// Operators' model loading and unloading (models.go).
	routeLoadModel   = route{methods: "POST", post: (*Server).handleLoadModel}
	routeUnloadModel = route{methods: "POST", post: (*Server).handleUnloadModel}
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
	case pathEmbeddings:
		return &routeEmbeddings
	case pathRerank, pathRerankAlias, pathRerankV2:
		return &routeRerank
	case "/tokenize":
		return &routeTokenize
	case "/detokenize":
		return &routeDetokenize
	case pathResponses:
		return &routeResponses
	case pathMessages:
		return &routeMessages
	case pathCountTokens:
		return &routeCountTokens
	case pathLoadModel:
		return &routeLoadModel
	case pathUnloadModel:
		return &routeUnloadModel
	}
	if rest, ok := strings.CutPrefix(path, pathResponses+"/"); ok {
		id, sub, _ := strings.Cut(rest, "/")
		switch {
		case id == "" || strings.Contains(sub, "/"):
		case sub == "" && !strings.HasSuffix(rest, "/"):
			return &routeResponse
		case sub == "cancel":
			return &routeCancelResponse
		case sub == "input_items":
			return &routeInputItems
		}
	}
	for _, base := range []string{"/v1/chat/completions/", "/v1/completions/"} {
		if id, ok := strings.CutPrefix(path, base); ok && id != "" && !strings.Contains(id, "/") {
			return &routeResumeStream
		}
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
	span  trace.Span      // the request's (trace.go)
	usage *Usage
	// status overrides the written status in the log (499: the client left).
	status int
	// reason says why a request ended early, when that is not the client's
	// doing: reasonShutdown, reasonWriteIdle, reasonOverloaded, reasonUnloaded.
	reason string
	// start is when ServeHTTP took the request.
	start time.Time
	// detached: the handler's stream went on without it (ssedetach.go),
	// and writes the access line itself at its end.
	detached bool
}

// Reasons in the request log.
const (
	reasonShutdown  = "shutdown"           // cut when the grace period of a shutdown ran out
	reasonWriteIdle = "write_idle_timeout" // the client stopped reading (Options.WriteIdleTimeout)
	// reasonOverloaded: shed by admission control (503 engine_overloaded,
	// the client is told to retry); a burst of them is load, not failure.
	reasonOverloaded = "overloaded"
	// reasonUnloaded: the catalogue unloaded the request's model before
	// it finished (503 model_unloaded, to retry).
	reasonUnloaded = "model_unloaded"
)

// reasonOf is the log's reason for a request answered with e: why it
// ended early when that is an expected end, not a failure; "" otherwise.
func reasonOf(e *apiError) string {
	switch e.Code {
	case codeOverloaded:
		return reasonOverloaded
	case codeModelUnloaded:
		return reasonUnloaded
	}
	return ""
}

// logLevel is the level of a request's log line: errors for 5xx, but a
// request cut by a shutdown or by its model's unload, or shed by
// admission control, is an expected end, a warning.
func logLevel(status int, reason string) slog.Level {
	switch {
	case reason == reasonShutdown, reason == reasonOverloaded, reason == reasonUnloaded:
		return slog.LevelWarn
	case status >= 500:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// ServeHTTP routes r, after giving it a request id and checking its API key.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	info := &requestInfo{id: requestID(r.Header.Get("X-Request-Id")), start: start}
	r, info.span = s.startRequestSpan(r, info.id)
	rec := newRecorder(w, s.writeIdle)
	rec.Header().Set("X-Request-Id", info.id)
	if isMessagesPath(r.URL.Path) {
		// Every refusal on these paths, from here on, is Anthropic's.
		rec.anthropic = true
		rec.Header().Set("Request-Id", info.id) // where Anthropic's SDKs look for it
	}
	defer s.logRequest(r, rec, info, start)
	defer s.recoverHandler(rec, info)
	s.armBodyDeadline(rec, r)

	if e := s.browser.check(r); e != nil {
		writeError(rec, e)
		return
	}
	// Preflights come without the API key; they are answered here, for
	// allowed origins only (the browser check above refused the others).
	if s.handleCORS(rec, r) {
		return
	}
	path := r.URL.Path
	rt := findRoute(path)
	// An unknown path under /v1/ asks for the key first, as a known one
	// does, so that a client without it learns nothing of the API's paths.
	keyed := rt == nil && strings.HasPrefix(path, "/v1/") || rt != nil && !rt.open
	if keyed {
		client, ok := s.authenticate(r)
		if !ok {
			writeError(rec, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest,
				Code: "invalid_api_key", Message: "Missing or incorrect API key. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."})
			return
		}
		if client != nil {
			// Its limits apply where generations start (launch); its
			// headers go on whatever this request answers.
			r = r.WithContext(withClient(r.Context(), client))
			rec.client = client
		}
	}
	if rt == nil {
		writeError(rec, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest,
			Code: "unknown_url", Message: "Invalid URL (" + clip(r.Method, maxEchoBytes) + " " + clip(path, maxEchoBytes) + ")."})
		return
	}
	switch {
	case rt.upgrade != nil && isWebSocketUpgrade(r):
		rt.upgrade(s, rec, r, info)
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && rt.get != nil:
		rt.get(s, rec, r, info)
	case r.Method == http.MethodPost && rt.post != nil:
		rt.post(s, rec, r, info)
	case r.Method == http.MethodDelete && rt.del != nil:
		rt.del(s, rec, r, info)
	default:
		rec.Header().Set("Allow", rt.methods)
		writeError(rec, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest,
			Code: "method_not_allowed", Message: "Method " + clip(r.Method, maxEchoBytes) + " is not allowed on " + clip(path, maxEchoBytes) + "; use " + rt.methods + "."})
	}
}

// armBodyDeadline starts the read timeout of r's body, if it has one,
// before any handler runs. A request refused before its body is read
// (Host, API key, path, method, a full queue) still has that body on the
// wire, and net/http reads what is left of it, up to 256 KiB, before it
// sends the answer so that it can keep the connection: without a deadline
// a body that stalls holds the connection and the answer for ever. With
// it, the read gives up when the timeout passes, and net/http sends the
// answer and closes the connection. readBody clears the deadline once a
// body is in.
func (s *Server) armBodyDeadline(w http.ResponseWriter, r *http.Request) {
	if s.bodyTimeout <= 0 || r.ContentLength == 0 {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
}

// authenticate reports whether r carries a valid API key (always, with
// neither Options.APIKey nor Options.Keys), and returns the keys file's
// client of the key (nil for APIKey, or with no key needed). A key is
// taken as a Bearer token, as an x-api-key header (Anthropic's clients
// send it so), or, on a WebSocket handshake, as the subprotocol
// openai-insecure-api-key.<key>. The comparison with APIKey takes the same
// time wherever the keys differ; the keys file compares hashes.
func (s *Server) authenticate(r *http.Request) (*keys.Client, bool) {
	if s.apiKey == nil && s.keys == nil {
		return nil, true
	}
	var presented []string
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		presented = append(presented, strings.TrimSpace(token))
	}
	if key := r.Header.Get("X-Api-Key"); key != "" {
		presented = append(presented, strings.TrimSpace(key))
	}
	if isWebSocketUpgrade(r) {
		if p := keyProtocol(r); p != "" {
			presented = append(presented, strings.TrimPrefix(p, keyProtocolPrefix))
		}
	}
	for _, key := range presented {
		if s.apiKey != nil && subtle.ConstantTimeCompare([]byte(key), s.apiKey) == 1 {
			return nil, true
		}
		if s.keys != nil {
			if c := s.keys.Lookup(key); c != nil {
				return c, true
			}
		}
	}
	return nil, false
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

// recorder remembers the status and size of a response for the log, and
// gives every write a deadline (Options.WriteIdleTimeout): each write, and
// the flush that follows it, must make progress within writeIdle of its
// start, give or take a sixteenth (see armWrite). It unwraps to the real
// writer, so http.ResponseController can flush it.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64

	// anthropic: the request is on a Messages API path, whose errors
	// writeError writes in Anthropic's shape.
	anthropic bool
	// client is the keys file's key of the request, whose rate-limit
	// headers go on the response (setRateLimitHeaders); nil for none.
	client *keys.Client

	rc        *http.ResponseController
	writeIdle time.Duration // 0: no deadlines (disabled, or unsupported by the writer)
	armed     time.Time     // when the deadline was last moved
}

// newRecorder wraps w. The connection's write deadline starts at now plus
// writeIdle, which also bounds what net/http writes on its own before the
// handler's first write (a 100 Continue); net/http clears it after the
// response, and on a hijack.
func newRecorder(w http.ResponseWriter, writeIdle time.Duration) *recorder {
	r := &recorder{ResponseWriter: w, writeIdle: writeIdle}
	if writeIdle > 0 {
		r.rc = http.NewResponseController(w)
		r.armed = time.Now()
		if r.rc.SetWriteDeadline(r.armed.Add(writeIdle)) != nil {
			r.writeIdle = 0 // not a connection (a test's writer)
		}
	}
	return r
}

// armWrite moves the write deadline to writeIdle from now before a write,
// unless it was moved less than a sixteenth of writeIdle ago: moving it
// costs about half a microsecond (a timer in the runtime's poller), as
// much as a tenth of a token's write, so a stream of tokens moves it a few
// times per window instead of once per token, and a write gets between
// 15/16 of writeIdle and all of it.
func (r *recorder) armWrite() {
	if r.writeIdle <= 0 {
		return
	}
	if now := time.Now(); now.Sub(r.armed) >= r.writeIdle/16 {
		r.armed = now
		_ = r.rc.SetWriteDeadline(now.Add(r.writeIdle))
	}
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
		r.limitHeaders()
	}
	r.armWrite()
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
		r.limitHeaders()
	}
	r.armWrite()
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// limitHeaders sets the rate-limit headers of the request's key, as its
// limits stand when the response starts (after a generation took its
// request from them).
func (r *recorder) limitHeaders() {
	if r.client != nil {
		setRateLimitHeaders(r.ResponseWriter.Header(), r.client, r.anthropic)
	}
}
