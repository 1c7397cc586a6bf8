package native

import (
	"strings"
	"testing"

	"rill/engine"
)

// TestDeveloperMessageIsSystem: on Qwen 3, whose template drops developer
// messages, one (Codex sends its instructions so) reaches the prompt as a
// system message, as llama.cpp maps it for every template but gpt-oss's
// (chat.Template.Adapt).
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
