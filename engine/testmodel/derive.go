package testmodel

import (
	"bytes"
	"fmt"
	"slices"

	"rill/engine/gguf"
)

// DeriveOptions says how DeriveVocab changes a vocabulary; the zero value
// copies it unchanged.
type DeriveOptions struct {
	// Pre replaces tokenizer.ggml.pre when set.
	Pre string
	// Harmony puts gpt-oss's o200k_harmony added tokens (HarmonyAddedTokens)
	// over the source's, from its first token "<|endoftext|>" on, typed
	// CONTROL as convert_hf_to_gguf types every "<|...|>" token, with
	// gpt-oss's special ids: BOS <|startoftext|>, EOS <|return|>, padding
	// <|endoftext|>. The chat template is dropped.
	Harmony bool
}

// HarmonyAddedTokens are the tokens o200k_harmony adds after o200k's BPE
// tokens, from id 199998 on, in order (openai/gpt-oss-20b's
// tokenizer.json; the reserved ones up to 201087 are left out).
var HarmonyAddedTokens = []string{
	"<|startoftext|>", "<|endoftext|>", "<|reserved_200000|>", "<|reserved_200001|>",
	"<|return|>", "<|constrain|>", "<|reserved_200004|>", "<|channel|>", "<|start|>",
	"<|end|>", "<|message|>", "<|reserved_200009|>", "<|reserved_200010|>",
	"<|reserved_200011|>", "<|call|>",
}

// DeriveVocab returns a vocab-only GGUF file made from the one at srcPath
// (one of llama.cpp's test vocabularies, such as
// ../shared/models/vocab/ggml-vocab-qwen2.gguf): every metadata key of the
// source in its order, changed as o says, and no tensors. It stands in for
// vocabularies that have no file in ../shared, such as o200k: llama.cpp
// loads it with vocab_only like the source, so recordings of llama.cpp on
// the same derived file check rill's reading of the changed keys.
func DeriveVocab(srcPath string, o DeriveOptions) ([]byte, error) {
	f, err := gguf.Open(srcPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	md := f.Metadata
	w := gguf.NewWriter()
	for _, k := range md.Keys() {
		if o.Harmony && k == "tokenizer.chat_template" {
			continue
		}
		v, _ := md.Value(k)
		if err := w.Set(k, v); err != nil {
			return nil, err
		}
	}
	if o.Pre != "" {
		if err := w.Set("tokenizer.ggml.pre", o.Pre); err != nil {
			return nil, err
		}
	}
	if o.Harmony {
		if err := setHarmony(w, md, srcPath); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// setHarmony writes the harmony tokens over the source's added tokens.
func setHarmony(w *gguf.Writer, md *gguf.Metadata, srcPath string) error {
	tokens, ok := md.Strings("tokenizer.ggml.tokens")
	types, ok2 := md.Int32s("tokenizer.ggml.token_type")
	first := slices.Index(tokens, "<|endoftext|>")
	if !ok || !ok2 || len(types) != len(tokens) || first < 0 || first+len(HarmonyAddedTokens) > len(tokens) {
		return fmt.Errorf("%s has no room for the harmony tokens after <|endoftext|>", srcPath)
	}
	const typeControl = 3
	for i, text := range HarmonyAddedTokens {
		tokens[first+i] = text
		types[first+i] = typeControl
	}
	for _, kv := range []struct {
		key string
		val any
	}{
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.bos_token_id", uint32(first + slices.Index(HarmonyAddedTokens, "<|startoftext|>"))},
		{"tokenizer.ggml.eos_token_id", uint32(first + slices.Index(HarmonyAddedTokens, "<|return|>"))},
		{"tokenizer.ggml.padding_token_id", uint32(first + slices.Index(HarmonyAddedTokens, "<|endoftext|>"))},
	} {
		if err := w.Set(kv.key, kv.val); err != nil {
			return err
		}
	}
	return nil
}
