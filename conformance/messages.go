package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"rill/openapi"
)

// Anthropic's Messages API (POST /v1/messages, count_tokens, and rill's
// WebSocket transport for it): the client side of its specs and its rules
// (docs/design.md §3 rule 13) as pure checks.

// Paths of the Messages API, and the API version the helpers announce.
const (
	MessagesPath     = "/v1/messages"
	CountTokensPath  = "/v1/messages/count_tokens"
	AnthropicVersion = "2023-06-01"
)

// MessagesBody returns a Messages request for model with one user message,
// text, at most maxTokens output tokens, plus the members of extra. It
// never sets "stream".
func MessagesBody(model, text string, maxTokens int, extra map[string]any) map[string]any {
	b := map[string]any{"model": model, "max_tokens": maxTokens,
		"messages": []any{map[string]any{"role": "user", "content": text}}}
	maps.Copy(b, extra)
	return b
}

// anthropicHeaders adds what Anthropic's clients send: the key as
// x-api-key (and as a Bearer token, which rill also takes) and the API
// version.
func (t *Target) anthropicHeaders(h http.Header) {
	t.authorize(h)
	if t.APIKey != "" {
		h.Set("X-Api-Key", t.APIKey)
	}
	h.Set("Anthropic-Version", AnthropicVersion)
}

// PostAnthropic sends body, encoded as JSON, to path of the Messages API
// with Anthropic's headers and reads the whole response.
func (t *Target) PostAnthropic(ctx context.Context, path string, body any) (*Response, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode body for %s: %w", path, err)
	}
	resp, err := t.doAnthropic(ctx, path, data)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: out}, nil
}

func (t *Target) doAnthropic(ctx context.Context, path string, data []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL(path), bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("build POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	t.anthropicHeaders(req.Header)
	resp, err := t.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	return resp, nil
}

// MessageEvent is one event of a streamed message.
type MessageEvent struct {
	// Name is the SSE `event:` field ("" on WebSocket); Type the "type" member.
	Name, Type string
	Raw        json.RawMessage
}

// MessageTranscript is everything one streamed message produced, in order.
type MessageTranscript struct {
	// Transport is "SSE" or "WebSocket".
	Transport string
	// Status is the HTTP status on SSE; on WebSocket 200, or the status of
	// the error message that ended the request.
	Status      int
	ContentType string
	// Events are every event, pings included, an error event last.
	Events []MessageEvent
	// Error is a MessagesErrorResponse document: the body of a non-200
	// answer, an error event's data, or a WebSocket error message's
	// "error" wrapped as {"type":"error","error":…}.
	Error json.RawMessage
	// Problems are framing faults found while reading.
	Problems []string
}

// StreamMessage POSTs body with "stream": true to /v1/messages and reads
// the events to the end. A non-200 answer lands in the transcript's
// Error; the error result is for transport failures only.
func (t *Target) StreamMessage(ctx context.Context, body map[string]any) (*MessageTranscript, error) {
	b := maps.Clone(body)
	b["stream"] = true
	data, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode body: %w", err)
	}
	resp, err := t.doAnthropic(ctx, MessagesPath, data)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	tr := &MessageTranscript{Transport: "SSE", Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if resp.StatusCode != http.StatusOK {
		if tr.Error, err = io.ReadAll(resp.Body); err != nil {
			return nil, fmt.Errorf("read error body: %w", err)
		}
		return tr, nil
	}
	if mt, _, _ := strings.Cut(tr.ContentType, ";"); strings.TrimSpace(mt) != "text/event-stream" {
		tr.Problems = append(tr.Problems, fmt.Sprintf("the stream's Content-Type is %q, not text/event-stream", tr.ContentType))
	}
	if err := ReadMessagesSSE(resp.Body, tr); err != nil {
		return nil, fmt.Errorf("read stream: %w", err)
	}
	return tr, nil
}

// ReadMessagesSSE reads an Anthropic event stream from r into tr until
// EOF: an `event:` line naming each event (Anthropic's SDKs skip events
// without one) and its `data:`, a JSON object whose "type" is that name.
// An error event ends the stream; [DONE], which Anthropic does not send,
// and events after message_stop or an error are problems.
func ReadMessagesSSE(r io.Reader, tr *MessageTranscript) error {
	ended := false
	event := func(name string, data []byte) {
		n := len(tr.Events)
		if string(data) == "[DONE]" {
			tr.Problems = append(tr.Problems, "the stream sends data: [DONE], which Anthropic's does not")
			return
		}
		typ, err := eventType(data)
		if err != nil {
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d: %v", n, err))
			return
		}
		if name != typ {
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d is named %q but its type is %q (Anthropic's SDKs dispatch on the name)", n, name, typ))
		}
		if ended {
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d (%s) comes after the stream ended", n, typ))
		}
		ended = ended || typ == "message_stop" || typ == "error"
		if typ == "error" {
			tr.Error = bytes.Clone(data)
		}
		tr.Events = append(tr.Events, MessageEvent{Name: name, Type: typ, Raw: bytes.Clone(data)})
	}
	problem := func(p string) { tr.Problems = append(tr.Problems, p) }
	return readSSEEvents(r, event, func() {}, problem)
}

// eventType reads the "type" of an event object.
func eventType(data []byte) (string, error) {
	var w struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(data, &w); err != nil || w.Type == nil {
		return "", fmt.Errorf("not a JSON object with a string type: %s", clip(data))
	}
	return *w.Type, nil
}

// StreamMessageWS opens a connection to /v1/messages, creates one message
// with body and reads its events: every server message of the request,
// until message_stop or its error message.
func (t *Target) StreamMessageWS(ctx context.Context, body map[string]any) (*MessageTranscript, error) {
	s, err := DialWebSocket(ctx, t, MessagesPath)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	const id = "m1"
	if err := s.Create(ctx, id, body); err != nil {
		return nil, err
	}
	return s.ReadMessage(ctx, id)
}

// ReadMessage reads the events of request id on a connection to
// /v1/messages until its message_stop or error. Messages of other requests
// are problems.
func (s *Session) ReadMessage(ctx context.Context, id string) (*MessageTranscript, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	tr := &MessageTranscript{Transport: "WebSocket", Status: http.StatusOK}
	for {
		typ, data, err := s.conn.Read(ctx)
		if err != nil {
			return tr, fmt.Errorf("websocket read: %w", err)
		}
		if typ != websocket.MessageText {
			tr.Problems = append(tr.Problems, "the server sent a binary message; the protocol uses text")
			continue
		}
		var w struct {
			Type      *string         `json:"type"`
			RequestID *string         `json:"request_id"`
			Status    int             `json:"status"`
			Error     json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &w); err != nil || w.Type == nil {
			tr.Problems = append(tr.Problems, fmt.Sprintf("message %d is not a JSON object with a string type: %s", len(tr.Events), clip(data)))
			continue
		}
		if w.RequestID == nil || *w.RequestID != id {
			tr.Problems = append(tr.Problems, fmt.Sprintf("message %d has request_id %s, want %q: %s", len(tr.Events), clipPtr(w.RequestID), id, clip(data)))
			if w.RequestID == nil && *w.Type == "error" {
				tr.Status, tr.Error = w.Status, wrapAnthropicError(w.Error)
				return tr, nil
			}
			continue
		}
		tr.Events = append(tr.Events, MessageEvent{Type: *w.Type, Raw: bytes.Clone(data)})
		switch *w.Type {
		case "error":
			tr.Status, tr.Error = w.Status, wrapAnthropicError(w.Error)
			return tr, nil
		case "message_stop":
			return tr, nil
		}
	}
}

func clipPtr(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}

// wrapAnthropicError turns a WebSocket error message's "error" into the
// document an HTTP answer carries.
func wrapAnthropicError(inner json.RawMessage) json.RawMessage {
	if inner == nil {
		return nil
	}
	return json.RawMessage(`{"type":"error","error":` + string(inner) + `}`)
}

// ProbeMessages reports whether t serves POST /v1/messages (a plain
// request for a short message succeeds), and if not, why; whether a GET
// on it upgrades to a WebSocket; and whether count_tokens answers.
func ProbeMessages(ctx context.Context, t *Target) (ok bool, reason string, ws bool, wsReason string, count bool, countReason string) {
	r, err := t.PostAnthropic(ctx, MessagesPath, MessagesBody(t.Model, "hi", probeTokens, nil))
	switch {
	case err != nil:
		return false, "POST " + MessagesPath + ": " + err.Error(), false, "", false, ""
	case r.Status != http.StatusOK:
		reason = fmt.Sprintf("target answers POST %s with %d: %s", MessagesPath, r.Status, clip(r.Body))
		return false, reason, false, reason, false, reason
	}
	c, err := t.PostAnthropic(ctx, CountTokensPath, map[string]any{"model": t.Model, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	switch {
	case err != nil:
		countReason = "POST " + CountTokensPath + ": " + err.Error()
	case c.Status != http.StatusOK:
		countReason = fmt.Sprintf("target answers POST %s with %d: %s", CountTokensPath, c.Status, clip(c.Body))
	default:
		count = true
	}
	s, err := DialWebSocket(ctx, t, MessagesPath)
	if err != nil {
		return true, "", false, "target's " + MessagesPath + " has no WebSocket: " + err.Error(), count, countReason
	}
	_ = s.Close()
	return true, "", true, "", count, countReason
}

// CountTokens asks count_tokens for the input tokens of body (a Messages
// request; members count_tokens does not take are dropped).
func (t *Target) CountTokens(ctx context.Context, body map[string]any) (int, error) {
	b := maps.Clone(body)
	delete(b, "max_tokens")
	delete(b, "stream")
	delete(b, "temperature")
	r, err := t.PostAnthropic(ctx, CountTokensPath, b)
	if err != nil {
		return 0, err
	}
	if r.Status != http.StatusOK {
		return 0, fmt.Errorf("POST %s answered %d: %s", CountTokensPath, r.Status, clip(r.Body))
	}
	if err := openapi.ValidateSchema("MessageTokensCount", r.Body); err != nil {
		return 0, fmt.Errorf("POST %s: %w", CountTokensPath, err)
	}
	var w struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.Unmarshal(r.Body, &w); err != nil {
		return 0, fmt.Errorf("POST %s: %w", CountTokensPath, err)
	}
	return w.InputTokens, nil
}

// MessagesProbeTool is ProbeTool as the Messages API declares a tool:
// name, description and input_schema.
var MessagesProbeTool = func() map[string]any {
	f := ProbeTool["function"].(map[string]any)
	return map[string]any{"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
}()

// ForceMessagesProbeTool is the Messages API's tool_choice that forces
// MessagesProbeTool, one call at most.
var ForceMessagesProbeTool = map[string]any{"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}
