package upstream_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"rill/engine/upstream"
)

// recording is a llama.cpp answer from ../shared/refdata/llamacpp: its
// status and body, as recorded.
type recording struct {
	status int
	body   []byte
}

func loadRecording(t testing.TB, ref, name string) recording {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(ref, "llamacpp", name+".body"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(ref, "llamacpp", name+".status"))
	if err != nil {
		t.Fatal(err)
	}
	status, err := strconv.Atoi(strings.Fields(string(st))[0])
	if err != nil {
		t.Fatalf("%s.status: %v", name, err)
	}
	return recording{status: status, body: body}
}

// fixture replays one recording to every POST, like the llama.cpp server
// that made it, and keeps the bodies it was sent.
type fixture struct {
	mu   sync.Mutex
	rec  recording
	got  [][]byte
	path []string
}

func (f *fixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/health" {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/metrics" {
		// As llama-server answers without --metrics.
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusNotImplemented)
		io.WriteString(w, `{"error":{"code":501,"message":"This server does not support metrics endpoint.","type":"not_supported_error"}}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.got = append(f.got, body)
	f.path = append(f.path, r.URL.Path)
	rec := f.rec
	f.mu.Unlock()
	if rec.status == http.StatusOK && strings.HasPrefix(string(rec.body), "data:") {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
	}
	w.WriteHeader(rec.status)
	w.Write(rec.body)
}

func (f *fixture) requests() ([][]byte, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.got...), append([]string(nil), f.path...)
}

// peerCounters are the counters llama.cpp reported in a recording.
type peerCounters struct {
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
	Timings *struct {
		CacheN         int  `json:"cache_n"`
		DraftN         *int `json:"draft_n"`
		DraftNAccepted *int `json:"draft_n_accepted"`
	}
}

// wantUsage is the usage rill must show for a recording, written out from
// what llama.cpp measured: cache_n is the cached count, the draft counters
// are accepted = draft_n_accepted and rejected = draft_n - draft_n_accepted.
func wantUsage(t testing.TB, body []byte) string {
	t.Helper()
	var last peerCounters
	events, _ := readSSE(t, strings.NewReader(string(body)))
	for _, e := range events {
		var c peerCounters
		if err := json.Unmarshal(e, &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			last.Usage = c.Usage
		}
		if c.Timings != nil {
			last.Timings = c.Timings
		}
	}
	if last.Usage == nil || last.Timings == nil {
		t.Fatal("recording has no usage and timings")
	}
	u, tm := last.Usage, last.Timings
	s := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}`,
		u.PromptTokens, u.CompletionTokens, u.PromptTokens+u.CompletionTokens, tm.CacheN)
	if tm.DraftN != nil {
		s += fmt.Sprintf(`,"completion_tokens_details":{"accepted_prediction_tokens":%d,"rejected_prediction_tokens":%d}`,
			*tm.DraftNAccepted, *tm.DraftN-*tm.DraftNAccepted)
	}
	return s + "}"
}

// clientBody is the recorded request of name as a client of rill sends it:
// for rill's model id, streamed or not.
func clientBody(t testing.TB, ref, name, model string, stream bool) (string, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(ref, "llamacpp", name+".request.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["model"] = model
	if !stream {
		m["stream"] = false
		delete(m, "stream_options")
	}
	b, _ := json.Marshal(m)
	return string(b), m
}

// TestReplayLlamaCpp puts rill in front of a fixture that replays llama.cpp's
// recorded streams. rill asks its upstream for a stream with usage whatever
// the client asked, and the client must see llama.cpp's text and counters in
// rill's usage shape and under rill's rules: cache_n as cached_tokens, the
// draft counters as completion_tokens_details, and no usage at all on a
// stream without include_usage (though llama.cpp puts usage on the finish
// chunk of /v1/completions streams).
func TestReplayLlamaCpp(t *testing.T) {
	t.Parallel()
	ref := refdata(t)
	cases := []struct {
		served  string // the recording the upstream answers with
		request string // the recorded request the client sends
		stream  bool
	}{
		{"a_usage/chat_stream_usage", "a_usage/chat_stream_usage", true},
		{"a_usage/chat_stream_usage_2nd", "a_usage/chat_stream_usage_2nd", true},
		{"a_usage/chat_stream_usage_2nd", "a_usage/chat_stream_nousage", true},
		{"a_usage/chat_stream_usage_2nd", "a_usage/chat_stream_usage_false", true},
		{"a_usage/chat_stream_usage", "a_usage/chat_stream_usage", false},
		{"a_usage/comp_stream_usage", "a_usage/comp_stream_usage", true},
		{"a_usage/comp_stream_usage_2nd", "a_usage/comp_stream_nousage", true},
		{"a_usage/comp_stream_usage", "a_usage/comp_stream_usage", false},
		{"a_usage/comp_stop_string_stream", "a_usage/comp_stop_string_stream", true},
		{"c_spec/draft_same_model/chat_stream_usage", "c_spec/draft_same_model/chat_stream_usage", true},
		{"c_spec/draft_same_model/comp_stream_usage", "c_spec/draft_same_model/comp_stream_usage", false},
		{"c_spec/ngram_simple_n3_m4/comp_stream_usage", "c_spec/ngram_simple_n3_m4/comp_stream_usage", true},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s<-%s/stream=%v", tc.served, filepath.Base(tc.request), tc.stream)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := loadRecording(t, ref, tc.served)
			fx := &fixture{rec: rec}
			upURL, _ := serve(t, fx)
			e, err := upstream.New(upstream.Options{ID: "tiny-upstream", UpstreamModel: "stories260K",
				Kind: upstream.LlamaCpp, Replicas: []upstream.Replica{{URL: upURL + "/v1/"}}, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			url := front(t, e)

			body, sent := clientBody(t, ref, tc.request, "tiny-upstream", tc.stream)
			path := "/v1/completions"
			if _, chat := sent["messages"]; chat {
				path = "/v1/chat/completions"
			}
			got := post(t, url, path, body)
			if got.status != http.StatusOK {
				t.Fatalf("status %d: %s", got.status, got.body)
			}

			// What went upstream: the client's request, streamed with usage.
			reqs, paths := fx.requests()
			if len(reqs) != 1 || paths[0] != path {
				t.Fatalf("upstream got %d requests on %v, want 1 on %s", len(reqs), paths, path)
			}
			var up map[string]any
			if err := json.Unmarshal(reqs[0], &up); err != nil {
				t.Fatal(err)
			}
			if up["model"] != "stories260K" || up["stream"] != true ||
				fmt.Sprint(up["stream_options"]) != "map[include_usage:true]" {
				t.Errorf("upstream request %s: want model stories260K, streamed with include_usage", reqs[0])
			}
			for _, k := range []string{"messages", "prompt", "max_tokens", "temperature", "stop"} {
				if fmt.Sprint(up[k]) != fmt.Sprint(sent[k]) {
					t.Errorf("upstream %s = %v, client sent %v", k, up[k], sent[k])
				}
			}

			// What the client saw: the peer's text, rill's usage.
			peer := texts(t, answer{events: mustEvents(t, rec.body)})
			if tx := texts(t, got); tx[0] != peer[0] || len(tx) != 1 {
				t.Errorf("text %v, upstream sent %q", tx, peer[0])
			}
			want := wantUsage(t, rec.body)
			includeUsage := fmt.Sprint(sent["stream_options"]) == "map[include_usage:true]"
			switch {
			case !tc.stream:
				var resp struct{ Usage json.RawMessage }
				if err := json.Unmarshal(got.body, &resp); err != nil {
					t.Fatal(err)
				}
				if string(resp.Usage) != want {
					t.Errorf("usage\n got %s\nwant %s", resp.Usage, want)
				}
			case !got.done:
				t.Error("stream did not end with [DONE]")
			case includeUsage:
				last := got.events[len(got.events)-1]
				var c struct {
					Choices []any
					Usage   json.RawMessage
				}
				if err := json.Unmarshal(last, &c); err != nil {
					t.Fatal(err)
				}
				if len(c.Choices) != 0 || string(c.Usage) != want {
					t.Errorf("last chunk %s\nwant choices [] and usage %s", last, want)
				}
				for _, ev := range got.events[:len(got.events)-1] {
					if !strings.Contains(string(ev), `"usage":null`) {
						t.Errorf("chunk without \"usage\":null: %s", ev)
					}
				}
			default:
				if hasUsageKey(got.events) {
					t.Errorf("a chunk has usage although the client did not ask for it")
				}
			}
		})
	}
}

func mustEvents(t testing.TB, body []byte) [][]byte {
	t.Helper()
	events, done := readSSE(t, strings.NewReader(string(body)))
	if !done {
		t.Fatal("recording does not end with [DONE]")
	}
	return events
}

// TestReplayErrors checks how upstream refusals reach the client: llama.cpp's
// 400 for an over-long prompt is the client's fault and keeps its message
// (with OpenAI's code); a replica answering 500 is replaced by the next one;
// replicas that all answer 503 make a 503 to retry.
func TestReplayErrors(t *testing.T) {
	t.Parallel()
	ref := refdata(t)
	tooLong := loadRecording(t, ref, "d_errors/prompt_too_long")
	ok := loadRecording(t, ref, "a_usage/comp_stream_usage")
	broken := recording{status: http.StatusInternalServerError, body: []byte(`{"error":{"code":500,"message":"boom","type":"server_error"}}`)}
	loading := recording{status: http.StatusServiceUnavailable, body: []byte(`{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`)}
	cases := []struct {
		name       string
		replicas   []recording
		stream     bool
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{"too long", []recording{tooLong}, false, 400, "context_length_exceeded", "exceeds the available context size"},
		{"too long stream", []recording{tooLong}, true, 400, "context_length_exceeded", "exceeds the available context size"},
		{"500 then ok", []recording{broken, ok}, true, 200, "", ""},
		{"ok then 500", []recording{ok, broken}, false, 200, "", ""},
		{"all loading", []recording{loading, loading}, true, 503, "engine_overloaded", ""},
		{"all broken", []recording{broken, broken}, false, 502, "upstream_error", "boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var urls []string
			var fxs []*fixture
			for _, rec := range tc.replicas {
				fx := &fixture{rec: rec}
				u, _ := serve(t, fx)
				urls, fxs = append(urls, u), append(fxs, fx)
			}
			// Affinity off: each replica is tried in turn, whichever comes first.
			opts := upstream.Options{ID: "m", Kind: upstream.LlamaCpp, PrefixBytes: -1, Logger: discard}
			for _, u := range urls {
				opts.Replicas = append(opts.Replicas, upstream.Replica{URL: u})
			}
			e, err := upstream.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			body := fmt.Sprintf(`{"model":"m","prompt":"Once upon a time","max_tokens":24,"stream":%v}`, tc.stream)
			got := post(t, front(t, e), "/v1/completions", body)
			if got.status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s %s", got.status, tc.wantStatus, got.body, got.events)
			}
			attempts := 0
			for _, fx := range fxs {
				r, _ := fx.requests()
				attempts += len(r)
			}
			if tc.wantStatus == 200 {
				if tx := texts(t, got); !strings.HasPrefix(tx[0], ", there was") {
					t.Errorf("text %q", tx[0])
				}
				return
			}
			if tc.wantStatus != 400 && attempts != len(tc.replicas) {
				t.Errorf("%d attempts, want one per replica (%d)", attempts, len(tc.replicas))
			}
			if tc.wantStatus == 400 && attempts != 1 {
				t.Errorf("%d attempts for the client's fault, want 1", attempts)
			}
			c := decode(t, got.body)
			if c.Error == nil {
				t.Fatalf("no error object: %s", got.body)
			}
			if code := c.Error.Code; code == nil || *code != tc.wantCode {
				t.Errorf("code %v, want %q", code, tc.wantCode)
			}
			if !strings.Contains(c.Error.Message, tc.wantMsg) {
				t.Errorf("message %q does not contain %q", c.Error.Message, tc.wantMsg)
			}
		})
	}
}
