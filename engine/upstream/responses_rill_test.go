package upstream_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"rill/engine/upstream"
	"rill/service"
)

// pathRecorder counts the POSTs a replica gets, by path.
type pathRecorder struct {
	h     http.Handler
	mu    sync.Mutex
	paths map[string]int
}

func (p *pathRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		p.mu.Lock()
		p.paths[r.URL.Path]++
		p.mu.Unlock()
	}
	p.h.ServeHTTP(w, r)
}

func (p *pathRecorder) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paths[path]
}

// TestResponsesBehindRill: a Responses request to a rill in front of
// another rill (kind rill, which has the Responses API) goes to the
// upstream's /v1/responses, and the client gets the upstream's counts —
// a cold prefix, then a warm one — under rill's own ids and rules; a chat
// request still goes to chat completions.
func TestResponsesBehindRill(t *testing.T) {
	t.Parallel()
	rec := &pathRecorder{h: service.New(service.Options{Engine: nativeEngine(t, "tiny"), Logger: discard}), paths: map[string]int{}}
	u, _ := serve(t, rec)
	url := front(t, newUpstream(t, "tiny", upstream.Rill, u))

	body := `{"model":"tiny","input":"Tell me about the river and the mill by the bridge.","max_output_tokens":6,"ignore_eos":true,"temperature":0}`
	type usage struct {
		Input  int `json:"input_tokens"`
		Output int `json:"output_tokens"`
		Total  int `json:"total_tokens"`
		In     *struct {
			Cached int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	}
	var usages []usage
	var texts []string
	for i := range 2 {
		a := post(t, url, "/v1/responses", body)
		if a.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
		var r struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Output []struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"output"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(a.body, &r); err != nil {
			t.Fatal(err)
		}
		if r.Status != "incomplete" || !strings.HasPrefix(r.ID, "resp_") || len(r.Output) != 1 {
			t.Fatalf("request %d: %s", i, a.body)
		}
		texts = append(texts, r.Output[0].Content[0].Text)
		var u usage
		if err := json.Unmarshal(r.Usage, &u); err != nil {
			t.Fatal(err)
		}
		usages = append(usages, u)
	}
	if n := rec.count("/v1/responses"); n != 2 {
		t.Errorf("the upstream got %d POST /v1/responses (paths %v), want 2", n, rec.paths)
	}
	cold, warm := usages[0], usages[1]
	if cold.Input == 0 || cold.Output != 6 || cold.Total != cold.Input+cold.Output || cold.In == nil || cold.In.Cached != 0 {
		t.Errorf("cold usage %+v", cold)
	}
	if warm.Input != cold.Input || warm.In == nil || warm.In.Cached != (cold.Input-1)/16*16 {
		t.Errorf("warm usage %+v (cold %+v): want the upstream's cached prefix", warm, cold)
	}
	if texts[0] != texts[1] || texts[0] == "" {
		t.Errorf("greedy texts differ: %q %q", texts[0], texts[1])
	}

	// Streamed, the upstream's events become rill's own.
	a := post(t, url, "/v1/responses", strings.Replace(body, `{`, `{"stream":true,`, 1))
	if a.status != http.StatusOK {
		t.Fatalf("stream: %d %s", a.status, a.body)
	}
	var final string
	for _, ev := range a.events {
		if strings.Contains(string(ev), `"type":"response.incomplete"`) {
			final = string(ev)
		}
	}
	if !strings.Contains(final, `"output_tokens":6`) || !strings.Contains(final, texts[0]) {
		t.Errorf("streamed final event %s", final)
	}

	// A chat request is chat upstream.
	if got := post(t, url, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); got.status != http.StatusOK {
		t.Fatalf("chat: %d %s", got.status, got.body)
	}
	if rec.count("/v1/chat/completions") != 1 || rec.count("/v1/responses") != 3 {
		t.Errorf("upstream paths %v", rec.paths)
	}
}
