package native

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/chat"
	"rill/engine/testmodel"
)

// TestThinkSplit drives a choice's text path with token sequences of Qwen
// 3's vocabulary: the split into reasoning and answer, the count, the
// markers' text in neither stream, stop strings in each stream.
func TestThinkSplit(t *testing.T) {
	t.Parallel()
	tok := qwenTokenizer(t)
	m := findThinkMarkers(tok, templateSource(t, templateQwen3))
	if !m.reasons() {
		t.Fatal("Qwen 3's vocabulary and template were not found to reason")
	}
	eos := tok.EOS()
	enc := func(s string) []int { return tok.Encode(s, encodeWithBOS) }
	cat := func(parts ...[]int) []int {
		var out []int
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	one := func(id int) []int { return []int{id} }
	// A character that no token spells whole: its first token is a
	// partial UTF-8 sequence.
	var split []int
	for _, r := range []string{"𒀀", "𓀀", "🫠", "ꙮ"} {
		if ids := enc(r); len(ids) >= 2 {
			split = ids
			break
		}
	}
	if split == nil {
		t.Fatal("no test character is split over several byte-level tokens")
	}
	cases := []struct {
		name            string
		phase           thinkPhase
		stops           []string
		toks            []int // the last one ends the choice (EOS: stop, else length)
		reasoning, text string
		count           int
		stopped         bool
	}{
		{"opens and closes", phaseMayOpen, nil,
			cat(one(m.open), enc("\nLet me see.\n"), one(m.close), enc("\n\nHello!"), one(eos)),
			"\nLet me see.\n", "\n\nHello!", 1 + len(enc("\nLet me see.\n")) + 1, false},
		{"never opens", phaseMayOpen, nil, cat(enc("Hello there"), one(eos)), "", "Hello there", 0, false},
		{"opened by the prompt", phaseThinking, nil,
			cat(enc("hmm"), one(m.close), enc("ok"), one(eos)), "hmm", "ok", len(enc("hmm")) + 1, false},
		{"cut by length inside", phaseThinking, nil, enc("still thinking"), "still thinking", "", len(enc("still thinking")), false},
		{"ends inside", phaseThinking, nil, cat(enc("abc"), one(eos)), "abc", "", len(enc("abc")) + 1, false},
		{"switched off", phaseAnswer, nil, cat(one(m.open), enc("x"), one(eos)), "", "<think>x", 0, false},
		{"opens later", phaseMayOpen, nil, cat(enc("a"), one(m.open), enc("b"), one(eos)), "", "a<think>b", 0, false},
		{"stop in reasoning", phaseThinking, []string{"STOP"},
			cat(enc("abc STOP def"), one(m.close), enc("x"), one(eos)), "abc ", "", len(enc("abc STOP")), true},
		{"stop in the answer", phaseThinking, []string{"STOP"},
			cat(enc("ab"), one(m.close), enc("cd STOP"), one(eos)), "ab", "cd ", len(enc("ab")) + 1, true},
		{"stop text held across the marker", phaseThinking, []string{"STOP"},
			cat(enc("a ST"), one(m.close), enc("OP"), one(eos)), "a ST", "OP", len(enc("a ST")) + 1, false},
		{"a character cut by the marker", phaseThinking, nil,
			cat(split[:1], one(m.close), enc("x"), one(eos)), "\uFFFD", "x", 2, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &choice{dec: tok.NewDecoder(), think: thinkSplit{phase: tc.phase},
				stop: stopper{stops: tc.stops}, stopReasoning: stopper{stops: tc.stops}}
			var reasoning, text strings.Builder
			stopped := false
			for i, id := range tc.toks {
				eog := tok.IsEOG(id)
				r, x, s := c.text(m, nil, id, eog, eog || i == len(tc.toks)-1)
				reasoning.WriteString(r)
				text.WriteString(x)
				if s {
					stopped = true
					break
				}
			}
			if reasoning.String() != tc.reasoning || text.String() != tc.text {
				t.Errorf("reasoning %q, text %q; want %q, %q", reasoning.String(), text.String(), tc.reasoning, tc.text)
			}
			if c.think.tokens != tc.count {
				t.Errorf("reasoning tokens %d, want %d", c.think.tokens, tc.count)
			}
			if stopped != tc.stopped {
				t.Errorf("stopped %v, want %v", stopped, tc.stopped)
			}
		})
	}
}

// TestStartPhase: where the real templates leave the output, from their
// rendered generation prompts.
func TestStartPhase(t *testing.T) {
	t.Parallel()
	tok := qwenTokenizer(t)
	cases := []struct {
		template string
		kwargs   map[string]any
		want     thinkPhase
	}{
		{templateQwen3, nil, phaseMayOpen},
		{templateQwen3, map[string]any{"enable_thinking": true}, phaseMayOpen},
		{templateQwen3, map[string]any{"enable_thinking": false}, phaseAnswer},
		{templateQwQ, map[string]any{"enable_thinking": true}, phaseThinking},
		{templateQwQ, map[string]any{"enable_thinking": false}, phaseAnswer},
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", map[string]any{"enable_thinking": true}, phaseThinking},
		{"Qwen-Qwen2.5-7B-Instruct.jinja", nil, phaseNone},
	}
	for _, tc := range cases {
		src := templateSource(t, tc.template)
		tmpl, err := chat.New(src)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := tmpl.RenderConversation(chat.Conversation{
			Messages:            []chat.Message{{Role: "user", Content: "Why is the sky blue?"}},
			AddGenerationPrompt: true, Vars: tc.kwargs,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := findThinkMarkers(tok, src).startPhase(prompt); got != tc.want {
			t.Errorf("%s %v: phase %d, want %d (prompt ends %q)", tc.template, tc.kwargs, got, tc.want, prompt[max(0, len(prompt)-40):])
		}
	}
}

// split is one choice's output by stream.
type split struct {
	reasoning, text string
	final           engine.Event
}

// collectSplit runs req and returns each choice's reasoning and text.
func collectSplit(t *testing.T, e *Engine, req *engine.Request) []split {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	out := make([]split, req.Choices())
	var rs, ts = make([]strings.Builder, len(out)), make([]strings.Builder, len(out))
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		rs[ev.Choice].WriteString(ev.Reasoning)
		ts[ev.Choice].WriteString(ev.Text)
		if ev.Final {
			out[ev.Choice].final = ev
		}
	}
	for i := range out {
		out[i].reasoning, out[i].text = rs[i].String(), ts[i].String()
	}
	return out
}

// TestReasoningOutput: on a model whose generation prompt opens the
// thinking block (QwQ's template), the output streams as reasoning and is
// counted; reasoning, the closing marker if any, and the answer add up to
// the raw text the same tokens give as a completion; completions are not
// split and count nothing; enable_thinking false closes the block and
// counts 0.
func TestReasoningOutput(t *testing.T) {
	t.Parallel()
	e := newQwenEngine(t, templateQwQ, Options{})
	id := e.Models()[0].ID
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "Why is the sky blue?"}}
	chatReq := &engine.Request{Model: id, Messages: msgs, MaxTokens: 24, N: 3, Sampling: engine.Sampling{Temperature: 1, Seed: seed(7)}}
	got := collectSplit(t, e, chatReq)

	res, err := e.Tokenize(context.Background(), &engine.TokenizeRequest{Model: id, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	rawReq := *chatReq
	rawReq.Messages, rawReq.PromptTokens = nil, res.Tokens
	raw := collectSplit(t, e, &rawReq)
	for i := range got {
		g, r := got[i], raw[i]
		st := g.final.Final
		if !st || g.final.Stats.ReasoningTokens == nil {
			t.Fatalf("choice %d: final %v with reasoning tokens %v, want a count", i, st, g.final.Stats)
		}
		n, completion := *g.final.Stats.ReasoningTokens, g.final.Stats.CompletionTokens
		if r.final.Stats.ReasoningTokens != nil || r.reasoning != "" {
			t.Errorf("choice %d: a completion was split (%q, %v)", i, r.reasoning, r.final.Stats.ReasoningTokens)
		}
		if r.final.Stats.CompletionTokens != completion || r.final.Stats.PromptTokens != g.final.Stats.PromptTokens {
			t.Fatalf("choice %d: chat and completion of the same prompt differ in counts: %+v vs %+v", i, g.final.Stats, r.final.Stats)
		}
		closed := strings.Contains(r.text, "</think>")
		want := g.reasoning + g.text
		if closed {
			want = g.reasoning + "</think>" + g.text
		}
		if r.text != want {
			t.Errorf("choice %d: raw %q, reasoning %q + answer %q", i, r.text, g.reasoning, g.text)
		}
		switch {
		case n > completion:
			t.Errorf("choice %d: %d reasoning tokens of %d", i, n, completion)
		case !closed && n != completion:
			t.Errorf("choice %d never closed its block but counts %d of %d tokens as reasoning", i, n, completion)
		case !closed && g.text != "":
			t.Errorf("choice %d never closed its block but has an answer %q", i, g.text)
		}
		if g.reasoning == "" {
			t.Errorf("choice %d streamed no reasoning", i)
		}
	}

	// A grammar holds the output from its first token: all of it is the
	// answer, even where the prompt opened a thinking block.
	constrained := *chatReq
	constrained.MaxTokens = 200
	constrained.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONObject}
	for i, g := range collectSplit(t, e, &constrained) {
		n := g.final.Stats.ReasoningTokens
		if n == nil || *n != 0 || g.reasoning != "" || !strings.HasPrefix(strings.TrimSpace(g.text), "{") {
			t.Errorf("response_format json_object, choice %d: reasoning %q (%v tokens), answer %.80q; want all answer, a JSON object", i, g.reasoning, n, g.text)
		}
		if g.final.FinishReason == engine.FinishStop && !json.Valid([]byte(g.text)) {
			t.Errorf("response_format json_object, choice %d stopped with invalid JSON %.80q", i, g.text)
		}
	}

	off := *chatReq
	off.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	for i, g := range collectSplit(t, e, &off) {
		if n := g.final.Stats.ReasoningTokens; n == nil || *n != 0 || g.reasoning != "" {
			t.Errorf("thinking off, choice %d: reasoning %q, %v tokens; want none, counted 0", i, g.reasoning, n)
		}
	}
}

// TestReasoningNotOpened: Qwen 3's template leaves opening the block to the
// model; the random model does not, so everything is answer and the count
// is a measured 0. A model without markers counts nothing (nil).
func TestReasoningNotOpened(t *testing.T) {
	t.Parallel()
	e := newQwenEngine(t, templateQwen3, Options{})
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "Hi"}}
	for _, g := range collectSplit(t, e, &engine.Request{Model: e.Models()[0].ID, Messages: msgs, MaxTokens: 8}) {
		if n := g.final.Stats.ReasoningTokens; n == nil || *n != 0 || g.reasoning != "" || g.text == "" {
			t.Errorf("reasoning %q, answer %q, count %v; want an answer and a count of 0", g.reasoning, g.text, n)
		}
	}
	plain := newTestEngine(t, Options{})
	for _, g := range collectSplit(t, plain, &engine.Request{Model: plain.Models()[0].ID, Messages: msgs, MaxTokens: 4}) {
		if g.final.Stats.ReasoningTokens != nil {
			t.Errorf("the test model has no thinking markers but counted %d reasoning tokens", *g.final.Stats.ReasoningTokens)
		}
	}
	if m := findThinkMarkers(plain.tok, testmodel.ChatTemplate); m.reasons() {
		t.Error("the 512-token test vocabulary was found to reason")
	}
}
