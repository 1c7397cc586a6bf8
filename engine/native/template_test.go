package native

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/chat"
	"rill/engine/toolcall"
)

// templatePhi3 is Phi-3-mini-4k-instruct's chat template (its GGUF's
// tokenizer.chat_template): it has no system role and shows nothing of a
// system message.
const templatePhi3 = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}"

// templateHermes writes tools and calls the Hermes way (<tool_call>), like
// Qwen 2.5's, in a few lines.
const templateHermes = "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools>\n{% endif %}" +
	"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}" +
	"{% for c in m.tool_calls %}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}" +
	"<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"

// fourTurns is the chat of issue 22: system, user, assistant, user.
var fourTurns = []engine.Message{
	{Role: engine.RoleSystem, Content: "You are a pirate."},
	{Role: engine.RoleUser, Content: "Hello!"},
	{Role: engine.RoleAssistant, Content: "Arr, ahoy."},
	{Role: engine.RoleUser, Content: "Where is the treasure?"},
}

// TestSystemFoldedIntoFirstUserTurn: a template without a system role
// (Phi-3's) gets the system text at the start of the first user turn,
// joined by "\n", as llama.cpp's server folds it, instead of losing it;
// the prompt's token count is that text's. A developer message is a
// system message.
func TestSystemFoldedIntoFirstUserTurn(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{ChatTemplate: templatePhi3})
	want := "<|user|>\nYou are a pirate.\nHello!<|end|>\n<|assistant|>\nArr, ahoy.<|end|>\n<|user|>\nWhere is the treasure?<|end|>\n<|assistant|>\n"
	developer := slices.Clone(fourTurns)
	developer[0].Role = engine.RoleDeveloper
	for _, msgs := range [][]engine.Message{fourTurns, developer} {
		text, _, err := e.renderChat(chatRender{msgs: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if text != want {
			t.Errorf("%s message: prompt\n%q\nwant\n%q", msgs[0].Role, text, want)
		}
	}
	r := collect(t, e, &engine.Request{Model: e.Models()[0].ID, Messages: fourTurns, MaxTokens: 1})
	if got, n := r.final[0].Stats.PromptTokens, len(e.tok.Encode(want, encodeWithBOS)); got != n {
		t.Errorf("prompt_tokens %d, want %d", got, n)
	}
}

// TestChatTemplateOverride: Options.ChatTemplate replaces the model's
// template: the prompt is the new template's, and the tool-call format is
// detected from it.
func TestChatTemplateOverride(t *testing.T) {
	t.Parallel()
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "Hi"}}
	for _, tc := range []struct {
		name, template string
		prompt         string
		format         toolcall.Format
	}{
		{"model's own (ChatML)", "", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", toolcall.Generic},
		{"Phi-3", templatePhi3, "<|user|>\nHi<|end|>\n<|assistant|>\n", toolcall.Generic},
		{"Hermes", templateHermes, "<tools>get_weather</tools>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", toolcall.Hermes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEngine(t, Options{ChatTemplate: tc.template})
			if e.toolFormat != tc.format {
				t.Errorf("tool-call format %q, want %q", e.toolFormat, tc.format)
			}
			text, _, err := e.renderChat(chatRender{msgs: msgs, tools: testTools[:1]})
			if err != nil {
				t.Fatal(err)
			}
			if tc.format == toolcall.Generic {
				// A template without tool syntax gets the generic
				// format's instructions as a system message; render
				// without tools to see the template alone.
				text, _, err = e.renderChat(chatRender{msgs: msgs})
				if err != nil {
					t.Fatal(err)
				}
			}
			if text != tc.prompt {
				t.Errorf("prompt\n%q\nwant\n%q", text, tc.prompt)
			}
		})
	}
}

// TestChatTemplateOverrideReasoning: the reasoning markers follow the
// template that replaces the model's: Qwen 2.5's writes no <think>, Qwen
// 3's does.
func TestChatTemplateOverrideReasoning(t *testing.T) {
	t.Parallel()
	plain := newQwenEngine(t, "Qwen-Qwen2.5-7B-Instruct.jinja", Options{})
	if plain.think.reasons() {
		t.Fatal("Qwen 2.5's template: the model reasons")
	}
	over := newQwenEngine(t, "Qwen-Qwen2.5-7B-Instruct.jinja", Options{ChatTemplate: templateSource(t, templateQwen3)})
	if !over.think.reasons() {
		t.Fatal("Qwen 3's template in place of Qwen 2.5's: the model does not reason")
	}
}

// TestChatTemplateOverrideBroken: a replacement that does not parse stops
// New with the syntax error and its position.
func TestChatTemplateOverrideBroken(t *testing.T) {
	t.Parallel()
	m := withTemplate(t, "")
	_, err := New(m, testCompute(t), Options{Logger: discard, ChatTemplate: "{% for m in messages %}\n{{ m.content }\n{% endfor %}"})
	m.Close()
	var se *chat.SyntaxError
	if !errors.As(err, &se) || se.Line != 2 || !strings.Contains(err.Error(), "chat template") {
		t.Fatalf("error %v, want a chat template syntax error at line 2", err)
	}
}

// TestChatTemplateDate: templates see today's date as date_string and
// datetime, as llama.cpp's server gives them (Llama 3.1 prints it, or a
// fixed "26 Jul 2024" without it); a request's kwargs may set their own.
func TestChatTemplateDate(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, Options{ChatTemplate: "{{ date_string }}|{{ datetime }}"})
	e.now = func() time.Time { return time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC) }
	msgs := []engine.Message{{Role: engine.RoleUser, Content: "Hi"}}
	for _, tc := range []struct {
		kwargs map[string]any
		want   string
	}{
		{nil, "04 Dec 2026|Dec 04 2026"},
		{map[string]any{"date_string": "01 Jan 2025"}, "01 Jan 2025|Dec 04 2026"},
	} {
		text, _, err := e.renderChat(chatRender{msgs: msgs, kwargs: tc.kwargs})
		if err != nil {
			t.Fatal(err)
		}
		if text != tc.want {
			t.Errorf("kwargs %v: %q, want %q", tc.kwargs, text, tc.want)
		}
	}
}
