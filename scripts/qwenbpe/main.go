// Command qwenbpe writes the tiny test model with a real byte-level BPE
// vocabulary (engine/testmodel.QwenBPE: random weights, Qwen 3's tokenizer
// made from llama.cpp's ggml-vocab-qwen2.gguf in ../shared) and a real chat
// template, so that llama.cpp can tokenise the very prompts rill does
// (scripts/peer/chatprompt.mjs).
//
//	go run ./scripts/qwenbpe -out /tmp/qwen3-bpe.gguf
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"rill/engine/testmodel"
)

func main() {
	shared := flag.String("shared", "../shared", "the reference folder")
	template := flag.String("template", "refdata/chat-templates/llamacpp-node-bundle/Qwen-Qwen3-0.6B.jinja", "chat template, relative to -shared")
	out := flag.String("out", "", "output file (required)")
	flag.Parse()
	if err := run(*shared, *template, *out); err != nil {
		fmt.Fprintln(os.Stderr, "qwenbpe:", err)
		os.Exit(1)
	}
}

func run(shared, template, out string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	src, err := os.ReadFile(filepath.Join(shared, template))
	if err != nil {
		return err
	}
	v, err := testmodel.Qwen3Vocabulary(filepath.Join(shared, "models/vocab/ggml-vocab-qwen2.gguf"), string(src))
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := testmodel.WriteWithVocabulary(f, testmodel.QwenBPE(), v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
