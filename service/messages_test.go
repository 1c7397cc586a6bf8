package service

import (
	"encoding/json"
	"reflect"
	"testing"

	"rill/engine"
)

// TestChatPlanToolHistory: an agent loop's messages reach the engine whole:
// an assistant turn with tool calls and null content, its reasoning, the
// tool results with their call ids; chat_template_kwargs as raw JSON.
func TestChatPlanToolHistory(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","messages":[
		{"role":"user","content":"Weather in Paris and Rome?"},
		{"role":"assistant","content":null,"reasoning_content":"Two cities: two calls.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"},
		{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"rain"}]},
		{"role":"assistant","content":"Sunny in Paris, rain in Rome."}],
		"chat_template_kwargs":{"enable_thinking":false,"budget":1024,"opts":{"b":1,"a":2}}}`
	p, e := chatPlanOf(t, body)
	if e != nil {
		t.Fatalf("chatPlan: %v", e)
	}
	req := p.reqs[0]
	want := []engine.Message{
		{Role: engine.RoleUser, Content: "Weather in Paris and Rome?"},
		{Role: engine.RoleAssistant, NullContent: true, ReasoningContent: "Two cities: two calls.", ToolCalls: []engine.ToolCall{
			{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{ID: "call_2", Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
		{Role: engine.RoleTool, ToolCallID: "call_1", Content: "sunny"},
		{Role: engine.RoleTool, ToolCallID: "call_2", Content: "rain"},
		{Role: engine.RoleAssistant, Content: "Sunny in Paris, rain in Rome."},
	}
	if !reflect.DeepEqual(req.Messages, want) {
		t.Errorf("messages\n%+v\nwant\n%+v", req.Messages, want)
	}
	kw := map[string]any{"enable_thinking": json.RawMessage("false"), "budget": json.RawMessage("1024"), "opts": json.RawMessage(`{"b":1,"a":2}`)}
	if !reflect.DeepEqual(req.ChatTemplateKwargs, kw) {
		t.Errorf("kwargs %v, want %v", req.ChatTemplateKwargs, kw)
	}
}
