// Command testmodel writes one of rill's deterministic test models as a GGUF
// file, so that other engines (llama.cpp, node-llama-cpp) can run the very
// same weights in a side-by-side benchmark.
//
//	go run ./scripts/testmodel -model bench -type Q8_0 -out /tmp/bench-q8_0.gguf
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"rill/engine/quant"
	"rill/engine/testmodel"
)

func main() {
	which := flag.String("model", "target", "target, draft, qwen2, qwen3, qwen3-embedding (qwen3 pooling last), qwen2moe, qwen3moe, gpt-oss, llama3, llama-linear, llama-yarn, mistral, phi3, gemma, gemma2, gemma3, bench (245M parameters), bench-moe (qwen3moe, 610M parameters, 105M active), bench-llama3.2-1b or bench-qwen3-1.7b (those models' shapes and vocabulary sizes)")
	typ := flag.String("type", "F32", "weight type: F32, F16, BF16, Q8_0 or Q4_0")
	out := flag.String("out", "", "output file (required)")
	flag.Parse()
	if err := run(*which, *typ, *out); err != nil {
		fmt.Fprintln(os.Stderr, "testmodel:", err)
		os.Exit(1)
	}
}

func run(which, typ, out string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	t, err := quant.ParseType(typ)
	if err != nil {
		return err
	}
	specs := map[string]func(quant.Type) testmodel.Spec{
		"target": testmodel.Target, "draft": testmodel.Draft, "bench": testmodel.Bench,
		"qwen2": testmodel.Qwen2, "qwen3": testmodel.Qwen3, "qwen3-embedding": testmodel.Qwen3Embedding,
		"qwen2moe": testmodel.Qwen2MoE, "qwen3moe": testmodel.Qwen3MoE, "gpt-oss": testmodel.GptOss, "bench-moe": testmodel.BenchMoE,
		"llama3": testmodel.Llama3, "llama-linear": testmodel.LlamaLinear, "llama-yarn": testmodel.LlamaYaRN,
		"mistral": testmodel.Mistral, "phi3": testmodel.Phi3,
		"gemma": testmodel.Gemma, "gemma2": testmodel.Gemma2, "gemma3": testmodel.Gemma3,
		"bench-llama3.2-1b": testmodel.BenchLlama32, "bench-qwen3-1.7b": testmodel.BenchQwen3,
	}
	spec, ok := specs[which]
	if !ok {
		return fmt.Errorf("-model %q: want one of %s", which, strings.Join(slices.Sorted(maps.Keys(specs)), ", "))
	}
	s := spec(t)
	return testmodel.WriteFile(out, s)
}
