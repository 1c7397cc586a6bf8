package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"rill/engine/grammar"
)

// RegisterNativeFlags defines, on fs, the command-line flags of a native
// model that write into m: --model, --model-id (id), --ctx
// (context_length), --max-tokens-policy (max_tokens_policy), and a flag
// per key of m.Native with - for _ (--kv-cache-mem, --batch-tokens,
// --max-queued-requests, ...). m.Native must not be nil. CheckNativeFlags validates what they hold, with the same
// rules as a file's native section.
func (m *Model) RegisterNativeFlags(fs *flag.FlagSet) {
	n := m.Native
	if n.Model == "" {
		n.Model = Embedded
	}
	fs.StringVar(&n.Model, "model", n.Model, `GGUF model file, hf://ORG/REPO[:QUANT] for a GGUF on the Hugging Face Hub (downloaded into its cache), or "embedded" for the embedded test model`)
	fs.StringVar(&m.ID, "model-id", m.ID, "model name clients use (default: the file name without .gguf)")
	fs.IntVar(&m.ContextLength, "ctx", m.ContextLength, "context length in tokens (default: the model's)")
	fs.StringVar(&m.MaxTokensPolicy, "max-tokens-policy", m.MaxTokensPolicy, "what a max_tokens beyond what the context leaves after the prompt does: clamp (generate until the context is full, finish with length; the default, as llama.cpp and Ollama) or error (400 context_length_exceeded, as vLLM)")
	fs.Var(&n.KVCacheMem, "kv-cache-mem", "KV cache memory budget: bytes, or a size such as 256MiB (default: 4 full contexts, at most 1 GiB)")
	fs.IntVar(&n.BatchTokens, "batch-tokens", n.BatchTokens, "token budget of one forward pass (default 512)")
	fs.IntVar(&n.Threads, "threads", n.Threads, "CPU threads (default: GOMAXPROCS)")
	fs.StringVar(&n.DraftModel, "draft-model", n.DraftModel, `GGUF draft model for speculative decoding (same vocabulary as --model); "embedded" is the embedded test model's draft`)
	fs.StringVar(&n.Spec, "spec", n.Spec, `speculative decoding without a draft model: "ngram" (prompt lookup); requests' predicted outputs draft either way`)
	fs.IntVar(&n.DraftTokens, "draft-tokens", n.DraftTokens, fmt.Sprintf("most tokens drafted per step, 1 to %d (default 4)", MaxDraftTokens))
	fs.StringVar(&n.KVCacheType, "kv-cache-type", "f16", "KV cache element type: f16 (llama.cpp's numerics, half the memory), f32 (exact), or q8_0 or q4_0 (GGML blocks of 32 along the head, as llama.cpp's --cache-type-k/-v: 0.53 and 0.28 of f16's memory; the model's head size must be a multiple of 32)")
	fs.IntVar(&n.MaxSeqs, "max-seqs", n.MaxSeqs, "most sequences (choices) decoding at once (default 64)")
	fs.IntVar(&n.MaxQueuedRequests, "max-queued-requests", n.MaxQueuedRequests, "most requests waiting to start beyond the free decoding slots; more are refused with 503 engine_overloaded (default 256)")
	fs.StringVar(&n.JSONWhitespace, "json-whitespace", n.JSONWhitespace, fmt.Sprintf("whitespace between the JSON tokens of constrained output (response_format, tool-call arguments): compact (none, as OpenAI writes it; the default) or bounded (runs of up to %d bytes, for models that pretty-print)", grammar.BoundedWhitespace))
	fs.StringVar(&n.PromptCacheDir, "prompt-cache-dir", n.PromptCacheDir, "directory of the prompt cache's disk tier: KV blocks are saved there as they are computed and at shutdown, and read back by prompts that start the same way, after a restart too (default: none, the cache lives in memory only)")
	fs.Var(&n.PromptCacheSize, "prompt-cache-size", "size bound of --prompt-cache-dir: bytes, or a size such as 10GiB; the least recently used blocks go past it (default 10GiB)")
	fs.StringVar(&n.ChatTemplateFile, "chat-template-file", n.ChatTemplateFile, "Jinja chat template file that replaces the model's own (default: the GGUF's tokenizer.chat_template); the tool-call format and reasoning markers follow it")
}

// NativeFlagNames are the names of the flags RegisterNativeFlags defines,
// which a configuration file replaces.
func NativeFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	m := Model{Native: &Native{}}
	m.RegisterNativeFlags(fs)
	names := make(map[string]bool)
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// CheckNativeFlags validates a native model given by flags and reports
// every problem at once, each naming its flag.
func (m *Model) CheckNativeFlags() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if m.ContextLength < 0 {
		bad("--ctx must not be negative")
	}
	m.checkMaxTokensPolicy(bad, "--max-tokens-policy")
	m.Native.check(bad, flagName)
	return errors.Join(errs...)
}

// flagName names a native setting as its flag.
func flagName(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }
