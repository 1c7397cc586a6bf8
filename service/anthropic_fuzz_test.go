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

// FuzzMessagesRequest feeds POST /v1/messages bodies to the Messages
// decoder: validation, decoding, conversion to a job (system, blocks,
// tools, tool_choice, thinking, output_config). Whatever the input it
// answers with a job or a client error; a job's message object and every
// event of its stream, with a thinking block, text and a call's input, are
// one line of valid JSON each, so that no request can break the SSE
// framing of its events.
func FuzzMessagesRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":8,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1; cch=ab;"},{"type":"text","text":"s\n","cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"system","content":"r"},{"role":"user","content":[{"type":"text","text":"q"}]}],"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},"context_management":{}}`))
	f.Add([]byte(`{"model":"m","max_tokens":2000,"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},` +
		`{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":` + "\n" + `1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"1"}],"is_error":true}]}],` +
		`"tools":[{"name":"f","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true},` +
		`"thinking":{"type":"enabled","budget_tokens":1024}}`))
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}],"stop_sequences":["\n"],"temperature":0,"top_k":1}`))
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"output_config":{"format":{"type":"json_schema","schema":{"type":` + "\n" + `"object"}}}}`))
	s := New(Options{Engine: &fakeEngine{}, Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx := context.Background()
		if err := s.validator.ValidateBody(ctx, http.MethodPost, pathMessages, body); err != nil {
			checkMessagesError(t, fromValidation(err))
			return
		}
		var req messagesRequest
		if e := decodeBody(body, &req); e != nil {
			checkMessagesError(t, e)
			return
		}
		p, _, e := messagesJob(&req)
		if e != nil {
			checkMessagesError(t, e)
			return
		}
		if len(p.reqs) != 1 || p.n != 1 {
			t.Fatalf("a job of %d requests × %d choices", len(p.reqs), p.n)
		}
		var events [][]byte
		w := &recordingMessageWriter{events: &events}
		enc := newMessageEncoder("msg_1", req.Model, w)
		plain := newMessageEncoder("msg_1", req.Model, nil)
		ev := engine.Event{Reasoning: "r\n\"", Text: "a\nb", ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_1", Name: "f", Arguments: "{\n}"}}}
		final := engine.Event{Final: true, FinishReason: engine.FinishToolCalls, Stats: &engine.Stats{PromptTokens: 1, CompletionTokens: 1}}
		u := &Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}
		for _, e := range []*messageEncoder{enc, plain} {
			if err := e.event(&ev); err != nil {
				t.Fatal(err)
			}
			if err := e.event(&final); err != nil {
				t.Fatal(err)
			}
			if err := e.finish(u); err != nil {
				t.Fatal(err)
			}
		}
		for _, out := range append(events, plain.message(u)) {
			if !json.Valid(out) || bytes.ContainsAny(out, "\r\n") {
				t.Fatalf("not one line of JSON: %s", out)
			}
		}
	})
}

// recordingMessageWriter keeps a copy of every event.
type recordingMessageWriter struct{ events *[][]byte }

func (w *recordingMessageWriter) event(_ string, data []byte) error {
	*w.events = append(*w.events, bytes.Clone(data))
	return nil
}

func (w *recordingMessageWriter) ping() error { return nil }

func (w *recordingMessageWriter) fail(e *apiError) error {
	*w.events = append(*w.events, appendAnthropicError(nil, e))
	return nil
}

// checkMessagesError is checkClientError for the Messages API, whose
// errors go out in Anthropic's shape too.
func checkMessagesError(t *testing.T, e *apiError) {
	t.Helper()
	checkClientError(t, e)
	if body := appendAnthropicError(nil, e); !json.Valid(body) {
		t.Fatalf("Anthropic's error is not valid JSON: %q", body)
	}
}
