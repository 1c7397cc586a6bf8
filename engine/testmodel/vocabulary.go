package testmodel

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"rill/engine/gguf"
	"rill/engine/quant"
)

// Vocabulary is a real tokenizer for a test model, in place of the shared
// 512-token one: the tokenizer.* metadata of a GGUF file (tokens, types,
// merges, special ids, chat template), in file order.
type Vocabulary struct {
	keys   []string
	values map[string]any // a gguf.Value, or a Go value gguf.Writer.Set takes
}

// VocabularyFromGGUF reads the tokenizer.* keys of a GGUF file, such as
// llama.cpp's vocab-only files in ../shared/models/vocab.
func VocabularyFromGGUF(path string) (*Vocabulary, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v := &Vocabulary{values: map[string]any{}}
	for _, k := range f.Metadata.Keys() {
		if strings.HasPrefix(k, "tokenizer.") {
			val, _ := f.Metadata.Value(k)
			v.Set(k, val)
		}
	}
	if _, ok := v.values["tokenizer.ggml.tokens"]; !ok {
		return nil, fmt.Errorf("%s has no tokenizer.ggml.tokens", path)
	}
	return v, nil
}

// Set sets a tokenizer key (a value gguf.Writer.Set takes); a new key goes
// last.
func (v *Vocabulary) Set(key string, value any) {
	if _, ok := v.values[key]; !ok {
		v.keys = append(v.keys, key)
	}
	v.values[key] = value
}

// Clone returns a copy of v whose keys can be set apart from v's (the
// values themselves are shared and never modified).
func (v *Vocabulary) Clone() *Vocabulary {
	c := &Vocabulary{keys: slices.Clone(v.keys), values: make(map[string]any, len(v.values))}
	maps.Copy(c.values, v.values)
	return c
}

// size is the number of tokens.
func (v *Vocabulary) size() (int, error) {
	switch t := v.values["tokenizer.ggml.tokens"].(type) {
	case gguf.Value:
		return t.Len(), nil
	case []string:
		return len(t), nil
	}
	return 0, fmt.Errorf("vocabulary has no tokenizer.ggml.tokens")
}

// qwen3AddedTokens are the tokens Qwen 3 adds after Qwen 2's byte-level
// BPE vocabulary of 151,643 tokens, from id 151643 on, and whether Hugging
// Face marks them special (Qwen3's tokenizer_config.json,
// added_tokens_decoder). Qwen 2.5 has the same up to </tool_response>;
// <think> and </think> are Qwen 3's.
var qwen3AddedTokens = []struct {
	text    string
	special bool
}{
	{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true},
	{"<|object_ref_start|>", true}, {"<|object_ref_end|>", true},
	{"<|box_start|>", true}, {"<|box_end|>", true},
	{"<|quad_start|>", true}, {"<|quad_end|>", true},
	{"<|vision_start|>", true}, {"<|vision_end|>", true},
	{"<|vision_pad|>", true}, {"<|image_pad|>", true}, {"<|video_pad|>", true},
	{"<tool_call>", false}, {"</tool_call>", false},
	{"<|fim_prefix|>", false}, {"<|fim_middle|>", false}, {"<|fim_suffix|>", false},
	{"<|fim_pad|>", false}, {"<|repo_name|>", false}, {"<|file_sep|>", false},
	{"<tool_response>", false}, {"</tool_response>", false},
	{"<think>", false}, {"</think>", false},
}

// qwen3FirstAdded is the id of Qwen 3's first added token, <|endoftext|>.
const qwen3FirstAdded = 151643

// Qwen3Vocabulary turns Qwen 2's vocabulary (llama.cpp's
// ggml-vocab-qwen2.gguf: Qwen 2's tokens and merges, which Qwen 3 shares
// unchanged, then padding tokens up to 151,936) into Qwen 3's: its added
// tokens over the padding from id 151643, typed as llama.cpp's converter
// types them (CONTROL when Hugging Face marks them special or they look
// like "<|...|>", else USER_DEFINED, so <think> matches in any text), EOS
// <|im_end|>, no BOS added, and chatTemplate.
func Qwen3Vocabulary(qwen2VocabPath, chatTemplate string) (*Vocabulary, error) {
	f, err := gguf.Open(qwen2VocabPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tokens, ok := f.Metadata.Strings("tokenizer.ggml.tokens")
	types, ok2 := f.Metadata.Int32s("tokenizer.ggml.token_type")
	if !ok || !ok2 || len(tokens) != len(types) || len(tokens) < qwen3FirstAdded+len(qwen3AddedTokens) {
		return nil, fmt.Errorf("%s is not Qwen 2's vocabulary", qwen2VocabPath)
	}
	if tokens[qwen3FirstAdded] != "<|endoftext|>" || tokens[qwen3FirstAdded-1] == "" {
		return nil, fmt.Errorf("%s is not Qwen 2's vocabulary (token %d is %q)", qwen2VocabPath, qwen3FirstAdded, tokens[qwen3FirstAdded])
	}
	v, err := VocabularyFromGGUF(qwen2VocabPath)
	if err != nil {
		return nil, err
	}
	const (
		typeControl     = 3
		typeUserDefined = 4
	)
	for i, at := range qwen3AddedTokens {
		id := qwen3FirstAdded + i
		tokens[id] = at.text
		types[id] = typeUserDefined
		if at.special || strings.HasPrefix(at.text, "<|") && strings.HasSuffix(at.text, "|>") {
			types[id] = typeControl
		}
	}
	v.Set("tokenizer.ggml.tokens", tokens)
	v.Set("tokenizer.ggml.token_type", types)
	v.Set("tokenizer.ggml.bos_token_id", uint32(qwen3FirstAdded))
	v.Set("tokenizer.ggml.eos_token_id", uint32(qwen3FirstAdded+2))
	v.Set("tokenizer.ggml.padding_token_id", uint32(qwen3FirstAdded))
	v.Set("tokenizer.ggml.add_bos_token", false)
	v.Set("tokenizer.chat_template", chatTemplate)
	return v, nil
}

// QwenBPE is a tiny qwen3 model for a real byte-level BPE vocabulary of
// about 152k tokens (WriteWithVocabulary): width 32 in Q8_0, so that the
// token embedding, which is also the output projection, takes about 5 MB.
func QwenBPE() Spec {
	return Spec{Name: "rill-tiny-qwen3-bpe", Arch: "qwen3", Embd: 32, Layers: 2, Heads: 2, KV: 1, HeadDim: 16,
		FF: 96, Context: 4096, Type: quant.Q8_0, Seed: 21}
}

// WriteWithVocabulary writes s with vocabulary v instead of the shared
// one: the layers Write gives s, a random token embedding with one row per
// token of v that is also the output projection (tied, as llama.cpp and
// rill read a model without output.weight), and v's tokenizer metadata.
// The weights being random, the model proves tokenisation, templating and
// the pipes, not the prose.
func WriteWithVocabulary(w io.Writer, s Spec, v *Vocabulary) error {
	n, err := v.size()
	if err != nil {
		return err
	}
	base, err := Bytes(s)
	if err != nil {
		return err
	}
	f, err := gguf.Parse(base)
	if err != nil {
		return err
	}
	gw := gguf.NewWriter()
	for _, k := range f.Metadata.Keys() {
		if strings.HasPrefix(k, "tokenizer.") {
			continue
		}
		val, _ := f.Metadata.Value(k)
		if err := gw.Set(k, val); err != nil {
			return err
		}
	}
	for _, k := range v.keys {
		if err := gw.Set(k, v.values[k]); err != nil {
			return fmt.Errorf("vocabulary key %s: %w", k, err)
		}
	}
	embd := gaussian(s.Seed, "token_embd.weight", n*s.Embd, 1)
	if err := addMatrix(gw, "token_embd.weight", s.Type, n, s.Embd, embd); err != nil {
		return err
	}
	for _, ti := range f.Tensors {
		if ti.Name == "token_embd.weight" || ti.Name == "output.weight" {
			continue
		}
		t, _ := f.Tensor(ti.Name)
		if err := gw.AddTensor(ti.Name, ti.Type, ti.Shape, t.Data); err != nil {
			return err
		}
	}
	_, err = gw.WriteTo(w)
	return err
}

// BytesWithVocabulary returns the GGUF file WriteWithVocabulary writes.
func BytesWithVocabulary(s Spec, v *Vocabulary) ([]byte, error) {
	var b bytes.Buffer
	if err := WriteWithVocabulary(&b, s, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
