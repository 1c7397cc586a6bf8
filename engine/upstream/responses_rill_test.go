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

// TestResponsesToolsBehindRill: a Responses request with tools to a rill in
// front of another rill goes to the upstream's chat completions (which
// carries tools), and the forced call comes back as a function_call item,
// streamed or not; the next turn, the call's output by
// previous_response_id, goes there too, as an assistant message with
// tool_calls and a tool message.
func TestResponsesToolsBehindRill(t *testing.T) {
	t.Parallel()
	rec := &pathRecorder{h: service.New(service.Options{Engine: nativeEngine(t, "tiny"), Logger: discard}), paths: map[string]int{}}
	u, _ := serve(t, rec)
	url := front(t, newUpstream(t, "tiny", upstream.Rill, u))

	const body = `{"model":"tiny","input":"Weather in Oslo?","temperature":0,"max_output_tokens":300,"parallel_tool_calls":false,
	  "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":10}},
	    "required":["city"],"additionalProperties":false}}],"tool_choice":{"type":"function","name":"get_weather"}}`
	type output struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output []struct {
			Type      string `json:"type"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"output"`
	}
	a := post(t, url, "/v1/responses", body)
	if a.status != http.StatusOK {
		t.Fatalf("%d %s", a.status, a.body)
	}
	var r output
	if err := json.Unmarshal(a.body, &r); err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if r.Status != "completed" || len(r.Output) != 1 || r.Output[0].Type != "function_call" || r.Output[0].Name != "get_weather" ||
		json.Unmarshal([]byte(r.Output[0].Arguments), &args) != nil || args["city"] == nil {
		t.Fatalf("response %s", a.body)
	}
	if rec.count("/v1/chat/completions") != 1 || rec.count("/v1/responses") != 0 {
		t.Errorf("upstream paths %v: tools go to chat completions", rec.paths)
	}

	// Streamed: the same call's arguments in deltas (greedy, the same output).
	s := post(t, url, "/v1/responses", strings.Replace(body, `{`, `{"stream":true,`, 1))
	var streamed string
	for _, ev := range s.events {
		var e struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
		}
		_ = json.Unmarshal(ev, &e)
		if e.Type == "response.function_call_arguments.delta" {
			streamed += e.Delta
		}
	}
	if streamed != r.Output[0].Arguments {
		t.Errorf("streamed arguments %q, not streamed %q", streamed, r.Output[0].Arguments)
	}

	next := `{"model":"tiny","previous_response_id":"` + r.ID + `","max_output_tokens":8,"temperature":0,
	  "input":[{"type":"function_call_output","call_id":"` + r.Output[0].CallID + `","output":"{\"celsius\": -3}"}]}`
	b := post(t, url, "/v1/responses", next)
	if b.status != http.StatusOK {
		t.Fatalf("next turn: %d %s", b.status, b.body)
	}
	if rec.count("/v1/chat/completions") != 3 || rec.count("/v1/responses") != 0 {
		t.Errorf("upstream paths %v", rec.paths)
	}
}
