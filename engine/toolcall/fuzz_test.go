package toolcall

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var fragments = []string{
	"<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[", "]",
	`{"name": "f", "arguments": {"a": 1}}`, `{"name": "g", "parameters": {}}`, `{"name": "h"`, `, "arguments": `,
	`{"tool_calls": [`, `{"content": "x\u00e9`, `"`, "}", "{", ",", ";", " ", "\n", "text", "é", "🙂", "<", "tool", `\`,
	`{"arguments": {"k": [true, null]}, "name": "f"}`, "f", "abc123XYZ", `"id": "i"`, "tru", "1e", "-", "\"\\u00",
	"<function=f>", "<function=get_weather>\n", "<parameter=city>\n", "<parameter=days>", "</parameter>", "\n</parameter>\n",
	"</function>", "</func", "<param", "3", "Paris\n", "{\"x\": [1]}",
	"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "get_weather", "city", "<minimax:tool_call>", "</minimax:tool_call>",
	`<invoke name="f">`, `<parameter name="city">`, "</invoke>", "<seed:tool_call>", "</seed:tool_call>",
	"<｜DSML｜function_calls>", "</｜DSML｜function_calls>", `<｜DSML｜invoke name="f">`, `<｜DSML｜parameter name="days" string="false">`,
	`<｜DSML｜parameter name="city" string="true">`, "</｜DSML｜parameter>", "</｜DSML｜invoke>",
	"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "functions.f:0", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
	"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<function=f>{}",
	"<|START_ACTION|>", "<|END_ACTION|>", `{"tool_call_id": "0", "tool_name": "f", "parameters": {}}`, "<|tool_call|>", " functools", "functools[", ">>>", "all\n", "f\n", ">>>all\n", ">>>f\n{\"a\": 1}",
}

// allFormats are the formats the random outputs are parsed in.
var allFormats = []Format{Hermes, Llama3, Mistral, MistralArgs, Generic, QwenXML, GLM, GLM47, MiniMax, SeedOSS, DeepSeekDSML, KimiK2, DeepSeekV31, FunctionaryV31, CommandR7B, Granite, Firefunction, FunctionaryV32}

// checkSplits asserts that every UTF-8 split of text, and rune-by-rune
// feeding, assemble to Parse's result with a well-formed delta stream.
func checkSplits(t *testing.T, f Format, text string) {
	t.Helper()
	checkSplitsOpts(t, f, text, Options{Parameters: testParams})
}

// checkSplitsOpts is checkSplits with the given tools and schemas.
func checkSplitsOpts(t *testing.T, f Format, text string, opts Options) {
	t.Helper()
	wantContent, wantCalls := Parse(f, text, Options{Tools: opts.Tools, Parameters: opts.Parameters, NewID: counterIDs()})
	var runes []string
	for _, r := range text {
		runes = append(runes, string(r))
	}
	splits := [][]string{runes}
	for i := 0; i <= len(text); i++ {
		if i == len(text) || utf8.RuneStart(text[i]) {
			splits = append(splits, []string{text[:i], text[i:]})
		}
	}
	for _, pieces := range splits {
		deltas := streamOpts(f, opts, pieces)
		checkShape(t, deltas)
		content, calls := Assemble(deltas)
		if content != wantContent || !reflect.DeepEqual(calls, wantCalls) {
			t.Fatalf("%s %q split as %q:\ngot  %q %+v\nwant %q %+v", f, text, pieces, content, calls, wantContent, wantCalls)
		}
	}
	// Nothing is lost: content plus calls account for every non-space
	// character of the text, unless some of it was call syntax.
	// (Generic's content envelope and Functionary v3.2's recipients are
	// syntax too.)
	if len(wantCalls) == 0 && strings.TrimSpace(wantContent) != strings.TrimSpace(text) && f != Generic && f != FunctionaryV32 {
		t.Fatalf("%s %q: no calls, but content %q is not the text", f, text, wantContent)
	}
}

func TestRandomOutputs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for range n {
		var sb strings.Builder
		for range 1 + rng.IntN(7) {
			sb.WriteString(fragments[rng.IntN(len(fragments))])
		}
		for _, f := range allFormats {
			checkSplits(t, f, sb.String())
		}
	}
}

func FuzzStreamingEqualsParse(f *testing.F) {
	for _, c := range parseCases {
		f.Add(string(c.format), c.text)
	}
	f.Fuzz(func(t *testing.T, format, text string) {
		fm := Format(format)
		if !fm.Valid() || !utf8.ValidString(text) || len(text) > 300 {
			return
		}
		checkSplits(t, fm, text)
	})
}
