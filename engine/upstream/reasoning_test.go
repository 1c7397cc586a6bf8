package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"rill/engine"
	"rill/engine/upstream"
)

// fakeUpstream is an upstream double: it records the bodies posted to each path
// and answers from a table of path -> handler.
type fakeUpstream struct {
	mu     sync.Mutex
	bodies map[string][]string
	routes map[string]func(w http.ResponseWriter, body []byte)
}

func (up *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusOK) // health checks
		return
	}
	body, _ := io.ReadAll(r.Body)
	up.mu.Lock()
	if up.bodies == nil {
		up.bodies = map[string][]string{}
	}
	up.bodies[r.URL.Path] = append(up.bodies[r.URL.Path], string(body))
	up.mu.Unlock()
	h, ok := up.routes[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h(w, body)
}

func (up *fakeUpstream) body(path string, i int) string {
	up.mu.Lock()
	defer up.mu.Unlock()
	if i >= len(up.bodies[path]) {
		return ""
	}
	return up.bodies[path][i]
}

func jsonAnswer(s string) func(http.ResponseWriter, []byte) {
	return func(w http.ResponseWriter, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, s)
	}
}

func sseAnswer(events ...string) func(http.ResponseWriter, []byte) {
	return func(w http.ResponseWriter, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

// TestReasoningPassThrough: a vLLM upstream's reasoning_content deltas
// reach rill's clients as reasoning_content, its reasoning_tokens as
// theirs; the conversation's tool calls, tool results, reasoning and
// chat_template_kwargs go upstream as sent.
func TestReasoningPassThrough(t *testing.T) {
	t.Parallel()
	up := &fakeUpstream{routes: map[string]func(http.ResponseWriter, []byte){
		"/v1/chat/completions": sseAnswer(
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
			`{"choices":[{"index":0,"delta":{"reasoning_content":"Let me "}}]}`,
			`{"choices":[{"index":0,"delta":{"reasoning_content":"think.","content":null}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"Sunny."}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29,"completion_tokens_details":{"reasoning_tokens":6}}}`),
	}}
	url, _ := serve(t, up)
	e := newUpstream(t, "m", upstream.VLLM, url)
	rill := front(t, e)
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[
		{"role":"user","content":"Weather?"},
		{"role":"assistant","content":null,"reasoning_content":"Call it.","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"sunny"}],
		"chat_template_kwargs":{"enable_thinking":true}}`
	a := post(t, rill, "/v1/chat/completions", body)
	if a.status != 200 || !a.done {
		t.Fatalf("status %d, done %v: %s", a.status, a.done, a.body)
	}
	var reasoning, content strings.Builder
	var usage string
	for _, ev := range a.events {
		var c struct {
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(ev, &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			reasoning.WriteString(ch.Delta.ReasoningContent)
			content.WriteString(ch.Delta.Content)
		}
		if len(c.Choices) == 0 {
			usage = string(c.Usage)
		}
	}
	if reasoning.String() != "Let me think." || content.String() != "Sunny." {
		t.Errorf("reasoning %q, content %q", reasoning.String(), content.String())
	}
	if want := `{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29,"completion_tokens_details":{"reasoning_tokens":6}}`; usage != want {
		t.Errorf("usage %s, want %s", usage, want)
	}
	sent := up.body("/v1/chat/completions", 0)
	var got struct {
		Messages           []map[string]any `json:"messages"`
		ChatTemplateKwargs map[string]any   `json:"chat_template_kwargs"`
	}
	if err := json.Unmarshal([]byte(sent), &got); err != nil {
		t.Fatal(err)
	}
	asst := got.Messages[1]
	calls, _ := asst["tool_calls"].([]any)
	if c, isNull := asst["content"]; !isNull || c != nil || asst["reasoning_content"] != "Call it." || len(calls) != 1 ||
		got.Messages[2]["tool_call_id"] != "c1" || got.ChatTemplateKwargs["enable_thinking"] != true {
		t.Errorf("upstream got %s", sent)
	}
	if fn := calls[0].(map[string]any)["function"].(map[string]any); fn["name"] != "w" || fn["arguments"] != `{"city":"Paris"}` {
		t.Errorf("tool call upstream: %v", calls[0])
	}
}

// TestTemplateKwargsRefused: a kind that reads no chat_template_kwargs
// refuses them rather than dropping them.
func TestTemplateKwargsRefused(t *testing.T) {
	t.Parallel()
	e := newUpstream(t, "m", upstream.OpenAI, "http://127.0.0.1:1")
	_, err := e.Generate(context.Background(), &engine.Request{Model: "m",
		Messages: []engine.Message{{Role: engine.RoleUser, Content: "hi"}}, ChatTemplateKwargs: map[string]any{"enable_thinking": false}})
	var re *engine.RequestError
	if !errors.As(err, &re) || re.Param != "chat_template_kwargs" {
		t.Errorf("OpenAI upstream with kwargs: %v, want a request error on chat_template_kwargs", err)
	}
}

// TestUpstreamTokenize: vLLM's endpoints pass through; llama.cpp's are
// mapped (a chat rendered by /apply-template, then /tokenize with special
// tokens added and parsed); kinds without them say so.
func TestUpstreamTokenize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "hi"}}

	vllm := &fakeUpstream{routes: map[string]func(http.ResponseWriter, []byte){
		"/tokenize":   jsonAnswer(`{"count":3,"max_model_len":4096,"tokens":[1,2,3]}`),
		"/detokenize": jsonAnswer(`{"prompt":"abc"}`),
	}}
	url, _ := serve(t, vllm)
	e := newUpstream(t, "m", upstream.VLLM, url)
	res, err := e.Tokenize(ctx, &engine.TokenizeRequest{Model: "m", Messages: msgs, ChatTemplateKwargs: map[string]any{"enable_thinking": false}})
	if err != nil || !slices.Equal(res.Tokens, []int{1, 2, 3}) || res.MaxModelLen != 4096 {
		t.Errorf("vLLM tokenize: %+v, %v", res, err)
	}
	if got, want := compact(t, []byte(vllm.body("/tokenize", 0))), `{"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}],"model":"m"}`; got != want {
		t.Errorf("vLLM got %s, want %s", got, want)
	}
	d, err := e.Detokenize(ctx, &engine.DetokenizeRequest{Model: "m", Tokens: []int{1, 2}})
	if err != nil || d.Prompt != "abc" || compact(t, []byte(vllm.body("/detokenize", 0))) != `{"model":"m","tokens":[1,2]}` {
		t.Errorf("vLLM detokenize: %+v, %v, sent %s", d, err, vllm.body("/detokenize", 0))
	}

	llama := &fakeUpstream{routes: map[string]func(http.ResponseWriter, []byte){
		"/apply-template": jsonAnswer(`{"prompt":"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"}`),
		"/tokenize":       jsonAnswer(`{"tokens":[7,8]}`),
		"/detokenize":     jsonAnswer(`{"content":"xy"}`),
	}}
	url, _ = serve(t, llama)
	e = newUpstream(t, "m", upstream.LlamaCpp, url)
	res, err = e.Tokenize(ctx, &engine.TokenizeRequest{Model: "m", Messages: msgs})
	if err != nil || !slices.Equal(res.Tokens, []int{7, 8}) {
		t.Errorf("llama.cpp tokenize: %+v, %v", res, err)
	}
	if got := compact(t, []byte(llama.body("/tokenize", 0))); got != `{"add_special":true,"content":"\u003c|im_start|\u003euser\nhi\u003c|im_end|\u003e\n\u003c|im_start|\u003eassistant\n","parse_special":true}` {
		t.Errorf("llama.cpp /tokenize got %s", got)
	}
	no := false
	if _, err := e.Tokenize(ctx, &engine.TokenizeRequest{Model: "m", Prompt: "hi", AddSpecialTokens: &no}); err != nil ||
		compact(t, []byte(llama.body("/tokenize", 1))) != `{"add_special":false,"content":"hi","parse_special":true}` {
		t.Errorf("llama.cpp prompt tokenize: %v, sent %s", err, llama.body("/tokenize", 1))
	}
	if d, err := e.Detokenize(ctx, &engine.DetokenizeRequest{Model: "m", Tokens: []int{7}}); err != nil || d.Prompt != "xy" {
		t.Errorf("llama.cpp detokenize: %+v, %v", d, err)
	}

	tabby := newUpstream(t, "m", upstream.TabbyAPI, "http://127.0.0.1:1")
	if _, err := tabby.Tokenize(ctx, &engine.TokenizeRequest{Model: "m", Prompt: "x"}); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("tabbyAPI tokenize: %v, want ErrUnsupported", err)
	}
	none := &fakeUpstream{}
	url, _ = serve(t, none)
	e = newUpstream(t, "m", upstream.SGLang, url)
	if _, err := e.Tokenize(ctx, &engine.TokenizeRequest{Model: "m", Prompt: "x"}); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("an upstream without /tokenize: %v, want ErrUnsupported", err)
	}
}

// TestTokenizeThroughRill: an upstream rill tokenizes as the native engine
// behind it does, through two rills' HTTP services.
func TestTokenizeThroughRill(t *testing.T) {
	t.Parallel()
	nat := nativeEngine(t, "tiny")
	e := newUpstream(t, "tiny", upstream.Rill, front(t, nat))
	ctx := context.Background()
	for _, req := range []engine.TokenizeRequest{
		{Model: "tiny", Prompt: "The river <|im_end|>"},
		{Model: "tiny", Messages: []engine.Message{{Role: engine.RoleSystem, Content: "Be brief."}, {Role: engine.RoleUser, Content: "Hi"}}},
	} {
		want, err := nat.Tokenize(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Tokenize(ctx, &req)
		if err != nil || !slices.Equal(got.Tokens, want.Tokens) || got.MaxModelLen != want.MaxModelLen {
			t.Errorf("through rill %+v (%v), native %+v", got, err, want)
		}
		back, err := e.Detokenize(ctx, &engine.DetokenizeRequest{Model: "tiny", Tokens: want.Tokens})
		nback, _ := nat.Detokenize(ctx, &engine.DetokenizeRequest{Model: "tiny", Tokens: want.Tokens})
		if err != nil || back.Prompt != nback.Prompt {
			t.Errorf("detokenize through rill %q (%v), native %q", back.Prompt, err, nback.Prompt)
		}
	}
}
