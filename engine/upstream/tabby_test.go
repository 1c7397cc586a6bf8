package upstream_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"rill/engine/upstream"
)

// tabbyFixture streams a chat answer the way tabbyAPI does: content deltas,
// a finish chunk, then a usage chunk that repeats the finish reason on a
// choice (tabbyAPI does not send "choices": []) and carries usage as given.
type tabbyFixture struct {
	words []string
	usage string // the usage object, verbatim
}

func (f *tabbyFixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		io.WriteString(w, "OK")
		return
	}
	var req struct {
		BanEOSToken bool `json:"ban_eos_token"`
		TopK        int  `json:"top_k"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil || !req.BanEOSToken || req.TopK != 5 {
		// rill must translate ignore_eos into tabbyAPI's ban_eos_token.
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, `{"detail":"unexpected request %s"}`, body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(choice, usage string) {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"choices\":[%s]%s}\n\n", choice, usage)
	}
	for _, word := range f.words {
		chunk(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"finish_reason":null}`, word), "")
	}
	chunk(`{"index":0,"delta":{},"finish_reason":"stop"}`, "")
	chunk(`{"index":0,"delta":{},"finish_reason":"stop"}`, `,"usage":`+f.usage)
	io.WriteString(w, "data: [DONE]\n\n")
}

// TestTabbyFractionalCached checks that tabbyAPI's counts reach the client
// as sent, with fractional cached counts rounded by the service (half to
// even, clamped to the prompt): the engine keeps them as floats.
func TestTabbyFractionalCached(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		usage string
		want  string // the client's usage
	}{
		{"half rounds to even (down)", `{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"cached_tokens":12.5}`,
			`{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":12}}`},
		{"half rounds to even (up), in details", `{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":13.5}}`,
			`{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":14}}`},
		{"fraction rounds to nearest", `{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"cached_tokens":7.6}`,
			`{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":8}}`},
		{"clamped to the prompt", `{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"cached_tokens":40.7}`,
			`{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":30}}`},
		{"zero is measured", `{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"cached_tokens":0}`,
			`{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33,"prompt_tokens_details":{"cached_tokens":0}}`},
		{"absent is not measured", `{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33}`,
			`{"prompt_tokens":30,"completion_tokens":3,"total_tokens":33}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := &tabbyFixture{words: []string{"Once", " upon", " a"}, usage: tc.usage}
			u, _ := serve(t, fx)
			url := front(t, newUpstream(t, "tabby", upstream.TabbyAPI, u))
			for _, stream := range []bool{true, false} {
				body := fmt.Sprintf(`{"model":"tabby","messages":[{"role":"user","content":"hi"}],"top_k":5,"ignore_eos":true,"stream":%v,"stream_options":{"include_usage":true}}`, stream)
				if !stream {
					body = strings.Replace(body, `,"stream_options":{"include_usage":true}`, "", 1)
				}
				got := post(t, url, "/v1/chat/completions", body)
				if got.status != http.StatusOK {
					t.Fatalf("stream=%v: status %d: %s", stream, got.status, got.body)
				}
				if tx := texts(t, got)[0]; tx != "Once upon a" {
					t.Errorf("stream=%v: text %q", stream, tx)
				}
				var usage json.RawMessage
				if stream {
					usage = decode(t, got.events[len(got.events)-1]).Usage
				} else {
					usage = decode(t, got.body).Usage
				}
				if string(usage) != tc.want {
					t.Errorf("stream=%v: usage\n got %s\nwant %s", stream, usage, tc.want)
				}
			}
		})
	}
}
