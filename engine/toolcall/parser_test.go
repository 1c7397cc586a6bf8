package toolcall

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// counterIDs returns an id generator yielding call_1, call_2, ...
func counterIDs() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("call_%d", n) }
}

type parseCase struct {
	name    string
	format  Format
	tools   []string
	text    string
	content string
	calls   []Call
}

// testParams are the schemas the XML formats' cases convert values by.
var testParams = map[string]json.RawMessage{
	"get_weather": json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
		"metric": {"type": "boolean"}, "tags": {"type": "array"}, "opts": {"type": "object"}, "unit": {"enum": ["c", "f"]}}}`),
}

const weatherCall = `{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}`

var parseCases = []parseCase{
	// Hermes / Qwen.
	{"hermes plain", Hermes, nil, "Hello, world. Café ☕ costs 3 < 4.", "Hello, world. Café ☕ costs 3 < 4.", nil},
	{"hermes one call", Hermes, nil, "<tool_call>\n" + weatherCall + "\n</tool_call>", "",
		[]Call{{"call_1", "get_weather", `{"city": "Paris", "unit": "celsius"}`}}},
	{"hermes content then two calls", Hermes, nil,
		"Let me check both.\n\n<tool_call>\n" + weatherCall + "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>",
		"Let me check both.", []Call{{"call_1", "get_weather", `{"city": "Paris", "unit": "celsius"}`}, {"call_2", "get_time", `{"tz": "Europe/Paris"}`}}},
	{"hermes text after call", Hermes, nil, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone.", "\nDone.",
		[]Call{{"call_1", "f", "{}"}}},
	{"hermes malformed json is content", Hermes, nil, "<tool_call>\n{\"name\": get_weather}\n</tool_call>", "<tool_call>\n{\"name\": get_weather}\n</tool_call>", nil},
	{"hermes not json is content", Hermes, nil, "a <tool_call>call f(x)</tool_call> b", "a <tool_call>call f(x)</tool_call> b", nil},
	{"hermes unknown tool is content", Hermes, []string{"get_time"}, "<tool_call>\n" + weatherCall + "\n</tool_call>", "<tool_call>\n" + weatherCall + "\n</tool_call>", nil},
	{"hermes known tool", Hermes, []string{"get_time", "get_weather"}, "<tool_call>" + weatherCall + "</tool_call>", "",
		[]Call{{"call_1", "get_weather", `{"city": "Paris", "unit": "celsius"}`}}},
	{"hermes cut by max_tokens", Hermes, nil, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", "",
		[]Call{{"call_1", "get_weather", `{"city": "Par`}}},
	{"hermes cut before name", Hermes, nil, "Sure <tool_call>\n{\"name\": \"get_wea", "Sure <tool_call>\n{\"name\": \"get_wea", nil},
	{"hermes cut inside marker", Hermes, nil, "hello <tool_ca", "hello <tool_ca", nil},
	{"hermes arguments as a string", Hermes, nil, `<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>`, "",
		[]Call{{"call_1", "f", `{"a": 1}`}}},
	{"hermes no arguments", Hermes, nil, `<tool_call>{"name": "now"}</tool_call>`, "", []Call{{"call_1", "now", "{}"}}},
	{"hermes name after arguments", Hermes, nil, `<tool_call>{"arguments": {"x": [1, 2]}, "name": "f"}</tool_call>`, "",
		[]Call{{"call_1", "f", `{"x": [1, 2]}`}}},
	{"hermes json breaks after commit", Hermes, nil, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": tru!}}</tool_call>", "!}}</tool_call>",
		[]Call{{"call_1", "f", `{"a": tru`}}},
	{"hermes missing close tag", Hermes, nil, "<tool_call>{\"name\": \"f\", \"arguments\": {}} and more", " and more", []Call{{"call_1", "f", "{}"}}},
	{"hermes unicode arguments", Hermes, nil, "<tool_call>{\"name\": \"say\", \"arguments\": {\"text\": \"héllo 🙂 \\u00e9\"}}</tool_call>", "",
		[]Call{{"call_1", "say", `{"text": "héllo 🙂 \u00e9"}`}}},

	// Llama 3.x.
	{"llama bare call", Llama3, nil, `{"name": "get_weather", "parameters": {"city": "Paris"}}`, "", []Call{{"call_1", "get_weather", `{"city": "Paris"}`}}},
	{"llama leading whitespace", Llama3, nil, "\n\n  {\"name\": \"f\", \"parameters\": {}}", "", []Call{{"call_1", "f", "{}"}}},
	{"llama python tag", Llama3, nil, `<|python_tag|>{"name": "f", "parameters": {"q": "x"}}`, "", []Call{{"call_1", "f", `{"q": "x"}`}}},
	{"llama two calls", Llama3, nil, `{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": 1}}`, "",
		[]Call{{"call_1", "a", "{}"}, {"call_2", "b", `{"k": 1}`}}},
	{"llama json answer is content", Llama3, nil, `{"answer": 42}`, `{"answer": 42}`, nil},
	{"llama name without parameters is content", Llama3, nil, `{"name": "Bob", "age": 3}`, `{"name": "Bob", "age": 3}`, nil},
	{"llama text then json is content", Llama3, nil, `Result: {"name": "f", "parameters": {}}`, `Result: {"name": "f", "parameters": {}}`, nil},
	{"llama content after call", Llama3, nil, `{"name": "f", "parameters": {}} that is all`, " that is all", []Call{{"call_1", "f", "{}"}}},
	{"llama builtin call syntax is content", Llama3, nil, `<|python_tag|>brave_search.call(query="x")`, `<|python_tag|>brave_search.call(query="x")`, nil},

	// Mistral, JSON array form.
	{"mistral two calls", Mistral, nil, `[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]`, "",
		[]Call{{"call_1", "a", "{}"}, {"call_2", "b", `{"x": 1}`}}},
	{"mistral content before", Mistral, nil, `Sure. [TOOL_CALLS][{"name": "a", "arguments": {"q": "é"}}]`, "Sure.", []Call{{"call_1", "a", `{"q": "é"}`}}},
	{"mistral model id kept", Mistral, nil, `[TOOL_CALLS][{"name": "a", "id": "abc123XYZ", "arguments": {}}]`, "", []Call{{"abc123XYZ", "a", "{}"}}},
	{"mistral model id after arguments", Mistral, nil, `[TOOL_CALLS][{"name": "a", "arguments": {}, "id": "abc123XYZ"}]`, "", []Call{{"call_1", "a", "{}"}}},
	{"mistral not json", Mistral, nil, "[TOOL_CALLS] sorry", "[TOOL_CALLS] sorry", nil},
	// Mistral, [ARGS] form.
	{"mistral args one call", MistralArgs, nil, `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}`, "", []Call{{"call_1", "get_weather", `{"city": "Paris"}`}}},
	{"mistral args two calls with id", MistralArgs, nil, `[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[CALL_ID]abcdefghi[ARGS]{"x":1}`, "",
		[]Call{{"call_1", "a", "{}"}, {"abcdefghi", "b", `{"x":1}`}}},
	{"mistral args cut before args", MistralArgs, nil, "[TOOL_CALLS]get_weather[AR", "[TOOL_CALLS]get_weather[AR", nil},
	{"mistral args then content", MistralArgs, nil, `[TOOL_CALLS]a[ARGS]{"k": [1]} ok`, " ok", []Call{{"call_1", "a", `{"k": [1]}`}}},
	{"mistral args array form too", MistralArgs, nil, `[TOOL_CALLS][{"name": "a", "arguments": {}}]`, "", []Call{{"call_1", "a", "{}"}}},

	// Qwen3-Coder XML.
	{"qwen xml one call", QwenXML, nil, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "get_weather", `{"city": "Paris", "days": 3}`}}},
	{"qwen xml typed values", QwenXML, nil, "Let me see.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=tags>\n[\"a\", 1]\n</parameter>\n<parameter=opts>\n{\"x\": null}\n</parameter>\n<parameter=unit>\nc\n</parameter>\n<parameter=other>\n42\n</parameter>\n</function>\n</tool_call>", "Let me see.",
		[]Call{{"call_1", "get_weather", `{"city": "\"Paris\"", "metric": true, "tags": ["a", 1], "opts": {"x": null}, "unit": "c", "other": "42"}`}}},
	{"qwen xml multiline code", QwenXML, nil, "<tool_call>\n<function=write>\n<parameter=content>\nif a < b {\n\treturn \"</param\"\n}\n\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "write", `{"content": "if a < b {\n\treturn \"</param\"\n}\n"}`}}},
	{"qwen xml two calls and text", QwenXML, nil, "A\n<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n<parameter=x>\né🙂\n</parameter>\n</function>\n</tool_call>\nB", "A\nB",
		[]Call{{"call_1", "f", "{}"}, {"call_2", "g", `{"x": "é🙂"}`}}},
	{"qwen xml hermes json too", QwenXML, nil, "<tool_call>\n" + weatherCall + "\n</tool_call>", "",
		[]Call{{"call_1", "get_weather", `{"city": "Paris", "unit": "celsius"}`}}},
	{"qwen xml cut in value", QwenXML, nil, "<tool_call>\n<function=f>\n<parameter=x>\nhello wor", "",
		[]Call{{"call_1", "f", `{"x": "hello wor`}}},
	{"qwen xml unknown tool", QwenXML, []string{"g"}, "<tool_call>\n<function=f>\n</function>\n</tool_call>", "<tool_call>\n<function=f>\n</function>\n</tool_call>", nil},
	{"qwen xml not a call", QwenXML, nil, "x <tool_call> y", "x <tool_call> y", nil},
	{"qwen xml missing close tag", QwenXML, nil, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\nok", "\nok",
		[]Call{{"call_1", "f", `{"a": "1"}`}}},

	// Generic.
	{"generic calls", Generic, nil, `{"tool_calls": [{"name": "a", "arguments": {"q": "x"}}, {"name": "b", "arguments": {}}]}`, "",
		[]Call{{"call_1", "a", `{"q": "x"}`}, {"call_2", "b", "{}"}}},
	{"generic content", Generic, nil, `{"content": "Hello \u00e9 \ud83d\ude00 \"world\"\n"}`, "Hello é 😀 \"world\"\n", nil},
	{"generic content cut", Generic, nil, `{"content": "Hel\u00`, "Hel", nil},
	{"generic plain text", Generic, nil, "I cannot use tools.", "I cannot use tools.", nil},
	{"generic other json", Generic, nil, `{"answer": 1}`, `{"answer": 1}`, nil},
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			content, calls := Parse(c.format, c.text, Options{Tools: c.tools, NewID: counterIDs(), Parameters: testParams})
			if content != c.content {
				t.Errorf("content %q, want %q", content, c.content)
			}
			if !reflect.DeepEqual(calls, c.calls) {
				t.Errorf("calls %+v, want %+v", calls, c.calls)
			}
		})
	}
}

// checkShape checks the OpenAI streaming shape: no empty deltas, calls
// numbered from 0 in order, each opened by a delta with its id and name and
// never named again.
func checkShape(t *testing.T, deltas []Delta) {
	t.Helper()
	opened := 0
	for i, d := range deltas {
		switch {
		case d.Call == nil && d.Content == "":
			t.Fatalf("delta %d is empty", i)
		case d.Call != nil && d.Content != "":
			t.Fatalf("delta %d has both content and a call", i)
		case d.Call == nil:
		case d.Call.Index == opened:
			if d.Call.ID == "" || d.Call.Name == "" {
				t.Fatalf("delta %d opens call %d without id or name: %+v", i, opened, d.Call)
			}
			opened++
		case d.Call.Index < opened:
			if d.Call.ID != "" || d.Call.Name != "" || d.Call.Arguments == "" {
				t.Fatalf("delta %d of call %d repeats its header or is empty: %+v", i, d.Call.Index, d.Call)
			}
		default:
			t.Fatalf("delta %d is for call %d before call %d was opened", i, d.Call.Index, opened)
		}
	}
}

func stream(c parseCase, pieces []string) []Delta {
	return streamOpts(c.format, Options{Tools: c.tools, Parameters: testParams}, pieces)
}

func streamOpts(f Format, opts Options, pieces []string) []Delta {
	opts.NewID = counterIDs()
	p := NewParser(f, opts)
	var all []Delta
	for _, s := range pieces {
		all = append(all, slices.Clone(p.Feed(s))...)
	}
	return append(all, p.Flush()...)
}

// TestStreamingEqualsParse splits every case at every UTF-8 boundary, and
// feeds it rune by rune: the deltas must assemble to Parse's result.
func TestStreamingEqualsParse(t *testing.T) {
	t.Parallel()
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wantContent, wantCalls := Parse(c.format, c.text, Options{Tools: c.tools, NewID: counterIDs(), Parameters: testParams})
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
				deltas := stream(c, pieces)
				checkShape(t, deltas)
				content, calls := Assemble(deltas)
				if content != wantContent || !reflect.DeepEqual(calls, wantCalls) {
					t.Fatalf("split %q: got %q %+v, want %q %+v", pieces, content, calls, wantContent, wantCalls)
				}
			}
		})
	}
}

// TestHoldsBackOnlyWhatItMust: streamed rune by rune, plain text comes out
// at once, except whitespace (which may precede a marker) and a possible
// marker prefix.
func TestHoldsBackOnlyWhatItMust(t *testing.T) {
	t.Parallel()
	p := NewParser(Hermes, Options{})
	var got strings.Builder
	for _, piece := range []string{"Hello", " wor", "ld", " <", "tool", "_", "ca"} {
		for _, d := range p.Feed(piece) {
			got.WriteString(d.Content)
		}
		switch piece {
		case "Hello", "ld":
			if !strings.HasSuffix(got.String(), piece) {
				t.Errorf("after %q: sent %q, want everything", piece, got.String())
			}
		}
	}
	if got.String() != "Hello world" {
		t.Errorf("sent %q while a marker may follow, want %q", got.String(), "Hello world")
	}
	// A call streams its arguments before it is complete.
	p = NewParser(Hermes, Options{NewID: counterIDs()})
	var args string
	for _, piece := range []string{`<tool_call>{"name": "f", "argu`, `ments": {"a": `, `"long text`} {
		for _, d := range p.Feed(piece) {
			if d.Call != nil {
				args += d.Call.Arguments
			}
		}
	}
	if args != `{"a": "long text` {
		t.Errorf("arguments streamed so far %q, want %q", args, `{"a": "long text`)
	}
}

func TestDefaultIDs(t *testing.T) {
	t.Parallel()
	_, calls := Parse(Hermes, "<tool_call>"+weatherCall+"</tool_call><tool_call>"+weatherCall+"</tool_call>", Options{})
	if len(calls) != 2 || !strings.HasPrefix(calls[0].ID, "call_") || len(calls[0].ID) != 29 || calls[0].ID == calls[1].ID {
		t.Errorf("ids %q, %q: want distinct call_ + 24 characters", calls[0].ID, calls[1].ID)
	}
	_, calls = Parse(MistralArgs, `[TOOL_CALLS]a[ARGS]{}`, Options{})
	if len(calls) != 1 || len(calls[0].ID) != 9 {
		t.Errorf("mistral id %+v: want 9 characters", calls)
	}
}

var namedCases = []parseCase{
	{"kimi content, two calls, content", KimiK2, nil, "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>functions.b:1<|tool_call_argument_begin|>{\"x\": \"é\"}<|tool_call_end|><|tool_calls_section_end|>Done.",
		"Sure.Done.", []Call{{"functions.a:0", "a", "{}"}, {"functions.b:1", "b", `{"x": "é"}`}}},
	{"kimi call without section", KimiK2, nil, "<|tool_call_begin|>functions.a:3<|tool_call_argument_begin|>{\"k\": 1}<|tool_call_end|>", "",
		[]Call{{"functions.a:3", "a", `{"k": 1}`}}},
	{"kimi empty section is content", KimiK2, nil, "<|tool_calls_section_begin|><|tool_calls_section_end|>", "<|tool_calls_section_begin|><|tool_calls_section_end|>", nil},
	{"kimi cut in arguments", KimiK2, nil, "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"q\": \"x", "",
		[]Call{{"functions.a:0", "a", `{"q": "x`}}},
	{"deepseek unknown tool", DeepSeekV31, []string{"b"}, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", nil},
	{"deepseek not json", DeepSeekV31, nil, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>oops", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>oops", nil},
	{"functionary two calls", FunctionaryV31, nil, "Let me.\n<function=a>{\"x\": [1]}</function>\n<function=b>{}</function>", "Let me.",
		[]Call{{"call_1", "a", `{"x": [1]}`}, {"call_2", "b", "{}"}}},
	{"functionary include is content", FunctionaryV31, nil, "#include <functional>", "#include <functional>", nil},
}

var arrayCases = []parseCase{
	{"command-r7b thinking then calls", CommandR7B, nil, "<|START_THINKING|>Look it up.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"a\", \"parameters\": {\"q\": 1}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"b\", \"parameters\": {}}\n]<|END_ACTION|>",
		"<|START_THINKING|>Look it up.<|END_THINKING|>", []Call{{"call_1", "a", `{"q": 1}`}, {"call_2", "b", "{}"}}},
	{"command-r7b response is content", CommandR7B, nil, "<|START_RESPONSE|>Hi.<|END_RESPONSE|>", "<|START_RESPONSE|>Hi.<|END_RESPONSE|>", nil},
	{"granite call", Granite, nil, "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"x\": true}}]", "", []Call{{"call_1", "a", `{"x": true}`}}},
	{"firefunction content and call", Firefunction, nil, "Sure functools[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"k\": \"v\"}}]", "Sure",
		[]Call{{"call_1", "a", "{}"}, {"call_2", "b", `{"k": "v"}`}}},
	{"firefunction the module is content", Firefunction, nil, "import functools\nfunctools.partial(f)", "import functools\nfunctools.partial(f)", nil},
}

var recipientCases = []parseCase{
	{"functionary v3.2 content", FunctionaryV32, nil, "all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", nil},
	{"functionary v3.2 call", FunctionaryV32, nil, "f\n{\"a\": 1}", "", []Call{{"call_1", "f", `{"a": 1}`}}},
	{"functionary v3.2 content then calls then content", FunctionaryV32, nil, "all\nLet me see.>>>f\n{\"a\": 1}>>>g\n{}>>>all\nDone.", "Let me see.Done.",
		[]Call{{"call_1", "f", `{"a": 1}`}, {"call_2", "g", "{}"}}},
	{"functionary v3.2 no recipient", FunctionaryV32, nil, "Hello there, no recipient.", "Hello there, no recipient.", nil},
	{"functionary v3.2 unknown recipient", FunctionaryV32, []string{"g"}, "f\n{}", "f\n{}", nil},
}

func init() { parseCases = append(parseCases, recipientCases...) }

func init() { parseCases = append(append(parseCases, namedCases...), arrayCases...) }
