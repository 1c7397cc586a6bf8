package upstream

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"

	"rill/engine"
)

func TestEncodeRequest(t *testing.T) {
	t.Parallel()
	seed := int64(7)
	chat := []engine.Message{{Role: engine.RoleSystem, Content: "Be brief."}, {Role: engine.RoleUser, Content: "Hi", Name: "ann"}}
	cases := []struct {
		name     string
		kind     Kind
		req      engine.Request
		n        int
		wantPath string
		want     string // the body, as JSON
		wantErr  string // the RequestError's param when refused
	}{
		{"chat defaults", VLLM,
			engine.Request{Messages: chat, Sampling: engine.Sampling{Temperature: 1, TopP: 1}}, 1,
			pathChat, `{"model":"up","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi","name":"ann"}],"stream":true,"stream_options":{"include_usage":true},"temperature":1}`, ""},
		{"chat everything vllm", VLLM,
			engine.Request{Messages: chat, MaxTokens: 9, Stop: []string{"\n"}, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3,
				Prediction: "dropped", NoDraft: true, CacheKey: "dropped",
				Sampling: engine.Sampling{Temperature: 0.5, TopP: 0.9, TopK: 40, MinP: 0.05, PresencePenalty: 0.1, FrequencyPenalty: -0.2, Seed: &seed}}, 2,
			pathChat, `{"model":"up","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi","name":"ann"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":9,"n":2,"stop":["\n"],"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,"presence_penalty":0.1,"frequency_penalty":-0.2,"seed":7,"logprobs":true,"top_logprobs":3,"ignore_eos":true}`, ""},
		{"rill passes its extensions", Rill,
			engine.Request{Messages: chat, IgnoreEOS: true, NoDraft: true, Prediction: "Hello", CacheKey: "s1", Sampling: engine.Sampling{TopK: 5}}, 1,
			pathChat, `{"model":"up","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi","name":"ann"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0,"top_k":5,"prediction":{"type":"content","content":"Hello"},"ignore_eos":true,"no_draft":true,"prompt_cache_key":"s1"}`, ""},
		{"priority as is to vllm", VLLM, engine.Request{Prompt: "x", Priority: ptrTo(-2)}, 1,
			pathCompletions, `{"model":"up","prompt":"x","stream":true,"stream_options":{"include_usage":true},"temperature":0,"priority":-2}`, ""},
		{"priority negated to sglang, whose higher values go first", SGLang, engine.Request{Prompt: "x", Priority: ptrTo(-2)}, 1,
			pathCompletions, `{"model":"up","prompt":"x","stream":true,"stream_options":{"include_usage":true},"temperature":0,"priority":2}`, ""},
		{"priority as is to rill", Rill, engine.Request{Prompt: "x", Priority: ptrTo(3)}, 1,
			pathCompletions, `{"model":"up","prompt":"x","stream":true,"stream_options":{"include_usage":true},"temperature":0,"priority":3}`, ""},
		{"no priority to llama.cpp", LlamaCpp, engine.Request{Prompt: "x", Priority: ptrTo(3)}, 1,
			pathCompletions, `{"model":"up","prompt":"x","stream":true,"stream_options":{"include_usage":true},"temperature":0}`, ""},
		{"reasoning_effort goes to chat", LlamaCpp,
			engine.Request{Messages: chat, ReasoningEffort: "low"}, 1,
			pathChat, `{"model":"up","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi","name":"ann"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0,"reasoning_effort":"low"}`, ""},
		{"tabby names ignore_eos ban_eos_token", TabbyAPI,
			engine.Request{Prompt: "Once", IgnoreEOS: true}, 1,
			pathCompletions, `{"model":"up","prompt":"Once","stream":true,"stream_options":{"include_usage":true},"temperature":0,"ban_eos_token":true}`, ""},
		{"completion token ids with logprobs", LlamaCpp,
			engine.Request{PromptTokens: []int{1, 2, 3}, Logprobs: true, TopLogprobs: 0}, 1,
			pathCompletions, `{"model":"up","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true},"temperature":0,"logprobs":0}`, ""},
		{"empty text prompt is sent", OpenAI,
			engine.Request{Prompt: ""}, 1,
			pathCompletions, `{"model":"up","prompt":"","stream":true,"stream_options":{"include_usage":true},"temperature":0}`, ""},
		{"tools, forced choice, response_format, logit_bias and a tool history", VLLM,
			engine.Request{Messages: []engine.Message{
				{Role: engine.RoleUser, Content: "Weather?"},
				{Role: engine.RoleAssistant, NullContent: true, ToolCalls: []engine.ToolCall{{ID: "call_1", Name: "w", Arguments: `{"c":"Oslo"}`}}},
				{Role: engine.RoleTool, ToolCallID: "call_1", Content: "-3"}},
				Tools:      []engine.Tool{{Name: "w", Description: "weather", Parameters: json.RawMessage(`{"type":"object"}`), Strict: true}},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "w"}, ParallelToolCalls: ptrTo(false),
				ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: json.RawMessage(`{"type":"object"}`), Strict: true},
				LogitBias:      map[int]float64{7: -100}}, 1,
			pathChat, `{"model":"up","messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{\"c\":\"Oslo\"}"}}]},{"role":"tool","content":"-3","tool_call_id":"call_1"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0,"tools":[{"type":"function","function":{"name":"w","description":"weather","parameters":{"type":"object"},"strict":true}}],"tool_choice":{"function":{"name":"w"},"type":"function"},"parallel_tool_calls":false,"response_format":{"type":"json_schema","json_schema":{"name":"response","schema":{"type":"object"},"strict":true}},"logit_bias":{"7":-100}}`, ""},
		{"tool_choice auto is the upstream's default; json_object on completions", LlamaCpp,
			engine.Request{Messages: chat, Tools: []engine.Tool{{Name: "w"}}, ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONObject}}, 1,
			pathChat, `{"model":"up","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi","name":"ann"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0,"tools":[{"type":"function","function":{"name":"w"}}],"response_format":{"type":"json_object"}}`, ""},
		{"tabby takes tools but refuses a forced choice", TabbyAPI,
			engine.Request{Messages: chat, Tools: []engine.Tool{{Name: "w"}}, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}}, 1, "", "", "tool_choice"},
		{"openai refuses top_k", OpenAI, engine.Request{Prompt: "x", Sampling: engine.Sampling{TopK: 3}}, 1, "", "", "top_k"},
		{"openai refuses min_p", OpenAI, engine.Request{Prompt: "x", Sampling: engine.Sampling{MinP: 0.1}}, 1, "", "", "min_p"},
		{"openai refuses ignore_eos", OpenAI, engine.Request{Prompt: "x", IgnoreEOS: true}, 1, "", "", "ignore_eos"},
		{"empty messages", VLLM, engine.Request{Messages: []engine.Message{}}, 1, "", "", "messages"},
		{"top_logprobs range", VLLM, engine.Request{Prompt: "x", Logprobs: true, TopLogprobs: 21}, 1, "", "", "top_logprobs"},
		{"NaN temperature", VLLM, engine.Request{Prompt: "x", Sampling: engine.Sampling{Temperature: math.NaN()}}, 1, "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, body, err := encodeRequest(tc.kind, "up", &tc.req, tc.n)
			if tc.wantPath == "" {
				var re *engine.RequestError
				if !errors.As(err, &re) || re.Param != tc.wantErr {
					t.Fatalf("err %v, want a RequestError for %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if path != tc.wantPath {
				t.Errorf("path %s, want %s", path, tc.wantPath)
			}
			var got, want any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("body\n got %s\nwant %s", body, tc.want)
			}
		})
	}
}

func TestParseError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		body       string
		want       wireError
		wantCode   string // of requestError
		wantNonEmp bool
	}{
		{"openai", `{"error":{"message":"bad temperature","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`,
			wireError{Message: "bad temperature", Type: "invalid_request_error", Param: "temperature", Code: "invalid_value"}, "invalid_value", true},
		{"llamacpp context", `{"error":{"code":400,"message":"request (801 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":801,"n_ctx":512}}`,
			wireError{Message: "request (801 tokens) exceeds the available context size (512 tokens), try increasing it", Type: "exceed_context_size_error"},
			engine.CodeContextLengthExceeded, true},
		{"vllm", `{"object":"error","message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}`,
			wireError{Message: "This model's maximum context length is 2048 tokens.", Type: "BadRequestError"}, engine.CodeContextLengthExceeded, true},
		{"fastapi string", `{"detail":"n must be greater than or equal to 1"}`,
			wireError{Message: "n must be greater than or equal to 1"}, "", true},
		{"fastapi list", `{"detail":[{"loc":["body","top_p"],"msg":"Input should be less than or equal to 1","type":"less_than_equal"}]}`,
			wireError{Message: "top_p: Input should be less than or equal to 1"}, "", true},
		{"error string", `{"error":"model not loaded"}`, wireError{Message: "model not loaded"}, "", true},
		{"plain text", "Bad Gateway\n", wireError{Message: "Bad Gateway"}, "", true},
		{"empty", "", wireError{}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := parseError([]byte(tc.body))
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			re := got.requestError()
			if re.Code != tc.wantCode || re.Message == "" {
				t.Errorf("requestError %+v, want code %q and a message", re, tc.wantCode)
			}
		})
	}
}

func TestLogprobEvents(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want []engine.TokenLogprob
	}{
		{"chat", `{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.5,"bytes":[72,105]},{"token":"Ho","logprob":-1.5}]}]}`,
			[]engine.TokenLogprob{{Token: "Hi", Bytes: []byte("Hi"), Logprob: -0.5,
				Top: []engine.TopLogprob{{Token: "Hi", Bytes: []byte("Hi"), Logprob: -0.5}, {Token: "Ho", Bytes: []byte("Ho"), Logprob: -1.5}}}}},
		{"legacy", `{"tokens":[" a"," b"],"token_logprobs":[-0.25,null],"top_logprobs":[{" c":-2," a":-0.25},{}]}`,
			[]engine.TokenLogprob{
				{Token: " a", Bytes: []byte(" a"), Logprob: -0.25, Top: []engine.TopLogprob{{Token: " a", Bytes: []byte(" a"), Logprob: -0.25}, {Token: " c", Bytes: []byte(" c"), Logprob: -2}}},
				{Token: " b", Bytes: []byte(" b"), Logprob: math.Inf(-1), Top: []engine.TopLogprob{}}}},
		{"bytes out of range fall back to text", `{"content":[{"token":"é","logprob":-1,"bytes":[195,300]}]}`,
			[]engine.TokenLogprob{{Token: "é", Bytes: []byte("é"), Logprob: -1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var l wireLogprobs
			if err := json.Unmarshal([]byte(tc.in), &l); err != nil {
				t.Fatal(err)
			}
			if got := l.events(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	var none *wireLogprobs
	if none.events() != nil {
		t.Error("nil logprobs gave events")
	}
}

func ptrTo[T any](v T) *T { return &v }
