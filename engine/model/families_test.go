package model_test

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// familyModels are the test models of the llama RoPE variants, phi3 and
// the Gemma family, by the file names the oracles were recorded on.
var familyModels = map[string]testmodel.Spec{
	"rill-tiny-llama3-F32.gguf":       testmodel.Llama3(quant.F32),
	"rill-tiny-llama-linear-F32.gguf": testmodel.LlamaLinear(quant.F32),
	"rill-tiny-llama-yarn-F32.gguf":   testmodel.LlamaYaRN(quant.F32),
	"rill-tiny-mistral-F32.gguf":      testmodel.Mistral(quant.F32),
	"rill-tiny-phi-F32.gguf":          testmodel.Phi3(quant.F32),
	"rill-tiny-gemma-F32.gguf":        testmodel.Gemma(quant.F32),
	"rill-tiny-gemma2-F32.gguf":       testmodel.Gemma2(quant.F32),
	"rill-tiny-gemma3-F32.gguf":       testmodel.Gemma3(quant.F32),
}

// familyOracles are llama.cpp's greedy decodings of familyModels
// (node-llama-cpp 3.21.1, scripts/peer/oracle.mjs on the F32 files
// scripts/testmodel writes, for the reason archOracle gives).
//
//   - families: llama.cpp as it runs by default (flash attention over an
//     F16 cache), against rill's F16 cache, within the bound of
//     TestOracleArchitectures. (Measured when recorded: medians 7e-6 to
//     6.4e-4, largest 1.8e-3, on gemma3, whose post-norms amplify the
//     chaos of half-precision value sums the most.)
//   - phi3 short: the phi3 model again with a context of 512, its original
//     context, where llama.cpp uses the short RoPE factors instead of the
//     long ones (rill's Runner is told each file's context).
//   - exact: flash attention off over an F32 cache, llama.cpp's float32
//     attention, against rill's F32 cache. Without half-precision sums the
//     two agree ten times closer (medians at most 1.3e-5, largest 2.5e-4
//     when recorded), a bound that would show errors the noise of the
//     first oracle could hide.
//   - moe, moe exact: the mixture-of-experts models (moeModels), the
//     same two ways, within the same bounds.
//   - gpt-oss, gpt-oss exact: the gpt-oss models (gptOssModels), the
//     same two ways (the F16 one on F32 experts only, for the reason
//     gptOssModels gives), with a prompt of 113 tokens besides the short
//     ones.
var familyOracles = []struct {
	name, path string
	models     []string // of specs
	kv         model.KVType
	tol        tolerance
	specs      map[string]testmodel.Spec // nil: familyModels
}{
	{"families", "testdata/llamacpp_families_greedy_top5.json", slices.Sorted(maps.Keys(familyModels)), model.KVF16, tolerance{1e-3, 5e-3}, nil},
	{"phi3 short", "testdata/llamacpp_phi3_short_greedy_top5.json", []string{"rill-tiny-phi-F32.gguf"}, model.KVF16, tolerance{1e-3, 5e-3}, nil},
	{"exact", "testdata/llamacpp_families_exact_greedy_top5.json", slices.Sorted(maps.Keys(familyModels)), model.KVF32, tolerance{1e-4, 1e-3}, nil},
	{"moe", "testdata/llamacpp_moe_greedy_top5.json", slices.Sorted(maps.Keys(moeModels)), model.KVF16, tolerance{1e-3, 5e-3}, moeModels},
	{"moe exact", "testdata/llamacpp_moe_exact_greedy_top5.json", slices.Sorted(maps.Keys(moeModels)), model.KVF32, tolerance{1e-4, 1e-3}, moeModels},
	{"gpt-oss", "testdata/llamacpp_gptoss_greedy_top5.json", []string{"rill-tiny-gpt-oss-F32.gguf"}, model.KVF16, tolerance{1e-3, 5e-3}, gptOssModels},
	{"gpt-oss exact", "testdata/llamacpp_gptoss_exact_greedy_top5.json", slices.Sorted(maps.Keys(gptOssModels)), model.KVF32, tolerance{1e-4, 1e-3}, gptOssModels},
	{"F16 weights", "testdata/llamacpp_f16_weights_greedy_top5.json", slices.Sorted(maps.Keys(f16Models)), model.KVF16, tolerance{3e-3, 1e-2}, f16Models},
	{"BF16 weights", "testdata/llamacpp_bf16_weights_greedy_top5.json", slices.Sorted(maps.Keys(bf16Models)), model.KVF16, bf16Tolerance, bf16Models},
}

// The F16 and BF16 weights oracles are llama.cpp's greedy decodings of
// f16Models and bf16Models (node-llama-cpp 3.21.1, scripts/peer/oracle.mjs
// with the families' prompts, on the files scripts/testmodel writes), run
// as the families oracle (F16 cache). Their bounds, from what was measured
// when they were recorded:
//
//   - F16 on float32 FMAs (activations rounded to F16, as llama.cpp does):
//     medians up to 1.5e-3, largest 5.5e-3; half-precision activations
//     make the results chaotic at about 2^-12.
//   - F16 on bf16 dot products (AVX512_BF16: weights and activations
//     rounded to bf16, see engine/backend/cpu/packedd_amd64.go): medians
//     up to 1.5e-2, largest 4.5e-2. That is the distance between
//     llama.cpp's own F16 and BF16 files of these models (medians 8.6e-3
//     to 1.6e-2, largest 4.5e-2, over the same prompts), which is what
//     rounding F16 weights to bf16 means: bf16DotTolerances.
//   - BF16, either way: llama.cpp rounds activations to bf16 as rill
//     does, but after summing in another order, so a rounding that flips
//     changes an activation by 2^-9 of itself. Medians up to 7.4e-3,
//     largest 4.6e-2 (2.3e-2 on FMAs).
var (
	bf16Tolerance = tolerance{1.5e-2, 6e-2}
	// bf16DotTolerances replace familyOracles' bounds, by name, when the
	// CPU backend multiplies F16 and BF16 weights by bf16 dot products.
	bf16DotTolerances = map[string]tolerance{"F16 weights": {2.5e-2, 6e-2}}
)

// f16Models and bf16Models are three of familyModels with F16 and BF16
// weights, which rill's CPU backend multiplies on kernels of their own
// (packed at load; on AVX512_BF16, by bf16 dot products).
var (
	f16Models = map[string]testmodel.Spec{
		"rill-tiny-llama3-F16.gguf": testmodel.Llama3(quant.F16),
		"rill-tiny-phi-F16.gguf":    testmodel.Phi3(quant.F16),
		"rill-tiny-gemma3-F16.gguf": testmodel.Gemma3(quant.F16),
	}
	bf16Models = map[string]testmodel.Spec{
		"rill-tiny-llama3-BF16.gguf": testmodel.Llama3(quant.BF16),
		"rill-tiny-phi-BF16.gguf":    testmodel.Phi3(quant.BF16),
		"rill-tiny-gemma3-BF16.gguf": testmodel.Gemma3(quant.BF16),
	}
)

// bf16Dots reports whether cpu.New's Backend multiplies F16 weights by
// bf16 dot products.
func bf16Dots() bool {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	return be.Kernels() == "avx512bf16"
}

// TestOracleFamilies: on Llama 3 RoPE factors, linear and YaRN scaling, a
// Mistral-style window (which llama.cpp does not apply to llama), phi3
// (fused weights, long and short RoPE factors, attention factor), gemma
// (scaled embeddings, GELU, query scaling, tied output), gemma2
// (soft-capped scores and logits, windowed layers, post-norms) and gemma3
// (window pattern, per-layer RoPE base and scaling, query and key norms)
// rill decodes llama.cpp's tokens with top-5 log-probabilities within the
// bounds familyOracles gives.
func TestOracleFamilies(t *testing.T) {
	t.Parallel()
	for _, o := range familyOracles {
		t.Run(o.name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.FromSlash(o.path))
			if err != nil {
				t.Fatal(err)
			}
			var files struct {
				ModelFiles map[string]struct {
					SHA256 string `json:"sha256"`
				} `json:"model_files"`
			}
			if err := json.Unmarshal(raw, &files); err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(maps.Keys(files.ModelFiles)); !slices.Equal(got, o.models) {
				t.Fatalf("%s covers %v, want %v", o.path, got, o.models)
			}
			specs := o.specs
			if specs == nil {
				specs = familyModels
			}
			tol := o.tol
			if dt, ok := bf16DotTolerances[o.name]; ok && bf16Dots() {
				tol = dt
			}
			checkOracleKV(t, openArchModel(specs, files.ModelFiles), o.path, tol, o.kv)
		})
	}
}

// TestConfigFamilies: the hyperparameters each architecture reads, with
// llama.cpp's defaults where the file is silent.
func TestConfigFamilies(t *testing.T) {
	t.Parallel()
	inv := func(n float64) float32 { return 1 / float32(math.Sqrt(n)) }
	for _, c := range []struct {
		name  string
		spec  testmodel.Spec
		meta  map[string]any
		check func(c *model.Config) string // "" when right
	}{
		{"llama3", testmodel.Llama3(quant.F32), nil, func(c *model.Config) string {
			return expect(c.RopeScaling == "linear" && c.RopeFreqScale == 1 && c.RopeBase == 500000 && c.RopeYaRNExt == 0 && c.RopeAttnFactor == 1,
				"no scaling keys: linear by 1, base 500000")
		}},
		{"llama linear", testmodel.LlamaLinear(quant.F32), nil, func(c *model.Config) string {
			return expect(c.RopeFreqScale == 0.25 && c.RopeAttnFactor == 1 && c.RopeYaRNExt == 0, "frequency scale 1/4")
		}},
		{"llama linear, scale_linear key", testmodel.Target(quant.F32), map[string]any{"llama.rope.scale_linear": float32(2)}, func(c *model.Config) string {
			return expect(c.RopeFreqScale == 0.5, "frequency scale 1/2 from the older key")
		}},
		{"llama none", testmodel.LlamaLinear(quant.F32), map[string]any{"llama.rope.scaling.type": "none"}, func(c *model.Config) string {
			return expect(c.RopeFreqScale == 1, "type none ignores the factor")
		}},
		{"llama yarn", testmodel.LlamaYaRN(quant.F32), nil, func(c *model.Config) string {
			ln4 := float32(math.Log(4))
			want := (float32(0.1*ln4) + 1) * (1 / (1 + float32(0.1*ln4)))
			return expect(c.RopeFreqScale == 0.25 && c.RopeYaRNExt == 1 && c.RopeYaRNBetaFast == 32 && c.RopeYaRNBetaSlow == 1 &&
				c.RopeOrigContext == 256 && c.RopeAttnFactor == want, "YaRN by 4 from 256, betas 32 and 1")
		}},
		{"mistral", testmodel.Mistral(quant.F32), nil, func(c *model.Config) string {
			return expect(c.SlidingWindow == 0 && !c.Sliding(0), "llama.cpp applies no window to llama")
		}},
		{"phi3", testmodel.Phi3(quant.F32), nil, func(c *model.Config) string {
			want := float32(math.Sqrt(1 + math.Log(8)/math.Log(512)))
			return expect(c.SlidingWindow == 0 && c.RopeOrigContext == 512 && c.RopeAttnFactor == want && c.RopeNeox &&
				c.PreScaleQuery && c.AttnScale == inv(16) && !c.GELU, "no window, original context 512, attention factor, NEOX, scaled queries")
		}},
		{"gemma", testmodel.Gemma(quant.F32), nil, func(c *model.Config) string {
			return expect(c.EmbedScale == 8 && c.GELU && c.PreScaleQuery && c.AttnScale == inv(32) && c.HeadDim == 32 &&
				c.SlidingWindow == 0 && c.AttnSoftCap == 0 && c.FinalSoftCap == 0, "embeddings by 8, GELU, queries by 1/sqrt(32)")
		}},
		{"gemma2", testmodel.Gemma2(quant.F32), nil, func(c *model.Config) string {
			return expect(c.SlidingWindow == 8 && c.SlidingPeriod == 2 && c.Sliding(0) && !c.Sliding(1) && c.Sliding(2) && !c.Sliding(3) &&
				c.AttnSoftCap == 2 && c.FinalSoftCap == 15 && c.RopeBaseSWA == 10000 && c.RopeFreqScaleSWA == 1 && c.AttnScale == inv(32),
				"window 8 on even layers, caps 2 and 15")
		}},
		{"gemma2 defaults", testmodel.Gemma2(quant.F32), map[string]any{
			"gemma2.attention.sliding_window": nil, "gemma2.attn_logit_softcapping": nil, "gemma2.final_logit_softcapping": nil,
			"gemma2.rope.freq_base": float32(20000), "gemma2.rope.scaling.type": "linear", "gemma2.rope.scaling.factor": float32(2),
		}, func(c *model.Config) string {
			return expect(c.SlidingWindow == 4096 && c.SlidingPeriod == 2 && c.AttnSoftCap == 50 && c.FinalSoftCap == 30 &&
				c.RopeBaseSWA == 20000 && c.RopeFreqScaleSWA == 0.5, "window 4096, caps 50 and 30, local RoPE as the global one")
		}},
		{"gemma2 27B", testmodel.Gemma2(quant.F32), map[string]any{"gemma2.block_count": uint32(46)}, func(c *model.Config) string {
			return expect(c.AttnScale == inv(16), "queries by 1/sqrt(Embd/Heads) at 46 layers")
		}},
		{"gemma3", testmodel.Gemma3(quant.F32), nil, func(c *model.Config) string {
			ok := c.SlidingWindow == 8 && c.SlidingPeriod == 6 && !c.Sliding(5) && c.RopeBase == 1e6 && c.RopeFreqScale == 0.125 &&
				c.RopeBaseSWA == 10000 && c.RopeFreqScaleSWA == 1 && c.FinalSoftCap == 0 && c.AttnSoftCap == 0
			for l := range 5 {
				ok = ok && c.Sliding(l)
			}
			return expect(ok, "window 8 on layers 0-4, global layer 5 with base 1e6 scaled by 1/8, local base 10000")
		}},
		{"gemma3 pattern and local base", testmodel.Gemma3(quant.F32), map[string]any{
			"gemma3.attention.sliding_window_pattern": uint32(3), "gemma3.rope.freq_base_swa": float32(5000), "gemma3.final_logit_softcapping": float32(20),
		}, func(c *model.Config) string {
			return expect(c.Sliding(0) && c.Sliding(1) && !c.Sliding(2) && c.Sliding(3) && c.RopeBaseSWA == 5000 && c.FinalSoftCap == 20,
				"every third layer global, local base 5000, logits capped")
		}},
		{"gemma3 without window", testmodel.Gemma3(quant.F32), map[string]any{"gemma3.attention.sliding_window": nil}, func(c *model.Config) string {
			return expect(c.SlidingWindow == 0 && !c.Sliding(0), "no window")
		}},
		{"gemma3 27B", testmodel.Gemma3(quant.F32), map[string]any{"gemma3.block_count": uint32(62)}, func(c *model.Config) string {
			return expect(c.AttnScale == inv(16), "queries by 1/sqrt(Embd/Heads) at 62 layers")
		}},
	} {
		f := edited(t, c.spec, c.meta, nil)
		cfg, err := model.ConfigFromGGUF(f.Metadata)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if msg := c.check(&cfg); msg != "" {
			t.Errorf("%s: want %s; config %+v", c.name, msg, cfg)
		}
	}
}

func expect(ok bool, what string) string {
	if ok {
		return ""
	}
	return what
}

// TestLoadFamilies: the tensors each architecture requires, the shapes of
// the fused ones, and metadata rill cannot run are clear errors.
func TestLoadFamilies(t *testing.T) {
	t.Parallel()
	phi3, gemma2, gemma3 := testmodel.Phi3(quant.F32), testmodel.Gemma2(quant.F32), testmodel.Gemma3(quant.F32)
	for _, c := range []struct {
		name    string
		spec    testmodel.Spec
		meta    map[string]any
		tensors map[string][]float32
		want    string // "" when the model must load
	}{
		{"phi3 without RoPE factors", phi3, nil, map[string][]float32{"rope_factors_long.weight": nil, "rope_factors_short.weight": nil}, ""},
		{"phi3 short factors of the wrong size", phi3, nil, map[string][]float32{"rope_factors_short.weight": make([]float32, 16)}, "tensor rope_factors_short.weight has shape [16], want [8]"},
		{"phi3 without its fused projection", phi3, nil, map[string][]float32{"blk.1.attn_qkv.weight": nil}, "tensor blk.1.attn_q.weight is missing"},
		{"llama3 factors of the wrong size", testmodel.Llama3(quant.F32), nil, map[string][]float32{"rope_freqs.weight": make([]float32, 3)}, "tensor rope_freqs.weight has shape [3], want [8]"},
		{"gemma2 without a post-norm", gemma2, nil, map[string][]float32{"blk.3.post_ffw_norm.weight": nil}, "tensor blk.3.post_ffw_norm.weight is missing"},
		{"gemma3 without a query norm", gemma3, nil, map[string][]float32{"blk.5.attn_q_norm.weight": nil}, "tensor blk.5.attn_q_norm.weight is missing"},
		{"unknown RoPE scaling", testmodel.Target(quant.F32), map[string]any{"llama.rope.scaling.type": "dynamic"}, nil,
			`rope scaling "dynamic" is not supported (supported: none, linear, yarn, longrope)`},
		{"negative soft cap", gemma2, map[string]any{"gemma2.attn_logit_softcapping": float32(-1)}, nil, "soft caps -1"},
		{"window of the wrong type", gemma2, map[string]any{"gemma2.attention.sliding_window": float32(8)}, nil, "gemma2.attention.sliding_window is not an unsigned 32-bit integer"},
		{"soft cap of the wrong type", gemma2, map[string]any{"gemma2.final_logit_softcapping": "30"}, nil, "gemma2.final_logit_softcapping is not a float"},
		{"scaling type of the wrong type", testmodel.Target(quant.F32), map[string]any{"llama.rope.scaling.type": uint32(1)}, nil, "llama.rope.scaling.type is not a string"},
	} {
		_, err := model.Load(edited(t, c.spec, c.meta, c.tensors))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestFamiliesDecodeAllocatesNothing: a steady-state decode step allocates
// nothing on the new paths either (scaled RoPE, windowed and soft-capped
// attention, GELU, post-norms, fused weights, experts), past the first
// window.
func TestFamiliesDecodeAllocatesNothing(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, s := range []testmodel.Spec{testmodel.LlamaYaRN(quant.Q8_0), testmodel.Phi3(quant.Q8_0), testmodel.Gemma2(quant.Q8_0), testmodel.Gemma3(quant.Q8_0),
		testmodel.Qwen3MoE(quant.Q8_0), testmodel.Qwen2MoE(quant.Q4_0)} {
		m := fromSpec(t, s)
		d := newDecoder(m, be, 256, 1)
		pos := 0
		step := func() {
			if err := d.run(pos, 1); err != nil {
				t.Fatal(err)
			}
			pos++
		}
		for range 20 {
			step() // the first calls size buffers and build GELU's table
		}
		if a := testing.AllocsPerRun(100, step); a != 0 {
			t.Errorf("%s: a decode step allocates %v times", s.Name, a)
		}
	}
}
