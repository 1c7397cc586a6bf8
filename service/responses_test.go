package service

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"rill/engine"
	"rill/store"
)

// TestResponseUsageOf pins the Responses usage's shape (docs/design.md §3 rule 12):
// cached_tokens, cache_write_tokens and reasoning_tokens are always there,
// as OpenAI's schema requires, 0 when not measured; the draft counters
// only when drafting was active.
func TestResponseUsageOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   Usage
		want string
	}{
		{"nothing measured", Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10},
			`{"input_tokens":7,"output_tokens":3,"total_tokens":10,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`},
		{"cold cache", Usage{PromptTokens: 40, CompletionTokens: 3, TotalTokens: 43, CachedTokens: ptr(0), CacheWriteTokens: ptr(32)},
			`{"input_tokens":40,"output_tokens":3,"total_tokens":43,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":32},"output_tokens_details":{"reasoning_tokens":0}}`},
		{"warm cache", Usage{PromptTokens: 40, CompletionTokens: 2, TotalTokens: 42, CachedTokens: ptr(32), CacheWriteTokens: ptr(0)},
			`{"input_tokens":40,"output_tokens":2,"total_tokens":42,"input_tokens_details":{"cached_tokens":32,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`},
		{"cached but writes not measured", Usage{PromptTokens: 40, CompletionTokens: 2, TotalTokens: 42, CachedTokens: ptr(32)},
			`{"input_tokens":40,"output_tokens":2,"total_tokens":42,"input_tokens_details":{"cached_tokens":32,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`},
		{"reasoning", Usage{PromptTokens: 5, CompletionTokens: 9, TotalTokens: 14, ReasoningTokens: ptr(6)},
			`{"input_tokens":5,"output_tokens":9,"total_tokens":14,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":6}}`},
		{"drafting", Usage{PromptTokens: 5, CompletionTokens: 9, TotalTokens: 14, CachedTokens: ptr(0),
			AcceptedPredictionTokens: ptr(4), RejectedPredictionTokens: ptr(2)},
			`{"input_tokens":5,"output_tokens":9,"total_tokens":14,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":4,"rejected_prediction_tokens":2}}`},
		{"everything", Usage{PromptTokens: 5, CompletionTokens: 9, TotalTokens: 14, CachedTokens: ptr(0), CacheWriteTokens: ptr(0),
			AcceptedPredictionTokens: ptr(4), RejectedPredictionTokens: ptr(2), ReasoningTokens: ptr(3)},
			`{"input_tokens":5,"output_tokens":9,"total_tokens":14,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":3,"accepted_prediction_tokens":4,"rejected_prediction_tokens":2}}`},
	}
	deref := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ru := ResponseUsageOf(tt.in)
			got := string(ru.AppendJSON(nil))
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			mustValidate(t, "ResponseUsage", []byte(got))
			// Same numbers as the chat usage, under other names.
			if ru.InputTokens != tt.in.PromptTokens || ru.OutputTokens != tt.in.CompletionTokens || ru.TotalTokens != tt.in.TotalTokens ||
				ru.CachedTokens != deref(tt.in.CachedTokens) || ru.CacheWriteTokens != deref(tt.in.CacheWriteTokens) ||
				ru.ReasoningTokens != deref(tt.in.ReasoningTokens) {
				t.Errorf("ResponseUsageOf(%+v) = %+v", tt.in, ru)
			}
		})
	}
}

// fakeConversations resolves from maps.
type fakeConversations struct {
	responses map[string]*storedResponse
}

func (f fakeConversations) response(_ context.Context, id string) (*storedResponse, error) {
	if r, ok := f.responses[id]; ok {
		return r, nil
	}
	return nil, store.ErrNotFound
}

func (f fakeConversations) item(_ context.Context, id string) (engine.Message, error) {
	for _, r := range f.responses {
		if m, ok := r.item(id); ok {
			return m, nil
		}
	}
	return engine.Message{}, store.ErrNotFound
}

func responsePlanOf(t *testing.T, body string, conv conversations) (*responseJob, *apiError) {
	t.Helper()
	var r responseRequest
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return responsesPlan(context.Background(), &r, conv, true)
}

func TestResponsesPlan(t *testing.T) {
	t.Parallel()
	first := &storedResponse{id: "resp_1", items: []storedItem{{"msg_1", engine.Message{Role: engine.RoleAssistant, Content: "hello"}}},
		turn: []engine.Message{{Role: engine.RoleUser, Content: "hi"}, {Role: engine.RoleAssistant, Content: "hello"}}}
	second := &storedResponse{id: "resp_2", items: []storedItem{{"msg_2", engine.Message{Role: engine.RoleAssistant, Content: "sure"}}},
		parent: first, turn: []engine.Message{{Role: engine.RoleUser, Content: "more"}, {Role: engine.RoleAssistant, Content: "sure"}}}
	weather := engine.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}
	add2, add3 := engine.ToolCall{ID: "call_2", Name: "add", Arguments: `{"a":1,"b":2}`}, engine.ToolCall{ID: "call_3", Name: "add", Arguments: `{"a":3,"b":4}`}
	callOnly := func(c ...engine.ToolCall) engine.Message {
		return engine.Message{Role: engine.RoleAssistant, NullContent: true, ToolCalls: c}
	}
	// A stored response that only called a tool, and one that said a word, then called two.
	third := &storedResponse{id: "resp_3", items: []storedItem{{"fc_1", callOnly(weather)}},
		turn: []engine.Message{{Role: engine.RoleUser, Content: "weather?"}, callOnly(weather)}}
	fourth := &storedResponse{id: "resp_4",
		items: []storedItem{{"msg_4", engine.Message{Role: engine.RoleAssistant, Content: "Checking."}}, {"fc_2", callOnly(add2)}, {"fc_3", callOnly(add3)}},
		turn:  []engine.Message{{Role: engine.RoleUser, Content: "sums?"}, {Role: engine.RoleAssistant, Content: "Checking.", ToolCalls: []engine.ToolCall{add2, add3}}}}
	conv := fakeConversations{responses: map[string]*storedResponse{"resp_1": first, "resp_2": second, "resp_3": third, "resp_4": fourth}}
	user := func(s string) engine.Message { return engine.Message{Role: engine.RoleUser, Content: s} }
	tool := func(id, s string) engine.Message {
		return engine.Message{Role: engine.RoleTool, Content: s, ToolCallID: id}
	}
	tests := []struct {
		name string
		body string
		want []engine.Message
		// check inspects the job beyond its messages; may be nil.
		check func(t *testing.T, p *responseJob)
	}{
		{"string input", `{"model":"m","input":"hi"}`, []engine.Message{user("hi")}, func(t *testing.T, p *responseJob) {
			req := p.reqs[0]
			if req.N != 1 || req.MaxTokens != 0 || req.Sampling.Temperature != 1 || req.Sampling.TopP != 1 || req.Logprobs {
				t.Errorf("defaults: %+v", req)
			}
			if !p.store || p.stream || p.previousID != "" || !strings.HasPrefix(p.id, "resp_") || len(p.id) != 5+48 {
				t.Errorf("job: %+v", p)
			}
			if len(req.Tools) != 0 || req.ToolChoice != (engine.ToolChoice{}) || req.ParallelToolCalls != nil || req.ResponseFormat != nil {
				t.Errorf("tools and format: %+v", req)
			}
			if string(p.tools) != "[]" || string(p.toolChoice) != `"auto"` || string(p.textFormat) != `{"type":"text"}` || !p.parallelToolCalls {
				t.Errorf("echo: tools %s tool_choice %s format %s parallel %v", p.tools, p.toolChoice, p.textFormat, p.parallelToolCalls)
			}
		}},
		{"message items and parts", `{"model":"m","input":[{"role":"developer","content":"be brief"},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
			{"role":"assistant","content":[{"type":"output_text","text":"c","annotations":[]},{"type":"refusal","refusal":"!"}]}]}`,
			[]engine.Message{{Role: engine.RoleDeveloper, Content: "be brief"}, user("ab"), {Role: engine.RoleAssistant, Content: "c!"}}, nil},
		{"instructions first", `{"model":"m","instructions":"sys","input":"hi"}`,
			[]engine.Message{{Role: engine.RoleSystem, Content: "sys"}, user("hi")}, func(t *testing.T, p *responseJob) {
				if p.instructions == nil || *p.instructions != "sys" || len(p.input) != 1 {
					t.Errorf("instructions %v, input %v", p.instructions, p.input)
				}
			}},
		{"previous response: its whole conversation, then the input; instructions not carried",
			`{"model":"m","instructions":"new","previous_response_id":"resp_2","input":"again"}`,
			[]engine.Message{{Role: engine.RoleSystem, Content: "new"}, user("hi"), {Role: engine.RoleAssistant, Content: "hello"},
				user("more"), {Role: engine.RoleAssistant, Content: "sure"}, user("again")},
			func(t *testing.T, p *responseJob) {
				if p.previousID != "resp_2" || p.parent != second {
					t.Errorf("previous %q parent %p", p.previousID, p.parent)
				}
			}},
		{"previous response without input", `{"model":"m","previous_response_id":"resp_1"}`,
			[]engine.Message{user("hi"), {Role: engine.RoleAssistant, Content: "hello"}}, nil},
		{"item reference", `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"item_reference","id":"msg_1"},{"role":"user","content":"x"}]}`,
			[]engine.Message{user("hi"), {Role: engine.RoleAssistant, Content: "hello"}, user("x")}, nil},
		{"sampling and extensions", `{"model":"m","input":"x","max_output_tokens":5,"temperature":0,"top_p":0,"top_k":3,"min_p":0.1,"seed":7,"ignore_eos":true,"no_draft":true}`,
			[]engine.Message{user("x")}, func(t *testing.T, p *responseJob) {
				req := p.reqs[0]
				s := req.Sampling
				if req.MaxTokens != 5 || s.Temperature != 0 || s.TopP <= 0 || s.TopP > 1e-300 || s.TopK != 3 || s.MinP != 0.1 ||
					s.Seed == nil || *s.Seed != 7 || !req.IgnoreEOS || !req.NoDraft {
					t.Errorf("request %+v", req)
				}
				if p.maxOutputTokens != 5 || p.temperature != 0 || p.topP != 0 {
					t.Errorf("echo: max %d temperature %v top_p %v", p.maxOutputTokens, p.temperature, p.topP)
				}
			}},
		{"logprobs through include", `{"model":"m","input":"x","include":["message.output_text.logprobs"],"top_logprobs":2}`,
			[]engine.Message{user("x")}, func(t *testing.T, p *responseJob) {
				if !p.logprobs || !p.reqs[0].Logprobs || p.reqs[0].TopLogprobs != 2 {
					t.Errorf("logprobs %v %+v", p.logprobs, p.reqs[0])
				}
			}},
		{"store false, stream, metadata, tools with tool_choice none, reasoning high leaves the template alone",
			`{"model":"m","input":"x","store":false,"stream":true,"metadata":{"b":"2","a":"1"},"tools":[{"type":"function","name":"f"}],"tool_choice":"none","reasoning":{"effort":"high"},"text":{"format":{"type":"text"}}}`,
			[]engine.Message{user("x")}, func(t *testing.T, p *responseJob) {
				if p.store || !p.stream || !reflect.DeepEqual(p.metadataKeys, []string{"a", "b"}) || string(p.toolChoice) != `"none"` {
					t.Errorf("job %+v", p)
				}
				if req := p.reqs[0]; req.ToolChoice.Mode != engine.ToolChoiceNone || len(req.Tools) != 1 || req.ResponseFormat != nil ||
					req.ChatTemplateKwargs != nil {
					t.Errorf("request %+v", req)
				}
			}},
		{"flat function tools, a named tool_choice, parallel_tool_calls false",
			`{"model":"m","input":"x","tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object",
			  "properties":{"city":{"type":"string"}}}},{"type":"function","name":"add","strict":false}],
			  "tool_choice":{"type":"function","name":"add"},"parallel_tool_calls":false}`,
			[]engine.Message{user("x")}, func(t *testing.T, p *responseJob) {
				req := p.reqs[0]
				want := []engine.Tool{
					{Name: "get_weather", Description: "Weather.", Parameters: json.RawMessage(`{"type":"object",
			  "properties":{"city":{"type":"string"}}}`), Strict: true},
					{Name: "add", Strict: false},
				}
				if !reflect.DeepEqual(req.Tools, want) || req.ToolChoice != (engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "add"}) ||
					req.ParallelToolCalls == nil || *req.ParallelToolCalls {
					t.Errorf("request tools %+v choice %+v parallel %v", req.Tools, req.ToolChoice, req.ParallelToolCalls)
				}
				const echo = `[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true},` +
					`{"type":"function","name":"add","description":null,"parameters":null,"strict":false}]`
				if string(p.tools) != echo || string(p.toolChoice) != `{"type":"function","name":"add"}` || p.parallelToolCalls {
					t.Errorf("echo: tools %s\n tool_choice %s parallel %v", p.tools, p.toolChoice, p.parallelToolCalls)
				}
			}},
		{"tool_choice required", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required"}`,
			[]engine.Message{user("x")}, func(t *testing.T, p *responseJob) {
				if req := p.reqs[0]; req.ToolChoice.Mode != engine.ToolChoiceRequired || req.ParallelToolCalls != nil {
					t.Errorf("request %+v", req)
				}
			}},
		{"text.format json_schema", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"ev","strict":true,
			"description":"An event.","schema":{"type":"object", "properties":{"a":{"type":"integer"}}}}}}`,
			[]engine.Message{user("x")}, func(t *testing.T, p *responseJob) {
				rf := p.reqs[0].ResponseFormat
				if rf == nil || rf.Type != engine.FormatJSONSchema || rf.Name != "ev" || !rf.Strict ||
					string(rf.Schema) != `{"type":"object", "properties":{"a":{"type":"integer"}}}` {
					t.Fatalf("format %+v", rf)
				}
				const echo = `{"type":"json_schema","description":"An event.","name":"ev","schema":{"type":"object","properties":{"a":{"type":"integer"}}},"strict":true}`
				if string(p.textFormat) != echo {
					t.Errorf("echo %s", p.textFormat)
				}
			}},
		{"text.format json_object", `{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`,
			[]engine.Message{user("x")}, func(t *testing.T, p *responseJob) {
				if rf := p.reqs[0].ResponseFormat; rf == nil || rf.Type != engine.FormatJSONObject || string(p.textFormat) != `{"type":"json_object"}` {
					t.Errorf("format %+v, echo %s", rf, p.textFormat)
				}
			}},
		{"function calls and their outputs as input items: calls join the assistant message before them",
			`{"model":"m","input":[{"role":"user","content":"sums?"},
			  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
			  {"type":"function_call","id":"fc_x","call_id":"call_2","name":"add","arguments":"{\"a\":1,\"b\":2}","status":"completed"},
			  {"type":"function_call","call_id":"call_3","name":"add","arguments":"{\"a\":3,\"b\":4}"},
			  {"type":"function_call_output","call_id":"call_2","output":"3"},
			  {"type":"function_call_output","call_id":"call_3","output":[{"type":"input_text","text":"7"}]},
			  {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}"},
			  {"type":"function_call_output","call_id":"call_1","output":"-3"}]}`,
			[]engine.Message{user("sums?"), {Role: engine.RoleAssistant, Content: "Checking.", ToolCalls: []engine.ToolCall{add2, add3}},
				tool("call_2", "3"), tool("call_3", "7"), callOnly(weather), tool("call_1", "-3")}, nil},
		{"custom and namespaced calls and their outputs are calls of the functions the model saw",
			`{"model":"m","input":[{"type":"message","role":"developer","id":"msg_d","content":[{"type":"input_text","text":"Be careful."}]},
			  {"role":"user","content":"patch it"},
			  {"type":"custom_tool_call","id":"ctc_1","call_id":"call_p","name":"apply_patch","input":"*** Begin Patch\n\"x\"\n"},
			  {"type":"custom_tool_call_output","call_id":"call_p","output":"done"},
			  {"type":"function_call","call_id":"call_f","name":"find","namespace":"crm","arguments":"{\"q\":\"ann\"}"},
			  {"type":"function_call_output","call_id":"call_f","output":"[]"}]}`,
			[]engine.Message{{Role: engine.RoleDeveloper, Content: "Be careful."}, user("patch it"),
				callOnly(engine.ToolCall{ID: "call_p", Name: "apply_patch", Arguments: `{"input":"*** Begin Patch\n\"x\"\n"}`}), tool("call_p", "done"),
				callOnly(engine.ToolCall{ID: "call_f", Name: "crm__find", Arguments: `{"q":"ann"}`}), tool("call_f", "[]")}, nil},
		{"a call's output continuing by previous_response_id",
			`{"model":"m","previous_response_id":"resp_3","input":[{"type":"function_call_output","call_id":"call_1","output":"-3"}]}`,
			[]engine.Message{user("weather?"), callOnly(weather), tool("call_1", "-3")}, nil},
		{"item references to a stored message and its calls make its reply again",
			`{"model":"m","input":[{"role":"user","content":"sums?"},{"type":"item_reference","id":"msg_4"},
			  {"type":"item_reference","id":"fc_2"},{"type":"item_reference","id":"fc_3"},
			  {"type":"function_call_output","call_id":"call_3","output":"7"}]}`,
			[]engine.Message{user("sums?"), {Role: engine.RoleAssistant, Content: "Checking.", ToolCalls: []engine.ToolCall{add2, add3}}, tool("call_3", "7")},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, e := responsePlanOf(t, tt.body, conv)
			if e != nil {
				t.Fatalf("%s: %v", tt.body, e)
			}
			if got := p.reqs[0].Messages; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("messages\n got  %+v\n want %+v", got, tt.want)
			}
			if tt.check != nil {
				tt.check(t, p)
			}
		})
	}
}

func TestResponsesPlanRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body, param, code string
	}{
		{`{"model":"m"}`, "input", "missing_required_parameter"},
		{`{"model":"m","input":[]}`, "input", "missing_required_parameter"},
		{`{"model":"m","input":"x","previous_response_id":"resp_nope"}`, "previous_response_id", "previous_response_not_found"},
		{`{"model":"m","input":[{"type":"item_reference","id":"msg_nope"}]}`, "input[0].id", "item_not_found"},
		{`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`, "input[0].call_id", "invalid_value"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"d","output":"x"}]}`, "input[1].call_id", "invalid_value"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","output":"x"}]}`, "input[1].call_id", "missing_required_parameter"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c"}]}`, "input[1].output", "missing_required_parameter"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"http://x"}]}]}`, "input[1].output[0].type", "unsupported_parameter"},
		{`{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id", "missing_required_parameter"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`, "input[0].name", "missing_required_parameter"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f"}]}`, "input[0].arguments", "missing_required_parameter"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"","name":"f","arguments":"{}"}]}`, "input[0].call_id", "invalid_value"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"a b","arguments":"{}"}]}`, "input[0].name", "invalid_value"},
		{`{"model":"m","input":[{"type":"web_search_call","id":"ws_1"}]}`, "input[0].type", "unsupported_parameter"},
		{`{"model":"m","input":[{"content":"x"}]}`, "input[0].role", "missing_required_parameter"},
		{`{"model":"m","input":[{"role":"user"}]}`, "input[0].content", "missing_required_parameter"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"http://x"}]}]}`, "input[0].content[1].type", "unsupported_parameter"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text", "missing_required_parameter"},
		{`{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"refusal"}]}]}`, "input[0].content[1].refusal", "missing_required_parameter"},
		{`{"model":"m","input":"x","tools":[{"type":"web_browser"}]}`, "tools[0].type", "unsupported_parameter"},
		{`{"model":"m","input":"x","tools":[{"type":"custom","name":"a b"}]}`, "tools[0].name", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"custom","name":"c","format":{"type":"json"}}]}`, "tools[0].format.type", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"crm.v2","tools":[]}]}`, "tools[0].name", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"crm","tools":[{"type":"web_search"}]}]}`, "tools[0].tools[0].type", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"crm","tools":[{"type":"function","name":"a b"}]}]}`, "tools[0].tools[0].name", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"crm__find"},{"type":"namespace","name":"crm","tools":[{"type":"function","name":"find"}]}]}`, "tools[1].tools[0].name", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"custom","name":"f"}}`, "tool_choice", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"custom","name":"c"}],"tool_choice":{"type":"function","name":"c"}}`, "tool_choice", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"namespace","name":"a","tools":[{"type":"function","name":"f"}]},{"type":"namespace","name":"b","tools":[{"type":"function","name":"f"}]}],"tool_choice":{"type":"function","name":"f"}}`, "tool_choice", "invalid_value"},
		{`{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"patch"}]}`, "input[0].input", "missing_required_parameter"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","namespace":"a b","arguments":"{}"}]}`, "input[0].namespace", "invalid_value"},
		{`{"model":"m","input":[{"type":"custom_tool_call_output","call_id":"c","output":"x"}]}`, "input[0].call_id", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"a b"}]}`, "tools[0].name", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]}`, "tools[1].name", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":[]}]}`, "tools[0].parameters", "invalid_type"},
		{`{"model":"m","input":"x","tool_choice":"required"}`, "tool_choice", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"sometimes"}`, "tool_choice", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice", "invalid_value"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function"}}`, "tool_choice.name", "missing_required_parameter"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"web_search_previews"}}`, "tool_choice.type", "unsupported_parameter"},
		{`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, "tool_choice.type", "unsupported_parameter"},
		{`{"model":"m","input":"x","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format.name", "missing_required_parameter"},
		{`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s"}}}`, "text.format.schema", "missing_required_parameter"},
		{`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s","schema":true}}}`, "text.format.schema", "invalid_type"},
		{`{"model":"m","input":"x","text":{"format":{"type":"grammar"}}}`, "text.format.type", "invalid_value"},
		{`{"model":"m","input":"x","background":true,"store":false}`, "background", "invalid_request"},
		{`{"model":"m","input":"x","conversation":"conv_1"}`, "conversation", "unsupported_parameter"},
		{`{"model":"m","input":"x","prompt":{"id":"p"}}`, "prompt", "unsupported_parameter"},
	}
	for _, tt := range tests {
		p, e := responsePlanOf(t, tt.body, fakeConversations{})
		if e == nil {
			t.Errorf("%s: accepted: %+v", tt.body, p)
			continue
		}
		if e.Status != http.StatusBadRequest || e.Param != tt.param || e.Code != tt.code || e.Message == "" {
			t.Errorf("%s: %d param %q code %q (%s), want 400 param %q code %q", tt.body, e.Status, e.Param, e.Code, e.Message, tt.param, tt.code)
		}
	}
}

// TestResponseStore: stored responses go through a store.Store and come
// back whole: a conversation read from its newest response, output items
// by id, and the conversation of a response whose parent was evicted or
// deleted (the store's hidden responses), or whose parent a WebSocket
// connection never stored.
func TestResponseStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &responseStore{st: store.NewMemory(store.Retention{MaxResponses: 2})}
	mk := func(id string, parent *storedResponse) *storedResponse {
		return &storedResponse{id: id, items: []storedItem{{"msg_" + id, engine.Message{Role: engine.RoleAssistant, Content: "a" + id}}},
			parent: parent, body: []byte(`{"id":"` + id + `"}`),
			turn: []engine.Message{{Role: engine.RoleUser, Content: "q" + id}, {Role: engine.RoleAssistant, Content: "a" + id,
				ToolCalls: []engine.ToolCall{{ID: "call_" + id, Name: "f", Arguments: "{}"}}}}}
	}
	history := func(r *storedResponse) string {
		var contents []string
		for _, m := range r.history() {
			contents = append(contents, m.Content)
		}
		return strings.Join(contents, " ")
	}
	put := func(r *storedResponse) {
		t.Helper()
		if err := s.put(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.inStore = true
	}
	a := mk("a", nil)
	put(a)
	b := mk("b", a)
	put(b)
	c := mk("c", b)
	put(c) // evicts a, the least recently stored
	if _, err := s.get(ctx, "a"); !isNotFound(err) {
		t.Errorf("a after eviction: %v", err)
	}
	if _, err := s.item(ctx, "msg_a"); !isNotFound(err) {
		t.Errorf("a's output message after eviction: %v", err)
	}
	if m, err := s.item(ctx, "msg_c"); err != nil || m.Content != "ac" || m.Role != engine.RoleAssistant ||
		len(m.ToolCalls) != 0 {
		t.Errorf("item msg_c: %+v %v", m, err)
	}
	got, err := s.get(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	// c's conversation is whole although a left the store, and b too now.
	if err := s.delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got, err = s.get(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if h := history(got); h != "qa aa qb ab qc ac" {
		t.Errorf("history %q", h)
	}
	if last := got.history()[5]; len(last.ToolCalls) != 1 || last.ToolCalls[0].ID != "call_c" {
		t.Errorf("c's reply lost its call: %+v", last)
	}
	if one, err := s.one(ctx, "c"); err != nil || string(one.body) != `{"id":"c"}` {
		t.Errorf("one(c) = %v, %v", one, err)
	}
	if err := s.delete(ctx, "b"); !isNotFound(err) {
		t.Errorf("second delete of b: %v", err)
	}
	// d continues an unstored response (store false on a WebSocket), which
	// continued c: d's conversation is whole all the same.
	unstored := mk("u", got)
	d := mk("d", unstored)
	put(d)
	gd, err := s.get(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if h := history(gd); h != "qa aa qb ab qc ac qu au qd ad" {
		t.Errorf("history of d %q", h)
	}

	var off *responseStore
	if err := off.put(ctx, a); err != nil {
		t.Error(err)
	}
	if _, err := off.get(ctx, "a"); !isNotFound(err) || off.enabled() || !isNotFound(off.delete(ctx, "a")) {
		t.Error("a disabled store kept something")
	}
}

// responseEvent is one event of a Responses SSE stream.
type responseEvent struct {
	name string // the event: line
	data []byte
	m    map[string]any
}

// parseResponseSSE reads a Responses stream: `event:` and `data:` lines per
// event, a blank line after each, no [DONE]; every event validates.
func parseResponseSSE(t testing.TB, body []byte) []responseEvent {
	t.Helper()
	var evs []responseEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur responseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = []byte(strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, ": "):
		case line == "":
			if cur.data == nil {
				continue
			}
			if string(cur.data) == "[DONE]" {
				t.Fatal("a Responses stream sent [DONE]")
			}
			cur.m = decodeMap(t, cur.data)
			mustValidate(t, "ResponseStreamEvent", cur.data)
			if cur.m["type"] != cur.name {
				t.Fatalf("event: %q carries type %v", cur.name, cur.m["type"])
			}
			evs = append(evs, cur)
			cur = responseEvent{}
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	if cur.data != nil {
		t.Fatal("stream ends inside an event")
	}
	return evs
}

func eventTypes(evs []responseEvent) string {
	var names []string
	for _, e := range evs {
		names = append(names, e.name)
	}
	return strings.Join(names, " ")
}

// checkSequence checks sequence numbers 0, 1, 2, …
func checkSequence(t testing.TB, evs []responseEvent) {
	t.Helper()
	for i, e := range evs {
		if n, ok := e.m["sequence_number"].(float64); !ok || int(n) != i {
			t.Fatalf("event %d (%s) has sequence_number %v", i, e.name, e.m["sequence_number"])
		}
	}
}

func TestResponsesHTTP(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"Hel", "lo"}, engine.FinishStop, func(int) engine.Stats {
		return engine.Stats{PromptTokens: 9, CompletionTokens: 2, CachedTokens: ptr(0.0)}
	})}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"

	resp, body := post(t, ts.Client(), url, `{"model":"tiny","input":"hi","metadata":{"k":"v"}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	mustValidate(t, "Response", body)
	var plain struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output []struct {
			ID      string `json:"id"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
		Usage    json.RawMessage   `json:"usage"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(body, &plain); err != nil {
		t.Fatal(err)
	}
	const wantUsage = `{"input_tokens":9,"output_tokens":2,"total_tokens":11,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`
	if plain.Status != "completed" || len(plain.Output) != 1 || plain.Output[0].Content[0].Text != "Hello" ||
		string(plain.Usage) != wantUsage || plain.Metadata["k"] != "v" {
		t.Fatalf("response %s", body)
	}

	// GET answers with the very body; DELETE removes it.
	getResp, got := get(t, ts, "/v1/responses/"+plain.ID)
	if getResp.StatusCode != 200 || strings.TrimSpace(string(got)) != strings.TrimSpace(string(body)) {
		t.Fatalf("GET: %d\n%s\nwant\n%s", getResp.StatusCode, got, body)
	}

	// Continue by id: the engine gets the whole conversation.
	resp, body = post(t, ts.Client(), url, `{"model":"tiny","previous_response_id":"`+plain.ID+`","input":"again","stream":true}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	reqs := fake.requests()
	if msgs := reqs[len(reqs)-1].Messages; len(msgs) != 3 || msgs[1].Content != "Hello" || msgs[2].Content != "again" {
		t.Errorf("continued conversation: %+v", msgs)
	}
	evs := parseResponseSSE(t, body)
	const order = "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_text.delta response.output_text.done response.content_part.done " +
		"response.output_item.done response.completed"
	if got := eventTypes(evs); got != order {
		t.Fatalf("events\n got  %s\n want %s", got, order)
	}
	checkSequence(t, evs)
	for i, e := range evs[:len(evs)-1] {
		if r, ok := e.m["response"].(map[string]any); ok && r["usage"] != nil {
			t.Errorf("event %d (%s) carries usage", i, e.name)
		}
	}
	var final struct {
		Response struct {
			Usage    json.RawMessage `json:"usage"`
			Previous string          `json:"previous_response_id"`
		} `json:"response"`
	}
	if err := json.Unmarshal(evs[len(evs)-1].data, &final); err != nil {
		t.Fatal(err)
	}
	if string(final.Response.Usage) != wantUsage || final.Response.Previous != plain.ID {
		t.Errorf("final usage %s, previous %v", final.Response.Usage, final.Response.Previous)
	}

	if r, _ := del(t, ts, "/v1/responses/"+plain.ID); r.StatusCode != 200 {
		t.Fatalf("DELETE: %d", r.StatusCode)
	}
	if r, b := get(t, ts, "/v1/responses/"+plain.ID); r.StatusCode != 404 || !strings.Contains(string(b), "response_not_found") {
		t.Errorf("GET after DELETE: %d %s", r.StatusCode, b)
	}
	if r, b := del(t, ts, "/v1/responses/"+plain.ID); r.StatusCode != 404 {
		t.Errorf("second DELETE: %d %s", r.StatusCode, b)
	}

	// store false keeps nothing.
	_, body = post(t, ts.Client(), url, `{"model":"tiny","input":"hi","store":false}`)
	id := decodeMap(t, body)["id"].(string)
	if r, _ := get(t, ts, "/v1/responses/"+id); r.StatusCode != 404 {
		t.Errorf("store false: GET %d", r.StatusCode)
	}
	if r, b := post(t, ts.Client(), url, `{"model":"tiny","input":"x","previous_response_id":"`+id+`"}`); r.StatusCode != 400 ||
		!strings.Contains(string(b), "previous_response_not_found") {
		t.Errorf("continuing an unstored response: %d %s", r.StatusCode, b)
	}
}

func TestResponsesIncompleteAndFailed(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if req.Messages[0].Content == "fail" {
			return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "par"}}, err: fmt.Errorf("gpu fell over: %w", engine.ErrUpstream)}, nil
		}
		return &fakeStream{ctx: ctx, events: script(1, []string{"a", "b"}, engine.FinishLength, plainStats(4, 2))}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"

	_, body := post(t, ts.Client(), url, `{"model":"tiny","input":"x","max_output_tokens":2}`)
	m := decodeMap(t, body)
	if m["status"] != "incomplete" || fmt.Sprint(m["incomplete_details"]) != "map[reason:max_output_tokens]" {
		t.Errorf("non-streamed: %s", body)
	}
	_, body = post(t, ts.Client(), url, `{"model":"tiny","input":"x","max_output_tokens":2,"stream":true}`)
	evs := parseResponseSSE(t, body)
	checkSequence(t, evs)
	lastEv := evs[len(evs)-1]
	if lastEv.name != "response.incomplete" {
		t.Fatalf("last event %s", lastEv.name)
	}
	item := evs[len(evs)-2].m["item"].(map[string]any)
	if item["status"] != "incomplete" {
		t.Errorf("output_item.done status %v", item["status"])
	}

	resp, body := post(t, ts.Client(), url, `{"model":"tiny","input":"fail","stream":true}`)
	evs = parseResponseSSE(t, body)
	checkSequence(t, evs)
	lastEv = evs[len(evs)-1]
	r := lastEv.m["response"].(map[string]any)
	if resp.StatusCode != 200 || lastEv.name != "response.failed" || r["status"] != "failed" || r["usage"] != nil ||
		!strings.Contains(fmt.Sprint(r["error"]), "upstream_error") {
		t.Errorf("failed stream ends with %s: %s", lastEv.name, lastEv.data)
	}
	resp, body = post(t, ts.Client(), url, `{"model":"tiny","input":"fail"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "upstream_error") {
		t.Errorf("non-streamed failure: %d %s", resp.StatusCode, body)
	}
}

func TestResponsesErrors(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, errorEngine(), Options{ResponsesStore: -1})
	tests := []struct {
		name, method, path, body string
		status                   int
		param, code              string
	}{
		{"unknown model", "POST", "/v1/responses", `{"model":"nope","input":"x"}`, 404, "model", "model_not_found"},
		{"too long", "POST", "/v1/responses", `{"model":"long","input":"x"}`, 400, "input", "context_length_exceeded"},
		{"overloaded", "POST", "/v1/responses", `{"model":"busy","input":"x","stream":true}`, 503, "", "engine_overloaded"},
		{"missing model", "POST", "/v1/responses", `{"input":"x"}`, 400, "model", "missing_required_parameter"},
		{"input of the wrong type", "POST", "/v1/responses", `{"model":"tiny","input":5}`, 400, "input", "invalid_type"},
		{"max_output_tokens 0", "POST", "/v1/responses", `{"model":"tiny","input":"x","max_output_tokens":0}`, 400, "max_output_tokens", "integer_below_min_value"},
		{"temperature", "POST", "/v1/responses", `{"model":"tiny","input":"x","temperature":3}`, 400, "temperature", "decimal_above_max_value"},
		{"bad role", "POST", "/v1/responses", `{"model":"tiny","input":[{"role":"wizard","content":"x"}]}`, 400, "input[0].role", "invalid_value"},
		{"metadata value", "POST", "/v1/responses", `{"model":"tiny","input":"x","metadata":{"k":5}}`, 400, "metadata.k", "invalid_type"},
		{"store off: previous", "POST", "/v1/responses", `{"model":"tiny","input":"x","previous_response_id":"resp_1"}`, 400, "previous_response_id", "previous_response_not_found"},
		{"store off: GET", "GET", "/v1/responses/resp_1", ``, 404, "", "response_not_found"},
		{"PUT", "PUT", "/v1/responses/resp_1", ``, 405, "", "method_not_allowed"},
		{"GET without upgrade", "GET", "/v1/responses", ``, 405, "", "method_not_allowed"},
		{"nested path", "GET", "/v1/responses/resp_1/outputs", ``, 404, "", "unknown_url"},
		{"input items of an unknown response", "GET", "/v1/responses/resp_1/input_items", ``, 404, "", "response_not_found"},
		{"cancel of an unknown response", "POST", "/v1/responses/resp_1/cancel", ``, 404, "", "response_not_found"},
		{"bad starting_after", "GET", "/v1/responses/resp_1?stream=true&starting_after=x", ``, 400, "starting_after", "invalid_value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Param *string `json:"param"`
					Code  *string `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			param, code := "", ""
			if body.Error.Param != nil {
				param = *body.Error.Param
			}
			if body.Error.Code != nil {
				code = *body.Error.Code
			}
			if resp.StatusCode != tt.status || param != tt.param || code != tt.code {
				t.Errorf("%d param %q code %q, want %d %q %q", resp.StatusCode, param, code, tt.status, tt.param, tt.code)
			}
		})
	}
}

func get(t testing.TB, ts *httptest.Server, path string) (*http.Response, []byte) {
	t.Helper()
	return do(t, ts, http.MethodGet, path)
}

func del(t testing.TB, ts *httptest.Server, path string) (*http.Response, []byte) {
	t.Helper()
	return do(t, ts, http.MethodDelete, path)
}

func do(t testing.TB, ts *httptest.Server, method, path string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestResponsesLogprobs: with include ["message.output_text.logprobs"] the
// deltas, the done text and the final part carry the tokens' logprobs in
// the Responses API's shape; without it they carry [].
func TestResponsesLogprobs(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		lp := func(tok string) []engine.TokenLogprob {
			if !req.Logprobs {
				return nil
			}
			return []engine.TokenLogprob{{Token: tok, Logprob: -0.5, Top: []engine.TopLogprob{{Token: tok, Logprob: -0.5}, {Token: "z", Logprob: -2}}[:req.TopLogprobs]}}
		}
		st := plainStats(3, 2)(0)
		return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "a", Logprobs: lp("a")}, {Text: "b", Logprobs: lp("b")},
			{Final: true, FinishReason: engine.FinishStop, Stats: &st}}}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	_, body := post(t, ts.Client(), ts.URL+"/v1/responses",
		`{"model":"tiny","input":"x","stream":true,"include":["message.output_text.logprobs"],"top_logprobs":2}`)
	evs := parseResponseSSE(t, body)
	const first = `"logprobs":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[{"token":"a","logprob":-0.5,"bytes":[97]},{"token":"z","logprob":-2,"bytes":[122]}]}]`
	if !strings.Contains(string(evs[4].data), first) {
		t.Errorf("first delta %s", evs[4].data)
	}
	final := string(evs[len(evs)-1].data)
	if !strings.Contains(final, `"logprobs":[{"token":"a"`) || !strings.Contains(final, `{"token":"b","logprob":-0.5`) ||
		!strings.Contains(final, `"top_logprobs":2`) {
		t.Errorf("final response %s", final)
	}
	_, body = post(t, ts.Client(), ts.URL+"/v1/responses", `{"model":"tiny","input":"x","stream":true}`)
	evs = parseResponseSSE(t, body)
	if !strings.Contains(string(evs[4].data), `"logprobs":[]`) || strings.Contains(string(body), `"token"`) {
		t.Errorf("logprobs without include: %s", evs[4].data)
	}
}
