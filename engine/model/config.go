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
}

// KVDim is the width of one token's keys (or values) in one layer.
func (c *Config) KVDim() int { return c.HeadsKV * c.HeadDim }

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
	c := Config{Arch: arch, RopeNeox: a.ropeNeox}
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
		{"feed_forward_length", &c.FF, true},
		{"context_length", &c.ContextLength, true},
		{"rope.dimension_count", &c.RopeDims, false},
		{"attention.key_length", &c.HeadDim, false},
		{"vocab_size", &c.VocabSize, false},
	} {
		if err := u(f.key, f.dst, f.required); err != nil {
			return Config{}, err
		}
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

	c.RopeBase = 10000
	if v, ok := md.Float(arch + ".rope.freq_base"); ok {
		c.RopeBase = float32(v)
	}
	c.RopeFreqScale = 1
	if typ, ok := md.String(arch + ".rope.scaling.type"); ok && typ != "none" {
		if typ != "linear" {
			return Config{}, fmt.Errorf("rope scaling %q is not supported (supported: linear)", typ)
		}
		if f, ok := md.Float(arch + ".rope.scaling.factor"); ok && f > 0 {
			c.RopeFreqScale = float32(1 / f)
		}
	} else if f, ok := md.Float(arch + ".rope.scale_linear"); ok && f > 0 {
		c.RopeFreqScale = float32(1 / f)
	}
	c.NormEps = 1e-5
	if v, ok := md.Float(arch + ".attention.layer_norm_rms_epsilon"); ok {
		c.NormEps = float32(v)
	}
	return c, nil
}

// MaxHeadDim bounds the head size (attention keeps one head's accumulator on the stack).
const MaxHeadDim = 512
