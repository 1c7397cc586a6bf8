package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"rill/openapi"
)

// The Responses API (POST /v1/responses and its WebSocket mode): the client
// side of its specs and its rules as pure checks.

// ResponsesPath is the Responses API's endpoint.
const ResponsesPath = "/v1/responses"

// ResponsesBody returns a create body for model with text as the input,
// plus the members of extra. It never sets "stream".
func ResponsesBody(model, text string, extra map[string]any) map[string]any {
	b := map[string]any{"model": model, "input": text}
	maps.Copy(b, extra)
	return b
}

// ResponseEvent is one event of a streamed response.
type ResponseEvent struct {
	// Name is the SSE `event:` field ("" when there was none, and on WebSocket).
	Name string
	// Type is the "type" member; Seq the "sequence_number" (nil: absent).
	Type string
	Seq  *int
	Raw  json.RawMessage
}

// ResponseTranscript is everything one streamed response produced, in order.
type ResponseTranscript struct {
	// Transport is "SSE" or "WebSocket".
	Transport string
	// Status is the HTTP status on SSE; on WebSocket 200, or the status of
	// the error event that ended the response.
	Status      int
	ContentType string
	Events      []ResponseEvent
	// Error is an ErrorResponse document: the body of a non-200 answer, or
	// a WebSocket error event's "error" member wrapped as {"error": ...}.
	Error json.RawMessage
	// Problems are framing faults found while reading.
	Problems []string
}

// terminalTypes end a response.
var terminalTypes = map[string]bool{"response.completed": true, "response.incomplete": true, "response.failed": true}

// StreamResponse POSTs body with "stream": true to /v1/responses and reads
// the events to the end. A non-200 answer lands in the transcript's Error;
// the error result is for transport failures only.
func (t *Target) StreamResponse(ctx context.Context, body map[string]any) (*ResponseTranscript, error) {
	b := maps.Clone(body)
	b["stream"] = true
	data, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode body: %w", err)
	}
	resp, err := t.Do(ctx, http.MethodPost, ResponsesPath, data, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	tr := &ResponseTranscript{Transport: "SSE", Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	if resp.StatusCode != http.StatusOK {
		if tr.Error, err = io.ReadAll(resp.Body); err != nil {
			return nil, fmt.Errorf("read error body: %w", err)
		}
		return tr, nil
	}
	if mt, _, _ := strings.Cut(tr.ContentType, ";"); strings.TrimSpace(mt) != "text/event-stream" {
		tr.Problems = append(tr.Problems, fmt.Sprintf("the stream's Content-Type is %q, not text/event-stream", tr.ContentType))
	}
	if err := ReadResponseSSE(resp.Body, tr); err != nil {
		return nil, fmt.Errorf("read stream: %w", err)
	}
	return tr, nil
}

// ReadResponseSSE reads a Responses event stream from r into tr until EOF:
// `event:` and `data:` lines, a blank line after each event, comments
// allowed. Every data must be a JSON object with a string "type" equal to
// the event name when one was sent; [DONE] (which the Responses API does
// not send) and events after the terminal one are problems.
func ReadResponseSSE(r io.Reader, tr *ResponseTranscript) error {
	ended := false
	event := func(evName string, ev []byte) {
		n := len(tr.Events)
		if string(ev) == "[DONE]" {
			tr.Problems = append(tr.Problems, "the stream sends data: [DONE], which the Responses API does not")
			return
		}
		e, err := parseResponseEvent(ev)
		if err != nil {
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d: %v", n, err))
			return
		}
		e.Name = evName
		if evName != "" && evName != e.Type {
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d is named %q but its type is %q", n, evName, e.Type))
		}
		if ended {
			tr.Problems = append(tr.Problems, fmt.Sprintf("event %d (%s) comes after the response ended", n, e.Type))
		}
		ended = ended || terminalTypes[e.Type] || e.Type == "error"
		tr.Events = append(tr.Events, e)
	}
	problem := func(p string) { tr.Problems = append(tr.Problems, p) }
	return readSSEEvents(r, event, func() {}, problem)
}

func parseResponseEvent(raw []byte) (ResponseEvent, error) {
	var w struct {
		Type *string      `json:"type"`
		Seq  *json.Number `json:"sequence_number"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return ResponseEvent{}, fmt.Errorf("not a JSON object with a string type: %s", clip(raw))
	}
	if w.Type == nil {
		return ResponseEvent{}, fmt.Errorf("no type: %s", clip(raw))
	}
	e := ResponseEvent{Type: *w.Type, Raw: bytes.Clone(raw)}
	if w.Seq != nil {
		if n, err := w.Seq.Int64(); err == nil {
			i := int(n)
			e.Seq = &i
		}
	}
	return e, nil
}

// CreateResponse sends a response.create message on a connection to
// /v1/responses: the create body with "type" beside its members.
func (s *Session) CreateResponse(ctx context.Context, body map[string]any) error {
	m := maps.Clone(body)
	m["type"] = "response.create"
	return s.send(ctx, m)
}

// ReadResponse reads the events of one response on a connection to
// /v1/responses until its terminal event or an error event.
func (s *Session) ReadResponse(ctx context.Context) (*ResponseTranscript, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	tr := &ResponseTranscript{Transport: "WebSocket", Status: http.StatusOK}
	for {
		typ, data, err := s.conn.Read(ctx)
		if err != nil {
			return tr, fmt.Errorf("websocket read: %w", err)
		}
		if typ != websocket.MessageText {
			tr.Problems = append(tr.Problems, "the server sent a binary message; the protocol uses text")
			continue
		}
		e, err := parseResponseEvent(data)
		if err != nil {
			tr.Problems = append(tr.Problems, fmt.Sprintf("message %d: %v", len(tr.Events), err))
			continue
		}
		if e.Type == "error" {
			var w struct {
				Status int             `json:"status"`
				Error  json.RawMessage `json:"error"`
			}
			_ = json.Unmarshal(data, &w)
			tr.Status, tr.Error = w.Status, wrapError(w.Error)
			return tr, nil
		}
		tr.Events = append(tr.Events, e)
		if terminalTypes[e.Type] {
			return tr, nil
		}
	}
}

// StreamResponseWS opens a connection to /v1/responses for one response.
func (t *Target) StreamResponseWS(ctx context.Context, body map[string]any) (*ResponseTranscript, error) {
	s, err := DialWebSocket(ctx, t, ResponsesPath)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := s.CreateResponse(ctx, body); err != nil {
		return nil, err
	}
	return s.ReadResponse(ctx)
}

// ResponsesUsage is a decoded usage of the Responses API. Pointer fields
// are nil when absent or null (which CheckResponsesUsage reports: OpenAI's
// schema requires them).
type ResponsesUsage struct {
	InputTokens, OutputTokens, TotalTokens int
	// CachedTokens and CacheWriteTokens are input_tokens_details'.
	CachedTokens     *int
	CacheWriteTokens *int
	// ReasoningTokens is output_tokens_details.reasoning_tokens.
	ReasoningTokens *int
	// HasOutputDetails reports whether output_tokens_details is present (not null).
	HasOutputDetails bool
}

// ParseResponsesUsage decodes a usage object strictly: every count a
// non-fractional number, the three totals required.
func ParseResponsesUsage(raw json.RawMessage) (*ResponsesUsage, error) {
	var w struct {
		In     *json.Number `json:"input_tokens"`
		Out    *json.Number `json:"output_tokens"`
		Total  *json.Number `json:"total_tokens"`
		InputD *struct {
			Cached *json.Number `json:"cached_tokens"`
			Write  *json.Number `json:"cache_write_tokens"`
		} `json:"input_tokens_details"`
		OutputD *struct {
			Reasoning *json.Number `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("not a usage object: %w", err)
	}
	u := &ResponsesUsage{HasOutputDetails: w.OutputD != nil}
	var errs []error
	num := func(name string, n *json.Number) *int {
		if n == nil {
			return nil
		}
		v, err := n.Int64()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is %s, not an integer", name, n))
			return nil
		}
		i := int(v)
		return &i
	}
	for _, f := range []struct {
		name string
		n    *json.Number
		dst  *int
	}{{"input_tokens", w.In, &u.InputTokens}, {"output_tokens", w.Out, &u.OutputTokens}, {"total_tokens", w.Total, &u.TotalTokens}} {
		v := num(f.name, f.n)
		if v == nil && f.n == nil {
			errs = append(errs, fmt.Errorf("%s is missing", f.name))
			continue
		}
		if v != nil {
			*f.dst = *v
		}
	}
	if w.InputD != nil {
		u.CachedTokens = num("input_tokens_details.cached_tokens", w.InputD.Cached)
		u.CacheWriteTokens = num("input_tokens_details.cache_write_tokens", w.InputD.Write)
	}
	if w.OutputD != nil {
		u.ReasoningTokens = num("output_tokens_details.reasoning_tokens", w.OutputD.Reasoning)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return u, nil
}

// CheckResponsesUsage checks a Responses usage (docs/design.md §3 rule 12): the
// counts OpenAI's schema requires are present and numbers
// (input_tokens_details.cached_tokens and cache_write_tokens,
// output_tokens_details.reasoning_tokens; typed clients such as the openai
// npm SDK reject a usage without them), and the arithmetic holds:
// total = input + output, cached + cache_write <= input, reasoning <=
// output, no negatives.
func CheckResponsesUsage(u *ResponsesUsage) []string {
	var p []string
	for _, f := range []struct {
		name string
		v    *int
	}{
		{"input_tokens_details.cached_tokens", u.CachedTokens},
		{"input_tokens_details.cache_write_tokens", u.CacheWriteTokens},
		{"output_tokens_details.reasoning_tokens", u.ReasoningTokens},
	} {
		if f.v == nil {
			p = append(p, fmt.Sprintf("%s is absent or null; OpenAI's schema requires it (0 when nothing was read, written or reasoned)", f.name))
		}
	}
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.TotalTokens < 0 {
		p = append(p, fmt.Sprintf("negative count: %+v", *u))
	}
	if u.TotalTokens != u.InputTokens+u.OutputTokens {
		p = append(p, fmt.Sprintf("total_tokens %d != input_tokens %d + output_tokens %d", u.TotalTokens, u.InputTokens, u.OutputTokens))
	}
	if c := u.CachedTokens; c != nil && (*c < 0 || *c > u.InputTokens) {
		p = append(p, fmt.Sprintf("cached_tokens %d is outside [0, input_tokens %d]", *c, u.InputTokens))
	}
	if w := u.CacheWriteTokens; w != nil {
		read := 0
		if u.CachedTokens != nil {
			read = max(*u.CachedTokens, 0)
		}
		if *w < 0 || read+*w > u.InputTokens {
			p = append(p, fmt.Sprintf("cache_write_tokens %d is outside [0, input_tokens %d - cached_tokens %d]: a token read from the cache was not written by this request", *w, u.InputTokens, read))
		}
	}
	if r := u.ReasoningTokens; r != nil && (*r < 0 || *r > u.OutputTokens) {
		p = append(p, fmt.Sprintf("reasoning_tokens %d is outside [0, output_tokens %d]", *r, u.OutputTokens))
	}
	return p
}

// ResponseObject is what the checks read of a response object.
type ResponseObject struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	PreviousResponseID *string `json:"previous_response_id"`
	Output             []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		// A function_call item's.
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	Usage json.RawMessage `json:"usage"`
}

// ResponseFunctionCall is a function_call output item.
type ResponseFunctionCall struct {
	ID, CallID, Name, Status string
	// Arguments is the arguments object as JSON text.
	Arguments string
}

// FunctionCalls returns the response's function_call items, in output order.
func (r *ResponseObject) FunctionCalls() []ResponseFunctionCall {
	var calls []ResponseFunctionCall
	for _, it := range r.Output {
		if it.Type == "function_call" {
			calls = append(calls, ResponseFunctionCall{ID: it.ID, CallID: it.CallID, Name: it.Name, Status: it.Status, Arguments: it.Arguments})
		}
	}
	return calls
}

// ReasoningText is the text of the response's reasoning items (their
// reasoning_text parts), concatenated.
func (r *ResponseObject) ReasoningText() string {
	var b strings.Builder
	for _, it := range r.Output {
		if it.Type != "reasoning" {
			continue
		}
		for _, c := range it.Content {
			if c.Type == "reasoning_text" {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// OutputText is the text of the response's output messages, concatenated.
func (r *ResponseObject) OutputText() string {
	var b strings.Builder
	for _, it := range r.Output {
		if it.Type != "message" {
			continue
		}
		for _, c := range it.Content {
			if c.Type == "output_text" {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// ParseResponseObject decodes a response object and its usage (nil when
// null or absent).
func ParseResponseObject(raw json.RawMessage) (*ResponseObject, *ResponsesUsage, error) {
	var r ResponseObject
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, nil, fmt.Errorf("not a response object: %w", err)
	}
	if isNull(r.Usage) {
		return &r, nil, nil
	}
	u, err := ParseResponsesUsage(r.Usage)
	if err != nil {
		return &r, nil, fmt.Errorf("usage: %w", err)
	}
	return &r, u, nil
}

// Final returns the response object of the transcript's terminal event.
func (tr *ResponseTranscript) Final() (*ResponseObject, *ResponsesUsage, error) {
	if len(tr.Events) == 0 || !terminalTypes[tr.Events[len(tr.Events)-1].Type] {
		return nil, nil, fmt.Errorf("the stream has no terminal event (status %d, error %s)", tr.Status, clip(tr.Error))
	}
	var w struct {
		Response json.RawMessage `json:"response"`
	}
	if err := json.Unmarshal(tr.Events[len(tr.Events)-1].Raw, &w); err != nil || isNull(w.Response) {
		return nil, nil, fmt.Errorf("the terminal event has no response object")
	}
	return ParseResponseObject(w.Response)
}

// CheckResponseStream checks one streamed response: it opened with
// response.created and response.in_progress, ended with exactly one
// terminal event (response.completed or response.incomplete), numbered its
// events 0, 1, 2, … in order, put usage on the terminal event's response
// only, announced each output item and text part before its deltas and
// closed them after, made each output_text.done and reasoning_text.done
// the sum of its deltas and the final output (its messages' text, each
// reasoning item's text) the sum of them; a function_call item was added with
// empty arguments, its function_call_arguments deltas came while it was
// open and add up to its function_call_arguments.done, its
// output_item.done and its item in the final output; every item sits in
// the final output at the output_index it was added at; every event
// validates against ResponseStreamEvent.
func CheckResponseStream(tr *ResponseTranscript) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if tr.Status != http.StatusOK || tr.Error != nil {
		add("the response failed with status %d: %s", tr.Status, clip(tr.Error))
		return p
	}
	p = append(p, tr.Problems...)
	if len(tr.Events) < 3 {
		add("the stream has %d events; a response has at least response.created, response.in_progress and a terminal event", len(tr.Events))
		return p
	}
	if t := tr.Events[0].Type; t != "response.created" {
		add("event 0 is %s, not response.created", t)
	}
	if t := tr.Events[1].Type; t != "response.in_progress" {
		add("event 1 is %s, not response.in_progress", t)
	}
	last := len(tr.Events) - 1
	switch t := tr.Events[last].Type; t {
	case "response.completed", "response.incomplete":
	default:
		add("the last event is %s, not response.completed or response.incomplete", t)
	}
	type key struct {
		item    string
		content int
	}
	type streamItem struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Arguments string `json:"arguments"`
	}
	var ev struct {
		ItemID       string      `json:"item_id"`
		OutputIndex  *int        `json:"output_index"`
		ContentIndex int         `json:"content_index"`
		Delta        string      `json:"delta"`
		Text         string      `json:"text"`
		Arguments    string      `json:"arguments"`
		Item         *streamItem `json:"item"`
		Response     *struct {
			Usage json.RawMessage `json:"usage"`
		} `json:"response"`
	}
	items := map[string]string{} // id -> "open" | "done"
	parts := map[key]string{}
	deltas := map[key]*strings.Builder{}
	args := map[string]*strings.Builder{} // function_call item id -> its argument deltas
	at := map[int]string{}                // output_index -> the id of the item added there
	var all strings.Builder
	for i, e := range tr.Events {
		if err := openapi.ValidateSchema("ResponseStreamEvent", e.Raw); err != nil {
			add("event %d (%s) breaks ResponseStreamEvent: %v", i, e.Type, err)
		}
		if e.Seq == nil || *e.Seq != i {
			got := "absent"
			if e.Seq != nil {
				got = fmt.Sprint(*e.Seq)
			}
			add("event %d (%s) has sequence_number %s, want %d", i, e.Type, got, i)
		}
		if terminalTypes[e.Type] && i != last {
			add("event %d is a second terminal event (%s)", i, e.Type)
		}
		ev.ItemID, ev.Delta, ev.Text, ev.Arguments, ev.Item, ev.Response, ev.ContentIndex, ev.OutputIndex = "", "", "", "", nil, nil, 0, nil
		if err := json.Unmarshal(e.Raw, &ev); err != nil {
			add("event %d (%s) cannot be read: %v", i, e.Type, err)
			continue
		}
		if ev.Response != nil && !isNull(ev.Response.Usage) && i != last {
			add("event %d (%s) carries usage; only the terminal event's response may", i, e.Type)
		}
		k := key{ev.ItemID, ev.ContentIndex}
		switch e.Type {
		case "response.output_item.added":
			if ev.Item != nil {
				items[ev.Item.ID] = "open"
				if ev.OutputIndex != nil {
					at[*ev.OutputIndex] = ev.Item.ID
				}
				if ev.Item.Type == "function_call" {
					args[ev.Item.ID] = &strings.Builder{}
					if ev.Item.Arguments != "" {
						add("event %d adds function_call %s with arguments %q; they come in deltas", i, ev.Item.ID, clip([]byte(ev.Item.Arguments)))
					}
				}
			}
		case "response.output_item.done":
			if ev.Item != nil {
				if items[ev.Item.ID] != "open" {
					add("event %d closes item %s, which is not open", i, ev.Item.ID)
				}
				items[ev.Item.ID] = "done"
				if a := args[ev.Item.ID]; ev.Item.Type == "function_call" && a != nil && a.String() != ev.Item.Arguments {
					add("event %d: function_call %s is done with arguments %q, but its deltas add up to %q", i, ev.Item.ID, clip([]byte(ev.Item.Arguments)), clip([]byte(a.String())))
				}
			}
		case "response.function_call_arguments.delta":
			a := args[ev.ItemID]
			if a == nil || items[ev.ItemID] != "open" {
				add("event %d is an arguments delta of item %s, which is not an open function_call", i, ev.ItemID)
				continue
			}
			a.WriteString(ev.Delta)
		case "response.function_call_arguments.done":
			if a := args[ev.ItemID]; a == nil || a.String() != ev.Arguments {
				add("event %d: function_call_arguments.done of item %s has arguments %q, but its deltas add up to %q", i, ev.ItemID, clip([]byte(ev.Arguments)), clip([]byte(fmt.Sprint(a))))
			}
		case "response.content_part.added":
			if items[ev.ItemID] != "open" {
				add("event %d adds a part to item %s, which is not open", i, ev.ItemID)
			}
			parts[k] = "open"
			deltas[k] = &strings.Builder{}
		case "response.output_text.delta":
			if parts[k] != "open" {
				add("event %d is a delta of part %d of item %s, which is not open", i, k.content, k.item)
				continue
			}
			deltas[k].WriteString(ev.Delta)
			all.WriteString(ev.Delta)
		case "response.output_text.done":
			if d := deltas[k]; d == nil || d.String() != ev.Text {
				add("event %d: output_text.done of item %s has text %q, but its deltas add up to %q", i, k.item, clip([]byte(ev.Text)), clip([]byte(fmt.Sprint(d))))
			}
		case "response.reasoning_text.delta":
			if parts[k] != "open" {
				add("event %d is a reasoning delta of part %d of item %s, which is not open", i, k.content, k.item)
				continue
			}
			deltas[k].WriteString(ev.Delta)
		case "response.reasoning_text.done":
			if d := deltas[k]; d == nil || d.String() != ev.Text {
				add("event %d: reasoning_text.done of item %s has text %q, but its deltas add up to %q", i, k.item, clip([]byte(ev.Text)), clip([]byte(fmt.Sprint(d))))
			}
		case "response.content_part.done":
			if parts[k] != "open" {
				add("event %d closes part %d of item %s, which is not open", i, k.content, k.item)
			}
			parts[k] = "done"
		}
	}
	for id, state := range items {
		if state != "done" {
			add("output item %s is never closed (response.output_item.done)", id)
		}
	}
	final, u, err := tr.Final()
	if err != nil {
		add("%v", err)
		return p
	}
	if u == nil {
		add("the terminal event's response has no usage")
	} else {
		p = append(p, CheckResponsesUsage(u)...)
	}
	if got := final.OutputText(); got != all.String() {
		add("the final response's output text %q is not the sum of the deltas %q", clip([]byte(got)), clip([]byte(all.String())))
	}
	for i, it := range final.Output {
		if id, ok := at[i]; ok && id != it.ID {
			add("the final output has item %s at index %d, where the stream added item %s", it.ID, i, id)
		}
		if a := args[it.ID]; it.Type == "function_call" && a != nil && a.String() != it.Arguments {
			add("the final output's function_call %s has arguments %q, but its deltas add up to %q", it.ID, clip([]byte(it.Arguments)), clip([]byte(a.String())))
		}
		if it.Type == "reasoning" {
			for j, c := range it.Content {
				if d := deltas[key{it.ID, j}]; d != nil && d.String() != c.Text {
					add("the final output's reasoning item %s has text %q, but its deltas add up to %q", it.ID, clip([]byte(c.Text)), clip([]byte(d.String())))
				}
			}
		}
	}
	if len(at) != len(final.Output) {
		add("the stream added %d output items, the final response has %d", len(at), len(final.Output))
	}
	return p
}

// ResponsesProbeTool is ProbeTool as the Responses API declares a
// function: flat, strict (its parameters are a strict schema).
var ResponsesProbeTool = func() map[string]any {
	f := ProbeTool["function"].(map[string]any)
	return map[string]any{"type": "function", "name": f["name"], "description": f["description"],
		"parameters": f["parameters"], "strict": true}
}()

// ForceResponsesProbeTool is the Responses API's tool_choice that forces
// ResponsesProbeTool.
var ForceResponsesProbeTool = map[string]any{"type": "function", "name": "get_weather"}

// ProbeResponsesShared learns how many tokens fresh inputs share on the
// Responses API (its chat template's preamble, for a cache that reuses
// single tokens), as the probe learns it for chat (see Capabilities.
// SharedPrefix): the larger cached count of a short and a long fresh
// input. Only meaningful on a target that measures a prefix cache: the
// Responses API reports cached_tokens 0 where none is measured. reason is
// empty when it learned the count.
func ProbeResponsesShared(ctx context.Context, t *Target) (shared int, reason string) {
	return sharedPrefix("POST "+ResponsesPath, func(text string) (prompt int, cached *int, problem string) {
		r, err := t.Post(ctx, ResponsesPath, ResponsesBody(t.Model, text, map[string]any{"max_output_tokens": 16}))
		switch {
		case err != nil:
			return 0, nil, err.Error()
		case r.Status != http.StatusOK:
			return 0, nil, fmt.Sprintf("POST %s answered %d: %s", ResponsesPath, r.Status, clip(r.Body))
		}
		_, u, err := ParseResponseObject(r.Body)
		switch {
		case err != nil:
			return 0, nil, fmt.Sprintf("POST %s answered without a readable usage (%v)", ResponsesPath, err)
		case u == nil || u.CachedTokens == nil:
			return 0, nil, fmt.Sprintf("POST %s reported no input_tokens_details.cached_tokens", ResponsesPath)
		}
		return u.InputTokens, u.CachedTokens, ""
	})
}

// ProbeResponses reports whether t serves POST /v1/responses (a plain
// request for one short response succeeds), and if not, why; and whether a
// GET on it upgrades to a WebSocket.
func ProbeResponses(ctx context.Context, t *Target) (ok bool, reason string, ws bool, wsReason string) {
	r, err := t.Post(ctx, ResponsesPath, ResponsesBody(t.Model, "hi", map[string]any{"max_output_tokens": 16}))
	switch {
	case err != nil:
		return false, "POST " + ResponsesPath + ": " + err.Error(), false, ""
	case r.Status != http.StatusOK:
		reason = fmt.Sprintf("target answers POST %s with %d: %s", ResponsesPath, r.Status, clip(r.Body))
		return false, reason, false, reason
	}
	s, err := DialWebSocket(ctx, t, ResponsesPath)
	if err != nil {
		return true, "", false, "target's " + ResponsesPath + " has no WebSocket: " + err.Error()
	}
	_ = s.Close()
	return true, "", true, ""
}
