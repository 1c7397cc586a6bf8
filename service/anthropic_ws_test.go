package service

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"rill/engine"
)

// The Messages API over the WebSocket transport: the events of SSE with
// the request_id added, many messages on one connection, errors and
// cancellation in Anthropic's shape.

// messageID is the one member that differs between two runs of a request.
var messageID = regexp.MustCompile(`"msg_[0-9a-f]+"`)

// readMessagesWS reads server messages until every id has ended (message_stop or
// an error), checking each against the schemas, and returns them by
// request_id with request_id taken out and the message id blanked.
func readMessagesWS(t *testing.T, c *websocket.Conn, ids ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	open := len(ids)
	for open > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, data, err := c.Read(ctx)
		cancel()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		mustValidate(t, "MessagesWebSocketServerMessage", data)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		var id, typ string
		_ = json.Unmarshal(m["request_id"], &id)
		_ = json.Unmarshal(m["type"], &typ)
		if typ != "error" {
			mustValidate(t, "MessageStreamEvent", data)
		}
		member := `"request_id":` + string(m["request_id"]) + `,`
		if typ != "error" && !strings.HasPrefix(string(data), "{"+member) {
			t.Fatalf("an event that does not start with its request_id: %s", data)
		}
		ev := strings.Replace(string(data), member, "", 1)
		out[id] = append(out[id], messageID.ReplaceAllString(ev, `"msg_X"`))
		if typ == "message_stop" || typ == "error" {
			open--
		}
	}
	return out
}

// wsTestEngine answers "busy" as overloaded, a message that starts with
// "hang" with a word and then nothing, and anything else as
// thinkingCallEngine does.
func wsTestEngine() *cancelEngine {
	e := newCancelEngine()
	calls := thinkingCallEngine()
	hang := e.respond
	e.models = append([]engine.ModelCard{{ID: "busy"}}, testModels...)
	e.respond = func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		switch {
		case req.Model == "busy":
			return nil, fmt.Errorf("queue full: %w", engine.ErrOverloaded)
		case strings.HasPrefix(req.Messages[len(req.Messages)-1].Content, "hang"):
			return hang(ctx, req)
		}
		return calls.respond(ctx, req)
	}
	return e
}

func TestMessagesWebSocket(t *testing.T) {
	t.Parallel()
	e := wsTestEngine()
	ts := e.server(t, Options{})
	const body = `{"model":"tiny","max_tokens":64,"messages":[{"role":"user","content":"weather?"}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}`

	// The events of SSE, in order, without pings.
	resp, data := post(t, ts.Client(), ts.URL+pathMessages, strings.TrimSuffix(body, "}")+`,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("SSE: %d %s", resp.StatusCode, data)
	}
	var want []string
	for _, ev := range parseMessagesSSE(t, data) {
		if ev.name != "ping" {
			want = append(want, messageID.ReplaceAllString(string(ev.data), `"msg_X"`))
		}
	}

	c := dialWS(t, ts, pathMessages, nil)
	sendWS(t, c, createMsg("r1", body))
	sendWS(t, c, createMsg("r2", body))
	sendWS(t, c, createMsg("bad", `{"model":"tiny","messages":[]}`))
	sendWS(t, c, createMsg("busy", `{"model":"busy","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	got := readMessagesWS(t, c, "r1", "r2", "bad", "busy")
	for _, id := range []string{"r1", "r2"} {
		if !reflect.DeepEqual(got[id], want) {
			t.Errorf("%s over WebSocket\n got  %q\n want %q (SSE's)", id, got[id], want)
		}
	}
	for id, w := range map[string]string{
		"bad":  `{"type":"error","status":400,"error":{"type":"invalid_request_error","message":"Invalid 'messages': empty array.`,
		"busy": `{"type":"error","status":529,"error":{"type":"overloaded_error","message":"The engine is currently overloaded; please retry shortly."}}`,
	} {
		if len(got[id]) != 1 || !strings.HasPrefix(got[id][0], w) {
			t.Errorf("%s: %q, want %s…", id, got[id], w)
		}
	}

	// A message that is no command is answered in Anthropic's shape too,
	// with request_id null; a cancelled message ends with a 499.
	sendWS(t, c, `{"type":"create","body":{}}`)
	sendWS(t, c, createMsg("h", `{"model":"tiny","max_tokens":64,"messages":[{"role":"user","content":"hang on"}]}`))
	first := readMessagesWS(t, c, "")
	if len(first[""]) != 1 || !strings.Contains(first[""][0], `"status":400,"error":{"type":"invalid_request_error","message":"Missing required parameter: 'request_id'."}`) {
		t.Errorf("a create without request_id: %q", first)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, data, err := c.Read(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"text_delta"`) {
			break
		}
	}
	sendWS(t, c, `{"type":"cancel","request_id":"h"}`)
	end := readMessagesWS(t, c, "h")
	if n := len(end["h"]); n == 0 || !strings.Contains(end["h"][n-1], `"type":"error","status":499,"error":{"type":"invalid_request_error"`) {
		t.Errorf("cancelled: %q", end["h"])
	}
}
