package service

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"rill/engine"
	"rill/keys"
)

// keysServer serves the double over ks, and --api-key "sk-plain"; each
// request gets a prompt of 5 tokens and 3 completion tokens, and a chat
// request whose message is "hang" holds its stream open until cancelled.
func keysServer(t *testing.T, ks ...keys.Key) (*fakeEngine, string) {
	t.Helper()
	plain := replay([]string{"a", "b", "c"}, engine.FinishStop, plainStats(5, 3))
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		if len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Content == "hang" {
			return &fakeStream{ctx: ctx, hang: true}, nil
		}
		return plain(ctx, req)
	}}
	ts := newTestServer(t, fake, Options{APIKey: "sk-plain", Keys: keys.NewSet(ks, keys.Options{})})
	return fake, ts.URL
}

func limitedKey(name, secret string, rpm, tpm, streams int) keys.Key {
	return keys.Key{Name: name, Hash: sha256.Sum256([]byte(secret)), RequestsPerMinute: rpm, TokensPerMinute: tpm, MaxConcurrentStreams: streams}
}

func sdk(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// chatOnce sends a chat request of message with client and returns the
// response's headers, and the error the client surfaced.
func chatOnce(t *testing.T, client openai.Client, message string) (http.Header, error) {
	t.Helper()
	var raw *http.Response
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(message)},
	}, option.WithResponseInto(&raw))
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.Response.Header, err
	}
	if err != nil {
		t.Fatal(err)
	}
	return raw.Header, nil
}

// TestKeyLimitsOpenAIClient: at a key's limit the official client surfaces
// a 429 rate_limit_exceeded whose type names the limit, with Retry-After,
// and every response to a limited key has OpenAI's x-ratelimit-* headers.
func TestKeyLimitsOpenAIClient(t *testing.T) {
	t.Parallel()
	type want struct {
		status    int    // 200 or the error's
		typ, code string // of the error
		headers   map[string]string
	}
	tests := []struct {
		name string
		key  keys.Key
		want []want // one per request, in order
	}{
		{"requests per minute", limitedKey("alice", "sk-a", 2, 0, 0), []want{
			{status: 200, headers: map[string]string{"X-Ratelimit-Limit-Requests": "2", "X-Ratelimit-Remaining-Requests": "1"}},
			{status: 200, headers: map[string]string{"X-Ratelimit-Remaining-Requests": "0"}},
			{status: 429, typ: "requests", code: "rate_limit_exceeded", headers: map[string]string{
				"X-Ratelimit-Limit-Requests": "2", "X-Ratelimit-Remaining-Requests": "0", "Retry-After": "30", "X-Ratelimit-Limit-Tokens": ""}},
		}},
		// A response's headers count its own usage: 8 tokens each.
		{"tokens per minute: usage charged, admitted while the budget lasts", limitedKey("bob", "sk-b", 0, 10, 0), []want{
			{status: 200, headers: map[string]string{"X-Ratelimit-Limit-Tokens": "10", "X-Ratelimit-Remaining-Tokens": "2", "X-Ratelimit-Limit-Requests": ""}},
			{status: 200, headers: map[string]string{"X-Ratelimit-Remaining-Tokens": "0"}},
			{status: 429, typ: "tokens", code: "rate_limit_exceeded", headers: map[string]string{"X-Ratelimit-Remaining-Tokens": "0", "Retry-After": "42"}},
		}},
		{"no limits: no headers", limitedKey("carol", "sk-c", 0, 0, 0), []want{
			{status: 200, headers: map[string]string{"X-Ratelimit-Limit-Requests": "", "X-Ratelimit-Limit-Tokens": ""}},
			{status: 200},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, url := keysServer(t, tc.key)
			client := sdk(url, "sk-"+tc.key.Name[:1]) // each test's key is sk- and its name's initial
			for i, w := range tc.want {
				h, err := chatOnce(t, client, "hi")
				var apiErr *openai.Error
				switch {
				case w.status == 200 && err != nil:
					t.Fatalf("request %d: %v", i, err)
				case w.status != 200 && (!errors.As(err, &apiErr) || apiErr.StatusCode != w.status || apiErr.Type != w.typ || apiErr.Code != w.code):
					t.Fatalf("request %d: %v, want %d %s %s", i, err, w.status, w.typ, w.code)
				}
				for name, v := range w.headers {
					if got := h.Get(name); got != v {
						t.Errorf("request %d: %s %q, want %q", i, name, got, v)
					}
				}
				if reset := h.Get("X-Ratelimit-Reset-Requests") + h.Get("X-Ratelimit-Reset-Tokens"); reset != "" && !strings.HasSuffix(reset, "s") {
					t.Errorf("request %d: reset %q is not a duration", i, reset)
				}
			}
		})
	}
}

// TestKeyConcurrentStreams: a key at max_concurrent_streams is refused
// until one of its requests ends; other keys are not.
func TestKeyConcurrentStreams(t *testing.T) {
	t.Parallel()
	_, url := keysServer(t, limitedKey("alice", "sk-a", 0, 0, 1), limitedKey("bob", "sk-b", 0, 0, 1))
	alice := sdk(url, "sk-a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // first: the server's Close waits for this stream
	stream := alice.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hang")}})
	_, err := chatOnce(t, alice, "hi")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != codeRateLimited || !strings.Contains(apiErr.Message, "concurrent") {
		t.Fatalf("second stream of alice: %v, want a 429", err)
	}
	if _, err := chatOnce(t, sdk(url, "sk-b"), "hi"); err != nil {
		t.Fatalf("bob: %v", err)
	}
	cancel()
	_ = stream.Close()
	// The slot comes back when the server sees the stream end.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := chatOnce(t, alice, "hi")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice after her stream ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKeyAuthAndPriority: keys of the file and --api-key are accepted, any
// other is a 401; a key's default priority goes to requests that send
// none, and a request's own priority wins.
func TestKeyAuthAndPriority(t *testing.T) {
	t.Parallel()
	prio := -2
	k := limitedKey("alice", "sk-a", 0, 0, 0)
	k.Priority = &prio
	fake, url := keysServer(t, k)
	tests := []struct {
		key    string
		body   string
		status int
		prio   *int
	}{
		{"sk-a", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`, 200, &prio},
		{"sk-a", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"priority":3}`, 200, ptr(3)},
		{"sk-plain", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`, 200, nil},
		{"sk-plain", `{"model":"tiny","prompt":"x","priority":-7}`, 200, ptr(-7)},
		{"sk-wrong", `{"model":"tiny","prompt":"x"}`, 401, nil},
		{"", `{"model":"tiny","prompt":"x"}`, 401, nil},
	}
	for i, tc := range tests {
		path := "/v1/chat/completions"
		if strings.Contains(tc.body, "prompt") {
			path = "/v1/completions"
		}
		req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+tc.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("case %d: status %d, want %d", i, resp.StatusCode, tc.status)
		}
		if tc.status != 200 {
			continue
		}
		reqs := fake.requests()
		got := reqs[len(reqs)-1].Priority
		if (got == nil) != (tc.prio == nil) || got != nil && *got != *tc.prio {
			t.Errorf("case %d: engine priority %v, want %v", i, got, tc.prio)
		}
	}
}

// TestKeyMetricsAndOtherTransports: each WebSocket create counts as a
// request; the Messages API answers a 429 in Anthropic's shape with its
// headers; /metrics counts per key name, never the key.
func TestKeyMetricsAndOtherTransports(t *testing.T) {
	t.Parallel()
	_, url := keysServer(t, limitedKey("alice", "sk-secret-a", 1, 0, 0))
	ts := struct{ URL string }{url}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/v1/chat/completions",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer sk-secret-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	create := `{"type":"create","request_id":"r%d","body":{"model":"tiny","messages":[{"role":"user","content":"x"}]}}`
	var ends []wsMsg
	for i := range 2 {
		sendWS(t, c, strings.Replace(create, "%d", strconv.Itoa(i), 1))
		ends = append(ends, nextNonChunk(t, c))
	}
	if ends[0].Type != "done" || ends[1].Type != "error" || ends[1].Status != 429 || ends[1].code() != codeRateLimited {
		t.Fatalf("websocket: %s then %s", ends[0].raw, ends[1].raw)
	}

	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/messages",
		strings.NewReader(`{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("X-Api-Key", "sk-secret-a")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(body), `"rate_limit_error"`) || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("Anthropic-Ratelimit-Requests-Limit") != "1" || resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "0" {
		t.Fatalf("messages: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if _, err := time.Parse(time.RFC3339, resp.Header.Get("Anthropic-Ratelimit-Requests-Reset")); err != nil {
		t.Errorf("anthropic reset: %v", err)
	}

	req, _ = http.NewRequest(http.MethodGet, ts.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer sk-plain")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`rill_key_requests_total{key="alice"} 1`,
		`rill_key_rate_limited_total{key="alice",limit="requests"} 2`,
		`rill_key_tokens_total{key="alice",kind="prompt"} 5`,
		`rill_key_tokens_total{key="alice",kind="completion"} 3`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(string(body), "sk-secret") {
		t.Error("/metrics shows a key")
	}
}
