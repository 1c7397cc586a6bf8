package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"

	"rill/engine"
)

// FuzzResponsesRequest feeds POST /v1/responses bodies to the Responses
// decoder: validation, decoding, conversion to a job (tools, tool_choice,
// text.format, reasoning, input items). Whatever the input it answers with a
// job or a client error; a job's response object, with the echoes of the
// tools, formats and reasoning, a reasoning item and a function call's
// arguments, is one line of valid JSON, so that no request can break the
// SSE framing of its events.
func FuzzResponsesRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object",` + "\n" + `"properties":{}}}],"tool_choice":{"type":"function",` + "\n" + `"name":"f"}}`))
	f.Add([]byte(`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s","description":"d\n","schema":{"type":` + "\n\t" + `"object"},"strict":true}},"parallel_tool_calls":false}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c","name":"f","arguments":"{\n}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"1"}]}]}`))
	f.Add([]byte(`{"model":"m","input":"x","tools":[{"type":"web_search"}],"tool_choice":"required"}`))
	f.Add([]byte(`{"model":"m","reasoning":{"effort":"minimal","summary":"auto"},"include":["reasoning.encrypted_content"],"input":[{"role":"user","content":"q"},` +
		`{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"r\n"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`))
	s := New(Options{Engine: &fakeEngine{}, Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx := context.Background()
		if err := s.validator.ValidateBody(ctx, http.MethodPost, pathResponses, body); err != nil {
			checkClientError(t, fromValidation(err))
			return
		}
		var req responseRequest
		if e := decodeBody(body, &req); e != nil {
			checkClientError(t, e)
			return
		}
		rp, e := responsesPlan(ctx, &req, serverConversations{store: s.responses}, true)
		if e != nil {
			checkClientError(t, e)
			return
		}
		enc := newResponseEncoder(rp, nil)
		_ = enc.event(&engine.Event{Reasoning: "r\n\"", Text: "a\nb", ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_1", Name: "f", Arguments: "{\n}"}}})
		if err := enc.finish(&Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}); err != nil {
			t.Fatal(err)
		}
		out := enc.response()
		if !json.Valid(out) || bytes.ContainsAny(out, "\r\n") {
			t.Fatalf("the response object is not one line of JSON: %s", out)
		}
	})
}
