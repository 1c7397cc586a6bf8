package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"

	"rill/engine"
)

// planOf decodes body as a Messages request and converts it.
func planOf(t *testing.T, body string) (*engine.Request, []string, *apiError) {
	t.Helper()
	var r messagesRequest
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	p, skipped, e := messagesJob(&r)
	if e != nil {
		return nil, skipped, e
	}
	return p.reqs[0], skipped, nil
}

// TestMessagesPlanConversation pins how a Messages conversation becomes
// the engine's chat messages (anthropicConversation).
func TestMessagesPlanConversation(t *testing.T) {
	t.Parallel()
	sys := func(s string) engine.Message { return engine.Message{Role: engine.RoleSystem, Content: s} }
	user := func(s string) engine.Message { return engine.Message{Role: engine.RoleUser, Content: s} }
	tool := func(id, s string) engine.Message {
		return engine.Message{Role: engine.RoleTool, Content: s, ToolCallID: id}
	}
	call := engine.ToolCall{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}
	tests := []struct {
		name string
		body string // the members beside model and max_tokens
		want []engine.Message
	}{
		{"strings", `"system":"Be brief.","messages":[{"role":"user","content":"hi"}]`,
			[]engine.Message{sys("Be brief."), user("hi")}},
		{"no system", `"messages":[{"role":"user","content":"hi"}]`, []engine.Message{user("hi")}},
		{"system blocks: Claude Code's billing header left out, cache_control ignored, paragraphs",
			`"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328.e51; cc_entrypoint=cli; cch=a5145;"},` +
				`{"type":"text","text":"You are Claude Code."},{"type":"text","text":"Be careful.","cache_control":{"type":"ephemeral"}}],` +
				`"messages":[{"role":"user","content":"hi"}]`,
			[]engine.Message{sys("You are Claude Code.\n\nBe careful."), user("hi")}},
		{"a billing header joined onto the prompt loses only its line",
			`"system":"x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;You are Claude Code.","messages":[{"role":"user","content":"hi"}]`,
			[]engine.Message{sys("You are Claude Code."), user("hi")}},
		{"a system message before the conversation joins the system prompt",
			`"system":"A.","messages":[{"role":"system","content":[{"type":"text","text":"B."}]},{"role":"user","content":"hi"}]`,
			[]engine.Message{sys("A.\n\nB."), user("hi")}},
		{"a system message inside the conversation is user text, combined with the user turn",
			`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"system","content":"Reminder."},{"role":"user","content":"go on"}]`,
			[]engine.Message{user("hi"), {Role: engine.RoleAssistant, Content: "hello"}, user("Reminder.\n\ngo on")}},
		{"user text blocks are paragraphs; consecutive user turns combine",
			`"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"more"}]`,
			[]engine.Message{user("<system-reminder>x</system-reminder>\n\nhi\n\nmore")}},
		{"an assistant turn: thinking, text, tool_use; redacted_thinking adds nothing",
			`"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"thinking","thinking":"Look it up.","signature":"sig"},` +
				`{"type":"redacted_thinking","data":"xyz"},{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city": "Oslo"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}]`,
			[]engine.Message{user("weather?"), {Role: engine.RoleAssistant, Content: "Checking.", ReasoningContent: "Look it up.", ToolCalls: []engine.ToolCall{call}},
				tool("toolu_1", "sunny")}},
		{"a reply of calls only has null content; tool results (blocks, is_error, none) come before the turn's text",
			`"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Oslo"}},` +
				`{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{}}]},` +
				`{"role":"user","content":[{"type":"text","text":"Thanks."},{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"},{"type":"text","text":"21 C"}]},` +
				`{"type":"tool_result","tool_use_id":"toolu_2","content":"station offline","is_error":true},{"type":"tool_result","tool_use_id":"toolu_3"}]}]`,
			[]engine.Message{user("weather?"), {Role: engine.RoleAssistant, NullContent: true,
				ToolCalls: []engine.ToolCall{call, {ID: "toolu_2", Name: "get_weather", Arguments: "{}"}}},
				tool("toolu_1", "sunny\n\n21 C"), tool("toolu_2", "Error: station offline"), tool("toolu_3", ""), user("Thanks.")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _, e := planOf(t, `{"model":"m","max_tokens":8,`+tt.body+`}`)
			if e != nil {
				t.Fatalf("error %s (param %s)", e.Message, e.Param)
			}
			if !reflect.DeepEqual(req.Messages, tt.want) {
				t.Errorf("messages\n got  %+v\n want %+v", req.Messages, tt.want)
			}
		})
	}
}

// TestMessagesPlanRequest pins the other members: sampling, stops, tools,
// tool_choice, thinking, output_config, and what is left out.
func TestMessagesPlanRequest(t *testing.T) {
	t.Parallel()
	const user = `"messages":[{"role":"user","content":"hi"}]`
	schema := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)
	weather := `{"name":"get_weather","description":"Weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}`
	f := false
	tests := []struct {
		name    string
		body    string
		check   func(r *engine.Request) bool
		skipped []string
	}{
		{"Anthropic's sampling defaults", user, func(r *engine.Request) bool {
			return r.Sampling.Temperature == 1 && r.Sampling.TopP == 1 && r.MaxTokens == 8 && r.N == 1 &&
				r.ChatTemplateKwargs == nil && r.Tools == nil && !r.ContinuousUsage && r.MessagesAPI && !r.Responses
		}, nil},
		{"sampling, stop_sequences, metadata and unknown members", user + `,"temperature":0.5,"top_p":0,"top_k":40,"stop_sequences":["END","","\n\nHuman:"],` +
			`"metadata":{"user_id":"u"},"context_management":{"edits":[]},"output_config":{"effort":"high"},"service_tier":"auto","anthropic_beta":["x"]`,
			func(r *engine.Request) bool {
				return r.Sampling.Temperature == 0.5 && r.Sampling.TopP == math.SmallestNonzeroFloat64 && r.Sampling.TopK == 40 &&
					reflect.DeepEqual(r.Stop, []string{"END", "\n\nHuman:"}) && r.ResponseFormat == nil
			}, nil},
		{"a custom tool; server tools and MCP servers left out", user + `,"tools":[` + weather + `,{"type":"web_search_20250305","name":"web_search","max_uses":3},` +
			`{"type":"custom","name":"mcp__srv__a_tool_name_longer_than_sixty_four_characters_which_anthropic_allows_xxxxxxxx","input_schema":{},"strict":true,"cache_control":{"type":"ephemeral"}}],` +
			`"mcp_servers":[{"type":"url","url":"https://x","name":"files"}]`,
			func(r *engine.Request) bool {
				return reflect.DeepEqual(r.Tools, []engine.Tool{{Name: "get_weather", Description: "Weather.", Parameters: schema},
					{Name: "mcp__srv__a_tool_name_longer_than_sixty_four_characters_which_anthropic_allows_xxxxxxxx", Parameters: json.RawMessage(`{}`), Strict: true}}) &&
					r.ToolChoice.Mode == engine.ToolChoiceAuto
			}, []string{"web_search (web_search_20250305)", "files (mcp_servers)"}},
		{"tool_choice any with disable_parallel_tool_use", user + `,"tools":[` + weather + `],"tool_choice":{"type":"any","disable_parallel_tool_use":true}`,
			func(r *engine.Request) bool {
				return r.ToolChoice.Mode == engine.ToolChoiceRequired && reflect.DeepEqual(r.ParallelToolCalls, &f)
			}, nil},
		{"tool_choice tool", user + `,"tools":[` + weather + `],"tool_choice":{"type":"tool","name":"get_weather"}`,
			func(r *engine.Request) bool {
				return r.ToolChoice == engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"} && r.ParallelToolCalls == nil
			}, nil},
		{"tool_choice none", user + `,"tools":[` + weather + `],"tool_choice":{"type":"none"}`,
			func(r *engine.Request) bool { return r.ToolChoice.Mode == engine.ToolChoiceNone }, nil},
		{"thinking disabled turns the template's thinking off", user + `,"thinking":{"type":"disabled"}`,
			func(r *engine.Request) bool {
				return reflect.DeepEqual(r.ChatTemplateKwargs, map[string]any{"enable_thinking": false})
			}, nil},
		{"thinking adaptive leaves the default", user + `,"thinking":{"type":"adaptive"}`,
			func(r *engine.Request) bool { return r.ChatTemplateKwargs == nil }, nil},
		{"thinking enabled below max_tokens leaves the default", `"max_tokens":2000,` + user + `,"thinking":{"type":"enabled","budget_tokens":1024}`,
			func(r *engine.Request) bool { return r.ChatTemplateKwargs == nil && r.MaxTokens == 2000 }, nil},
		// Qwen Code's Anthropic mode sends these; the budget has no effect.
		{"a thinking budget as large as max_tokens is accepted", `"max_tokens":32000,` + user + `,"thinking":{"type":"enabled","budget_tokens":32000}`,
			func(r *engine.Request) bool { return r.ChatTemplateKwargs == nil && r.MaxTokens == 32000 }, nil},
		{"output_config.format json_schema", user + `,"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}}`,
			func(r *engine.Request) bool {
				return reflect.DeepEqual(r.ResponseFormat, &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "output",
					Schema: json.RawMessage(`{"type":"object"}`), Strict: true})
			}, nil},
		{"rill's extensions", user + `,"seed":7,"min_p":0.1,"ignore_eos":true,"no_draft":true`,
			func(r *engine.Request) bool {
				return *r.Sampling.Seed == 7 && r.Sampling.MinP == 0.1 && r.IgnoreEOS && r.NoDraft
			}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := `{"model":"m",` + tt.body + `}`
			if !strings.Contains(tt.body, `"max_tokens"`) {
				body = `{"model":"m","max_tokens":8,` + tt.body + `}`
			}
			req, skipped, e := planOf(t, body)
			if e != nil {
				t.Fatalf("error %s (param %s)", e.Message, e.Param)
			}
			if !tt.check(req) {
				t.Errorf("request %+v", *req)
			}
			if !reflect.DeepEqual(skipped, tt.skipped) {
				t.Errorf("skipped %q, want %q", skipped, tt.skipped)
			}
		})
	}
}

// TestMessagesPlanRefusals: what the conversion refuses, with the param
// that names the culprit.
func TestMessagesPlanRefusals(t *testing.T) {
	t.Parallel()
	const user = `"messages":[{"role":"user","content":"hi"}]`
	weather := `{"name":"get_weather","input_schema":{"type":"object"}}`
	tests := []struct {
		name, body, param, code string
	}{
		{"an image", `"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}}]}]`,
			"messages[0].content[0].type", "unsupported_parameter"},
		{"a document in a tool result", `"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{}}]}]}]`,
			"messages[0].content[0].content[0].type", "unsupported_parameter"},
		{"a server tool's block", `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]},{"role":"user","content":"ok"}]`,
			"messages[1].content[0].type", "unsupported_parameter"},
		{"tool_use in a user message", `"messages":[{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]`,
			"messages[0].content[0].type", "invalid_value"},
		{"tool_result without its id", `"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]`,
			"messages[0].content[0].tool_use_id", "missing_required_parameter"},
		{"tool_use without a name", `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","input":{}}]},{"role":"user","content":"ok"}]`,
			"messages[1].content[0].name", "missing_required_parameter"},
		{"a text block without text", `"messages":[{"role":"user","content":[{"type":"text"}]}]`,
			"messages[0].content[0].text", "missing_required_parameter"},
		{"a system prompt with an image", `"system":[{"type":"image"}],` + user, "system[0].type", "invalid_value"},
		{"a final assistant message (prefill)", `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure, "}]`,
			"messages[1]", "unsupported_parameter"},
		{"a custom tool without input_schema", user + `,"tools":[{"name":"f"}]`, "tools[0].input_schema", "missing_required_parameter"},
		{"a tool name Anthropic refuses", user + `,"tools":[{"name":"a b","input_schema":{}}]`, "tools[0].name", "invalid_value"},
		{"a tool declared twice", user + `,"tools":[` + weather + `,` + weather + `]`, "tools[1].name", "invalid_value"},
		{"tool_choice any without tools", user + `,"tool_choice":{"type":"any"}`, "tool_choice.type", "invalid_value"},
		{"tool_choice naming an unknown tool", user + `,"tools":[` + weather + `],"tool_choice":{"type":"tool","name":"g"}`, "tool_choice.name", "invalid_value"},
		{"tool_choice naming a server tool", user + `,"tools":[{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"tool","name":"web_search"}`,
			"tool_choice.name", "unsupported_parameter"},
		{"thinking enabled without a budget", user + `,"thinking":{"type":"enabled"}`, "thinking.budget_tokens", "missing_required_parameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, e := planOf(t, `{"model":"m","max_tokens":8,`+tt.body+`}`)
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Status != http.StatusBadRequest || e.Param != tt.param || e.Code != tt.code {
				t.Errorf("%d param %q code %q (%s), want param %q code %q", e.Status, e.Param, e.Code, e.Message, tt.param, tt.code)
			}
		})
	}
}

// TestMessagesUsageOf pins docs/design.md §3 rule 13: the three input
// counts add up to the prompt, output includes thinking, a cache count
// not measured is 0.
func TestMessagesUsageOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   Usage
		want string
	}{
		{"nothing measured", Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10},
			`{"input_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}`},
		{"cold cache", Usage{PromptTokens: 40, CompletionTokens: 3, TotalTokens: 43, CachedTokens: ptr(0), CacheWriteTokens: ptr(32)},
			`{"input_tokens":8,"cache_creation_input_tokens":32,"cache_read_input_tokens":0,"output_tokens":3}`},
		{"warm cache", Usage{PromptTokens: 40, CompletionTokens: 2, TotalTokens: 42, CachedTokens: ptr(32), CacheWriteTokens: ptr(0)},
			`{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":32,"output_tokens":2}`},
		{"partly cached, partly written", Usage{PromptTokens: 70, CompletionTokens: 2, TotalTokens: 72, CachedTokens: ptr(32), CacheWriteTokens: ptr(32)},
			`{"input_tokens":6,"cache_creation_input_tokens":32,"cache_read_input_tokens":32,"output_tokens":2}`},
		{"reads but writes not measured", Usage{PromptTokens: 40, CompletionTokens: 2, TotalTokens: 42, CachedTokens: ptr(32)},
			`{"input_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":32,"output_tokens":2}`},
		{"counts beyond the prompt are clamped", Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12, CachedTokens: ptr(8), CacheWriteTokens: ptr(16)},
			`{"input_tokens":0,"cache_creation_input_tokens":2,"cache_read_input_tokens":8,"output_tokens":2}`},
		{"thinking", Usage{PromptTokens: 5, CompletionTokens: 9, TotalTokens: 14, ReasoningTokens: ptr(6), CachedTokens: ptr(0), CacheWriteTokens: ptr(0)},
			`{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":9,"output_tokens_details":{"thinking_tokens":6}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mu := MessagesUsageOf(tt.in)
			got := string(mu.AppendJSON(nil))
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			mustValidate(t, "MessagesUsage", []byte(got))
			if mu.InputTokens+mu.CacheReadInputTokens+mu.CacheCreationInputTokens != tt.in.PromptTokens || mu.OutputTokens != tt.in.CompletionTokens {
				t.Errorf("%+v does not add up to prompt %d, output %d", mu, tt.in.PromptTokens, tt.in.CompletionTokens)
			}
		})
	}
}

// messagesEvent is one event of an Anthropic stream.
type messagesEvent struct {
	name string
	data []byte
}

// parseMessagesSSE splits an Anthropic stream: `event:` then `data:`, a
// blank line after each, the event's name its data's type.
func parseMessagesSSE(t *testing.T, body []byte) []messagesEvent {
	t.Helper()
	var evs []messagesEvent
	for _, chunk := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(chunk, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") || strings.Contains(data, "\n") {
			t.Fatalf("not an event: %q", chunk)
		}
		ev := messagesEvent{name: strings.TrimPrefix(name, "event: "), data: []byte(strings.TrimPrefix(data, "data: "))}
		if typ, _ := decodeMap(t, ev.data)["type"].(string); typ != ev.name {
			t.Fatalf("event %s has type %q", ev.name, typ)
		}
		evs = append(evs, ev)
	}
	return evs
}

// thinkingCallEngine reasons, says a word, then calls a tool in two
// fragments; every event carries running Stats when asked for them.
func thinkingCallEngine() *fakeEngine {
	return &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		stats := func(done int) *engine.Stats {
			return &engine.Stats{PromptTokens: 40, CachedTokens: ptr(16.0), CacheWriteTokens: ptr(16), CompletionTokens: done, ReasoningTokens: ptr(min(done, 3))}
		}
		evs := []engine.Event{
			{Reasoning: "Hmm, "}, {Reasoning: "weather."}, {Text: "Let me look."},
			{ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_1", Name: "get_weather", Arguments: `{"city":`}}},
			{ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `"Oslo"}`}}},
		}
		for i := range evs {
			if req.ContinuousUsage {
				evs[i].Stats = stats(i + 1)
			}
		}
		evs = append(evs, engine.Event{Final: true, FinishReason: engine.FinishToolCalls, Stats: stats(7)})
		return &fakeStream{ctx: ctx, events: evs}, nil
	}}
}

// TestMessagesStream pins the event sequence of a streamed message with a
// thinking block, text and a tool call, each event valid against
// MessageStreamEvent, message_start's usage the prompt's counts, and the
// plain answer the same message.
func TestMessagesStream(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, thinkingCallEngine(), Options{})
	const body = `{"model":"tiny","max_tokens":64,"messages":[{"role":"user","content":"weather?"}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]`
	resp, data := post(t, ts.Client(), ts.URL+"/v1/messages?beta=true", body+`,"stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	evs := parseMessagesSSE(t, data)
	var got []string
	for _, ev := range evs {
		mustValidate(t, "MessageStreamEvent", ev.data)
		m := decodeMap(t, ev.data)
		s := ev.name
		if d, ok := m["delta"].(map[string]any); ok && d["type"] != nil {
			s += " " + d["type"].(string)
		}
		if cb, ok := m["content_block"].(map[string]any); ok {
			s += " " + cb["type"].(string)
		}
		if i, ok := m["index"].(float64); ok {
			s += " " + string(rune('0'+int(i)))
		}
		got = append(got, s)
	}
	want := []string{"message_start", "ping",
		"content_block_start thinking 0", "content_block_delta thinking_delta 0", "content_block_delta thinking_delta 0",
		"content_block_delta signature_delta 0", "content_block_stop 0",
		"content_block_start text 1", "content_block_delta text_delta 1", "content_block_stop 1",
		"content_block_start tool_use 2", "content_block_delta input_json_delta 2", "content_block_delta input_json_delta 2", "content_block_stop 2",
		"message_delta", "message_stop"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n got  %q\n want %q", got, want)
	}
	start := string(evs[0].data)
	if !strings.Contains(start, `"stop_reason":null`) ||
		!strings.Contains(start, `"usage":{"input_tokens":8,"cache_creation_input_tokens":16,"cache_read_input_tokens":16,"output_tokens":1,"output_tokens_details":{"thinking_tokens":1}}`) {
		t.Errorf("message_start: %s", start)
	}
	wantDelta := `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":8,"cache_creation_input_tokens":16,"cache_read_input_tokens":16,"output_tokens":7,"output_tokens_details":{"thinking_tokens":3}}}`
	if d := string(evs[len(evs)-2].data); d != wantDelta {
		t.Errorf("message_delta\n got  %s\n want %s", d, wantDelta)
	}

	resp, data = post(t, ts.Client(), ts.URL+"/v1/messages", body+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d: %s", resp.StatusCode, data)
	}
	mustValidate(t, "Message", data)
	sig := thinkingSignature([]byte("Hmm, weather."))
	wantMsg := `"content":[{"type":"thinking","thinking":"Hmm, weather.","signature":"` + sig + `"},{"type":"text","text":"Let me look."},` +
		`{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Oslo"}}],"stop_reason":"tool_use","stop_sequence":null,` +
		`"usage":{"input_tokens":8,"cache_creation_input_tokens":16,"cache_read_input_tokens":16,"output_tokens":7,"output_tokens_details":{"thinking_tokens":3}}}`
	if !strings.Contains(string(data), wantMsg) {
		t.Errorf("message\n got  %s\n want …%s", data, wantMsg)
	}
	if !strings.Contains(string(data), sig) || !strings.Contains(string(evs[5].data), sig) {
		t.Errorf("the streamed signature is not the message's")
	}
}

// TestMessagesStreamRunningCounts: the engine is asked for running Stats
// on a stream only, and an engine that keeps none still ends the stream
// with the whole usage.
func TestMessagesStreamRunningCounts(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a", "b"}, engine.FinishLength, plainStats(5, 2))}
	ts := newTestServer(t, fake, Options{})
	const body = `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}]`
	resp, data := post(t, ts.Client(), ts.URL+"/v1/messages", body+`,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d: %s", resp.StatusCode, data)
	}
	evs := parseMessagesSSE(t, data)
	if got := string(evs[0].data); !strings.Contains(got, `"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}`) {
		t.Errorf("message_start of an engine without running counts: %s", got)
	}
	if got := string(evs[len(evs)-2].data); !strings.Contains(got, `"stop_reason":"max_tokens"`) ||
		!strings.Contains(got, `"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}`) {
		t.Errorf("message_delta: %s", got)
	}
	post(t, ts.Client(), ts.URL+"/v1/messages", body+`}`)
	reqs := fake.requests()
	if len(reqs) != 2 || !reqs[0].ContinuousUsage || reqs[1].ContinuousUsage {
		t.Errorf("ContinuousUsage of the streamed and the plain request: %v", reqs)
	}
}

// TestMessagesErrors: every refusal on the Messages API's paths is in
// Anthropic's shape and status, from the API key to the engine.
func TestMessagesErrors(t *testing.T) {
	t.Parallel()
	fail := errorEngine()
	ts := newTestServer(t, fail, Options{MaxBodyBytes: 4096, APIKey: "k", AllowedOrigins: []string{"https://ok.example"}})
	const user = `"max_tokens":4,"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		typ                      string
	}{
		{"no key", "POST", pathMessages, `{}`, map[string]string{"X-Api-Key": ""}, 401, "authentication_error"},
		{"wrong x-api-key", "POST", pathMessages, `{}`, map[string]string{"X-Api-Key": "nope"}, 401, "authentication_error"},
		{"a browser page of another origin", "POST", pathMessages, `{}`, map[string]string{"Origin": "https://evil.example"}, 403, "permission_error"},
		{"broken JSON", "POST", pathMessages, `{"model":`, nil, 400, "invalid_request_error"},
		{"no max_tokens", "POST", pathMessages, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error"},
		{"a role Anthropic lacks", "POST", pathMessages, `{"model":"tiny","max_tokens":4,"messages":[{"role":"tool","content":"hi"}]}`, nil, 400, "invalid_request_error"},
		{"temperature above Anthropic's 1", "POST", pathMessages, `{"model":"tiny",` + user + `,"temperature":1.5}`, nil, 400, "invalid_request_error"},
		{"an image", "POST", pathMessages, `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, nil, 400, "invalid_request_error"},
		{"unknown model", "POST", pathMessages, `{"model":"nope",` + user + `}`, nil, 404, "not_found_error"},
		{"context length", "POST", pathMessages, `{"model":"long",` + user + `}`, nil, 400, "invalid_request_error"},
		{"overloaded", "POST", pathMessages, `{"model":"busy",` + user + `}`, nil, 529, "overloaded_error"},
		{"overloaded, streamed", "POST", pathMessages, `{"model":"busy",` + user + `,"stream":true}`, nil, 529, "overloaded_error"},
		{"oversized body", "POST", pathMessages, `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, nil, 413, "request_too_large"},
		{"GET without an upgrade", "GET", pathMessages, ``, nil, 405, "invalid_request_error"},
		{"a path rill does not serve", "POST", "/v1/messages/batches", `{}`, nil, 404, "not_found_error"},
		{"count_tokens without messages", "POST", pathCountTokens, `{"model":"tiny"}`, nil, 400, "invalid_request_error"},
		{"count_tokens on an engine that cannot tokenize", "POST", pathCountTokens, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Api-Key", "k")
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			mustValidate(t, "MessagesErrorResponse", body)
			m := decodeMap(t, body)
			e := m["error"].(map[string]any)
			if m["type"] != "error" || e["type"] != tt.typ || e["message"] == "" || len(e) != 2 {
				t.Errorf("body %s, want error type %s", body, tt.typ)
			}
			if resp.Header.Get("Request-Id") == "" {
				t.Errorf("no Request-Id header")
			}
			if tt.status == 529 && resp.Header.Get("Retry-After") == "" {
				t.Errorf("529 without Retry-After")
			}
		})
	}
	// The other paths keep OpenAI's shape.
	resp, body := post(t, ts.Client(), ts.URL+"/v1/chat/completions", `{}`)
	if resp.StatusCode != 401 || !strings.Contains(string(body), `"code":"invalid_api_key"`) {
		t.Errorf("chat without a key: %d %s", resp.StatusCode, body)
	}
}

// TestMessagesStreamError: an engine that fails after the stream began
// ends it with an error event in Anthropic's shape, without message_stop.
func TestMessagesStreamError(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "a"}}, err: errors.New("gpu on fire")}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	resp, data := post(t, ts.Client(), ts.URL+"/v1/messages", `{"model":"tiny","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d: %s", resp.StatusCode, data)
	}
	evs := parseMessagesSSE(t, data)
	last := evs[len(evs)-1]
	if last.name != "error" || !strings.Contains(string(last.data), `{"type":"error","error":{"type":"api_error","message":"The engine failed: gpu on fire"}}`) {
		t.Errorf("last event %s %s", last.name, last.data)
	}
	mustValidate(t, "MessageStreamEvent", last.data)
	for _, ev := range evs {
		if ev.name == "message_stop" {
			t.Errorf("a failed stream has message_stop")
		}
	}
}

// TestMessagesBeyondWindow: a max_tokens beyond the context window is the
// engine's to judge, once: run to the window's end (a length finish, which
// is stop_reason max_tokens), or refused under the error policy, in
// Anthropic's shape with the engine's message.
func TestMessagesBeyondWindow(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if req.Messages[0].Content == "refused" {
			return nil, engine.Errorf(engine.CodeContextLengthExceeded, "max_tokens",
				"This model's maximum context length is 256 tokens. However, you requested 32010 tokens (10 in the prompt, 32000 for the completion).")
		}
		return &fakeStream{ctx: ctx, events: script(1, []string{"a", "b"}, engine.FinishLength, plainStats(10, 246))}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	const body = `{"model":"tiny","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]`
	resp, data := post(t, ts.Client(), ts.URL+pathMessages, body+`}`)
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"stop_reason":"max_tokens"`) {
		t.Errorf("plain: %d %s", resp.StatusCode, data)
	}
	mustValidate(t, "Message", data)
	resp, data = post(t, ts.Client(), ts.URL+pathMessages, body+`,"stream":true}`)
	evs := parseMessagesSSE(t, data)
	if d := evs[len(evs)-2]; resp.StatusCode != 200 || !strings.Contains(string(d.data), `"stop_reason":"max_tokens"`) {
		t.Errorf("streamed: %d %s", resp.StatusCode, data)
	}
	resp, data = post(t, ts.Client(), ts.URL+pathMessages, `{"model":"tiny","max_tokens":32000,"messages":[{"role":"user","content":"refused"}]}`)
	if resp.StatusCode != 400 || !strings.Contains(string(data), `"type":"invalid_request_error"`) || !strings.Contains(string(data), "32000 for the completion") {
		t.Errorf("refused under the error policy: %d %s", resp.StatusCode, data)
	}
	if reqs := fake.requests(); len(reqs) != 3 {
		t.Errorf("the engine was asked %d times, want once a request", len(reqs))
	}
}

// TestMessagesClaudeCodeRequest: a request shaped as Claude Code sends it
// (testdata/claude-code-request.json: the billing header, cache_control
// breakpoints, a system message, custom and server tools, thinking
// adaptive, context_management, output_config, metadata, and its beta
// headers) is served, and reaches the engine as the conversation it is.
func TestMessagesClaudeCodeRequest(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/claude-code-request.json")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeEngine{models: []engine.ModelCard{{ID: "rill-tiny"}}, respond: replay([]string{"ok"}, engine.FinishStop, plainStats(900, 1))}
	ts := newTestServer(t, fake, Options{APIKey: "sk"})
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/messages?beta=true", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "X-Api-Key": "sk", "Anthropic-Version": "2023-06-01",
		"Anthropic-Beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27"} {
		req.Header.Set(k, v)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%d: %s", resp.StatusCode, data)
	}
	if w := resp.Header.Get("Warning"); !strings.HasPrefix(w, `299 rill "`) || !strings.Contains(w, "web_search (web_search_20250305)") {
		t.Errorf("Warning: %q", w)
	}
	evs := parseMessagesSSE(t, data)
	if evs[0].name != "message_start" || evs[len(evs)-1].name != "message_stop" {
		t.Errorf("events %s … %s", evs[0].name, evs[len(evs)-1].name)
	}
	got := fake.requests()[0]
	want := []engine.Message{
		{Role: engine.RoleSystem, Content: "You are Claude Code, Anthropic's official CLI for Claude.\n\n" +
			"You are an interactive CLI tool that helps users with software engineering tasks.\n\n" +
			"The user's working directory is /home/user/project."},
		{Role: engine.RoleUser, Content: "<system-reminder>\nAs you answer the user's questions, you can use the following context.\n</system-reminder>\n\nList the files here."},
	}
	if !reflect.DeepEqual(got.Messages, want) {
		t.Errorf("messages\n got  %+v\n want %+v", got.Messages, want)
	}
	var names []string
	for _, tool := range got.Tools {
		names = append(names, tool.Name)
	}
	if !reflect.DeepEqual(names, []string{"Bash", "Read", "mcp__ide__getDiagnostics"}) || got.MaxTokens != 32000 ||
		got.ChatTemplateKwargs != nil || !got.ContinuousUsage {
		t.Errorf("request: tools %q, max_tokens %d, kwargs %v, continuous usage %v", names, got.MaxTokens, got.ChatTemplateKwargs, got.ContinuousUsage)
	}
}

func TestHeaderSafe(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"web_search (web_search_20250305)", "web_search (web_search_20250305)"},
		{"a\r\nX-Evil: 1", "a??X-Evil: 1"},
		{"caf\u00e9", "caf??"},
		{strings.Repeat("x", 2000), strings.Repeat("x", 1021) + "..."},
	}
	for _, tt := range tests {
		if got := headerSafe(tt.in); got != tt.want {
			t.Errorf("headerSafe(%.20q) = %.40q, want %.40q", tt.in, got, tt.want)
		}
	}
}
