package service

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"rill/engine"
)

// Codex's Responses requests: custom tools, namespace tools and hosted
// tools, reasoning sent back encrypted by a client that stores nothing,
// prompt_cache_key and client_metadata; first as jobs, then through the
// official openai-go client.

func TestResponsesPlanTools(t *testing.T) {
	t.Parallel()
	type declared struct {
		name, description string
		params            string
	}
	tests := []struct {
		name      string
		body      string
		tools     []declared
		client    map[string]clientTool
		choice    engine.ToolChoice
		warnings  int
		echoTools string // "": not checked
	}{
		{"a custom tool is a function of one string", `{"tools":[{"type":"custom","name":"note","description":"Takes a note."}]}`,
			[]declared{{"note", "Takes a note.", string(customToolParameters)}},
			map[string]clientTool{"note": {name: "note", custom: true}}, engine.ToolChoice{}, 0,
			`[{"type":"custom","name":"note","description":"Takes a note."}]`},
		{"a custom tool's grammar is shown in its description", `{"tools":[{"type":"custom","name":"apply_patch","description":"Patch files.","format":{"type":"grammar","syntax":"lark","definition":"start: \"*** Begin Patch\""}}]}`,
			[]declared{{"apply_patch", "Patch files.\n\nThe input follows this lark grammar:\nstart: \"*** Begin Patch\"", string(customToolParameters)}},
			map[string]clientTool{"apply_patch": {name: "apply_patch", custom: true}}, engine.ToolChoice{}, 0, ""},
		{"a namespace's tools are functions named namespace__name", `{"tools":[{"type":"namespace","name":"crm","description":"CRM.","tools":[
			{"type":"function","name":"find","description":"Finds.","parameters":{"type":"object"}},{"type":"custom","name":"note"}]}]}`,
			[]declared{{"crm__find", "Finds.", `{"type":"object"}`}, {"crm__note", "", string(customToolParameters)}},
			map[string]clientTool{"crm__find": {name: "find", namespace: "crm"}, "crm__note": {name: "note", namespace: "crm", custom: true}},
			engine.ToolChoice{}, 0, ""},
		{"hosted tools are left out with a warning each", `{"tools":[{"type":"web_search"},{"type":"function","name":"shell"},{"type":"file_search","vector_store_ids":["v"]},{"type":"local_shell"}]}`,
			[]declared{{"shell", "", ""}}, map[string]clientTool{}, engine.ToolChoice{}, 3,
			`[{"type":"web_search"},{"type":"function","name":"shell","description":null,"parameters":null,"strict":true},{"type":"file_search","vector_store_ids":["v"]},{"type":"local_shell"}]`},
		{"a hosted tool_choice is auto", `{"tools":[{"type":"web_search_preview"},{"type":"function","name":"f"}],"tool_choice":{"type":"web_search_preview"}}`,
			[]declared{{"f", "", ""}}, map[string]clientTool{}, engine.ToolChoice{}, 2, ""},
		{"required with only hosted tools is auto", `{"tools":[{"type":"web_search"}],"tool_choice":"required"}`,
			nil, map[string]clientTool{}, engine.ToolChoice{}, 2, ""},
		{"a custom tool_choice forces the custom tool", `{"tools":[{"type":"function","name":"f"},{"type":"custom","name":"c"}],"tool_choice":{"type":"custom","name":"c"}}`,
			[]declared{{"f", "", ""}, {"c", "", string(customToolParameters)}}, map[string]clientTool{"c": {name: "c", custom: true}},
			engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "c"}, 0, ""},
		{"a function tool_choice finds a namespace's function by its own name", `{"tools":[{"type":"namespace","name":"crm","tools":[{"type":"function","name":"find"}]}],"tool_choice":{"type":"function","name":"find"}}`,
			[]declared{{"crm__find", "", ""}}, map[string]clientTool{"crm__find": {name: "find", namespace: "crm"}},
			engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "crm__find"}, 0, ""},
		{"or by its joined name", `{"tools":[{"type":"namespace","name":"crm","tools":[{"type":"function","name":"find"}]}],"tool_choice":{"type":"function","name":"crm__find"}}`,
			[]declared{{"crm__find", "", ""}}, map[string]clientTool{"crm__find": {name: "find", namespace: "crm"}},
			engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "crm__find"}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, e := responsePlanOf(t, `{"model":"m","input":"x",`+strings.TrimPrefix(tc.body, "{"), fakeConversations{})
			if e != nil {
				t.Fatalf("refused: %+v", e)
			}
			req := p.reqs[0]
			var got []declared
			for _, tool := range req.Tools {
				got = append(got, declared{tool.Name, tool.Description, string(tool.Parameters)})
			}
			if !reflect.DeepEqual(got, tc.tools) {
				t.Errorf("engine tools\n got  %q\n want %q", got, tc.tools)
			}
			if !maps.Equal(p.clientTools, tc.client) { // nil and empty: none
				t.Errorf("client tools %+v, want %+v", p.clientTools, tc.client)
			}
			if req.ToolChoice != tc.choice {
				t.Errorf("tool choice %+v, want %+v", req.ToolChoice, tc.choice)
			}
			if len(p.warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", p.warnings, tc.warnings)
			}
			if tc.echoTools != "" && string(p.tools) != tc.echoTools {
				t.Errorf("echo\n got  %s\n want %s", p.tools, tc.echoTools)
			}
		})
	}
}

// TestResponsesCodexFields: include reasoning.encrypted_content, store
// false, prompt_cache_key, client_metadata and reasoning.summary are
// accepted; the cache key reaches the engine.
func TestResponsesCodexFields(t *testing.T) {
	t.Parallel()
	p, e := responsePlanOf(t, `{"model":"m","input":"x","store":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":"019a-session",
		"client_metadata":{"originator":"codex_cli_rs"},"reasoning":{"effort":"medium","summary":"auto"}}`, fakeConversations{})
	if e != nil {
		t.Fatalf("refused: %+v", e)
	}
	if !p.encryptReasoning || p.store || p.reqs[0].CacheKey != "019a-session" || p.reasoningSummary != "auto" {
		t.Errorf("job: encrypt %v store %v cache key %q summary %q", p.encryptReasoning, p.store, p.reqs[0].CacheKey, p.reasoningSummary)
	}
}

// codexTools are tools as Codex sends them: a function, a namespace of a
// function and a custom tool, a custom tool with a grammar, and a hosted
// web search.
var codexTools = []responses.ToolUnionParam{
	{OfFunction: &responses.FunctionToolParam{Name: "shell", Parameters: map[string]any{"type": "object", "properties": map[string]any{
		"command": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}}, Strict: openai.Bool(false)}},
	{OfNamespace: &responses.NamespaceToolParam{Name: "crm", Description: "The CRM's tools.", Tools: []responses.NamespaceToolToolUnionParam{
		{OfFunction: &responses.NamespaceToolToolFunctionParam{Name: "find", Description: openai.String("Finds a contact."),
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}},
		{OfCustom: &responses.CustomToolParam{Name: "note", Description: openai.String("Adds a note.")}},
	}}},
	{OfCustom: &responses.CustomToolParam{Name: "apply_patch", Description: openai.String("Edits files."),
		Format: shared.CustomToolInputFormatUnionParam{OfGrammar: &shared.CustomToolInputFormatGrammarParam{Syntax: "lark", Definition: `start: "*** Begin Patch" /(.|\n)*/`}}}},
	{OfWebSearch: &responses.WebSearchToolParam{Type: "web_search"}},
}

const codexPatch = "*** Begin Patch\n*** Add File: a.txt\n+\"hi\"\n*** End Patch"

// codexEvents: a thinking block, then a call of each kind of tool.
func codexEvents() []engine.Event {
	patch, _ := json.Marshal(map[string]string{"input": codexPatch})
	return []engine.Event{
		{Reasoning: "The user wants a note. "},
		{Reasoning: "Find Ann first."},
		{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_f", Name: "crm__find", Arguments: `{"q":`}}},
		{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `"Ann"}`}}},
		{ToolCalls: []engine.ToolCallDelta{{Index: 1, ID: "call_p", Name: "apply_patch", Arguments: string(patch[:9])}}},
		{ToolCalls: []engine.ToolCallDelta{{Index: 1, Arguments: string(patch[9:])}}},
		{ToolCalls: []engine.ToolCallDelta{{Index: 2, ID: "call_n", Name: "crm__note", Arguments: `{"input":"met Ann"}`}}},
		{ToolCalls: []engine.ToolCallDelta{{Index: 3, ID: "call_s", Name: "shell", Arguments: `{"command":["ls"]}`}}},
		{Final: true, FinishReason: engine.FinishToolCalls, Stats: &engine.Stats{PromptTokens: 40, CompletionTokens: 30, ReasoningTokens: ptr(8)}},
	}
}

// codexInput is a stateless turn as Codex sends it: a developer message
// with an item id and the user's.
var codexInput = []any{
	map[string]any{"type": "message", "id": "msg_dev", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "You may edit files."}}},
	map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Note that I met Ann."}}},
}

// TestResponsesCodexTurn: a Codex turn through openai-go, plain and
// streamed: the function, namespaced and custom tools reach the engine as
// functions, the web search does not and a Warning header says so; the
// calls come back as a function_call with its namespace, custom tool
// calls with their input, and a plain function_call; the reasoning item
// carries encrypted_content.
func TestResponsesCodexTurn(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: codexEvents()}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{Model: "tiny", Tools: codexTools, Store: openai.Bool(false),
		Instructions:      openai.String("You are Codex."),
		Include:           []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
		PromptCacheKey:    openai.String("019a-session"),
		Reasoning:         shared.ReasoningParam{Effort: shared.ReasoningEffortMedium, Summary: shared.ReasoningSummaryAuto},
		ParallelToolCalls: openai.Bool(true),
		ToolChoice:        responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)},
	}
	opts := []option.RequestOption{option.WithJSONSet("input", codexInput), option.WithJSONSet("client_metadata", map[string]any{"originator": "codex_cli_rs"})}

	var httpResp *http.Response
	res, err := client.Responses.New(ctx, params, append(opts, option.WithResponseInto(&httpResp))...)
	if err != nil {
		t.Fatal(err)
	}
	mustValidate(t, "Response", []byte(res.RawJSON()))
	warnings := httpResp.Header.Values("Warning")
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], `299 rill "tools[3] (type web_search) is left out`) {
		t.Errorf("Warning headers %q, want one for tools[3]", warnings)
	}
	checkCodexOutput(t, "JSON", res.Output)

	req := fake.requests()[0]
	var names []string
	for _, tool := range req.Tools {
		names = append(names, tool.Name)
	}
	if got := strings.Join(names, " "); got != "shell crm__find crm__note apply_patch" {
		t.Errorf("engine tools %s", got)
	}
	if req.CacheKey != "019a-session" {
		t.Errorf("engine cache key %q", req.CacheKey)
	}
	wantMsgs := []engine.Message{{Role: engine.RoleSystem, Content: "You are Codex."}, {Role: engine.RoleDeveloper, Content: "You may edit files."},
		{Role: engine.RoleUser, Content: "Note that I met Ann."}}
	if !reflect.DeepEqual(req.Messages, wantMsgs) {
		t.Errorf("engine messages %+v", req.Messages)
	}

	s := client.Responses.NewStreaming(ctx, params, opts...)
	var types []string
	var completed *responses.Response
	var input string
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.completed":
			r := ev.Response
			completed = &r
		case "response.custom_tool_call_input.done":
			if input == "" {
				input = ev.Input
			}
		}
	}
	if err := s.Err(); err != nil || completed == nil {
		t.Fatalf("stream: %v, completed %v", err, completed != nil)
	}
	mustValidate(t, "Response", []byte(completed.RawJSON()))
	checkCodexOutput(t, "SSE", completed.Output)
	if input != codexPatch {
		t.Errorf("SSE custom_tool_call_input.done input %q", input)
	}
	joined := strings.Join(types, " ")
	for _, want := range []string{
		"response.output_item.added response.custom_tool_call_input.delta response.custom_tool_call_input.done response.output_item.done",
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("SSE events %s lack %s", joined, want)
		}
	}
}

// checkCodexOutput checks the output of codexEvents as openai-go reads it.
func checkCodexOutput(t *testing.T, what string, out []responses.ResponseOutputItemUnion) {
	t.Helper()
	var kinds []string
	for _, it := range out {
		kinds = append(kinds, it.Type)
	}
	if got := strings.Join(kinds, " "); got != "reasoning function_call custom_tool_call custom_tool_call function_call" {
		t.Fatalf("%s: output %s", what, got)
	}
	rs := out[0].AsReasoning()
	if text, ok := processSealer.open(rs.EncryptedContent); !ok || text != "The user wants a note. Find Ann first." {
		t.Errorf("%s: encrypted_content %q opens to %q (%v)", what, rs.EncryptedContent, text, ok)
	}
	if fc := out[1].AsFunctionCall(); fc.Name != "find" || fc.Namespace != "crm" || fc.Arguments != `{"q":"Ann"}` || fc.CallID != "call_f" || !strings.HasPrefix(fc.ID, "fc_") {
		t.Errorf("%s: namespaced call %+v", what, fc)
	}
	if ct := out[2].AsCustomToolCall(); ct.Name != "apply_patch" || ct.Namespace != "" || ct.Input != codexPatch || ct.CallID != "call_p" || !strings.HasPrefix(ct.ID, "ctc_") {
		t.Errorf("%s: custom call %+v", what, ct)
	}
	if ct := out[3].AsCustomToolCall(); ct.Name != "note" || ct.Namespace != "crm" || ct.Input != "met Ann" {
		t.Errorf("%s: namespaced custom call %+v", what, ct)
	}
	if fc := out[4].AsFunctionCall(); fc.Name != "shell" || fc.Namespace != "" || fc.Arguments != `{"command":["ls"]}` {
		t.Errorf("%s: plain call %+v", what, fc)
	}
}

// TestResponsesEncryptedReasoning: two stateless turns (store false). The
// second sends the first's reasoning back as Codex does, id and
// encrypted_content without content, with its calls and their outputs:
// the engine gets that reasoning on the assistant turn of the calls, and
// the custom and namespaced calls as the functions it called. Sent back
// changed, or made elsewhere, the reasoning is left out with a Warning
// header, and the turn still runs.
func TestResponsesEncryptedReasoning(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if len(req.Messages) > 2 {
			return &fakeStream{ctx: ctx, events: script(1, []string{"Noted."}, engine.FinishStop, plainStats(50, 2))}, nil
		}
		return &fakeStream{ctx: ctx, events: codexEvents()}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{Model: "tiny", Tools: codexTools, Store: openai.Bool(false),
		Include: []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}}
	first, err := client.Responses.New(ctx, params, option.WithJSONSet("input", codexInput[1:]))
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Output) != 5 {
		t.Fatalf("first turn: %d items", len(first.Output))
	}
	sealed := first.Output[0].AsReasoning().EncryptedContent
	tampered := []byte(sealed)
	tampered[len(tampered)-3] ^= 1

	// turn sends the first turn back as Codex does: the reasoning without
	// its content, the calls with their outputs.
	turn := func(encrypted string) []any {
		items := append([]any(nil), codexInput[1])
		items = append(items, map[string]any{"type": "reasoning", "id": first.Output[0].ID, "summary": []any{}, "encrypted_content": encrypted})
		var outputs []any
		for _, it := range first.Output[1:] {
			var m map[string]any
			if err := json.Unmarshal([]byte(it.RawJSON()), &m); err != nil {
				t.Fatal(err)
			}
			items = append(items, m)
			typ := "function_call_output"
			if m["type"] == "custom_tool_call" {
				typ = "custom_tool_call_output"
			}
			outputs = append(outputs, map[string]any{"type": typ, "call_id": m["call_id"], "output": "ok"})
		}
		return append(items, outputs...)
	}
	patchArgs, _ := json.Marshal(map[string]string{"input": codexPatch})
	calls := []engine.ToolCall{{ID: "call_f", Name: "crm__find", Arguments: `{"q":"Ann"}`}, {ID: "call_p", Name: "apply_patch", Arguments: string(patchArgs)},
		{ID: "call_n", Name: "crm__note", Arguments: `{"input":"met Ann"}`}, {ID: "call_s", Name: "shell", Arguments: `{"command":["ls"]}`}}
	tests := []struct {
		name      string
		encrypted string
		reasoning string // what the engine gets
		warned    bool
	}{
		{"as it came", sealed, "The user wants a note. Find Ann first.", false},
		{"changed", string(tampered), "", true},
		{"OpenAI's", "gAAAAABpZ2Vub2NpZGUtaXMtbm90LWEtd29yZA==", "", true},
	}
	for i, tc := range tests {
		var httpResp *http.Response
		res, err := client.Responses.New(ctx, params, option.WithJSONSet("input", turn(tc.encrypted)), option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Status != "completed" || res.OutputText() != "Noted." {
			t.Errorf("%s: status %s, text %q", tc.name, res.Status, res.OutputText())
		}
		w := httpResp.Header.Values("Warning")
		if got := len(w) == 2 && strings.Contains(strings.Join(w, "\n"), `299 rill "input[1].encrypted_content is left out`); got != tc.warned || len(w) < 1 {
			t.Errorf("%s: Warning headers %q", tc.name, w)
		}
		msgs := fake.requests()[i+1].Messages
		if len(msgs) != 6 {
			t.Fatalf("%s: engine messages %+v", tc.name, msgs)
		}
		want := engine.Message{Role: engine.RoleAssistant, NullContent: true, ReasoningContent: tc.reasoning, ToolCalls: calls}
		if !reflect.DeepEqual(msgs[1], want) {
			t.Errorf("%s: the assistant turn\n got  %+v\n want %+v", tc.name, msgs[1], want)
		}
	}
}

// TestCustomInput: a custom tool call's input out of the arguments the
// engine produced, whole, cut short, or not in the function's shape.
func TestCustomInput(t *testing.T) {
	t.Parallel()
	tests := []struct{ args, want string }{
		{`{"input":"*** Begin Patch\n\"x\""}`, "*** Begin Patch\n\"x\""},
		{`{ "input" : "spaced" }`, "spaced"},
		{`{"input":"cut sho`, "cut sho"},
		{`{"input":"cut in an escape \`, "cut in an escape "},
		{`{"input":"cut in a \u00e`, "cut in a "},
		{`{"input":"a \u00e9`, "a é"},
		{`{"input":"closed"`, "closed"},
		{`{"input":`, `{"input":`},
		{`{"query":"not the shape"}`, `{"query":"not the shape"}`},
		{`{"input":"a","more":`, `{"input":"a","more":`},
		{`plain text`, `plain text`},
		{``, ``},
	}
	for _, tc := range tests {
		it := &outputItem{kind: itemCustomCall, arguments: []byte(tc.args)}
		if got := it.customInput(); got != tc.want {
			t.Errorf("customInput(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
