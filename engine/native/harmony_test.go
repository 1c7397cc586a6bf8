package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/grammar"
	"rill/engine/model"
	"rill/engine/testmodel"
	"rill/engine/tokenizer"
	"rill/internal/shared"
)

// The harmony test model: testmodel.QwenBPE with testmodel.HarmonyVocabulary
// (Qwen 3's vocabulary plus gpt-oss's harmony tokens) and gpt-oss's chat
// template. Its weights are random; tests that need harmony output force
// it with a scripted runner (scriptCompute) or a grammar.

const templateGPTOSS = "openai-gpt-oss-120b.jinja"

var harmonyModel struct {
	once sync.Once
	data []byte
	err  error
}

func harmonyModelBytes(t testing.TB) []byte {
	t.Helper()
	src := templateSource(t, templateGPTOSS)
	path := shared.Path(t, "models", "vocab", "ggml-vocab-qwen2.gguf")
	harmonyModel.once.Do(func() {
		v, err := testmodel.HarmonyVocabulary(path, src)
		if err != nil {
			harmonyModel.err = err
			return
		}
		harmonyModel.data, harmonyModel.err = testmodel.BytesWithVocabulary(testmodel.QwenBPE(), v)
	})
	if harmonyModel.err != nil {
		t.Fatal(harmonyModel.err)
	}
	return harmonyModel.data
}

// newHarmonyEngine starts an engine on the harmony test model; with a
// script, every choice generates the script's tokens (then what the
// model's logits give).
func newHarmonyEngine(t testing.TB, script []int) *Engine {
	t.Helper()
	f, err := gguf.Parse(harmonyModelBytes(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	c := testCompute(t)
	if script != nil {
		c = scriptCompute{c, script}
	}
	e, err := New(m, c, Options{Logger: discard})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	start(t, e)
	return e
}

func harmonyTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Parse(harmonyModelBytes(t))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// scriptCompute makes runners whose logits, after the real pass, force
// the script: the k-th generated token of every sequence is script[k]
// (by 100 over every other logit, so that greedy sampling takes it).
type scriptCompute struct {
	Compute
	script []int
}

func (s scriptCompute) NewRunner(m *model.Model, spec RunnerSpec) (Runner, error) {
	r, err := s.Compute.NewRunner(m, spec)
	if err != nil {
		return nil, err
	}
	return scriptRunner{r, s.script, m.Config.VocabSize}, nil
}

type scriptRunner struct {
	Runner
	script []int
	vocab  int
}

func (s scriptRunner) Forward(ctx context.Context, b *model.Batch) ([]float32, error) {
	logits, err := s.Runner.Forward(ctx, b)
	if err != nil {
		return nil, err
	}
	for i, at := range b.Logits {
		k := int(b.Pos[at]) - int(b.Prompt[b.Seq[at]]-1)
		if k < 0 || k >= len(s.script) {
			continue
		}
		row := logits[i*s.vocab : (i+1)*s.vocab]
		for j := range row {
			row[j] = 0
		}
		row[s.script[k]] = 100
	}
	return logits, nil
}

// harmonyResult is one choice's streamed output.
type harmonyResult struct {
	reasoning, text string
	calls           []engine.ToolCallDelta
	final           engine.Event
}

func collectHarmony(t *testing.T, e *Engine, req *engine.Request) []harmonyResult {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	out := make([]harmonyResult, req.Choices())
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		r := &out[ev.Choice]
		r.reasoning += ev.Reasoning
		r.text += ev.Text
		for _, d := range ev.ToolCalls {
			if d.ID != "" {
				r.calls = append(r.calls, d)
				continue
			}
			r.calls[d.Index].Arguments += d.Arguments
		}
		if ev.Final {
			r.final = ev
		}
	}
}

// TestHarmonyOutput generates scripted harmony outputs on the harmony test
// model: the analysis streams as reasoning and counts exactly its
// messages' tokens, final and preamble text is content, a call to a
// declared function is a tool call that ends with finish_reason
// tool_calls; without tools or with tool_choice none the call's text is
// content; a completion of the same prompt is not split.
func TestHarmonyOutput(t *testing.T) {
	t.Parallel()
	tok := harmonyTokenizer(t)
	enc := func(s string) []int { return tok.Encode(s, tokenizer.EncodeOptions{ParseSpecial: true}) }
	id := func(s string) int {
		ids := enc(s)
		if len(ids) != 1 {
			t.Fatalf("%q is %d tokens, want one", s, len(ids))
		}
		return ids[0]
	}
	if ret, call, end := id("<|return|>"), id("<|call|>"), id("<|end|>"); !tok.IsEOG(ret) || !tok.IsEOG(call) || tok.IsEOG(end) {
		t.Fatalf("end of generation: <|return|> %v <|call|> %v <|end|> %v; want true true false", tok.IsEOG(ret), tok.IsEOG(call), tok.IsEOG(end))
	}
	analysis := "<|channel|>analysis<|message|>The user wants the weather. Check it.<|end|>"
	second := "<|start|>assistant<|channel|>analysis<|message|>Paris it is.<|end|>"
	preamble := "<|start|>assistant<|channel|>commentary<|message|>Looking it up.<|end|>"
	final := "<|start|>assistant<|channel|>final<|message|>It is sunny, 21 °C."
	callMsg := `<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}`
	tools := []engine.Tool{{Name: "get_weather", Description: "Weather of a city",
		Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "What is the weather in Paris?"}}

	cases := []struct {
		name            string
		script          []int
		tools           []engine.Tool
		choice          engine.ToolChoice
		reasoning, text string
		reasoningTokens int
		calls           []engine.ToolCallDelta
		finish          engine.FinishReason
	}{
		{name: "analysis then final",
			script:    append(enc(analysis+final), id("<|return|>")),
			reasoning: "The user wants the weather. Check it.", text: "It is sunny, 21 °C.",
			reasoningTokens: len(enc(analysis)), finish: engine.FinishStop},
		{name: "two analyses, preamble, call", tools: tools,
			script:    append(enc(analysis+second+preamble+callMsg), id("<|call|>")),
			reasoning: "The user wants the weather. Check it.Paris it is.", text: "Looking it up.",
			reasoningTokens: len(enc(analysis + second)),
			calls:           []engine.ToolCallDelta{{Index: 0, Name: "get_weather", Arguments: `{"city": "Paris"}`}},
			finish:          engine.FinishToolCalls},
		{name: "tool_choice none", tools: tools, choice: engine.ToolChoice{Mode: engine.ToolChoiceNone},
			script:    append(enc(analysis+callMsg), id("<|call|>")),
			reasoning: "The user wants the weather. Check it.", text: `{"city": "Paris"}`,
			reasoningTokens: len(enc(analysis)), finish: engine.FinishStop},
		{name: "no tools",
			script:    append(enc(analysis+callMsg), id("<|call|>")),
			reasoning: "The user wants the weather. Check it.", text: `{"city": "Paris"}`,
			reasoningTokens: len(enc(analysis)), finish: engine.FinishStop},
		{name: "ends inside the analysis",
			script:    append(enc("<|channel|>analysis<|message|>Hmm"), id("<|return|>")),
			reasoning: "Hmm", reasoningTokens: len(enc("<|channel|>analysis<|message|>Hmm")) + 1, finish: engine.FinishStop},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newHarmonyEngine(t, tc.script)
			req := &engine.Request{Model: e.Models()[0].ID, Messages: msgs, Tools: tc.tools, ToolChoice: tc.choice, MaxTokens: 200, N: 2}
			for i, got := range collectHarmony(t, e, req) {
				st := got.final.Stats
				if got.reasoning != tc.reasoning || got.text != tc.text {
					t.Errorf("choice %d: reasoning %q, text %q; want %q, %q", i, got.reasoning, got.text, tc.reasoning, tc.text)
				}
				if st == nil || st.ReasoningTokens == nil || *st.ReasoningTokens != tc.reasoningTokens || st.CompletionTokens != len(tc.script) {
					t.Errorf("choice %d: stats %+v; want %d reasoning tokens of %d", i, st, tc.reasoningTokens, len(tc.script))
				}
				if got.final.FinishReason != tc.finish {
					t.Errorf("choice %d: finish %s, want %s", i, got.final.FinishReason, tc.finish)
				}
				if len(got.calls) != len(tc.calls) {
					t.Fatalf("choice %d: calls %+v, want %+v", i, got.calls, tc.calls)
				}
				for j, c := range got.calls {
					w := tc.calls[j]
					if c.Index != w.Index || c.Name != w.Name || c.Arguments != w.Arguments || !strings.HasPrefix(c.ID, "call_") {
						t.Errorf("choice %d: call %d %+v, want %+v with an id", i, j, c, w)
					}
				}
			}

			// A completion of the same prompt is raw text, not split.
			res, err := e.Tokenize(context.Background(), &engine.TokenizeRequest{Model: req.Model, Messages: msgs, Tools: tc.tools})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(tok.Decode(res.Tokens), "<|start|>assistant") {
				t.Fatalf("the prompt ends %q, want the generation prompt <|start|>assistant", tok.Decode(res.Tokens))
			}
			raw := collectHarmony(t, e, &engine.Request{Model: req.Model, PromptTokens: res.Tokens, MaxTokens: 200})[0]
			if raw.final.Stats.ReasoningTokens != nil || raw.reasoning != "" || raw.text != tok.Decode(tc.script[:len(tc.script)-1]) {
				t.Errorf("completion: reasoning %q (%v tokens), text %q; want the raw output", raw.reasoning, raw.final.Stats.ReasoningTokens, raw.text)
			}
		})
	}
}

// TestHarmonyForcedCall: tool_choice required and a named function hold
// the random harmony model to gpt-oss's call syntax (after any analysis
// and preambles): every choice ends with one call of a declared tool,
// valid arguments and finish_reason tool_calls, and its analysis counts.
func TestHarmonyForcedCall(t *testing.T) {
	t.Parallel()
	e := newHarmonyEngine(t, nil)
	tools := []engine.Tool{
		{Name: "get_weather", Description: "Weather of a city", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":10}},"required":["city"],"additionalProperties":false}`)},
		{Name: "get_time", Description: "The time"}, // gpt-oss's template needs every description
	}
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "What is the weather in Paris?"}}
	for _, choice := range []engine.ToolChoice{{Mode: engine.ToolChoiceRequired}, {Mode: engine.ToolChoiceFunction, Name: "get_weather"}} {
		req := &engine.Request{Model: e.Models()[0].ID, Messages: msgs, Tools: tools, ToolChoice: choice, MaxTokens: 120, N: 4,
			Sampling: engine.Sampling{Temperature: 1, Seed: seed(3)}}
		reasoned := false
		for i, got := range collectHarmony(t, e, req) {
			st := got.final.Stats
			if got.final.FinishReason != engine.FinishToolCalls || len(got.calls) != 1 {
				t.Fatalf("%s, choice %d: finish %s with calls %+v (reasoning %q, text %q)", choice.Mode, i, got.final.FinishReason, got.calls, got.reasoning, got.text)
			}
			c := got.calls[0]
			var args map[string]any
			if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
				t.Errorf("%s, choice %d: arguments %q: %v", choice.Mode, i, c.Arguments, err)
			}
			if _, ok := args["city"]; c.Name == "get_weather" && !ok {
				t.Errorf("%s, choice %d: get_weather without a city: %q", choice.Mode, i, c.Arguments)
			}
			if choice.Mode == engine.ToolChoiceFunction && c.Name != "get_weather" {
				t.Errorf("named get_weather, choice %d called %s", i, c.Name)
			}
			n := *st.ReasoningTokens
			if n >= st.CompletionTokens || (got.reasoning != "") != (n > 0) {
				t.Errorf("%s, choice %d: %d reasoning tokens of %d for reasoning %q", choice.Mode, i, n, st.CompletionTokens, got.reasoning)
			}
			reasoned = reasoned || n > 0
		}
		t.Logf("%s: some choice reasoned first: %v", choice.Mode, reasoned)
	}
}

// TestHarmonyResponseFormat: a json_schema reply on a harmony model is
// written in the final channel, after any analysis, so the JSON arrives as
// the content and the analysis as counted reasoning.
func TestHarmonyResponseFormat(t *testing.T) {
	t.Parallel()
	e := newHarmonyEngine(t, nil)
	schema := []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}`)
	req := &engine.Request{Model: e.Models()[0].ID, MaxTokens: 120, N: 4,
		Messages:       []engine.Message{{Role: engine.RoleUser, Content: "Name a city."}},
		ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "city", Schema: schema},
		Sampling:       engine.Sampling{Temperature: 1, Seed: seed(5)}}
	k, err := e.constraintFor(req)
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]bool{
		`{"city":"Oslo"}`: false, // the model would be forced off its <|channel|>
		`<|channel|>final<|message|>{"city":"Oslo"}`:                                                           true,
		`<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>{"city":"Oslo"}`: true,
	} {
		if ok := grammar.NewMatcher(k.grammar, k.vocab).AcceptBytes([]byte(text)) == nil; ok != want {
			t.Errorf("%q: accepted %v, want %v", text, ok, want)
		}
	}
	for i, got := range collectHarmony(t, e, req) {
		var v map[string]any
		if err := json.Unmarshal([]byte(got.text), &v); err != nil || v["city"] == nil {
			t.Errorf("choice %d: content %q is not the schema's object (%v); reasoning %q, finish %s", i, got.text, err, got.reasoning, got.final.FinishReason)
		}
		if got.final.FinishReason != engine.FinishStop || len(got.calls) != 0 {
			t.Errorf("choice %d: finish %s with calls %+v", i, got.final.FinishReason, got.calls)
		}
		if n := *got.final.Stats.ReasoningTokens; (got.reasoning != "") != (n > 0) {
			t.Errorf("choice %d: %d reasoning tokens for reasoning %q", i, n, got.reasoning)
		}
	}
}

// TestReasoningEffort: the request's reasoning_effort reaches gpt-oss's
// template, which prints it (medium without one), over the kwargs' own;
// "none" turns Qwen 3's thinking off as enable_thinking false does.
func TestReasoningEffort(t *testing.T) {
	t.Parallel()
	e := newHarmonyEngine(t, nil)
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "Hi"}}
	for _, tc := range []struct {
		effort string
		kwargs map[string]any
		want   string
	}{
		{"", nil, "Reasoning: medium\n"},
		{"low", nil, "Reasoning: low\n"},
		{"high", map[string]any{"reasoning_effort": "low"}, "Reasoning: high\n"},
		{"", map[string]any{"reasoning_effort": "low"}, "Reasoning: low\n"},
	} {
		text, _, err := e.renderChat(chatRender{msgs: msgs, kwargs: tc.kwargs, effort: tc.effort})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, tc.want) {
			t.Errorf("effort %q, kwargs %v: prompt lacks %q:\n%s", tc.effort, tc.kwargs, tc.want, text)
		}
	}

	q := newQwenEngine(t, templateQwen3, Options{})
	for effort, off := range map[string]bool{"": false, "none": true, "minimal": true, "high": false} {
		text, _, err := q.renderChat(chatRender{msgs: msgs, effort: effort})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.HasSuffix(text, "<think>\n\n</think>\n\n"); got != off {
			t.Errorf("Qwen 3, effort %q: thinking off %v, want %v (prompt ends %q)", effort, got, off, text[max(0, len(text)-30):])
		}
	}
}

// TestHarmonyHistoryGolden renders conversations with earlier reasoning,
// tool calls and tool results through gpt-oss's template as Generate does,
// and wants the prompts Python's jinja2 renders from them as llama.cpp and
// transformers pass them (testdata/harmony_golden.json, written by
// scripts/chat/harmonygolden.py): reasoning_content as the template's
// thinking, the content of a turn with reasoning and calls left out.
func TestHarmonyHistoryGolden(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "harmony_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		SHA256 string `json:"sha256"`
		Now    string `json:"now"`
		Cases  []struct {
			Name    string          `json:"name"`
			Request json.RawMessage `json:"request"`
			Prompt  string          `json:"prompt"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	src := templateSource(t, templateGPTOSS)
	if sum := sha256.Sum256([]byte(src)); hex.EncodeToString(sum[:]) != g.SHA256 {
		t.Fatalf("the template in ../shared is not the one the golden was rendered from: run scripts/chat/harmonygolden.py")
	}
	now, err := time.Parse("2006-01-02T15:04:05", g.Now)
	if err != nil {
		t.Fatal(err)
	}
	e := newTemplateEngine(t, src, now)
	for _, c := range g.Cases {
		req := engineRequest(t, c.Request)
		var effort struct {
			ReasoningEffort string `json:"reasoning_effort"`
		}
		if err := json.Unmarshal(c.Request, &effort); err != nil {
			t.Fatal(err)
		}
		k, err := e.constraintFor(req)
		if err != nil {
			t.Fatal(err)
		}
		r := promptRequest(req, k)
		text, _, err := e.renderChat(chatRender{msgs: r.Messages, tools: r.Tools, kwargs: r.ChatTemplateKwargs, effort: effort.ReasoningEffort})
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if text != c.Prompt {
			t.Errorf("%s: rill renders\n%s\njinja2 renders\n%s", c.Name, text, c.Prompt)
		}
	}
}
