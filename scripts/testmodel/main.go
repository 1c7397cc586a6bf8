// Command testmodel writes one of rill's deterministic test models as a GGUF
// file, so that other engines (llama.cpp, node-llama-cpp) can run the very
// same weights in a side-by-side benchmark.
//
//	go run ./scripts/testmodel -model bench -type Q8_0 -out /tmp/bench-q8_0.gguf
package main

import (
	"flag"
	"fmt"
	"os"

	"rill/engine/quant"
	"rill/engine/testmodel"
)

func main() {
	which := flag.String("model", "target", "target, draft, qwen2, qwen3 or bench (245M parameters)")
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
	var s testmodel.Spec
	switch which {
	case "target":
		s = testmodel.Target(t)
	case "draft":
		s = testmodel.Draft(t)
	case "qwen2":
		s = testmodel.Qwen2(t)
	case "qwen3":
		s = testmodel.Qwen3(t)
	case "bench":
		s = testmodel.Bench(t)
	default:
		return fmt.Errorf("-model %q: want target, draft, qwen2, qwen3 or bench", which)
	}
	return testmodel.WriteFile(out, s)
}
