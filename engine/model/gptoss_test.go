package model_test

import (
	"math"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// gptOssModels are the gpt-oss test model, by the file names its oracles
// (in familyOracles) were recorded on: experts with biases, the router's
// softmax over the chosen logits, the clamped SwiGLU, attention sinks,
// biased projections, a window of 8 on the even layers, and YaRN; with
// MXFP4 experts as testmodel.GptOss makes them, and with F32 experts.
//
// The F16-cache oracle runs only the F32 one: MXFP4 experts multiply
// activations quantised to Q8_0, whose rounding steps turn the noise of
// half-precision attention into jumps, so that llama.cpp's own F16 and
// F32 runs of that model differ by up to 2e-2 (4e-3 with F32 experts);
// the exact oracle holds the MXFP4 one to the families' bound.
var gptOssModels = map[string]testmodel.Spec{
	"rill-tiny-gpt-oss-mxfp4-F32.gguf": testmodel.GptOss(quant.F32),
	"rill-tiny-gpt-oss-F32.gguf":       gptOssF32Experts(),
}

// gptOssF32Experts is testmodel.GptOss with F32 experts.
func gptOssF32Experts() testmodel.Spec {
	s := testmodel.GptOss(quant.F32)
	s.MXFP4Experts = false
	return s
}

// TestConfigGptOss: gpt-oss's hyperparameters as llama.cpp reads them:
// the window on the even layers (pattern 2 unless the file says), the
// score scale 1/sqrt(rope.dimension_count), YaRN, the local RoPE base,
// and the experts.
func TestConfigGptOss(t *testing.T) {
	t.Parallel()
	ln4 := float32(math.Log(4))
	for _, c := range []struct {
		name  string
		meta  map[string]any
		check func(c *model.Config) string // "" when right
	}{
		{"defaults", nil, func(c *model.Config) string {
			return expect(c.SlidingWindow == 8 && c.SlidingPeriod == 2 && c.Sliding(0) && !c.Sliding(1) && c.Sliding(2) && !c.Sliding(3) &&
				c.AttnScale == 1/float32(math.Sqrt(32)) && !c.PreScaleQuery && c.RopeNeox && c.HeadDim == 32 &&
				c.RopeScaling == "yarn" && c.RopeFreqScale == 0.25 && c.RopeYaRNExt == 1 && c.RopeOrigContext == 256 &&
				c.RopeAttnFactor == (float32(0.1*ln4)+1)*(1/(1+float32(0.1*ln4))) &&
				c.RopeBaseSWA == c.RopeBase && c.RopeFreqScaleSWA == 0.25 &&
				c.Experts == 8 && c.ExpertsUsed == 2 && c.ExpertFF == 64 && c.SharedFF == 0,
				"window 8 on even layers, scores by 1/sqrt(32), YaRN by 4 on every layer, 8 experts of 64, 2 used")
		}},
		{"pattern, local base and rope dims", map[string]any{
			"gpt-oss.attention.sliding_window_pattern": uint32(3), "gpt-oss.rope.freq_base_swa": float32(5000),
			"gpt-oss.rope.dimension_count": uint32(16),
		}, func(c *model.Config) string {
			return expect(c.Sliding(0) && c.Sliding(1) && !c.Sliding(2) && c.RopeBaseSWA == 5000 && c.AttnScale == 0.25,
				"every third layer global, local base 5000, scores by 1/sqrt(16)")
		}},
	} {
		f := edited(t, testmodel.GptOss(quant.F32), c.meta, nil)
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

// TestLoadGptOss: what gpt-oss requires, as llama.cpp does, is a clear
// error when missing; its norm before the experts is post_attention_norm.
func TestLoadGptOss(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		meta    map[string]any
		tensors map[string][]float32
		want    string // "" when the model must load
	}{
		{"as written", nil, nil, ""},
		{"without a window", map[string]any{"gpt-oss.attention.sliding_window": nil}, nil, "gpt-oss.attention.sliding_window is missing"},
		{"without sinks", nil, map[string][]float32{"blk.2.attn_sinks.weight": nil}, "tensor blk.2.attn_sinks.weight is missing"},
		{"sinks of the wrong size", nil, map[string][]float32{"blk.0.attn_sinks.weight": make([]float32, 3)}, "tensor blk.0.attn_sinks.weight has shape [3], want [4]"},
		{"without the norm before the experts", nil, map[string][]float32{"blk.1.post_attention_norm.weight": nil}, "tensor blk.1.post_attention_norm.weight is missing"},
		{"expert biases of the wrong size", nil, map[string][]float32{"blk.0.ffn_up_exps.bias": make([]float32, 64)}, "tensor blk.0.ffn_up_exps.bias has shape [64], want [64 8]"},
	} {
		_, err := model.Load(edited(t, testmodel.GptOss(quant.F32), c.meta, c.tensors))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestGptOssDecodeAllocatesNothing: a steady-state decode step of gpt-oss
// (sinks, windows, routing, MXFP4 experts) allocates nothing.
func TestGptOssDecodeAllocatesNothing(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m := fromSpec(t, testmodel.GptOss(quant.Q8_0))
	d := newDecoder(m, be, 256, 1)
	pos := 0
	step := func() {
		if err := d.run(pos, 1); err != nil {
			t.Fatal(err)
		}
		pos++
	}
	for range 20 {
		step()
	}
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Errorf("a decode step allocates %v times", a)
	}
}
