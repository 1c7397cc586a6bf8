// Package chat turns chat messages into a prompt string with a model's chat
// template: the Jinja source Hugging Face models carry in
// tokenizer.chat_template, run by a small sandboxed interpreter of the Jinja
// subset chat templates use.
//
// Rendering follows Hugging Face's apply_chat_template, which renders with
// jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True) plus the loopcontrols extension, a raise_exception
// global, a tojson filter without HTML escaping and a strftime_now global.
// The variables a template sees are messages (a list of dicts with role,
// content, and reasoning_content, name, tool_calls and tool_call_id when
// set), add_generation_prompt, bos_token, eos_token, tools and documents
// (None unless the Conversation has them; undefined with AbsentUndefined,
// as llama.cpp's server leaves them) and the Conversation's further
// variables (chat_template_kwargs such as enable_thinking). The output
// matches jinja2's byte for byte on the templates in testdata (see
// scripts/chat/golden.py) and on the real templates in ../shared (see
// scripts/chat/refgolden.py).
//
// The interpreter is safe for untrusted templates: nothing outside the
// template's own values is reachable, values cannot be mutated except
// namespace attributes, and every render is bounded in steps, macro
// recursion and output size, so a template can fail but not hang.
package chat

import (
	"strings"
	"time"

	"rill/engine"
)

// Fallback is the name of the template used when a model has none: ChatML,
// as llama.cpp and vLLM fall back to. Each message becomes
// "<|im_start|>{role}\n{content}<|im_end|>\n", and the generation prompt is
// "<|im_start|>assistant\n".
const Fallback = "chatml"

// fallbackSource is the ChatML template in Jinja.
const fallbackSource = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// Default limits of a render.
const (
	DefaultMaxSteps  = 5_000_000
	DefaultMaxDepth  = 64
	DefaultMaxOutput = 64 << 20
)

// Options configure a Template. The zero value is usable.
type Options struct {
	// BOS and EOS are the texts of the model's special tokens, which
	// templates reference as bos_token and eos_token. Empty when the model
	// has none.
	BOS, EOS string
	// Now is the clock of strftime_now; nil means time.Now.
	Now func() time.Time
	// MaxSteps bounds the work of one render (statements, expression
	// evaluations, and bytes built / 64); 0 means DefaultMaxSteps.
	MaxSteps int
	// MaxDepth bounds nested macro calls; 0 means DefaultMaxDepth.
	MaxDepth int
	// MaxOutput bounds the rendered prompt and any string or list built
	// while rendering, in bytes (items for lists); 0 means DefaultMaxOutput.
	MaxOutput int
}

// Template renders messages for one model. It is immutable and safe for
// concurrent use.
type Template struct {
	name string
	src  *source
	body []stmt
	opts Options
	caps Caps
}

// New returns the template for a model's tokenizer.chat_template source
// with no special tokens; an empty source gives the Fallback template. A
// source that does not parse gives a *SyntaxError with its line and column.
func New(src string) (*Template, error) { return NewWithOptions(src, Options{}) }

// NewWithOptions is New with the model's special tokens, clock and limits.
func NewWithOptions(src string, o Options) (*Template, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = DefaultMaxSteps
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	name := family(src)
	if strings.TrimSpace(src) == "" {
		src, name = fallbackSource, Fallback
	}
	s := newSource(src)
	body, err := parse(s)
	if err != nil {
		return nil, err
	}
	t := &Template{name: name, src: s, body: body, opts: o}
	t.caps = t.probeCaps()
	return t, nil
}

// families name a template by a marker its source contains, most specific
// first. The name is informational (logs, metrics); rendering never uses it.
var families = []struct{ marker, name string }{
	{"<|start_header_id|>", "llama3"},
	{"<<SYS>>", "llama2"},
	{"[INST]", "mistral"},
	{"<start_of_turn>", "gemma"},
	{"<｜User｜>", "deepseek"},
	{"### Instruction", "deepseek-coder"},
	{"<|im_start|>", "chatml"},
	{"<|end|>", "phi3"},
	{"<|user|>", "zephyr"},
}

func family(src string) string {
	for _, f := range families {
		if strings.Contains(src, f.marker) {
			return f.name
		}
	}
	return "jinja"
}

// Name says which template family renders: Fallback for a model without a
// template, a family guessed from the source (llama3, llama2, mistral,
// gemma, deepseek, deepseek-coder, chatml, phi3, zephyr), or "jinja".
func (t *Template) Name() string { return t.name }

// Render returns the prompt for msgs; with addGen it ends with the cue for
// the assistant's reply. A template that rejects the conversation (by
// raise_exception, such as roles that do not alternate) or fails gives a
// *RenderError. Each message is a dict of role, content, and name when set;
// tools and documents are None. RenderConversation renders the rest (tools,
// tool calls, reasoning, template kwargs).
func (t *Template) Render(msgs []engine.Message, addGen bool) (string, error) {
	c := Conversation{Messages: make([]Message, len(msgs)), AddGenerationPrompt: addGen}
	for i, m := range msgs {
		c.Messages[i] = Message{Role: string(m.Role), Content: m.Content, Name: m.Name}
	}
	return t.RenderConversation(c)
}

// execute renders the template with the given top-level variables.
func (t *Template) execute(vars map[string]value) (string, error) { return t.executeWith(vars, nil) }

// executeWith is execute noting, when use is not nil, what the template
// reads (see Caps).
func (t *Template) executeWith(vars map[string]value, use *reads) (string, error) {
	var out strings.Builder
	top := newScope(nil)
	for k, v := range vars {
		top.vars[k] = v
	}
	r := &renderer{t: t, out: &out, scope: top, maxSteps: t.opts.MaxSteps, now: t.opts.Now, reads: use}
	err := r.execBody(t.body)
	if err == errBreak || err == errContinue {
		err = &RenderError{Msg: "loop control outside of a loop"}
	}
	if err != nil {
		return "", err
	}
	return out.String(), nil
}
