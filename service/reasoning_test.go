package service

import (
	"context"
	"strings"
	"testing"

	"rill/engine"
)

// thinkingEngine answers every choice with two pieces of reasoning, then a
// piece that ends the reasoning and starts the answer, then the answer, and
// counts reasoning tokens per choice (choice j reasons 3+j tokens).
func thinkingEngine() *fakeEngine {
	return &fakeEngine{respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		var evs []engine.Event
		for j := range req.Choices() {
			evs = append(evs,
				engine.Event{Choice: j, Reasoning: "Let me "},
				engine.Event{Choice: j, Reasoning: "think."},
				engine.Event{Choice: j, Reasoning: "\n", Text: "\n\nThe"},
				engine.Event{Choice: j, Text: " answer."})
		}
		for j := range req.Choices() {
			st := engine.Stats{PromptTokens: 5, CompletionTokens: 8 + j, ReasoningTokens: ptr(3 + j)}
			evs = append(evs, engine.Event{Choice: j, Final: true, FinishReason: engine.FinishStop, Stats: &st})
		}
		return &fakeStream{ctx: ctx, events: evs}, nil
	}}
}

// TestReasoningStream: reasoning goes out as delta.reasoning_content, the
// answer as delta.content (both in one delta where an event has both), and
// usage counts reasoning_tokens summed over the choices (docs/design.md §3 rule 9).
func TestReasoningStream(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, thinkingEngine(), Options{})
	resp, body := post(t, ts.Client(), ts.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"n":2,"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	chunks := dataEvents(t, parseSSE(t, body))
	reasoning, content := make([]strings.Builder, 2), make([]strings.Builder, 2)
	both := 0
	for _, c := range chunks[:len(chunks)-1] {
		mustValidate(t, chatComponent, c)
		choice := decodeMap(t, c)["choices"].([]any)[0].(map[string]any)
		i := int(choice["index"].(float64))
		delta := choice["delta"].(map[string]any)
		r, hasR := delta["reasoning_content"].(string)
		x, hasX := delta["content"].(string)
		if hasR && r == "" {
			t.Errorf("empty reasoning_content: %s", c)
		}
		if hasR && hasX {
			both++
		}
		reasoning[i].WriteString(r)
		content[i].WriteString(x)
	}
	for i := range 2 {
		if reasoning[i].String() != "Let me think.\n" || content[i].String() != "\n\nThe answer." {
			t.Errorf("choice %d: reasoning %q, content %q", i, reasoning[i].String(), content[i].String())
		}
	}
	if both != 2 {
		t.Errorf("%d deltas carry reasoning and content, want 2 (one per choice)", both)
	}
	want := `"usage":{"prompt_tokens":5,"completion_tokens":17,"total_tokens":22,"completion_tokens_details":{"reasoning_tokens":7}}}`
	if last := string(chunks[len(chunks)-1]); !strings.HasSuffix(last, want) {
		t.Errorf("usage chunk %s, want %s", last, want)
	}
}

// TestReasoningResponse: a non-streamed chat completion has
// message.reasoning_content beside content, and responses without
// reasoning stay as they were (no reasoning_content key, no details).
func TestReasoningResponse(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, thinkingEngine(), Options{})
	resp, body := post(t, ts.Client(), ts.URL+"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	mustValidate(t, "CreateChatCompletionResponse", body)
	msg := decodeMap(t, body)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["reasoning_content"] != "Let me think.\n" || msg["content"] != "\n\nThe answer." {
		t.Errorf("message %v", msg)
	}
	if !strings.Contains(string(body), `"completion_tokens_details":{"reasoning_tokens":3}`) {
		t.Errorf("usage without reasoning_tokens 3: %s", body)
	}

	plain := newTestServer(t, &fakeEngine{respond: replay([]string{"a"}, engine.FinishStop, plainStats(2, 1))}, Options{})
	_, body = post(t, plain.Client(), plain.URL+"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	if strings.Contains(string(body), "reasoning") {
		t.Errorf("a response without reasoning mentions it: %s", body)
	}
}
