package model_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// archOracle is llama.cpp's greedy decoding of rill's qwen2 and qwen3 test
// models (node-llama-cpp 3.21.1, scripts/peer/oracle.mjs on the files
// `go run ./scripts/testmodel -model qwen2 -type F32` and `-model qwen3
// -type F32` write). F32 weights keep llama.cpp's other rounding of Q8_0
// activations out of the comparison: on these prompts it alone moves the
// llama test model's Q8_0 log-probabilities by up to 3.6e-2, and a bound
// that loose would hide an architecture's mistakes.
const archOracle = "testdata/llamacpp_arch_greedy_top5.json"

// archModels are the models archOracle was recorded on, by file name.
var archModels = map[string]testmodel.Spec{
	"rill-tiny-qwen2-F32.gguf": testmodel.Qwen2(quant.F32),
	"rill-tiny-qwen3-F32.gguf": testmodel.Qwen3(quant.F32),
}

// openArchModel generates the named test model of models and checks that
// it is the very file the oracle was recorded on.
func openArchModel(models map[string]testmodel.Spec, recorded map[string]struct {
	SHA256 string `json:"sha256"`
}) func(file string) (*model.Model, error) {
	return func(file string) (*model.Model, error) {
		spec, ok := models[file]
		if !ok {
			return nil, fmt.Errorf("the oracle names %s, which no test model spec makes", file)
		}
		data, err := testmodel.Bytes(spec)
		if err != nil {
			return nil, err
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != recorded[file].SHA256 {
			return nil, fmt.Errorf("%s: the generator no longer writes the file the oracle was recorded on (sha256 %x, recorded %s)", file, sum, recorded[file].SHA256)
		}
		f, err := gguf.Parse(data)
		if err != nil {
			return nil, err
		}
		return model.Load(f)
	}
}

// TestOracleArchitectures: on qwen2 (query, key and value biases, NEOX
// RoPE) and qwen3 (per-head query and key norms, heads larger than
// Embd/Heads, NEOX RoPE) rill decodes llama.cpp's tokens and matches its
// top-5 log-probabilities within the noise of its half-precision
// attention. (Measured when recorded: medians 5e-6 to 1.1e-4, largest
// 4.8e-4.)
func TestOracleArchitectures(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.FromSlash(archOracle))
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
	if len(files.ModelFiles) != len(archModels) {
		t.Fatalf("the oracle covers %d models, want the %d of archModels", len(files.ModelFiles), len(archModels))
	}
	checkOracle(t, openArchModel(archModels, files.ModelFiles), archOracle, tolerance{1e-3, 5e-3})
}

// edited returns the GGUF file of spec with metadata keys set to new
// values (or dropped, for a nil value), and the tensors named in tensors
// replaced by F32 vectors (or dropped, for a nil vector).
func edited(t *testing.T, spec testmodel.Spec, meta map[string]any, tensors map[string][]float32) *gguf.File {
	t.Helper()
	data, err := testmodel.Bytes(spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	for _, k := range f.Metadata.Keys() {
		if v, ok := meta[k]; ok && v == nil {
			continue
		}
		v, _ := f.Metadata.Value(k)
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range meta {
		if v == nil {
			continue
		}
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors {
		tn, _ := f.Tensor(ti.Name)
		shape, typ, data := ti.Shape, ti.Type, tn.Data
		if v, ok := tensors[ti.Name]; ok {
			if v == nil {
				continue
			}
			shape, typ, data = []int{len(v)}, quant.F32, make([]byte, 4*len(v))
			if err := quant.Quantize(quant.F32, data, v); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.AddTensor(ti.Name, typ, shape, data); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	out, err := gguf.Parse(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLoadArchitectures: each architecture's extra tensors are required
// (qwen3's norms) or checked when present (qwen2's biases), and an
// architecture rill does not run is named in a clear error.
func TestLoadArchitectures(t *testing.T) {
	t.Parallel()
	qwen2, qwen3 := testmodel.Qwen2(quant.F32), testmodel.Qwen3(quant.F32)
	for _, c := range []struct {
		name    string
		spec    testmodel.Spec
		meta    map[string]any
		tensors map[string][]float32
		want    string // "" when the model must load
	}{
		{"qwen2", qwen2, nil, nil, ""},
		{"qwen3", qwen3, nil, nil, ""},
		{"qwen2 without biases", qwen2, nil, map[string][]float32{"blk.0.attn_q.bias": nil, "blk.0.attn_k.bias": nil, "blk.0.attn_v.bias": nil}, ""},
		{"qwen2 bias of the wrong size", qwen2, nil, map[string][]float32{"blk.1.attn_k.bias": make([]float32, 3)}, "tensor blk.1.attn_k.bias has shape [3], want [32]"},
		{"qwen3 without a key norm", qwen3, nil, map[string][]float32{"blk.2.attn_k_norm.weight": nil}, "tensor blk.2.attn_k_norm.weight is missing"},
		{"qwen3 query norm of the model width", qwen3, nil, map[string][]float32{"blk.0.attn_q_norm.weight": make([]float32, 64)}, "want [32]"},
		{"RMS epsilon NaN", testmodel.Target(quant.F32), map[string]any{"llama.attention.layer_norm_rms_epsilon": float32(math.NaN())}, nil, "llama.attention.layer_norm_rms_epsilon = NaN: want a positive finite number"},
		{"RMS epsilon negative", testmodel.Target(quant.F32), map[string]any{"llama.attention.layer_norm_rms_epsilon": float32(-1e-5)}, nil, "want a positive finite number"},
		{"RoPE base NaN", qwen2, map[string]any{"qwen2.rope.freq_base": float32(math.NaN())}, nil, "qwen2.rope.freq_base = NaN: want a positive finite number"},
		{"RoPE base infinite", testmodel.Target(quant.F32), map[string]any{"llama.rope.freq_base": float32(math.Inf(1))}, nil, "want a positive finite number"},
		{"unknown architecture", testmodel.Target(quant.F32), map[string]any{"general.architecture": "gpt2"}, nil, `architecture "gpt2" is not supported (supported: gemma, gemma2, gemma3, gpt-oss, llama, phi3, qwen2, qwen2moe, qwen3, qwen3moe)`},
	} {
		m, err := model.Load(edited(t, c.spec, c.meta, c.tensors))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		case err == nil:
			if want := c.spec.Arch == "qwen2" || c.spec.Arch == "qwen3"; m.Config.RopeNeox != want {
				t.Errorf("%s: RopeNeox = %v, want %v", c.name, m.Config.RopeNeox, want)
			}
			if c.spec.Arch == "qwen3" && m.Config.HeadDim != 32 {
				t.Errorf("%s: HeadDim = %d, want the key_length 32", c.name, m.Config.HeadDim)
			}
		}
	}
}
