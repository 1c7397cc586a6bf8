package toolcall

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestXMLStringArgumentsStream: a string argument of an XML format streams
// as it is generated, holding back only what may be its closing tag.
func TestXMLStringArgumentsStream(t *testing.T) {
	t.Parallel()
	p := NewParser(QwenXML, Options{NewID: counterIDs(), Parameters: testParams})
	var args string
	steps := []struct{ piece, want string }{
		{"<tool_call>\n<function=get_weather>\n", "{"},
		{"<parameter=city>\n", "{"},
		{"Pa", `{"city": "Pa`},
		{"ris\n</para", `{"city": "Paris`},
		{"meter>\n<parameter=days>\n1", `{"city": "Paris"`},
		{"2\n</parameter>\n", `{"city": "Paris", "days": 12`},
		{"</function>", `{"city": "Paris", "days": 12}`},
	}
	for _, s := range steps {
		for _, d := range p.Feed(s.piece) {
			if d.Call != nil {
				args += d.Call.Arguments
			}
		}
		if args != s.want {
			t.Fatalf("after %q: arguments %q, want %q", s.piece, args, s.want)
		}
	}
}

func TestStringProps(t *testing.T) {
	t.Parallel()
	for schema, want := range map[string]bool{
		`{"type": "string"}`:              true,
		`{"type": ["string", "null"]}`:    true,
		`{"enum": ["a", "b"]}`:            true,
		`{"const": "a"}`:                  true,
		`{"type": "integer"}`:             false,
		`{"type": ["string", "integer"]}`: false,
		`{"enum": ["a", 1]}`:              false,
		`{}`:                              false,
		`{"type": "array", "items": {}}`:  false,
		`{"anyOf": [{"type": "string"}]}`: false,
	} {
		if got := isStringSchema([]byte(schema)); got != want {
			t.Errorf("%s: string %v, want %v", schema, got, want)
		}
	}
}

// llamaCppTools are tools of llama.cpp's tests/test-chat.cpp, whose
// expectations for the same texts the cases below take as facts.
var llamaCppTools = map[string]json.RawMessage{
	"special_function":          json.RawMessage(`{"type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}`),
	"special_function_with_opt": json.RawMessage(`{"type": "object", "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}, "required": ["arg1"]}`),
	"python":                    json.RawMessage(`{"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}`),
	"html":                      json.RawMessage(`{"type": "object", "properties": {"markup": {"type": "string"}}, "required": ["markup"]}`),
	"todo_list":                 json.RawMessage(`{"type": "object", "properties": {"todos": {"type": "array"}}, "required": ["todos"]}`),
	"edit": json.RawMessage(`{"type": "object", "properties": {"filename": {"type": "string"}, "oldString": {"type": "string"},
		"newString": {"type": "string"}}, "required": ["filename", "oldString", "newString"]}`),
	"tool_2req_4opt": json.RawMessage(`{"type": "object", "properties": {"req1": {"type": "string"}, "req2": {"type": "integer"},
		"opt1": {"type": "string"}, "opt2": {"type": "integer"}, "opt3": {"type": "string"}, "opt4": {"type": "integer"}}, "required": ["req1", "req2"]}`),
	"empty_args":  json.RawMessage(`{"type": "object", "properties": {}}`),
	"get_time":    json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`),
	"get_weather": json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}`),
}

// llamaCppCases are texts of llama.cpp's test-chat.cpp and the calls it
// expects from them (content: rill drops the whitespace before a call,
// where llama.cpp keeps it; rill does not split reasoning out, so the
// reasoning llama.cpp returns apart is content here).
var llamaCppCases = []struct {
	name    string
	format  Format
	text    string
	content string
	calls   []Call
}{
	{"qwen3-coder one call", QwenXML, "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"qwen3-coder without <tool_call>", QwenXML, "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"qwen3-coder content, without <tool_call>", QwenXML, "Let me call it.\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>", "Let me call it.",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"qwen3-coder two calls, the first without <tool_call>", QwenXML, "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}, {"call_2", "special_function_with_opt", `{"arg1": 1, "arg2": 2}`}}},
	{"qwen3-coder code", QwenXML, "<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n    print(\"Hello, world!\")\n\nhello()\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "python", "{\"code\": \"def hello():\\n    print(\\\"Hello, world!\\\")\\n\\nhello()\"}"}}},
	{"qwen3-coder asian characters", QwenXML, "<tool_call>\n<function=python>\n<parameter=code>\n格\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "python", `{"code": "格"}`}}},
	{"qwen3-coder html", QwenXML, "<tool_call>\n<function=html>\n<parameter=markup>\n<html>\n <head>\n  <title>Hello!</title>\n </head>\n</html>\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "html", "{\"markup\": \"<html>\\n <head>\\n  <title>Hello!</title>\\n </head>\\n</html>\"}"}}},
	{"qwen3-coder array of objects", QwenXML, "<tool_call>\n<function=todo_list>\n<parameter=todos>\n[{\"item\": \"Check stuff\", \"selected\": false}, {\"item\": \"Prepare stuff\", \"selected\": true}]\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "todo_list", `{"todos": [{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]}`}}},
	{"qwen3-coder arguments in any order", QwenXML, "<tool_call>\n<function=edit>\n<parameter=newString>\n#include\n</parameter>\n<parameter=filename>\nfoo.c\n</parameter>\n<parameter=oldString>\n#iclunde\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "edit", `{"newString": "#include", "filename": "foo.c", "oldString": "#iclunde"}`}}},
	{"qwen3-coder optional arguments", QwenXML, "<tool_call>\n<function=tool_2req_4opt>\n<parameter=req2>\n42\n</parameter>\n<parameter=req1>\nhello\n</parameter>\n<parameter=opt2>\n200\n</parameter>\n</function>\n</tool_call>", "",
		[]Call{{"call_1", "tool_2req_4opt", `{"req2": 42, "req1": "hello", "opt2": 200}`}}},

	{"glm-4.6 one call", GLM, "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"glm-4.7 one call", GLM47, "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},

	{"minimax-m2 no arguments", MiniMax, "Let's call a tool:\n</think>\n\n<minimax:tool_call>\n<invoke name=\"empty_args\">\n</invoke>\n</minimax:tool_call>", "Let's call a tool:\n</think>",
		[]Call{{"call_1", "empty_args", "{}"}}},
	{"minimax-m2 one call", MiniMax, "\n</think>\n\n<minimax:tool_call>\n<invoke name=\"special_function\">\n<parameter name=\"arg1\">1</parameter>\n</invoke>\n</minimax:tool_call>", "\n</think>",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},

	{"seed-oss one call", SeedOSS, "<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n</seed:tool_call>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"seed-oss two calls", SeedOSS, "<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>1</parameter>\n<parameter=arg2>2</parameter>\n</function>\n</seed:tool_call>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}, {"call_2", "special_function_with_opt", `{"arg1": 1, "arg2": 2}`}}},
	{"seed-oss array of objects", SeedOSS, "<seed:tool_call>\n<function=todo_list>\n<parameter=todos>[{\"item\": \"Check stuff\", \"selected\": false}, {\"item\": \"Prepare stuff\", \"selected\": true}]</parameter>\n</function>\n</seed:tool_call>", "",
		[]Call{{"call_1", "todo_list", `{"todos": [{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]}`}}},
	{"seed-oss quotes and trailing newlines", SeedOSS, "<seed:tool_call>\n<function=edit>\n<parameter=filename>foo.cpp</parameter>\n<parameter=oldString>def foo(arg = \"14\"):\n    return arg + \"bar\"\n</parameter>\n<parameter=newString>def foo(arg = \"15\"):\n    pass\n</parameter>\n</function>\n</seed:tool_call>", "",
		[]Call{{"call_1", "edit", "{\"filename\": \"foo.cpp\", \"oldString\": \"def foo(arg = \\\"14\\\"):\\n    return arg + \\\"bar\\\"\\n\", \"newString\": \"def foo(arg = \\\"15\\\"):\\n    pass\\n\"}"}}},

	{"deepseek-v3.2 string parameter", DeepSeekDSML, "Let me check the time</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_time\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Tokyo</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", "Let me check the time</think>",
		[]Call{{"call_1", "get_time", `{"city": "Tokyo"}`}}},
	{"deepseek-v3.2 integer parameter", DeepSeekDSML, "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"special_function\">\n<｜DSML｜parameter name=\"arg1\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"deepseek-v3.2 two calls", DeepSeekDSML, "Calling both</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_time\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", "Calling both</think>",
		[]Call{{"call_1", "get_time", `{"city": "Paris"}`}, {"call_2", "get_weather", `{"city": "Paris"}`}}},

	// JSON arguments: llama.cpp gives them compacted, rill as written.
	{"kimi-k2 one call", KimiK2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin|>{\"arg1\": 1}<|tool_call_end|><|tool_calls_section_end|>", "",
		[]Call{{"functions.special_function:0", "special_function", `{"arg1": 1}`}}},
	{"deepseek-v3.1 one call", DeepSeekV31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"XYZCITY\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "",
		[]Call{{"call_1", "get_time", `{"city": "XYZCITY"}`}}},
	{"deepseek-v3.1 after reasoning", DeepSeekV31, "REASONING</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "REASONING</think>",
		[]Call{{"call_1", "get_time", `{"city": "Tokyo"}`}}},
	{"deepseek-v3.1 content and two calls", DeepSeekV31, "REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "REASONING</think>CONTENT",
		[]Call{{"call_1", "get_time", `{"city": "Paris"}`}, {"call_2", "get_weather", `{"city": "Paris"}`}}},
	// llama.cpp keeps Command R7B's tool_call_id ("0") as the id; rill
	// makes its own, since the model restarts the numbering every turn.
	{"command-r7b after thinking", CommandR7B, "<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"special_function\", \"parameters\": {\"arg1\": 1}}\n]<|END_ACTION|>", "<|START_THINKING|><|END_THINKING|>",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"firefunction-v2 one call", Firefunction, " functools[{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}]", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"functionary-v3.2 content", FunctionaryV32, "all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", nil},
	{"functionary-v3.2 one call", FunctionaryV32, "special_function\n{\"arg1\": 1}", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
	{"functionary-v3.1 one call", FunctionaryV31, "<function=special_function>{\"arg1\": 1}</function>", "",
		[]Call{{"call_1", "special_function", `{"arg1": 1}`}}},
}

func TestLlamaCppExpectations(t *testing.T) {
	t.Parallel()
	var names []string
	for n := range llamaCppTools {
		names = append(names, n)
	}
	for _, c := range llamaCppCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := Options{Tools: names, Parameters: llamaCppTools}
			content, calls := Parse(c.format, c.text, Options{Tools: names, Parameters: llamaCppTools, NewID: counterIDs()})
			if content != c.content || !reflect.DeepEqual(calls, c.calls) {
				t.Fatalf("got %q %+v\nwant %q %+v", content, calls, c.content, c.calls)
			}
			checkSplitsOpts(t, c.format, c.text, opts)
		})
	}
}

func TestPyLiteralJSON(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"True":                               `true`,
		"None":                               `null`,
		"['src/', 'lib/']":                   `["src/", "lib/"]`,
		"{'regex': False, 'limit': 10}":      `{"regex": false, "limit": 10}`,
		`{"a": (1, 2.5,), 'b': 'it\'s "x"'}`: `{"a": [1, 2.5], "b": "it's \"x\""}`,
		"[1e3, -2, +3]":                      `[1e3, -2, 3]`,
		"'\\u00e9\\n'":                       `"é\n"`,
	} {
		got, ok := pyLiteralJSON(in)
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "hello", "[1, 2", "{'a' 1}", "Truex", "{1: 2}", "'abc"} {
		if got, ok := pyLiteralJSON(in); ok {
			t.Errorf("%s: %q, want no literal", in, got)
		}
	}
}

// BenchmarkXMLLongArgument feeds a call writing a 100 KB file, 4 bytes at
// a time: the open string value is escaped once, not at every feed.
func BenchmarkXMLLongArgument(b *testing.B) {
	body := strings.Repeat("func f(a, b int) bool { return a < b }\n", 2500)
	text := "<tool_call>\n<function=write>\n<parameter=content>\n" + body + "\n</parameter>\n</function>\n</tool_call>"
	for b.Loop() {
		p := NewParser(QwenXML, Options{})
		for i := 0; i < len(text); i += 4 {
			p.Feed(text[i:min(i+4, len(text))])
		}
		p.Flush()
	}
}
