package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"rill/engine"
	"rill/openapi"
)

// errorEngine answers by model: "long" is too long for the context, "busy"
// is overloaded, "tiny" works.
func errorEngine() *fakeEngine {
	models := append([]engine.ModelCard{{ID: "long"}, {ID: "busy"}}, testModels...)
	return &fakeEngine{models: models, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		switch req.Model {
		case "long":
			return nil, engine.Errorf(engine.CodeContextLengthExceeded, "messages",
				"This model's maximum context length is 256 tokens; the prompt has 300.")
		case "busy":
			return nil, fmt.Errorf("queue full: %w", engine.ErrOverloaded)
		}
		return &fakeStream{ctx: ctx, events: script(req.Choices(), []string{"ok"}, engine.FinishStop, plainStats(3, 1))}, nil
	}}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, errorEngine(), Options{MaxBodyBytes: 4096})
	const chat, comp = "/v1/chat/completions", "/v1/completions"
	const user = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		param  string // "-" when the param must be null
		code   string // "" when not checked
	}{
		{"broken JSON", "POST", chat, `{"model":"tiny","messages":[{"role":"user","content":"hi"}`, 400, "-", ""},
		{"broken JSON completions", "POST", comp, `{"prompt": "x",`, 400, "-", ""},
		{"empty body", "POST", chat, ``, 400, "-", ""},
		{"not an object", "POST", chat, `[1]`, 400, "-", "invalid_type"},
		{"missing model", "POST", chat, `{` + user + `}`, 400, "model", "missing_required_parameter"},
		{"missing messages", "POST", chat, `{"model":"tiny"}`, 400, "messages", "missing_required_parameter"},
		{"empty messages", "POST", chat, `{"model":"tiny","messages":[]}`, 400, "messages", "empty_array"},
		{"invalid role", "POST", chat, `{"model":"tiny","messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role", "invalid_value"},
		{"content missing", "POST", chat, `{"model":"tiny","messages":[{"role":"user"}]}`, 400, "messages[0].content", "missing_required_parameter"},
		{"content wrong type", "POST", chat, `{"model":"tiny","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", "invalid_type"},
		{"max_tokens string", "POST", chat, `{"model":"tiny",` + user + `,"max_tokens":"ten"}`, 400, "max_tokens", "invalid_type"},
		{"max_tokens zero", "POST", chat, `{"model":"tiny",` + user + `,"max_tokens":0}`, 400, "max_tokens", "integer_below_min_value"},
		{"max_tokens negative", "POST", chat, `{"model":"tiny",` + user + `,"max_tokens":-1}`, 400, "max_tokens", "integer_below_min_value"},
		{"max_tokens beyond int64", "POST", chat, `{"model":"tiny",` + user + `,"max_tokens":1e30}`, 400, "max_tokens", ""},
		{"max_completion_tokens zero", "POST", chat, `{"model":"tiny",` + user + `,"max_completion_tokens":0}`, 400, "max_completion_tokens", ""},
		{"n zero", "POST", chat, `{"model":"tiny",` + user + `,"n":0}`, 400, "n", "integer_below_min_value"},
		{"temperature high", "POST", chat, `{"model":"tiny",` + user + `,"temperature":2.5}`, 400, "temperature", "decimal_above_max_value"},
		{"temperature string", "POST", chat, `{"model":"tiny",` + user + `,"temperature":"hot"}`, 400, "temperature", "invalid_type"},
		{"top_p high", "POST", chat, `{"model":"tiny",` + user + `,"top_p":1.5}`, 400, "top_p", ""},
		{"presence_penalty", "POST", chat, `{"model":"tiny",` + user + `,"presence_penalty":3}`, 400, "presence_penalty", ""},
		{"frequency_penalty", "POST", chat, `{"model":"tiny",` + user + `,"frequency_penalty":-2.1}`, 400, "frequency_penalty", ""},
		{"top_logprobs high", "POST", chat, `{"model":"tiny",` + user + `,"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs", ""},
		{"top_logprobs without logprobs", "POST", chat, `{"model":"tiny",` + user + `,"top_logprobs":2}`, 400, "top_logprobs", ""},
		{"too many stops", "POST", chat, `{"model":"tiny",` + user + `,"stop":["a","b","c","d","e"]}`, 400, "stop", "array_above_max_length"},
		{"stream not boolean", "POST", chat, `{"model":"tiny",` + user + `,"stream":"yes"}`, 400, "stream", "invalid_type"},
		{"tool without function", "POST", chat, `{"model":"tiny",` + user + `,"tools":[{"type":"function"}],"tool_choice":"required"}`, 400, "tools[0].function", ""},
		{"forced unknown tool", "POST", chat, `{"model":"tiny",` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice", "invalid_value"},
		{"response_format json_schema without schema object", "POST", chat, `{"model":"tiny",` + user + `,"response_format":{"type":"json_schema"}}`, 400, "response_format.json_schema", "missing_required_parameter"},
		{"logit_bias out of range", "POST", chat, `{"model":"tiny",` + user + `,"logit_bias":{"7":500}}`, 400, "logit_bias[7]", ""},
		{"logit_bias key", "POST", chat, `{"model":"tiny",` + user + `,"logit_bias":{"seven":5}}`, 400, "logit_bias", "invalid_value"},
		{"tool message without tool_call_id", "POST", chat, `{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"tool","content":"42"}]}`, 400, "messages[1].tool_call_id", "missing_required_parameter"},
		{"text part without text", "POST", chat, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text"}]}]}`, 400, "messages[0].content[1].text", "missing_required_parameter"},
		{"refusal part without refusal", "POST", chat, `{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"refusal","text":"x"}]}]}`, 400, "messages[1].content[0].refusal", "missing_required_parameter"},
		{"image part", "POST", chat, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, 400, "messages[0].content[0]", "unsupported_parameter"},
		{"echo", "POST", comp, `{"model":"tiny","prompt":"x","echo":true}`, 400, "echo", "unsupported_parameter"},
		{"suffix", "POST", comp, `{"model":"tiny","prompt":"x","suffix":"y"}`, 400, "suffix", "unsupported_parameter"},
		{"best_of above n", "POST", comp, `{"model":"tiny","prompt":"x","best_of":2}`, 400, "best_of", "unsupported_parameter"},
		{"missing prompt", "POST", comp, `{"model":"tiny"}`, 400, "prompt", "missing_required_parameter"},
		{"empty prompt array", "POST", comp, `{"model":"tiny","prompt":[]}`, 400, "prompt", "empty_array"},
		{"mixed prompt array", "POST", comp, `{"model":"tiny","prompt":["a",1]}`, 400, "prompt[1]", "invalid_type"},
		{"negative token id", "POST", comp, `{"model":"tiny","prompt":[1,-2]}`, 400, "prompt[1]", ""},
		{"legacy logprobs high", "POST", comp, `{"model":"tiny","prompt":"x","logprobs":6}`, 400, "logprobs", ""},
		{"unknown model", "POST", chat, `{"model":"nope",` + user + `}`, 404, "model", "model_not_found"},
		{"unknown model completions", "POST", comp, `{"model":"nope","prompt":"x"}`, 404, "model", "model_not_found"},
		{"unknown model GET", "GET", "/v1/models/nope", ``, 404, "model", "model_not_found"},
		{"context length", "POST", chat, `{"model":"long",` + user + `}`, 400, "messages", engine.CodeContextLengthExceeded},
		{"context length streaming", "POST", chat, `{"model":"long",` + user + `,"stream":true}`, 400, "messages", engine.CodeContextLengthExceeded},
		{"overloaded", "POST", comp, `{"model":"busy","prompt":"x"}`, 503, "-", "engine_overloaded"},
		{"oversized body", "POST", chat, `{"model":"tiny","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "-", "request_too_large"},
		{"unknown path", "POST", "/v1/audio/speech", `{}`, 404, "-", "unknown_url"},
		{"unknown root path", "GET", "/nope", ``, 404, "-", "unknown_url"},
		{"wrong method", "GET", chat, ``, 405, "-", "method_not_allowed"},
		{"wrong method models", "POST", "/v1/models", `{}`, 405, "-", "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			mustValidate(t, "ErrorResponse", body)
			e := decodeMap(t, body)["error"].(map[string]any)
			if tt.param == "-" {
				if e["param"] != nil {
					t.Errorf("param %v, want null", e["param"])
				}
			} else if e["param"] != tt.param {
				t.Errorf("param %v, want %q (%s)", e["param"], tt.param, e["message"])
			}
			if tt.code != "" && e["code"] != tt.code {
				t.Errorf("code %v, want %q (%s)", e["code"], tt.code, e["message"])
			}
			wantType := typeInvalidRequest
			if tt.status >= 500 {
				wantType = typeServer
			}
			if e["type"] != wantType || e["message"] == "" {
				t.Errorf("type %v message %v", e["type"], e["message"])
			}
			if tt.status == 405 {
				want := "POST"
				if tt.path == "/v1/models" {
					want = "GET, HEAD"
				}
				if got := resp.Header.Get("Allow"); got != want {
					t.Errorf("Allow %q, want %q", got, want)
				}
			}
			if tt.status == 503 && resp.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
		})
	}
}

// TestContentTypeTolerated: curl sends bodies as form data or with no
// Content-Type at all; a JSON body is read as JSON either way.
func TestContentTypeTolerated(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, errorEngine(), Options{})
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-8"} {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"x"}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("Content-Type %q: status %d %s", ct, resp.StatusCode, body)
		}
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, errorEngine(), Options{APIKey: "sk-secret"})
	tests := []struct {
		path, auth string
		status     int
	}{
		{"/v1/models", "", 401},
		{"/v1/models", "Bearer wrong", 401},
		{"/v1/models", "Bearer sk-secre", 401},
		{"/v1/models", "Basic sk-secret", 401},
		{"/v1/models", "sk-secret", 401},
		{"/v1/models", "Bearer sk-secret", 200},
		{"/v1/models", "bearer sk-secret", 200},
		{"/v1/models/tiny", "Bearer sk-secret", 200},
		{"/v1/nothing", "", 401},
		{"/health", "", 200},
		{"/openapi.yaml", "", 200},
		{"/", "", 200},
		{"/metrics", "", 401},
		{"/metrics", "Bearer sk-secret", 200},
		{"/v1/responses/resp_x", "", 401},
		{"/tokenize", "", 401},
		{"/nowhere", "", 404},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", ts.URL+tt.path, nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s with %q: status %d, want %d", tt.path, tt.auth, resp.StatusCode, tt.status)
			continue
		}
		if tt.status == 401 {
			mustValidate(t, "ErrorResponse", body)
			if e := decodeMap(t, body)["error"].(map[string]any); e["code"] != "invalid_api_key" {
				t.Errorf("401 code %v", e["code"])
			}
		}
	}
	// A chat completion with the key goes through.
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-secret")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("authorized chat: status %d", resp.StatusCode)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, errorEngine(), Options{})
	tests := []struct {
		sent string
		keep bool
	}{
		{"", false},
		{"client-id_1.2:3", true},
		{"has space", false},
		{strings.Repeat("a", 129), false},
		{"<script>", false},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`))
		if tt.sent != "" {
			req.Header.Set("X-Request-Id", tt.sent)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		if tt.keep && id != tt.sent {
			t.Errorf("sent %q, got %q", tt.sent, id)
		}
		if !tt.keep {
			if _, err := uuid.Parse(id); err != nil {
				t.Errorf("sent %q, got %q: not a fresh uuid", tt.sent, id)
			}
		}
		if got := decodeMap(t, body)["id"]; got != "chatcmpl-"+id {
			t.Errorf("response id %v, want chatcmpl-%s", got, id)
		}
	}
	// Errors carry an id too.
	resp, err := ts.Client().Get(ts.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("404 without X-Request-Id")
	}
}

func TestModelsHealthSpec(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{models: []engine.ModelCard{
		{ID: "tiny", OwnedBy: "rill", Created: 1700000000, ContextLength: 256, Description: "random weights", Params: 30_500_000_000, ActiveParams: 3_300_000_000},
		{ID: "org/plain"},
	}}
	ts := newTestServer(t, fake, Options{})
	get := func(path string) (*http.Response, []byte) {
		resp, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}

	_, body := get("/v1/models")
	mustValidate(t, "ListModelsResponse", body)
	want := `{"object":"list","data":[{"id":"tiny","object":"model","created":1700000000,"owned_by":"rill","context_length":256,"description":"random weights","n_params":30500000000,"n_active_params":3300000000},{"id":"org/plain","object":"model","created":0,"owned_by":"rill"}]}` + "\n"
	if string(body) != want {
		t.Errorf("models\n got %s\nwant %s", body, want)
	}
	for _, id := range []string{"tiny", "org/plain"} {
		resp, body := get("/v1/models/" + id)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", id, resp.StatusCode)
		}
		mustValidate(t, "Model", body)
		if decodeMap(t, body)["id"] != id {
			t.Errorf("model %s: %s", id, body)
		}
	}

	resp, body := get("/health")
	mustValidate(t, "Health", body)
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Errorf("health %d %s", resp.StatusCode, body)
	}

	resp, body = get("/openapi.yaml")
	if resp.StatusCode != 200 || string(body) != string(openapi.Spec()) ||
		!strings.Contains(resp.Header.Get("Content-Type"), "yaml") {
		t.Errorf("openapi.yaml: status %d, %d bytes, type %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}

	req, _ := http.NewRequest("HEAD", ts.URL+"/health", nil)
	hr, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 200 {
		t.Errorf("HEAD /health: %d", hr.StatusCode)
	}
}

func TestFromEngine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{engine.Errorf("c", "p", "m"), 400, "c"},
		{fmt.Errorf("wrapped: %w", engine.ErrUnknownModel), 404, "model_not_found"},
		{fmt.Errorf("wrapped: %w", engine.ErrOverloaded), 503, "engine_overloaded"},
		{fmt.Errorf("%w: model \"m\": no such file", engine.ErrModelLoad), 503, "model_load_failed"},
		{context.Canceled, statusClientClosed, ""},
		{errors.New("boom"), 500, ""},
	}
	for _, tt := range tests {
		e := fromEngine(tt.err, "m")
		if e.Status != tt.status || e.Code != tt.code {
			t.Errorf("fromEngine(%v) = %d %q, want %d %q", tt.err, e.Status, e.Code, tt.status, tt.code)
		}
	}
}

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	var sink lockedBuffer
	cached := 2.0
	fake := &fakeEngine{models: testModels, respond: replay([]string{"a", "b"}, engine.FinishStop,
		func(int) engine.Stats {
			return engine.Stats{PromptTokens: 5, CompletionTokens: 2, CachedTokens: &cached}
		})}
	ts := httptest.NewServer(New(Options{Engine: fake, Logger: slog.New(slog.NewJSONHandler(&sink, nil))}))
	post(t, ts.Client(), ts.URL+"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`)
	post(t, ts.Client(), ts.URL+"/v1/completions", `{"model":"tiny","prompt":"x"}`)
	post(t, ts.Client(), ts.URL+"/v1/completions", `{"model":"tiny"}`)
	ts.Close() // waits for the handlers, and so for their log lines

	lines := strings.Split(strings.TrimSpace(sink.buf.String()), "\n")
	want := []struct {
		path   string
		status float64
		tokens bool
	}{
		{"/v1/chat/completions", 200, true},
		{"/v1/completions", 200, true},
		{"/v1/completions", 400, false},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), sink.buf.String())
	}
	for i, line := range lines {
		m := decodeMap(t, []byte(line))
		for _, k := range []string{"id", "method", "path", "status", "duration"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %d lacks %q: %s", i, k, line)
			}
		}
		if m["msg"] != "request" || m["path"] != want[i].path || m["status"] != want[i].status || m["method"] != "POST" {
			t.Errorf("line %d: %s", i, line)
		}
		_, hasTokens := m["prompt_tokens"]
		if hasTokens != want[i].tokens || (hasTokens && (m["prompt_tokens"] != 5.0 || m["cached_tokens"] != 2.0)) {
			t.Errorf("line %d token counts: %s", i, line)
		}
	}
}
