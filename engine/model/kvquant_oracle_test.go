package model_test

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"

	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// kvQuantModels are the test models the quantised-cache oracles were
// recorded on: heads of 32 values (one block), plain attention (qwen3),
// windows and soft-capped scores (gemma2), and windows with sinks
// (gpt-oss).
var kvQuantModels = map[string]testmodel.Spec{
	"rill-tiny-qwen3-F32.gguf":   testmodel.Qwen3(quant.F32),
	"rill-tiny-gemma2-F32.gguf":  testmodel.Gemma2(quant.F32),
	"rill-tiny-gpt-oss-F32.gguf": testmodel.GptOss(quant.F32),
}

// kvQuantOracles are llama.cpp's greedy decodings of kvQuantModels over
// a Q8_0 and a Q4_0 cache (node-llama-cpp 3.21.1, scripts/peer/oracle.mjs
// --flash-attn on --kv Q8_0 or Q4_0: llama.cpp needs flash attention for a
// quantised V cache), against rill's cache of the same type. Measured when
// recorded: medians 8e-7 to 1e-4, largest 3.8e-3 (gemma2, whose
// soft-capped logits move most). The bound tells the types apart: rill's
// F16 cache misses the Q8_0 oracle (medians 1.3e-3 to 3.4e-3) and its Q8_0
// cache the Q4_0 one (medians 2.6e-2 to 4.3e-2).
var kvQuantOracles = []struct {
	name, path string
	kv         model.KVType
	tol        tolerance
}{
	{"q8_0", "testdata/llamacpp_kvq8_0_greedy_top5.json", model.KVQ8_0, tolerance{5e-4, 5e-3}},
	{"q4_0", "testdata/llamacpp_kvq4_0_greedy_top5.json", model.KVQ4_0, tolerance{5e-4, 5e-3}},
}

// TestOracleKVQuant: over a Q8_0 or Q4_0 KV cache rill decodes llama.cpp's
// tokens (run with the same cache type) with top-5 log-probabilities
// within the bounds kvQuantOracles gives.
func TestOracleKVQuant(t *testing.T) {
	t.Parallel()
	for _, o := range kvQuantOracles {
		t.Run(o.name, func(t *testing.T) {
			raw, err := os.ReadFile(o.path)
			if err != nil {
				t.Fatal(err)
			}
			var files struct {
				ModelFiles map[string]struct {
					SHA256 string `json:"sha256"`
				} `json:"model_files"`
				Settings map[string]struct {
					K string `json:"kv_cache_type_k"`
					V string `json:"kv_cache_type_v"`
				} `json:"settings"`
			}
			if err := json.Unmarshal(raw, &files); err != nil {
				t.Fatal(err)
			}
			if got, want := slices.Sorted(maps.Keys(files.ModelFiles)), slices.Sorted(maps.Keys(kvQuantModels)); !slices.Equal(got, want) {
				t.Fatalf("%s covers %v, want %v", o.path, got, want)
			}
			for file, s := range files.Settings {
				if s.K != o.kv.String() || s.V != o.kv.String() {
					t.Fatalf("%s: %s was recorded over a cache of %s keys and %s values", o.path, file, s.K, s.V)
				}
			}
			checkOracleKV(t, openArchModel(kvQuantModels, files.ModelFiles), o.path, o.tol, o.kv)
		})
	}
}
