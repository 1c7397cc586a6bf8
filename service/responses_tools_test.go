package service

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"rill/engine"
)

// The Responses API with tools and text.format, against the engine double:
// what reaches the engine, the function_call output items, their events in
// OpenAI's order, and conversations that carry calls and their outputs.

// respToolEvents are an engine's events for one choice: a word, then two
// calls, the first's arguments in pieces, the second starting in the event
// that ends the first.
func respToolEvents(reason engine.FinishReason) []engine.Event {
	st := &engine.Stats{PromptTokens: 11, CompletionTokens: 9}
	return []engine.Event{
		{Text: "Check"},
		{Text: "ing."},
		{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather", Arguments: `{"city": `}}},
		{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `"Oslo"}`}, {Index: 1, ID: "call_b", Name: "add", Arguments: `{"a":1,`}}},
		{ToolCalls: []engine.ToolCallDelta{{Index: 1, Arguments: `"b":2}`}}},
		{Final: true, FinishReason: reason, Stats: st},
	}
}

const respToolsBody = `{"model":"tiny","input":"weather and sums?",
  "tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},
           {"type":"function","name":"add","strict":false}],
  "tool_choice":"required","parallel_tool_calls":true`

// respOutput is what the tests read of a response object's output.
type respOutput struct {
	Status string `json:"status"`
	Output []struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls bool            `json:"parallel_tool_calls"`
	Text              json.RawMessage `json:"text"`
	Usage             json.RawMessage `json:"usage"`
}

func decodeOutput(t testing.TB, raw []byte) respOutput {
	t.Helper()
	mustValidate(t, "Response", raw)
	var r respOutput
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// summary is "type:status:text-or-name(arguments)" per item.
func (r respOutput) summary() string {
	var parts []string
	for _, it := range r.Output {
		s := it.Type + ":" + it.Status + ":"
		if it.Type == "function_call" {
			s += it.Name + "(" + it.Arguments + ")" + it.CallID
		} else {
			for _, c := range it.Content {
				s += c.Text
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " | ")
}

// TestResponsesFunctionCalls: a reply of text and two calls is a message
// item and two function_call items, in that order, whether streamed or
// not; the streamed events come in OpenAI's order and their deltas add up
// to the items; the request's tools reached the engine and are echoed.
func TestResponsesFunctionCalls(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: respToolEvents(engine.FinishToolCalls)}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"

	resp, body := post(t, ts.Client(), url, respToolsBody+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	whole := decodeOutput(t, body)
	const want = `message:completed:Checking. | function_call:completed:get_weather({"city": "Oslo"})call_a | function_call:completed:add({"a":1,"b":2})call_b`
	if got := whole.summary(); got != want || whole.Status != "completed" {
		t.Fatalf("status %s, output\n got  %s\n want %s", whole.Status, got, want)
	}
	if !strings.HasPrefix(whole.Output[1].ID, "fc_") || whole.Output[1].ID == whole.Output[2].ID || !strings.HasPrefix(whole.Output[0].ID, "msg_") {
		t.Errorf("item ids %s", body)
	}
	const tools = `[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true},` +
		`{"type":"function","name":"add","description":null,"parameters":null,"strict":false}]`
	if string(whole.Tools) != tools || string(whole.ToolChoice) != `"required"` || !whole.ParallelToolCalls || string(whole.Text) != `{"format":{"type":"text"}}` {
		t.Errorf("echo: tools %s tool_choice %s parallel %v text %s", whole.Tools, whole.ToolChoice, whole.ParallelToolCalls, whole.Text)
	}
	req := fake.requests()[0]
	if len(req.Tools) != 2 || req.Tools[0].Name != "get_weather" || !req.Tools[0].Strict || req.Tools[1].Strict ||
		req.ToolChoice.Mode != engine.ToolChoiceRequired || req.ParallelToolCalls == nil || !*req.ParallelToolCalls {
		t.Errorf("engine request: tools %+v choice %+v parallel %v", req.Tools, req.ToolChoice, req.ParallelToolCalls)
	}

	_, body = post(t, ts.Client(), url, respToolsBody+`,"stream":true}`)
	evs := parseResponseSSE(t, body)
	checkSequence(t, evs)
	const order = "response.created response.in_progress " +
		"response.output_item.added response.content_part.added response.output_text.delta response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.completed"
	if got := eventTypes(evs); got != order {
		t.Fatalf("events\n got  %s\n want %s", got, order)
	}
	// Each call: added with empty arguments, deltas that add up to the
	// done event's arguments and to the done item's, every event naming
	// the item and its output_index.
	args := map[string]string{}
	for _, e := range evs {
		switch e.name {
		case "response.output_item.added":
			item := e.m["item"].(map[string]any)
			if item["type"] == "function_call" && (item["arguments"] != "" || item["status"] != "in_progress" || item["name"] == "" ||
				!strings.HasPrefix(item["call_id"].(string), "call_")) {
				t.Errorf("added %s", e.data)
			}
		case "response.function_call_arguments.delta":
			args[e.m["item_id"].(string)] += e.m["delta"].(string)
		case "response.function_call_arguments.done":
			id := e.m["item_id"].(string)
			if args[id] != e.m["arguments"] || e.m["name"] == "" {
				t.Errorf("done %s, deltas %q", e.data, args[id])
			}
		case "response.output_item.done":
			item := e.m["item"].(map[string]any)
			if item["type"] == "function_call" && (item["arguments"] != args[item["id"].(string)] || item["status"] != "completed") {
				t.Errorf("item done %s", e.data)
			}
		}
	}
	final := decodeOutput(t, mustField(t, evs[len(evs)-1].data, "response"))
	if got := final.summary(); got != want {
		t.Errorf("streamed final output\n got  %s\n want %s", got, want)
	}
	if string(final.Usage) != string(whole.Usage) || len(final.Usage) == 0 {
		t.Errorf("usage streamed %s, not streamed %s", final.Usage, whole.Usage)
	}
	var added []any
	for _, e := range evs {
		if e.name == "response.output_item.added" {
			added = append(added, e.m["output_index"])
		}
	}
	if !reflect.DeepEqual(added, []any{0.0, 1.0, 2.0}) {
		t.Errorf("items added at output_index %v", added)
	}
}

// mustField returns member name of the JSON object data.
func mustField(t testing.TB, data []byte, name string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m[name]
}

// TestResponsesOutputOrder: text after a call is a message of its own
// after it; a reply cut inside a call leaves that call incomplete; calls
// that interleave fail the response rather than misplace arguments; the
// logprobs of a call's tokens open no message.
func TestResponsesOutputOrder(t *testing.T) {
	t.Parallel()
	st := &engine.Stats{PromptTokens: 4, CompletionTokens: 6}
	lp := []engine.TokenLogprob{{Token: "{", Logprob: -0.1}}
	tests := []struct {
		name    string
		events  []engine.Event
		status  string
		summary string // "" for a failed response
	}{
		{"text after a call", []engine.Event{
			{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "f", Arguments: `{}`}}},
			// The call's end and the text after it in one event.
			{Text: "Done.", ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: ` `}}},
			{Final: true, FinishReason: engine.FinishStop, Stats: st},
		}, "completed", `function_call:completed:f({} )call_a | message:completed:Done.`},
		{"cut inside a call", []engine.Event{
			{Text: "x"},
			{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "f", Arguments: `{"a":`}}},
			{Final: true, FinishReason: engine.FinishLength, Stats: st},
		}, "incomplete", `message:completed:x | function_call:incomplete:f({"a":)call_a`},
		{"only a call, its tokens' logprobs", []engine.Event{
			{Logprobs: lp},
			{Logprobs: lp, ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "f", Arguments: `{}`}}},
			{Logprobs: lp},
			{Final: true, FinishReason: engine.FinishToolCalls, Stats: st},
		}, "completed", `function_call:completed:f({})call_a`},
		{"a call without an id gets one", []engine.Event{
			{ToolCalls: []engine.ToolCallDelta{{Index: 0, Name: "f", Arguments: `{}`}}},
			{Final: true, FinishReason: engine.FinishToolCalls, Stats: st},
		}, "completed", `function_call:completed:f({})call_`},
		{"interleaved calls", []engine.Event{
			{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "f", Arguments: `{`}}},
			{ToolCalls: []engine.ToolCallDelta{{Index: 1, ID: "call_b", Name: "g", Arguments: `{}`}}},
			{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `}`}}},
			{Final: true, FinishReason: engine.FinishToolCalls, Stats: st},
		}, "failed", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				return &fakeStream{ctx: ctx, events: append([]engine.Event(nil), tt.events...)}, nil
			}}
			ts := newTestServer(t, fake, Options{})
			const body = `{"model":"tiny","input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"g"}],` +
				`"include":["message.output_text.logprobs"]`
			resp, whole := post(t, ts.Client(), ts.URL+"/v1/responses", body+`}`)
			_, sse := post(t, ts.Client(), ts.URL+"/v1/responses", body+`,"stream":true}`)
			evs := parseResponseSSE(t, sse)
			checkSequence(t, evs)
			last := evs[len(evs)-1]
			if tt.status == "failed" {
				if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(whole), "tool call 0") {
					t.Errorf("not streamed: %d %s", resp.StatusCode, whole)
				}
				if last.name != "response.failed" || !strings.Contains(string(last.data), "tool call 0") {
					t.Errorf("streamed ends with %s", last.data)
				}
				return
			}
			for name, raw := range map[string][]byte{"not streamed": whole, "streamed": mustField(t, last.data, "response")} {
				r := decodeOutput(t, raw)
				if got := r.summary(); r.Status != tt.status || !strings.HasPrefix(got, tt.summary) {
					t.Errorf("%s: status %s output\n got  %s\n want %s", name, r.Status, got, tt.summary)
				}
			}
			if last.name != "response."+tt.status {
				t.Errorf("last event %s", last.name)
			}
		})
	}
}

// TestResponsesToolConversation: a stored response that called tools
// continues by previous_response_id with the calls' outputs, and by item
// references to its function_call items; the engine gets the conversation
// chat would have: the assistant's calls, then tool messages.
func TestResponsesToolConversation(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if req.Messages[len(req.Messages)-1].Role == engine.RoleTool {
			return &fakeStream{ctx: ctx, events: script(1, []string{"Sunny."}, engine.FinishStop, plainStats(30, 2))}, nil
		}
		return &fakeStream{ctx: ctx, events: respToolEvents(engine.FinishToolCalls)}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"
	_, body := post(t, ts.Client(), url, respToolsBody+`,"stream":true}`)
	evs := parseResponseSSE(t, body)
	first := decodeOutput(t, mustField(t, evs[len(evs)-1].data, "response"))
	id := decodeMap(t, mustField(t, evs[len(evs)-1].data, "response"))["id"].(string)
	if len(first.Output) != 3 {
		t.Fatalf("output %s", first.summary())
	}
	calls := []engine.ToolCall{{ID: "call_a", Name: "get_weather", Arguments: `{"city": "Oslo"}`}, {ID: "call_b", Name: "add", Arguments: `{"a":1,"b":2}`}}
	wantTail := []engine.Message{
		{Role: engine.RoleUser, Content: "weather and sums?"},
		{Role: engine.RoleAssistant, Content: "Checking.", ToolCalls: calls},
		{Role: engine.RoleTool, Content: "-3", ToolCallID: "call_a"},
		{Role: engine.RoleTool, Content: "3", ToolCallID: "call_b"},
	}
	outputs := `{"type":"function_call_output","call_id":"call_a","output":"-3"},{"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"3"}]}`

	// By previous_response_id: only the outputs are new.
	resp, body := post(t, ts.Client(), url, `{"model":"tiny","previous_response_id":"`+id+`","input":[`+outputs+`]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	reqs := fake.requests()
	if got := reqs[len(reqs)-1].Messages; !reflect.DeepEqual(got, wantTail) {
		t.Errorf("by previous_response_id\n got  %+v\n want %+v", got, wantTail)
	}
	if r := decodeOutput(t, body); r.summary() != "message:completed:Sunny." {
		t.Errorf("second turn %s", r.summary())
	}

	// By explicit items: the user message, item references to the stored
	// output items (message and calls), the outputs.
	refs := `{"role":"user","content":"weather and sums?"}`
	for _, it := range first.Output {
		refs += `,{"type":"item_reference","id":"` + it.ID + `"}`
	}
	resp, body = post(t, ts.Client(), url, `{"model":"tiny","input":[`+refs+`,`+outputs+`]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	reqs = fake.requests()
	if got := reqs[len(reqs)-1].Messages; !reflect.DeepEqual(got, wantTail) {
		t.Errorf("by item references\n got  %+v\n want %+v", got, wantTail)
	}

	// And by the items themselves, as a client that keeps its own history
	// sends them back.
	items := `{"role":"user","content":"weather and sums?"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]}`
	for _, it := range first.Output[1:] {
		b, _ := json.Marshal(map[string]any{"type": "function_call", "id": it.ID, "call_id": it.CallID, "name": it.Name, "arguments": it.Arguments, "status": it.Status})
		items += "," + string(b)
	}
	resp, body = post(t, ts.Client(), url, `{"model":"tiny","store":false,"input":[`+items+`,`+outputs+`]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	reqs = fake.requests()
	if got := reqs[len(reqs)-1].Messages; !reflect.DeepEqual(got, wantTail) {
		t.Errorf("by items\n got  %+v\n want %+v", got, wantTail)
	}

	// An output for a call nobody made is the client's error.
	resp, body = post(t, ts.Client(), url, `{"model":"tiny","previous_response_id":"`+id+`","input":[{"type":"function_call_output","call_id":"call_zz","output":"1"}]}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"param":"input[0].call_id"`) {
		t.Errorf("unknown call_id: %d %s", resp.StatusCode, body)
	}
}

// TestResponsesTextFormat: text.format reaches the engine as chat's
// response_format would, is echoed, and the engine's refusals of a schema
// or a tool name the Responses API's fields.
func TestResponsesTextFormat(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if rf := req.ResponseFormat; rf != nil && strings.Contains(string(rf.Schema), `"not"`) {
			return nil, engine.Errorf("invalid_value", "response_format", "Invalid schema for response_format '%s': keyword not is not supported", rf.Name)
		}
		if len(req.Tools) > 0 {
			return nil, engine.Errorf("invalid_value", "tools[0].function.parameters", "Invalid schema for function '%s': bad", req.Tools[0].Name)
		}
		return &fakeStream{ctx: ctx, events: script(1, []string{`{"a":`, `1}`}, engine.FinishStop, plainStats(5, 2))}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"
	resp, body := post(t, ts.Client(), url, `{"model":"tiny","input":"x","text":{"format":{"type":"json_schema","name":"ev","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	r := decodeOutput(t, body)
	const echo = `{"format":{"type":"json_schema","description":null,"name":"ev","schema":{"type":"object","properties":{"a":{"type":"integer"}}},"strict":true}}`
	if r.summary() != `message:completed:{"a":1}` || string(r.Text) != echo {
		t.Errorf("output %s, text %s", r.summary(), r.Text)
	}
	if rf := fake.requests()[0].ResponseFormat; rf == nil || rf.Type != engine.FormatJSONSchema || rf.Name != "ev" || !rf.Strict {
		t.Errorf("engine format %+v", rf)
	}

	for _, tt := range []struct{ body, param string }{
		{`{"model":"tiny","input":"x","text":{"format":{"type":"json_schema","name":"ev","schema":{"not":{}}}}}`, "text.format"},
		{`{"model":"tiny","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`, "tools[0].parameters"},
		{`{"model":"tiny","input":"x","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`, "tools[0].parameters"},
	} {
		resp, body := post(t, ts.Client(), url, tt.body)
		var e struct {
			Error struct {
				Param   string `json:"param"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode != 400 || e.Error.Param != tt.param || strings.Contains(e.Error.Message, "response_format") {
			t.Errorf("%s: %d %s", tt.body, resp.StatusCode, body)
		}
	}
}

// TestResponsesWSToolConversation: on a WebSocket the connection's last
// response, stored or not, is a conversation with its calls: its function_call
// items can be referred to and their outputs answered.
func TestResponsesWSToolConversation(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: respToolEvents(engine.FinishToolCalls)}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	c := dialWS(t, ts, "/v1/responses", nil)
	sendWS(t, c, `{"type":"response.create","store":false,`+respToolsBody[1:]+`}`)
	msgs := readUntilEnd(t, c)
	final := decodeOutput(t, mustField(t, msgs[len(msgs)-1].raw, "response"))
	if len(final.Output) != 3 {
		t.Fatalf("output %s", final.summary())
	}
	sendWS(t, c, `{"type":"response.create","model":"tiny","input":[{"role":"user","content":"again"},`+
		`{"type":"item_reference","id":"`+final.Output[2].ID+`"},{"type":"function_call_output","call_id":"call_b","output":"3"}]}`)
	msgs = readUntilEnd(t, c)
	if last := msgs[len(msgs)-1]; last.Type != "response.completed" {
		t.Fatalf("a reference to the connection's last call: %s", last.raw)
	}
	reqs := fake.requests()
	want := []engine.Message{{Role: engine.RoleUser, Content: "again"},
		{Role: engine.RoleAssistant, NullContent: true, ToolCalls: []engine.ToolCall{{ID: "call_b", Name: "add", Arguments: `{"a":1,"b":2}`}}},
		{Role: engine.RoleTool, Content: "3", ToolCallID: "call_b"}}
	if got := reqs[len(reqs)-1].Messages; !reflect.DeepEqual(got, want) {
		t.Errorf("conversation\n got  %+v\n want %+v", got, want)
	}
}

// TestResponsesError: the engine's refusals name chat's fields; the
// Responses API answers with its own.
func TestResponsesError(t *testing.T) {
	t.Parallel()
	tests := []struct{ param, msg, wantParam, wantMsg string }{
		{"messages", "the prompt is empty", "input", "the prompt is empty"},
		{"max_tokens", "you requested 9000 tokens", "max_output_tokens", "you requested 9000 tokens"},
		{"response_format", "Invalid schema for response_format 'x': no", "text.format", "Invalid schema for text.format 'x': no"},
		{"response_format.type", "Invalid value for 'response_format.type'", "text.format.type", "Invalid value for 'text.format.type'"},
		{"tools[2].function.parameters", "Invalid schema for function 'f'", "tools[2].parameters", "Invalid schema for function 'f'"},
		{"tools[0].function.name", "Invalid 'tools[0].function.name'", "tools[0].name", "Invalid 'tools[0].name'"},
		{"tool_choice", "no function named 'g'", "tool_choice", "no function named 'g'"},
		{"logit_bias", "x", "logit_bias", "x"},
	}
	for _, tt := range tests {
		got := responsesError(&apiError{Status: 400, Param: tt.param, Message: tt.msg})
		if got.Param != tt.wantParam || got.Message != tt.wantMsg || got.Status != 400 {
			t.Errorf("%s %q: got %s %q", tt.param, tt.msg, got.Param, got.Message)
		}
	}
	if e := responsesError(&apiError{Status: 503, Message: "busy"}); e.Param != "" || e.Message != "busy" {
		t.Errorf("an error without param: %+v", e)
	}
}
