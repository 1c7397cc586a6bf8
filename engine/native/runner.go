package native

import (
	"context"

	"rill/engine/model"
)

// Runner computes whole forward passes of one model over a paged KV cache
// of its own: the seam between the engine and a compute backend. Its unit
// is a step's batch, tokens of any number of sequences placed in the
// cache's blocks, and its result the logits the batch asks for, so that a
// backend keeps weights, activations and keys and values in its own memory
// (a GPU's) and computes a pass as it likes (fused, asynchronous inside).
// The engine's loop is its only user: one call at a time.
type Runner interface {
	// Forward runs b through the model, writing its tokens' keys and
	// values into the slots b's block tables give them, and returns
	// len(b.Logits) rows of VocabSize logits, in b.Logits' order. The rows
	// are the runner's, valid until its next call. The numbers of a
	// sequence's tokens must not depend on the rest of the batch. A runner
	// may stop early when ctx ends, with an error; the engine then fails
	// the requests of the step.
	Forward(ctx context.Context, b *model.Batch) ([]float32, error)

	// CopyBlock copies the first n token slots of block src into block
	// dst, keys and values of every layer: the copy of a partly filled
	// prompt block for a further choice that forks from it (see
	// sched.Fork).
	CopyBlock(dst, src, n int)

	// CopyWindowBlock is CopyBlock in the memory of the sliding-window
	// layers, for a runner made with RunnerSpec.WindowBlocks (a no-op
	// otherwise).
	CopyWindowBlock(dst, src, n int)
}

// RunnerSpec is what the engine makes a Runner for.
type RunnerSpec struct {
	// MaxTokens is the most tokens of one batch: the step's token budget
	// and the draft tokens on top of it.
	MaxTokens int
	// ContextLength is the longest sequence the runner serves (n_ctx):
	// long-context Phi-3 picks its RoPE factors by it.
	ContextLength int
	// The KV cache: Blocks blocks of BlockSize token slots of KVType
	// elements, numbered as engine/kvcache numbers them. A target and its
	// draft model get the same Blocks and BlockSize, so that one block id
	// names a sequence's slots in both.
	KVType    model.KVType
	Blocks    int
	BlockSize int
	// WindowBlocks, when positive, keeps the sliding-window layers of a
	// model that also has full-attention layers in a memory of their own
	// of WindowBlocks blocks (model.NewSplitKVOn), addressed by the
	// batches' WindowTables; Blocks is then the full layers' memory.
	WindowBlocks int
}

// Compute makes the Runner of each model an engine runs (its model and its
// draft model): the compute backend, which the wiring chooses (the CPU
// backend's is engine/native/cpurun). The engine takes ownership of it.
type Compute interface {
	// NewRunner returns a runner of m as spec describes, with its KV
	// cache allocated. m outlives the runner.
	NewRunner(m *model.Model, spec RunnerSpec) (Runner, error)
	// Close releases the backend and every runner it made, after the
	// engine's last pass.
	Close() error
}
