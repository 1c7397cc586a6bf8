package model_test

import (
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// moeModels are the mixture-of-experts test models, by the file names
// their oracles (in familyOracles) were recorded on: qwen3moe (16
// experts, 4 used, weights renormalised, query and key norms) and qwen2moe
// (8 experts, 2 used, weights as routed, a gated shared expert, projection
// biases).
var moeModels = map[string]testmodel.Spec{
	"rill-tiny-qwen3moe-F32.gguf": testmodel.Qwen3MoE(quant.F32),
	"rill-tiny-qwen2moe-F32.gguf": testmodel.Qwen2MoE(quant.F32),
}
