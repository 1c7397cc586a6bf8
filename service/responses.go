package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"rill/engine"
)

// OpenAI's Responses API: POST /v1/responses (plain JSON or SSE),
// DELETE /v1/responses/{id}, the WebSocket mode (responses_ws.go), and
// background responses with GET /v1/responses/{id}, its cancel and
// input_items (background.go). A request becomes a chat job of one choice,
// so it runs on every engine as chat does; its events are made by
// responseEncoder (responses_events.go) and its conversation kept in the
// server's store.Store through responseStore (responses_store.go).

const pathResponses = "/v1/responses"

// responseRequest is the body of POST /v1/responses and of a WebSocket
// response.create message, decoded after the OpenAPI validator passed it.
type responseRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	TopLogprobs        *int            `json:"top_logprobs"`
	Include            []string        `json:"include"`
	Stream             *bool           `json:"stream"`
	Tools              []responseTool  `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Text               *struct {
		Format *responseTextFormat `json:"format"`
	} `json:"text"`
	Reasoning    *responseReasoning `json:"reasoning"`
	Metadata     map[string]string  `json:"metadata"`
	Background   *bool              `json:"background"`
	Conversation json.RawMessage    `json:"conversation"`
	Prompt       json.RawMessage    `json:"prompt"`
	User         *string            `json:"user"`

	extensions
}

// includeLogprobs is the include value that asks for output logprobs.
const includeLogprobs = "message.output_text.logprobs"

// responseJob is a validated Responses request ready to run: the chat job
// the engine gets, and what the response object echoes.
type responseJob struct {
	*job
	id        string // "resp_…"
	createdAt int64  // unix seconds
	// streamID is the WebSocket lane the response.create named ("": none).
	streamID string

	instructions *string
	previousID   string
	parent       *storedResponse // the conversation it continues
	input        []engine.Message
	store        bool
	// background: the response runs on without its client (background.go).
	background bool
	// inputList is the input as GET …/input_items lists it, made once by
	// inputItems so that its ids stay the same.
	inputList       []json.RawMessage
	maxOutputTokens int // 0: none
	temperature     float64
	topP            float64
	topLogprobs     int
	// What the response object echoes of tools and formats, as compact
	// JSON (responses_tools.go): tools, tool_choice, text.format.
	tools             []byte
	toolChoice        []byte
	textFormat        []byte
	parallelToolCalls bool
	user              string
	metadata          map[string]string
	metadataKeys      []string // sorted, for a stable encoding

	// reasoningEffort and reasoningSummary echo the request's reasoning
	// ("": null).
	reasoningEffort, reasoningSummary string
	// encryptReasoning: reasoning items carry encrypted_content (include
	// "reasoning.encrypted_content").
	encryptReasoning bool

	// clientTools are the custom and namespaced tools by the function name
	// the model sees (responses_tools.go).
	clientTools map[string]clientTool // nil until one
	// warnings say what of the request was left out or not honoured.
	warnings warnings
}

// warnings are sentences that say what of a request rill left out or did
// not honour, rather than refuse it: hosted tools, reasoning it cannot
// read. They are logged, and sent as Warning headers where the transport
// has headers.
type warnings []string

func (w *warnings) add(format string, args ...any) {
	*w = append(*w, fmt.Sprintf(format, args...))
}

// conversations resolves what a request refers to: stored responses and
// their output items (messages and function calls), each as the message it
// stands for in a conversation.
// store.ErrNotFound is an id it does not know; another error is the
// store's failure.
type conversations interface {
	response(ctx context.Context, id string) (*storedResponse, error)
	item(ctx context.Context, id string) (engine.Message, error)
}

// responsesPlan converts a Responses request. It checks what the schema
// cannot and refuses what rill does not support (responsesUnsupported;
// tool types and input items it lacks are refused where they are read).
// storeOn says whether the server keeps responses at all.
func responsesPlan(ctx context.Context, r *responseRequest, conv conversations, storeOn bool) (*responseJob, *apiError) {
	if e := responsesUnsupported(r); e != nil {
		return nil, e
	}
	req := &engine.Request{Model: r.Model, N: 1, Responses: true}
	p := &responseJob{
		job:       &job{kind: kindChat, model: r.Model, n: 1, reqs: []*engine.Request{req}},
		id:        newObjectID("resp_"),
		createdAt: time.Now().Unix(),
		store:     storeOn && (r.Store == nil || *r.Store),
		metadata:  r.Metadata,
	}
	p.stream = r.Stream != nil && *r.Stream
	if r.Background != nil && *r.Background {
		// As OpenAI: a background response is read back from the store,
		// so it needs one.
		switch {
		case !storeOn:
			return nil, invalid("background", "invalid_request",
				"Background responses need the response store; this server stores no responses (--responses-store 0).")
		case !p.store:
			return nil, invalid("background", "invalid_request", "Background responses require store to be true.")
		}
		p.background = true
	}

	if r.PreviousResponseID != nil && *r.PreviousResponseID != "" {
		id := *r.PreviousResponseID
		parent, err := conv.response(ctx, id)
		if err != nil && !isNotFound(err) {
			return nil, storeFailed()
		}
		if err != nil {
			msg := fmt.Sprintf("Previous response with id '%s' not found.", clip(id, maxEchoBytes))
			if !storeOn {
				msg += " This server stores no responses (--responses-store 0)."
			}
			return nil, invalid("previous_response_id", "previous_response_not_found", "%s", msg)
		}
		p.previousID, p.parent = id, parent
	}
	var history []engine.Message
	if p.parent != nil {
		history = p.parent.history()
	}
	input, e := responseInput(ctx, r.Input, conv, history, &p.warnings)
	if e != nil {
		return nil, e
	}
	p.input = input

	var msgs []engine.Message
	if r.Instructions != nil && *r.Instructions != "" {
		p.instructions = r.Instructions
		msgs = append(msgs, engine.Message{Role: engine.RoleSystem, Content: *r.Instructions})
	}
	msgs = append(msgs, history...)
	msgs = append(msgs, input...)
	if len(input) == 0 && p.parent == nil {
		return nil, invalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	req.Messages = msgs

	if r.MaxOutputTokens != nil {
		p.maxOutputTokens = *r.MaxOutputTokens
		req.MaxTokens = *r.MaxOutputTokens
	}
	s := engine.Sampling{Temperature: 1, TopP: 1}
	if r.Temperature != nil {
		s.Temperature = *r.Temperature
	}
	if r.TopP != nil {
		s.TopP = *r.TopP
	}
	p.temperature, p.topP = s.Temperature, s.TopP
	if s.TopP == 0 {
		s.TopP = math.SmallestNonzeroFloat64 // as chat: the most likely token alone
	}
	r.extensions.apply(req, &s)
	req.Sampling = s
	if r.TopLogprobs != nil {
		p.topLogprobs = *r.TopLogprobs
	}
	p.encryptReasoning = slices.Contains(r.Include, includeReasoningEncrypted)
	if slices.Contains(r.Include, includeLogprobs) {
		p.logprobs = true
		req.Logprobs = true
		req.TopLogprobs = p.topLogprobs
	}

	if e := applyResponseTools(r, req, p); e != nil {
		return nil, e
	}
	applyReasoning(r, req, p)
	if r.User != nil {
		p.user = *r.User
	}
	for k := range r.Metadata {
		p.metadataKeys = append(p.metadataKeys, k)
	}
	slices.Sort(p.metadataKeys)
	return p, nil
}

// responsesUnsupported refuses the features a request needs that rill does
// not have yet, each with a 400 naming its field.
func responsesUnsupported(r *responseRequest) *apiError {
	notYet := func(param, what string) *apiError {
		return invalid(param, "unsupported_parameter", "%s not supported by this server yet.", what)
	}
	switch {
	case !isNull(r.Conversation):
		return notYet("conversation", "Conversations are")
	case !isNull(r.Prompt):
		return notYet("prompt", "Prompt templates are")
	}
	return nil
}

// newObjectID returns prefix and 48 random hex digits, the shape of
// OpenAI's response and item ids.
func newObjectID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
}

// serverConversations resolves against the server's store, and first
// against a WebSocket connection's last response, which OpenAI's WebSocket
// mode keeps whatever store says.
type serverConversations struct {
	store *responseStore
	last  *storedResponse // nil outside a WebSocket connection
}

func (c serverConversations) response(ctx context.Context, id string) (*storedResponse, error) {
	if c.last != nil && c.last.id == id {
		return c.last, nil
	}
	return c.store.get(ctx, id)
}

func (c serverConversations) item(ctx context.Context, id string) (engine.Message, error) {
	if c.last != nil {
		if m, ok := c.last.item(id); ok {
			return m, nil
		}
	}
	return c.store.item(ctx, id)
}

// planResponse validates and converts body; last is a WebSocket
// connection's last response, or nil.
func (s *Server) planResponse(ctx context.Context, body []byte, last *storedResponse) (*responseJob, *apiError) {
	if err := s.validator.ValidateBody(ctx, http.MethodPost, pathResponses, body); err != nil {
		return nil, fromValidation(err)
	}
	var req responseRequest
	if e := decodeBody(body, &req); e != nil {
		return nil, e
	}
	rp, e := responsesPlan(ctx, &req, serverConversations{store: s.responses, last: last}, s.responses.enabled())
	if e != nil {
		return nil, e
	}
	for _, w := range rp.warnings {
		s.log.LogAttrs(ctx, slog.LevelWarn, "responses request: "+w,
			slog.String("response", rp.id), slog.String("model", rp.model))
	}
	return rp, nil
}

// startResponse plans body and starts its generation under ctx, for a
// WebSocket connection (last is its last response); the caller owns the
// generation (it must run it or cancel it).
func (s *Server) startResponse(ctx context.Context, body []byte, last *storedResponse) (*responseJob, *generation, *apiError) {
	begun := time.Now()
	rp, e := s.planResponse(ctx, body, last)
	if e != nil {
		return nil, nil, e
	}
	if rp.background {
		return nil, nil, invalid("background", "unsupported_parameter",
			"Background responses are not supported on a WebSocket yet; use POST /v1/responses.")
	}
	g, e := s.launchUnder(ctx, nil, rp.job, rp.id, begun)
	if e != nil {
		return nil, nil, responsesError(e)
	}
	return rp, g, nil
}

// runResponse runs g and encodes its events with enc, pinging w while idle
// when w is set. It returns the usage of a completed response, the stored
// form of the response (nil unless it completed), and the error that ended
// it otherwise: an engine error after the stream began is sent as
// response.failed; a transport error or cancellation sends nothing more.
func (rp *responseJob) runResponse(ctx context.Context, g *generation, enc *responseEncoder, ping time.Duration) (*Usage, *storedResponse, error) {
	if err := enc.opening(); err != nil {
		return nil, nil, &transportError{err}
	}
	var p pinger
	if enc.w != nil {
		p = enc.w
	}
	stats, err := g.runEncoded(ctx, ping, enc, p)
	if err != nil {
		return nil, nil, err
	}
	u, err := g.finishUsage(stats, enc.finish)
	if err != nil {
		return u, nil, err
	}
	return u, rp.stored(enc), nil
}

// responseStream is runResponse taken apart at its wait, as chunkStream
// is streamTo: next sends what is ready and wait waits for more, possibly
// on another goroutine, pinging enc's writer while idle (every ping, when
// positive). It holds the request's context because its wait outlives the
// call that made it.
type responseStream struct {
	rp   *responseJob
	g    *generation
	ctx  context.Context
	enc  *responseEncoder
	ping time.Duration
	pulled
	// st is the finished response, once next reported it completed.
	st *storedResponse
}

func (rp *responseJob) newResponseStream(ctx context.Context, g *generation, enc *responseEncoder, ping time.Duration) *responseStream {
	return &responseStream{rp: rp, g: g, ctx: ctx, enc: enc, ping: ping}
}

// next sends the opening events on its first call, then the events that
// are ready. It reports over, with the usage and error that runResponse
// returns, once the response ended (st is set when it completed);
// otherwise the caller waits, then calls next again.
func (s *responseStream) next() (over bool, u *Usage, err error) {
	if s.r == nil {
		if err := s.enc.opening(); err != nil {
			return true, nil, &transportError{err}
		}
		var p pinger
		if s.enc.w != nil {
			p = s.enc.w
		}
		s.r = s.g.newPull(s.ctx, s.ping, encodedEvent(s.enc), nil, idlePinger(p))
	}
	over, stats, err := s.g.pumpEncoded(s.r, s.enc)
	if !over || err != nil {
		return over, nil, err
	}
	u, err = s.g.finishUsage(stats, s.enc.finish)
	if err != nil {
		return true, u, err
	}
	s.st = s.rp.stored(s.enc)
	return true, u, nil
}

func (s *responseStream) waitFor(d time.Duration) bool { return s.r.waitForDropping(d, &s.enc.buf) }

// addClientTool records the client's tool ct under the function name
// the engine sees.
func (rp *responseJob) addClientTool(name string, ct clientTool) {
	if rp.clientTools == nil {
		rp.clientTools = make(map[string]clientTool)
	}
	rp.clientTools[name] = ct
}

// isClientGone reports whether err ended a generation because its client
// left or cancelled, or a write to it failed: nobody to tell.
func isClientGone(err error) bool {
	var te *transportError
	return errors.As(err, &te) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// stored is the finished response as the store keeps it: its turn is the
// input, then one assistant message with the reasoning of its reasoning
// items, the text of its output messages and the calls of its
// function_call items, as chat has a reply.
func (rp *responseJob) stored(enc *responseEncoder) *storedResponse {
	turn := make([]engine.Message, 0, len(rp.input)+1)
	turn = append(turn, rp.input...)
	reply := engine.Message{Role: engine.RoleAssistant}
	items := make([]storedItem, 0, len(enc.items))
	for _, it := range enc.items {
		m := it.message()
		items = append(items, storedItem{id: it.id, message: m})
		reply.ReasoningContent += m.ReasoningContent
		reply.Content += m.Content
		reply.ToolCalls = append(reply.ToolCalls, m.ToolCalls...)
	}
	reply.NullContent = reply.Content == "" && len(reply.ToolCalls) > 0
	turn = append(turn, reply)
	return &storedResponse{id: rp.id, body: enc.response(), turn: turn, parent: rp.parent, items: items,
		inputItems: rp.inputItems()}
}

// handleCreateResponse serves POST /v1/responses. A streamed response may
// detach from net/http while it waits for its engine, as a chat stream
// may (ssedetach.go).
func (s *Server) handleCreateResponse(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	body, e := s.readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	begun := time.Now()
	ctx, dt, release := s.sseContext(r)
	detached := false
	defer func() { release(detached) }()
	var rp *responseJob
	g, e := apart(func() (*generation, *apiError) {
		var e *apiError
		if rp, e = s.planResponse(r.Context(), body, nil); e != nil || rp.background {
			return nil, e
		}
		g, e := s.launchUnder(ctx, nil, rp.job, rp.id, begun)
		if e != nil {
			return nil, responsesError(e)
		}
		return g, nil
	})
	if e == nil && rp.background {
		s.createBackground(w, r, info, rp, begun)
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
	for _, text := range rp.warnings {
		w.Header().Add("Warning", warningValue(text))
	}

	if !rp.stream {
		enc := newResponseEncoder(rp, nil)
		u, st, err := rp.runResponse(ctx, g, enc, 0)
		if err != nil {
			s.fail(w, r, info, fromEngine(err, g.model))
			return
		}
		info.usage = u
		if rp.store {
			s.keep(ctx, st)
		}
		writeJSON(w, r, append(enc.response(), '\n'))
		return
	}
	sw := newSSEWriter(w)
	enc := newResponseEncoder(rp, responseSSE{sw})
	rs := rp.newResponseStream(ctx, g, enc, s.ping)
	detached = s.streamSSE(w, r, info, dt, g, rs, sw, sseAnswer{fail: enc.fail, settle: func(u *Usage, err error) {
		info.usage = u
		switch {
		case err == nil:
		case isShutdown(ctx):
			// The client is still there: tell it why its response ends.
			info.status, info.reason = errShutdownCut.Status, reasonShutdown
			_ = enc.fail(errShutdownCut)
		case ctx.Err() != nil:
			info.status = statusClientClosed
		}
		if rs.st != nil && rp.store {
			s.keep(ctx, rs.st)
		}
	}})
}

// keep stores a completed response, before st is shared. A store that fails loses the response
// for previous_response_id and GET, not the answer the client already has:
// it is logged, not sent. The store's write is not the client's to cancel.
func (s *Server) keep(ctx context.Context, st *storedResponse) {
	if err := s.responses.put(context.WithoutCancel(ctx), st); err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "response not stored", slog.String("response", st.id), slog.Any("err", err))
		return
	}
	st.inStore = true
}

// warningValue is an HTTP Warning header value for text, on the Responses
// and Messages APIs alike: code 299 (a persistent warning), agent rill,
// text made printable ASCII and cut at 1 KiB (headerSafe), then quoted
// (RFC 9110's quoted-string).
func warningValue(text string) string {
	var b strings.Builder
	b.WriteString(`299 rill "`)
	for _, r := range headerSafe(text) {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// responseSSE frames events as OpenAI's Responses stream does:
// `event: <type>` and `data: <json>` per event, no [DONE].
type responseSSE struct{ *sseWriter }

func (s responseSSE) event(typ string, data []byte) error {
	b := append(s.buf[:0], "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	s.buf = append(b, '\n', '\n')
	return s.write()
}

// handleDeleteResponse serves DELETE /v1/responses/{id}.
func (s *Server) handleDeleteResponse(w http.ResponseWriter, r *http.Request, _ *requestInfo) {
	id := strings.TrimPrefix(r.URL.Path, pathResponses+"/")
	if err := s.responses.delete(r.Context(), id); err != nil {
		s.storeError(w, r, id, err)
		return
	}
	b := append([]byte(`{"id":`), appendString(nil, id)...)
	writeJSON(w, r, append(b, `,"object":"response.deleted","deleted":true}`+"\n"...))
}

// storeError answers a store's err about response id: a 404 for an id it
// does not hold, a 503 (logged) when it failed.
func (s *Server) storeError(w http.ResponseWriter, r *http.Request, id string, err error) {
	if isNotFound(err) {
		writeError(w, responseNotFound(id, s.responses.enabled()))
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelError, "response store failed", slog.String("response", id), slog.Any("err", err))
	writeError(w, storeFailed())
}

func responseNotFound(id string, storeOn bool) *apiError {
	msg := fmt.Sprintf("Response with id '%s' not found.", clip(id, maxEchoBytes))
	if !storeOn {
		msg += " This server stores no responses (--responses-store 0)."
	}
	return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "response_not_found", Message: msg}
}
