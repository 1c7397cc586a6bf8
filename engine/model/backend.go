package model

import "rill/engine/tensor"

// Backend computes the operations of a forward pass. engine/model never
// imports a backend: engine/backend/cpu (the numeric reference) implements
// this interface, and the caller hands one to NewRunner.
//
// It is how this package's forward pass drives the CPU, one operation at a
// time over host memory. The engine's seam to a backend is a step higher,
// a whole forward pass (native.Runner, which a Runner and its KV make for
// the CPU in engine/native/cpurun), so that a device backend keeps weights,
// activations and the KV cache in its own memory and fuses as it likes
// rather than implementing these operations.
//
// Activations are float32, row-major: a batch of T tokens is T rows of
// equal width, token t's row at [t*width, (t+1)*width). The model owns every
// slice it passes; an operation reads its inputs and writes dst within the
// call and keeps no reference afterwards. Unless an operation says so, dst
// must not overlap an input it does not equal. Weights (tensor.Matrix) are
// read-only views that outlive the Runner; the KV cache is memory the
// backend allocated (NewKVCache) and only its operations touch.
//
// Operations are synchronous: when one returns, dst holds its result. How a
// backend splits the work (threads, tiles, a batch of T tokens at once) is
// its own business; results must not depend on it, and a token's results
// must not depend on the other tokens of its batch, so that batching never
// changes a sequence's numbers. Shapes are the caller's contract: a call
// with inconsistent lengths is a bug in engine/model and may panic, while
// memory that is not what the backend expects (a cache of another
// backend) or work it cannot do is reported as an error.
//
// A Backend runs one forward pass at a time; Runners sharing one (a target
// and its draft model) take turns.
type Backend interface {
	// Linear multiplies T activation rows of w.Cols values by the
	// transpose of w: dst[t*w.Rows+r] = Σ_c w[r,c]·x[t*w.Cols+c]. It is
	// every projection of the model, so a backend may convert x (to the
	// weight's dot-product format, as llama.cpp does), tile or block over
	// the T rows as it likes. w's type is one the model loader admits (F32,
	// F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K).
	Linear(dst []float32, w tensor.Matrix, x []float32, T int)

	// Linears is Linear for matrices that read the same x (a layer's
	// queries, keys and values; its gate and up): dst[i] = x·ws[i]ᵀ for
	// each i, the same bits as len(ws) calls of Linear. A backend may
	// convert x once for all of them. len(dst) == len(ws).
	Linears(dst [][]float32, ws []tensor.Matrix, x []float32, T int)

	// LinearBatch is Linear for several matrices, each with its own
	// activations: dst[i] = xs[i]·ws[i]ᵀ over ts[i] rows, the same bits as
	// len(ws) calls of Linear. It is the experts of a mixture, each with
	// its tokens, so a backend may run the small ones as one job.
	// len(dst) == len(xs) == len(ts) == len(ws).
	LinearBatch(dst [][]float32, ws []tensor.Matrix, xs [][]float32, ts []int)

	// Embed writes row rows[i] of table, as float32, to dst[i*table.Cols:]:
	// the token-embedding lookup.
	Embed(dst []float32, table tensor.Matrix, rows []int32) error

	// RMSNorm normalises each row of len(weight) values of x:
	// dst = x / sqrt(mean(x²) + eps) * weight. len(x) is a multiple of
	// len(weight) (several rows, or several heads of a row); dst may be x.
	RMSNorm(dst, x, weight []float32, eps float32)

	// RoPE rotates, in place, T = len(pos) rows of heads*headDim values:
	// row t holds the heads of the token at position pos[t]. rope may
	// carry frequency factors, a magnitude factor and YaRN (see
	// tensor.RoPE); a backend applies them as ggml_rope_ext does.
	RoPE(x []float32, pos []int32, heads, headDim int, rope tensor.RoPE)

	// Add sets dst = a + b elementwise (equal lengths); dst may be a or b.
	Add(dst, a, b []float32)

	// AddBias adds bias to each row of len(bias) values of x, in place:
	// the bias of a linear layer. len(x) is a multiple of len(bias).
	AddBias(x, bias []float32)

	// SwiGLU sets dst = silu(gate) * up elementwise, silu(g) = g/(1+e^-g)
	// (equal lengths); dst may be gate or up.
	SwiGLU(dst, gate, up []float32)

	// GeGLU sets dst = gelu(gate) * up elementwise with GELU's tanh
	// approximation, 0.5g(1+tanh(sqrt(2/pi)(g+0.044715g³))), as llama.cpp
	// evaluates it (equal lengths); dst may be gate or up.
	GeGLU(dst, gate, up []float32)

	// SwiGLUOAI sets dst = x/(1+e^(-alpha*x)) * (y+1) elementwise with
	// x = min(gate, limit) and y = clamp(up, -limit, limit), gpt-oss's
	// activation, as ggml's swiglu_oai evaluates it (equal lengths); dst
	// may be gate or up.
	SwiGLUOAI(dst, gate, up []float32, alpha, limit float32)

	// Scale sets dst = x * s elementwise (equal lengths); dst may be x.
	Scale(dst, x []float32, s float32)

	// SoftCap replaces each value v of x by softCap*tanh(v/softCap)
	// (softCap > 0): Gemma 2's logit soft-capping.
	SoftCap(x []float32, softCap float32)

	// Route chooses the experts of T tokens from their router logits, as
	// r describes (tensor.Routing): logits holds T rows of r.Experts
	// values, which the backend may overwrite; ids and weights receive T
	// rows of r.Used expert ids and their weights, each row in descending
	// order of the router's preference.
	Route(ids []int32, weights []float32, logits []float32, r tensor.Routing)

	// Combine mixes the outputs of T = len(rows)/k tokens' experts: row t
	// of dst (width = len(dst)/T values) becomes
	// Σ_j weights[t*k+j] · row rows[t*k+j] of src, j = 0..k-1, each
	// product rounded to float32 and the sum taken in order of j, as
	// llama.cpp weighs and adds a token's expert outputs. dst must not
	// overlap src.
	Combine(dst, src []float32, rows []int32, weights []float32, k int)

	// Sigmoid sets dst = 1/(1+e^-x) elementwise (equal lengths); dst may
	// be x.
	Sigmoid(dst, x []float32)

	// NewKVCache allocates a zeroed paged key/value cache in the backend's
	// memory.
	NewKVCache(spec tensor.KVSpec) (tensor.KVCache, error)

	// StoreKV writes the keys k and values v of layer of the T tokens that
	// pg places (T rows of KVHeads*HeadDim values each) into their slots
	// of kv, converted to the cache's element type.
	StoreKV(kv tensor.KVCache, layer int, k, v []float32, pg tensor.Paging) error

	// Attention computes causal attention of layer for the T tokens that
	// pg places: q holds T rows of at.Heads*HeadDim query values, rotated;
	// out receives as many rows. Token t attends to positions 0..Pos[t] of
	// its own sequence (the last at.Window of them when at.Window > 0),
	// which must all be in kv (this batch's keys and values stored by
	// StoreKV first); with at.SoftCap > 0 the scaled scores s are capped,
	// SoftCap*tanh(s/SoftCap), before the softmax; with at.Sinks each query
	// head's sink logit joins its softmax's denominator. Over an F16 cache it
	// accumulates as llama.cpp's CPU flash attention does; over an F32
	// cache it is float32 attention.
	Attention(out, q []float32, kv tensor.KVCache, layer int, at tensor.Attention, pg tensor.Paging) error
}

// Preparer is a Backend that keeps some weights in a layout of its own,
// made once (llama.cpp's CPU backend repacks Q4_0 so for its AVX
// kernels). NewRunner hands it every weight matrix of the model that
// Linear will multiply; Prepare must be idempotent, since several Runners
// (a target and its draft, or one per test) may share the Backend and a
// model. It returns the matrices of ws it holds a copy of (made now or
// before), whose data it will not read again: NewRunner lets the model's
// file take their pages back (gguf.File.Evict). The matrices outlive the
// Backend's use of them.
type Preparer interface {
	Prepare(ws []tensor.Matrix) (copied []tensor.Matrix)
}
