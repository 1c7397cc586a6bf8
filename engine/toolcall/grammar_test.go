package toolcall

import (
	"encoding/json"
	"errors"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"rill/engine/grammar"
)

var testTools = []Tool{
	{Name: "get_weather", Description: "Weather in a city.", Parameters: []byte(`{"type":"object","properties":{
		"city":{"type":"string","minLength":1,"maxLength":12},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},
		"required":["city","unit","days"],"additionalProperties":false}`)},
	{Name: "get_time", Description: "The time now."},
	{Name: "search.web", Parameters: []byte(`{"type":"object","properties":{"q":{"type":"string","maxLength":8},"tags":{"type":"array","items":{"type":"boolean"},"maxItems":2}},"required":["q"]}`)},
}

// markerVocab is the 256 single bytes, the formats' markers as single
// tokens (as a real vocabulary has them), and an end-of-generation token.
func markerVocab(t *testing.T) *grammar.Vocab {
	t.Helper()
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, m := range []string{hermesOpen, hermesClose, mistralCalls, mistralArgs, `{"name": "`, `", "arguments": `, "get_weather", "celsius",
		"<function=", "</function>", "<parameter=", "</parameter>", "\n</parameter>\n", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
		"<minimax:tool_call>", "</minimax:tool_call>", "<seed:tool_call>", "</seed:tool_call>", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>",
		"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
		"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
		"<|START_ACTION|>", "<|END_ACTION|>", "<|tool_call|>", " functools", ">>>"} {
		toks = append(toks, []byte(m))
	}
	toks = append(toks, nil) // end of generation
	v, err := grammar.NewVocab(toks, []int{len(toks) - 1})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sampleText draws tokens uniformly under the mask, preferring quotes,
// brackets and digits after a while so that the output ends.
func sampleText(t *testing.T, g *grammar.Grammar, v *grammar.Vocab, rng *rand.Rand) (string, bool) {
	t.Helper()
	m := grammar.NewMatcher(g, v)
	mask := make([]uint64, grammar.MaskWords(v.Size()))
	var out []byte
	for step := range 600 {
		m.Mask(mask)
		var ids, closing []int
		for w, word := range mask {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				word &^= 1 << b
				id := w*64 + b
				ids = append(ids, id)
				if tok := v.Token(id); tok != nil && strings.ContainsAny(string(tok), "\"]}0123456789") {
					closing = append(closing, id)
				}
			}
		}
		if len(ids) == 0 {
			t.Fatalf("nothing allowed after %q", out)
		}
		pick := ids[rng.IntN(len(ids))]
		if step > 20 && len(closing) > 0 && rng.IntN(3) != 0 {
			pick = closing[rng.IntN(len(closing))]
		}
		if err := m.Accept(pick); err != nil {
			t.Fatal(err)
		}
		if m.Ended() {
			return string(out), true
		}
		out = append(out, v.Token(pick)...)
	}
	return string(out), false
}

func validators(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	out := map[string]*jsonschema.Schema{}
	for _, tool := range testTools {
		params := string(tool.Parameters)
		if params == "" {
			params = `{"type":"object"}`
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(params))
		if err != nil {
			t.Fatal(err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("s.json", doc); err != nil {
			t.Fatal(err)
		}
		if out[tool.Name], err = c.Compile("s.json"); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestGrammarOutputParses: whatever a model samples under a tool-call
// grammar, the parser of the same format reads it back as calls of declared
// tools with arguments valid against their schemas, and no content.
func TestGrammarOutputParses(t *testing.T) {
	t.Parallel()
	v := markerVocab(t)
	val := validators(t)
	var names []string
	params := map[string]json.RawMessage{}
	for _, tool := range testTools {
		names = append(names, tool.Name)
		params[tool.Name] = tool.Parameters
	}
	for _, f := range allFormats {
		for _, parallel := range []bool{false, true} {
			t.Run(string(f)+map[bool]string{false: "/single", true: "/parallel"}[parallel], func(t *testing.T) {
				t.Parallel()
				g, err := Grammar(f, testTools, GrammarOptions{Parallel: parallel})
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(len(f)), 3))
				seen := map[string]bool{}
				multi := false
				for range 25 {
					text, done := sampleText(t, g, v, rng)
					if !done {
						continue
					}
					content, calls := Parse(f, text, Options{Tools: names, Parameters: params})
					if strings.TrimSpace(content) != "" || len(calls) == 0 {
						t.Fatalf("%q parsed as content %q and %d calls", text, content, len(calls))
					}
					if len(calls) > 1 {
						multi = true
						if !parallel || f == Llama3 {
							t.Fatalf("%q: %d calls without parallel calls", text, len(calls))
						}
					}
					for _, c := range calls {
						seen[c.Name] = true
						inst, err := jsonschema.UnmarshalJSON(strings.NewReader(c.Arguments))
						if err != nil {
							t.Fatalf("%q: arguments %q are not JSON: %v", text, c.Arguments, err)
						}
						if err := val[c.Name].Validate(inst); err != nil {
							t.Fatalf("%q: arguments of %s invalid: %v", text, c.Name, err)
						}
					}
				}
				if len(seen) < 2 {
					t.Errorf("only %v were called in 25 samples", seen)
				}
				if parallel && f != Llama3 && !multi {
					t.Errorf("no sample made several calls")
				}
			})
		}
	}
}

func TestGenericAllowContent(t *testing.T) {
	t.Parallel()
	v := markerVocab(t)
	g, err := Grammar(Generic, testTools[:1], GrammarOptions{AllowContent: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	kinds := map[string]int{}
	for range 30 {
		text, done := sampleText(t, g, v, rng)
		if !done {
			continue
		}
		content, calls := Parse(Generic, text, Options{})
		switch {
		case len(calls) == 1 && content == "":
			kinds["call"]++
		case len(calls) == 0 && strings.HasPrefix(strings.TrimSpace(text), `{"content": `):
			kinds["content"]++
		default:
			t.Fatalf("%q parsed as %q, %+v", text, content, calls)
		}
	}
	if kinds["call"] == 0 || kinds["content"] == 0 {
		t.Errorf("samples were %v: want both calls and content", kinds)
	}
}

func TestGrammarErrors(t *testing.T) {
	t.Parallel()
	_, err := Grammar(Hermes, []Tool{{Name: "ok"}, {Name: "bad", Parameters: []byte(`{"type":"object","properties":{"x":{"not":{}}}}`)}}, GrammarOptions{})
	var te *ToolError
	var se *grammar.SchemaError
	if !errors.As(err, &te) || te.Index != 1 || !errors.As(err, &se) || se.Pointer != "/properties/x" {
		t.Errorf("bad parameters: %v, want a ToolError for tool 1 wrapping a SchemaError at /properties/x", err)
	}
	for _, c := range []struct {
		f     Format
		tools []Tool
		opts  GrammarOptions
	}{
		{Hermes, nil, GrammarOptions{}},
		{Hermes, []Tool{{}}, GrammarOptions{}},
		{MistralArgs, []Tool{{Name: "has space"}}, GrammarOptions{}},
		{Hermes, testTools, GrammarOptions{AllowContent: true}},
		{"xml", testTools, GrammarOptions{}},
	} {
		if _, err := Grammar(c.f, c.tools, c.opts); err == nil {
			t.Errorf("%s %+v %+v: no error", c.f, c.tools, c.opts)
		}
	}
}

func TestGenericInstructions(t *testing.T) {
	t.Parallel()
	s := GenericInstructions(testTools, true)
	for _, want := range []string{"get_weather: Weather in a city.", `"minLength":1`, `{"tool_calls": [`, `{"content": `, "get_time", `{"type": "object"}`} {
		if !strings.Contains(s, want) {
			t.Errorf("instructions lack %q:\n%s", want, s)
		}
	}
	if strings.Contains(GenericInstructions(testTools, false), `{"content"`) {
		t.Error("instructions offer content when it is not allowed")
	}
}
