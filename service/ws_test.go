package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/engine"
	"rill/internal/wait"
)

// The WebSocket transport: the same chunks as SSE, many requests on one
// connection, cancellation. Limits, auth and the connection's life are in
// wslimits_test.go.

// wsMsg is a decoded server message; raw is the message as sent.
type wsMsg struct {
	Type      string          `json:"type"`
	RequestID *string         `json:"request_id"`
	Chunk     json.RawMessage `json:"chunk"`
	Status    int             `json:"status"`
	Error     *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
	raw []byte
}

func (m *wsMsg) id() string {
	if m.RequestID == nil {
		return "<null>"
	}
	return *m.RequestID
}

func (m *wsMsg) terminal() bool {
	return m.RequestID != nil && (m.Type == "done" || m.Type == "error")
}

func (m *wsMsg) code() string {
	if m.Error == nil || m.Error.Code == nil {
		return ""
	}
	return *m.Error.Code
}

func (m *wsMsg) param() string {
	if m.Error == nil || m.Error.Param == nil {
		return ""
	}
	return *m.Error.Param
}

func wsURL(ts *httptest.Server, path string) string {
	return "ws" + strings.TrimPrefix(ts.URL, "http") + path
}

// dialWS opens a WebSocket to path, closed when the test ends.
func dialWS(t testing.TB, ts *httptest.Server, path string, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(ts, path), opts)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func sendWS(t testing.TB, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("send %.80s: %v", msg, err)
	}
}

// readWS reads one server message and checks it against the schema.
func readWS(t testing.TB, c *websocket.Conn) wsMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, data, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("message type %v, want text", typ)
	}
	mustValidate(t, "WebSocketServerMessage", data)
	var m wsMsg
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("server message: %v\n%s", err, data)
	}
	m.raw = data
	return m
}

// nextNonChunk reads until a message that is not a chunk.
func nextNonChunk(t testing.TB, c *websocket.Conn) wsMsg {
	t.Helper()
	for {
		if m := readWS(t, c); m.Type != "chunk" {
			return m
		}
	}
}

// collectWS reads until n requests have ended, and returns every message in
// arrival order.
func collectWS(t testing.TB, c *websocket.Conn, n int) []wsMsg {
	t.Helper()
	var msgs []wsMsg
	for ended := 0; ended < n; {
		m := readWS(t, c)
		msgs = append(msgs, m)
		if m.terminal() {
			ended++
		}
	}
	return msgs
}

func createMsg(id, body string) string {
	return `{"type":"create","request_id":` + string(appendString(nil, id)) + `,"body":` + body + `}`
}

// sseChunks returns the data payloads of the SSE stream of body, [DONE] left out.
func sseChunks(t testing.TB, ts *httptest.Server, path, body string) [][]byte {
	t.Helper()
	resp, data := post(t, ts.Client(), ts.URL+path, body)
	if resp.StatusCode != 200 {
		t.Fatalf("SSE status %d: %s", resp.StatusCode, data)
	}
	return dataEvents(t, parseSSE(t, data))
}

var chunkHeader = regexp.MustCompile(`^\{"id":"[^"]*","object":"([^"]*)","created":[0-9]+,`)

// normalized blanks the two fields that differ between two runs of one
// request, its id and creation time, and leaves every other byte.
func normalized(chunk []byte) string {
	return chunkHeader.ReplaceAllString(string(chunk), `{"id":"X","object":"$1","created":0,`)
}

// TestWSMatchesSSE: requests interleaved on one connection, each with the
// very chunks its SSE stream carries, byte for byte, with and without
// include_usage; "stream" is implied whatever the body says.
func TestWSMatchesSSE(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, delay: 3 * time.Millisecond,
			events: script(req.Choices(), []string{"Hello", ",", " wörld", "\n\"q\"", "!"}, engine.FinishLength, plainStats(5, 5))}, nil
	}}
	ts := newTestServer(t, fake, Options{PingInterval: -1})
	const chat, comp = "/v1/chat/completions", "/v1/completions"
	const msgs = `"model":"tiny","messages":[{"role":"user","content":"hi"}]`
	const usage = `"stream_options":{"include_usage":true}`
	// streams > 1: the engine streams of several prompts race, so only
	// each choice's own chunks keep their order.
	type req struct {
		id, ws, sse string
		streams     int
	}
	tests := []struct {
		path string
		reqs []req
	}{
		{chat, []req{
			{"usage", `{` + msgs + `,"stream":true,` + usage + `}`, `{` + msgs + `,"stream":true,` + usage + `}`, 1},
			{"plain", `{` + msgs + `}`, `{` + msgs + `,"stream":true}`, 1},
			{"stream false", `{` + msgs + `,"stream":false,` + usage + `}`, `{` + msgs + `,"stream":true,` + usage + `}`, 1},
			{"n=2", `{` + msgs + `,"n":2,"stream_options":{}}`, `{` + msgs + `,"n":2,"stream":true,"stream_options":{}}`, 1},
			{"r\"5", `{` + msgs + `,"max_tokens":9,` + usage + `}`, `{` + msgs + `,"max_tokens":9,"stream":true,` + usage + `}`, 1},
		}},
		{comp, []req{
			{"one", `{"model":"tiny","prompt":"x",` + usage + `}`, `{"model":"tiny","prompt":"x","stream":true,` + usage + `}`, 1},
			{"two prompts", `{"model":"tiny","prompt":["a","b"],"n":2,` + usage + `}`, `{"model":"tiny","prompt":["a","b"],"n":2,"stream":true,` + usage + `}`, 2},
			{"tokens", `{"model":"tiny","prompt":[1,2,3]}`, `{"model":"tiny","prompt":[1,2,3],"stream":true}`, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			c := dialWS(t, ts, tt.path, nil)
			for _, r := range tt.reqs {
				sendWS(t, c, createMsg(r.id, r.ws))
			}
			msgs := collectWS(t, c, len(tt.reqs))

			byID := map[string][]wsMsg{}
			firstEnd, lastFirst, switches := -1, 0, 0
			for i, m := range msgs {
				if m.RequestID == nil {
					t.Fatalf("message without request_id: %s", m.raw)
				}
				if len(byID[m.id()]) == 0 {
					lastFirst = i
				}
				if m.terminal() && firstEnd < 0 {
					firstEnd = i
				}
				if i > 0 && m.id() != msgs[i-1].id() {
					switches++
				}
				byID[m.id()] = append(byID[m.id()], m)
			}
			if lastFirst > firstEnd || switches < len(tt.reqs) {
				t.Errorf("requests not interleaved: last one began at message %d, first end at %d, %d switches",
					lastFirst, firstEnd, switches)
			}
			ids := map[string]bool{}
			for _, r := range tt.reqs {
				got := byID[r.id]
				want := sseChunks(t, ts, tt.path, r.sse)
				if len(got) != len(want)+1 {
					t.Fatalf("%s: %d messages, want %d chunks and done", r.id, len(got), len(want))
				}
				chunks := make([][]byte, len(want))
				for i := range want {
					if got[i].Type != "chunk" {
						t.Fatalf("%s: message %d is %s", r.id, i, got[i].raw)
					}
					chunks[i] = got[i].Chunk
					ids[decodeMap(t, got[i].Chunk)["id"].(string)] = true
				}
				if r.streams > 1 {
					chunks, want = byChoice(t, chunks), byChoice(t, want)
				}
				for i := range want {
					if normalized(chunks[i]) != normalized(want[i]) {
						t.Errorf("%s chunk %d:\nws  %s\nsse %s", r.id, i, chunks[i], want[i])
					}
				}
				if end := got[len(got)-1]; end.Type != "done" || string(end.raw) != `{"type":"done","request_id":`+string(appendString(nil, r.id))+`}` {
					t.Errorf("%s ends with %s", r.id, end.raw)
				}
			}
			if len(ids) != len(tt.reqs) {
				t.Errorf("%d distinct chunk ids for %d requests", len(ids), len(tt.reqs))
			}
		})
	}
}

// byChoice orders chunks by their choice's index, stably, the usage chunk
// (no choices) last.
func byChoice(t testing.TB, chunks [][]byte) [][]byte {
	t.Helper()
	index := func(c []byte) float64 {
		choices := decodeMap(t, c)["choices"].([]any)
		if len(choices) == 0 {
			return math.Inf(1)
		}
		return choices[0].(map[string]any)["index"].(float64)
	}
	out := slices.Clone(chunks)
	slices.SortStableFunc(out, func(a, b []byte) int { return cmp.Compare(index(a), index(b)) })
	return out
}

// cancelEngine answers by the first message's content: "hang" sends one
// piece and then blocks until cancelled; anything else streams a few pieces
// slowly. Every stream reports its cancellation on the channel of its
// content, the latest stream's when several share one.
type cancelEngine struct {
	fakeEngine
	mu        sync.Mutex
	cancelled map[string]chan struct{}
	taken     map[string]bool // the channel has a stream
}

func newCancelEngine() *cancelEngine {
	e := &cancelEngine{cancelled: map[string]chan struct{}{}, taken: map[string]bool{}}
	e.respond = func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		content := ""
		if len(req.Messages) > 0 {
			content = req.Messages[0].Content
		}
		ch := e.take(content)
		if strings.HasPrefix(content, "hang") {
			return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "first"}}, hang: true, cancelled: ch}, nil
		}
		return &fakeStream{ctx: ctx, delay: 10 * time.Millisecond, cancelled: ch,
			events: script(1, []string{"a", "b", "c", "d"}, engine.FinishStop, plainStats(2, 4))}, nil
	}
	return e
}

// take returns a channel for a new stream of content.
func (e *cancelEngine) take(content string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := e.cancelled[content]
	if ch == nil || e.taken[content] {
		ch = make(chan struct{})
		e.cancelled[content] = ch
	}
	e.taken[content] = true
	return ch
}

// channel returns the cancellation channel of content, made on first use.
func (e *cancelEngine) channel(content string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := e.cancelled[content]
	if ch == nil {
		ch = make(chan struct{})
		e.cancelled[content] = ch
	}
	return ch
}

func (e *cancelEngine) server(t testing.TB, opts Options) *httptest.Server {
	if e.models == nil {
		e.models = testModels
	}
	return newTestServer(t, &e.fakeEngine, opts)
}

func chatBody(content string) string {
	return `{"model":"tiny","messages":[{"role":"user","content":"` + content + `"}]}`
}

// waitFirst reads until every id has sent a content chunk ("first" for
// hanging requests), and returns the messages it read.
func waitFirst(t testing.TB, c *websocket.Conn, ids ...string) []wsMsg {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var msgs []wsMsg
	for len(want) > 0 {
		m := readWS(t, c)
		msgs = append(msgs, m)
		if m.Type == "chunk" && strings.Contains(string(m.Chunk), `"content":"`) && !strings.Contains(string(m.Chunk), `"content":""`) {
			delete(want, m.id())
		}
		if m.terminal() {
			t.Fatalf("%s ended early: %s", m.id(), m.raw)
		}
	}
	return msgs
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// closedSoon reports whether ch is closed, or closes within the wait
// bound: the test double closes a stream's channel from a
// context.AfterFunc, on a goroutine of its own, so an engine context that
// the server ended before it wrote its next message may be seen a moment
// later.
func closedSoon(ch chan struct{}) bool {
	return wait.Until(func() bool { return isClosed(ch) })
}

// TestWSCancelOneOfThree: cancel stops exactly one request, whose engine
// context ends before its last message; the others complete.
func TestWSCancelOneOfThree(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	ts := e.server(t, Options{PingInterval: -1})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("a", chatBody("slow a")))
	sendWS(t, c, createMsg("b", chatBody("hang b")))
	sendWS(t, c, createMsg("c", chatBody("slow c")))
	msgs := waitFirst(t, c, "b")
	sendWS(t, c, `{"type":"cancel","request_id":"b"}`)
	msgs = append(msgs, collectWS(t, c, 3)...)

	texts := map[string]string{}
	ends := map[string]wsMsg{}
	for _, m := range msgs {
		switch {
		case m.Type == "chunk":
			if _, ended := ends[m.id()]; ended {
				t.Errorf("chunk after the end of %s", m.id())
			}
			for _, ch := range decodeMap(t, m.Chunk)["choices"].([]any) {
				if s, ok := ch.(map[string]any)["delta"].(map[string]any)["content"].(string); ok {
					texts[m.id()] += s
				}
			}
		case m.terminal():
			if _, dup := ends[m.id()]; dup {
				t.Errorf("two ends for %s", m.id())
			}
			ends[m.id()] = m
			if m.id() == "b" && !closedSoon(e.channel("hang b")) {
				t.Errorf("b ended before its engine context was cancelled")
			}
		}
	}
	if b := ends["b"]; b.Type != "error" || b.Status != statusClientClosed || b.code() != "request_cancelled" {
		t.Errorf("b ends with %s", b.raw)
	}
	for _, id := range []string{"a", "c"} {
		if ends[id].Type != "done" || texts[id] != "abcd" {
			t.Errorf("%s: end %s, text %q", id, ends[id].raw, texts[id])
		}
		if isClosed(e.channel("slow " + id)) {
			t.Errorf("%s was cancelled", id)
		}
	}

	// The id is free again once its end has arrived; a cancel of a finished
	// request is an unknown id.
	sendWS(t, c, createMsg("b", chatBody("slow again")))
	if m := collectWS(t, c, 1); m[len(m)-1].Type != "done" {
		t.Errorf("reused id ends with %s", m[len(m)-1].raw)
	}
	sendWS(t, c, `{"type":"cancel","request_id":"b"}`)
	if m := readWS(t, c); m.Type != "error" || m.RequestID != nil || m.code() != "unknown_request_id" || m.Status != 404 {
		t.Errorf("cancel of an ended request: %s", m.raw)
	}
}

// TestWSCloseCancelsAll: a connection that ends, with or without a close
// frame, cancels every request in flight on it.
func TestWSCloseCancelsAll(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"close frame", "dropped"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newCancelEngine()
			ts := e.server(t, Options{PingInterval: -1})
			c := dialWS(t, ts, "/v1/chat/completions", nil)
			ids := []string{"x", "y", "z"}
			for _, id := range ids {
				sendWS(t, c, createMsg(id, chatBody("hang "+id)))
			}
			waitFirst(t, c, ids...)
			if mode == "dropped" {
				_ = c.CloseNow()
			} else {
				_ = c.Close(websocket.StatusNormalClosure, "bye")
			}
			for _, id := range ids {
				select {
				case <-e.channel("hang " + id):
				case <-time.After(5 * time.Second):
					t.Fatalf("request %s not cancelled", id)
				}
			}
		})
	}
}

// TestWSInterleavedCompletions: two hanging requests and a quick one on one
// connection; the quick one completes while the others wait.
func TestWSInterleavedCompletions(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	ts := e.server(t, Options{PingInterval: -1})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("h1", chatBody("hang 1")))
	sendWS(t, c, createMsg("h2", chatBody("hang 2")))
	waitFirst(t, c, "h1", "h2")
	sendWS(t, c, createMsg("q", chatBody("quick")))
	msgs := collectWS(t, c, 1)
	if end := msgs[len(msgs)-1]; end.id() != "q" || end.Type != "done" {
		t.Fatalf("first end %s", end.raw)
	}
	for _, m := range msgs {
		if m.id() != "q" {
			t.Errorf("message of a hanging request: %s", m.raw)
		}
	}
	if isClosed(e.channel("hang 1")) || isClosed(e.channel("hang 2")) {
		t.Error("a hanging request was cancelled")
	}
}

// TestWSMidStreamError: an engine error after the stream began ends the
// request with an error message of its status, after the chunks sent so
// far and with no done; the connection carries on.
func TestWSMidStreamError(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		switch req.Messages[0].Content {
		case "boom":
			return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "x"}}, err: errors.New("boom")}, nil
		case "long":
			return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "x"}},
				err: engine.Errorf(engine.CodeContextLengthExceeded, "messages", "too long")}, nil
		}
		return &fakeStream{ctx: ctx, events: script(1, []string{"ok"}, engine.FinishStop, plainStats(1, 1))}, nil
	}}
	ts := newTestServer(t, fake, Options{PingInterval: -1})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	tests := []struct {
		content string
		status  int
		typ     string
		code    string
	}{
		{"boom", 500, typeServer, ""},
		{"long", 400, typeInvalidRequest, engine.CodeContextLengthExceeded},
	}
	for _, tt := range tests {
		sendWS(t, c, createMsg(tt.content, chatBody(tt.content)))
		msgs := collectWS(t, c, 1)
		end := msgs[len(msgs)-1]
		if len(msgs) != 3 || msgs[1].Type != "chunk" || !strings.Contains(string(msgs[1].Chunk), `"content":"x"`) {
			t.Errorf("%s: messages before the error: %d", tt.content, len(msgs)-1)
		}
		if end.id() != tt.content || end.Type != "error" || end.Status != tt.status || end.Error.Type != tt.typ || end.code() != tt.code {
			t.Errorf("%s: ends with %s", tt.content, end.raw)
		}
	}
	sendWS(t, c, createMsg("after", chatBody("fine")))
	if msgs := collectWS(t, c, 1); msgs[len(msgs)-1].Type != "done" {
		t.Errorf("after the errors: %s", msgs[len(msgs)-1].raw)
	}
}

// TestWSWaitHandedOver: a stream whose engine keeps it waiting longer than
// wsWaitInline, so that every wait goes to a fresh goroutine, carries the
// chunks its SSE stream carries, byte for byte (a prompt array, whose
// streams are waited on together, too); and a cancel reaches a request
// waiting so.
func TestWSWaitHandedOver(t *testing.T) {
	t.Parallel()
	const hang = "hang"
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if strings.Contains(fmt.Sprint(req.Prompt), hang) || strings.Contains(fmt.Sprint(req.Messages), hang) {
			return &fakeStream{ctx: ctx, hang: true}, nil
		}
		return &fakeStream{ctx: ctx, delay: wsWaitInline + 30*time.Millisecond,
			events: script(req.Choices(), []string{"Hello", " there"}, engine.FinishStop, plainStats(3, 2))}, nil
	}}
	ts := newTestServer(t, fake, Options{PingInterval: -1})
	const usage = `"stream_options":{"include_usage":true}`
	tests := []struct {
		name, path, ws, sse string
		streams             int
	}{
		{"chat", "/v1/chat/completions",
			`{"model":"tiny","messages":[{"role":"user","content":"hi"}],` + usage + `}`,
			`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,` + usage + `}`, 1},
		{"two prompts", "/v1/completions",
			`{"model":"tiny","prompt":["a","b"],` + usage + `}`,
			`{"model":"tiny","prompt":["a","b"],"stream":true,` + usage + `}`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialWS(t, ts, tt.path, nil)
			sendWS(t, c, createMsg("r", tt.ws))
			got := collectWS(t, c, 1)
			want := sseChunks(t, ts, tt.path, tt.sse)
			if len(got) != len(want)+1 {
				t.Fatalf("%d messages, want %d chunks and done", len(got), len(want))
			}
			chunks := make([][]byte, len(want))
			for i := range want {
				chunks[i] = got[i].Chunk
			}
			if tt.streams > 1 {
				chunks, want = byChoice(t, chunks), byChoice(t, want)
			}
			for i := range want {
				if normalized(chunks[i]) != normalized(want[i]) {
					t.Errorf("chunk %d:\nws  %s\nsse %s", i, chunks[i], want[i])
				}
			}
			if end := got[len(got)-1]; end.Type != "done" {
				t.Errorf("ends with %s", end.raw)
			}
		})
	}
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		c := dialWS(t, ts, "/v1/chat/completions", nil)
		sendWS(t, c, createMsg("h", chatBody(hang)))
		if m := readWS(t, c); m.id() != "h" || m.Type != "chunk" { // the opening chunk
			t.Fatalf("first message %s", m.raw)
		}
		time.Sleep(2 * wsWaitInline) // the wait is handed over
		sendWS(t, c, `{"type":"cancel","request_id":"h"}`)
		if m := nextNonChunk(t, c); m.id() != "h" || m.code() != "request_cancelled" {
			t.Fatalf("after cancel: %s", m.raw)
		}
	})
}
