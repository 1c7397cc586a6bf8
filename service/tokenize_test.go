package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"rill/engine"
)

// tokenizingEngine is the engine double with engine.Tokenizer: one token
// per byte of the prompt, or per message, and the requests it got.
type tokenizingEngine struct {
	*fakeEngine
	mu   sync.Mutex
	tok  []engine.TokenizeRequest
	detk []engine.DetokenizeRequest
}

func (f *tokenizingEngine) Tokenize(_ context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	f.mu.Lock()
	f.tok = append(f.tok, *req)
	f.mu.Unlock()
	if req.Model != "tiny" {
		return nil, engine.ErrUnknownModel
	}
	var ids []int
	for i := range req.Prompt {
		ids = append(ids, int(req.Prompt[i]))
	}
	for i := range req.Messages {
		ids = append(ids, 1000+i)
	}
	return &engine.TokenizeResult{Tokens: ids, MaxModelLen: 256}, nil
}

func (f *tokenizingEngine) Detokenize(_ context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	f.mu.Lock()
	f.detk = append(f.detk, *req)
	f.mu.Unlock()
	var b strings.Builder
	for _, id := range req.Tokens {
		if id < 0 || id > 255 {
			return nil, engine.Errorf("invalid_value", "tokens", "token %d is not in the vocabulary", id)
		}
		b.WriteByte(byte(id))
	}
	return &engine.DetokenizeResult{Prompt: b.String()}, nil
}

func TestTokenizeEndpoints(t *testing.T) {
	t.Parallel()
	fake := &tokenizingEngine{fakeEngine: &fakeEngine{models: testModels}}
	ts := httptest.NewServer(New(Options{Engine: fake, APIKey: "k", Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(ts.Close)
	call := func(path, body string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}

	status, body := call("/tokenize", `{"model":"tiny","prompt":"Hi!","add_special_tokens":false}`)
	if status != 200 || string(body) != `{"count":3,"max_model_len":256,"tokens":[72,105,33]}`+"\n" {
		t.Errorf("tokenize prompt: %d %s", status, body)
	}
	mustValidate(t, "TokenizeResponse", body)
	status, body = call("/tokenize", `{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":false}`)
	if status != 200 || string(body) != `{"count":2,"max_model_len":256,"tokens":[1000,1001]}`+"\n" {
		t.Errorf("tokenize messages: %d %s", status, body)
	}
	status, body = call("/detokenize", `{"model":"tiny","tokens":[72,105]}`)
	if status != 200 || string(body) != `{"prompt":"Hi"}`+"\n" {
		t.Errorf("detokenize: %d %s", status, body)
	}
	mustValidate(t, "DetokenizeResponse", body)

	fake.mu.Lock()
	got := fake.tok
	fake.mu.Unlock()
	no := false
	want := []engine.TokenizeRequest{
		{Model: "tiny", Prompt: "Hi!", AddSpecialTokens: &no},
		{Model: "tiny", Messages: []engine.Message{
			{Role: engine.RoleUser, Content: "hi"},
			{Role: engine.RoleAssistant, NullContent: true, ToolCalls: []engine.ToolCall{{ID: "c", Name: "f", Arguments: "{}"}}}},
			Tools:              []engine.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}},
			ChatTemplateKwargs: map[string]any{"enable_thinking": json.RawMessage("false")}, AddGenerationPrompt: &no},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("engine got\n%+v\nwant\n%+v", got, want)
	}

	for _, tc := range []struct {
		path, body string
		status     int
		param      string
	}{
		{"/tokenize", `{"model":"tiny"}`, 400, "prompt"},
		{"/tokenize", `{"model":"tiny","prompt":"a","messages":[{"role":"user","content":"b"}]}`, 400, "messages"},
		{"/tokenize", `{"model":"tiny","prompt":7}`, 400, "prompt"},
		{"/tokenize", `{"model":"tiny","prompt":"a","add_generation_prompt":false}`, 400, "prompt"},
		{"/tokenize", `{"model":"tiny","messages":[{"role":"system"}]}`, 400, "messages[0].content"},
		{"/tokenize", `{"model":"nope","prompt":"a"}`, 404, "model"},
		{"/detokenize", `{"model":"tiny","tokens":[300]}`, 400, "tokens"},
		{"/detokenize", `{"model":"tiny"}`, 400, "tokens"},
	} {
		status, body := call(tc.path, tc.body)
		var e struct {
			Error struct {
				Param *string `json:"param"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		if status != tc.status || e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s %s: %d %s, want %d on %q", tc.path, tc.body, status, body, tc.status, tc.param)
		}
	}

	// The API key guards them as it guards /v1.
	resp, _ := post(t, ts.Client(), ts.URL+"/tokenize", `{"model":"tiny","prompt":"a"}`)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("tokenize without the key: %d", resp.StatusCode)
	}

	// An engine without a tokenizer says so.
	plain := newTestServer(t, &fakeEngine{}, Options{})
	resp, body = post(t, plain.Client(), plain.URL+"/tokenize", `{"model":"tiny","prompt":"a"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "unsupported_model") {
		t.Errorf("tokenize on an engine without a tokenizer: %d %s", resp.StatusCode, body)
	}
}
