package toolcall

import (
	"math/bits"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"rill/engine/grammar"
)

type harmonyCase struct {
	name               string
	tools              []string
	noCalls            bool
	text               string
	reasoning, content string
	calls              []Call
}

// The outputs as gpt-oss writes them after the generation prompt
// "<|start|>assistant" (<|return|> and <|call|> end the generation and are
// not text).
var harmonyCases = []harmonyCase{
	{name: "analysis then final",
		text:      "<|channel|>analysis<|message|>The user greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?",
		reasoning: "The user greets. Reply.", content: "Hello! How can I help?"},
	{name: "final only", text: "<|channel|>final<|message|>Hi < there <|", content: "Hi < there <|"},
	{name: "call in channel header",
		text:      `<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}`,
		reasoning: "Need weather.", calls: []Call{{"call_1", "get_weather", `{"city":"Paris"}`}}},
	{name: "call in role header",
		text:  `<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}`,
		tools: []string{"get_weather"}, reasoning: "x", calls: []Call{{"call_1", "get_weather", `{"city": "Paris"}`}}},
	{name: "call at the start", text: ` to=functions.f<|channel|>commentary json<|message|>{}`, calls: []Call{{"call_1", "f", `{}`}}},
	{name: "call without arguments", text: `<|channel|>commentary to=functions.now<|message|>`, calls: []Call{{"call_1", "now", `{}`}}},
	{name: "call arguments cut short", text: `<|channel|>commentary to=functions.f json<|message|>  {"a": "lo`, calls: []Call{{"call_1", "f", `{"a": "lo`}}},
	{name: "preamble is content",
		text:    "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary to=functions.f<|message|>{\"q\":1}",
		content: "Let me check.", calls: []Call{{"call_1", "f", `{"q":1}`}}},
	{name: "undeclared function is content", tools: []string{"g"},
		text: `<|channel|>commentary to=functions.f json<|message|>{"q":1}`, content: `{"q":1}`},
	{name: "no calls", noCalls: true,
		text: `<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>commentary to=functions.f json<|message|>{"q":1}`, reasoning: "r", content: `{"q":1}`},
	{name: "builtin recipient is content", text: `<|channel|>analysis to=browser.search code<|message|>{"query":"x"}`, content: `{"query":"x"}`},
	{name: "stray commentary before analysis",
		text:      "<|channel|>commentary to=assistant<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>ok",
		reasoning: "think", content: "ok"},
	{name: "two analysis messages",
		text:      "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c<|end|>",
		reasoning: "ab", content: "c"},
	{name: "body ends at start without end",
		text:      "<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>c",
		reasoning: "a", content: "c"},
	{name: "marker text inside arguments", text: `<|channel|>commentary to=functions.f<|message|>{"a": "x<|end|>y"}`,
		calls: []Call{{"call_1", "f", `{"a": "x<|end|>y"}`}}},
	{name: "text after the arguments is dropped",
		text:    `<|channel|>commentary to=functions.f<|message|>{"a": 1} extra<|end|><|start|>assistant<|channel|>final<|message|>done`,
		content: "done", calls: []Call{{"call_1", "f", `{"a": 1}`}}},
	{name: "broken arguments go as they are",
		text:    `<|channel|>commentary to=functions.f<|message|>{"a": tru!}<|end|><|start|>assistant<|channel|>final<|message|>x`,
		content: "x", calls: []Call{{"call_1", "f", `{"a": tru!}`}}},
	{name: "plain text is content", text: "Just an answer, 3 < 4.", content: "Just an answer, 3 < 4."},
	{name: "plain json is content", text: `{"a": [1, 2]}`, content: `{"a": [1, 2]}`},
	{name: "cut inside header", text: "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>fin", reasoning: "r"},
	{name: "unicode", text: "<|channel|>analysis<|message|>héllo 🙂<|end|><|start|>assistant<|channel|>final<|message|>Grüß 👋",
		reasoning: "héllo 🙂", content: "Grüß 👋"},
}

func harmonyOpts(c harmonyCase) Options {
	return Options{Tools: c.tools, NoCalls: c.noCalls, NewID: counterIDs()}
}

func TestParseHarmony(t *testing.T) {
	t.Parallel()
	for _, c := range harmonyCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			reasoning, content, calls := ParseReasoning(Harmony, c.text, harmonyOpts(c))
			if reasoning != c.reasoning || content != c.content || !reflect.DeepEqual(calls, c.calls) {
				t.Errorf("got reasoning %q content %q calls %+v\nwant reasoning %q content %q calls %+v",
					reasoning, content, calls, c.reasoning, c.content, c.calls)
			}
		})
	}
}

// TestHarmonyStreamingEqualsParse splits every case at every UTF-8
// boundary, and feeds it rune by rune: the deltas must assemble to
// ParseReasoning's result and keep the streaming shape.
func TestHarmonyStreamingEqualsParse(t *testing.T) {
	t.Parallel()
	for _, c := range harmonyCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wantR, wantC, wantCalls := ParseReasoning(Harmony, c.text, harmonyOpts(c))
			var splits [][]string
			for i := 0; i <= len(c.text); i++ {
				if i == len(c.text) || utf8.RuneStart(c.text[i]) {
					splits = append(splits, []string{c.text[:i], c.text[i:]})
				}
			}
			var runes []string
			for _, r := range c.text {
				runes = append(runes, string(r))
			}
			splits = append(splits, runes)
			for _, pieces := range splits {
				p := NewParser(Harmony, harmonyOpts(c))
				var all []Delta
				for _, s := range pieces {
					all = append(all, slices.Clone(p.Feed(s))...)
				}
				all = append(all, p.Flush()...)
				checkHarmonyShape(t, all)
				content, calls := Assemble(all)
				if r := AssembleReasoning(all); r != wantR || content != wantC || !reflect.DeepEqual(calls, wantCalls) {
					t.Fatalf("split %q: got %q %q %+v, want %q %q %+v", pieces, r, content, calls, wantR, wantC, wantCalls)
				}
			}
		})
	}
}

// checkHarmonyShape checks that every delta has exactly one part and that
// each call opens with its id and name before its arguments.
func checkHarmonyShape(t *testing.T, deltas []Delta) {
	t.Helper()
	opened := 0
	for i, d := range deltas {
		parts := 0
		for _, set := range []bool{d.Content != "", d.Reasoning != "", d.Call != nil} {
			if set {
				parts++
			}
		}
		if parts != 1 {
			t.Fatalf("delta %d has %d parts: %+v", i, parts, d)
		}
		if d.Call == nil {
			continue
		}
		switch {
		case d.Call.Index == opened && d.Call.ID != "" && d.Call.Name != "":
			opened++
		case d.Call.Index < opened && d.Call.ID == "" && d.Call.Name == "" && d.Call.Arguments != "":
		default:
			t.Fatalf("delta %d is out of shape: %+v (calls opened %d)", i, d.Call, opened)
		}
	}
}

// TestHarmonyStream follows a streamed output token by token: which stream
// each piece belongs to, and that body text goes out as soon as it is
// known not to be a marker.
func TestHarmonyStream(t *testing.T) {
	t.Parallel()
	steps := []struct {
		piece string
		want  Stream
		out   string // reasoning, content or arguments sent by this piece
	}{
		{"<|channel|>", StreamNone, ""},
		{"analysis", StreamNone, ""},
		{"<|message|>", StreamReasoning, ""},
		{"Think", StreamReasoning, "Think"},
		{" <", StreamReasoning, " "},
		{"x", StreamReasoning, "<x"},
		{"<|end|>", StreamNone, ""},
		{"<|start|>", StreamNone, ""},
		{"assistant", StreamNone, ""},
		{"<|channel|>", StreamNone, ""},
		{"commentary to=functions.f", StreamNone, ""},
		{" <|constrain|>json", StreamNone, ""},
		{"<|message|>", StreamAnswer, ""},
		{`{"a":`, StreamAnswer, `{"a":`},
		{` 1}`, StreamAnswer, ` 1}`},
	}
	p := NewParser(Harmony, Options{NewID: counterIDs()})
	if p.Stream() != StreamNone {
		t.Fatalf("a new parser is in stream %d, want none", p.Stream())
	}
	for _, st := range steps {
		var out string
		for _, d := range p.Feed(st.piece) {
			out += d.Reasoning + d.Content
			if d.Call != nil {
				out += d.Call.Arguments
			}
		}
		if got := p.Stream(); got != st.want || out != st.out {
			t.Errorf("after %q: stream %d, sent %q; want %d, %q", st.piece, got, out, st.want, st.out)
		}
	}
	if NewParser(Hermes, Options{}).Stream() != StreamAnswer {
		t.Error("a Hermes parser is not in the answer stream")
	}
}

// harmonyVocab is the 256 single bytes, the harmony markers as single
// tokens, and an end-of-generation token.
func harmonyVocab(t *testing.T) *grammar.Vocab {
	t.Helper()
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, m := range []string{harmonyStart, harmonyChannel, harmonyMessage, harmonyEnd, harmonyConstrain, "assistant", "analysis", "commentary", " to=functions."} {
		toks = append(toks, []byte(m))
	}
	toks = append(toks, nil)
	v, err := grammar.NewVocab(toks, []int{len(toks) - 1})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestHarmonyGrammar: the forcing grammar takes what gpt-oss writes before
// and as a call, refuses other output, and whatever is sampled under it
// (with the budget that makes it end) parses back as exactly one call of a
// declared tool with valid arguments.
func TestHarmonyGrammar(t *testing.T) {
	t.Parallel()
	g, err := Grammar(Harmony, testTools, GrammarOptions{Parallel: true})
	if err != nil {
		t.Fatal(err)
	}
	v := harmonyVocab(t)
	for text, want := range map[string]bool{
		`<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}`: true,
		` to=functions.get_time<|channel|>commentary json<|message|>{}`:              true,
		`<|channel|>analysis to=functions.get_time<|message|>{}`:                     true,
		"<|channel|>analysis<|message|>a << b < c<|end|><|start|>assistant<|channel|>commentary<|message|>Wait.<|end|>" +
			`<|start|>assistant<|channel|>commentary to=functions.get_time<|message|>{}`: true,
		`<|channel|>final<|message|>Hi`:                        false,
		`<|channel|>commentary to=functions.nope<|message|>{}`: false,
		`<|channel|>analysis<|message|>x <|y<|end|><|start|>assistant<|channel|>commentary to=functions.get_time<|message|>{}`: false,
		`<|channel|>commentary to=functions.get_time<|message|>{}<|end|>`:                                                      false,
	} {
		m := grammar.NewMatcher(g, v)
		ok := m.AcceptBytes([]byte(text)) == nil && m.Accept(v.Size()-1) == nil
		if ok != want {
			t.Errorf("%q: accepted %v, want %v", text, ok, want)
		}
	}

	val := validators(t)
	var names []string
	for _, tool := range testTools {
		names = append(names, tool.Name)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	mask := make([]uint64, grammar.MaskWords(v.Size()))
	seen := map[string]bool{}
	reasoned := false
	for range 30 {
		m := grammar.NewMatcher(g, v)
		var out []byte
		for left := 160; !m.Ended(); left-- {
			m.MaskBudget(mask, left)
			var ids []int
			for w, word := range mask {
				for ; word != 0; word &= word - 1 {
					ids = append(ids, w*64+bits.TrailingZeros64(word))
				}
			}
			if len(ids) == 0 {
				t.Fatalf("nothing allowed after %q", out)
			}
			pick := ids[rng.IntN(len(ids))]
			if err := m.Accept(pick); err != nil {
				t.Fatal(err)
			}
			out = append(out, v.Token(pick)...)
		}
		reasoning, _, calls := ParseReasoning(Harmony, string(out), Options{Tools: names})
		if len(calls) != 1 {
			t.Fatalf("%q parsed as %d calls", out, len(calls))
		}
		reasoned = reasoned || reasoning != ""
		seen[calls[0].Name] = true
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(calls[0].Arguments))
		if err != nil {
			t.Fatalf("%q: arguments %q are not JSON: %v", out, calls[0].Arguments, err)
		}
		if err := val[calls[0].Name].Validate(inst); err != nil {
			t.Fatalf("%q: arguments of %s invalid: %v", out, calls[0].Name, err)
		}
	}
	if len(seen) < 2 || !reasoned {
		t.Errorf("30 samples called only %v, with reasoning %v", seen, reasoned)
	}
}

func TestHarmonyResponseGrammar(t *testing.T) {
	t.Parallel()
	v := harmonyVocab(t)
	schema := []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`)
	cases := []struct {
		name   string
		schema []byte
		text   string
		want   bool
	}{
		{"final only", schema, `<|channel|>final<|message|>{"n":1}`, true},
		{"analysis first", schema, `<|channel|>analysis<|message|>count<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{"n":2}`, true},
		{"bare json", schema, `{"n":1}`, false},
		{"against the schema", schema, `<|channel|>final<|message|>{"m":1}`, false},
		{"commentary is no reply", schema, `<|channel|>commentary<|message|>{"n":1}`, false},
		{"any object without a schema", nil, `<|channel|>final<|message|>{"x":[true]}`, true},
		{"not an object without a schema", nil, `<|channel|>final<|message|>[1]`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := HarmonyResponseGrammar(tc.schema, grammar.JSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m := grammar.NewMatcher(g, v)
			ok := m.AcceptBytes([]byte(tc.text)) == nil && m.Accept(v.Size()-1) == nil
			if ok != tc.want {
				t.Errorf("%q: accepted %v, want %v", tc.text, ok, tc.want)
			}
		})
	}
	if _, err := HarmonyResponseGrammar([]byte(`{"type":"nonsense"}`), grammar.JSONOptions{}); err == nil {
		t.Error("an invalid schema compiled")
	}
}
