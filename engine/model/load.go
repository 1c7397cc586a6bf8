package model

import (
	"fmt"

	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/tensor"
)

// Model is a loaded transformer: configuration and weights. Weights are views
// into the memory-mapped GGUF file, which the Model owns and closes.
//
// A Model is immutable after Load and safe to share; forward passes run
// through a Runner, which owns the scratch memory of one pass at a time.
type Model struct {
	Config Config
	File   *gguf.File

	tokEmbd tensor.Matrix // VocabSize rows of Embd
	layers  []layer
	outNorm []float32
	output  linear // VocabSize rows of Embd; tokEmbd when tied
	// clsOut is the classification head of rank pooling (cls.output):
	// ClassOut rows of Embd, loaded only for a PoolRank file.
	clsOut linear

	// RoPE frequency factors (RopeDims/2 values), nil when the file has
	// none: Llama 3's rope_freqs for every context, or Phi-3's long and
	// short factors, chosen by the context a Runner serves.
	ropeFreqs, ropeLong, ropeShort []float32

	// routed names the tensors of the routed experts, of which each token
	// uses ExpertsUsed/Experts.
	routed map[string]bool
}

// linear is a linear layer y = x·Wᵀ + bias.
type linear struct {
	w    tensor.Matrix
	bias []float32 // w.Rows values; nil when the layer has none
}

// rows returns rows [lo,hi) of l, weight and bias: one part of a fused
// layer.
func (l linear) rows(lo, hi int) linear {
	part := linear{w: l.w.SliceRows(lo, hi)}
	if l.bias != nil {
		part.bias = l.bias[lo:hi:hi]
	}
	return part
}

// layer is the weights of one transformer block. Optional steps are nil
// when the architecture or the file does not have them.
type layer struct {
	attnNorm     []float32
	q, k, v, o   linear
	qNorm, kNorm []float32 // per-head RMS norms of queries and keys (HeadDim), or nil
	attnPostNorm []float32 // norm of the attention output before its residual add, or nil
	ffnNorm      []float32
	sinks        []float32 // per query head: the attention sink logits, or nil
	gate, up     linear
	down         linear
	moe          *experts  // the mixture of experts that replaces gate, up and down, or nil
	ffnPostNorm  []float32 // norm of the feed-forward output before its residual add, or nil
}

// Load reads a model from an open GGUF file. The Model takes ownership of f.
func Load(f *gguf.File) (*Model, error) {
	cfg, err := ConfigFromGGUF(f.Metadata)
	if err != nil {
		return nil, err
	}
	a := archs[cfg.Arch]
	m := &Model{Config: cfg, File: f}
	c := &cfg
	if m.tokEmbd, err = matrix(f, "token_embd.weight", c.VocabSize, c.Embd); err != nil {
		return nil, err
	}
	if m.outNorm, err = vector(f, "output_norm.weight", c.Embd); err != nil {
		return nil, err
	}
	if _, ok := f.Tensor("output.weight"); ok && !a.tiedOutput {
		if m.output, err = linearLayer(f, "output", c.VocabSize, c.Embd); err != nil {
			return nil, err
		}
	} else {
		m.output.w = m.tokEmbd // tied embeddings
		if m.output.bias, err = optionalVector(f, "output.bias", c.VocabSize); err != nil {
			return nil, err
		}
	}
	if c.Pooling == PoolRank {
		if err := m.loadClassHead(); err != nil {
			return nil, err
		}
	}
	if err := m.loadRopeFactors(a); err != nil {
		return nil, err
	}
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		if err := m.loadLayer(i, a); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// loadRopeFactors reads the RoPE frequency factors the architecture may
// have, as llama.cpp does: rope_freqs unless the scaling is longrope,
// rope_factors_long and rope_factors_short when it is (or always, for
// Phi-3). Each is optional and holds RopeDims/2 values.
func (m *Model) loadRopeFactors(a arch) error {
	c := &m.Config
	if !a.ropeFactors {
		return nil
	}
	var err error
	n := c.RopeDims / 2
	if a.factorsLongShort || c.RopeScaling == "longrope" {
		if m.ropeLong, err = optionalVector(m.File, "rope_factors_long.weight", n); err != nil {
			return err
		}
		m.ropeShort, err = optionalVector(m.File, "rope_factors_short.weight", n)
		return err
	}
	m.ropeFreqs, err = optionalVector(m.File, "rope_freqs.weight", n)
	return err
}

// loadLayer reads the weights of layer i.
func (m *Model) loadLayer(i int, a arch) error {
	c, f, l := &m.Config, m.File, &m.layers[i]
	p := fmt.Sprintf("blk.%d.", i)
	qDim, kvDim := c.Heads*c.HeadDim, c.KVDim()
	var err error
	if _, ok := f.Tensor(p + "attn_qkv.weight"); ok {
		// One fused projection: the query rows, then the key rows, then
		// the value rows; its parts are views of it.
		qkv, err := linearLayer(f, p+"attn_qkv", qDim+2*kvDim, c.Embd)
		if err != nil {
			return err
		}
		l.q, l.k, l.v = qkv.rows(0, qDim), qkv.rows(qDim, qDim+kvDim), qkv.rows(qDim+kvDim, qDim+2*kvDim)
	} else {
		for _, t := range []struct {
			dst  *linear
			name string
			rows int
		}{{&l.q, "attn_q", qDim}, {&l.k, "attn_k", kvDim}, {&l.v, "attn_v", kvDim}} {
			if *t.dst, err = linearLayer(f, p+t.name, t.rows, c.Embd); err != nil {
				return err
			}
		}
	}
	if l.o, err = linearLayer(f, p+"attn_output", c.Embd, qDim); err != nil {
		return err
	}
	if a.moe != nil {
		if l.moe, err = m.loadExperts(p, a.moe); err != nil {
			return err
		}
	} else if a.fusedGateUp {
		// ffn_up holds the gate rows, then the up rows.
		gateUp, err := linearLayer(f, p+"ffn_up", 2*c.FF, c.Embd)
		if err != nil {
			return err
		}
		l.gate, l.up = gateUp.rows(0, c.FF), gateUp.rows(c.FF, 2*c.FF)
	} else {
		if l.gate, err = linearLayer(f, p+"ffn_gate", c.FF, c.Embd); err != nil {
			return err
		}
		if l.up, err = linearLayer(f, p+"ffn_up", c.FF, c.Embd); err != nil {
			return err
		}
	}
	if a.moe == nil {
		if l.down, err = linearLayer(f, p+"ffn_down", c.Embd, c.FF); err != nil {
			return err
		}
	}
	ffnNorm := "ffn_norm.weight"
	if a.ffnNorm != "" {
		ffnNorm = a.ffnNorm
	}
	for _, t := range []struct {
		dst  *[]float32
		name string
		n    int
		want bool
	}{
		{&l.attnNorm, "attn_norm.weight", c.Embd, true},
		{&l.ffnNorm, ffnNorm, c.Embd, true},
		{&l.sinks, "attn_sinks.weight", c.Heads, a.sinks},
		{&l.qNorm, "attn_q_norm.weight", c.HeadDim, a.qkNorm},
		{&l.kNorm, "attn_k_norm.weight", c.HeadDim, a.qkNorm},
		{&l.attnPostNorm, "post_attention_norm.weight", c.Embd, a.postNorms},
		{&l.ffnPostNorm, "post_ffw_norm.weight", c.Embd, a.postNorms},
	} {
		if !t.want {
			continue
		}
		if *t.dst, err = vector(f, p+t.name, t.n); err != nil {
			return err
		}
	}
	return nil
}

// Params counts the model's parameters. total is every element of the
// file's tensors, as llama.cpp counts a model's parameters (tied
// embeddings once). active is what one token computes with: in a mixture
// of experts, the total less the share of the routed experts' weights a
// token does not use, (Experts-ExpertsUsed)/Experts of them. A dense
// model's counts are equal.
func (m *Model) Params() (total, active int64) {
	return m.count(gguf.TensorInfo.Elems)
}

// WeightBytes is Params in bytes of the file: what a forward pass of one
// token reads at least, active, and the whole, total.
func (m *Model) WeightBytes() (total, active int64) {
	return m.count(func(t gguf.TensorInfo) int64 { return t.Size })
}

// count sums size over the file's tensors, and over those a token
// computes with.
func (m *Model) count(size func(gguf.TensorInfo) int64) (total, active int64) {
	var routed int64
	for _, t := range m.File.Tensors {
		total += size(t)
		if m.routed[t.Name] {
			routed += size(t)
		}
	}
	c := &m.Config
	if c.Experts == 0 {
		return total, total
	}
	return total, total - routed*int64(c.Experts-c.ExpertsUsed)/int64(c.Experts)
}

// Open memory-maps and loads the GGUF model at path.
func Open(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := Load(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Close releases the model's file mapping. No Runner may use it afterwards.
func (m *Model) Close() error { return m.File.Close() }

// matrix returns the named 2-D weight as rows x cols (GGML shape [cols, rows]).
func matrix(f *gguf.File, name string, rows, cols int) (tensor.Matrix, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return tensor.Matrix{}, fmt.Errorf("tensor %s is missing", name)
	}
	if len(t.Shape) != 2 || t.Shape[0] != cols || t.Shape[1] != rows {
		return tensor.Matrix{}, fmt.Errorf("tensor %s has shape %v, want [%d %d]", name, t.Shape, cols, rows)
	}
	return weightMatrix(name, t, rows, cols)
}

// weightMatrix returns the data of tensor t, named name, as a matrix of
// rows x cols, whatever its shape (the caller checked it).
func weightMatrix(name string, t gguf.Tensor, rows, cols int) (tensor.Matrix, error) {
	if _, ok := quant.VecDotType(t.Type); !ok {
		return tensor.Matrix{}, fmt.Errorf("tensor %s: type %s is not supported", name, t.Type)
	}
	m := tensor.Matrix{Type: t.Type, Rows: rows, Cols: cols, Data: t.Data}
	if err := m.Validate(); err != nil {
		return tensor.Matrix{}, fmt.Errorf("tensor %s: %w", name, err)
	}
	return m, nil
}

// linearLayer returns the linear layer name: its weight name.weight as rows
// x cols and, when the file has it, its bias name.bias of rows values.
func linearLayer(f *gguf.File, name string, rows, cols int) (linear, error) {
	w, err := matrix(f, name+".weight", rows, cols)
	if err != nil {
		return linear{}, err
	}
	bias, err := optionalVector(f, name+".bias", rows)
	if err != nil {
		return linear{}, err
	}
	return linear{w: w, bias: bias}, nil
}

// optionalVector is vector, or nil when the file has no tensor name.
func optionalVector(f *gguf.File, name string, n int) ([]float32, error) {
	if _, ok := f.Tensor(name); !ok {
		return nil, nil
	}
	return vector(f, name, n)
}

// vector returns the named 1-D weight converted to float32 (norm weights are
// tiny, so a copy costs nothing and keeps the kernels on one type).
func vector(f *gguf.File, name string, n int) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", name)
	}
	if len(t.Shape) != 1 || t.Shape[0] != n {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d]", name, t.Shape, n)
	}
	v := make([]float32, n)
	if err := quant.Dequantize(t.Type, v, t.Data); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return v, nil
}
