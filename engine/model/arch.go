package model

import (
	"maps"
	"slices"
	"strings"
)

// arch is what one architecture changes in the llama recipe. Every
// architecture runs the same blocks over the same Backend ops (forward.go):
// norm, projections, RoPE, paged attention, output projection, residual
// add; norm, gated feed-forward, residual add. What differs is described
// here and shows in the weights a layer has: a step whose weights a layer
// lacks is skipped, so the forward pass reads as one recipe rather than a
// chain of per-architecture branches.
//
// Linear layers take a bias wherever the GGUF file has one (Qwen2's query,
// key and value projections; llama.cpp loads them the same way), so biases
// need no entry here.
type arch struct {
	// ropeNeox: RoPE rotates the pairs (x[i], x[i+d/2]) of each head
	// (llama.cpp's LLAMA_ROPE_TYPE_NEOX) rather than adjacent pairs.
	ropeNeox bool
	// qkNorm: every layer has attn_q_norm and attn_k_norm, an RMS norm of
	// each query and each key head (HeadDim weights, shared by the heads)
	// applied after the projection and before RoPE.
	qkNorm bool
}

// archs are the architectures engine/model runs, by general.architecture.
var archs = map[string]arch{
	"llama": {},
	"qwen2": {ropeNeox: true},
	"qwen3": {ropeNeox: true, qkNorm: true},
}

// archNames lists the supported architectures, for error messages.
func archNames() string {
	return strings.Join(slices.Sorted(maps.Keys(archs)), ", ")
}
