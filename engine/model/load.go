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
}

// linear is a linear layer y = x·Wᵀ + bias.
type linear struct {
	w    tensor.Matrix
	bias []float32 // w.Rows values; nil when the layer has none
}

// layer is the weights of one transformer block. Optional steps are nil
// when the architecture or the file does not have them.
type layer struct {
	attnNorm     []float32
	q, k, v, o   linear
	qNorm, kNorm []float32 // per-head RMS norms of queries and keys (HeadDim), or nil
	ffnNorm      []float32
	gate, up     linear
	down         linear
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
	if _, ok := f.Tensor("output.weight"); ok {
		if m.output, err = linearLayer(f, "output", c.VocabSize, c.Embd); err != nil {
			return nil, err
		}
	} else {
		m.output.w = m.tokEmbd // tied embeddings
		if m.output.bias, err = optionalVector(f, "output.bias", c.VocabSize); err != nil {
			return nil, err
		}
	}
	qDim := c.Heads * c.HeadDim
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		for _, t := range []struct {
			dst        *linear
			name       string
			rows, cols int
		}{
			{&l.q, "attn_q", qDim, c.Embd},
			{&l.k, "attn_k", c.KVDim(), c.Embd},
			{&l.v, "attn_v", c.KVDim(), c.Embd},
			{&l.o, "attn_output", c.Embd, qDim},
			{&l.gate, "ffn_gate", c.FF, c.Embd},
			{&l.up, "ffn_up", c.FF, c.Embd},
			{&l.down, "ffn_down", c.Embd, c.FF},
		} {
			if *t.dst, err = linearLayer(f, p+t.name, t.rows, t.cols); err != nil {
				return nil, err
			}
		}
		for _, t := range []struct {
			dst  *[]float32
			name string
			n    int
			want bool
		}{
			{&l.attnNorm, "attn_norm.weight", c.Embd, true},
			{&l.ffnNorm, "ffn_norm.weight", c.Embd, true},
			{&l.qNorm, "attn_q_norm.weight", c.HeadDim, a.qkNorm},
			{&l.kNorm, "attn_k_norm.weight", c.HeadDim, a.qkNorm},
		} {
			if !t.want {
				continue
			}
			if *t.dst, err = vector(f, p+t.name, t.n); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
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
