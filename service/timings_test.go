package service

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"rill/engine"
)

// TestAssembleTimings: the counts are the usage's, by llama.cpp's
// definitions (prompt_n the prompt less its cached part, draft_n accepted
// plus rejected), and the times the longest any choice took.
func TestAssembleTimings(t *testing.T) {
	n := func(v int) *int { return &v }
	f := func(v float64) *float64 { return &v }
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	tests := []struct {
		name    string
		prompts [][]engine.Stats
		want    string
	}{
		{"nothing measured", [][]engine.Stats{{{PromptTokens: 10, CompletionTokens: 4, PromptTime: ms(20), GenerationTime: ms(30)}}},
			`{"cache_n":0,"prompt_n":10,"prompt_ms":20,"prompt_per_token_ms":2,"prompt_per_second":500,"predicted_n":4,"predicted_ms":30,"predicted_per_token_ms":7.5,"predicted_per_second":133.33333333333334}`},
		{"cached prefix", [][]engine.Stats{{{PromptTokens: 40, CachedTokens: f(32), CompletionTokens: 2, PromptTime: ms(8), GenerationTime: ms(4)}}},
			`{"cache_n":32,"prompt_n":8,"prompt_ms":8,"prompt_per_token_ms":1,"prompt_per_second":1000,"predicted_n":2,"predicted_ms":4,"predicted_per_token_ms":2,"predicted_per_second":500}`},
		{"drafting, two choices", [][]engine.Stats{{
			{PromptTokens: 5, CachedTokens: f(0), CompletionTokens: 6, DraftAccepted: n(3), DraftRejected: n(2), PromptTime: ms(10), GenerationTime: ms(12)},
			{PromptTokens: 5, CachedTokens: f(0), CompletionTokens: 4, DraftAccepted: n(1), DraftRejected: n(4), PromptTime: ms(11), GenerationTime: ms(10)}}},
			`{"cache_n":0,"prompt_n":5,"prompt_ms":11,"prompt_per_token_ms":2.2,"prompt_per_second":454.54545454545456,"predicted_n":10,"predicted_ms":12,"predicted_per_token_ms":1.2,"predicted_per_second":833.3333333333334,"draft_n":10,"draft_n_accepted":4}`},
		{"no token came", [][]engine.Stats{{{PromptTokens: 3}}},
			`{"cache_n":0,"prompt_n":3,"prompt_ms":0,"prompt_per_token_ms":0,"prompt_per_second":0,"predicted_n":0,"predicted_ms":0,"predicted_per_token_ms":0,"predicted_per_second":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := AssembleUsage(tt.prompts)
			tm := AssembleTimings(tt.prompts, &u)
			got := tm.AppendJSON(nil)
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			mustValidate(t, "Timings", got)
			cached := 0
			if u.CachedTokens != nil {
				cached = *u.CachedTokens
			}
			if tm.PromptN+tm.CacheN != u.PromptTokens || tm.CacheN != cached || tm.PredictedN != u.CompletionTokens {
				t.Errorf("timings %+v disagree with usage %+v", tm, u)
			}
		})
	}
}

// timingsOf decodes the timings object of a response or chunk; nil when absent.
func timingsOf(t *testing.T, data []byte) map[string]float64 {
	t.Helper()
	var v struct {
		Timings map[string]float64 `json:"timings"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return v.Timings
}

// TestTimingsOnResponses: "timings": true puts the timings object on a
// non-streamed response and on the last chunk of a stream (the usage chunk,
// or a chunk of its own), for chat and completions; without it, nowhere.
// Its counts equal the usage's.
func TestTimingsOnResponses(t *testing.T) {
	t.Parallel()
	cached := 2.0
	stats := func(int) engine.Stats {
		return engine.Stats{PromptTokens: 9, CachedTokens: &cached, CompletionTokens: 2,
			PromptTime: 12 * time.Millisecond, GenerationTime: 8 * time.Millisecond}
	}
	fake := &fakeEngine{respond: replay([]string{"a", "b"}, engine.FinishStop, stats)}
	ts := newTestServer(t, fake, Options{})
	chat := `{"model":"tiny","messages":[{"role":"user","content":"hi"}]`
	completion := `{"model":"tiny","prompt":"hi"`
	tests := []struct {
		name, path, body, schema string
		want                     bool
	}{
		{"chat", "/v1/chat/completions", chat + `,"timings":true}`, "CreateChatCompletionResponse", true},
		{"chat, not asked", "/v1/chat/completions", chat + `}`, "CreateChatCompletionResponse", false},
		{"chat, false", "/v1/chat/completions", chat + `,"timings":false}`, "CreateChatCompletionResponse", false},
		{"completion", "/v1/completions", completion + `,"timings":true}`, "CreateCompletionResponse", true},
		{"chat stream with usage", "/v1/chat/completions", chat + `,"stream":true,"stream_options":{"include_usage":true},"timings":true}`, "CreateChatCompletionStreamResponse", true},
		{"chat stream", "/v1/chat/completions", chat + `,"stream":true,"timings":true}`, "CreateChatCompletionStreamResponse", true},
		{"chat stream, not asked", "/v1/chat/completions", chat + `,"stream":true,"stream_options":{"include_usage":true}}`, "CreateChatCompletionStreamResponse", false},
		{"completion stream", "/v1/completions", completion + `,"stream":true,"timings":true}`, "CreateCompletionStreamResponse", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := post(t, ts.Client(), ts.URL+tt.path, tt.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			var last []byte
			var withTimings int
			if strings.Contains(tt.body, `"stream":true`) {
				chunks := dataEvents(t, parseSSE(t, data))
				for _, c := range chunks {
					mustValidate(t, tt.schema, c)
					if timingsOf(t, c) != nil {
						withTimings++
					}
				}
				last = chunks[len(chunks)-1]
			} else {
				mustValidate(t, tt.schema, data)
				last = data
			}
			tm := timingsOf(t, last)
			if !tt.want {
				if tm != nil || withTimings > 0 {
					t.Fatalf("timings without asking: %s", data)
				}
				return
			}
			if tm == nil || withTimings > 1 {
				t.Fatalf("want timings on the last chunk (only): %d chunks have them\n%s", withTimings, data)
			}
			want := map[string]float64{"cache_n": 2, "prompt_n": 7, "predicted_n": 2, "prompt_ms": 12, "predicted_ms": 8}
			for k, v := range want {
				if tm[k] != v {
					t.Errorf("timings.%s = %v, want %v", k, tm[k], v)
				}
			}
			if strings.Contains(tt.body, "include_usage") && !strings.Contains(string(last), `"usage":{`) {
				t.Errorf("the timings are not on the usage chunk: %s", last)
			}
		})
	}
}

// TestPromptProgressChunks: "return_progress": true on a stream turns the
// engine's progress events into prompt_progress chunks with no choices, in
// llama.cpp's shape, before the first token; the engine request asks for
// progress only then (not without streaming, not without the field).
func TestPromptProgressChunks(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		var evs []engine.Event
		if req.Progress {
			for _, done := range []int{20, 36, 40} {
				evs = append(evs, engine.Event{Progress: &engine.Progress{Total: 40, Cached: 16, Processed: done, Elapsed: time.Duration(done) * time.Millisecond}})
			}
		}
		st := engine.Stats{PromptTokens: 40, CompletionTokens: 1}
		evs = append(evs, engine.Event{Text: "x"}, engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &st})
		return &fakeStream{ctx: ctx, events: evs}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	tests := []struct {
		name, body string
		progress   bool // the engine request asks for progress
	}{
		{"chat stream", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"return_progress":true}`, true},
		{"completion stream", `{"model":"tiny","prompt":"hi","stream":true,"return_progress":true}`, true},
		{"not asked", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`, false},
		{"not streamed", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"return_progress":true}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/chat/completions"
			if strings.Contains(tt.body, `"prompt"`) {
				path = "/v1/completions"
			}
			before := len(fake.requests())
			resp, data := post(t, ts.Client(), ts.URL+path, tt.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			reqs := fake.requests()
			if got := reqs[before].Progress; got != tt.progress {
				t.Fatalf("engine request Progress %v, want %v", got, tt.progress)
			}
			if !strings.Contains(tt.body, `"stream":true`) {
				if strings.Contains(string(data), "prompt_progress") {
					t.Fatalf("prompt_progress in a non-streamed answer: %s", data)
				}
				return
			}
			var progress []map[string]int
			firstText := -1
			for i, c := range dataEvents(t, parseSSE(t, data)) {
				var v struct {
					Choices  []json.RawMessage `json:"choices"`
					Progress map[string]int    `json:"prompt_progress"`
				}
				if err := json.Unmarshal(c, &v); err != nil {
					t.Fatal(err)
				}
				if v.Progress != nil {
					if len(v.Choices) != 0 || firstText >= 0 {
						t.Fatalf("chunk %d: a progress chunk with choices, or after the first token: %s", i, c)
					}
					progress = append(progress, v.Progress)
				}
				if firstText < 0 && strings.Contains(string(c), `"x"`) {
					firstText = i
				}
			}
			if !tt.progress {
				if len(progress) > 0 {
					t.Fatalf("progress chunks without return_progress: %v", progress)
				}
				return
			}
			want := []map[string]int{
				{"total": 40, "cache": 16, "processed": 20, "time_ms": 20},
				{"total": 40, "cache": 16, "processed": 36, "time_ms": 36},
				{"total": 40, "cache": 16, "processed": 40, "time_ms": 40},
			}
			if len(progress) != len(want) {
				t.Fatalf("progress %v, want %v", progress, want)
			}
			for i := range want {
				for k, v := range want[i] {
					if progress[i][k] != v {
						t.Errorf("progress %d: %s = %d, want %d", i, k, progress[i][k], v)
					}
				}
			}
		})
	}
}

// TestTimingsPerToken: llama.cpp's "timings_per_token": true on a stream
// asks the engine for running Stats and puts the running timings on every
// chunk that carries choices (once the engine reported any), their counts
// the running usage's, and the final timings on the last chunk; it does
// not turn include_usage on. Without it no chunk has timings.
func TestTimingsPerToken(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		var evs []engine.Event
		for k := 1; k <= 3; k++ {
			ev := engine.Event{Text: "w"}
			if req.ContinuousUsage {
				ev.Stats = &engine.Stats{PromptTokens: 5, CompletionTokens: k,
					PromptTime: 10 * time.Millisecond, GenerationTime: time.Duration(k-1) * 4 * time.Millisecond}
			}
			evs = append(evs, ev)
		}
		st := engine.Stats{PromptTokens: 5, CompletionTokens: 3, PromptTime: 10 * time.Millisecond, GenerationTime: 8 * time.Millisecond}
		evs = append(evs, engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &st})
		return &fakeStream{ctx: ctx, events: evs}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	tests := []struct {
		name, path, body, schema string
		perToken                 bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"timings_per_token":true}`, "CreateChatCompletionStreamResponse", true},
		{"completion", "/v1/completions", `{"model":"tiny","prompt":"hi","stream":true,"timings_per_token":true}`, "CreateCompletionStreamResponse", true},
		{"chat, not asked", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`, "CreateChatCompletionStreamResponse", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(fake.requests())
			resp, data := post(t, ts.Client(), ts.URL+tt.path, tt.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			if got := fake.requests()[before].ContinuousUsage; got != tt.perToken {
				t.Fatalf("engine request ContinuousUsage %v, want %v", got, tt.perToken)
			}
			chunks := dataEvents(t, parseSSE(t, data))
			var predicted []float64
			for i, c := range chunks {
				mustValidate(t, tt.schema, c)
				if strings.Contains(string(c), `"usage"`) {
					t.Fatalf("chunk %d has a usage key without include_usage: %s", i, c)
				}
				tm := timingsOf(t, c)
				content := strings.Contains(string(c), `"w"`)
				switch {
				case !tt.perToken && tm != nil:
					t.Fatalf("chunk %d has timings without asking: %s", i, c)
				case tt.perToken && content && tm == nil:
					t.Fatalf("content chunk %d has no timings: %s", i, c)
				case tm != nil:
					if tm["prompt_n"] != 5 || tm["prompt_ms"] != 10 {
						t.Errorf("chunk %d: timings %v, want prompt_n 5, prompt_ms 10", i, tm)
					}
					predicted = append(predicted, tm["predicted_n"])
				}
			}
			if !tt.perToken {
				return
			}
			// Three content chunks, then the finish chunk (chat: with the
			// counts of the last event), then the last chunk's totals.
			if len(predicted) < 4 || predicted[0] != 1 || predicted[1] != 2 || predicted[2] != 3 || predicted[len(predicted)-1] != 3 {
				t.Fatalf("predicted_n over the chunks %v, want 1, 2, 3, ... 3", predicted)
			}
			if last := timingsOf(t, chunks[len(chunks)-1]); last["predicted_ms"] != 8 {
				t.Errorf("last chunk's timings %v, want the final predicted_ms 8", last)
			}
		})
	}
}

// TestProgressAndTimingsOverWebSocket: a WebSocket request, streamed
// whatever its body says, gets its prompt_progress chunks and its timings
// on the last chunk as SSE does.
func TestProgressAndTimingsOverWebSocket(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		var evs []engine.Event
		if req.Progress {
			evs = append(evs, engine.Event{Progress: &engine.Progress{Total: 8, Processed: 8, Elapsed: time.Millisecond}})
		}
		st := engine.Stats{PromptTokens: 8, CompletionTokens: 1, PromptTime: time.Millisecond, GenerationTime: time.Millisecond}
		evs = append(evs, engine.Event{Text: "x"}, engine.Event{Final: true, FinishReason: engine.FinishStop, Stats: &st})
		return &fakeStream{ctx: ctx, events: evs}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("r1", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"return_progress":true,"timings":true}`))
	msgs := collectWS(t, c, 1)
	if last := msgs[len(msgs)-1]; last.Type != "done" {
		t.Fatalf("ended with %s", last.raw)
	}
	var progress, timings int
	for i, m := range msgs[:len(msgs)-1] {
		if strings.Contains(string(m.Chunk), `"prompt_progress":{"total":8,"cache":0,"processed":8,"time_ms":1}`) {
			progress++
			if i > 1 { // after chat's opening chunk
				t.Errorf("progress chunk at message %d, after the first token", i)
			}
		}
		if timingsOf(t, m.Chunk) != nil {
			timings++
			if i != len(msgs)-2 {
				t.Errorf("timings on message %d, not on the last chunk", i)
			}
		}
	}
	if progress != 1 || timings != 1 {
		t.Fatalf("%d progress chunks and %d with timings, want 1 and 1", progress, timings)
	}
}
