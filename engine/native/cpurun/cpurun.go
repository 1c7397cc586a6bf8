// Package cpurun computes the native engine's forward passes on the CPU
// backend: a native.Compute whose runners are engine/model's forward pass
// over an engine/backend/cpu Backend, with the KV cache in host memory.
//
// It is the one place where the engine meets the CPU backend: engine/native
// defines what it needs of a backend (native.Runner) and never imports one,
// and the wiring (the rill command, tests) chooses this package or another
// backend's.
package cpurun

import (
	"context"

	"rill/engine/backend/cpu"
	"rill/engine/model"
	"rill/engine/native"
	"rill/engine/tensor"
)

// Compute is the CPU backend for one engine: one worker pool, shared by
// the runners of the engine's model and draft model, which take turns.
type Compute struct {
	be *cpu.Backend
}

// New starts a CPU backend's worker pool (opts.Threads goroutines, default
// GOMAXPROCS) for an engine's runners. Close stops it.
func New(opts cpu.Options) *Compute {
	return &Compute{be: cpu.New(opts)}
}

// NewRunner implements native.Compute: m's forward pass on the backend, for
// batches of up to spec.MaxTokens tokens, over a host KV cache of
// spec.Blocks blocks. The backend keeps its own copy of the weights it
// repacks (cpu.Backend.Prepare) and lets m's file give their pages back.
func (c *Compute) NewRunner(m *model.Model, spec native.RunnerSpec) (native.Runner, error) {
	var kv *model.KV
	var err error
	if spec.WindowBlocks > 0 {
		kv, err = model.NewSplitKVOn(c.be, &m.Config, spec.KVType, spec.Blocks, spec.WindowBlocks, spec.BlockSize)
	} else {
		kv, err = model.NewKVOn(c.be, &m.Config, spec.KVType, spec.Blocks, spec.BlockSize)
	}
	if err != nil {
		return nil, err
	}
	r := model.NewRunner(m, c.be, spec.MaxTokens)
	if spec.ContextLength > 0 {
		r.SetContextLength(spec.ContextLength)
	}
	host, _ := kv.Memory().(*tensor.HostKV)
	if kv.Split() {
		host = nil // a block's bytes would miss the sliding layers: no transfers
	}
	return &runner{r: r, kv: kv, host: host}, nil
}

// Close stops the worker pool. The runners must not be used afterwards;
// later calls do nothing.
func (c *Compute) Close() error {
	c.be.Close()
	return nil
}

// runner is one model's forward pass and its KV cache.
type runner struct {
	r    *model.Runner
	kv   *model.KV
	host *tensor.HostKV // kv's memory, for block transfers; nil if not host memory
}

// Forward implements native.Runner. A pass on the CPU is not interrupted:
// ctx is not consulted.
func (r *runner) Forward(_ context.Context, b *model.Batch) ([]float32, error) {
	return r.r.Forward(b, r.kv)
}

// CopyBlock implements native.Runner.
func (r *runner) CopyBlock(dst, src, n int) { r.kv.CopyBlock(dst, src, n) }

// CopyWindowBlock implements native.Runner.
func (r *runner) CopyWindowBlock(dst, src, n int) { r.kv.CopyWindowBlock(dst, src, n) }

// BlockLayout implements native.BlockTransfer: the host cache's layout,
// or "" if the backend keeps the cache elsewhere.
func (r *runner) BlockLayout() string {
	if r.host == nil {
		return ""
	}
	return r.host.BlockLayout()
}

// BlockBytes implements native.BlockTransfer.
func (r *runner) BlockBytes() int { return r.host.BlockBytes() }

// ReadBlock implements native.BlockTransfer.
func (r *runner) ReadBlock(dst []byte, id int) { r.host.ReadBlock(dst, id) }

// WriteBlock implements native.BlockTransfer.
func (r *runner) WriteBlock(id int, src []byte) { r.host.WriteBlock(id, src) }

// Pool implements native.Pooler. A pass on the CPU is not interrupted:
// ctx is not consulted.
func (r *runner) Pool(_ context.Context, b *model.Batch, how model.Pooling) ([]float32, error) {
	return r.r.Pool(b, r.kv, how)
}
