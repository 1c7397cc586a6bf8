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
}

// Table is the block table of token t's sequence.
func (p Paging) Table(t int) []int32 { return p.Tables[p.Seq[t]] }

// Slot is where token t's keys and values go: a block id and a slot in it.
func (p Paging) Slot(t, blockSize int) (block, slot int) {
	pos := int(p.Pos[t])
	return int(p.Table(t)[pos/blockSize]), pos % blockSize
}

// RoPE describes rotary position embedding as GGML applies it: in every
// head, pair i of the first Dims dimensions turns by the angle
// FreqScale * pos * Base^(-2i/Dims). Adding a field (llama3's per-pair
// frequency factors, YaRN's ramp) keeps the zero value meaning "none", so
// existing descriptions keep their meaning.
type RoPE struct {
	Dims      int     // leading dimensions of each head that rotate; even
	Base      float32 // the frequency base
	FreqScale float32 // 1/linear scaling factor; 1 is no scaling
	// Neox rotates the pairs (x[i], x[i+Dims/2]) (GPT-NeoX, Qwen, Gemma)
	// instead of adjacent pairs (x[2i], x[2i+1]) (LLaMA).
	Neox bool
}

// Attention describes the attention of one layer over a paged cache.
// Fields that later architectures need (a sliding window, soft-capping of
// the scores) are added with a zero value that means "none".
type Attention struct {
	// Heads is the number of query heads, a multiple of the cache's KV
	// heads: each KV head serves Heads/KVHeads consecutive query heads
	// (grouped-query attention).
	Heads int
	// Scale multiplies every query-key dot product before the softmax,
	// usually 1/sqrt(HeadDim).
	Scale float32
}
