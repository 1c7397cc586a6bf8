// Package model holds transformer architectures as forward passes over a
// compute backend: configuration from GGUF metadata, weights as zero-copy
// views of the file, and a batched forward pass over a paged KV cache.
//
// The package computes nothing itself: every operation of a pass goes
// through the Backend interface it defines (backend.go), which
// engine/backend/cpu implements as the numeric reference and device
// backends will implement too. engine/model imports no backend.
package model

import (
	"errors"
	"fmt"
	"math"

	"rill/engine/gguf"
)

// Config is the shape of a model, read from GGUF metadata.
type Config struct {
	Arch          string
	Name          string
	VocabSize     int
	ContextLength int // the training context, the default window
	Embd          int // hidden size
	Layers        int
	Heads         int
	HeadsKV       int
	HeadDim       int
	FF            int // feed-forward hidden size
	RopeDims      int // leading dims of each head that RoPE rotates
	RopeBase      float32
	RopeFreqScale float32 // 1/linear scaling factor
	RopeNeox      bool    // rotate (x[i], x[i+d/2]) instead of adjacent pairs
	NormEps       float32
	// Pooling is {arch}.pooling_type: how an embedding model pools its
	// hidden states (PoolNone for a text generator).
	Pooling Pooling

	// RopeScaling is rope.scaling.type: "none", "linear" (the default, as
	// in llama.cpp), "yarn" or "longrope".
	RopeScaling string
	// RopeAttnFactor multiplies RoPE's cosines and sines: YaRN's magnitude
	// correction times rope.scaling.attn_factor (1 when neither applies).
	RopeAttnFactor float32
	// RopeOrigContext is the context the model was trained on before
	// extension (rope.scaling.original_context_length, default
	// ContextLength): YaRN's reference, and the length past which models
	// with long and short RoPE factors use the long ones.
	RopeOrigContext int
	// RopeYaRNExt is YaRN's extrapolation mix, 1 with YaRN scaling and 0
	// without; RopeYaRNBetaFast and RopeYaRNBetaSlow bound its ramp.
	RopeYaRNExt, RopeYaRNBetaFast, RopeYaRNBetaSlow float32

	// SlidingWindow, when positive, is the window of the local layers:
	// every layer but the last of each SlidingPeriod layers (all layers
	// when SlidingPeriod is 0) attends to its last SlidingWindow
	// positions only, with RoPE base RopeBaseSWA and scale
	// RopeFreqScaleSWA (Gemma 2 and 3).
	SlidingWindow    int
	SlidingPeriod    int
	RopeBaseSWA      float32
	RopeFreqScaleSWA float32

	// AttnScale multiplies each query-key product; PreScaleQuery applies
	// it to the queries after RoPE instead of to the scores (Phi-3, Gemma).
	AttnScale     float32
	PreScaleQuery bool
	// AttnSoftCap and FinalSoftCap, when positive, cap attention scores
	// and output logits: x = cap*tanh(x/cap) (Gemma 2).
	AttnSoftCap, FinalSoftCap float32
	// EmbedScale, when not zero, multiplies the token embeddings (Gemma:
	// sqrt(Embd)).
	EmbedScale float32
	// GELU selects GELU (tanh approximation) instead of SiLU as the
	// activation of the gated feed-forward (Gemma).
	GELU bool

	// Experts, when positive, makes every layer's feed-forward a mixture
	// of experts (expert_count): each token goes to ExpertsUsed of them
	// (expert_used_count), of hidden size ExpertFF each
	// (expert_feed_forward_length, default FF/ExpertsUsed). SharedFF is
	// the hidden size of the shared expert of architectures that have
	// one (expert_shared_feed_forward_length, default FF).
	Experts, ExpertsUsed, ExpertFF, SharedFF int

	// ropeFreqScaleTrain is the file's scaling before "none" overrides
	// it, which Gemma 2's local layers keep.
	ropeFreqScaleTrain float32
}

// KVDim is the width of one token's keys (or values) in one layer.
func (c *Config) KVDim() int { return c.HeadsKV * c.HeadDim }

// Sliding reports whether layer attends over the sliding window.
func (c *Config) Sliding(layer int) bool {
	if c.SlidingWindow <= 0 {
		return false
	}
	return c.SlidingPeriod == 0 || layer%c.SlidingPeriod < c.SlidingPeriod-1
}

// meta reads the optional keys of one architecture (prefix "arch."): an
// absent key leaves the default in place, and a key of another type is an
// error, as llama.cpp's loader makes it. The first error is kept in err.
type meta struct {
	md   *gguf.Metadata
	arch string
	err  error
}

func (m *meta) uint32(key string, dst *int) {
	k := m.arch + "." + key
	if _, ok := m.md.Value(k); !ok {
		return
	}
	if v, ok := m.md.Uint(k); ok && v <= 1<<31 {
		*dst = int(v)
	} else if m.err == nil {
		m.err = fmt.Errorf("gguf: %s is not an unsigned 32-bit integer", k)
	}
}

func (m *meta) float32(key string, dst *float32) {
	k := m.arch + "." + key
	if _, ok := m.md.Value(k); !ok {
		return
	}
	if v, ok := m.md.Float(k); ok {
		*dst = float32(v)
	} else if m.err == nil {
		m.err = fmt.Errorf("gguf: %s is not a float", k)
	}
}

// invSqrt is 1/sqrt(n) as llama.cpp's graphs compute attention scales in
// float32: 1.0f/sqrtf(float(n)).
func invSqrt(n int) float32 {
	return 1 / float32(math.Sqrt(float64(float32(n))))
}

// ConfigFromGGUF reads the hyperparameters of a supported architecture.
func ConfigFromGGUF(md *gguf.Metadata) (Config, error) {
	arch, ok := md.String("general.architecture")
	if !ok {
		return Config{}, errors.New("gguf: general.architecture is missing")
	}
	a, ok := archs[arch]
	if !ok {
		return Config{}, fmt.Errorf("architecture %q is not supported (supported: %s)", arch, archNames())
	}
	c := Config{Arch: arch, RopeNeox: a.ropeNeox, GELU: a.gemma, PreScaleQuery: a.preScaleQuery}
	c.Name, _ = md.String("general.name")

	u := func(key string, dst *int, required bool) error {
		v, ok := md.Uint(arch + "." + key)
		if !ok {
			if required {
				return fmt.Errorf("gguf: %s.%s is missing", arch, key)
			}
			return nil
		}
		if v == 0 || v > 1<<24 {
			return fmt.Errorf("gguf: %s.%s = %d is out of range", arch, key, v)
		}
		*dst = int(v)
		return nil
	}
	for _, f := range []struct {
		key      string
		dst      *int
		required bool
	}{
		{"embedding_length", &c.Embd, true},
		{"block_count", &c.Layers, true},
		{"attention.head_count", &c.Heads, true},
		{"attention.head_count_kv", &c.HeadsKV, false},
		{"feed_forward_length", &c.FF, a.moe == nil},
		{"context_length", &c.ContextLength, true},
		{"rope.dimension_count", &c.RopeDims, false},
		{"attention.key_length", &c.HeadDim, false},
		{"vocab_size", &c.VocabSize, false},
	} {
		if err := u(f.key, f.dst, f.required); err != nil {
			return Config{}, err
		}
	}
	var err error
	if c.Pooling, err = poolingFromGGUF(md, arch); err != nil {
		return Config{}, err
	}
	if c.HeadsKV == 0 {
		c.HeadsKV = c.Heads
	}
	if c.HeadDim == 0 {
		if c.Embd%c.Heads != 0 {
			return Config{}, fmt.Errorf("gguf: embedding_length %d is not a multiple of head_count %d", c.Embd, c.Heads)
		}
		c.HeadDim = c.Embd / c.Heads
	}
	if v, ok := md.Uint(arch + ".attention.value_length"); ok && int(v) != c.HeadDim {
		return Config{}, fmt.Errorf("gguf: value_length %d differs from key_length %d (not supported)", v, c.HeadDim)
	}
	if c.Heads%c.HeadsKV != 0 {
		return Config{}, fmt.Errorf("gguf: head_count %d is not a multiple of head_count_kv %d", c.Heads, c.HeadsKV)
	}
	if c.RopeDims == 0 {
		c.RopeDims = c.HeadDim
	}
	if c.RopeDims > c.HeadDim || c.RopeDims%2 != 0 {
		return Config{}, fmt.Errorf("gguf: rope.dimension_count %d does not fit head size %d", c.RopeDims, c.HeadDim)
	}
	if c.HeadDim > MaxHeadDim {
		return Config{}, fmt.Errorf("head size %d is larger than the supported %d", c.HeadDim, MaxHeadDim)
	}
	if c.VocabSize == 0 {
		toks, ok := md.Strings("tokenizer.ggml.tokens")
		if !ok || len(toks) == 0 {
			return Config{}, errors.New("gguf: vocabulary size unknown (no vocab_size and no tokenizer.ggml.tokens)")
		}
		c.VocabSize = len(toks)
	}

	if a.moe != nil {
		if err := c.experts(md, a.moe); err != nil {
			return Config{}, err
		}
	}

	c.RopeBase = 10000
	if v, ok := md.Float(arch + ".rope.freq_base"); ok {
		c.RopeBase = float32(v)
	}
	m := &meta{md: md, arch: arch}
	if err := c.ropeScaling(m); err != nil {
		return Config{}, err
	}
	c.NormEps = 1e-5
	if v, ok := md.Float(arch + ".attention.layer_norm_rms_epsilon"); ok {
		c.NormEps = float32(v)
	}
	// The scale of the scores stays computed as it always was for the
	// architectures that scale scores; those that scale queries use
	// llama.cpp's float32 expression.
	c.AttnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	if c.PreScaleQuery {
		c.AttnScale = invSqrt(c.HeadDim)
	}
	if a.gemma {
		c.EmbedScale = float32(math.Sqrt(float64(float32(c.Embd))))
	}
	// Local layers rotate as the global ones unless the architecture says
	// otherwise.
	c.RopeBaseSWA, c.RopeFreqScaleSWA = c.RopeBase, c.RopeFreqScale
	if a.hparams != nil {
		a.hparams(&c, m)
	}
	if m.err != nil {
		return Config{}, m.err
	}
	// A NaN, infinite or non-positive base or epsilon loads but makes every
	// logit NaN: refuse the file instead (a corrupt or hostile GGUF).
	for _, v := range []struct {
		key string
		val float32
	}{{"rope.freq_base", c.RopeBase}, {"rope.freq_base_swa", c.RopeBaseSWA}, {"attention.layer_norm_rms_epsilon", c.NormEps}} {
		if !(v.val > 0) || math.IsInf(float64(v.val), 0) {
			return Config{}, fmt.Errorf("gguf: %s.%s = %g: want a positive finite number", arch, v.key, v.val)
		}
	}
	if c.SlidingWindow < 0 || c.SlidingPeriod < 0 || !(c.AttnSoftCap >= 0) || !(c.FinalSoftCap >= 0) {
		return Config{}, fmt.Errorf("gguf: sliding window %d of period %d, soft caps %g and %g", c.SlidingWindow, c.SlidingPeriod, c.AttnSoftCap, c.FinalSoftCap)
	}
	return c, nil
}

// MaxHeadDim bounds the head size (attention keeps one head's accumulator on the stack).
const MaxHeadDim = 512

// ropeScaling reads rope.scaling.* as llama.cpp does for every
// architecture: the type (default linear), the factor (rope.scaling.factor
// or the older rope.scale_linear) as a frequency scale unless the type is
// none, and for YaRN the extrapolation mix 1, the ramp's betas 32 and 1
// (llama.cpp's defaults; the files of these architectures carry none) and
// the magnitude mscale(factor)/(1+0.1*ln(factor)), which ggml's kernel
// multiplies back by 1+0.1*ln(factor). rope.scaling.attn_factor
// multiplies the magnitude in every case.
func (c *Config) ropeScaling(m *meta) error {
	c.RopeScaling = "linear"
	if _, ok := m.md.Value(m.arch + ".rope.scaling.type"); ok {
		typ, ok := m.md.String(m.arch + ".rope.scaling.type")
		if !ok {
			return fmt.Errorf("gguf: %s.rope.scaling.type is not a string", m.arch)
		}
		c.RopeScaling = typ
	}
	switch c.RopeScaling {
	case "none", "linear", "yarn", "longrope":
	default:
		return fmt.Errorf("rope scaling %q is not supported (supported: none, linear, yarn, longrope)", c.RopeScaling)
	}
	var factor float32
	m.float32("rope.scaling.factor", &factor)
	if factor == 0 {
		m.float32("rope.scale_linear", &factor)
	}
	if factor < 0 || factor != factor {
		return fmt.Errorf("gguf: rope scaling factor %g", factor)
	}
	c.ropeFreqScaleTrain = 1
	if factor != 0 {
		c.ropeFreqScaleTrain = 1 / factor
	}
	c.RopeFreqScale = c.ropeFreqScaleTrain
	if c.RopeScaling == "none" {
		c.RopeFreqScale = 1
	}
	c.RopeOrigContext = c.ContextLength
	m.uint32("rope.scaling.original_context_length", &c.RopeOrigContext)
	c.RopeAttnFactor = 1
	if c.RopeScaling == "yarn" {
		c.RopeYaRNExt, c.RopeYaRNBetaFast, c.RopeYaRNBetaSlow = 1, 32, 1
		factor := 1 / c.RopeFreqScale
		mscale := float32(1)
		if factor > 1 {
			mscale = float32(0.1*float32(math.Log(float64(factor)))) + 1
		}
		c.RopeAttnFactor = mscale * (1 / (1 + float32(0.1*float32(math.Log(float64(factor))))))
	}
	attn := float32(1)
	m.float32("rope.scaling.attn_factor", &attn)
	c.RopeAttnFactor *= attn
	return nil
}

// MaxExperts bounds a layer's experts (llama.cpp's LLAMA_MAX_EXPERTS).
const MaxExperts = 512

// experts reads the mixture-of-experts keys as llama.cpp does: the count
// and the number used are required (llama.cpp refuses these architectures
// without them), the hidden sizes default to FF/ExpertsUsed and FF.
// Per-layer arrays of them are not supported.
func (c *Config) experts(md *gguf.Metadata, a *moeArch) error {
	for _, f := range []struct {
		key      string
		dst      *int
		required bool
	}{
		{"expert_count", &c.Experts, true},
		{"expert_used_count", &c.ExpertsUsed, true},
		{"expert_feed_forward_length", &c.ExpertFF, false},
		{"expert_shared_feed_forward_length", &c.SharedFF, false},
	} {
		k := c.Arch + "." + f.key
		if _, ok := md.Value(k); !ok {
			if f.required {
				return fmt.Errorf("gguf: %s is missing", k)
			}
			continue
		}
		v, ok := md.Uint(k)
		if !ok || v == 0 || v > 1<<24 {
			return fmt.Errorf("gguf: %s is not a positive integer (per-layer arrays are not supported)", k)
		}
		*f.dst = int(v)
	}
	if c.Experts > MaxExperts || c.ExpertsUsed > c.Experts {
		return fmt.Errorf("gguf: %d experts, %d used per token: want at most %d, and no more used than there are", c.Experts, c.ExpertsUsed, MaxExperts)
	}
	if c.ExpertFF == 0 {
		c.ExpertFF = c.FF / c.ExpertsUsed
	}
	if a.shared && c.SharedFF == 0 {
		c.SharedFF = c.FF
	}
	if !a.shared {
		c.SharedFF = 0
	}
	if c.ExpertFF == 0 || a.shared && c.SharedFF == 0 {
		return fmt.Errorf("gguf: %s: the experts' feed-forward size is unknown", c.Arch)
	}
	return nil
}
