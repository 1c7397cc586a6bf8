package model_test

import (
	"os/exec"
	"strings"
	"testing"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/quant"
	"rill/engine/tensor"
	"rill/engine/testmodel"
)

// The CPU backend is a model.Backend.
var _ model.Backend = (*cpu.Backend)(nil)

// TestNoBackendImport: engine/model computes only through the Backend
// interface; it imports no backend, directly or through another package.
func TestNoBackendImport(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "rill/engine/model").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "rill/engine/model" {
		t.Fatalf("go list -deps printed %q, want the package last", out)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "rill/engine/backend/") {
			t.Errorf("engine/model depends on %s", dep)
		}
	}
}

// foreignKV is a cache of some other backend's memory, which the CPU
// backend cannot read.
type foreignKV struct{ spec tensor.KVSpec }

func (f *foreignKV) Spec() tensor.KVSpec       { return f.spec }
func (f *foreignKV) CopyBlock(dst, src, n int) {}

// deviceBackend is the CPU backend with the cache allocation of a device
// backend: its memory is not host memory.
type deviceBackend struct{ *cpu.Backend }

func (deviceBackend) NewKVCache(s tensor.KVSpec) (tensor.KVCache, error) {
	return &foreignKV{spec: s}, nil
}

// TestForeignKV: a KV cache in memory the backend cannot read is an error
// of the forward pass, not a crash; the same pass over the backend's own
// memory works.
func TestForeignKV(t *testing.T) {
	t.Parallel()
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m := fromSpec(t, testmodel.Target(quant.F32))
	b := &model.Batch{Tokens: []int32{1, 2}, Pos: []int32{0, 1}, Seq: []int32{0, 0}, Tables: [][]int32{{0}}, Logits: []int32{1}}

	foreign, err := model.NewKVOn(deviceBackend{be}, &m.Config, model.KVF16, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := model.NewRunner(m, be, 2).Forward(b, foreign); err == nil || !strings.Contains(err.Error(), "host memory") {
		t.Fatalf("Forward over another backend's cache: err = %v, want a host memory error", err)
	}

	own, err := model.NewKVOn(be, &m.Config, model.KVF16, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := model.NewRunner(m, be, 2).Forward(b, own)
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != m.Config.VocabSize {
		t.Fatalf("%d logits, want %d", len(logits), m.Config.VocabSize)
	}
}

// preparing records what NewRunner hands a Preparer.
type preparing struct {
	*cpu.Backend
	got [][]tensor.Matrix
}

func (p *preparing) Prepare(ws []tensor.Matrix) []tensor.Matrix {
	p.got = append(p.got, ws)
	return p.Backend.Prepare(ws)
}

// TestNewRunnerPrepares: a Backend that prepares weights is handed every
// matrix the forward pass multiplies (each layer's seven projections and
// the output matrix) once per Runner, and the Runner's logits are those
// of a backend that prepares nothing, up to the last bits in which the
// packed kernels' arithmetic differs (the CPU backend's tests pin it).
func TestNewRunnerPrepares(t *testing.T) {
	t.Parallel()
	m := fromSpec(t, testmodel.Target(quant.Q4_0))
	be := &preparing{Backend: cpu.New(cpu.Options{Threads: 1})}
	defer be.Close()
	r := model.NewRunner(m, be, 2)
	if len(be.got) != 1 {
		t.Fatalf("Prepare called %d times by one NewRunner, want 1", len(be.got))
	}
	if got, want := len(be.got[0]), 7*m.Config.Layers+1; got != want {
		t.Fatalf("Prepare got %d matrices, want %d", got, want)
	}
	for i, w := range be.got[0] {
		if w.Type != quant.Q4_0 || w.Rows == 0 || w.Cols != m.Config.Embd && w.Cols != m.Config.FF && w.Cols != m.Config.Heads*m.Config.HeadDim {
			t.Fatalf("matrix %d: %s %dx%d is not a projection of the model", i, w.Type, w.Rows, w.Cols)
		}
	}

	plain := cpu.New(cpu.Options{Threads: 1})
	defer plain.Close()
	b := &model.Batch{Tokens: []int32{1, 2}, Pos: []int32{0, 1}, Seq: []int32{0, 0}, Tables: [][]int32{{0}}, Logits: []int32{1}}
	logits := func(be model.Backend, r *model.Runner) []float32 {
		kv, err := model.NewKVOn(be, &m.Config, model.KVF16, 1, 16)
		if err != nil {
			t.Fatal(err)
		}
		l, err := r.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), l...)
	}
	got, want := logits(be, r), logits(plain, model.NewRunner(m, plain, 2))
	for i := range want {
		if d := got[i] - want[i]; d > 1e-3 || d < -1e-3 {
			t.Fatalf("logit %d: %g prepared, %g not", i, got[i], want[i])
		}
	}
}
