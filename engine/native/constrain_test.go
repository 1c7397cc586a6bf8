package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"rill/engine"
	"rill/engine/grammar"
	"rill/engine/toolcall"
	"rill/internal/shared"
)

// eventSchema is a structured-output schema with the shapes clients use:
// nested object, enum, bounded integer, boolean, array, nullable string.
const eventSchema = `{
  "type": "object",
  "properties": {
    "title": {"type": "string", "maxLength": 40},
    "kind": {"type": "string", "enum": ["meeting", "travel", "other"]},
    "minutes": {"type": "integer", "minimum": 1, "maximum": 600},
    "online": {"type": "boolean"},
    "people": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    "note": {"type": ["string", "null"], "maxLength": 20}
  },
  "required": ["title", "kind", "minutes", "online", "people", "note"],
  "additionalProperties": false
}`

// weatherParams is a tool's parameters schema.
const weatherParams = `{"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}`

var testTools = []engine.Tool{
	{Name: "get_weather", Description: "Current weather in a city.", Parameters: json.RawMessage(weatherParams)},
	{Name: "add", Description: "Adds two integers.", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`)},
}

// compileSchema compiles a JSON Schema for validating outputs.
func compileSchema(t testing.TB, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validate checks that text is one JSON document valid against s.
func validate(t testing.TB, s *jsonschema.Schema, text string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, text)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("output is not valid against the schema: %v\n%s", err, text)
	}
}

// toolResult is what collectTools gathered of one choice.
type toolResult struct {
	content string
	calls   []toolcall.Call
	final   engine.Event
	tokens  int // tokens with logprobs, when asked for
}

// collectTools runs req and assembles each choice's content and tool calls
// from the deltas, checking their streaming shape: a call's first delta has
// its id and name, later ones only arguments, indices dense from 0.
func collectTools(t testing.TB, e *Engine, req *engine.Request) []toolResult {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	out := make([]toolResult, req.Choices())
	for {
		ev, err := engine.Recv(st)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("Recv: %v", err)
			}
			break
		}
		r := &out[ev.Choice]
		r.content += ev.Text
		r.tokens += len(ev.Logprobs)
		for _, d := range ev.ToolCalls {
			switch {
			case d.Index == len(r.calls):
				if d.ID == "" || d.Name == "" {
					t.Fatalf("first delta of call %d has no id or name: %+v", d.Index, d)
				}
				r.calls = append(r.calls, toolcall.Call{ID: d.ID, Name: d.Name, Arguments: d.Arguments})
			case d.Index == len(r.calls)-1 && d.ID == "" && d.Name == "":
				r.calls[d.Index].Arguments += d.Arguments
			default:
				t.Fatalf("out-of-order tool-call delta %+v after %d calls", d, len(r.calls))
			}
		}
		if ev.Final {
			r.final = ev
		}
	}
	for i, r := range out {
		if !r.final.Final {
			t.Fatalf("choice %d has no final event", i)
		}
	}
	return out
}

func userTurn(prompt string) []engine.Message {
	return []engine.Message{{Role: engine.RoleUser, Content: prompt}}
}

// TestJSONSchemaOutputIsValid: whatever the random test model "wants",
// json_schema output is a valid document, greedy and sampled, alone and with
// n > 1, with every proposer drafting.
func TestJSONSchemaOutputIsValid(t *testing.T) {
	t.Parallel()
	schema := compileSchema(t, eventSchema)
	engines := map[string]*Engine{
		"plain":       newTestEngine(t, Options{}),
		"ngram":       newTestEngine(t, Options{NGram: true}),
		"draft model": newDraftEngine(t, Options{}),
	}
	id := engines["plain"].Models()[0].ID
	rf := &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "event", Schema: json.RawMessage(eventSchema), Strict: true}
	for name, e := range engines {
		for _, temp := range []float64{0, 1} {
			req := &engine.Request{Model: id, Messages: userTurn("Plan a meeting about the river."), MaxTokens: 2000, N: 3,
				ResponseFormat: rf, Sampling: engine.Sampling{Temperature: temp, Seed: seed(7)}}
			r := collect(t, e, req)
			for c, text := range r.text {
				if fr := r.final[c].FinishReason; fr != engine.FinishStop {
					t.Fatalf("%s T=%v choice %d: finish %q after %d tokens: %s", name, temp, c, fr, r.final[c].Stats.CompletionTokens, text)
				}
				validate(t, schema, text)
			}
			if again := collect(t, e, req); strings.Join(again.text, "|") != strings.Join(r.text, "|") {
				t.Fatalf("%s T=%v: the same seed gave other output:\n%q\n%q", name, temp, r.text, again.text)
			}
			t.Logf("%s T=%v: %s", name, temp, r.text[0])
		}
	}
}

// TestConstrainedDraftingIsLosslessGreedy: at temperature 0 a constrained
// choice has the same output with and without drafting.
func TestConstrainedDraftingIsLosslessGreedy(t *testing.T) {
	t.Parallel()
	plain := newTestEngine(t, Options{})
	id := plain.Models()[0].ID
	engines := map[string]*Engine{"ngram": newTestEngine(t, Options{NGram: true}), "draft model": newDraftEngine(t, Options{})}
	prompt := "Say \"" + repetitive + "\" again: "
	for _, rf := range []*engine.ResponseFormat{
		{Type: engine.FormatJSONSchema, Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
		{Type: engine.FormatJSONObject},
	} {
		base := &engine.Request{Model: id, Messages: userTurn(prompt), MaxTokens: 80, ResponseFormat: rf}
		want := collect(t, plain, base)
		for name, e := range engines {
			got := collect(t, e, base)
			if got.text[0] != want.text[0] || got.final[0].FinishReason != want.final[0].FinishReason {
				t.Fatalf("%s %s: drafted %q (%s), plain %q (%s)", name, rf.Type, got.text[0], got.final[0].FinishReason, want.text[0], want.final[0].FinishReason)
			}
			st := got.final[0].Stats
			checkDraftAccounting(t, st, 4)
			t.Logf("%s %s: accepted %d rejected %d of %d: %s", name, rf.Type, *st.DraftAccepted, *st.DraftRejected, st.CompletionTokens, got.text[0])
		}
	}
}

// TestConstrainedDraftingFollowsTargetDistribution: under a grammar,
// drafting with the draft model at temperature 1.5 samples the same
// distribution as plain decoding (χ² test over two-token outputs).
func TestConstrainedDraftingFollowsTargetDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test")
	}
	t.Parallel()
	plain := newTestEngine(t, Options{})
	drafted := newDraftEngine(t, Options{})
	id := plain.Models()[0].ID
	rf := &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: json.RawMessage(`{"type":"string"}`)}
	const draws = 1200
	sample := func(e *Engine, base int64) map[string]int {
		counts := map[string]int{}
		for i := range draws {
			r := collect(t, e, &engine.Request{Model: id, Prompt: "The fox and the bird", MaxTokens: 2, ResponseFormat: rf,
				Sampling: engine.Sampling{Temperature: 1.5, Seed: seed(base + int64(i))}})
			counts[r.text[0]]++
		}
		return counts
	}
	want, got := sample(plain, 1), sample(drafted, 1_000_000)
	chi, df := chiSquareTwoSample(want, got, 5)
	crit := float64(df) + 4.3*math.Sqrt(2*float64(df)) + 6
	t.Logf("χ² = %.1f over %d degrees of freedom (critical %.1f), %d distinct outputs", chi, df, crit, len(want))
	if df < 3 {
		t.Fatalf("only %d bins; the test cannot tell distributions apart", df+1)
	}
	if chi > crit {
		t.Fatalf("constrained drafted sampling differs from plain: χ² = %.1f > %.1f\nplain %v\ndrafted %v", chi, crit, top(want), top(got))
	}
	for out := range got {
		if !strings.HasPrefix(strings.TrimLeft(out, " \t\r\n"), `"`) && strings.TrimSpace(out) != "" {
			t.Fatalf("drafted output %q does not start a JSON string", out)
		}
	}
}

// TestJSONObjectAndLength: json_object gives one object; max_tokens cuts
// the output short with finish_reason length, as OpenAI does.
func TestJSONObjectAndLength(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	obj := &engine.ResponseFormat{Type: engine.FormatJSONObject}
	r := collect(t, e, &engine.Request{Model: id, Messages: userTurn("Describe the fox."), MaxTokens: 300, ResponseFormat: obj,
		Sampling: engine.Sampling{Temperature: 1, Seed: seed(3)}})
	validate(t, compileSchema(t, `{"type":"object"}`), r.text[0])
	if r.final[0].FinishReason != engine.FinishStop {
		t.Fatalf("finish %q", r.final[0].FinishReason)
	}
	// Compact, the object is short ("{}" and the end token with this seed):
	// cut it one token before its end.
	n := r.final[0].Stats.CompletionTokens - 1
	if n < 1 {
		t.Fatalf("the whole output %q has %d tokens; nothing to cut", r.text[0], n+1)
	}
	cut := collect(t, e, &engine.Request{Model: id, Messages: userTurn("Describe the fox."), MaxTokens: n, ResponseFormat: obj,
		Sampling: engine.Sampling{Temperature: 1, Seed: seed(3)}})
	if cut.final[0].FinishReason != engine.FinishLength || cut.final[0].Stats.CompletionTokens != n {
		t.Fatalf("cut at %d: finish %q after %d tokens", n, cut.final[0].FinishReason, cut.final[0].Stats.CompletionTokens)
	}
	if !strings.HasPrefix(r.text[0], cut.text[0]) {
		t.Fatalf("the cut output %q is not a prefix of the whole %q", cut.text[0], r.text[0])
	}
}

// TestLogprobsReportTheModelsDistribution: logprobs of a constrained choice
// are the model's raw distribution, not the masked one: its first
// position's alternatives are those of an unconstrained request.
func TestLogprobsReportTheModelsDistribution(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	first := func(req *engine.Request) engine.TokenLogprob {
		st, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := engine.Recv(st)
			if err != nil {
				t.Fatal("no logprobs")
			}
			if len(ev.Logprobs) > 0 {
				go func() {
					for {
						if _, err := engine.Recv(st); err != nil {
							return
						}
					}
				}()
				return ev.Logprobs[0]
			}
		}
	}
	base := engine.Request{Model: id, Prompt: "Once upon a time", MaxTokens: 4, Logprobs: true, TopLogprobs: 5}
	free := first(&base)
	cons := base
	cons.ResponseFormat = &engine.ResponseFormat{Type: engine.FormatJSONObject}
	cons.LogitBias = map[int]float64{7: 50}
	got := first(&cons)
	if fmt.Sprint(got.Top) != fmt.Sprint(free.Top) {
		t.Fatalf("top logprobs under a grammar and bias %v, unconstrained %v", got.Top, free.Top)
	}
	if got.Token == free.Token {
		t.Fatalf("the grammar did not change the first token %q", got.Token)
	}
}

// TestLogitBias: -100 bans a token, +100 forces it, with and without
// drafting; ids outside the vocabulary are refused.
func TestLogitBias(t *testing.T) {
	t.Parallel()
	plain := newTestEngine(t, Options{})
	id := plain.Models()[0].ID
	base := engine.Request{Model: id, Prompt: "Once upon a time", MaxTokens: 12, IgnoreEOS: true}
	// A token greedy decoding generates, and one it does not: both with a
	// piece no other token has, so that the pieces tell the ids.
	banned, forced := -1, plain.uniqueToken(t, " river")
	for _, p := range collectPieces(t, plain, &base) {
		if id := plain.uniqueToken(t, p); id >= 0 && id != forced {
			banned = id
			break
		}
	}
	if banned < 0 {
		t.Fatal("greedy output has no token with a unique piece")
	}
	for name, e := range map[string]*Engine{"plain": plain, "ngram": newTestEngine(t, Options{NGram: true}), "draft model": newDraftEngine(t, Options{})} {
		for _, temp := range []float64{0, 1} {
			ban := base
			ban.Sampling = engine.Sampling{Temperature: temp, Seed: seed(5)}
			ban.LogitBias = map[int]float64{banned: -100}
			for _, p := range collectPieces(t, e, &ban) {
				if p == string(e.tok.Piece(banned)) {
					t.Fatalf("%s T=%v: banned token %q was generated", name, temp, p)
				}
			}
			force := ban
			force.LogitBias = map[int]float64{forced: 100}
			for i, p := range collectPieces(t, e, &force) {
				if p != string(e.tok.Piece(forced)) {
					t.Fatalf("%s T=%v: token %d is %q, not the forced %q", name, temp, i, p, e.tok.Piece(forced))
				}
			}
		}
	}
	_, err := plain.Generate(context.Background(), &engine.Request{Model: id, Prompt: "x", LogitBias: map[int]float64{plain.tok.Size(): 1}})
	var re *engine.RequestError
	if !errors.As(err, &re) || re.Param != "logit_bias" || !strings.Contains(re.Message, fmt.Sprint(plain.tok.Size())) {
		t.Fatalf("an id past the vocabulary: %v", err)
	}
}

// collectPieces runs a one-choice request and returns the text of each of
// its tokens, from their logprobs.
func collectPieces(t testing.TB, e *Engine, req *engine.Request) []string {
	t.Helper()
	r := *req
	r.Logprobs = true
	st, err := e.Generate(context.Background(), &r)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		ev, err := engine.Recv(st)
		if err != nil {
			break
		}
		for _, lp := range ev.Logprobs {
			out = append(out, lp.Token)
		}
	}
	if len(out) == 0 {
		t.Fatal("no tokens")
	}
	return out
}

// uniqueToken returns the id of the one token whose piece is p, or -1 when
// none or several are (single characters are also byte tokens).
func (e *Engine) uniqueToken(t testing.TB, p string) int {
	found := -1
	for id := range e.tok.Size() {
		if string(e.tok.Piece(id)) == p {
			if found >= 0 {
				return -1
			}
			found = id
		}
	}
	return found
}

// TestForcedToolCalls: tool_choice required and a named function make the
// random model call tools whose arguments are valid, in the generic format
// (the test template has no tool syntax), streamed as deltas that assemble
// into calls, with finish_reason tool_calls within max_tokens (parallel
// calls too, which the random model would go on writing until max_tokens
// cut one short); the same with drafting.
func TestForcedToolCalls(t *testing.T) {
	t.Parallel()
	weather := compileSchema(t, weatherParams)
	add := compileSchema(t, string(testTools[1].Parameters))
	for name, e := range map[string]*Engine{"plain": newTestEngine(t, Options{}), "ngram": newTestEngine(t, Options{NGram: true}), "draft model": newDraftEngine(t, Options{})} {
		id := e.Models()[0].ID
		for _, tc := range []struct {
			choice   engine.ToolChoice
			parallel bool
		}{
			{engine.ToolChoice{Mode: engine.ToolChoiceRequired}, false},
			{engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, false},
			{engine.ToolChoice{Mode: engine.ToolChoiceRequired}, true},
		} {
			for _, temp := range []float64{0, 1} {
				req := &engine.Request{Model: id, Messages: userTurn("What is the weather in Paris?"), MaxTokens: 600, N: 2,
					Tools: testTools, ToolChoice: tc.choice, ParallelToolCalls: &tc.parallel,
					Sampling: engine.Sampling{Temperature: temp, Seed: seed(11)}}
				for c, r := range collectTools(t, e, req) {
					what := fmt.Sprintf("%s %s parallel %v T=%v choice %d", name, tc.choice.Mode, tc.parallel, temp, c)
					// A random model would go on calling in parallel until
					// max_tokens cut the last call short; the budget-aware
					// mask closes the calls in time.
					if r.final.FinishReason != engine.FinishToolCalls || len(r.calls) == 0 {
						t.Fatalf("%s: finish %q, %d calls", what, r.final.FinishReason, len(r.calls))
					}
					if r.content != "" {
						t.Fatalf("%s: content %q", what, r.content)
					}
					if !tc.parallel && len(r.calls) != 1 {
						t.Fatalf("%s: %d calls without parallel_tool_calls", what, len(r.calls))
					}
					for _, call := range r.calls {
						switch {
						case call.Name == "get_weather":
							validate(t, weather, call.Arguments)
						case call.Name == "add" && tc.choice.Mode == engine.ToolChoiceRequired:
							validate(t, add, call.Arguments)
						default:
							t.Fatalf("%s: call of %q", what, call.Name)
						}
						if !strings.HasPrefix(call.ID, "call_") {
							t.Fatalf("%s: call id %q", what, call.ID)
						}
					}
				}
			}
		}
	}
}

// TestToolChoiceAutoGeneric: with tool_choice auto a model without tool
// syntax answers in the generic format, either in words (content) or with
// calls, and the parser tells which; finish_reason says so. The envelope
// closes within max_tokens: words end with stop, never length (the random
// model would fill its budget with them).
func TestToolChoiceAutoGeneric(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	var words, calls int
	parallel := false
	for s := range int64(12) {
		req := &engine.Request{Model: id, Messages: userTurn("Hello there."), MaxTokens: 120, Tools: testTools, ParallelToolCalls: &parallel,
			Sampling: engine.Sampling{Temperature: 1, Seed: seed(s)}}
		r := collectTools(t, e, req)[0]
		switch {
		case len(r.calls) > 0:
			calls++
			if r.final.FinishReason != engine.FinishToolCalls {
				t.Fatalf("seed %d: %d calls, finish %q", s, len(r.calls), r.final.FinishReason)
			}
		case r.content != "" && r.final.FinishReason == engine.FinishStop:
			words++
			if strings.Contains(r.content, `"content"`) {
				t.Fatalf("seed %d: the generic envelope leaked into content: %q", s, r.content)
			}
		default:
			t.Fatalf("seed %d: finish %q with content %q", s, r.final.FinishReason, r.content)
		}
	}
	// Both ways must occur over the seeds, or the test shows only one of
	// the two things the parser must tell apart (4 and 8 on the embedded
	// model).
	t.Logf("auto: %d answers in words, %d with calls", words, calls)
	if words == 0 || calls == 0 {
		t.Fatalf("auto over 12 seeds: %d answers in words, %d with calls; want both", words, calls)
	}
}

// TestToolPrompt: the generic format's instructions reach the prompt in the
// system message, and earlier calls are written as generic replies.
func TestToolPrompt(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	parallel := false
	req := &engine.Request{Model: id, Tools: testTools[:1], ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired},
		ParallelToolCalls: &parallel, MaxTokens: 600,
		Messages: []engine.Message{
			{Role: engine.RoleSystem, Content: "Be brief."},
			{Role: engine.RoleUser, Content: "Weather in Oslo?"},
			{Role: engine.RoleAssistant, NullContent: true, ToolCalls: []engine.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo","unit":"celsius"}`}}},
			{Role: engine.RoleTool, ToolCallID: "call_1", Content: "-3 C"},
		}}
	k, err := e.constraintFor(req)
	if err != nil {
		t.Fatal(err)
	}
	p := promptRequest(req, k)
	if len(p.Messages) != 4 || !strings.HasPrefix(p.Messages[0].Content, "Be brief.\n\nYou can call these functions:") {
		t.Fatalf("system message %q of %d messages", p.Messages[0].Content, len(p.Messages))
	}
	if want := `{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo","unit":"celsius"}}]}`; p.Messages[2].Content != want || p.Messages[2].ToolCalls != nil {
		t.Fatalf("earlier call rendered as %q", p.Messages[2].Content)
	}
	if req.Messages[0].Content != "Be brief." || req.Messages[2].ToolCalls == nil {
		t.Fatal("promptRequest modified the request")
	}
	noSystem := *req
	noSystem.Messages = req.Messages[1:2]
	if p := promptRequest(&noSystem, k); len(p.Messages) != 2 || p.Messages[0].Role != engine.RoleSystem {
		t.Fatalf("without a system message: %+v", p.Messages)
	}
	if got := collectTools(t, e, req)[0]; len(got.calls) != 1 {
		t.Fatalf("history with tool results: %+v", got)
	}
}

// TestConstraintErrors: bad schemas, tools and choices are the client's
// errors naming the field.
func TestConstraintErrors(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	msgs := userTurn("hi")
	badTools := []engine.Tool{testTools[0], {Name: "bad", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"not":{}}}}`)}}
	for _, tc := range []struct {
		req   engine.Request
		param string
	}{
		{engine.Request{Messages: msgs, ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: json.RawMessage(`{"type":"object","patternProperties":{}}`)}}, "response_format"},
		{engine.Request{Messages: msgs, ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: json.RawMessage(`{"type":`)}}, "response_format"},
		{engine.Request{Messages: msgs, ResponseFormat: &engine.ResponseFormat{Type: "yaml"}}, "response_format.type"},
		{engine.Request{Messages: msgs, Tools: badTools, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}}, "tools[1].function.parameters"},
		{engine.Request{Messages: msgs, Tools: testTools, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "nope"}}, "tool_choice"},
		{engine.Request{Messages: msgs, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}}, "tool_choice"},
		{engine.Request{Prompt: "x", Tools: testTools}, "tools"},
		{engine.Request{Prompt: "x", LogitBias: map[int]float64{-1: 1}}, "logit_bias"},
		{engine.Request{Prompt: "x", LogitBias: map[int]float64{5: 101}}, "logit_bias"},
	} {
		req := tc.req
		req.Model = id
		_, err := e.Generate(context.Background(), &req)
		var re *engine.RequestError
		if !errors.As(err, &re) || re.Param != tc.param {
			t.Fatalf("%+v: got %v, want a request error on %s", tc.req, err, tc.param)
		}
		t.Logf("%s: %s", re.Param, re.Message)
	}
}

// sendMessageParams is Claude Code's SendMessage schema, trimmed: "to" is
// held by an allOf of two patterns, which no grammar rill builds can hold
// output to.
const sendMessageParams = `{"type":"object","properties":{` +
	`"to":{"type":"string","allOf":[{"pattern":"^[^\\n\\r]*$"},{"pattern":"^[\\s\\S]{0,300}$"}]},` +
	`"message":{"type":"string","maxLength":40}},"required":["to","message"],"additionalProperties":false}`

// TestToolSchemasLooseInAutoMode: in auto mode on the generic format, a
// tool that is not strict and whose schema asks more than a grammar can
// hold is served, its arguments held to what the grammar can say of the
// schema (as OpenAI enforces no schema of a tool that is not strict); a
// strict tool, or a forced call, still makes such a schema a 400.
func TestToolSchemasLooseInAutoMode(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{})
	id := e.Models()[0].ID
	send := engine.Tool{Name: "SendMessage", Description: "Sends a message.", Parameters: json.RawMessage(sendMessageParams)}
	strict := send
	strict.Strict = true
	auto := engine.ToolChoice{Mode: engine.ToolChoiceAuto}
	for _, tc := range []struct {
		name   string
		tool   engine.Tool
		choice engine.ToolChoice
		param  string // "": served
	}{
		{"auto", send, auto, ""},
		{"auto, strict", strict, auto, "tools[1].function.parameters"},
		{"required", send, engine.ToolChoice{Mode: engine.ToolChoiceRequired}, "tools[1].function.parameters"},
		{"named", send, engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "SendMessage"}, "tools[1].function.parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := &engine.Request{Model: id, Messages: userTurn("Tell the main agent about the river."), MaxTokens: 300, N: 8,
				Tools: []engine.Tool{testTools[0], tc.tool}, ToolChoice: tc.choice, Sampling: engine.Sampling{Temperature: 1, Seed: seed(3)}}
			if tc.param != "" {
				_, err := e.Generate(context.Background(), req)
				var re *engine.RequestError
				if !errors.As(err, &re) || re.Param != tc.param {
					t.Fatalf("got %v, want a request error on %s", err, tc.param)
				}
				return
			}
			// What the grammar still holds: the types, the required and
			// the closed properties, and the bound on "message".
			held := compileSchema(t, `{"type":"object","properties":{"to":{"type":"string"},"message":{"type":"string","maxLength":40}},"required":["to","message"],"additionalProperties":false}`)
			weather := compileSchema(t, weatherParams)
			calls := 0
			for c, r := range collectTools(t, e, req) {
				for _, call := range r.calls {
					calls++
					switch call.Name {
					case "SendMessage":
						validate(t, held, call.Arguments)
					case "get_weather":
						validate(t, weather, call.Arguments)
					default:
						t.Fatalf("choice %d called %q", c, call.Name)
					}
				}
			}
			t.Logf("%d calls in %d choices", calls, req.N)
		})
	}
}

// TestMaskedCopy checks the word-run mask against the plain rule on random
// masks of every density, with a vocabulary that ends inside a word and
// a mask shorter than the row.
func TestMaskedCopy(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 63, 64, 65, 1000, 4096 + 130, 10000} {
		for _, density := range []float64{0, 0.01, 0.5, 0.99, 1} {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(rng.NormFloat64())
			}
			words := (n + 63) / 64
			if n > 100 {
				words-- // a mask shorter than the row: the rest is disallowed
			}
			mask := make([]uint64, words)
			// Runs of whole words as well as random bits.
			for w := range mask {
				switch r := rng.Float64(); {
				case r < density/2:
					mask[w] = ^uint64(0)
				case r < density:
					mask[w] = rng.Uint64()
				}
			}
			dst := make([]float32, n)
			got := maskedCopy(dst, src, mask)
			want := false
			for id := range n {
				in := id/64 < len(mask) && mask[id/64]&(1<<(id%64)) != 0
				want = want || in
				if in && dst[id] != src[id] || !in && !math.IsInf(float64(dst[id]), -1) {
					t.Fatalf("n %d density %v: id %d allowed %v: %v (src %v)", n, density, id, in, dst[id], src[id])
				}
			}
			if got != want {
				t.Fatalf("n %d density %v: allowed %v, want %v", n, density, got, want)
			}
		}
	}
}

// budgetRun is what runBudget gathered of one constrained choice.
type budgetRun struct {
	out    string   // the content, or the arguments of the calls
	tokens [][]byte // each token's bytes but the end token's (from logprobs)
	final  engine.Event
}

// runBudget runs req (one choice, with logprobs) and gathers its output.
func runBudget(t *testing.T, e *Engine, req *engine.Request) budgetRun {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	var r budgetRun
	for {
		ev, err := engine.Recv(st)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		r.out += ev.Text
		for _, d := range ev.ToolCalls {
			r.out += d.Arguments
		}
		for _, lp := range ev.Logprobs {
			r.tokens = append(r.tokens, lp.Bytes)
		}
		if ev.Final {
			r.final = ev
		}
	}
	return r
}

// tightestBudget is the least max_tokens under which the budget-aware mask
// leaves the output of tokens (then the end token) as it is: at each token
// the tokens so far, the distance after it and the end token must fit.
// Without tokens it is the least budget any output fits in.
func tightestBudget(t *testing.T, e *Engine, req *engine.Request, tokens [][]byte) int {
	t.Helper()
	k, err := e.constraintFor(req)
	if err != nil {
		t.Fatal(err)
	}
	m := grammar.NewMatcher(k.grammar, k.vocab)
	tight := max(len(tokens), m.Distance()) + 1
	for i, b := range tokens {
		if err := m.AcceptBytes(b); err != nil {
			t.Fatalf("token %d %q: %v", i, b, err)
		}
		d := m.Distance()
		if d < 0 {
			t.Fatalf("no completion after token %d %q", i, b)
		}
		tight = max(tight, i+1+d+1)
	}
	return tight
}

// TestBudgetLeavesOutputThatEnds: stories260K's greedy output that ends
// on its own within max_tokens is the same, token for token, under the
// tightest max_tokens the budget-aware mask lets it through at as under a
// large one. Below that the mask makes it close earlier, still ending
// properly with valid JSON: at one token less, and halfway down to the
// least budget any document fits in (without the mask: finish_reason
// length there). Plain and drafting with n-grams, for a json_schema reply
// and a forced tool call.
func TestBudgetLeavesOutputThatEnds(t *testing.T) {
	t.Parallel()
	path := shared.Path(t, "models", "stories260K.gguf")
	weather := compileSchema(t, weatherParams)
	single := false
	plain := openShared(t, path, Options{})
	engines := []struct {
		name string
		e    *Engine
	}{{"plain", plain}, {"ngram", openShared(t, path, Options{NGram: true})}}
	for _, c := range []struct {
		name string
		req  engine.Request
		want engine.FinishReason
	}{
		{"json_schema", engine.Request{Messages: userTurn("What is the weather in Paris?"),
			ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "weather", Schema: json.RawMessage(weatherParams), Strict: true}}, engine.FinishStop},
		{"tool_choice named", engine.Request{Messages: userTurn("What is the weather in Paris?"), Tools: testTools,
			ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, ParallelToolCalls: &single}, engine.FinishToolCalls},
	} {
		req := c.req
		req.Model, req.Logprobs = plain.Models()[0].ID, true
		req.MaxTokens = 400
		free := runBudget(t, plain, &req)
		if free.final.FinishReason != c.want {
			t.Fatalf("%s: finish %q with max_tokens %d: %q", c.name, free.final.FinishReason, req.MaxTokens, free.out)
		}
		tight := tightestBudget(t, plain, &req, free.tokens)
		least := tightestBudget(t, plain, &req, nil)
		natural := free.final.Stats.CompletionTokens
		t.Logf("%s: %d tokens on its own, the tightest budget that leaves it is %d, the least for any document %d: %s",
			c.name, natural, tight, least, free.out)
		for _, en := range engines {
			for _, budget := range []int{tight, tight - 1, (least + natural) / 2} {
				req.MaxTokens = budget
				got := runBudget(t, en.e, &req)
				what := fmt.Sprintf("%s %s max_tokens %d", en.name, c.name, budget)
				t.Logf("%s: %s after %d tokens: %s", what, got.final.FinishReason, got.final.Stats.CompletionTokens, got.out)
				if got.final.FinishReason != c.want {
					t.Errorf("%s: finish %q: %q", what, got.final.FinishReason, got.out)
					continue
				}
				validate(t, weather, got.out)
				if same := got.out == free.out && got.final.Stats.CompletionTokens == natural; same != (budget == tight) {
					t.Errorf("%s: %q after %d tokens, with room: %q after %d", what, got.out, got.final.Stats.CompletionTokens, free.out, natural)
				}
			}
		}
	}
}
