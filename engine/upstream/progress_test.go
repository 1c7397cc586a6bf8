package upstream_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"rill/engine/upstream"
)

// fakeLlamaProgress answers a streamed chat completion as llama.cpp's
// server does with return_progress: a prompt_progress chunk with the
// opening delta, then a token, the finish and the usage. It fails the
// request when the body did not ask for progress (asked: what the body
// said).
func fakeLlamaProgress(asked *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return // healthy
		}
		var body map[string]any
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		asked.Store(body["return_progress"] == true)
		w.Header().Set("Content-Type", "text/event-stream")
		head := `"created":1,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"`
		if asked.Load() {
			fmt.Fprintf(w, "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],%s,\"prompt_progress\":{\"total\":30,\"cache\":14,\"processed\":14,\"time_ms\":0}}\n\n", head)
			fmt.Fprintf(w, "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],%s,\"prompt_progress\":{\"total\":30,\"cache\":14,\"processed\":30,\"time_ms\":7}}\n\n", head)
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"Hi\"}}],%s}\n\n", head)
		fmt.Fprintf(w, "data: {\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"delta\":{}}],%s}\n\n", head)
		fmt.Fprintf(w, "data: {\"choices\":[],%s,\"usage\":{\"completion_tokens\":1,\"prompt_tokens\":30,\"total_tokens\":31,\"prompt_tokens_details\":{\"cached_tokens\":14}}}\n\n", head)
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// progressChunks returns the prompt_progress objects of a's chunks, and
// whether one came after content.
func progressChunks(t *testing.T, a answer) (progress []map[string]int, late bool) {
	t.Helper()
	content := false
	for _, ev := range a.events {
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Progress map[string]int `json:"prompt_progress"`
		}
		if err := json.Unmarshal(ev, &c); err != nil {
			t.Fatalf("%v: %s", err, ev)
		}
		if c.Progress != nil {
			late = late || content
			progress = append(progress, c.Progress)
		}
		for _, ch := range c.Choices {
			content = content || ch.Delta.Content != ""
		}
	}
	return progress, late
}

// TestProgressThroughUpstream: a client's return_progress reaches an
// upstream llama.cpp (or rill), whose prompt_progress chunks come out of
// rill as its own, before the first token; without it, none is asked for.
func TestProgressThroughUpstream(t *testing.T) {
	t.Parallel()
	var asked atomic.Bool
	llama, _ := serve(t, fakeLlamaProgress(&asked))
	back := front(t, nativeEngine(t, "m"))
	tests := []struct {
		name string
		kind upstream.Kind
		url  string
		ask  bool
	}{
		{"llama.cpp", upstream.LlamaCpp, llama, true},
		{"llama.cpp, not asked", upstream.LlamaCpp, llama, false},
		{"rill", upstream.Rill, back, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := front(t, newUpstream(t, "m", tt.kind, tt.url))
			body := `{"model":"m","messages":[{"role":"user","content":"Say hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}`
			if tt.ask {
				body += `,"return_progress":true`
			}
			a := post(t, url, "/v1/chat/completions", body+"}")
			if a.status != http.StatusOK || !a.done {
				t.Fatalf("status %d, done %v: %s", a.status, a.done, a.body)
			}
			if tt.kind == upstream.LlamaCpp && asked.Load() != tt.ask {
				t.Fatalf("the upstream was asked for progress: %v, want %v", asked.Load(), tt.ask)
			}
			progress, late := progressChunks(t, a)
			if !tt.ask {
				if len(progress) > 0 {
					t.Fatalf("progress chunks without asking: %v", progress)
				}
				return
			}
			if len(progress) == 0 || late {
				t.Fatalf("progress %v (after content: %v); want some, before the first token", progress, late)
			}
			var usage struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(a.events[len(a.events)-1], &usage); err != nil {
				t.Fatal(err)
			}
			last := progress[len(progress)-1]
			if last["processed"] != last["total"] || last["total"] != usage.Usage.PromptTokens {
				t.Fatalf("last progress %v, want the whole prompt of %d tokens", last, usage.Usage.PromptTokens)
			}
		})
	}
}
