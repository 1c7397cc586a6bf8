package openapi

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestLoadOnce(t *testing.T) {
	t.Parallel()
	a, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load()
	if err != nil || a != b {
		t.Fatalf("second Load: %p %v, first %p", b, err, a)
	}
	if !strings.HasPrefix(a.OpenAPI, "3.0.") {
		t.Errorf("openapi version %q, want 3.0.x", a.OpenAPI)
	}
	for _, op := range []struct{ method, path string }{
		{"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}, {"GET", "/v1/models"},
		{"GET", "/v1/models/{model}"}, {"GET", "/health"}, {"GET", "/openapi.yaml"},
		{"GET", "/v1/chat/completions"}, {"GET", "/v1/completions"},
		{"POST", "/v1/responses"}, {"GET", "/v1/responses"}, {"GET", "/v1/responses/{response_id}"},
		{"DELETE", "/v1/responses/{response_id}"},
	} {
		item := a.Paths.Find(op.path)
		if item == nil || item.GetOperation(op.method) == nil {
			t.Errorf("no operation %s %s", op.method, op.path)
		}
	}
	if len(Spec()) == 0 {
		t.Error("empty Spec")
	}
}

func TestValidateBody(t *testing.T) {
	t.Parallel()
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	const chat, comp, resp, msgs, count = "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"
	const user = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		path, body  string
		param, code string // both empty with ok
		ok          bool
	}{
		{chat, `{"model":"m",` + user + `}`, "", "", true},
		{chat, `{"model":"m",` + user + `,"unknown_field":{"x":1},"user":"u","store":true}`, "", "", true},
		{chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":null,"n":null,"stream_options":{}}`, "", "", true},
		{chat, `{"model":"m",` + user + `,"prediction":{"type":"content","content":"abc"},"top_k":5,"min_p":0.1,"ignore_eos":true,"no_draft":false}`, "", "", true},
		{chat, `{"model":"m",` + user + `,"reasoning_effort":"high"}`, "", "", true},
		{chat, `{"model":"m",` + user + `,"reasoning_effort":"extreme"}`, "reasoning_effort", "invalid_value", false},
		{chat, `{"model":"m","messages":[{"role":"bad","content":"hi"}]}`, "messages[0].role", "invalid_value", false},
		{chat, `{"model":"m","messages":[]}`, "messages", "empty_array", false},
		{chat, `{"model":"m"}`, "messages", "missing_required_parameter", false},
		{chat, `{` + user + `}`, "model", "missing_required_parameter", false},
		{chat, `{"model":"m",` + user + `,"max_tokens":"ten"}`, "max_tokens", "invalid_type", false},
		{chat, `{"model":"m",` + user + `,"max_tokens":1.5}`, "max_tokens", "invalid_type", false},
		{chat, `{"model":"m",` + user + `,"max_tokens":0}`, "max_tokens", "integer_below_min_value", false},
		{chat, `{"model":"m",` + user + `,"n":129}`, "n", "integer_above_max_value", false},
		{chat, `{"model":"m",` + user + `,"temperature":-0.1}`, "temperature", "decimal_below_min_value", false},
		{chat, `{"model":"m",` + user + `,"top_p":1.01}`, "top_p", "decimal_above_max_value", false},
		{chat, `{"model":"m",` + user + `,"stop":["a","b","c","d","e"]}`, "stop", "array_above_max_length", false},
		{chat, `{"model":"m",` + user + `,"stop":5}`, "stop", "invalid_type", false},
		{chat, `{"model":"m",` + user + `,"stop":[1]}`, "stop[0]", "invalid_type", false},
		{chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"bogus"}]}]}`, "messages[0].content[0].type", "invalid_value", false},
		{chat, `{"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type", "missing_required_parameter", false},
		{chat, `{"model":"m",` + user + `,"prediction":{"type":"other","content":"x"}}`, "prediction.type", "invalid_value", false},
		{chat, `{"model":"m",` + user + `,"stream_options":{"include_usage":"yes"}}`, "stream_options.include_usage", "invalid_type", false},
		{chat, `{"model":"m",` + user + `,"model":5}`, "model", "invalid_type", false},
		{chat, `[1,2]`, "", "invalid_type", false},
		{chat, `{"model":"m",`, "", "", false},
		{chat, ``, "", "", false},
		{chat, `{"model":"m"} trailing`, "", "", false},
		// Invalid UTF-8, which encoding/json would turn into U+FFFD.
		{chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xffb\"}]}", "", "", false},
		{chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", "", "", false},
		{chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xe2\x82\"}]}", "", "", false},
		{chat, "{\"model\":\"m\"," + user + ",\"\xfe\":1}", "", "", false},
		{chat, `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83e\udd8a"}]}`, "", "", true},
		{chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"café 🦊\"}]}", "", "", true},
		{comp, `{"model":"m","prompt":"x"}`, "", "", true},
		{comp, `{"model":"m","prompt":["x","y"]}`, "", "", true},
		{comp, `{"model":"m","prompt":[1,2]}`, "", "", true},
		{comp, `{"model":"m","prompt":[[1],[2,3]],"logprobs":5}`, "", "", true},
		{comp, `{"model":"m","prompt":["a",1]}`, "prompt[1]", "invalid_type", false},
		{comp, `{"model":"m","prompt":[]}`, "prompt", "empty_array", false},
		{comp, `{"model":"m","prompt":[[1,2],[]]}`, "prompt[1]", "empty_array", false},
		{comp, `{"model":"m","prompt":5}`, "prompt", "invalid_type", false},
		{comp, `{"model":"m","prompt":[` + strings.Repeat(`"x",`, 2048) + `"x"]}`, "prompt", "array_above_max_length", false},
		{comp, `{"model":"m","prompt":[` + strings.Repeat(`1,`, 4096) + `1]}`, "", "", true},
		{comp, `{"model":"m","prompt":"x","logprobs":6}`, "logprobs", "integer_above_max_value", false},
		{resp, `{"model":"m","input":"x"}`, "", "", true},
		{resp, `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"item_reference","id":"msg_1"}],"instructions":null,"store":false,"metadata":{"a":"b"},"type":"response.create","stream_id":"x"}`, "", "", true},
		{resp, `{"model":"m","previous_response_id":"resp_1","tools":[],"tool_choice":"none","text":{"format":{"type":"text"}},"reasoning":{"effort":"low"}}`, "", "", true},
		{resp, `{"input":"x"}`, "model", "missing_required_parameter", false},
		{resp, `{"model":"m","input":{"text":"x"}}`, "input", "invalid_type", false},
		{resp, `{"model":"m","input":[{"role":"wizard","content":"x"}]}`, "input[0].role", "invalid_value", false},
		{resp, `{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens", "integer_below_min_value", false},
		{resp, `{"model":"m","input":"x","top_logprobs":21}`, "top_logprobs", "integer_above_max_value", false},
		{resp, `{"model":"m","input":"x","text":{"format":{"type":"yaml"}}}`, "text.format.type", "invalid_value", false},
		{resp, `{"model":"m","input":"x","tool_choice":"sometimes"}`, "tool_choice", "invalid_value", false},
		// What Claude Code sends: system blocks with cache_control, a system
		// message, tools, thinking adaptive, and members of its betas.
		{msgs, `{"model":"m","max_tokens":32000,"stream":true,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328; cch=00000;"},` +
			`{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"system","content":"r"},` +
			`{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}],` +
			`"tools":[{"name":"Bash","description":"Run.","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}],` +
			`"thinking":{"type":"adaptive"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"high"},` +
			`"metadata":{"user_id":"user_abc_account__session_x"}}`, "", "", true},
		{msgs, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"1"}],"is_error":false}]}],"tool_choice":{"type":"any","disable_parallel_tool_use":true}}`, "", "", true},
		{msgs, `{"model":"m","messages":[{"role":"user","content":"q"}]}`, "max_tokens", "missing_required_parameter", false},
		{msgs, `{"model":"m","max_tokens":8,"messages":[{"role":"tool","content":"q"}]}`, "messages[0].role", "invalid_value", false},
		{msgs, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}],"temperature":1.5}`, "temperature", "decimal_above_max_value", false},
		{msgs, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}],"tool_choice":{"type":"required"}}`, "tool_choice.type", "invalid_value", false},
		{msgs, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}],"thinking":{"type":"enabled","budget_tokens":100}}`, "thinking.budget_tokens", "integer_below_min_value", false},
		{msgs, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type", "missing_required_parameter", false},
		{count, `{"model":"m","messages":[{"role":"user","content":"q"}],"system":"s","tools":[]}`, "", "", true},
		{count, `{"model":"m"}`, "messages", "missing_required_parameter", false},
	}
	for _, tt := range tests {
		err := v.ValidateBody(context.Background(), "POST", tt.path, []byte(tt.body))
		if tt.ok {
			if err != nil {
				t.Errorf("%s: %v", tt.body, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: error %v, want a *FieldError", tt.body, err)
			continue
		}
		if fe.Param != tt.param || fe.Code != tt.code || fe.Message == "" {
			t.Errorf("%s: param %q code %q (%s), want param %q code %q", tt.body, fe.Param, fe.Code, fe.Message, tt.param, tt.code)
		}
	}
	bad := []byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xffb\"}]}")
	if err := v.ValidateBody(context.Background(), "POST", chat, bad); err == nil ||
		!strings.Contains(err.Error(), "not valid UTF-8 (at byte 52)") {
		t.Errorf("invalid UTF-8: %v, want it named with its offset", err)
	}
	if err := v.ValidateBody(context.Background(), "POST", "/v1/nothing", []byte(`{}`)); err == nil {
		t.Error("unknown operation accepted")
	}
}

// TestErrorMessagesAreShort: messages quote a bounded prefix of the value.
func TestErrorMessagesAreShort(t *testing.T) {
	t.Parallel()
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","messages":[{"role":"` + strings.Repeat("x", 10000) + `","content":"hi"}]}`
	err = v.ValidateBody(context.Background(), "POST", "/v1/chat/completions", []byte(body))
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("message of %d bytes: %.400v", len(err.Error()), err)
	}
}

func TestValidateSchema(t *testing.T) {
	t.Parallel()
	const usage = `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`
	const responsesUsage = `{"input_tokens":3,"output_tokens":2,"total_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`
	tests := []struct {
		component, doc string
		ok             bool
	}{
		{"CompletionUsage", usage, true},
		{"CompletionUsage", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":null,"completion_tokens_details":null}`, true},
		{"CompletionUsage", `{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"accepted_prediction_tokens":null,"rejected_prediction_tokens":1}}`, true},
		{"CompletionUsage", `{"prompt_tokens":3,"completion_tokens":2}`, false},
		{"CompletionUsage", `{"prompt_tokens":-1,"completion_tokens":2,"total_tokens":1}`, false},
		// docs/design.md §3 rule 12: OpenAI's schema requires the Responses usage's
		// cached, cache write and reasoning counts, as numbers.
		{"ResponseUsage", responsesUsage, true},
		{"ResponseUsage", `{"input_tokens":3,"output_tokens":2,"total_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":1,"rejected_prediction_tokens":0}}`, true},
		{"ResponseUsage", `{"input_tokens":3,"output_tokens":2,"total_tokens":5}`, false},
		{"ResponseUsage", `{"input_tokens":3,"output_tokens":2,"total_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0}}`, false},
		{"ResponseUsage", `{"input_tokens":3,"output_tokens":2,"total_tokens":5,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`, false},
		{"ResponseUsage", `{"input_tokens":3,"output_tokens":2,"total_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":null},"output_tokens_details":{"reasoning_tokens":0}}`, false},
		{"ResponseUsage", `{"input_tokens":3,"output_tokens":2,"total_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":null}`, false},
		{"ResponseUsage", `{"input_tokens":3,"output_tokens":2,"total_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens_details":{}}`, false},
		{"CreateChatCompletionStreamResponse", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`, true},
		{"CreateChatCompletionStreamResponse", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":` + usage + `}`, true},
		{"CreateChatCompletionStreamResponse", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`, true},
		{"CreateChatCompletionStreamResponse", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"eos"}]}`, false},
		{"CreateChatCompletionStreamResponse", `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[]}`, false},
		{"CreateCompletionStreamResponse", `{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"text":"x","index":0,"logprobs":null,"finish_reason":null}]}`, true},
		{"CreateCompletionStreamResponse", `{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"text":"x","index":0,"logprobs":{"tokens":["x"],"token_logprobs":[-0.5],"top_logprobs":[{"x":-0.5}],"text_offset":[0]},"finish_reason":"length"}]}`, true},
		{"CreateCompletionResponse", `{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"text":"x","index":0,"logprobs":null,"finish_reason":null}],"usage":` + usage + `}`, false},
		{"CreateChatCompletionResponse", `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"logprobs":{"content":[{"token":"x","logprob":-1,"bytes":[120],"top_logprobs":[]}]},"finish_reason":"stop"}],"usage":` + usage + `}`, true},
		{"CreateChatCompletionResponse", `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[],"usage":null}`, false},
		{"ErrorResponse", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`, true},
		{"ErrorResponse", `{"error":{"message":"m","type":"invalid_request_error"}}`, false},
		{"ListModelsResponse", `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"rill","context_length":4096,"description":"d","n_params":30,"n_active_params":3}]}`, true},
		{"Model", `{"id":"m","object":"model","created":0}`, false},
		{"Health", `{"status":"ok"}`, true},
		{"WebSocketClientMessage", `{"type":"create","request_id":"r1","body":{"model":"m","messages":[]}}`, true},
		{"WebSocketClientMessage", `{"type":"cancel","request_id":"r1"}`, true},
		{"WebSocketClientMessage", `{"type":"cancel"}`, false},
		{"WebSocketClientMessage", `{"type":"close","request_id":"r1"}`, false},
		{"WebSocketClientMessage", `{"type":"create","request_id":"","body":{}}`, false},
		{"WebSocketServerMessage", `{"type":"chunk","request_id":"r1","chunk":{"id":"c","object":"text_completion","created":1,"model":"m","choices":[]}}`, true},
		{"WebSocketServerMessage", `{"type":"chunk","request_id":"r1","chunk":{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[]}}`, false},
		{"WebSocketServerMessage", `{"type":"done","request_id":"r1"}`, true},
		{"WebSocketServerMessage", `{"type":"error","request_id":null,"status":400,"error":{"message":"m","type":"invalid_request_error","param":null,"code":"invalid_json"}}`, true},
		{"WebSocketServerMessage", `{"type":"error","request_id":"r1","status":400,"error":{"message":"m"}}`, false},
		{"WebSocketServerMessage", `{"type":"ping","request_id":null}`, false},
	}
	for _, tt := range tests {
		err := ValidateSchema(tt.component, []byte(tt.doc))
		if tt.ok && err != nil {
			t.Errorf("%s %s: %v", tt.component, tt.doc, err)
		}
		if !tt.ok {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("%s %s: %v, want a *FieldError", tt.component, tt.doc, err)
			}
		}
	}
	if err := ValidateSchema("NoSuchThing", []byte(`{}`)); err == nil {
		t.Error("unknown component accepted")
	}
	if err := ValidateSchema("Health", []byte(`{`)); err == nil {
		t.Error("broken JSON accepted")
	}
}

// TestExtensionsSayRill: every rill extension field says so, and request
// schemas accept unknown fields.
func TestExtensionsSayRill(t *testing.T) {
	t.Parallel()
	doc, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	extensions := map[string][]string{
		"CreateChatCompletionRequest": {"top_k", "min_p", "ignore_eos", "no_draft"},
		"CreateCompletionRequest":     {"top_k", "min_p", "ignore_eos", "no_draft"},
		"CreateResponseRequest":       {"top_k", "min_p", "seed", "ignore_eos", "no_draft"},
		"CreateMessageRequest":        {"min_p", "seed", "ignore_eos", "no_draft"},
		"Model":                       {"context_length", "description", "n_params", "n_active_params"},
	}
	for component, fields := range extensions {
		s := doc.Components.Schemas[component].Value
		for _, f := range fields {
			p := s.Properties[f]
			if p == nil || !strings.Contains(p.Value.Description, "rill extension") {
				t.Errorf("%s.%s is not described as a rill extension", component, f)
			}
		}
	}
	for _, component := range []string{"CreateChatCompletionRequest", "CreateCompletionRequest",
		"ChatCompletionRequestMessage", "ChatCompletionRequestContentPart",
		"CreateMessageRequest", "CountMessageTokensRequest", "MessageParam", "MessageContentBlockParam", "MessageTool"} {
		s := doc.Components.Schemas[component].Value
		if s.AdditionalProperties.Has != nil && !*s.AdditionalProperties.Has {
			t.Errorf("%s rejects unknown fields", component)
		}
	}
}

// TestDetailsNullable pins docs/design.md §3 rule 8: every chat usage detail is
// nullable. The Responses usage's are required instead (rule 12, see
// TestValidateSchema's ResponseUsage cases).
func TestDetailsNullable(t *testing.T) {
	t.Parallel()
	doc, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ schema, name string }{
		{"CompletionUsage", "prompt_tokens_details"}, {"CompletionUsage", "completion_tokens_details"},
	} {
		name := d.name
		details := doc.Components.Schemas[d.schema].Value.Properties[name].Value
		if !details.Nullable {
			t.Errorf("%s not nullable", name)
		}
		for field, p := range details.Properties {
			if !p.Value.Nullable {
				t.Errorf("%s.%s not nullable", name, field)
			}
		}
	}
}
