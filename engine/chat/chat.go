// Package chat turns chat messages into a prompt string with a model's chat
// template.
package chat

import (
	"fmt"
	"strings"

	"rill/engine"
)

// Template renders messages for one model. It is immutable and safe for
// concurrent use.
type Template struct {
	name   string
	render func(b *strings.Builder, msgs []engine.Message, addGen bool) error
}

// Fallback is the template used when a model has none: ChatML, as llama.cpp
// and vLLM fall back to. Each message becomes
// "<|im_start|>{role}\n{content}<|im_end|>\n", and the generation prompt is
// "<|im_start|>assistant\n".
const Fallback = "chatml"

// New returns the template for a model's tokenizer.chat_template source;
// an empty source gives the fallback.
func New(src string) (*Template, error) {
	if src == "" || strings.Contains(src, "<|im_start|>") {
		return &Template{name: Fallback, render: chatML}, nil
	}
	return nil, fmt.Errorf("chat template not recognised (supported: chatml)")
}

// Name says which template family renders.
func (t *Template) Name() string { return t.name }

// Render returns the prompt for msgs; with addGen it ends with the cue for
// the assistant's reply.
func (t *Template) Render(msgs []engine.Message, addGen bool) (string, error) {
	var b strings.Builder
	if err := t.render(&b, msgs, addGen); err != nil {
		return "", err
	}
	return b.String(), nil
}

func chatML(b *strings.Builder, msgs []engine.Message, addGen bool) error {
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(string(m.Role))
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString("<|im_end|>\n")
	}
	if addGen {
		b.WriteString("<|im_start|>assistant\n")
	}
	return nil
}
