package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"rill/engine"
)

const (
	chatComponent       = "CreateChatCompletionStreamResponse"
	completionComponent = "CreateCompletionStreamResponse"
)

func TestChatStream(t *testing.T) {
	t.Parallel()
	cached := 3.0
	fake := &fakeEngine{respond: replay([]string{"Once", " upon", " a time"}, engine.FinishLength,
		func(int) engine.Stats {
			return engine.Stats{PromptTokens: 7, CompletionTokens: 3, CachedTokens: &cached}
		})}
	ts := newTestServer(t, fake, Options{})
	resp, body := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":3}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for h, want := range map[string]string{
		"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	chunks := dataEvents(t, parseSSE(t, body))
	if len(chunks) != 1+3+1+1 {
		t.Fatalf("%d chunks, want role + 3 content + finish + usage:\n%s", len(chunks), body)
	}
	id := "chatcmpl-" + resp.Header.Get("X-Request-Id")
	var text strings.Builder
	for i, c := range chunks {
		mustValidate(t, chatComponent, c)
		m := decodeMap(t, c)
		if m["id"] != id || m["object"] != "chat.completion.chunk" || m["model"] != "tiny" {
			t.Errorf("chunk %d header: %s", i, c)
		}
		usage, ok := m["usage"]
		if !ok {
			t.Errorf("chunk %d has no usage key: %s", i, c)
		}
		if i == len(chunks)-1 {
			if n := len(m["choices"].([]any)); n != 0 || usage == nil {
				t.Errorf("usage chunk: %s", c)
			}
			continue
		}
		if usage != nil {
			t.Errorf("chunk %d: usage %v, want null", i, usage)
		}
		choice := m["choices"].([]any)[0].(map[string]any)
		delta := choice["delta"].(map[string]any)
		switch i {
		case 0:
			if delta["role"] != "assistant" || choice["finish_reason"] != nil {
				t.Errorf("first chunk: %s", c)
			}
		case len(chunks) - 2:
			if len(delta) != 0 || choice["finish_reason"] != "length" {
				t.Errorf("finish chunk: %s", c)
			}
		default:
			if _, ok := delta["role"]; ok || choice["finish_reason"] != nil {
				t.Errorf("content chunk: %s", c)
			}
			text.WriteString(delta["content"].(string))
		}
	}
	if text.String() != "Once upon a time" {
		t.Errorf("text %q", text.String())
	}
	want := `{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":3}}`
	if !bytes.HasSuffix(chunks[len(chunks)-1], []byte(`,"usage":`+want+`}`)) {
		t.Errorf("usage chunk %s, want usage %s", chunks[len(chunks)-1], want)
	}
	if reqs := fake.requests(); len(reqs) != 1 || reqs[0].MaxTokens != 3 || reqs[0].Messages[0].Content != "hi" {
		t.Errorf("engine got %+v", reqs)
	}
}

// TestIncludeUsageGating pins docs/design.md §3 rules 1 and 2 on both endpoints.
func TestIncludeUsageGating(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: replay([]string{"a", "b"}, engine.FinishStop, plainStats(4, 2))}
	ts := newTestServer(t, fake, Options{})
	tests := []struct {
		name    string
		options string // the stream_options member, or ""
		stream  bool
		usage   bool // include_usage in effect
	}{
		{"stream without options", ``, true, false},
		{"stream with {}", `,"stream_options":{}`, true, false},
		{"stream with null", `,"stream_options":null`, true, false},
		{"stream with false", `,"stream_options":{"include_usage":false}`, true, false},
		{"stream with true", `,"stream_options":{"include_usage":true}`, true, true},
		{"no stream", ``, false, true},
		{"no stream with options ignored", `,"stream_options":{"include_usage":true}`, false, true},
		{"no stream with false options ignored", `,"stream_options":{"include_usage":false}`, false, true},
	}
	endpoints := []struct {
		path, body, chunk, full string
	}{
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]`, chatComponent, "CreateChatCompletionResponse"},
		{"/v1/completions", `{"model":"tiny","prompt":"hi"`, completionComponent, "CreateCompletionResponse"},
	}
	const wantUsage = `{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}`
	for _, ep := range endpoints {
		for _, tt := range tests {
			t.Run(ep.path+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				body := ep.body + tt.options + fmt.Sprintf(`,"stream":%v}`, tt.stream)
				resp, data := post(t, ts.Client(), ts.URL+ep.path, body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, data)
				}
				if !tt.stream {
					mustValidate(t, ep.full, data)
					if !bytes.Contains(data, []byte(`"usage":`+wantUsage+`}`)) {
						t.Errorf("non-streamed response without exact usage: %s", data)
					}
					return
				}
				chunks := dataEvents(t, parseSSE(t, data))
				usageChunks := 0
				for i, c := range chunks {
					mustValidate(t, ep.chunk, c)
					m := decodeMap(t, c)
					u, has := m["usage"]
					switch {
					case !tt.usage && has:
						t.Errorf("chunk %d has a usage key without include_usage: %s", i, c)
					case tt.usage && !has:
						t.Errorf("chunk %d lacks usage with include_usage: %s", i, c)
					case u != nil:
						usageChunks++
						if i != len(chunks)-1 || len(m["choices"].([]any)) != 0 {
							t.Errorf("usage chunk %d of %d with choices: %s", i, len(chunks), c)
						}
						if !bytes.HasSuffix(c, []byte(`"usage":`+wantUsage+`}`)) {
							t.Errorf("usage chunk %s, want usage %s", c, wantUsage)
						}
					}
				}
				if want := map[bool]int{true: 1, false: 0}[tt.usage]; usageChunks != want {
					t.Errorf("%d usage chunks, want %d", usageChunks, want)
				}
			})
		}
	}
}

// TestChoicesAndPrompts: n > 1 and several prompts, indexed prompt*n+j,
// prompts counted once, completions summed, one usage chunk at the end.
func TestChoicesAndPrompts(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		// Prompt tokens: the prompt's length; each choice j writes j+1 tokens.
		prompt := len(req.Prompt)
		var evs []engine.Event
		for j := range req.Choices() {
			for k := 0; k <= j; k++ {
				evs = append(evs, engine.Event{Choice: j, Text: fmt.Sprintf("%s%d", req.Prompt, j)})
			}
		}
		for j := req.Choices() - 1; j >= 0; j-- { // finals in reverse order
			evs = append(evs, engine.Event{Choice: j, Final: true, FinishReason: engine.FinishStop,
				Stats: &engine.Stats{PromptTokens: prompt, CompletionTokens: j + 1}})
		}
		return &fakeStream{ctx: ctx, events: evs, delay: time.Millisecond}, nil
	}}
	ts := newTestServer(t, fake, Options{})
	// Prompts "a" (1 token) and "bb" (2 tokens), n=3: completion 1+2+3 per prompt.
	const wantUsage = `{"prompt_tokens":3,"completion_tokens":12,"total_tokens":15}`
	wantText := []string{"a0", "a1a1", "a2a2a2", "bb0", "bb1bb1", "bb2bb2bb2"}

	t.Run("non-streamed", func(t *testing.T) {
		t.Parallel()
		_, data := post(t, ts.Client(), ts.URL+"/v1/completions", `{"model":"tiny","prompt":["a","bb"],"n":3}`)
		mustValidate(t, "CreateCompletionResponse", data)
		var r struct {
			Choices []struct {
				Text  string
				Index int
			}
			Usage json.RawMessage
		}
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Choices) != 6 {
			t.Fatalf("%d choices: %s", len(r.Choices), data)
		}
		for i, c := range r.Choices {
			if c.Index != i || c.Text != wantText[i] {
				t.Errorf("choice %d: %+v, want %q", i, c, wantText[i])
			}
		}
		if string(r.Usage) != wantUsage {
			t.Errorf("usage %s, want %s", r.Usage, wantUsage)
		}
	})
	t.Run("streamed", func(t *testing.T) {
		t.Parallel()
		_, data := post(t, ts.Client(), ts.URL+"/v1/completions",
			`{"model":"tiny","prompt":["a","bb"],"n":3,"stream":true,"stream_options":{"include_usage":true}}`)
		chunks := dataEvents(t, parseSSE(t, data))
		text := make([]string, 6)
		finished := 0
		for i, c := range chunks {
			mustValidate(t, completionComponent, c)
			var m struct {
				Choices []struct {
					Text         string
					Index        int
					FinishReason *string `json:"finish_reason"`
				}
				Usage json.RawMessage
			}
			if err := json.Unmarshal(c, &m); err != nil {
				t.Fatal(err)
			}
			if len(m.Choices) == 0 {
				if i != len(chunks)-1 || finished != 6 || string(m.Usage) != wantUsage {
					t.Errorf("usage chunk %d of %d after %d finished: %s", i, len(chunks), finished, c)
				}
				continue
			}
			ch := m.Choices[0]
			text[ch.Index] += ch.Text
			if ch.FinishReason != nil {
				finished++
			}
		}
		for i := range text {
			if text[i] != wantText[i] {
				t.Errorf("choice %d text %q, want %q", i, text[i], wantText[i])
			}
		}
	})
	t.Run("chat n=2", func(t *testing.T) {
		t.Parallel()
		_, data := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
			`{"model":"tiny","messages":[{"role":"user","content":"x"}],"n":2,"stream":true}`)
		roles := map[float64]int{}
		finishes := map[float64]int{}
		for _, c := range dataEvents(t, parseSSE(t, data)) {
			mustValidate(t, chatComponent, c)
			ch := decodeMap(t, c)["choices"].([]any)[0].(map[string]any)
			if ch["delta"].(map[string]any)["role"] == "assistant" {
				roles[ch["index"].(float64)]++
			}
			if ch["finish_reason"] != nil {
				finishes[ch["index"].(float64)]++
			}
		}
		if len(roles) != 2 || roles[0] != 1 || roles[1] != 1 || finishes[0] != 1 || finishes[1] != 1 {
			t.Errorf("roles %v finishes %v", roles, finishes)
		}
	})
}

func TestLogprobs(t *testing.T) {
	t.Parallel()
	lp := func(tok string, v float64, top ...engine.TopLogprob) engine.TokenLogprob {
		return engine.TokenLogprob{Token: tok, Logprob: v, Top: top}
	}
	events := []engine.Event{
		{Text: "\"H", Logprobs: []engine.TokenLogprob{
			lp("\"", -1.0667550563812256, engine.TopLogprob{Token: "\"", Logprob: -1.0667550563812256}, engine.TopLogprob{Token: "H", Logprob: -2.5}),
			{Token: "H", Bytes: []byte{72}, Logprob: -1.4, Top: []engine.TopLogprob{{Token: "H", Logprob: -1.4}, {Token: "M", Logprob: math0()}}},
		}},
		{Text: "é", Logprobs: []engine.TokenLogprob{lp("é", -0.5, engine.TopLogprob{Token: "é", Logprob: -0.5})}},
		{Final: true, FinishReason: engine.FinishLength, Stats: &engine.Stats{PromptTokens: 5, CompletionTokens: 3}},
	}
	fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, events: append([]engine.Event(nil), events...)}, nil
	}}
	ts := newTestServer(t, fake, Options{})

	t.Run("chat", func(t *testing.T) {
		t.Parallel()
		_, data := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
			`{"model":"tiny","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2}`)
		mustValidate(t, "CreateChatCompletionResponse", data)
		var r struct {
			Choices []struct {
				Logprobs struct {
					Content []struct {
						Token       string
						Logprob     float64
						Bytes       []int
						TopLogprobs []struct {
							Token   string
							Logprob float64
						} `json:"top_logprobs"`
					}
				}
			}
		}
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		c := r.Choices[0].Logprobs.Content
		if len(c) != 3 || c[0].Token != "\"" || c[0].Logprob != -1.0667550563812256 || len(c[0].Bytes) != 1 || c[0].Bytes[0] != 34 ||
			len(c[0].TopLogprobs) != 2 || c[1].TopLogprobs[1].Logprob != -9999 || len(c[2].Bytes) != 2 {
			t.Errorf("logprobs: %s", data)
		}
		// The subtests run in parallel on one engine: this one's request
		// is the chat request asking for two alternatives, not the last.
		found := false
		for _, req := range fake.requests() {
			if req.Messages != nil && req.TopLogprobs == 2 {
				found = true
				if !req.Logprobs {
					t.Errorf("engine request without logprobs")
				}
			}
		}
		if !found {
			t.Errorf("no chat request with top_logprobs 2 reached the engine")
		}
	})
	t.Run("chat stream", func(t *testing.T) {
		t.Parallel()
		_, data := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
			`{"model":"tiny","messages":[{"role":"user","content":"x"}],"logprobs":true,"stream":true}`)
		n := 0
		for _, c := range dataEvents(t, parseSSE(t, data)) {
			mustValidate(t, chatComponent, c)
			ch := decodeMap(t, c)["choices"].([]any)[0].(map[string]any)
			if lp, ok := ch["logprobs"].(map[string]any); ok {
				n += len(lp["content"].([]any))
			}
		}
		if n != 3 {
			t.Errorf("%d logprob entries streamed, want 3", n)
		}
	})
	t.Run("legacy", func(t *testing.T) {
		t.Parallel()
		for _, stream := range []bool{false, true} {
			_, data := post(t, ts.Client(), ts.URL+"/v1/completions",
				fmt.Sprintf(`{"model":"tiny","prompt":"x","logprobs":2,"stream":%v}`, stream))
			var parts [][]byte
			if stream {
				parts = dataEvents(t, parseSSE(t, data))
			} else {
				parts = [][]byte{data}
				mustValidate(t, "CreateCompletionResponse", data)
			}
			var tokens []string
			var offsets []int
			var tops []map[string]float64
			for _, p := range parts {
				if stream {
					mustValidate(t, completionComponent, p)
				}
				var m struct {
					Choices []struct {
						Logprobs *struct {
							Tokens        []string
							TokenLogprobs []float64            `json:"token_logprobs"`
							TopLogprobs   []map[string]float64 `json:"top_logprobs"`
							TextOffset    []int                `json:"text_offset"`
						}
					}
				}
				if err := json.Unmarshal(p, &m); err != nil {
					t.Fatal(err)
				}
				if l := m.Choices[0].Logprobs; l != nil {
					tokens = append(tokens, l.Tokens...)
					offsets = append(offsets, l.TextOffset...)
					tops = append(tops, l.TopLogprobs...)
				}
			}
			if strings.Join(tokens, "|") != "\"|H|é" || fmt.Sprint(offsets) != "[0 1 2]" || len(tops) != 3 || tops[0]["H"] != -2.5 {
				t.Errorf("stream=%v: tokens %q offsets %v tops %v", stream, tokens, offsets, tops)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		_, data := post(t, ts.Client(), ts.URL+"/v1/completions", `{"model":"tiny","prompt":"x"}`)
		if !bytes.Contains(data, []byte(`"logprobs":null`)) {
			t.Errorf("logprobs not null: %s", data)
		}
	})
}

// math0 is a log-probability of a token the model rules out.
func math0() float64 { return -1 / zero }

var zero = 0.0

func TestFinishReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reason engine.FinishReason
		want   string
	}{
		{engine.FinishStop, "stop"},
		{engine.FinishLength, "length"},
		{"", "stop"},
	}
	for _, tt := range tests {
		fake := &fakeEngine{respond: replay([]string{"x"}, tt.reason, plainStats(1, 1))}
		ts := newTestServer(t, fake, Options{})
		_, data := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
			`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stop":["\n\n","END"]}`)
		if !bytes.Contains(data, []byte(`"finish_reason":"`+tt.want+`"`)) {
			t.Errorf("reason %q: %s", tt.reason, data)
		}
		if stops := fake.requests()[0].Stop; len(stops) != 2 || stops[1] != "END" {
			t.Errorf("engine got stop %q", stops)
		}
	}
}

func TestMidStreamError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		status string
		code   any
	}{
		{"engine failure", errors.New("kernel exploded"), "server_error", nil},
		{"request error", engine.Errorf(engine.CodeContextLengthExceeded, "max_tokens", "ran out of context"), "invalid_request_error", engine.CodeContextLengthExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "a"}, {Text: "b"}}, err: tt.err}, nil
			}}
			ts := newTestServer(t, fake, Options{})
			resp, data := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
				`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			evs := parseSSE(t, data)
			last := evs[len(evs)-1].data
			mustValidate(t, "ErrorResponse", last)
			e := decodeMap(t, last)["error"].(map[string]any)
			if e["type"] != tt.status || e["code"] != tt.code {
				t.Errorf("error event %s", last)
			}
			for _, ev := range evs[:len(evs)-1] {
				mustValidate(t, chatComponent, ev.data)
			}
			if bytes.Contains(data, []byte("[DONE]")) {
				t.Errorf("[DONE] after an error")
			}
		})
	}
	t.Run("non-streamed", func(t *testing.T) {
		t.Parallel()
		fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
			return &fakeStream{ctx: ctx, events: []engine.Event{{Text: "a"}}, err: errors.New("boom")}, nil
		}}
		ts := newTestServer(t, fake, Options{})
		resp, data := post(t, ts.Client(), ts.URL+"/v1/completions", `{"model":"tiny","prompt":"x"}`)
		if resp.StatusCode != 500 {
			t.Errorf("status %d", resp.StatusCode)
		}
		mustValidate(t, "ErrorResponse", data)
	})
	t.Run("protocol violation", func(t *testing.T) {
		t.Parallel()
		fake := &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
			// An event for a choice that does not exist, then more than the
			// event buffer holds: the handler must still end promptly.
			evs := []engine.Event{{Text: "a"}, {Choice: 5, Text: "b"}}
			for range 100 {
				evs = append(evs, engine.Event{Text: "c"})
			}
			return &fakeStream{ctx: ctx, events: evs, hang: true}, nil
		}}
		ts := newTestServer(t, fake, Options{})
		resp, data := post(t, ts.Client(), ts.URL+"/v1/completions", `{"model":"tiny","prompt":"x"}`)
		if resp.StatusCode != 500 || !bytes.Contains(data, []byte("protocol")) {
			t.Errorf("status %d: %s", resp.StatusCode, data)
		}
	})
}
