package service

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"rill/engine"
	"rill/openapi"
)

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	writeJSON(w, r, []byte(`{"status":"ok"}`+"\n"))
}

func (s *Server) handleSpec(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(openapi.Spec())))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(openapi.Spec())
	}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	b := append(make([]byte, 0, 256), `{"object":"list","data":[`...)
	for i, m := range s.engine.Models() {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, &m)
	}
	writeJSON(w, r, append(b, "]}\n"...))
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	for _, m := range s.engine.Models() {
		if m.ID == id {
			writeJSON(w, r, append(appendModel(nil, &m), '\n'))
			return
		}
	}
	writeError(w, fromEngine(engine.ErrUnknownModel, id))
}

// appendModel appends a Model object with rill's extensions,
// context_length, description, n_params and n_active_params (llama.cpp's
// name for the first count), present when known.
func appendModel(b []byte, m *engine.ModelCard) []byte {
	owner := m.OwnedBy
	if owner == "" {
		owner = "rill"
	}
	b = append(b, `{"id":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"object":"model","created":`...)
	b = appendInt(b, int(m.Created))
	b = append(b, `,"owned_by":`...)
	b = appendString(b, owner)
	if m.ContextLength > 0 {
		b = append(b, `,"context_length":`...)
		b = appendInt(b, m.ContextLength)
	}
	if m.Description != "" {
		b = append(b, `,"description":`...)
		b = appendString(b, m.Description)
	}
	if m.Params > 0 {
		b = append(b, `,"n_params":`...)
		b = strconv.AppendInt(b, m.Params, 10)
	}
	if m.ActiveParams > 0 {
		b = append(b, `,"n_active_params":`...)
		b = strconv.AppendInt(b, m.ActiveParams, 10)
	}
	if m.State != "" {
		b = append(b, `,"status":`...)
		b = appendModelStatus(b, m)
	}
	return append(b, '}')
}

// appendModelStatus appends the status object of a model loaded on
// demand, in llama.cpp's router-mode shape: {"value":"loaded"}, with
// "failed" and "error" after a failed load.
func appendModelStatus(b []byte, m *engine.ModelCard) []byte {
	b = append(b, `{"value":`...)
	b = appendString(b, m.State)
	if m.LoadError != "" {
		b = append(b, `,"failed":true,"error":`...)
		b = appendString(b, m.LoadError)
	}
	return append(b, '}')
}

// handleGenerate serves POST /v1/chat/completions and POST /v1/completions:
// the stream or the complete response.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	body, e := s.readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	begun := time.Now()
	// A request that may detach (ssedetach.go) runs its generation under a
	// context that can outlive the handler.
	ctx, dt, release := s.sseContext(r)
	detached := false
	defer func() { release(detached) }()
	// Apart: the handler's goroutine may wait for the engine for long, and
	// should not keep the stack that validation and templating grew.
	var p *job
	g, e := apart(func() (*generation, *apiError) {
		var e *apiError
		if p, e = s.parse(r.Context(), r.URL.Path, body); e != nil || p.resumable {
			return nil, e
		}
		return s.launchUnder(ctx, nil, p, wirePrefix(p)+info.id, begun)
	})
	if e == nil && p.resumable {
		detached = s.generateResumable(w, r, info, ctx, dt, p, begun)
		return
	}
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	defer func() {
		if !detached {
			g.cancel()
		}
	}()
	info.model, info.obs = g.model, g.obs

	if g.stream {
		sw := newSSEWriter(w)
		detached = s.streamSSE(w, r, info, dt, g, g.newChunkStream(ctx, sw, s.ping), sw, sseAnswer{fail: sw.fail,
			settle: func(u *Usage, err error) {
				info.usage = u
				endSSE(ctx, info, sw.fail, g, err)
			}})
		return
	}
	out, u, err := g.collect(ctx)
	if err != nil {
		s.fail(w, r, info, fromEngine(err, g.model))
		return
	}
	info.usage = u
	writeJSON(w, r, out)
}

// transportFailed records, for the log, why the client stopped hearing
// its stream: it left (499), or it stopped reading and a write made no
// progress for the write idle timeout (499, with that reason).
func (s *Server) transportFailed(r *http.Request, info *requestInfo, err error) {
	info.status = statusClientClosed
	if errors.Is(err, os.ErrDeadlineExceeded) && r.Context().Err() == nil {
		info.reason = reasonWriteIdle
	}
}

// readBody reads r's body, at most maxBody bytes, within the read timeout
// that ServeHTTP started (armBodyDeadline). A body that does not arrive in
// time is a 408, and the connection is not reused: the read deadline stays
// in place so that net/http, which would otherwise read on to find the
// next request, gives the connection up.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	tooLarge := func() *apiError {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large",
			Message: "The request body is larger than the " + strconv.FormatInt(s.maxBody, 10) + " bytes this server accepts."}
	}
	if r.ContentLength > s.maxBody {
		return nil, tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, tooLarge()
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			return nil, &apiError{Status: http.StatusRequestTimeout, Type: typeInvalidRequest, Code: "request_timeout",
				Message: "The request body did not arrive within " + s.bodyTimeout.String() + "."}
		}
		return nil, invalid("", "", "The request body could not be read: %v", err)
	}
	if s.bodyTimeout > 0 && r.ContentLength != 0 {
		// The body is in: from here on the connection is read only to
		// notice the client leaving, which has no deadline.
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	return body, nil
}

// start is where every transport's generation begins: it parses body as
// the body of POST path (/v1/chat/completions or /v1/completions) and
// starts its engine requests under a context derived from ctx. Errors the
// engine can know before the first token come back as *apiError, ready
// for a plain HTTP answer. The caller owns the generation: it must run it
// (stream or collect), or call its cancel. The WebSocket transport calls
// start with the body of a "create" message and alwaysStreamed, which makes
// the job streamed (job.forceStream) before its engine requests start:
// what they ask of the engine (running counts for continuous usage)
// depends on it.
func (s *Server) start(ctx context.Context, path string, body []byte, requestID string, d delivery) (*generation, *apiError) {
	begun := time.Now()
	p, e := s.parse(ctx, path, body)
	if e != nil {
		return nil, e
	}
	if d == alwaysStreamed {
		p.forceStream()
	}
	idPrefix := "chatcmpl-"
	if p.kind == kindCompletion {
		idPrefix = "cmpl-"
	}
	return s.launch(ctx, p, idPrefix+requestID, begun)
}

// launch starts the engine requests of p under a context derived from ctx
// and begins its metrics; id is the wire id, begun when the request came
// in. The caller owns the generation as start's caller does.
func (s *Server) launch(ctx context.Context, p *job, id string, begun time.Time) (*generation, *apiError) {
	ctx, cancel := context.WithCancel(ctx)
	return s.launchUnder(ctx, cancel, p, id, begun)
}

// launchUnder is launch under ctx itself, for a caller that ends ctx as
// soon as it is done with the generation (a handler's request context, a
// WebSocket request's, a stream's that detached), which stops the engine
// requests if they still run: a context of the generation's own would
// cost every stream that waits for its engine a context, its channel and
// a table of children in ctx, some 370 bytes. stop, when not nil, is the
// generation's cancel, which stops them sooner, as the stream ends.
func (s *Server) launchUnder(ctx context.Context, stop func(), p *job, id string, begun time.Time) (*generation, *apiError) {
	if stop == nil {
		stop = func() {}
	}
	client, e := s.admitKey(ctx, p)
	if e != nil {
		stop()
		return nil, e
	}
	g := &generation{job: p, id: id, created: begun.Unix(), cancel: stop, pings: s.pings}
	for _, req := range p.reqs {
		st, err := s.engine.Generate(ctx, req)
		if err != nil {
			stop()
			for _, started := range g.streams {
				// They end with ctx: after stop, or once the caller, which
				// is answering this error, ends it.
				go drain(started)
			}
			return nil, fromEngine(err, p.model)
		}
		g.streams = append(g.streams, &panicSafeStream{Stream: st, log: s.log, requestID: id})
	}
	// Only now is the model known to be served: series are never made for
	// the model names of requests that fail.
	g.obs = s.metrics.begin(p.model, p.choices(), begun)
	if client != nil {
		g.obs.key = &keyUse{client: client, m: s.metrics.key(client.Name())}
	}
	return g, nil
}

// parse is the request decoder: it validates body against the OpenAPI
// schema of POST path, decodes it and converts it into a job, checking
// what the schema cannot. It touches no engine.
func (s *Server) parse(ctx context.Context, path string, body []byte) (*job, *apiError) {
	var p *job
	var e *apiError
	switch path {
	case "/v1/chat/completions", "/v1/completions":
	default:
		return nil, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "unknown_url",
			Message: "Invalid URL (POST " + clip(path, maxEchoBytes) + ")."}
	}
	if err := s.validator.ValidateBody(ctx, http.MethodPost, path, body); err != nil {
		return nil, fromValidation(err)
	}
	if path == "/v1/chat/completions" {
		var req chatRequest
		if e = decodeBody(body, &req); e == nil {
			p, e = chatPlan(&req)
		}
	} else {
		var req completionRequest
		if e = decodeBody(body, &req); e == nil {
			p, e = completionPlan(&req)
		}
	}
	if e != nil {
		return nil, e
	}
	if e := s.checkChoices(p); e != nil {
		return nil, e
	}
	return p, nil
}

// checkChoices refuses a job that asks for more choices (prompts × n)
// than Options.MaxChoices, before any engine work: every choice is a
// sequence the engine must hold.
func (s *Server) checkChoices(p *job) *apiError {
	c := p.choices()
	if c <= s.maxChoices {
		return nil
	}
	param := "n"
	if p.n == 1 {
		param = "prompt"
	}
	return invalid(param, "too_many_choices",
		"This request asks for %d choices (%d prompts × n = %d); this server generates at most %d choices per request.",
		c, len(p.reqs), p.n, s.maxChoices)
}

// request that a shutdown cut is answered as such, whatever e says.
// delivery says how a transport delivers a generation.
type delivery int

const (
	// asRequested streams when the body's "stream" says so (HTTP).
	asRequested delivery = iota
	// alwaysStreamed streams whatever the body says (WebSocket).
	alwaysStreamed
)

// fail answers with e unless the client is gone, which is only logged. A
// request that a shutdown cut is answered as such, whatever e says.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, info *requestInfo, e *apiError) {
	if isShutdown(r.Context()) {
		info.reason = reasonShutdown
		writeError(w, errShutdownCut)
		return
	}
	if r.Context().Err() != nil {
		info.status = statusClientClosed
		return
	}
	info.reason = reasonOf(e)
	writeError(w, e)
}

// engineFailed records, for the log, a stream that the engine ended with
// err after the response began (the stream sent the client err's error
// event): its status and, for an expected end, its reason.
func engineFailed(info *requestInfo, err error, model string) {
	e := fromEngine(err, model)
	info.status, info.reason = e.Status, reasonOf(e)
}

// drain reads a cancelled stream to its end, so that its engine request is
// finished before the handler returns.
func drain(st engine.Stream) {
	for {
		if _, err := engine.Recv(st); err != nil {
			return
		}
	}
}

// writeJSON writes a complete 200 JSON response (headers only for HEAD).
func writeJSON(w http.ResponseWriter, r *http.Request, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
