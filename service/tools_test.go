package service

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"rill/engine"
)

// toolEvents are an engine's events for two choices: choice 0 says a word,
// then calls two tools, its arguments in pieces, one delta sharing an event
// with content; choice 1 only calls a tool.
func toolEvents() []engine.Event {
	st := &engine.Stats{PromptTokens: 5, CompletionTokens: 9}
	return []engine.Event{
		{Choice: 0, Text: "Checking."},
		{Choice: 0, ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather", Arguments: `{"city": `}}},
		{Choice: 1, ToolCalls: []engine.ToolCallDelta{{Index: 0, ID: "call_c", Name: "add"}}},
		{Choice: 0, ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `"Oslo"}`}, {Index: 1, ID: "call_b", Name: "add", Arguments: `{"a":1,`}}},
		{Choice: 1, ToolCalls: []engine.ToolCallDelta{{Index: 0, Arguments: `{"a":2,"b":3}`}}},
		{Choice: 0, Text: " ", ToolCalls: []engine.ToolCallDelta{{Index: 1, Arguments: `"b":2}`}}},
		{Choice: 0, Final: true, FinishReason: engine.FinishToolCalls, Stats: st},
		{Choice: 1, Final: true, FinishReason: engine.FinishToolCalls, Stats: st},
	}
}

// wantCalls are toolEvents' calls, as the non-streamed message has them.
var wantCalls = [][]map[string]any{
	{
		{"id": "call_a", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Oslo"}`}},
		{"id": "call_b", "type": "function", "function": map[string]any{"name": "add", "arguments": `{"a":1,"b":2}`}},
	},
	{
		{"id": "call_c", "type": "function", "function": map[string]any{"name": "add", "arguments": `{"a":2,"b":3}`}},
	},
}

func toolServer(t *testing.T) (*fakeEngine, string) {
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: toolEvents()}, nil
	}}
	return fake, newTestServer(t, fake, Options{}).URL
}

const toolRequest = `{"model":"tiny","messages":[{"role":"user","content":"weather?"}],"n":2,
  "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
           {"type":"function","function":{"name":"add"}}],
  "tool_choice":"required","response_format":{"type":"json_object"},"logit_bias":{"3":-100}`

// TestToolCallsResponse: the non-streamed message carries tool_calls with
// ids and type function, content null when the reply only calls tools, and
// finish_reason tool_calls; the request's fields reached the engine.
func TestToolCallsResponse(t *testing.T) {
	t.Parallel()
	fake, url := toolServer(t)
	resp, body := post(t, http.DefaultClient, url+"/v1/chat/completions", toolRequest+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	mustValidate(t, "CreateChatCompletionResponse", body)
	var r struct {
		Choices []struct {
			Message struct {
				Content   *string          `json:"content"`
				ToolCalls []map[string]any `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	for i, c := range r.Choices {
		if !reflect.DeepEqual(c.Message.ToolCalls, wantCalls[i]) || c.FinishReason != "tool_calls" {
			t.Fatalf("choice %d: calls %v, finish %q\n%s", i, c.Message.ToolCalls, c.FinishReason, body)
		}
	}
	if c := r.Choices[0].Message.Content; c == nil || *c != "Checking. " {
		t.Fatalf("choice 0 content %v", c)
	}
	if r.Choices[1].Message.Content != nil {
		t.Fatalf("choice 1 only calls tools but has content %q", *r.Choices[1].Message.Content)
	}
	req := fake.requests()[0]
	if len(req.Tools) != 2 || req.ToolChoice.Mode != engine.ToolChoiceRequired ||
		req.ResponseFormat.Type != engine.FormatJSONObject || req.LogitBias[3] != -100 {
		t.Fatalf("engine request %+v", req)
	}
}

// TestToolCallsStream: the streamed tool-call fragments validate, carry the
// id, type and name first and argument pieces after, and openai-go's
// accumulator assembles the same calls as the non-streamed message.
func TestToolCallsStream(t *testing.T) {
	t.Parallel()
	_, url := toolServer(t)
	resp, body := post(t, http.DefaultClient, url+"/v1/chat/completions", toolRequest+`,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	acc := openai.ChatCompletionAccumulator{}
	sawHeader := map[[2]int]bool{}
	for i, data := range dataEvents(t, parseSSE(t, body)) {
		mustValidate(t, "CreateChatCompletionStreamResponse", data)
		var chunk openai.ChatCompletionChunk
		if err := json.Unmarshal(data, &chunk); err != nil {
			t.Fatal(err)
		}
		if !acc.AddChunk(chunk) {
			t.Fatalf("the accumulator refused chunk %d: %s", i, data)
		}
		var raw struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content   *string          `json:"content"`
					ToolCalls []map[string]any `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		for _, c := range raw.Choices {
			if c.Delta.ToolCalls != nil && c.Delta.Content != nil {
				t.Fatalf("chunk %d mixes content and tool calls: %s", i, data)
			}
			for _, tc := range c.Delta.ToolCalls {
				key := [2]int{c.Index, int(tc["index"].(float64))}
				_, hasID := tc["id"]
				if hasID == sawHeader[key] {
					t.Fatalf("chunk %d: call %v has id %v, header seen before %v: %s", i, key, hasID, sawHeader[key], data)
				}
				if hasID && (tc["type"] != "function" || tc["function"].(map[string]any)["name"] == nil) {
					t.Fatalf("chunk %d: first fragment without type or name: %s", i, data)
				}
				sawHeader[key] = true
			}
		}
	}
	for i, c := range acc.Choices {
		var got []map[string]any
		for _, tc := range c.Message.ToolCalls {
			got = append(got, map[string]any{"id": tc.ID, "type": string(tc.Type),
				"function": map[string]any{"name": tc.Function.Name, "arguments": tc.Function.Arguments}})
		}
		if !reflect.DeepEqual(got, wantCalls[i]) || c.FinishReason != "tool_calls" {
			t.Fatalf("choice %d accumulated %v, finish %q", i, got, c.FinishReason)
		}
	}
	if acc.Choices[0].Message.Content != "Checking. " {
		t.Fatalf("content %q", acc.Choices[0].Message.Content)
	}
}

// TestToolRequestErrors: what only the engine can judge comes back as its
// 400 with the field it names.
func TestToolRequestErrors(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return nil, engine.Errorf("invalid_value", "tools[0].function.parameters", "Invalid schema for function 'f': json schema at (root): the keyword \"not\" is not supported")
	}}
	url := newTestServer(t, fake, Options{}).URL
	resp, body := post(t, http.DefaultClient, url+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"not":{}}}}],"tool_choice":"required"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"param":"tools[0].function.parameters"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}
