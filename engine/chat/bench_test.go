package chat

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"rill/engine"
)

// BenchmarkRender renders a 64-message conversation with Llama 3.1's
// template, one of the larger real templates.
func BenchmarkRender(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "templates", "llama3.1.jinja"))
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := NewWithOptions(string(src), Options{BOS: "<|begin_of_text|>", EOS: "<|eot_id|>"})
	if err != nil {
		b.Fatal(err)
	}
	msgs := []engine.Message{{Role: engine.RoleSystem, Content: "You are terse."}}
	for i := range 63 {
		role := engine.RoleUser
		if i%2 == 1 {
			role = engine.RoleAssistant
		}
		msgs = append(msgs, engine.Message{Role: role, Content: fmt.Sprintf("message %d with some ordinary text in it", i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(msgs, true); err != nil {
			b.Fatal(err)
		}
	}
}
