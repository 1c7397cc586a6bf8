package native

import (
	"strings"
	"testing"

	"rill/engine"
	"rill/engine/chat"
)

// TestDeveloperRoleProbe: templates with a developer role of their own
// keep it; those that drop, refuse or merely print an unknown role do not.
func TestDeveloperRoleProbe(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		templateQwen3:                            false, // drops it
		"Qwen3-Coder.jinja":                      false, // prints any role
		"meta-llama-Llama-3.1-8B-Instruct.jinja": false, // prints any role
		"google-gemma-2-2b-it.jinja":             false, // refuses it
		"openai-gpt-oss-120b.jinja":              true,
		"deepseek-ai-DeepSeek-V3.2.jinja":        false, // names it, renders none
		"google-gemma-4-31B-it.jinja":            true,
	} {
		tmpl, err := chat.New(templateSource(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := probeTemplate(tmpl).developerRole; got != want {
			t.Errorf("%s: developer role %v, want %v", name, got, want)
		}
	}
}

// TestDeveloperMessageIsSystem: on Qwen 3, whose template drops developer
// messages, one (Codex sends its instructions so) reaches the prompt as a
// system message.
func TestDeveloperMessageIsSystem(t *testing.T) {
	t.Parallel()
	e := newQwenEngine(t, templateQwen3, Options{})
	text, _, err := e.renderChat(chatRender{msgs: []engine.Message{
		{Role: engine.RoleSystem, Content: "You are Codex."},
		{Role: engine.RoleDeveloper, Content: "Use the sandbox."},
		{Role: engine.RoleUser, Content: "Hi."},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>system\nUse the sandbox.<|im_end|>"; !strings.Contains(text, want) {
		t.Errorf("prompt %q does not hold %q", text, want)
	}
}
