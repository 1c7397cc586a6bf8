package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"rill/engine"
)

// conversationOf turns a golden context into the public types, the way an
// API layer would build them from a request: messages, tools, the
// generation flag, special tokens as Options, every other key as a Vars
// entry.
func conversationOf(t *testing.T, raw json.RawMessage) (Conversation, Options) {
	t.Helper()
	var ctx map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ctx); err != nil {
		t.Fatal(err)
	}
	var c Conversation
	var o Options
	for k, v := range ctx {
		var err error
		switch k {
		case "messages":
			var msgs []struct {
				Role             string  `json:"role"`
				Content          *string `json:"content"`
				Name             string  `json:"name"`
				ReasoningContent string  `json:"reasoning_content"`
				ToolCallID       string  `json:"tool_call_id"`
				ToolCalls        []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct {
						Name      string          `json:"name"`
						Arguments json.RawMessage `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			}
			err = json.Unmarshal(v, &msgs)
			for _, m := range msgs {
				msg := Message{Role: m.Role, Name: m.Name, ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID}
				if m.Content == nil {
					msg.NullContent = true
				} else {
					msg.Content = *m.Content
				}
				for _, tc := range m.ToolCalls {
					msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
				}
				c.Messages = append(c.Messages, msg)
			}
		case "tools":
			c.Tools = v
		case "add_generation_prompt":
			err = json.Unmarshal(v, &c.AddGenerationPrompt)
		case "bos_token":
			err = json.Unmarshal(v, &o.BOS)
		case "eos_token":
			err = json.Unmarshal(v, &o.EOS)
		default:
			if c.Vars == nil {
				c.Vars = map[string]any{}
			}
			c.Vars[k] = v
		}
		if err != nil {
			t.Fatalf("context key %s: %v", k, err)
		}
	}
	return c, o
}

// TestRenderConversationRefdata renders the golden contexts through the
// public Conversation API and wants the same result as the raw variables
// (so the API builds messages, tool calls, tools and kwargs as the
// templates expect them).
func TestRenderConversationRefdata(t *testing.T) {
	t.Parallel()
	g, now := loadRefGolden(t)
	for _, c := range g.Cases {
		t.Run(c.Template+"/"+c.Context, func(t *testing.T) {
			t.Parallel()
			src := refTemplate(t, c.Template, g.Templates[c.Template])
			conv, opts := conversationOf(t, g.Contexts[c.Context])
			opts.Now = func() time.Time { return now }
			tmpl, err := NewWithOptions(src, opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.RenderConversation(conv)
			switch {
			case c.Output != nil:
				if err != nil {
					t.Fatalf("want output, got error %v", err)
				}
				if got != *c.Output {
					t.Fatalf("output differs from jinja2's\n got: %q\nwant: %q", got, *c.Output)
				}
			case c.Kind == "raise":
				var re *RenderError
				if !errors.As(err, &re) || !re.Raised || re.Msg != c.Error {
					t.Fatalf("want raise_exception(%q), got %q, %v", c.Error, got, err)
				}
			default:
				var re *RenderError
				if !errors.As(err, &re) {
					t.Fatalf("want a render error like jinja2's %s: %s; got %q, %v", c.Kind, c.Error, got, err)
				}
			}
		})
	}
}

func TestRenderConversationInput(t *testing.T) {
	t.Parallel()
	tmpl, err := New("{{ messages | tojson }}|{{ tools | tojson }}|{{ documents }}|{{ enable_thinking }}|{{ extra | tojson }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.RenderConversation(Conversation{
		Messages: []Message{
			{Role: "user", Content: "hi", Name: "bob"},
			{Role: "assistant", NullContent: true, ReasoningContent: "think", ToolCalls: []ToolCall{
				{ID: "c1", Name: "f", Arguments: json.RawMessage(`{"b": 1, "a": [true, null, 1.5]}`)},
				{Name: "g"},
			}},
			{Role: "tool", Content: "42", ToolCallID: "c1"},
			{Role: "user", ContentParts: json.RawMessage(`[{"type": "text", "text": "x"}]`)},
		},
		Tools: json.RawMessage(`[{"type": "function", "function": {"name": "f"}}]`),
		Vars:  map[string]any{"enable_thinking": false, "extra": map[string]any{"z": 1, "a": []any{"s", 2.5, int32(3)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role": "user", "content": "hi", "name": "bob"}, ` +
		`{"role": "assistant", "content": null, "reasoning_content": "think", "tool_calls": [` +
		`{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [true, null, 1.5]}}}, ` +
		`{"type": "function", "function": {"name": "g", "arguments": {}}}]}, ` +
		`{"role": "tool", "content": "42", "tool_call_id": "c1"}, ` +
		`{"role": "user", "content": [{"type": "text", "text": "x"}]}]` +
		`|[{"type": "function", "function": {"name": "f"}}]|None|False|{"a": ["s", 2.5, 3], "z": 1}`
	if got != want {
		t.Errorf("variables\n got: %s\nwant: %s", got, want)
	}
}

func TestRenderConversationRejects(t *testing.T) {
	t.Parallel()
	tmpl, err := New("{{ messages | length }}")
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("[", 600) + strings.Repeat("]", 600)
	cases := []struct {
		name string
		c    Conversation
		want string
	}{
		{"tools not JSON", Conversation{Tools: json.RawMessage(`[{`)}, "tools: invalid JSON"},
		{"two values", Conversation{Tools: json.RawMessage(`[] []`)}, "more than one value"},
		{"too deep", Conversation{Documents: json.RawMessage(deep)}, "nested deeper"},
		{"arguments not an object", Conversation{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`[{}]`)}}}}},
			"messages[0]: tool_calls[0]: arguments: not a JSON object or string"},
		{"arguments not JSON", Conversation{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{`)}}}}},
			"arguments: invalid JSON"},
		{"content parts not JSON", Conversation{Messages: []Message{{Role: "user", ContentParts: json.RawMessage(`x`)}}}, "content: invalid JSON"},
		{"reserved variable", Conversation{Vars: map[string]any{"messages": 1}}, `variable "messages" is set by the conversation`},
		{"builtin variable", Conversation{Vars: map[string]any{"raise_exception": 1}}, "would hide a template builtin"},
		{"unsupported type", Conversation{Vars: map[string]any{"x": struct{}{}}}, "unsupported type"},
		{"huge unsigned", Conversation{Vars: map[string]any{"x": uint64(1 << 63)}}, "too large"},
	}
	for _, c := range cases {
		_, err := tmpl.RenderConversation(c.c)
		var re *RenderError
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &re) {
			t.Errorf("%s: error %v, want a plain error containing %q", c.name, err, c.want)
		}
	}
}

// TestRenderMatchesConversation checks that Render is RenderConversation of
// role, content and name.
func TestRenderMatchesConversation(t *testing.T) {
	t.Parallel()
	tmpl, err := NewWithOptions("{{ bos_token }}{{ messages | tojson }}{{ tools }}{{ add_generation_prompt }}", Options{BOS: "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]engine.Message{{Role: engine.RoleUser, Content: "hi", Name: "n"}, {Role: engine.RoleAssistant, Content: ""}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `<s>[{"role": "user", "content": "hi", "name": "n"}, {"role": "assistant", "content": ""}]NoneTrue`
	if got != want {
		t.Errorf("Render = %s, want %s", got, want)
	}
}

// TestAbsentUndefined: without tools or documents, a template sees None
// (Hugging Face's way) or, with AbsentUndefined, nothing (llama.cpp's), so
// that a loop over tools renders nothing instead of failing.
func TestAbsentUndefined(t *testing.T) {
	t.Parallel()
	tmpl, err := New("{{ tools is defined }} {{ documents is none }} {% for t in tools %}{{ t.function.name }}{% endfor %}.")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		c       Conversation
		want    string
		wantErr bool
	}{
		{"None", Conversation{}, "", true},
		{"undefined", Conversation{AbsentUndefined: true}, "False False .", false},
		{"given", Conversation{AbsentUndefined: true, Tools: json.RawMessage(`[{"function": {"name": "f"}}]`)}, "True False f.", false},
	}
	for _, c := range cases {
		got, err := tmpl.RenderConversation(c.c)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("%s: %q, %v; want %q (error %v)", c.name, got, err, c.want, c.wantErr)
		}
	}
}
