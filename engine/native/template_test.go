package native

import (
	"errors"
	"strings"
	"testing"

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
	_, err := New(m, Options{Logger: discard, ChatTemplate: "{% for m in messages %}\n{{ m.content }\n{% endfor %}"})
	m.Close()
	var se *chat.SyntaxError
	if !errors.As(err, &se) || se.Line != 2 || !strings.Contains(err.Error(), "chat template") {
		t.Fatalf("error %v, want a chat template syntax error at line 2", err)
	}
}
