package service

import (
	"context"
	"errors"
	"io"
	"net/http"
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

// appendModel appends a Model object with rill's extensions, context_length
// and description, present when known.
func appendModel(b []byte, m *engine.Model) []byte {
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
	g, e := s.start(r.Context(), r.URL.Path, body, info.id, asRequested)
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	defer g.cancel()

	if g.stream {
		sw := newSSEWriter(w)
		if err := sw.start(); err != nil {
			info.status = statusClientClosed
			return
		}
		u, err := g.streamTo(r.Context(), sw, s.ping)
		info.usage = u
		if err != nil && r.Context().Err() != nil {
			info.status = statusClientClosed
		}
		return
	}
	out, u, err := g.collect(r.Context())
	if err != nil {
		s.fail(w, r, info, fromEngine(err, g.model))
		return
	}
	info.usage = u
	writeJSON(w, r, out)
}

// readBody reads r's body, at most maxBody bytes.
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
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, invalid("", "", "The request body could not be read: %v", err)
	}
	return body, nil
}

// start is where every transport's generation begins: it validates body as
// the body of POST path (/v1/chat/completions or /v1/completions) against
// the OpenAPI schema, converts it, and starts its engine requests under a
// context derived from ctx. Errors the engine can know before the first
// token come back as *apiError, ready for a plain HTTP answer. The caller
// owns the generation: it must run it (stream or collect), or call its
// cancel. The WebSocket transport calls start with the body of a "create"
// message and alwaysStreamed, which makes the plan streamed
// (plan.forceStream) before its engine requests start: what they ask of
// the engine (running counts for continuous usage) depends on it.
func (s *Server) start(ctx context.Context, path string, body []byte, requestID string, d delivery) (*generation, *apiError) {
	if err := s.validator.ValidateBody(ctx, http.MethodPost, path, body); err != nil {
		return nil, fromValidation(err)
	}
	var p *plan
	var e *apiError
	idPrefix := "chatcmpl-"
	switch path {
	case "/v1/chat/completions":
		var req chatRequest
		if e = decodeBody(body, &req); e == nil {
			p, e = chatPlan(&req)
		}
	case "/v1/completions":
		idPrefix = "cmpl-"
		var req completionRequest
		if e = decodeBody(body, &req); e == nil {
			p, e = completionPlan(&req)
		}
	default:
		e = &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "unknown_url",
			Message: "Invalid URL (POST " + path + ")."}
	}
	if e != nil {
		return nil, e
	}
	if d == alwaysStreamed {
		p.forceStream()
	}

	ctx, cancel := context.WithCancel(ctx)
	g := &generation{plan: p, id: idPrefix + requestID, created: time.Now().Unix(), cancel: cancel}
	for _, req := range p.reqs {
		st, err := s.engine.Generate(ctx, req)
		if err != nil {
			cancel()
			for _, started := range g.streams {
				drain(started)
			}
			return nil, fromEngine(err, p.model)
		}
		g.streams = append(g.streams, st)
	}
	return g, nil
}

// delivery says how a transport delivers a generation.
type delivery int

const (
	// asRequested streams when the body's "stream" says so (HTTP).
	asRequested delivery = iota
	// alwaysStreamed streams whatever the body says (WebSocket).
	alwaysStreamed
)

// fail answers with e unless the client is gone, which is only logged.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, info *requestInfo, e *apiError) {
	if r.Context().Err() != nil {
		info.status = statusClientClosed
		return
	}
	writeError(w, e)
}

// drain reads a cancelled stream to its end, so that its engine request is
// finished before the handler returns.
func drain(st engine.Stream) {
	for {
		if _, err := st.Recv(); err != nil {
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
