package service

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"rill/engine"
)

func chatPlanOf(t *testing.T, body string) (*job, *apiError) {
	t.Helper()
	var r chatRequest
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return chatPlan(&r)
}

func completionPlanOf(t *testing.T, body string) (*job, *apiError) {
	t.Helper()
	var r completionRequest
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return completionPlan(&r)
}

func TestChatPlan(t *testing.T) {
	t.Parallel()
	const user = `"messages":[{"role":"user","content":"hi"}]`
	seed := int64(42)
	tests := []struct {
		name  string
		body  string
		check func(t *testing.T, p *job, req *engine.Request)
	}{
		{"defaults are OpenAI's", `{"model":"m",` + user + `}`, func(t *testing.T, p *job, req *engine.Request) {
			want := engine.Sampling{Temperature: 1, TopP: 1}
			if !reflect.DeepEqual(req.Sampling, want) || req.N != 1 || req.MaxTokens != 0 || p.stream || p.includeUsage || p.logprobs {
				t.Errorf("job %+v request %+v", p, req)
			}
		}},
		{"sampling fields", `{"model":"m",` + user + `,"temperature":0,"top_p":0.9,"presence_penalty":1.5,"frequency_penalty":-0.5,"seed":42,"top_k":40,"min_p":0.05}`,
			func(t *testing.T, p *job, req *engine.Request) {
				want := engine.Sampling{Temperature: 0, TopP: 0.9, PresencePenalty: 1.5, FrequencyPenalty: -0.5, Seed: &seed, TopK: 40, MinP: 0.05}
				if !reflect.DeepEqual(req.Sampling, want) {
					t.Errorf("sampling %+v, want %+v", req.Sampling, want)
				}
			}},
		{"reasoning_effort goes to the engine", `{"model":"m",` + user + `,"reasoning_effort":"low"}`, func(t *testing.T, p *job, req *engine.Request) {
			if req.ReasoningEffort != "low" {
				t.Errorf("reasoning effort %q, want low", req.ReasoningEffort)
			}
		}},
		{"no reasoning_effort", `{"model":"m",` + user + `,"reasoning_effort":null}`, func(t *testing.T, p *job, req *engine.Request) {
			if req.ReasoningEffort != "" {
				t.Errorf("reasoning effort %q, want none", req.ReasoningEffort)
			}
		}},
		{"top_p 0 is the smallest nucleus, not off", `{"model":"m",` + user + `,"top_p":0}`, func(t *testing.T, p *job, req *engine.Request) {
			if req.Sampling.TopP != math.SmallestNonzeroFloat64 {
				t.Errorf("top_p %v", req.Sampling.TopP)
			}
		}},
		{"max_completion_tokens wins", `{"model":"m",` + user + `,"max_tokens":9,"max_completion_tokens":5}`, func(t *testing.T, p *job, req *engine.Request) {
			if req.MaxTokens != 5 {
				t.Errorf("max tokens %d", req.MaxTokens)
			}
		}},
		{"stream options off with {}", `{"model":"m",` + user + `,"stream":true,"stream_options":{}}`, func(t *testing.T, p *job, req *engine.Request) {
			if !p.stream || p.includeUsage {
				t.Errorf("stream %v includeUsage %v", p.stream, p.includeUsage)
			}
		}},
		{"stream options on", `{"model":"m",` + user + `,"stream":true,"stream_options":{"include_usage":true}}`, func(t *testing.T, p *job, req *engine.Request) {
			if !p.stream || !p.includeUsage {
				t.Errorf("stream %v includeUsage %v", p.stream, p.includeUsage)
			}
		}},
		{"stream options ignored without stream", `{"model":"m",` + user + `,"stream_options":{"include_usage":true}}`, func(t *testing.T, p *job, req *engine.Request) {
			if p.stream || p.includeUsage {
				t.Errorf("stream %v includeUsage %v", p.stream, p.includeUsage)
			}
		}},
		{"messages and content parts", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"developer","content":"dev"},{"role":"user","name":"ann","content":[{"type":"text","text":"one "},{"type":"text","text":"two"}]},{"role":"assistant","content":null},{"role":"tool","tool_call_id":"call_1","content":"42"},{"role":"function","name":"f","content":"7"}]}`,
			func(t *testing.T, p *job, req *engine.Request) {
				want := []engine.Message{
					{Role: engine.RoleSystem, Content: "be brief"},
					{Role: engine.RoleDeveloper, Content: "dev"},
					{Role: engine.RoleUser, Content: "one \ntwo", Name: "ann"},
					{Role: engine.RoleAssistant, NullContent: true},
					{Role: engine.RoleTool, Content: "42", ToolCallID: "call_1"},
					{Role: engine.RoleTool, Content: "7", Name: "f"},
				}
				if !reflect.DeepEqual(req.Messages, want) {
					t.Errorf("messages %+v", req.Messages)
				}
			}},
		{"stop string, logprobs, prediction, extensions", `{"model":"m",` + user + `,"stop":"\n","logprobs":true,"top_logprobs":3,"prediction":{"type":"content","content":[{"type":"text","text":"ab"},{"type":"text","text":"c"}]},"ignore_eos":true,"no_draft":true,"n":3}`,
			func(t *testing.T, p *job, req *engine.Request) {
				if !reflect.DeepEqual(req.Stop, []string{"\n"}) || !req.Logprobs || req.TopLogprobs != 3 || !p.logprobs ||
					req.Prediction != "abc" || !req.IgnoreEOS || !req.NoDraft || req.N != 3 || p.n != 3 {
					t.Errorf("job %+v request %+v", p, req)
				}
			}},
		{"prompt_cache_key is the request's cache key", `{"model":"m",` + user + `,"prompt_cache_key":"session-7"}`, func(t *testing.T, p *job, req *engine.Request) {
			if req.CacheKey != "session-7" {
				t.Errorf("cache key %q", req.CacheKey)
			}
		}},
		{"priority is the request's priority", `{"model":"m",` + user + `,"priority":-3}`, func(t *testing.T, p *job, req *engine.Request) {
			if req.Priority == nil || *req.Priority != -3 {
				t.Errorf("priority %v", req.Priority)
			}
		}},
		{"no priority: the default", `{"model":"m",` + user + `}`, func(t *testing.T, p *job, req *engine.Request) {
			if req.Priority != nil {
				t.Errorf("priority %v", *req.Priority)
			}
		}},
		{"empty stop strings dropped", `{"model":"m",` + user + `,"stop":["","x"]}`, func(t *testing.T, p *job, req *engine.Request) {
			if !reflect.DeepEqual(req.Stop, []string{"x"}) {
				t.Errorf("stop %q", req.Stop)
			}
		}},
		{"harmless fields accepted", `{"model":"m",` + user + `,"user":"u","store":false,"metadata":{"a":"b"},"service_tier":"auto","response_format":{"type":"text"},"modalities":["text"],"logit_bias":{}}`,
			func(t *testing.T, p *job, req *engine.Request) {
				if len(req.Messages) != 1 || req.ResponseFormat != nil || req.LogitBias != nil || req.Tools != nil {
					t.Errorf("request %+v", req)
				}
			}},
		{"tools, tool_choice, response_format, logit_bias", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"},"strict":true}},{"type":"function","function":{"name":"g"}}],"tool_choice":{"type":"function","function":{"name":"g"}},"parallel_tool_calls":false,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"strict":true}},"logit_bias":{"7":-100,"12":2.5}}`,
			func(t *testing.T, p *job, req *engine.Request) {
				wantTools := []engine.Tool{{Name: "f", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`), Strict: true}, {Name: "g"}}
				if !reflect.DeepEqual(req.Tools, wantTools) {
					t.Errorf("tools %+v", req.Tools)
				}
				if req.ToolChoice != (engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "g"}) || req.ParallelToolCalls == nil || *req.ParallelToolCalls {
					t.Errorf("tool_choice %+v parallel %v", req.ToolChoice, req.ParallelToolCalls)
				}
				rf := req.ResponseFormat
				if rf == nil || rf.Type != engine.FormatJSONSchema || rf.Name != "n" || !rf.Strict || string(rf.Schema) != `{"type":"object"}` {
					t.Errorf("response_format %+v", rf)
				}
				if !reflect.DeepEqual(req.LogitBias, map[int]float64{7: -100, 12: 2.5}) {
					t.Errorf("logit_bias %v", req.LogitBias)
				}
			}},
		{"tool_choice strings and json_object", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}`,
			func(t *testing.T, p *job, req *engine.Request) {
				if req.ToolChoice.Mode != engine.ToolChoiceRequired || req.ResponseFormat.Type != engine.FormatJSONObject || req.ParallelToolCalls != nil {
					t.Errorf("request %+v", req)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, e := chatPlanOf(t, tt.body)
			if e != nil {
				t.Fatalf("chatPlan: %v", e)
			}
			if p.kind != kindChat || len(p.reqs) != 1 {
				t.Fatalf("job %+v", p)
			}
			tt.check(t, p, p.reqs[0])
		})
	}
}

func TestChatPlanRejects(t *testing.T) {
	t.Parallel()
	const user = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		body, param string
	}{
		{`{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content"},
		{`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"system","content":null}]}`, "messages[1].content"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content[1]"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, "messages[0].content[0]"},
		{`{"model":"m","messages":[{"role":"user","content":"a","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls"},
		{`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"custom","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].type"},
		{`{"model":"m","messages":[{"role":"user","content":"a","reasoning_content":"r"}]}`, "messages[0].reasoning_content"},
		{`{"model":"m",` + user + `,"top_logprobs":2}`, "top_logprobs"},
		{`{"model":"m",` + user + `,"response_format":{"type":"json_schema"}}`, "response_format.json_schema"},
		{`{"model":"m",` + user + `,"response_format":{"type":"xml"}}`, "response_format.type"},
		{`{"model":"m",` + user + `,"tool_choice":"required"}`, "tool_choice"},
		{`{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{`{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"maybe"}`, "tool_choice"},
		{`{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"custom"}}`, "tool_choice.type"},
		{`{"model":"m",` + user + `,"tools":[{"type":"custom"}]}`, "tools[0].type"},
		{`{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"a b"}}]}`, "tools[0].function.name"},
		{`{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, "tools[1].function.name"},
		{`{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, "tools[0].function.parameters"},
		{`{"model":"m",` + user + `,"logit_bias":{"x":1}}`, "logit_bias"},
		{`{"model":"m",` + user + `,"logit_bias":{"7":101}}`, "logit_bias"},
		{`{"model":"m",` + user + `,"function_call":{"name":"f"}}`, "function_call"},
		{`{"model":"m",` + user + `,"modalities":["text","audio"]}`, "modalities"},
		{`{"model":"m",` + user + `,"audio":{"voice":"x"}}`, "audio"},
		{`{"model":"m",` + user + `,"prediction":{"type":"content","content":[{"type":"image_url"}]}}`, "prediction.content[0]"},
	}
	for _, tt := range tests {
		p, e := chatPlanOf(t, tt.body)
		if e == nil {
			t.Errorf("%s: accepted as %+v", tt.body, p)
			continue
		}
		if e.Status != 400 || e.Param != tt.param || e.Type != typeInvalidRequest {
			t.Errorf("%s: got %d param %q type %q, want 400 param %q", tt.body, e.Status, e.Param, e.Type, tt.param)
		}
	}
}

func TestCompletionPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		texts   []string
		tokens  [][]int
		n       int
		logprob int // -1: logprobs off
	}{
		{"string", `{"model":"m","prompt":"once"}`, []string{"once"}, nil, 1, -1},
		{"strings", `{"model":"m","prompt":["a","b"],"n":2}`, []string{"a", "b"}, nil, 2, -1},
		{"token ids", `{"model":"m","prompt":[1,2,3],"logprobs":0}`, nil, [][]int{{1, 2, 3}}, 1, 0},
		{"token id arrays", `{"model":"m","prompt":[[1],[2,3]],"logprobs":5,"best_of":1}`, nil, [][]int{{1}, {2, 3}}, 1, 5},
		{"echo false and empty suffix are fine", `{"model":"m","prompt":"x","echo":false,"suffix":""}`, []string{"x"}, nil, 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, e := completionPlanOf(t, tt.body)
			if e != nil {
				t.Fatalf("completionPlan: %v", e)
			}
			if p.kind != kindCompletion || p.n != tt.n || p.choices() != tt.n*len(p.reqs) {
				t.Errorf("job %+v", p)
			}
			var texts []string
			var tokens [][]int
			for _, r := range p.reqs {
				if r.PromptTokens != nil {
					tokens = append(tokens, r.PromptTokens)
				} else {
					texts = append(texts, r.Prompt)
				}
				if r.N != tt.n || r.Logprobs != (tt.logprob >= 0) || (tt.logprob >= 0 && r.TopLogprobs != tt.logprob) {
					t.Errorf("request %+v", r)
				}
			}
			if !reflect.DeepEqual(texts, tt.texts) || !reflect.DeepEqual(tokens, tt.tokens) {
				t.Errorf("prompts %q %v, want %q %v", texts, tokens, tt.texts, tt.tokens)
			}
		})
	}
}

func TestCompletionPlanRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body, param string
	}{
		{`{"model":"m","prompt":"x","echo":true}`, "echo"},
		{`{"model":"m","prompt":"x","suffix":"end"}`, "suffix"},
		{`{"model":"m","prompt":"x","best_of":3}`, "best_of"},
		{`{"model":"m","prompt":"x","best_of":1,"n":2}`, "best_of"},
		{`{"model":"m","prompt":"x","logit_bias":{"-1":1}}`, "logit_bias"},
		{`{"model":"m","prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"n","schema":true}}}`, "response_format.json_schema.schema"},
		{`{"model":"m","prompt":{"a":1}}`, "prompt"},
	}
	for _, tt := range tests {
		p, e := completionPlanOf(t, tt.body)
		if e == nil {
			t.Errorf("%s: accepted as %+v", tt.body, p)
			continue
		}
		if e.Status != 400 || e.Param != tt.param {
			t.Errorf("%s: got %d param %q, want 400 param %q", tt.body, e.Status, e.Param, tt.param)
		}
	}
}
