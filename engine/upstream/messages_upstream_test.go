package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"rill/engine"
	"rill/engine/upstream"
)

// messagesServer answers POSTs with answer(path, body) and keeps every
// path and body it got; GETs (health checks) get a 200.
type messagesServer struct {
	answer func(w http.ResponseWriter, path string, body map[string]any)
	mu     sync.Mutex
	paths  []string
	bodies []map[string]any
}

func (s *messagesServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		return
	}
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	s.paths = append(s.paths, r.URL.Path)
	s.bodies = append(s.bodies, body)
	s.mu.Unlock()
	s.answer(w, r.URL.Path, body)
}

// got returns the paths requested so far and empties the list.
func (s *messagesServer) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.paths
	s.paths = nil
	return p
}

// anthropicSSE writes events, each {"type": ...} JSON, as a Messages
// stream: an event line with the type, then the data.
func anthropicSSE(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		var head struct{ Type string }
		_ = json.Unmarshal([]byte(e), &head)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", head.Type, e)
		w.(http.Flusher).Flush()
	}
}

// recordedLlamaCpp reads a recording of llama.cpp's /v1/messages.
func recordedLlamaCpp(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "llamacpp-messages", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// messagesRequest is a request as rill's Messages API makes it, streamed
// (continuous usage, for message_start's counts).
func messagesRequest(model string) *engine.Request {
	return &engine.Request{Model: model, MessagesAPI: true, MaxTokens: 6, ContinuousUsage: true,
		Messages: []engine.Message{{Role: engine.RoleSystem, Content: "You tell short stories."},
			{Role: engine.RoleUser, Content: "Tell me about the mill by the river."}},
		Sampling: engine.Sampling{Temperature: 0, TopP: 1}}
}

// TestMessagesPassThrough: a Messages request to a kind that serves
// /v1/messages goes there, and its stream comes back as engine events
// whose Stats follow docs/design.md §3 rule 13 whatever the server's split
// of the prompt: from message_start on when the server reports it there,
// and on the final event.
func TestMessagesPassThrough(t *testing.T) {
	t.Parallel()
	vllmStream := []string{
		`{"type":"message_start","message":{"id":"chatcmpl-1","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":0}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Oslo is cold."}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"5f1c"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" check."}}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"chatcmpl-tool-9","name":"get_weather","input":{}}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}`,
		`{"type":"content_block_stop","index":2}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"input_tokens":40,"output_tokens":17}}`,
		`{"type":"message_stop"}`,
	}
	sglangStream := []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The mill"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" turned."}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":40,"output_tokens":3,"cache_read_input_tokens":32}}`,
		`{"type":"message_stop"}`,
	}
	type want struct {
		text, reasoning, calls string
		finish                 engine.FinishReason
		// prompt, cached, written (-1: nil), completion of the final Stats
		prompt, cached, written, completion int
		// openPrompt is the prompt count on the first event's running Stats.
		openPrompt int
	}
	tests := []struct {
		name   string
		kind   upstream.Kind
		answer func(http.ResponseWriter)
		want   want
	}{
		{"llama.cpp, a cold prompt (recorded)", upstream.LlamaCpp, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(recordedLlamaCpp(t, "stream_cold.body"))
		}, want{text: `"Here!"`, finish: engine.FinishLength, prompt: 96, cached: 11, written: 85, completion: 6, openPrompt: 96}},
		{"llama.cpp, the same prompt again (recorded)", upstream.LlamaCpp, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(recordedLlamaCpp(t, "stream_warm.body"))
		}, want{text: `"Here!"`, finish: engine.FinishLength, prompt: 96, cached: 95, written: 1, completion: 6, openPrompt: 96}},
		{"llama.cpp, a stop sequence (recorded)", upstream.LlamaCpp, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(recordedLlamaCpp(t, "stop.body"))
		}, want{text: `"He`, finish: engine.FinishStop, prompt: 96, cached: 95, written: 1, completion: 4, openPrompt: 96}},
		{"llama.cpp answering JSON (recorded)", upstream.LlamaCpp, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(recordedLlamaCpp(t, "plain.body"))
		}, want{text: `"Here!"`, finish: engine.FinishLength, prompt: 96, cached: 95, written: 1, completion: 6}},
		{"vLLM: thinking, text and a tool call", upstream.VLLM, func(w http.ResponseWriter) { anthropicSSE(w, vllmStream...) },
			want{text: "Let me check.", reasoning: "Oslo is cold.", calls: `0:chatcmpl-tool-9:get_weather:{"city": "Oslo"}`,
				finish: engine.FinishToolCalls, prompt: 40, cached: -1, written: -1, completion: 17, openPrompt: 40}},
		{"SGLang: counts only at the end, the cache read within input_tokens", upstream.SGLang, func(w http.ResponseWriter) { anthropicSSE(w, sglangStream...) },
			want{text: "The mill turned.", finish: engine.FinishStop, prompt: 40, cached: 32, written: -1, completion: 3, openPrompt: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &messagesServer{answer: func(w http.ResponseWriter, path string, _ map[string]any) {
				if path != "/v1/messages" {
					http.Error(w, `{"error":{"message":"want /v1/messages"}}`, http.StatusBadRequest)
					return
				}
				tt.answer(w)
			}}
			u, _ := serve(t, srv)
			e := newUpstream(t, "m", tt.kind, u)
			st, err := e.Generate(context.Background(), messagesRequest("m"))
			if err != nil {
				t.Fatal(err)
			}
			evs := allEvents(t, st)
			var text, reasoning string
			var calls []string
			for _, ev := range evs[:len(evs)-1] {
				text += ev.Text
				reasoning += ev.Reasoning
				for _, c := range ev.ToolCalls {
					calls = append(calls, fmt.Sprintf("%d:%s:%s:%s", c.Index, c.ID, c.Name, c.Arguments))
				}
			}
			joined := strings.Join(calls, "")
			if len(calls) > 0 {
				// Fragments of one call: the header once, then arguments.
				joined = calls[0]
				for _, c := range calls[1:] {
					joined += c[strings.LastIndex(c, ":")+1:]
				}
			}
			w := tt.want
			if text != w.text || reasoning != w.reasoning || joined != w.calls {
				t.Errorf("text %q reasoning %q calls %q, want %q %q %q", text, reasoning, joined, w.text, w.reasoning, w.calls)
			}
			final := evs[len(evs)-1]
			if !final.Final || final.FinishReason != w.finish {
				t.Fatalf("last event %+v, want final with %s", final, w.finish)
			}
			s := final.Stats
			cached, written := -1, -1
			if s.CachedTokens != nil {
				cached = int(*s.CachedTokens)
			}
			if s.CacheWriteTokens != nil {
				written = *s.CacheWriteTokens
			}
			if s.PromptTokens != w.prompt || cached != w.cached || written != w.written || s.CompletionTokens != w.completion {
				t.Errorf("final stats prompt %d cached %d written %d completion %d, want %d %d %d %d",
					s.PromptTokens, cached, written, s.CompletionTokens, w.prompt, w.cached, w.written, w.completion)
			}
			if len(evs) > 1 && evs[0].Stats != nil {
				first := evs[0].Stats
				if first.PromptTokens != w.openPrompt {
					t.Errorf("first event's prompt tokens %d, want %d", first.PromptTokens, w.openPrompt)
				}
				if w.openPrompt > 0 && (!sameCount(first.CachedTokens, s.CachedTokens) || !samePtr(first.CacheWriteTokens, s.CacheWriteTokens)) {
					t.Errorf("first event's input counts %+v differ from the final %+v", first, s)
				}
			}
			if got := srv.got(); len(got) != 1 {
				t.Errorf("paths %v", got)
			}
			body := srv.bodies[0]
			if body["stream"] != true || body["max_tokens"] != 6.0 || body["system"] != "You tell short stories." {
				t.Errorf("request body %v", body)
			}
		})
	}
}

func sameCount(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func samePtr(a, b *int) bool       { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// TestMessagesFallBackToChat: a replica that answers 404 on /v1/messages
// gets the request at chat completions at once, and Messages requests go
// there from then on; one that answers 404 on both (a model it does not
// serve) is not taken for a server without the route. Requests that
// /v1/messages cannot carry go to chat completions.
func TestMessagesFallBackToChat(t *testing.T) {
	t.Parallel()
	notFound := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"message":"File Not Found","type":"not_found_error","code":404}}`)
	}
	chat := func(w http.ResponseWriter) {
		sse(w, `{"choices":[{"index":0,"delta":{"content":"hi"}}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}`, `[DONE]`)
	}
	old := &messagesServer{answer: func(w http.ResponseWriter, path string, _ map[string]any) {
		if path == "/v1/messages" {
			notFound(w)
			return
		}
		chat(w)
	}}
	u, _ := serve(t, old)
	e := newUpstream(t, "m", upstream.LlamaCpp, u)
	run := func(req *engine.Request) (string, error) {
		st, err := e.Generate(context.Background(), req)
		if err != nil {
			return "", err
		}
		var text string
		for {
			ev, err := engine.Recv(st)
			if errors.Is(err, io.EOF) {
				return text, nil
			}
			if err != nil {
				return "", err
			}
			text += ev.Text
		}
	}
	for i, want := range [][]string{{"/v1/messages", "/v1/chat/completions"}, {"/v1/chat/completions"}} {
		text, err := run(messagesRequest("m"))
		if err != nil || text != "hi" {
			t.Fatalf("request %d: %q %v", i, text, err)
		}
		if got := old.got(); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("request %d: paths %v, want %v", i, got, want)
		}
	}

	// 404 everywhere: the model is unknown there, the route may exist.
	gone := &messagesServer{answer: func(w http.ResponseWriter, _ string, _ map[string]any) { notFound(w) }}
	u2, _ := serve(t, gone)
	e = newUpstream(t, "m", upstream.LlamaCpp, u2)
	for i := range 2 {
		if _, err := run(messagesRequest("m")); !errors.Is(err, engine.ErrUpstream) {
			t.Errorf("request %d: %v, want ErrUpstream", i, err)
		}
		if got := gone.got(); strings.Join(got, " ") != "/v1/messages /v1/chat/completions" {
			t.Errorf("request %d: paths %v", i, got)
		}
	}

	// A seed, which llama.cpp's /v1/messages drops: chat completions.
	fresh := &messagesServer{answer: func(w http.ResponseWriter, _ string, _ map[string]any) { chat(w) }}
	u3, _ := serve(t, fresh)
	e = newUpstream(t, "m", upstream.LlamaCpp, u3)
	req := messagesRequest("m")
	seed := int64(7)
	req.Sampling.Seed = &seed
	if _, err := run(req); err != nil {
		t.Fatal(err)
	}
	if got := fresh.got(); len(got) != 1 || got[0] != "/v1/chat/completions" || fresh.bodies[0]["seed"] != 7.0 {
		t.Errorf("paths %v, body %v", got, fresh.bodies[0])
	}
}

// TestMessagesUpstreamErrors: a refusal of /v1/messages is the client's
// fault as on chat (llama.cpp's context error keeps its code); an error
// event before the first token sends the request to another replica, one
// that says the request is invalid does not.
func TestMessagesUpstreamErrors(t *testing.T) {
	t.Parallel()
	tooLong := &messagesServer{answer: func(w http.ResponseWriter, _ string, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(recordedLlamaCpp(t, "too_long.body"))
	}}
	u, _ := serve(t, tooLong)
	_, err := newUpstream(t, "m", upstream.LlamaCpp, u).Generate(context.Background(), messagesRequest("m"))
	var re *engine.RequestError
	if !errors.As(err, &re) || re.Code != engine.CodeContextLengthExceeded {
		t.Errorf("too long: %v, want a context_length_exceeded RequestError", err)
	}

	busy := &messagesServer{answer: func(w http.ResponseWriter, _ string, _ map[string]any) {
		anthropicSSE(w, `{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":0}}}`,
			`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}}
	ok := &messagesServer{answer: func(w http.ResponseWriter, _ string, _ map[string]any) {
		anthropicSSE(w, `{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":0}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":5,"output_tokens":1}}`,
			`{"type":"message_stop"}`)
	}}
	ub, _ := serve(t, busy)
	uo, _ := serve(t, ok)
	e := newUpstream(t, "m", upstream.VLLM, ub, uo)
	for i := range 4 { // whichever replica comes first
		st, err := e.Generate(context.Background(), messagesRequest("m"))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		evs := allEvents(t, st)
		if evs[0].Text != "ok" || evs[len(evs)-1].Stats.PromptTokens != 5 {
			t.Errorf("request %d: events %+v", i, evs)
		}
	}

	invalid := &messagesServer{answer: func(w http.ResponseWriter, _ string, _ map[string]any) {
		anthropicSSE(w, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}`)
	}}
	ui, _ := serve(t, invalid)
	st, err := newUpstream(t, "m", upstream.SGLang, ui).Generate(context.Background(), messagesRequest("m"))
	if err == nil {
		_, err = engine.Recv(st)
	}
	if !errors.As(err, &re) || !strings.Contains(re.Message, "too large") {
		t.Errorf("invalid: %v, want a RequestError", err)
	}
}
