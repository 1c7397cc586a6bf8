package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"rill/engine/tensor"
)

// arch is what one architecture changes in the llama recipe. Every
// architecture runs the same blocks over the same Backend ops (forward.go):
// norm, projections, RoPE, paged attention, output projection, residual
// add; norm, gated feed-forward, residual add. What differs is described
// here and shows in the weights a layer has: a step whose weights a layer
// lacks is skipped, so the forward pass reads as one recipe rather than a
// chain of per-architecture branches.
//
// Linear layers take a bias wherever the GGUF file has one (Qwen2's query,
// key and value projections; llama.cpp loads them the same way), and a
// fused attn_qkv weight stands for the three projections in any
// architecture, so neither needs an entry here.
//
// Every rule follows what llama.cpp (the v0.4.0 source node-llama-cpp
// 3.21.1 ships) reads and computes, including where it ignores metadata:
// a sliding window in a llama or phi3 file is not applied.
type arch struct {
	// ropeNeox: RoPE rotates the pairs (x[i], x[i+d/2]) of each head
	// (llama.cpp's LLAMA_ROPE_TYPE_NEOX) rather than adjacent pairs.
	ropeNeox bool
	// qkNorm: every layer has attn_q_norm and attn_k_norm, an RMS norm of
	// each query and each key head (HeadDim weights, shared by the heads)
	// applied after the projection and before RoPE.
	qkNorm bool
	// ropeFactors: the file may hold RoPE frequency factors, rope_freqs
	// (Llama 3's) unless the scaling type is longrope, or
	// rope_factors_long and rope_factors_short (Phi-3's) when it is or
	// when factorsLongShort is set.
	ropeFactors      bool
	factorsLongShort bool
	// fusedGateUp: ffn_up holds the gate rows and then the up rows (2*FF
	// rows) and there is no ffn_gate (Phi-3).
	fusedGateUp bool
	// gemma is the Gemma family's recipe: embeddings scaled by sqrt(Embd)
	// and GELU (tanh approximation) in the gated feed-forward.
	gemma bool
	// preScaleQuery: queries are multiplied by the attention scale after
	// RoPE and attention scores by 1, the order llama.cpp's Phi-3 and Gemma
	// graphs use (the rounding differs from scaling the scores).
	preScaleQuery bool
	// postNorms: every layer has post_attention_norm and post_ffw_norm, RMS
	// norms of the attention and feed-forward outputs before their
	// residual adds (Gemma 2 and 3).
	postNorms bool
	// tiedOutput: the output projection is always token_embd, whatever
	// else the file holds (Gemma, Gemma 2).
	tiedOutput bool
	// moe, when set, makes every layer's feed-forward a mixture of
	// experts (moe.go).
	moe *moeArch
	// sinks: every layer has attn_sinks, one logit per query head that
	// joins the attention softmax's denominator (gpt-oss).
	sinks bool
	// ffnNorm names the norm before the feed-forward when it is not
	// ffn_norm: gpt-oss's files call it post_attention_norm (a norm of
	// the residual stream, not of the attention output).
	ffnNorm string
	// hparams reads the architecture's own metadata (sliding windows,
	// soft-capping, the attention scale) into c after the common keys;
	// md keeps the first error.
	hparams func(c *Config, md *meta)
	// rankSoftmax: rank pooling ends in a softmax over the classification
	// head's outputs (Qwen3-Reranker's "yes" and "no" rows, so the first
	// output is P(yes)), as llama.cpp's graph does for qwen3.
	rankSoftmax bool
}

// archs are the architectures engine/model runs, by general.architecture.
var archs = map[string]arch{
	"llama": {ropeFactors: true},
	"qwen2": {ropeNeox: true},
	"qwen3": {ropeNeox: true, qkNorm: true, rankSoftmax: true},
	// llama.cpp renormalises Qwen3-MoE's chosen weights and not
	// Qwen2-MoE's, whatever the file says (neither reads
	// expert_weights_norm or expert_weights_scale).
	"qwen2moe": {ropeNeox: true, moe: &moeArch{gating: tensor.GatingSoftmax, act: actSwiGLU, shared: true}},
	"qwen3moe": {ropeNeox: true, qkNorm: true, moe: &moeArch{gating: tensor.GatingSoftmax, norm: true, act: actSwiGLU}},
	// gpt-oss: biases on every projection, the router and the experts
	// (each loaded where the file has it), a softmax over the chosen
	// experts' logits, the clamped SwiGLU, attention sinks, and every
	// second layer on a sliding window.
	"gpt-oss": {ropeNeox: true, moe: &moeArch{gating: tensor.GatingSoftmaxChosen, act: actSwiGLUOAI},
		sinks: true, ffnNorm: "post_attention_norm.weight", hparams: gptOssParams},
	"phi3": {ropeNeox: true, ropeFactors: true, factorsLongShort: true, fusedGateUp: true,
		preScaleQuery: true},
	"gemma":  {ropeNeox: true, gemma: true, preScaleQuery: true, tiedOutput: true},
	"gemma2": {ropeNeox: true, gemma: true, preScaleQuery: true, tiedOutput: true, postNorms: true, hparams: gemma2Params},
	"gemma3": {ropeNeox: true, gemma: true, preScaleQuery: true, postNorms: true, qkNorm: true, hparams: gemma3Params},
}

// archNames lists the supported architectures, for error messages.
func archNames() string {
	return strings.Join(slices.Sorted(maps.Keys(archs)), ", ")
}

// gemma2Params: every second layer (sliding_window_pattern, default 2;
// the last of each period is global) attends over a window of
// sliding_window tokens (default 4096) with RoPE base rope.freq_base_swa
// (default the global base) and the global scaling; attention scores are
// soft-capped at attn_logit_softcapping (default 50) and logits at
// final_logit_softcapping (default 30).
func gemma2Params(c *Config, md *meta) {
	c.SlidingWindow, c.SlidingPeriod = 4096, 2
	c.RopeBaseSWA, c.RopeFreqScaleSWA = c.RopeBase, c.ropeFreqScaleTrain
	c.AttnSoftCap, c.FinalSoftCap = 50, 30
	md.uint32("attention.sliding_window_pattern", &c.SlidingPeriod)
	md.uint32("attention.sliding_window", &c.SlidingWindow)
	md.float32("rope.freq_base_swa", &c.RopeBaseSWA)
	md.float32("attn_logit_softcapping", &c.AttnSoftCap)
	md.float32("final_logit_softcapping", &c.FinalSoftCap)
	c.AttnScale = gemmaAttnScale(c, 46)
}

// gemma3Params: when sliding_window is set, the layers attend over that
// window except the last of every sliding_window_pattern (default 6), and
// the windowed layers use RoPE base rope.freq_base_swa (default 10000)
// without scaling; logits are soft-capped only when
// final_logit_softcapping is set.
func gemma3Params(c *Config, md *meta) {
	md.uint32("attention.sliding_window", &c.SlidingWindow)
	if c.SlidingWindow > 0 {
		c.SlidingPeriod = 6
		md.uint32("attention.sliding_window_pattern", &c.SlidingPeriod)
		c.RopeBaseSWA, c.RopeFreqScaleSWA = 10000, 1
		md.float32("rope.freq_base_swa", &c.RopeBaseSWA)
	}
	md.float32("final_logit_softcapping", &c.FinalSoftCap)
	c.AttnScale = gemmaAttnScale(c, 62)
}

// gemmaAttnScale is the query scale of Gemma 2 and 3 as llama.cpp sets
// it: 1/sqrt(HeadDim), except for the 27B models, which it recognises by
// their layer count (bigLayers) and scales by 1/sqrt(Embd/Heads), their
// query_pre_attn_scalar (GGUF files do not carry that value).
func gemmaAttnScale(c *Config, bigLayers int) float32 {
	if c.Layers == bigLayers {
		return invSqrt(c.Embd / c.Heads)
	}
	return invSqrt(c.HeadDim)
}

// gptOssParams: attention.sliding_window is required (llama.cpp refuses a
// file without it); every layer but the last of each
// sliding_window_pattern (default 2: the even layers) attends over that
// window, with RoPE base rope.freq_base_swa (default the global base) and
// the global scaling (YaRN in gpt-oss's files); scores are scaled by
// 1/sqrt(rope.dimension_count), as llama.cpp's graph scales them.
func gptOssParams(c *Config, md *meta) {
	if _, ok := md.md.Value(md.arch + ".attention.sliding_window"); !ok && md.err == nil {
		md.err = fmt.Errorf("gguf: %s.attention.sliding_window is missing", md.arch)
	}
	md.uint32("attention.sliding_window", &c.SlidingWindow)
	c.SlidingPeriod = 2
	md.uint32("attention.sliding_window_pattern", &c.SlidingPeriod)
	md.float32("rope.freq_base_swa", &c.RopeBaseSWA)
	c.AttnScale = invSqrt(c.RopeDims)
}
