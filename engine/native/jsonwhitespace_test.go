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
// TestSmallModelFinishesJSON: room for any compact document of their
// schemas many times over, but not for runs of newlines between tokens.
const smallModelBudget = 120

// jsonCheck is one constrained request of TestSmallModelFinishesJSON and
// what makes its answer proper.
type jsonCheck struct {
	name string
	req  engine.Request // without Model and Sampling
	// ends checks a finished choice: nil when it ended as it should, with
	// valid JSON.
	ends func(r toolResult) error
	// mustEnd: the schema bounds every string and forces the closing
	// brackets, so a model that cannot wander between tokens reaches the
	// end. Any JSON object (json_object) bounds nothing: stories260K
	// writes a story into its keys and values, and "}" is never among its
	// 20 likeliest tokens (TinyStories has no braces), so after each
	// member it writes "," and no whitespace policy ends the object
	// within the budget.
	mustEnd bool
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
			ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONObject}}, answer(object), false},
		{"json_schema strict", engine.Request{Messages: userTurn("What is the weather in Paris?"),
			ResponseFormat: &engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "weather", Schema: json.RawMessage(weatherParams), Strict: true}}, answer(weather), true},
		{"tool_choice required", engine.Request{Messages: userTurn("What is the weather in Paris?"), Tools: testTools,
			ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}, ParallelToolCalls: &single}, calls(""), true},
		{"tool_choice named", engine.Request{Messages: userTurn("What is the weather in Paris?"), Tools: testTools,
			ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, ParallelToolCalls: &single}, calls("get_weather"), true},
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
// never seen JSON, under the default compact whitespace policy, plain and
// drafting with n-grams, greedy and sampled with three seeds:
//
//   - ends every json_schema (strict), tool_choice required and
//     tool_choice named check within 120 tokens with finish_reason stop or
//     tool_calls and JSON valid against the schema (12 of the 16 checks);
//   - writes no whitespace between JSON tokens in any of the 16, the four
//     json_object ones included (which it cannot end, see jsonCheck).
//
// Under the bounded policy (runs of up to 20 whitespace bytes between
// tokens) it spends its budget on newlines between tokens instead; how
// many checks end properly under each policy is logged.
func TestSmallModelFinishesJSON(t *testing.T) {
	t.Parallel()
	path := shared.Path(t, "models", "stories260K.gguf")
	checks := jsonChecks(t)
	samplings := []engine.Sampling{{Temperature: 0}}
	for s := range int64(3) {
		samplings = append(samplings, engine.Sampling{Temperature: 1, Seed: seed(s + 1)})
	}
	total := len(checks) * len(samplings)
	proper := map[string]int{} // by policy and mode
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
					err := c.ends(r)
					switch {
					case err == nil:
						proper[key]++
						t.Logf("%s: %d tokens: %s", what, r.final.Stats.CompletionTokens, out)
					case policy.name == "compact" && c.mustEnd:
						t.Errorf("%s: %v", what, err)
					default:
						t.Logf("%s: %v: %q", what, err, out)
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
	if opts.Logger == nil {
		opts.Logger = discard
	}
	e, err := New(m, testCompute(t), opts)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	start(t, e)
	return e
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
