package native

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"rill/engine"
	"rill/engine/grammar"
	"rill/engine/model"
	"rill/internal/shared"
)

// smallModelBudget is the max_tokens of the checks of
// TestSmallModelFinishesJSON: room for the least document of their
// schemas (and the generic tool-call wrapper) several times over, but not
// for a story written into a JSON object, nor for runs of newlines between
// tokens, which the budget-aware mask has to cut short.
const smallModelBudget = 120

// jsonCheck is one constrained request of TestSmallModelFinishesJSON and
// what makes its answer proper.
type jsonCheck struct {
	name string
	req  engine.Request // without Model and Sampling
	// ends checks a finished choice: nil when it ended as it should, with
	// valid JSON.
	ends func(r toolResult) error
}

// jsonChecks are the four kinds of constrained output: json_object,
// json_schema (strict), tool_choice required and tool_choice named.
func jsonChecks(t *testing.T) []jsonCheck {
	object := compileSchema(t, `{"type":"object"}`)
	weather := compileSchema(t, weatherParams)
	add := compileSchema(t, string(testTools[1].Parameters))
	answer := func(s *jsonschema.Schema) func(toolResult) error {
		return func(r toolResult) error {
			if fr := r.final.FinishReason; fr != engine.FinishStop {
				return fmt.Errorf("finish %q after %d tokens", fr, r.final.Stats.CompletionTokens)
			}
			return validJSON(s, r.content)
		}
	}
	calls := func(named string) func(toolResult) error {
		return func(r toolResult) error {
			if fr := r.final.FinishReason; fr != engine.FinishToolCalls {
				return fmt.Errorf("finish %q after %d tokens, %d calls", fr, r.final.Stats.CompletionTokens, len(r.calls))
			}
			if r.content != "" || len(r.calls) != 1 {
				return fmt.Errorf("content %q and %d calls, want one call and no content", r.content, len(r.calls))
			}
			c := r.calls[0]
			switch {
			case c.Name == "get_weather":
				return validJSON(weather, c.Arguments)
			case c.Name == "add" && named == "":
				return validJSON(add, c.Arguments)
			}
			return fmt.Errorf("a call of %q", c.Name)
		}
	}
	single := false
	return []jsonCheck{
		{"json_object", engine.Request{Messages: userTurn("Describe the fox as JSON."),
			ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONObject}}, answer(object)},
		{"json_schema strict", engine.Request{Messages: userTurn("What is the weather in Paris?"),
			ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "weather", Schema: json.RawMessage(weatherParams), Strict: true}}, answer(weather)},
		{"tool_choice required", engine.Request{Messages: userTurn("What is the weather in Paris?"), Tools: testTools,
			ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}, ParallelToolCalls: &single}, calls("")},
		{"tool_choice named", engine.Request{Messages: userTurn("What is the weather in Paris?"), Tools: testTools,
			ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, ParallelToolCalls: &single}, calls("get_weather")},
	}
}

// validJSON reports why text is not one JSON document valid against s.
func validJSON(s *jsonschema.Schema, text string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %w: %q", err, text)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("not valid against the schema: %w: %q", err, text)
	}
	return nil
}

// TestSmallModelFinishesJSON: stories260K, a tiny story model that has
// never seen JSON, plain and drafting with n-grams, greedy and sampled with
// three seeds, ends every check (json_object, json_schema strict,
// tool_choice required and tool_choice named) within 120 tokens with
// finish_reason stop or tool_calls and JSON valid against the schema, under
// the default compact whitespace policy (with no whitespace between JSON
// tokens) and under the bounded one.
//
// Left alone it would not: under json_object it writes a story into the
// keys and values and never closes the object ("}" is never among its
// likeliest tokens: TinyStories has no braces), and under the bounded
// policy it spends its budget on newlines between tokens. The budget-aware
// mask makes it close in time; the schema-bounded checks end on their own
// under compact, and the budget leaves them as they were.
func TestSmallModelFinishesJSON(t *testing.T) {
	t.Parallel()
	path := shared.Path(t, "models", "stories260K.gguf")
	checks := jsonChecks(t)
	samplings := []engine.Sampling{{Temperature: 0}}
	for s := range int64(3) {
		samplings = append(samplings, engine.Sampling{Temperature: 1, Seed: seed(s + 1)})
	}
	total := len(checks) * len(samplings)
	proper := map[string]int{}    // by policy and mode
	greedy := map[string]string{} // plain T=0 output by policy and check
	for _, policy := range []struct {
		name string
		opts grammar.JSONOptions
	}{{"compact", grammar.JSONOptions{}}, {"bounded", grammar.JSONOptions{MaxWhitespace: grammar.BoundedWhitespace}}} {
		for _, mode := range []struct {
			name  string
			ngram bool
		}{{"plain", false}, {"ngram", true}} {
			e := openShared(t, path, Options{NGram: mode.ngram, JSON: policy.opts})
			id := e.Models()[0].ID
			key := policy.name + " " + mode.name
			for _, c := range checks {
				for _, sampling := range samplings {
					what := fmt.Sprintf("%s %s T=%v seed %s", key, c.name, sampling.Temperature, seedOf(sampling))
					req := c.req
					req.Model, req.MaxTokens, req.Sampling = id, smallModelBudget, sampling
					r := collectTools(t, e, &req)[0]
					out := r.content
					if len(r.calls) > 0 {
						out = r.calls[0].Arguments
					}
					if mode.ngram && r.final.Stats.DraftAccepted == nil {
						t.Errorf("%s: no draft counters with n-gram drafting", what)
					}
					if i := interTokenSpace(out); policy.name == "compact" && i >= 0 {
						t.Errorf("%s: whitespace between JSON tokens at byte %d: %q", what, i, out)
					}
					if err := c.ends(r); err != nil {
						t.Errorf("%s: %v", what, err)
					} else {
						proper[key]++
						t.Logf("%s: %d tokens: %s", what, r.final.Stats.CompletionTokens, out)
					}
					// Drafting is lossless under the budget too: greedy
					// output is the same token for token.
					if sampling.Temperature == 0 {
						plain := policy.name + " " + c.name
						if !mode.ngram {
							greedy[plain] = out
						} else if out != greedy[plain] {
							t.Errorf("%s: %q, plain decoding %q", what, out, greedy[plain])
						}
					}
				}
			}
		}
	}
	for _, mode := range []string{"plain", "ngram"} {
		t.Logf("%s: %d of %d checks end properly with valid JSON within %d tokens with bounded whitespace, %d with compact",
			mode, proper["bounded "+mode], total, smallModelBudget, proper["compact "+mode])
	}
}

// interTokenSpace returns the offset of the first whitespace byte outside
// the strings of the JSON text s (whole or cut short), or -1.
func interTokenSpace(s string) int {
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && strings.IndexByte(" \t\n\r", c) >= 0:
			return i
		}
	}
	return -1
}

func seedOf(s engine.Sampling) string {
	if s.Seed == nil {
		return "none"
	}
	return fmt.Sprint(*s.Seed)
}

// openShared starts an engine on the GGUF model at path.
func openShared(t testing.TB, path string, opts Options) *Engine {
	t.Helper()
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return startOn(t, m, opts)
}

func TestInterTokenSpace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		text string
		want int
	}{
		{`{"a":[1,2],"b":"x y\t\"z w"}`, -1},
		{`{"a" :1}`, 4},
		{"{\n\"a\":1}", 1},
		{`{"a":"x\\" ,"b":1}`, 10},
		{`{"a":"cut sh`, -1},
		{` {}`, 0},
	} {
		if got := interTokenSpace(c.text); got != c.want {
			t.Errorf("%q: %d, want %d", c.text, got, c.want)
		}
	}
}
