package conformance

import (
	"slices"
	"strings"
	"testing"
)

// goodMessageStream is a valid stream: a thinking block, text, a tool call.
var goodMessageStream = []string{
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,` +
		`"usage":{"input_tokens":8,"cache_creation_input_tokens":16,"cache_read_input_tokens":16,"output_tokens":1}}}`,
	`{"type":"ping"}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm."}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me look."}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}`,
	`{"type":"content_block_stop","index":2}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},` +
		`"usage":{"input_tokens":8,"cache_creation_input_tokens":16,"cache_read_input_tokens":16,"output_tokens":7,"output_tokens_details":{"thinking_tokens":3}}}`,
	`{"type":"message_stop"}`,
}

func messageTranscript(t *testing.T, evs []string) *MessageTranscript {
	t.Helper()
	tr := &MessageTranscript{Transport: "SSE", Status: 200}
	for _, raw := range evs {
		typ, err := eventType([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		tr.Events = append(tr.Events, MessageEvent{Name: typ, Type: typ, Raw: []byte(raw)})
	}
	return tr
}

// TestCheckMessageStream: the good stream passes and accumulates as
// Anthropic's SDKs do; each fault is named.
func TestCheckMessageStream(t *testing.T) {
	t.Parallel()
	res, p := CheckMessageStream(messageTranscript(t, goodMessageStream))
	if len(p) != 0 {
		t.Fatalf("a good stream has problems: %q", p)
	}
	m := res.Message
	if m.Text() != "Let me look." || len(m.Blocks("thinking")) != 1 || m.Blocks("thinking")[0].Signature != "c2ln" ||
		string(m.Blocks("tool_use")[0].Input) != `{"city":"Oslo"}` || *m.StopReason != "tool_use" {
		t.Errorf("accumulated %+v", m)
	}
	if res.Usage.Prompt() != 40 || res.Usage.OutputTokens != 7 || *res.Usage.ThinkingTokens != 3 || res.Start.OutputTokens != 1 {
		t.Errorf("usage %+v, start %+v", res.Usage, res.Start)
	}

	with := func(i int, ev string) []string {
		evs := slices.Clone(goodMessageStream)
		if ev == "" {
			return slices.Delete(evs, i, i+1)
		}
		evs[i] = ev
		return evs
	}
	last := len(goodMessageStream) - 1
	tests := []struct {
		name string
		evs  []string
		want string
	}{
		{"no message_start", with(0, `{"type":"ping"}`), "not message_start"},
		{"message_start with a stop_reason", with(0, strings.Replace(goodMessageStream[0], `"stop_reason":null`, `"stop_reason":"end_turn"`, 1)), "want null"},
		{"message_start without the input counts", with(0, strings.Replace(goodMessageStream[0], `"input_tokens":8,`, ``, 1)), "input_tokens is absent"},
		{"message_start's input counts not the final ones", with(0, strings.Replace(goodMessageStream[0], `"cache_read_input_tokens":16`, `"cache_read_input_tokens":0`, 1)), "the prompt is known when the message starts"},
		{"output that shrinks", with(0, strings.Replace(goodMessageStream[0], `"output_tokens":1`, `"output_tokens":9`, 1)), "usage is cumulative"},
		{"a block out of order", with(6, `{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}`), "want 1"},
		{"a delta of the wrong kind", with(7, `{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"x"}}`), "thinking_delta of a text block"},
		{"a block never stopped", with(8, `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}}`), "never stopped"},
		{"a delta after its block stopped", slices.Insert(slices.Clone(goodMessageStream), 9, `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}}`), "which is not open"},
		{"a block that starts with content", with(6, `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Let"}}`), "content comes in deltas"},
		{"tool input that is no object", with(11, `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\""}}`), "not a JSON object"},
		{"calls with stop_reason end_turn", with(13, strings.Replace(goodMessageStream[13], `"tool_use"`, `"end_turn"`, 1)), "but stop_reason end_turn"},
		{"no usage on message_delta", with(13, `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null}}`), "carries the cumulative usage"},
		{"thinking beyond the output", with(13, strings.Replace(goodMessageStream[13], `"thinking_tokens":3`, `"thinking_tokens":30`, 1)), "output_tokens counts thinking"},
		{"no message_delta", with(13, ""), "no message_delta"},
		{"no message_stop", with(last, ""), "not message_stop"},
		{"an event type Anthropic lacks", with(1, `{"type":"content_block_ping"}`), "unknown type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, p := CheckMessageStream(messageTranscript(t, tt.evs))
			if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tt.want) }) {
				t.Errorf("problems %q, want one that says %q", p, tt.want)
			}
		})
	}
}

// TestReadMessagesSSE: events need their name, and nothing follows the end.
func TestReadMessagesSSE(t *testing.T) {
	t.Parallel()
	tr := &MessageTranscript{}
	in := "event: message_start\ndata: {\"type\":\"message_start\"}\n\n" +
		"data: {\"type\":\"ping\"}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"data: [DONE]\n\n"
	if err := ReadMessagesSSE(strings.NewReader(in), tr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`named "" but its type is "ping"`, "comes after the stream ended", "[DONE]"} {
		if !slices.ContainsFunc(tr.Problems, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("problems %q, want one that says %q", tr.Problems, want)
		}
	}
}

// TestCheckMessagesError: Anthropic's shape, a 4xx, the type of the status.
func TestCheckMessagesError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		body   string
		want   string // "" for no problem
	}{
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`, ""},
		{404, `{"type":"error","error":{"type":"not_found_error","message":"no model"}}`, ""},
		{404, `{"type":"error","error":{"type":"invalid_request_error","message":"no model"}}`, "Anthropic's for status 404 is not_found_error"},
		{400, `{"error":{"type":"invalid_request_error","message":"bad","param":null,"code":null}}`, "not Anthropic's"},
		{500, `{"type":"error","error":{"type":"api_error","message":"boom"}}`, "want a 4xx"},
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":""}}`, "message is missing or empty"},
	}
	for _, tt := range tests {
		p := CheckMessagesError(tt.status, []byte(tt.body))
		switch {
		case tt.want == "" && len(p) != 0:
			t.Errorf("%d %s: problems %q", tt.status, tt.body, p)
		case tt.want != "" && !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tt.want) }):
			t.Errorf("%d %s: problems %q, want one that says %q", tt.status, tt.body, p, tt.want)
		}
	}
}
