package service

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"rill/engine"
)

// runningScript is script with running Stats on every non-final event when
// the request asked for continuous usage: choice j of a request has the
// prompt and cached counts given, and its k-th piece counts k+1 tokens.
func runningScript(prompt int, cached float64, pieces []string) func(context.Context, *engine.Request) (engine.Stream, error) {
	return func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		n := req.Choices()
		var evs []engine.Event
		for k, p := range pieces {
			for j := range n {
				ev := engine.Event{Choice: j, Text: p}
				if req.ContinuousUsage {
					ev.Stats = &engine.Stats{PromptTokens: prompt, CachedTokens: &cached, CompletionTokens: k + 1}
				}
				evs = append(evs, ev)
			}
		}
		for j := range n {
			st := engine.Stats{PromptTokens: prompt, CachedTokens: &cached, CompletionTokens: len(pieces)}
			evs = append(evs, engine.Event{Choice: j, Final: true, FinishReason: engine.FinishLength, Stats: &st})
		}
		return &fakeStream{ctx: ctx, events: evs}, nil
	}
}

// wireUsage is what the test reads of a chunk's usage.
type wireUsage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
	Details    *struct {
		Cached int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// chunkUsages reads every chunk of a stream: its number of choices, and its
// usage (nil when null); has is false when a chunk has no usage key.
func chunkUsages(t *testing.T, component string, chunks [][]byte) (choices []int, usages []*wireUsage, has []bool) {
	t.Helper()
	for _, c := range chunks {
		mustValidate(t, component, c)
		var m struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *json.RawMessage  `json:"usage"`
		}
		if err := json.Unmarshal(c, &m); err != nil {
			t.Fatal(err)
		}
		var u *wireUsage
		if m.Usage != nil {
			if err := json.Unmarshal(*m.Usage, &u); err != nil {
				t.Fatal(err)
			}
		}
		key := containsKey(c, "usage")
		choices, usages, has = append(choices, len(m.Choices)), append(usages, u), append(has, key)
	}
	return choices, usages, has
}

func containsKey(doc []byte, key string) bool {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(doc, &m)
	_, ok := m[key]
	return ok
}

// TestContinuousUsage: with include_usage and continuous_usage_stats every
// chunk with choices carries the running usage, assembled over the choices
// (prompt and cached once, completion summed), and the last chunk the
// total; chat's role chunks wait for the first event so that they can say
// the prompt's counts. Without include_usage, or without stream, the option
// is ignored and the engine is not asked for running counts.
func TestContinuousUsage(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: runningScript(10, 8, []string{"a", "b"})}
	ts := newTestServer(t, fake, Options{})
	const user = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, path, body, component string
		// completion is completion_tokens per chunk, the usage chunk last,
		// when the order of events is fixed (nil: two prompts' streams
		// interleave as they come); prompt is the total prompt_tokens.
		completion []int
		chunks     int
		prompt     int
	}{
		{"chat, two choices", "/v1/chat/completions", `{"model":"tiny",` + user + `,"n":2`, chatComponent,
			// two role chunks, four pieces, two finish chunks, the usage
			[]int{0, 0, 1, 2, 3, 4, 4, 4, 4}, 9, 10},
		{"completions, two prompts", "/v1/completions", `{"model":"tiny","prompt":["hi","ho"]`, completionComponent,
			nil, 7, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := tc.body + `,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`
			resp, data := post(t, ts.Client(), ts.URL+tc.path, body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			chunks := dataEvents(t, parseSSE(t, data))
			choices, usages, _ := chunkUsages(t, tc.component, chunks)
			if len(chunks) != tc.chunks {
				t.Fatalf("%d chunks, want %d:\n%s", len(chunks), tc.chunks, data)
			}
			prev := &wireUsage{}
			for i, u := range usages {
				if u == nil {
					t.Fatalf("chunk %d carries no usage: %s", i, chunks[i])
				}
				if last := i == len(chunks)-1; last != (choices[i] == 0) {
					t.Errorf("chunk %d has %d choices: %s", i, choices[i], chunks[i])
				}
				if tc.completion != nil && u.Completion != tc.completion[i] {
					t.Errorf("chunk %d: completion_tokens %d, want %d: %s", i, u.Completion, tc.completion[i], chunks[i])
				}
				// Each event adds one token; a prompt counts from its first event.
				if u.Completion < prev.Completion || u.Completion > prev.Completion+1 || u.Prompt < prev.Prompt ||
					u.Total != u.Prompt+u.Completion || u.Details == nil || u.Details.Cached != 8*u.Prompt/10 {
					t.Errorf("chunk %d: usage %+v after %+v: %s", i, u, prev, chunks[i])
				}
				prev = u
			}
			if u := usages[len(usages)-1]; u.Prompt != tc.prompt || u.Completion != 4 {
				t.Errorf("total usage %+v, want prompt_tokens %d and completion_tokens 4", u, tc.prompt)
			}
			if !fake.requests()[0].ContinuousUsage {
				t.Errorf("the engine was not asked for running counts")
			}
		})
	}

	// Ignored without include_usage or without stream.
	for _, options := range []string{
		`,"stream":true,"stream_options":{"continuous_usage_stats":true}`,
		`,"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}`,
		`,"stream":false,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`,
	} {
		t.Run("ignored"+options, func(t *testing.T) {
			t.Parallel()
			f := &fakeEngine{respond: runningScript(10, 8, []string{"a", "b"})}
			srv := newTestServer(t, f, Options{})
			resp, data := post(t, srv.Client(), srv.URL+"/v1/chat/completions", `{"model":"tiny",`+user+options+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, data)
			}
			if f.requests()[0].ContinuousUsage {
				t.Errorf("the engine was asked for running counts")
			}
			if resp.Header.Get("Content-Type") != "text/event-stream" {
				return
			}
			_, _, has := chunkUsages(t, chatComponent, dataEvents(t, parseSSE(t, data)))
			for i, h := range has {
				if h {
					t.Errorf("chunk %d has a usage key without include_usage", i)
				}
			}
		})
	}
}

func TestContinuousUsagePlan(t *testing.T) {
	t.Parallel()
	const user = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		options      string
		want, forced bool // continuous usage as sent, and once the transport forces streaming
	}{
		{`"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`, true, true},
		{`"stream":true,"stream_options":{"continuous_usage_stats":true}`, false, false},
		{`"stream_options":{"include_usage":true,"continuous_usage_stats":true}`, false, true},
		{`"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}`, false, false},
		{`"stream":true,"stream_options":{"include_usage":true}`, false, false},
	} {
		t.Run(tc.options, func(t *testing.T) {
			t.Parallel()
			check := func(p *job, want bool, when string) {
				t.Helper()
				if p.continuousUsage != want || p.reqs[0].ContinuousUsage != want {
					t.Errorf("%s: continuous usage %v, engine request %v; want %v", when, p.continuousUsage, p.reqs[0].ContinuousUsage, want)
				}
			}
			p, e := chatPlanOf(t, fmt.Sprintf(`{"model":"m",%s,%s}`, user, tc.options))
			if e != nil {
				t.Fatal(e)
			}
			check(p, tc.want, "as sent")
			p.forceStream()
			check(p, tc.forced, "forced to stream (WebSocket)")

			cp, e := completionPlanOf(t, fmt.Sprintf(`{"model":"m","prompt":["a","b"],%s}`, tc.options))
			if e != nil {
				t.Fatal(e)
			}
			cp.forceStream()
			for i, r := range cp.reqs {
				if r.ContinuousUsage != tc.forced {
					t.Errorf("completions prompt %d: engine request %v, want %v", i, r.ContinuousUsage, tc.forced)
				}
			}
		})
	}
}

// TestContinuousUsageWebSocket: the WebSocket transport streams whatever
// the body says, and the engine must know that before it starts, so that
// it is asked for running counts (an upstream engine encodes its request
// in Generate); the chunks are those of SSE.
func TestContinuousUsageWebSocket(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: runningScript(10, 8, []string{"a", "b"})}
	ts := newTestServer(t, fake, Options{})
	c := dialWS(t, ts, "/v1/chat/completions", nil)
	sendWS(t, c, createMsg("r1", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`))
	var chunks [][]byte
	for _, m := range collectWS(t, c, 1) {
		if m.Type == "chunk" {
			chunks = append(chunks, m.Chunk)
		}
	}
	if !fake.requests()[0].ContinuousUsage {
		t.Fatal("the engine request started without ContinuousUsage")
	}
	choices, usages, _ := chunkUsages(t, chatComponent, chunks)
	want := []int{0, 1, 2, 2, 2}
	if len(usages) != len(want) {
		t.Fatalf("%d chunks, want %d", len(usages), len(want))
	}
	for i, u := range usages {
		if u == nil || u.Prompt != 10 || u.Completion != want[i] || (choices[i] == 0) != (i == len(usages)-1) {
			t.Errorf("chunk %d: usage %+v, want completion_tokens %d: %s", i, u, want[i], chunks[i])
		}
	}
}
