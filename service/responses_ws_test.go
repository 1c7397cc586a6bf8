package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/engine"
	"rill/internal/wait"
)

// respMsg is a decoded server message of the Responses WebSocket.
type respMsg struct {
	Type     string `json:"type"`
	Seq      *int   `json:"sequence_number"`
	StreamID string `json:"stream_id"`
	Status   int    `json:"status"`
	Delta    string `json:"delta"`
	Error    *struct {
		Param *string `json:"param"`
		Code  *string `json:"code"`
	} `json:"error"`
	Response *struct {
		ID    string          `json:"id"`
		Usage json.RawMessage `json:"usage"`
	} `json:"response"`
	raw []byte
}

func (m *respMsg) code() string {
	if m.Error == nil || m.Error.Code == nil {
		return ""
	}
	return *m.Error.Code
}

func (m *respMsg) terminal() bool {
	switch m.Type {
	case "response.completed", "response.incomplete", "response.failed", "error":
		return true
	}
	return false
}

// readResp reads one message and checks it against the schemas.
func readResp(t testing.TB, c *websocket.Conn) respMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m respMsg
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("server message: %v\n%s", err, data)
	}
	m.raw = data
	if m.Type == "error" {
		mustValidate(t, "ResponseWebSocketError", data)
	} else {
		mustValidate(t, "ResponseStreamEvent", data)
	}
	return m
}

// readUntilEnd reads the messages of one response, through its last event.
func readUntilEnd(t testing.TB, c *websocket.Conn) []respMsg {
	t.Helper()
	var msgs []respMsg
	for {
		m := readResp(t, c)
		msgs = append(msgs, m)
		if m.terminal() {
			return msgs
		}
	}
}

// idsAndTimes hides what differs between two runs of one request.
var idsAndTimes = regexp.MustCompile(`"(resp|msg|fc)_[0-9a-f]{48}"|"(created_at|completed_at)":\d+`)

func TestResponsesWSMatchesSSE(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a", "b", "c"}, engine.FinishStop, plainStats(5, 3))}
	ts := newTestServer(t, fake, Options{})
	const body = `{"model":"tiny","input":"hi","max_output_tokens":9,"metadata":{"x":"y"}}`
	_, sse := post(t, ts.Client(), ts.URL+"/v1/responses", strings.Replace(body, `{`, `{"stream":true,`, 1))
	evs := parseResponseSSE(t, sse)

	c := dialWS(t, ts, "/v1/responses", nil)
	// Two creates at once on the default lane run one after the other.
	sendWS(t, c, `{"type":"response.create",`+body[1:])
	sendWS(t, c, `{"type":"response.create",`+body[1:])
	for run := range 2 {
		msgs := readUntilEnd(t, c)
		if len(msgs) != len(evs) {
			t.Fatalf("run %d: %d messages, SSE had %d events", run, len(msgs), len(evs))
		}
		for i, m := range msgs {
			got := idsAndTimes.ReplaceAllString(string(m.raw), "")
			want := idsAndTimes.ReplaceAllString(string(evs[i].data), "")
			if got != want {
				t.Errorf("run %d message %d\n got  %s\n want %s", run, i, got, want)
			}
		}
		if msgs[len(msgs)-1].Type != "response.completed" {
			t.Errorf("run %d ends with %s", run, msgs[len(msgs)-1].raw)
		}
	}
}

func TestResponsesWSLanesAndCancel(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	ts := e.server(t, Options{})
	c := dialWS(t, ts, "/v1/responses", nil)

	// Two lanes run side by side: both hang after their first token.
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"hang-a","stream_id":"a"}`)
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"hang-b","stream_id":"b"}`)
	first := map[string]bool{}
	for len(first) < 2 {
		m := readResp(t, c)
		if m.StreamID != "a" && m.StreamID != "b" {
			t.Fatalf("event without its lane: %s", m.raw)
		}
		if m.terminal() {
			t.Fatalf("ended early: %s", m.raw)
		}
		if m.Type == "response.output_text.delta" {
			first[m.StreamID] = true
		}
	}
	// Cancel lane a by its stream_id, lane b by nothing: an error, since
	// the default lane runs nothing.
	sendWS(t, c, `{"type":"response.cancel"}`)
	if m := readResp(t, c); m.Type != "error" || m.Status != 404 || m.code() != "response_not_found" {
		t.Fatalf("cancel of an idle lane: %s", m.raw)
	}
	sendWS(t, c, `{"type":"response.cancel","stream_id":"a"}`)
	m := readResp(t, c)
	if m.Type != "error" || m.Status != 499 || m.code() != "response_cancelled" || m.StreamID != "a" || m.Seq == nil || *m.Seq != 5 {
		t.Fatalf("cancelled response ends with %s", m.raw)
	}
	if !closedSoon(e.channel("hang-a")) {
		t.Error("lane a's engine context is still alive after its error")
	}
	if isClosed(e.channel("hang-b")) {
		t.Error("cancelling lane a cancelled lane b")
	}
	// A finite response on the default lane runs while b still hangs.
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"short"}`)
	msgs := readUntilEnd(t, c)
	if last := msgs[len(msgs)-1]; last.Type != "response.completed" || last.StreamID != "" {
		t.Fatalf("default lane ends with %s", last.raw)
	}
	// Closing the connection cancels lane b.
	_ = c.Close(websocket.StatusNormalClosure, "")
	select {
	case <-e.channel("hang-b"):
	case <-time.After(5 * time.Second):
		t.Fatal("closing the connection did not cancel lane b")
	}
}

func TestResponsesWSCancelByID(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	ts := e.server(t, Options{})
	c := dialWS(t, ts, "/v1/responses", nil)
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"hang"}`)
	created := readResp(t, c)
	if created.Type != "response.created" || created.Response == nil {
		t.Fatalf("first event %s", created.raw)
	}
	sendWS(t, c, `{"type":"response.cancel","response_id":"resp_nope"}`)
	m := readResp(t, c)
	for m.Type != "error" { // events of the running response may come first
		m = readResp(t, c)
	}
	if m.Status != 404 || m.code() != "response_not_found" {
		t.Fatalf("cancel of an unknown id: %s", m.raw)
	}
	sendWS(t, c, `{"type":"response.cancel","response_id":"`+created.Response.ID+`"}`)
	msgs := readUntilEnd(t, c)
	if last := msgs[len(msgs)-1]; last.Type != "error" || last.code() != "response_cancelled" {
		t.Fatalf("ends with %s", last.raw)
	}
	// A cancelled response is not stored.
	if r, _ := get(t, ts, "/v1/responses/"+created.Response.ID); r.StatusCode != 404 {
		t.Errorf("cancelled response GET: %d", r.StatusCode)
	}
}

func TestResponsesWSConversation(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"ok"}, engine.FinishStop, plainStats(3, 1))}
	ts := newTestServer(t, fake, Options{})
	c := dialWS(t, ts, "/v1/responses", nil)
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"one","store":false}`)
	msgs := readUntilEnd(t, c)
	id := msgs[len(msgs)-1].Response.ID
	// The connection remembers its last response whatever store said.
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"two","previous_response_id":"`+id+`"}`)
	msgs = readUntilEnd(t, c)
	if last := msgs[len(msgs)-1]; last.Type != "response.completed" {
		t.Fatalf("continuation on the connection: %s", last.raw)
	}
	reqs := fake.requests()
	if got := reqs[len(reqs)-1].Messages; len(got) != 3 || got[0].Content != "one" || got[1].Content != "ok" || got[2].Content != "two" {
		t.Errorf("conversation %+v", got)
	}
	// Another connection does not know it.
	c2 := dialWS(t, ts, "/v1/responses", nil)
	sendWS(t, c2, `{"type":"response.create","model":"tiny","input":"x","previous_response_id":"`+id+`"}`)
	if m := readResp(t, c2); m.Type != "error" || m.Status != 400 || m.code() != "previous_response_not_found" {
		t.Fatalf("unstored response on another connection: %s", m.raw)
	}
}

func TestResponsesWSBadMessages(t *testing.T) {
	t.Parallel()
	e := newCancelEngine()
	ts := e.server(t, Options{WSMaxRequests: 2, WSMaxMessageBytes: 4096})
	c := dialWS(t, ts, "/v1/responses", nil)
	tests := []struct {
		msg    string
		status int
		param  string
		code   string
	}{
		{`{"type":`, 400, "", "invalid_json"},
		{`[1]`, 400, "", "invalid_type"},
		{`{"model":"tiny"}`, 400, "type", "missing_required_parameter"},
		{`{"type":5}`, 400, "type", "invalid_type"},
		{`{"type":"create","request_id":"r1"}`, 400, "type", "invalid_value"},
		{`{"type":"response.create","stream_id":"a b","model":"tiny","input":"x"}`, 400, "stream_id", "invalid_value"},
		{`{"type":"response.create","input":"x"}`, 400, "model", "missing_required_parameter"},
		{`{"type":"response.create","model":"tiny","input":"x","background":true}`, 400, "background", "unsupported_parameter"},
		{`{"type":"response.create","model":"nope","input":"x"}`, 404, "model", "model_not_found"},
		{`{"type":"response.create","model":"tiny","input":"` + strings.Repeat("x", 5000) + `"}`, 413, "", "request_too_large"},
	}
	for _, tt := range tests {
		sendWS(t, c, tt.msg)
		m := readResp(t, c)
		param := ""
		if m.Error != nil && m.Error.Param != nil {
			param = *m.Error.Param
		}
		if m.Type != "error" || m.Status != tt.status || param != tt.param || m.code() != tt.code {
			t.Errorf("%.60s: %s, want %d %q %q", tt.msg, m.raw, tt.status, tt.param, tt.code)
		}
	}
	// Two responses may be running or queued; the third is refused.
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"hang-1","stream_id":"x"}`)
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"hang-2","stream_id":"x"}`)
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"hang-3","stream_id":"x"}`)
	for {
		m := readResp(t, c)
		if m.Type == "error" {
			if m.Status != 429 || m.StreamID != "x" {
				t.Fatalf("third create: %s", m.raw)
			}
			break
		}
	}
	if isClosed(e.channel("hang-2")) {
		t.Error("the queued response ran or ended")
	}
}

// TestResponsesMetricsAndLog: responses count in the metrics and the access
// log exactly as chat requests do, on every transport.
func TestResponsesMetricsAndLog(t *testing.T) {
	t.Parallel()
	var sink lockedBuffer
	cached := 3.0
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, delay: time.Millisecond, events: script(1, []string{"a", "b"}, engine.FinishStop,
			func(int) engine.Stats {
				return engine.Stats{PromptTokens: 7, CompletionTokens: 2, CachedTokens: &cached, DraftAccepted: ptr(1), DraftRejected: ptr(1)}
			})}, nil
	}}
	ts := newTestServer(t, fake, Options{Logger: slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	for _, body := range []string{`{"model":"tiny","input":"x"}`, `{"model":"tiny","input":"x","stream":true}`} {
		if resp, b := post(t, ts.Client(), ts.URL+"/v1/responses", body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	c := dialWS(t, ts, "/v1/responses", nil)
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":"x"}`)
	msgs := readUntilEnd(t, c)
	wsID := msgs[len(msgs)-1].Response.ID
	_ = c.Close(websocket.StatusNormalClosure, "")

	_, metrics := get(t, ts, "/metrics")
	for _, want := range []string{
		`rill_prompt_tokens_total{model_name="tiny"} 21`,
		`rill_generation_tokens_total{model_name="tiny"} 6`,
		`rill_prefix_cache_queries_total{model_name="tiny"} 21`,
		`rill_prefix_cache_hits_total{model_name="tiny"} 9`,
		`rill_spec_decode_num_draft_tokens_total{model_name="tiny"} 6`,
		`rill_spec_decode_num_accepted_tokens_total{model_name="tiny"} 3`,
		`rill_request_success_total{finished_reason="stop",model_name="tiny"} 3`,
		`rill_time_to_first_token_seconds_count{model_name="tiny"} 3`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The connection's line comes when its handler returns, after the
	// close; the count is checked below, with the lines.
	wait.Until(func() bool { return len(sink.lines()) >= 4 })
	lines := sink.lines()
	if len(lines) != 4 {
		t.Fatalf("%d log lines, want 4 (plain, SSE, WebSocket response, WebSocket connection):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, want := range []map[string]any{
		{"method": "POST", "transport": "http"},
		{"method": "POST", "transport": "http"},
		{"method": "GET", "transport": "websocket", "request_id": wsID},
	} {
		line := decodeMap(t, []byte(lines[i]))
		want["path"], want["model"], want["status"] = "/v1/responses", "tiny", 200.0
		want["prompt_tokens"], want["completion_tokens"], want["cached_tokens"] = 7.0, 2.0, 3.0
		want["accepted_prediction_tokens"], want["rejected_prediction_tokens"] = 1.0, 1.0
		for k, v := range want {
			if line[k] != v {
				t.Errorf("line %d: %s = %v, want %v\n%s", i, k, line[k], v, lines[i])
			}
		}
		if ttft, _ := line["ttft"].(float64); ttft <= 0 {
			t.Errorf("line %d has no ttft: %s", i, lines[i])
		}
	}
}
