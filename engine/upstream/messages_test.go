package upstream

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"rill/engine"
)

func TestUseMessages(t *testing.T) {
	t.Parallel()
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "be brief"}, {Role: engine.RoleUser, Content: "hi"}}
	base := engine.Request{Model: "m", Messages: msgs, MaxTokens: 16, MessagesAPI: true, Sampling: engine.Sampling{Temperature: 1, TopP: 1}}
	with := func(f func(r *engine.Request)) *engine.Request {
		r := base
		f(&r)
		return &r
	}
	seed := int64(1)
	no := false
	weather := engine.Tool{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object"}`)}
	tests := []struct {
		name string
		kind Kind
		req  *engine.Request
		n    int
		want bool
	}{
		{"llama.cpp", LlamaCpp, &base, 1, true},
		{"vllm", VLLM, &base, 1, true},
		{"sglang", SGLang, &base, 1, true},
		{"rill", Rill, &base, 1, true},
		{"openai translates to chat", OpenAI, &base, 1, false},
		{"tabbyapi translates to chat", TabbyAPI, &base, 1, false},
		{"a chat request stays chat", LlamaCpp, with(func(r *engine.Request) { r.MessagesAPI = false }), 1, false},
		{"a text prompt stays completions", LlamaCpp, with(func(r *engine.Request) { r.Messages, r.Prompt = nil, "x" }), 1, false},
		{"several choices", VLLM, &base, 2, false},
		{"no max_tokens (the clamp's retry)", VLLM, with(func(r *engine.Request) { r.MaxTokens = 0 }), 1, false},
		{"stop sequences and top_k go", LlamaCpp, with(func(r *engine.Request) { r.Stop, r.Sampling.TopK = []string{"x"}, 4 }), 1, true},
		{"logprobs", Rill, with(func(r *engine.Request) { r.Logprobs = true }), 1, false},
		{"a prediction", Rill, with(func(r *engine.Request) { r.Prediction = "x" }), 1, false},
		{"logit_bias", Rill, with(func(r *engine.Request) { r.LogitBias = map[int]float64{1: -100} }), 1, false},
		{"penalties", Rill, with(func(r *engine.Request) { r.Sampling.PresencePenalty = 0.5 }), 1, false},
		{"a seed to llama.cpp goes to chat", LlamaCpp, with(func(r *engine.Request) { r.Sampling.Seed = &seed }), 1, false},
		{"min_p to vllm goes to chat", VLLM, with(func(r *engine.Request) { r.Sampling.MinP = 0.1 }), 1, false},
		{"ignore_eos to sglang goes to chat", SGLang, with(func(r *engine.Request) { r.IgnoreEOS = true }), 1, false},
		{"rill's extensions to rill", Rill, with(func(r *engine.Request) {
			r.Sampling.Seed, r.Sampling.MinP, r.IgnoreEOS, r.NoDraft = &seed, 0.1, true, true
		}), 1, true},
		{"no_draft alone changes nothing elsewhere", LlamaCpp, with(func(r *engine.Request) { r.NoDraft = true }), 1, true},
		{"chat_template_kwargs to llama.cpp", LlamaCpp, with(func(r *engine.Request) { r.ChatTemplateKwargs = map[string]any{"x": 1} }), 1, true},
		{"chat_template_kwargs to sglang go to chat", SGLang, with(func(r *engine.Request) {
			r.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
		}), 1, false},
		{"thinking off to rill", Rill, with(func(r *engine.Request) {
			r.ChatTemplateKwargs = map[string]any{"enable_thinking": json.RawMessage("false")}
		}), 1, true},
		{"other template variables to rill go to chat", Rill, with(func(r *engine.Request) {
			r.ChatTemplateKwargs = map[string]any{"enable_thinking": false, "x": 1}
		}), 1, false},
		{"tools with any to llama.cpp", LlamaCpp, with(func(r *engine.Request) {
			r.Tools, r.ToolChoice = []engine.Tool{weather}, engine.ToolChoice{Mode: engine.ToolChoiceRequired}
		}), 1, true},
		{"a named tool to llama.cpp goes to chat", LlamaCpp, with(func(r *engine.Request) {
			r.Tools, r.ToolChoice = []engine.Tool{weather}, engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}
		}), 1, false},
		{"tool_choice none to llama.cpp goes to chat", LlamaCpp, with(func(r *engine.Request) {
			r.Tools, r.ToolChoice = []engine.Tool{weather}, engine.ToolChoice{Mode: engine.ToolChoiceNone}
		}), 1, false},
		{"a named tool to sglang", SGLang, with(func(r *engine.Request) {
			r.Tools, r.ToolChoice = []engine.Tool{weather}, engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}
		}), 1, true},
		{"one call at most to vllm goes to chat", VLLM, with(func(r *engine.Request) { r.Tools, r.ParallelToolCalls = []engine.Tool{weather}, &no }), 1, false},
		{"one call at most to rill", Rill, with(func(r *engine.Request) { r.Tools, r.ParallelToolCalls = []engine.Tool{weather}, &no }), 1, true},
		{"a strict tool to sglang goes to chat", SGLang, with(func(r *engine.Request) {
			r.Tools = []engine.Tool{{Name: "f", Parameters: json.RawMessage(`{}`), Strict: true}}
		}), 1, false},
		{"a strict tool to vllm", VLLM, with(func(r *engine.Request) {
			r.Tools = []engine.Tool{{Name: "f", Parameters: json.RawMessage(`{}`), Strict: true}}
		}), 1, true},
		{"a json_schema format to vllm", VLLM, with(func(r *engine.Request) {
			r.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: json.RawMessage(`{"type":"object"}`)}
		}), 1, true},
		{"a json_schema format to llama.cpp goes to chat", LlamaCpp, with(func(r *engine.Request) {
			r.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: json.RawMessage(`{"type":"object"}`)}
		}), 1, false},
		{"json_object goes to chat", Rill, with(func(r *engine.Request) { r.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONObject} }), 1, false},
		{"tool turns go", SGLang, with(func(r *engine.Request) {
			r.Messages = append(msgs, engine.Message{Role: engine.RoleAssistant, NullContent: true, ToolCalls: []engine.ToolCall{{ID: "c", Name: "f", Arguments: `{"a":1}`}}},
				engine.Message{Role: engine.RoleTool, Content: "1", ToolCallID: "c"})
		}), 1, true},
		{"arguments that are no object go to chat", SGLang, with(func(r *engine.Request) {
			r.Messages = append(msgs, engine.Message{Role: engine.RoleAssistant, ToolCalls: []engine.ToolCall{{ID: "c", Name: "f", Arguments: `[1]`}}})
		}), 1, false},
		{"a later system message goes to chat", LlamaCpp, with(func(r *engine.Request) {
			r.Messages = append(msgs, engine.Message{Role: engine.RoleSystem, Content: "x"})
		}), 1, false},
		{"a developer message goes to chat", LlamaCpp, with(func(r *engine.Request) {
			r.Messages = []engine.Message{{Role: engine.RoleDeveloper, Content: "x"}, {Role: engine.RoleUser, Content: "hi"}}
		}), 1, false},
		{"a named message goes to chat", LlamaCpp, with(func(r *engine.Request) {
			r.Messages = []engine.Message{{Role: engine.RoleUser, Content: "hi", Name: "ann"}}
		}), 1, false},
	}
	for _, tt := range tests {
		if got := useMessages(tt.kind, tt.req, tt.n); got != tt.want {
			t.Errorf("%s: useMessages = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestEncodeMessagesRequest(t *testing.T) {
	t.Parallel()
	seed := int64(3)
	no := false
	conversation := []engine.Message{
		{Role: engine.RoleSystem, Content: "be brief"},
		{Role: engine.RoleUser, Content: "Weather in Oslo and Bergen?"},
		{Role: engine.RoleAssistant, ReasoningContent: "two calls", Content: "Checking.", ToolCalls: []engine.ToolCall{
			{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}, {ID: "toolu_2", Name: "get_weather", Arguments: `{"city":"Bergen"}`}}},
		{Role: engine.RoleTool, Content: "-3", ToolCallID: "toolu_1"},
		{Role: engine.RoleTool, Content: "Error: no data", ToolCallID: "toolu_2"},
		{Role: engine.RoleUser, Content: "And tomorrow?"},
		{Role: engine.RoleAssistant, Content: "Sunny."},
		{Role: engine.RoleUser, Content: ""},
	}
	tools := []engine.Tool{{Name: "get_weather", Description: "Weather.", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`), Strict: true},
		{Name: "noop"}}
	loose := append([]engine.Tool{tools[0]}, tools[1:]...)
	loose[0].Strict = false
	const turns = `"system":"be brief","messages":[{"role":"user","content":"Weather in Oslo and Bergen?"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"two calls","signature":""},{"type":"text","text":"Checking."},` +
		`{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Oslo"}},{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"city":"Bergen"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"-3"},{"type":"tool_result","tool_use_id":"toolu_2","content":"Error: no data"}]},` +
		`{"role":"user","content":"And tomorrow?"},{"role":"assistant","content":"Sunny."},{"role":"user","content":""}]`
	const toolsJSON = `"tools":[{"name":"get_weather","description":"Weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true},` +
		`{"name":"noop","input_schema":{"type":"object"}}]`
	tests := []struct {
		name string
		kind Kind
		req  engine.Request
		want string
	}{
		{"rill: everything, rill's extensions included", Rill, engine.Request{Messages: conversation, MaxTokens: 20, Stop: []string{"END"},
			Sampling:  engine.Sampling{Temperature: 0.5, TopP: 0.9, TopK: 4, MinP: 0.1, Seed: &seed},
			IgnoreEOS: true, NoDraft: true, Tools: tools, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"},
			ParallelToolCalls:  &no,
			ResponseFormat:     &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "output", Schema: json.RawMessage(`{"type":"object"}`), Strict: true},
			ChatTemplateKwargs: map[string]any{"enable_thinking": false}},
			`{"model":"up","max_tokens":20,` + turns + `,"stream":true,"stop_sequences":["END"],"temperature":0.5,"top_p":0.9,"top_k":4,` + toolsJSON +
				`,"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true},"thinking":{"type":"disabled"},` +
				`"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}},"seed":3,"min_p":0.1,"ignore_eos":true,"no_draft":true}`},
		{"llama.cpp: tool_choice any, template variables, no extensions", LlamaCpp, engine.Request{Messages: conversation, MaxTokens: 20,
			Sampling: engine.Sampling{Temperature: 1, TopP: 1}, NoDraft: true, Tools: loose, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired},
			ChatTemplateKwargs: map[string]any{"reasoning_effort": "low"}},
			`{"model":"up","max_tokens":20,` + turns + `,"stream":true,"temperature":1,` + strings.Replace(toolsJSON, `,"strict":true`, "", 1) +
				`,"tool_choice":{"type":"any"},"chat_template_kwargs":{"reasoning_effort":"low"}}`},
		{"sglang: tool_choice auto is left out, as none at all", SGLang, engine.Request{MaxTokens: 5,
			Messages: []engine.Message{{Role: engine.RoleUser, Content: "hi"}}, Tools: tools[1:]},
			`{"model":"up","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream":true,"temperature":0,"tools":[{"name":"noop","input_schema":{"type":"object"}}]}`},
	}
	for _, tt := range tests {
		tt.req.Model, tt.req.MessagesAPI = "m", true
		if !useMessages(tt.kind, &tt.req, 1) {
			t.Errorf("%s: useMessages refused the request", tt.name)
			continue
		}
		body, err := encodeMessagesRequest(tt.kind, "up", &tt.req)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if string(body) != tt.want {
			t.Errorf("%s:\n got  %s\n want %s", tt.name, body, tt.want)
		}
	}
}

func TestMessagesUsageMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		kind  Kind
		usage string
		// want: prompt, cached (-1 nil), written (-1 nil), completion
		prompt, cached, written, completion int
		reasoning                           int // -1 nil
	}{
		{"llama.cpp cold: what it computed it wrote", LlamaCpp, `{"cache_read_input_tokens":11,"input_tokens":85,"output_tokens":6}`, 96, 11, 85, 6, -1},
		{"llama.cpp warm", LlamaCpp, `{"cache_read_input_tokens":95,"input_tokens":1,"output_tokens":6}`, 96, 95, 1, 6, -1},
		{"llama.cpp reporting creation itself", LlamaCpp, `{"cache_read_input_tokens":10,"cache_creation_input_tokens":16,"input_tokens":4,"output_tokens":1}`, 30, 10, 16, 1, -1},
		{"llama.cpp without message_start", LlamaCpp, `{"output_tokens":6}`, 0, -1, -1, 6, -1},
		{"vllm: input is the whole prompt, no cache counts", VLLM, `{"input_tokens":40,"output_tokens":7}`, 40, -1, -1, 7, -1},
		{"vllm with a cache read", VLLM, `{"input_tokens":40,"cache_read_input_tokens":32,"output_tokens":7}`, 40, 32, -1, 7, -1},
		{"sglang: the cache read is part of input_tokens", SGLang, `{"input_tokens":40,"output_tokens":7,"cache_read_input_tokens":32}`, 40, 32, -1, 7, -1},
		{"sglang without its cache report", SGLang, `{"input_tokens":40,"output_tokens":7,"cache_read_input_tokens":0}`, 40, 0, -1, 7, -1},
		{"sglang claiming more read than the prompt", SGLang, `{"input_tokens":40,"output_tokens":7,"cache_read_input_tokens":50}`, 40, 40, -1, 7, -1},
		{"rill: the three add up to the prompt", Rill, `{"input_tokens":3,"cache_creation_input_tokens":16,"cache_read_input_tokens":32,"output_tokens":9,"output_tokens_details":{"thinking_tokens":4}}`, 51, 32, 16, 9, 4},
	}
	for _, tt := range tests {
		var u wireMessagesUsage
		if err := json.Unmarshal([]byte(tt.usage), &u); err != nil {
			t.Fatal(err)
		}
		st := tt.kind.stats(tt.kind.messagesUsage(&u), nil, false)
		nilOr := func(p *int) int {
			if p == nil {
				return -1
			}
			return *p
		}
		cached := -1
		if st.CachedTokens != nil {
			cached = int(*st.CachedTokens)
		}
		if st.PromptTokens != tt.prompt || cached != tt.cached || nilOr(st.CacheWriteTokens) != tt.written ||
			st.CompletionTokens != tt.completion || nilOr(st.ReasoningTokens) != tt.reasoning {
			t.Errorf("%s: stats prompt %d cached %d written %d completion %d reasoning %d, want %d %d %d %d %d", tt.name,
				st.PromptTokens, cached, nilOr(st.CacheWriteTokens), st.CompletionTokens, nilOr(st.ReasoningTokens),
				tt.prompt, tt.cached, tt.written, tt.completion, tt.reasoning)
		}
	}
}

func TestMessagesDecoder(t *testing.T) {
	t.Parallel()
	// What one decoder makes of a stream with every kind of block, in
	// order: per event, the chunk's content, reasoning, call fragments
	// (index:id:name:arguments), finish reason, and whether it has usage,
	// opening counts or an error.
	events := []struct{ data, want string }{
		{`{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"cache_read_input_tokens":8,"input_tokens":4,"output_tokens":0}}}`, "opening"},
		{`{"type":"ping"}`, ""},
		{`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`, ""},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`, "reasoning hmm"},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":""}}`, ""},
		{`{"type":"content_block_stop","index":0}`, ""},
		{`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`, ""},
		{`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}`, "text Hi"},
		{`{"type":"content_block_stop","index":1}`, ""},
		{`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_a","name":"f","input":{}}}`, ""},
		{`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`, "call 0:toolu_a:f:{\"a\":"},
		{`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}`, "call 0:::1}"},
		{`{"type":"content_block_stop","index":2}`, ""},
		{`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_b","name":"g"}}`, ""},
		{`{"type":"content_block_stop","index":3}`, "call 1:toolu_b:g:"},
		// llama.cpp's own index for a call's deltas may differ from its start's.
		{`{"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_c","name":"h"}}`, ""},
		{`{"type":"content_block_delta","index":7,"delta":{"type":"input_json_delta","partial_json":"{}"}}`, "call 2:toolu_c:h:{}"},
		{`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":12}}`, "finish tool_calls usage"},
		{`{"type":"message_stop"}`, ""},
	}
	d := newMessagesDecoder(LlamaCpp)
	var final wireChunk
	for i, ev := range events {
		var ch wireChunk
		if err := d.decode([]byte(ev.data), &ch); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got := describe(&ch); got != ev.want {
			t.Errorf("event %d %s: got %q, want %q", i, ev.data, got, ev.want)
		}
		if ch.Usage != nil {
			final = ch
		}
	}
	// The final usage is message_delta's over message_start's.
	st := LlamaCpp.stats(final.Usage, nil, false)
	if st.PromptTokens != 12 || st.CompletionTokens != 12 || *st.CachedTokens != 8 || *st.CacheWriteTokens != 4 {
		t.Errorf("final stats %+v", st)
	}

	for _, tt := range []struct{ name, data, want string }{
		{"an error event", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`, `error {"type":"overloaded_error","message":"busy"}`},
		{"llama.cpp's error object", `{"code":500,"message":"boom","type":"server_error"}`, `error {"code":500,"message":"boom","type":"server_error"}`},
		{"max_tokens", `{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":1}}`, "finish length usage"},
		{"stop_sequence", `{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"x"},"usage":{"output_tokens":1}}`, "finish stop usage"},
		{"a whole message", `{"id":"m","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"t","signature":""},{"type":"text","text":"Hi"},` +
			`{"type":"tool_use","id":"toolu_a","name":"f","input":{"a": 1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}`,
			"message Hi/t/:toolu_a:f:{\"a\":1} finish tool_calls usage"},
	} {
		var ch wireChunk
		if err := newMessagesDecoder(VLLM).decode([]byte(tt.data), &ch); err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := describe(&ch); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
	var ch wireChunk
	if err := newMessagesDecoder(VLLM).decode([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`), &ch); err == nil {
		t.Error("arguments without a tool_use block were read")
	}
}

// describe writes what a chunk holds, for TestMessagesDecoder.
func describe(ch *wireChunk) string {
	var parts []string
	if ch.opening != nil {
		parts = append(parts, "opening")
	}
	for _, c := range ch.Choices {
		if c.Index != 0 {
			parts = append(parts, "choice!=0")
		}
		if d := c.Delta; d != nil {
			if d.Content != nil {
				parts = append(parts, "text "+*d.Content)
			}
			if d.ReasoningContent != nil {
				parts = append(parts, "reasoning "+*d.ReasoningContent)
			}
			for _, tc := range d.ToolCalls {
				idx := -1
				if tc.Index != nil {
					idx = *tc.Index
				}
				parts = append(parts, "call "+itoa(idx)+":"+tc.ID+":"+tc.Function.Name+":"+tc.Function.Arguments)
			}
		}
		if m := c.Message; m != nil {
			s := "message " + *m.Content + "/" + *m.ReasoningContent + "/"
			for _, tc := range m.ToolCalls {
				s += ":" + tc.ID + ":" + tc.Function.Name + ":" + tc.Function.Arguments
			}
			parts = append(parts, s)
		}
		if c.FinishReason != nil {
			parts = append(parts, "finish "+*c.FinishReason)
		}
	}
	if ch.Usage != nil {
		parts = append(parts, "usage")
	}
	if len(ch.Error) > 0 {
		parts = append(parts, "error "+string(ch.Error))
	}
	return strings.Join(parts, " ")
}

func itoa(i int) string { return strconv.Itoa(i) }
