package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is what the tap prints to, read by the test.
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

// TestSummarize: the finish and usage of each wire format, streamed or
// not, and an error's message.
func TestSummarize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		body   string
		stream bool
		want   string
	}{
		{"chat stream", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}],\"usage\":null}\n\n" +
			"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n",
			true, ` events=3 finish=stop usage={"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}`},
		{"responses stream", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"object\":\"response\",\"status\":\"in_progress\",\"usage\":null}}\n\n" +
			"event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"object\":\"response\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":9}}}\n\n",
			true, ` events=2 finish=incomplete(max_output_tokens) usage={"input_tokens":9}`},
		{"messages stream", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"cache_read_input_tokens\":30,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n",
			true, ` events=2 finish=end_turn usage={"cache_read_input_tokens":30,"input_tokens":1,"output_tokens":7}`},
		{"chat", `{"choices":[{"finish_reason":"tool_calls"}],"usage":{"completion_tokens":3}}`, false, ` finish=tool_calls usage={"completion_tokens":3}`},
		{"messages", `{"type":"message","stop_reason":"max_tokens","usage":{"output_tokens":16}}`, false, ` finish=max_tokens usage={"output_tokens":16}`},
		{"error", `{"type":"error","error":{"type":"invalid_request_error","message":"bad schema"}}`, false, ` error="bad schema"`},
		{"not JSON", `404 page not found`, false, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := summarize([]byte(tc.body), tc.stream); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestDescribeRequest: tools counted by type, caps by field name.
func TestDescribeRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"responses", `{"model":"m","stream":true,"input":[{},{}],"tools":[{"type":"function"},{"type":"namespace"},{"type":"function"}],"max_output_tokens":9}`,
			` model=m stream=true input_items=2 tools=3(function:2,namespace:1) max_output_tokens=9 bytes=`},
		{"messages", `{"model":"m","system":"x","messages":[{}],"tools":[{"name":"a"}],"max_tokens":32000}`,
			` model=m messages=1 system_bytes=3 tools=1(custom:1) max_tokens=32000 bytes=`},
		{"no body", ``, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := tc.want
			if want != "" {
				want += fmt.Sprint(len(tc.body))
			}
			if got := describeRequest([]byte(tc.body)); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// TestTapForwards: the tap passes the body through unchanged, streamed, and
// prints one line for the exchange.
func TestTapForwards(t *testing.T) {
	t.Parallel()
	const event = "data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":2}}\n\n"
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(event))
	}))
	defer upstream.Close()
	var out lockedBuffer
	tp := &tap{out: &out}
	proxy, err := newProxy(upstream.URL, tp)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tp.wrap(proxy))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != event {
		t.Fatalf("body %q, want %q", body, event)
	}
	want := `tap #1: POST /v1/chat/completions model=m stream=true bytes=27 -> 200 events=1 finish=stop usage={"prompt_tokens":2}` + "\n"
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}
