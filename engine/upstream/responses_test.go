package upstream

import (
	"strings"
	"testing"

	"rill/engine"
)

func TestUseResponses(t *testing.T) {
	t.Parallel()
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "hi"}}
	base := engine.Request{Model: "m", Messages: msgs, Responses: true}
	with := func(f func(r *engine.Request)) *engine.Request {
		r := base
		f(&r)
		return &r
	}
	tests := []struct {
		name string
		kind Kind
		req  *engine.Request
		n    int
		want bool
	}{
		{"openai", OpenAI, &base, 1, true},
		{"vllm", VLLM, &base, 1, true},
		{"rill", Rill, &base, 1, true},
		{"llama.cpp translates to chat", LlamaCpp, &base, 1, false},
		{"sglang translates to chat", SGLang, &base, 1, false},
		{"tabbyapi translates to chat", TabbyAPI, &base, 1, false},
		{"a chat request stays chat", VLLM, with(func(r *engine.Request) { r.Responses = false }), 1, false},
		{"several choices", VLLM, &base, 2, false},
		{"stop strings", VLLM, with(func(r *engine.Request) { r.Stop = []string{"x"} }), 1, false},
		{"logprobs", VLLM, with(func(r *engine.Request) { r.Logprobs = true }), 1, false},
		{"openai below its minimum output", OpenAI, with(func(r *engine.Request) { r.MaxTokens = 8 }), 1, false},
		{"openai at its minimum output", OpenAI, with(func(r *engine.Request) { r.MaxTokens = 16 }), 1, true},
		{"vllm with a small output", VLLM, with(func(r *engine.Request) { r.MaxTokens = 8 }), 1, true},
		{"tools go to chat", VLLM, with(func(r *engine.Request) { r.Tools = []engine.Tool{{Name: "f"}} }), 1, false},
		{"tools with tool_choice none go to chat", Rill, with(func(r *engine.Request) {
			r.Tools, r.ToolChoice = []engine.Tool{{Name: "f"}}, engine.ToolChoice{Mode: engine.ToolChoiceNone}
		}), 1, false},
		{"a response format goes to chat", OpenAI, with(func(r *engine.Request) {
			r.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONObject}
		}), 1, false},
		{"tool calls in the history go to chat", VLLM, with(func(r *engine.Request) {
			r.Messages = append(msgs, engine.Message{Role: engine.RoleAssistant, NullContent: true, ToolCalls: []engine.ToolCall{{ID: "c", Name: "f", Arguments: "{}"}}})
		}), 1, false},
		{"a tool result in the history goes to chat", VLLM, with(func(r *engine.Request) {
			r.Messages = append(msgs, engine.Message{Role: engine.RoleTool, Content: "1", ToolCallID: "c"})
		}), 1, false},
	}
	for _, tt := range tests {
		if got := useResponses(tt.kind, tt.req, tt.n); got != tt.want {
			t.Errorf("%s: useResponses = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestEncodeResponsesRequest(t *testing.T) {
	t.Parallel()
	seed := int64(3)
	req := &engine.Request{Model: "m", Responses: true, MaxTokens: 20, IgnoreEOS: true, NoDraft: true, CacheKey: "s1",
		Messages: []engine.Message{{Role: engine.RoleSystem, Content: "be brief"}, {Role: engine.RoleUser, Content: "hi"}},
		Sampling: engine.Sampling{Temperature: 0.5, TopP: 0.9, TopK: 4, Seed: &seed}}
	body, err := encodeResponsesRequest(Rill, "up", req)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"model":"up","input":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"stream":true,"store":false,"max_output_tokens":20,"temperature":0.5,"top_p":0.9,"top_k":4,"seed":3,"ignore_eos":true,"no_draft":true,"prompt_cache_key":"s1"}`
	if string(body) != want {
		t.Errorf("rill:\n got  %s\n want %s", body, want)
	}
	if _, err := encodeResponsesRequest(OpenAI, "up", req); err == nil {
		t.Error("openai accepted top_k")
	}
	req.Sampling.TopK, req.IgnoreEOS = 0, false
	body, err = encodeResponsesRequest(OpenAI, "up", req)
	if err != nil || strings.Contains(string(body), "seed") || strings.Contains(string(body), "no_draft") || !strings.Contains(string(body), `"prompt_cache_key":"s1"`) {
		t.Errorf("openai: %s %v", body, err)
	}
	body, err = encodeResponsesRequest(VLLM, "up", req)
	if err != nil || strings.Contains(string(body), "prompt_cache_key") {
		t.Errorf("vllm: %s %v", body, err)
	}
}

func TestDecodeResponseEvent(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name, event string
		text        *string
		finish      string
		usage       *wireUsage
		err         string // part of the error member
	}{
		{name: "delta", event: `{"type":"response.output_text.delta","sequence_number":4,"item_id":"m","output_index":0,"content_index":0,"delta":"Hel","logprobs":[]}`,
			text: ptr("Hel")},
		{name: "opening", event: `{"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress","usage":null}}`},
		{name: "reasoning delta", event: `{"type":"response.reasoning_text.delta","sequence_number":3,"delta":"hmm"}`},
		{name: "completed", event: `{"type":"response.completed","sequence_number":9,"response":{"status":"completed","incomplete_details":null,"usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":16,"cache_write_tokens":14},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":35}}}`,
			finish: "stop", usage: &wireUsage{PromptTokens: f(30), CompletionTokens: f(5)}},
		{name: "incomplete", event: `{"type":"response.incomplete","sequence_number":9,"response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":30,"output_tokens":16,"total_tokens":46}}}`,
			finish: "length", usage: &wireUsage{PromptTokens: f(30), CompletionTokens: f(16)}},
		{name: "failed", event: `{"type":"response.failed","sequence_number":5,"response":{"status":"failed","error":{"code":"server_error","message":"boom"},"usage":null}}`,
			err: "boom"},
		{name: "flat error", event: `{"type":"error","sequence_number":2,"code":"invalid_prompt","message":"bad","param":null}`, err: "bad"},
		{name: "nested error", event: `{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"x","message":"worse","param":"input"}}`, err: "worse"},
	}
	for _, tt := range tests {
		var ch wireChunk
		if err := decodeResponseEvent([]byte(tt.event), &ch); err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		var text *string
		finish := ""
		for _, c := range ch.Choices {
			if c.Index != 0 {
				t.Errorf("%s: choice %d", tt.name, c.Index)
			}
			if c.Delta != nil {
				text = c.Delta.Content
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if (text == nil) != (tt.text == nil) || text != nil && *text != *tt.text || finish != tt.finish {
			t.Errorf("%s: text %v finish %q", tt.name, text, finish)
		}
		if tt.usage != nil {
			u := ch.Usage
			if u == nil || *u.PromptTokens != *tt.usage.PromptTokens || *u.CompletionTokens != *tt.usage.CompletionTokens {
				t.Errorf("%s: usage %+v", tt.name, u)
			}
		} else if ch.Usage != nil {
			t.Errorf("%s: usage on an event without one", tt.name)
		}
		if tt.err != "" != (len(ch.Error) > 0) || tt.err != "" && !strings.Contains(string(ch.Error), tt.err) {
			t.Errorf("%s: error %s, want one with %q", tt.name, ch.Error, tt.err)
		}
	}
	// The details reach Stats through the kind's rules.
	var ch wireChunk
	if err := decodeResponseEvent([]byte(tests[3].event), &ch); err != nil {
		t.Fatal(err)
	}
	st := VLLM.stats(ch.Usage, nil, false)
	if st.PromptTokens != 30 || st.CompletionTokens != 5 || st.CachedTokens == nil || *st.CachedTokens != 16 ||
		st.CacheWriteTokens == nil || *st.CacheWriteTokens != 14 ||
		st.ReasoningTokens == nil || *st.ReasoningTokens != 2 || st.DraftAccepted != nil {
		t.Errorf("stats %+v", st)
	}
}
