package testmodel

import "fmt"

// harmonyTokens are the special tokens of gpt-oss's o200k_harmony
// vocabulary that its output format uses.
var harmonyTokens = []string{"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|return|>", "<|call|>"}

// HarmonyVocabulary is Qwen3Vocabulary with gpt-oss's harmony tokens
// (<|start|>, <|channel|>, <|message|>, <|end|>, <|constrain|>,
// <|return|>, <|call|>) over the padding after Qwen 3's added tokens, all
// CONTROL as in gpt-oss's GGUF files, and EOS <|return|>: a stand-in for
// o200k_harmony, which has no vocabulary file in ../shared, for tests of
// the harmony format with a real byte-level BPE.
func HarmonyVocabulary(qwen2VocabPath, chatTemplate string) (*Vocabulary, error) {
	v, err := Qwen3Vocabulary(qwen2VocabPath, chatTemplate)
	if err != nil {
		return nil, err
	}
	tokens, ok := v.values["tokenizer.ggml.tokens"].([]string)
	types, ok2 := v.values["tokenizer.ggml.token_type"].([]int32)
	first := qwen3FirstAdded + len(qwen3AddedTokens)
	if !ok || !ok2 || len(tokens) < first+len(harmonyTokens) {
		return nil, fmt.Errorf("%s has no room for the harmony tokens", qwen2VocabPath)
	}
	const typeControl = 3
	for i, text := range harmonyTokens {
		tokens[first+i] = text
		types[first+i] = typeControl
	}
	v.Set("tokenizer.ggml.tokens", tokens)
	v.Set("tokenizer.ggml.token_type", types)
	v.Set("tokenizer.ggml.eos_token_id", uint32(first+5))
	return v, nil
}
