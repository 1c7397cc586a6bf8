package tensor

// Paging places the T tokens of a batch in a paged key/value cache: token t
// belongs to sequence Seq[t] and sits at position Pos[t] of it, and
// position p of sequence s lives in slot p%BlockSize of block
// Tables[s][p/BlockSize]. Under causal attention token t attends to
// positions 0..Pos[t] of its own sequence. The slices are the caller's and
// are only read.
type Paging struct {
	Pos    []int32   // per token
	Seq    []int32   // per token
	Tables [][]int32 // per sequence: block ids covering positions 0..max Pos
	// Prompt, per sequence and optional (nil or short: 0), is the length of
	// the sequence's prompt: its tokens at positions below it are prompt
	// tokens, which a backend may compute with the arithmetic its peers use
	// for prompts (the CPU backend: see Backend.Attention). It depends on
	// the request only, never on how its tokens are batched, so a token's
	// result stays the same in any batch.
	Prompt []int32
}

// PromptLen is Prompt[seq], 0 when Prompt does not cover seq.
func (p Paging) PromptLen(seq int32) int32 {
	if int(seq) < len(p.Prompt) {
		return p.Prompt[seq]
	}
	return 0
}

// Table is the block table of token t's sequence.
func (p Paging) Table(t int) []int32 { return p.Tables[p.Seq[t]] }

// Slot is where token t's keys and values go: a block id and a slot in it.
func (p Paging) Slot(t, blockSize int) (block, slot int) {
	pos := int(p.Pos[t])
	return int(p.Table(t)[pos/blockSize]), pos % blockSize
}

// RoPE describes rotary position embedding as GGML applies it (ggml_rope_ext):
// in every head, pair i of the first Dims dimensions turns by the angle
// FreqScale * pos * Base^(-2i/Dims), with the long-context extensions of
// Scaling when it is set. Fields added for one model family keep the zero
// value meaning "none", so existing descriptions keep their meaning.
type RoPE struct {
	Dims      int     // leading dimensions of each head that rotate; even
	Base      float32 // the frequency base
	FreqScale float32 // 1/linear scaling factor; 1 is no scaling
	// Neox rotates the pairs (x[i], x[i+Dims/2]) (GPT-NeoX, Qwen, Gemma)
	// instead of adjacent pairs (x[2i], x[2i+1]) (LLaMA).
	Neox bool
	// Scaling, when not nil, holds frequency factors, a magnitude factor
	// and YaRN. It is read-only and may be shared. (A pointer keeps the
	// plain description small: it is passed by value per layer.)
	Scaling *RoPEScaling
}

// RoPEScaling are the extensions of ggml_rope_ext beyond a linear
// frequency scale: pair i's unscaled angle is divided by FreqFactors[i],
// the cosine and sine are multiplied by AttnFactor, and YaRN blends the
// scaled and unscaled angles.
type RoPEScaling struct {
	// FreqFactors, when not nil, holds Dims/2 divisors of the pairs'
	// angles: Llama 3's rope_freqs, Phi-3's long or short factors.
	FreqFactors []float32
	// AttnFactor multiplies the cosine and sine of every angle (0 means
	// 1): YaRN's magnitude correction and the rope.scaling.attn_factor of
	// long-context Phi-3 models.
	AttnFactor float32
	// YaRN, when ExtFactor is not zero, blends the scaled angle with the
	// unscaled one per pair (the ramp between the correction dimensions of
	// BetaFast and BetaSlow over OrigContext) and multiplies AttnFactor by
	// 1 + 0.1*ln(1/FreqScale), as ggml's rope_yarn does.
	YaRN YaRN
}

// YaRN holds the parameters of YaRN context extension (ggml's ext_factor,
// n_ctx_orig, beta_fast and beta_slow). The zero value is "no YaRN".
type YaRN struct {
	ExtFactor          float32
	OrigContext        int
	BetaFast, BetaSlow float32
}

// Identity reports whether s changes nothing: no factors, magnitude 1, no
// YaRN (a nil s included).
func (s *RoPEScaling) Identity() bool {
	return s == nil || s.FreqFactors == nil && (s.AttnFactor == 0 || s.AttnFactor == 1) && s.YaRN.ExtFactor == 0
}

// Attention describes the attention of one layer over a paged cache.
// Fields that later architectures need keep a zero value that means "none".
type Attention struct {
	// Heads is the number of query heads, a multiple of the cache's KV
	// heads: each KV head serves Heads/KVHeads consecutive query heads
	// (grouped-query attention).
	Heads int
	// Scale multiplies every query-key dot product before the softmax,
	// usually 1/sqrt(HeadDim); 1 when the model scales its queries itself.
	Scale float32
	// Window, when positive, is a sliding window: the token at position p
	// attends only to positions p-Window+1..p (Mistral-style and Gemma's
	// local layers; llama.cpp's LLAMA_SWA_TYPE_STANDARD).
	Window int
	// SoftCap, when positive, caps the scaled scores s smoothly:
	// s = SoftCap * tanh(s/SoftCap) before the softmax (Gemma 2's
	// attn_logit_softcapping).
	SoftCap float32
	// Sinks, when not nil, holds one logit per query head (Heads values,
	// gpt-oss's attn_sinks) that joins its softmax's denominator as a
	// position with a zero value: out = Σ e^s_p v_p / (Σ e^s_p + e^sink).
	// Read-only; it may be shared.
	Sinks []float32
}

// Gating is how a mixture-of-experts router turns its logits into expert
// weights.
type Gating int

const (
	// GatingSoftmax: a softmax over every expert's logit; the chosen
	// experts' probabilities are their weights (Qwen2-MoE, Qwen3-MoE).
	GatingSoftmax Gating = iota
	// GatingSoftmaxChosen: the experts with the largest logits are
	// chosen, and a softmax over their logits alone weighs them (gpt-oss).
	GatingSoftmaxChosen
)

// Routing describes how a mixture-of-experts layer routes a token, as
// llama.cpp's build_moe_ffn does: the Used experts of the largest
// probabilities (or logits) among Experts are chosen, in descending order,
// and weighted by Gating. With Norm the chosen weights are divided by their
// sum (clamped below at 2^-14, as llama.cpp avoids a division by zero);
// then, unless Scale is 0 or 1, multiplied by Scale.
type Routing struct {
	Experts, Used int
	Gating        Gating
	Norm          bool
	Scale         float32
}
