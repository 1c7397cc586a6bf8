package service

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"rill/engine"
)

// Reasoning on the Responses API, against the engine double: the reasoning
// item and its events, the logprobs that belong to it (none), the effort
// that turns thinking off, and reasoning items in the input and in stored
// conversations.

// reasoningEvents are a reasoning model's events for one choice, one per
// token as the native engine sends them: the opening marker (no text), the
// thinking block in pieces, the closing marker (no text), the token that
// ends the block's last piece and starts the answer, the answer, a call.
// Every event carries its token's logprob when lps is set.
func reasoningEvents(reason engine.FinishReason, lps bool) []engine.Event {
	lp := func(tok string) []engine.TokenLogprob {
		if !lps {
			return nil
		}
		return []engine.TokenLogprob{{Token: tok, Logprob: -0.25}}
	}
	st := &engine.Stats{PromptTokens: 6, CompletionTokens: 9, ReasoningTokens: ptr(5)}
	return []engine.Event{
		{Logprobs: lp("<think>")},
		{Reasoning: "Let me ", Logprobs: lp("Let me ")},
		{Reasoning: "think.", Logprobs: lp("think.")},
		{Logprobs: lp("</think>")},
		{Reasoning: "\n", Text: "\n\nIt", Logprobs: lp("\n\nIt")},
		{Text: " is.", Logprobs: lp(" is.")},
		{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}, Logprobs: lp("{")},
		{Final: true, FinishReason: reason, Stats: st},
	}
}

// objectIDs and timestamps are what differs between two runs of one request.
var (
	objectIDs  = regexp.MustCompile(`"(resp|msg|fc|rs)_[0-9a-f]{48}"`)
	timestamps = regexp.MustCompile(`"(created_at|completed_at)":[0-9]+`)
)

// sameRun returns a response object with its ids and times blanked.
func sameRun(b []byte) string {
	s := objectIDs.ReplaceAllString(string(b), `"${1}_…"`)
	return timestamps.ReplaceAllString(s, `"${1}":…`)
}

// TestResponsesReasoningItems: a reply that thinks, answers and calls is a
// reasoning item, a message and a function_call, in that order; streamed,
// each is announced, filled and closed before the next, in OpenAI's events,
// numbered 0, 1, 2, …; the reasoning deltas add up to the item; the
// thinking block's tokens carry no logprobs; and the streamed response's
// final object is the non-streamed one, byte for byte but ids and times.
func TestResponsesReasoningItems(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: reasoningEvents(engine.FinishToolCalls, req.Logprobs)}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"
	const body = `{"model":"tiny","input":"weather?","tools":[{"type":"function","name":"get_weather"}],"include":["message.output_text.logprobs"]`

	resp, whole := post(t, ts.Client(), url, body+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, whole)
	}
	r := decodeOutput(t, whole)
	const want = `reasoning:completed:Let me think.` + "\n" + ` | message:completed:` + "\n\nIt is." + ` | function_call:completed:get_weather({"city":"Oslo"})call_a`
	if got := r.summary(); got != want || r.Status != "completed" {
		t.Fatalf("status %s, output\n got  %q\n want %q", r.Status, got, want)
	}
	const usage = `{"input_tokens":6,"output_tokens":9,"total_tokens":15,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":5}}`
	if string(r.Usage) != usage {
		t.Errorf("usage %s", r.Usage)
	}
	if !strings.HasPrefix(r.Output[0].ID, "rs_") || len(r.Output[0].ID) != 3+48 {
		t.Errorf("reasoning item id %q", r.Output[0].ID)
	}
	if !strings.Contains(string(whole), `"type":"reasoning","status":"completed","summary":[],"content":[{"type":"reasoning_text","text":"Let me think.\n"}]}`) {
		t.Errorf("reasoning item shape: %s", whole)
	}
	// The answer's logprobs are its two tokens'; the block's four are not output_text's.
	var lps struct {
		Output []struct {
			Content []struct {
				Logprobs []struct {
					Token string `json:"token"`
				} `json:"logprobs"`
			} `json:"content"`
		} `json:"output"`
	}
	if err := json.Unmarshal(whole, &lps); err != nil {
		t.Fatal(err)
	}
	if got := lps.Output[1].Content[0].Logprobs; len(got) != 2 || got[0].Token != "\n\nIt" || got[1].Token != " is." {
		t.Errorf("message logprobs %+v", got)
	}

	_, sse := post(t, ts.Client(), url, body+`,"stream":true}`)
	evs := parseResponseSSE(t, sse)
	checkSequence(t, evs)
	const order = "response.created response.in_progress " +
		"response.output_item.added response.content_part.added response.reasoning_text.delta response.reasoning_text.delta " +
		"response.reasoning_text.delta response.reasoning_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.content_part.added response.output_text.delta response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done " +
		"response.output_item.done response.completed"
	if got := eventTypes(evs); got != order {
		t.Fatalf("events\n got  %s\n want %s", got, order)
	}
	rs := evs[2].m["item"].(map[string]any)
	id := rs["id"].(string)
	if rs["type"] != "reasoning" || rs["status"] != "in_progress" || len(rs["content"].([]any)) != 0 || len(rs["summary"].([]any)) != 0 {
		t.Errorf("reasoning item added: %s", evs[2].data)
	}
	if part := evs[3].m["part"]; !reflect.DeepEqual(part, map[string]any{"type": "reasoning_text", "text": ""}) || evs[3].m["item_id"] != id {
		t.Errorf("reasoning part added: %s", evs[3].data)
	}
	var deltas string
	for _, e := range evs[4:7] {
		if e.m["item_id"] != id || e.m["output_index"] != 0.0 || e.m["content_index"] != 0.0 {
			t.Errorf("reasoning delta %s", e.data)
		}
		deltas += e.m["delta"].(string)
	}
	if deltas != "Let me think.\n" || evs[7].m["text"] != deltas || evs[7].m["item_id"] != id {
		t.Errorf("deltas %q, done %s", deltas, evs[7].data)
	}
	if part := evs[8].m["part"]; !reflect.DeepEqual(part, map[string]any{"type": "reasoning_text", "text": deltas}) {
		t.Errorf("reasoning part done: %s", evs[8].data)
	}
	done := evs[9].m["item"].(map[string]any)
	if done["id"] != id || done["status"] != "completed" || !reflect.DeepEqual(done["content"], []any{map[string]any{"type": "reasoning_text", "text": deltas}}) {
		t.Errorf("reasoning item done: %s", evs[9].data)
	}
	if evs[10].m["output_index"] != 1.0 || evs[17].m["output_index"] != 2.0 {
		t.Errorf("message added at %v, call at %v", evs[10].m["output_index"], evs[17].m["output_index"])
	}
	final := mustField(t, evs[len(evs)-1].data, "response")
	if got, want := sameRun(final), sameRun(whole); got != strings.TrimSpace(want) {
		t.Errorf("streamed final response\n %s\nnot streamed\n %s", got, want)
	}
}

// TestResponsesReasoningCut: a response cut by max_output_tokens inside its
// thinking block is incomplete with its reasoning item alone, as OpenAI's
// are; one whose model stopped inside the block completes with an empty
// message after its reasoning, so that a completed response has an answer.
func TestResponsesReasoningCut(t *testing.T) {
	t.Parallel()
	st := &engine.Stats{PromptTokens: 4, CompletionTokens: 3, ReasoningTokens: ptr(3)}
	tests := []struct {
		reason          engine.FinishReason
		status, summary string
	}{
		{engine.FinishLength, "incomplete", "reasoning:incomplete:Hmm, so"},
		{engine.FinishStop, "completed", "reasoning:completed:Hmm, so | message:completed:"},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			t.Parallel()
			fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				return &fakeStream{ctx: ctx, events: []engine.Event{{Reasoning: "Hmm, "}, {Reasoning: "so"},
					{Final: true, FinishReason: tt.reason, Stats: st}}}, nil
			}}
			ts := newTestServer(t, fake, Options{})
			_, whole := post(t, ts.Client(), ts.URL+"/v1/responses", `{"model":"tiny","input":"x","max_output_tokens":3}`)
			_, sse := post(t, ts.Client(), ts.URL+"/v1/responses", `{"model":"tiny","input":"x","max_output_tokens":3,"stream":true}`)
			evs := parseResponseSSE(t, sse)
			checkSequence(t, evs)
			for name, raw := range map[string][]byte{"not streamed": whole, "streamed": mustField(t, evs[len(evs)-1].data, "response")} {
				if r := decodeOutput(t, raw); r.Status != tt.status || r.summary() != tt.summary {
					t.Errorf("%s: status %s output %q, want %s %q", name, r.Status, r.summary(), tt.status, tt.summary)
				}
			}
			if last := evs[len(evs)-1].name; last != "response."+tt.status {
				t.Errorf("last event %s", last)
			}
		})
	}
}

// TestResponsesReasoningEffort: reasoning.effort none and minimal turn a
// reasoning model's thinking off (enable_thinking false for its template),
// other efforts leave the template alone; effort and summary are echoed;
// an effort OpenAI does not name is refused; include
// reasoning.encrypted_content is accepted and adds nothing; an engine that
// cannot carry the template variable is refused under reasoning.effort.
func TestResponsesReasoningEffort(t *testing.T) {
	t.Parallel()
	off := map[string]any{"enable_thinking": false}
	tests := []struct {
		reasoning string
		kwargs    map[string]any
		echo      string
	}{
		{`null`, nil, `{"effort":null,"summary":null}`},
		{`{}`, nil, `{"effort":null,"summary":null}`},
		{`{"effort":null}`, nil, `{"effort":null,"summary":null}`},
		{`{"effort":"none"}`, off, `{"effort":"none","summary":null}`},
		{`{"effort":"minimal","summary":"auto"}`, off, `{"effort":"minimal","summary":"auto"}`},
		{`{"effort":"low"}`, nil, `{"effort":"low","summary":null}`},
		{`{"effort":"medium","summary":"detailed"}`, nil, `{"effort":"medium","summary":"detailed"}`},
		{`{"effort":"high"}`, nil, `{"effort":"high","summary":null}`},
		{`{"effort":"xhigh"}`, nil, `{"effort":"xhigh","summary":null}`},
		{`{"generate_summary":"concise"}`, nil, `{"effort":null,"summary":"concise"}`},
	}
	for _, tt := range tests {
		p, e := responsePlanOf(t, `{"model":"m","input":"x","reasoning":`+tt.reasoning+`}`, fakeConversations{})
		if e != nil {
			t.Fatalf("%s: %v", tt.reasoning, e)
		}
		if got := p.reqs[0].ChatTemplateKwargs; !reflect.DeepEqual(got, tt.kwargs) {
			t.Errorf("%s: chat template kwargs %v, want %v", tt.reasoning, got, tt.kwargs)
		}
		if effort, _, _ := strings.Cut(strings.TrimPrefix(tt.echo, `{"effort":"`), `"`); strings.HasPrefix(tt.echo, `{"effort":"`) && p.reqs[0].ReasoningEffort != effort {
			t.Errorf("%s: reasoning effort %q, want %q", tt.reasoning, p.reqs[0].ReasoningEffort, effort)
		}
		if got := string(p.appendReasoningEcho(nil)); got != tt.echo {
			t.Errorf("%s: echo %s, want %s", tt.reasoning, got, tt.echo)
		}
	}

	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if req.Messages[0].Content == "upstream" && req.ChatTemplateKwargs != nil {
			return nil, engine.Errorf("unsupported_parameter", "chat_template_kwargs", "chat_template_kwargs is not supported by this model's upstream (openai).")
		}
		return &fakeStream{ctx: ctx, events: reasoningEvents(engine.FinishStop, false)}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"
	resp, body := post(t, ts.Client(), url, `{"model":"tiny","input":"x","reasoning":{"effort":"minimal","summary":"auto"},"include":["reasoning.encrypted_content"]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	decodeOutput(t, body)
	if !strings.Contains(string(body), `"reasoning":{"effort":"minimal","summary":"auto"}`) || !strings.Contains(string(body), `"encrypted_content":"`+sealPrefix) {
		t.Errorf("response %s", body)
	}
	if got := fake.requests()[0].ChatTemplateKwargs; !reflect.DeepEqual(got, off) {
		t.Errorf("engine request kwargs %v", got)
	}
	for _, r := range []string{`null`, `{"effort":null,"summary":null,"generate_summary":null}`, `{"effort":"xhigh","summary":"concise"}`} {
		if resp, body := post(t, ts.Client(), url, `{"model":"tiny","input":"x","reasoning":`+r+`}`); resp.StatusCode != 200 {
			t.Errorf("reasoning %s: %d %s", r, resp.StatusCode, body)
		}
	}
	for _, tt := range []struct{ body, param, code string }{
		{`{"model":"tiny","input":"x","reasoning":{"effort":"extreme"}}`, "reasoning.effort", "invalid_value"},
		{`{"model":"tiny","input":"x","reasoning":{"summary":"long"}}`, "reasoning.summary", "invalid_value"},
		{`{"model":"tiny","input":"upstream","reasoning":{"effort":"none"}}`, "reasoning.effort", "unsupported_parameter"},
	} {
		resp, body := post(t, ts.Client(), url, tt.body)
		var e struct {
			Error struct {
				Param, Code, Message string
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode != http.StatusBadRequest || e.Error.Param != tt.param || e.Error.Code != tt.code || strings.Contains(e.Error.Message, "chat_template_kwargs") {
			t.Errorf("%s: %d %s, want 400 param %s code %s", tt.body, resp.StatusCode, body, tt.param, tt.code)
		}
	}
}

// TestResponsesReasoningInput: reasoning items in the input are the
// reasoning of the assistant item that follows them (a message, or calls
// that start or join one), as chat's reasoning_content; item references to
// stored reasoning items read the same; reasoning that no assistant item
// follows joins the assistant message before it or is one of its own, as
// the stored reply it came from has it; content that is not reasoning_text
// is refused.
func TestResponsesReasoningInput(t *testing.T) {
	t.Parallel()
	stored := &storedResponse{id: "resp_1",
		items: []storedItem{{"rs_1", engine.Message{Role: engine.RoleAssistant, ReasoningContent: "Think."}},
			{"msg_1", engine.Message{Role: engine.RoleAssistant, Content: "Answer."}}},
		turn: []engine.Message{{Role: engine.RoleUser, Content: "q"}, {Role: engine.RoleAssistant, ReasoningContent: "Think.", Content: "Answer."}}}
	conv := fakeConversations{responses: map[string]*storedResponse{"resp_1": stored}}
	user := func(s string) engine.Message { return engine.Message{Role: engine.RoleUser, Content: s} }
	call := engine.ToolCall{ID: "call_1", Name: "f", Arguments: `{}`}
	const (
		rs     = `{"type":"reasoning","id":"rs_x","summary":[],"content":[{"type":"reasoning_text","text":"R."}]}`
		fc     = `{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"}`
		answer = `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A."}]}`
	)
	tests := []struct {
		name, input string
		want        []engine.Message
	}{
		{"before a message", `[{"role":"user","content":"q"},` + rs + `,` + answer + `,{"role":"user","content":"q2"}]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, ReasoningContent: "R.", Content: "A."}, user("q2")}},
		{"before a call, then its output", `[{"role":"user","content":"q"},` + rs + `,` + fc + `,{"type":"function_call_output","call_id":"call_1","output":"1"}]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, ReasoningContent: "R.", NullContent: true, ToolCalls: []engine.ToolCall{call}},
				{Role: engine.RoleTool, Content: "1", ToolCallID: "call_1"}}},
		{"between a message and its call, which join", `[{"role":"user","content":"q"},` + answer + `,` + rs + `,` + fc + `]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, Content: "A.", ReasoningContent: "R.", ToolCalls: []engine.ToolCall{call}}}},
		{"two in a row add up", `[{"role":"user","content":"q"},` + rs + `,{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":" More."}]},` + answer + `]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, ReasoningContent: "R. More.", Content: "A."}}},
		{"summary and encrypted content only: no text", `[{"role":"user","content":"q"},{"type":"reasoning","id":"rs_o","summary":[{"type":"summary_text","text":"S"}],"encrypted_content":"gAAA"},` + answer + `]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, Content: "A."}}},
		{"item references to a stored reasoning item and its answer", `[{"role":"user","content":"q"},{"type":"item_reference","id":"rs_1"},{"type":"item_reference","id":"msg_1"}]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, ReasoningContent: "Think.", Content: "Answer."}}},
		{"last, without an answer", `[{"role":"user","content":"q"},` + rs + `]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, ReasoningContent: "R."}}},
		{"before a user message", `[{"role":"user","content":"q"},` + rs + `,{"role":"user","content":"q2"}]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, ReasoningContent: "R."}, user("q2")}},
		{"after a call, before its output: the call's turn", `[{"role":"user","content":"q"},` + fc + `,` + rs + `,{"type":"function_call_output","call_id":"call_1","output":"1"}]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, NullContent: true, ReasoningContent: "R.", ToolCalls: []engine.ToolCall{call}},
				{Role: engine.RoleTool, Content: "1", ToolCallID: "call_1"}}},
		{"after the answer, last: the answer's turn", `[{"role":"user","content":"q"},` + answer + `,` + rs + `]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, Content: "A.", ReasoningContent: "R."}}},
		{"a referred reasoning item alone", `[{"role":"user","content":"q"},{"type":"item_reference","id":"rs_1"}]`,
			[]engine.Message{user("q"), {Role: engine.RoleAssistant, ReasoningContent: "Think."}}},
		{"summary only, last: nothing", `[{"role":"user","content":"q"},{"type":"reasoning","summary":[{"type":"summary_text","text":"S"}]}]`,
			[]engine.Message{user("q")}},
	}
	for _, tt := range tests {
		p, e := responsePlanOf(t, `{"model":"m","input":`+tt.input+`}`, conv)
		if e != nil {
			t.Errorf("%s: %v", tt.name, e)
			continue
		}
		if got := p.reqs[0].Messages; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s\n got  %+v\n want %+v", tt.name, got, tt.want)
		}
	}

	rejects := []struct {
		input, param, code, message string
	}{
		{`[{"type":"reasoning","content":[{"type":"output_text","text":"R"}]},` + answer + `]`, "input[0].content[0].type", "invalid_value", "reasoning_text"},
		{`[{"type":"reasoning","content":[{"type":"reasoning_text"}]},` + answer + `]`, "input[0].content[0].text", "missing_required_parameter", ""},
		{`[{"type":"reasoning","content":"R"},` + answer + `]`, "input[0].content", "invalid_type", ""},
	}
	for _, tt := range rejects {
		p, e := responsePlanOf(t, `{"model":"m","input":`+tt.input+`}`, conv)
		if e == nil {
			t.Errorf("%s: accepted: %+v", tt.input, p.reqs[0].Messages)
			continue
		}
		if e.Status != http.StatusBadRequest || e.Param != tt.param || e.Code != tt.code || !strings.Contains(e.Message, tt.message) {
			t.Errorf("%s: %d param %q code %q (%s), want param %q code %q", tt.input, e.Status, e.Param, e.Code, e.Message, tt.param, tt.code)
		}
	}
}

// TestResponsesReasoningConversation: a stored response that reasoned
// continues by previous_response_id with its reasoning on its reply, as
// chat's assistant message carries reasoning_content; its reasoning item
// can be referred to by id, or sent back as the client received it, with
// the same messages for the engine.
func TestResponsesReasoningConversation(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		st := &engine.Stats{PromptTokens: 4, CompletionTokens: 4, ReasoningTokens: ptr(2)}
		return &fakeStream{ctx: ctx, events: []engine.Event{{Reasoning: "Think"}, {Reasoning: "ing."}, {Text: "Answer."},
			{Final: true, FinishReason: engine.FinishStop, Stats: st}}}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	url := ts.URL + "/v1/responses"
	_, sse := post(t, ts.Client(), url, `{"model":"tiny","input":"q","stream":true}`)
	evs := parseResponseSSE(t, sse)
	final := mustField(t, evs[len(evs)-1].data, "response")
	first := decodeOutput(t, final)
	id := decodeMap(t, final)["id"].(string)
	if first.summary() != "reasoning:completed:Thinking. | message:completed:Answer." {
		t.Fatalf("first output %s", first.summary())
	}
	if r, got := get(t, ts, "/v1/responses/"+id); r.StatusCode != 200 || strings.TrimSpace(string(got)) != string(final) {
		t.Errorf("GET: %d %s", r.StatusCode, got)
	}
	want := []engine.Message{{Role: engine.RoleUser, Content: "q"},
		{Role: engine.RoleAssistant, ReasoningContent: "Thinking.", Content: "Answer."}, {Role: engine.RoleUser, Content: "q2"}}

	var items []json.RawMessage
	if err := json.Unmarshal(mustField(t, final, "output"), &items); err != nil {
		t.Fatal(err)
	}
	echoed := `{"role":"user","content":"q"},` + string(items[0]) + `,` + string(items[1]) + `,{"role":"user","content":"q2"}`
	for _, tt := range []struct{ name, body string }{
		{"previous_response_id", `{"model":"tiny","previous_response_id":"` + id + `","input":"q2"}`},
		{"item references", `{"model":"tiny","input":[{"role":"user","content":"q"},{"type":"item_reference","id":"` + first.Output[0].ID +
			`"},{"type":"item_reference","id":"` + first.Output[1].ID + `"},{"role":"user","content":"q2"}]}`},
		{"the items sent back", `{"model":"tiny","store":false,"input":[` + echoed + `]}`},
	} {
		resp, b := post(t, ts.Client(), url, tt.body)
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", tt.name, resp.StatusCode, b)
			continue
		}
		reqs := fake.requests()
		if got := reqs[len(reqs)-1].Messages; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: engine messages\n got  %+v\n want %+v", tt.name, got, want)
		}
	}
}
