package service

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"rill/engine"
)

// The Messages API's endpoints: POST /v1/messages (the message object, or
// its events over SSE) and POST /v1/messages/count_tokens. A "?beta=true"
// query, which Anthropic's SDKs add for beta features, changes nothing:
// routes match the path alone.

// messagesSSE frames a message's events as Anthropic's stream does:
// `event: <type>` and `data: <json>` per event, idle pings as
// `event: ping` with data {"type":"ping"}, and the error that ends a
// stream as `event: error`. There is no [DONE]: message_stop ends it.
type messagesSSE struct{ *sseWriter }

func (s messagesSSE) event(typ string, data []byte) error {
	return responseSSE(s).event(typ, data)
}

func (s messagesSSE) ping() error { return s.event("ping", []byte(`{"type":"ping"}`)) }

func (s messagesSSE) fail(e *apiError) error {
	b := append(s.buf[:0], "event: error\ndata: "...)
	b = appendAnthropicError(b, e)
	s.buf = append(b, '\n', '\n')
	return s.write()
}

// messageGen is a Messages generation that started.
type messageGen struct {
	*generation
}

// encoder returns the message's encoder writing to w (nil: not streamed).
func (g *messageGen) encoder(w messageWriter) *messageEncoder {
	return newMessageEncoder(g.id, g.model, w)
}

// startMessage validates and converts body (of POST /v1/messages or a
// WebSocket create) and starts its generation; the caller owns the
// generation (it must run it or cancel it). skipped names the tools rill
// left out, for the caller's warning; it is set even when the request
// fails later. A streamed message asks the engine for running Stats, so
// that message_start can carry the prompt's counts.
//
// A max_tokens beyond what the context window leaves the prompt (Claude
// Code asks for 32,000 output tokens, whatever the model) is the engine's
// to judge under the model's max_tokens policy, as on every API: by
// default it runs to the end of the window and stops with stop_reason
// max_tokens; under the error policy it is refused, in Anthropic's shape.
func (s *Server) startMessage(ctx context.Context, body []byte, d delivery) (g *messageGen, skipped []string, e *apiError) {
	begun := time.Now()
	if err := s.validator.ValidateBody(ctx, http.MethodPost, pathMessages, body); err != nil {
		return nil, nil, fromValidation(err)
	}
	var req messagesRequest
	if e := decodeBody(body, &req); e != nil {
		return nil, nil, e
	}
	p, skipped, e := messagesJob(&req)
	if e != nil {
		return nil, nil, e
	}
	if d == alwaysStreamed {
		p.stream = true
	}
	p.reqs[0].ContinuousUsage = p.stream
	id := newObjectID("msg_")
	gen, e := s.launchUnder(ctx, nil, p, id, begun)
	if e != nil {
		return nil, skipped, messagesError(e)
	}
	return &messageGen{generation: gen}, skipped, nil
}

// warnSkipped logs what a request asked for that rill left out, and
// returns the warning's text.
func (s *Server) warnSkipped(id string, skipped []string) string {
	msg := "left out of the prompt, this server cannot run them: " + strings.Join(skipped, ", ")
	s.log.Warn("messages: server tools left out", slog.String("id", id), slog.Any("tools", skipped))
	return msg
}

// headerSafe makes s a header value: printable ASCII (other bytes become
// '?'), at most 1 KiB ("..." marks a cut).
func headerSafe(s string) string {
	const limit = 1024
	b := []byte(s)
	if len(b) > limit {
		b = append(b[:limit-3:limit-3], "..."...)
	}
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// runMessage runs g and encodes its events with enc, pinging enc's writer
// while idle (every ping, when positive). It returns the usage of a
// completed message, or the error that ended it: an engine error after
// the stream began is sent as an error event; a transport error or
// cancellation sends nothing more.
func (g *generation) runMessage(ctx context.Context, enc *messageEncoder, ping time.Duration) (*Usage, error) {
	var p pinger
	if enc.w != nil {
		p = enc.w
	}
	stats, err := g.runEncoded(ctx, ping, enc, p)
	if err != nil {
		return nil, err
	}
	return g.finishUsage(stats, enc.finish)
}

// messageStream is runMessage taken apart at its wait, as chunkStream is
// streamTo: next sends what is ready and wait waits for more, possibly on
// another goroutine, pinging enc's writer while idle (every ping, when
// positive). It holds the request's context because its wait outlives the
// call that made it.
type messageStream struct {
	g    *generation
	ctx  context.Context
	enc  *messageEncoder
	ping time.Duration
	pulled
}

func (g *generation) newMessageStream(ctx context.Context, enc *messageEncoder, ping time.Duration) *messageStream {
	return &messageStream{g: g, ctx: ctx, enc: enc, ping: ping}
}

// next sends the events that are ready. It reports over, with what
// runMessage returns, once the message ended; otherwise the caller waits,
// then calls next again.
func (s *messageStream) next() (over bool, u *Usage, err error) {
	if s.r == nil {
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
	return true, u, err
}

func (s *messageStream) waitFor(d time.Duration) bool { return s.r.waitForDropping(d, &s.enc.buf) }

// handleMessages serves POST /v1/messages. A streamed message may detach
// from net/http while it waits for its engine, as a chat stream may
// (ssedetach.go).
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	body, e := s.readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	ctx, dt, release := s.sseContext(r)
	detached := false
	defer func() { release(detached) }()
	g, e := apart(func() (*messageGen, *apiError) {
		g, skipped, e := s.startMessage(ctx, body, asRequested)
		if len(skipped) > 0 {
			w.Header().Add("Warning", warningValue(s.warnSkipped(info.id, skipped)))
		}
		return g, e
	})
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

	if !g.stream {
		enc := g.encoder(nil)
		u, err := g.runMessage(ctx, enc, 0)
		if err != nil {
			s.fail(w, r, info, messagesError(fromEngine(err, g.model)))
			return
		}
		info.usage = u
		writeJSON(w, r, append(enc.message(u), '\n'))
		return
	}
	sw := newSSEWriter(w)
	fail := messagesSSE{sw}.fail
	detached = s.streamSSE(w, r, info, dt, g.generation, g.newMessageStream(ctx, g.encoder(messagesSSE{sw}), s.ping), sw,
		sseAnswer{fail: fail, settle: func(u *Usage, err error) {
			info.usage = u
			endSSE(ctx, info, fail, g.generation, err)
		}})
}

// countTokensRequest converts a count_tokens body into the tokenizer's
// request: the prompt a Messages request of the same conversation, tools
// and thinking would run.
func countTokensRequest(r *messagesRequest) (*engine.TokenizeRequest, []string, *apiError) {
	p, skipped, e := messagesJob(r)
	if e != nil {
		return nil, nil, e
	}
	req := p.reqs[0]
	return &engine.TokenizeRequest{Model: req.Model, Messages: req.Messages, Tools: req.Tools, ToolChoice: req.ToolChoice,
		ChatTemplateKwargs: req.ChatTemplateKwargs}, skipped, nil
}

// handleCountTokens serves POST /v1/messages/count_tokens:
// {"input_tokens": N}, the prompt_tokens the same Messages request runs
// (input_tokens + cache_read_input_tokens + cache_creation_input_tokens of
// its usage). The model's engine must implement engine.Tokenizer.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	var body messagesRequest
	if e := s.readValidated(w, r, &body); e != nil {
		s.fail(w, r, info, e)
		return
	}
	info.model = body.Model
	req, skipped, e := countTokensRequest(&body)
	if len(skipped) > 0 {
		w.Header().Add("Warning", warningValue(s.warnSkipped(info.id, skipped)))
	}
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	t, e := s.tokenizer(body.Model)
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	res, err := t.Tokenize(r.Context(), req)
	if err != nil {
		s.fail(w, r, info, messagesError(tokenizeError(err, body.Model)))
		return
	}
	b := append(make([]byte, 0, 32), `{"input_tokens":`...)
	b = appendInt(b, len(res.Tokens))
	writeJSON(w, r, append(b, "}\n"...))
}
