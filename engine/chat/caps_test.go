package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestCaps: the capability probes on small templates, one behaviour each.
func TestCaps(t *testing.T) {
	t.Parallel()
	// all is what a template that uses everything has.
	all := Caps{SystemRole: true, StringContent: true, Tools: true, ToolCalls: true, ParallelToolCalls: true, ObjectArguments: true}
	cases := []struct {
		name, src string
		want      Caps
	}{
		{"ChatML fallback", "", Caps{SystemRole: true, StringContent: true}},
		{"ignores system", "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}",
			Caps{StringContent: true}},
		{"refuses system", "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}",
			Caps{StringContent: true}},
		{"tests system content only", "{% if messages[0].content %}x{% endif %}",
			Caps{SystemRole: true, StringContent: true}},
		{"system through get and a variable", "{% for m in messages %}{% set c = m.get('content') %}{{ c }}{% endfor %}",
			Caps{SystemRole: true, StringContent: true}},
		{"system through get, printed at once", "{% for m in messages %}{{ m.get('content') }}{% endfor %}",
			Caps{StringContent: true}},
		{"typed only", "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
			Caps{SystemRole: true, TypedContent: true}},
		{"typed by selectattr", "{% for m in messages %}{{ (m.content | selectattr('type', 'equalto', 'text') | first).text }}{% endfor %}",
			Caps{SystemRole: true, TypedContent: true}},
		{"string or typed", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}",
			Caps{SystemRole: true, StringContent: true}},
		{"indexes string content", "{% for m in messages %}{{ m.content }}{{ m.content[0] }}{% endfor %}",
			Caps{SystemRole: true, StringContent: true, TypedContent: true}},
		{"tools and calls with tojson", "{{ tools | tojson }}{% for m in messages %}{{ m.content }}{% for c in m.tool_calls %}{{ c.function | tojson }}{% endfor %}{% endfor %}",
			all},
		{"calls printed as text", "{% for t in tools %}{{ t.function.name }}{% endfor %}{% for m in messages %}{{ m.content }}{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments }}{% endfor %}{% endfor %}",
			Caps{SystemRole: true, StringContent: true, Tools: true, ToolCalls: true, ParallelToolCalls: true}},
		{"arguments iterated", "{% for m in messages %}{{ m.content }}{% for c in m.tool_calls %}{% for k, v in c.function.arguments | items %}{{ k }}={{ v }}{% endfor %}{% endfor %}{% endfor %}",
			Caps{SystemRole: true, StringContent: true, ToolCalls: true, ParallelToolCalls: true, ObjectArguments: true}},
		{"first call only", "{% for m in messages %}{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}{% endfor %}",
			Caps{SystemRole: true, StringContent: true, ToolCalls: true, ObjectArguments: true}},
		{"calls through get", "{% for m in messages %}{{ m.content }}{% set calls = m.get('tool_calls') %}{% for c in calls or [] %}{{ c.function.arguments.arg }}{% endfor %}{% endfor %}",
			Caps{SystemRole: true, StringContent: true, ToolCalls: true, ParallelToolCalls: true, ObjectArguments: true}},
		// Only the keys of the arguments are used, so llama.cpp's probe
		// tries string arguments next, on which .items() fails: no tools.
		{"keys of object arguments only", "{% for m in messages %}{{ m.content }}{% for c in m.tool_calls %}{% for k, v in c.function.arguments.items() %}{{ k }}{% endfor %}{% endfor %}{% endfor %}",
			Caps{SystemRole: true, StringContent: true}},
	}
	for _, c := range cases {
		tmpl, err := New(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := tmpl.Caps(); got != c.want {
			t.Errorf("%s: caps\n %+v\nwant\n %+v", c.name, got, c.want)
		}
	}
}

// TestCapsRealTemplates: the system role of real templates (testdata):
// Phi-3-mini's ignores system messages, Gemma 2's refuses them, the
// others show them; the tool support of those that have it.
func TestCapsRealTemplates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file   string
		system bool
		calls  bool
	}{
		{"phi3.jinja", false, false},
		{"gemma2.jinja", false, false},
		{"chatml.jinja", true, false},
		{"llama2.jinja", true, false},
		{"llama3.1.jinja", true, true},
		{"mistral-v0.3.jinja", true, true},
		{"qwen2.5.jinja", true, true},
		{"zephyr.jinja", true, false},
		{"deepseek-r1-distill.jinja", true, true},
	}
	for _, c := range cases {
		src, err := os.ReadFile(filepath.Join("testdata", "templates", c.file))
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := New(string(src))
		if err != nil {
			t.Fatal(err)
		}
		caps := tmpl.Caps()
		if caps.SystemRole != c.system || caps.ToolCalls != c.calls || !caps.StringContent {
			t.Errorf("%s: %+v, want system role %v, tool calls %v, string content", c.file, caps, c.system, c.calls)
		}
	}
}

// TestAdapt: how a conversation is reshaped for each kind of template.
func TestAdapt(t *testing.T) {
	t.Parallel()
	const (
		shows      = "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
		noSystem   = "{% for m in messages %}{% if m.role != 'system' %}{{ m.role }}:{{ m.content }};{% endif %}{% endfor %}"
		channels   = "{% for m in messages %}<|channel|>{{ m.role }}:{{ m.content }};{% endfor %}"
		typedOnly  = "{% for m in messages %}{{ m.role }}:{% for p in m.content %}{{ p.text }}{% endfor %};{% endfor %}"
		argsAsText = "{% for m in messages %}{{ m.role }}:{{ m.content }}{% for c in m.tool_calls %}[{{ c.function.arguments }}]{% endfor %};{% endfor %}"
	)
	call := []ToolCall{{ID: "c1", Name: "f", Arguments: json.RawMessage(`{"a": 1}`)}}
	cases := []struct {
		name, src string
		msgs      []Message
		want      string
	}{
		{"system kept", shows, []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}}, "system:S;user:U;"},
		{"developer is system", shows, []Message{{Role: "developer", Content: "D"}, {Role: "user", Content: "U"}}, "system:D;user:U;"},
		{"developer kept with channels", channels, []Message{{Role: "developer", Content: "D"}}, "<|channel|>developer:D;"},
		{"system folded", noSystem, []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}, {Role: "assistant", Content: "A"}},
			"user:S\nU;assistant:A;"},
		{"developer folded", noSystem, []Message{{Role: "developer", Content: "D"}, {Role: "user", Content: "U"}}, "user:D\nU;"},
		{"later system folded", noSystem, []Message{{Role: "user", Content: "U"}, {Role: "assistant", Content: "A"}, {Role: "system", Content: "S"}, {Role: "user", Content: "V"}},
			"user:U;assistant:A;user:S\nV;"},
		{"two systems folded", noSystem, []Message{{Role: "system", Content: "S"}, {Role: "system", Content: "T"}, {Role: "user", Content: "U"}}, "user:S\nT\nU;"},
		{"lone system a user turn", noSystem, []Message{{Role: "system", Content: "S"}}, "user:S;"},
		{"into null content", noSystem, []Message{{Role: "system", Content: "S"}, {Role: "assistant", NullContent: true}}, "assistant:S\n;"},
		{"typed only", typedOnly, []Message{{Role: "user", Content: "U"}}, "user:U;"},
		{"arguments as text", argsAsText, []Message{{Role: "assistant", ToolCalls: call}}, `assistant:[{"a": 1}];`},
		{"no arguments as text", argsAsText, []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f"}}}}, `assistant:[];`},
	}
	for _, c := range cases {
		tmpl, err := New(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		conv := Conversation{Messages: c.msgs}
		before := cloneMessages(c.msgs)
		got, err := tmpl.RenderConversation(tmpl.Adapt(conv))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if !reflect.DeepEqual(c.msgs, before) {
			t.Errorf("%s: Adapt changed its input", c.name)
		}
	}
}

func cloneMessages(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		out[i].ToolCalls = append([]ToolCall(nil), m.ToolCalls...)
	}
	return out
}
