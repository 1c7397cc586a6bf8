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
	output  tensor.Matrix // VocabSize rows of Embd; tokEmbd when tied
}

type layer struct {
	attnNorm   []float32
	wq, wk, wv tensor.Matrix
	wo         tensor.Matrix
	ffnNorm    []float32
	wGate, wUp tensor.Matrix
	wDown      tensor.Matrix
}

// Load reads a model from an open GGUF file. The Model takes ownership of f.
func Load(f *gguf.File) (*Model, error) {
	cfg, err := ConfigFromGGUF(f.Metadata)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, File: f}
	c := &cfg
	if m.tokEmbd, err = matrix(f, "token_embd.weight", c.VocabSize, c.Embd); err != nil {
		return nil, err
	}
	if m.outNorm, err = vector(f, "output_norm.weight", c.Embd); err != nil {
		return nil, err
	}
	if _, ok := f.Tensor("output.weight"); ok {
		if m.output, err = matrix(f, "output.weight", c.VocabSize, c.Embd); err != nil {
			return nil, err
		}
	} else {
		m.output = m.tokEmbd // tied embeddings
	}
	qDim := c.Heads * c.HeadDim
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		for _, t := range []struct {
			dst        *tensor.Matrix
			name       string
			rows, cols int
		}{
			{&l.wq, "attn_q.weight", qDim, c.Embd},
			{&l.wk, "attn_k.weight", c.KVDim(), c.Embd},
			{&l.wv, "attn_v.weight", c.KVDim(), c.Embd},
			{&l.wo, "attn_output.weight", c.Embd, qDim},
			{&l.wGate, "ffn_gate.weight", c.FF, c.Embd},
			{&l.wUp, "ffn_up.weight", c.FF, c.Embd},
			{&l.wDown, "ffn_down.weight", c.Embd, c.FF},
		} {
			if *t.dst, err = matrix(f, p+t.name, t.rows, t.cols); err != nil {
				return nil, err
			}
		}
		if l.attnNorm, err = vector(f, p+"attn_norm.weight", c.Embd); err != nil {
			return nil, err
		}
		if l.ffnNorm, err = vector(f, p+"ffn_norm.weight", c.Embd); err != nil {
			return nil, err
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
