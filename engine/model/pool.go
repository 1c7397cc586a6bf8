package model

import (
	"fmt"

	"rill/engine/gguf"
)

// Pooling is how a sequence's hidden states become one vector, numbered
// as GGUF's {arch}.pooling_type numbers them (llama.cpp's enum).
type Pooling int

// The pooling types. PoolNone (also a missing key) marks a model that
// generates text rather than embeds it.
const (
	// PoolDefault asks for the file's pooling_type (an Encoder's Embed).
	PoolDefault Pooling = -1
	PoolNone    Pooling = 0
	PoolMean    Pooling = 1
	PoolCLS     Pooling = 2 // the first token's state
	PoolLast    Pooling = 3 // the last token's state (decoder embedders: Qwen3-Embedding)
	PoolRank    Pooling = 4 // a classification head's score (rerankers)
)

// String names p as llama.cpp's --pooling flag does.
func (p Pooling) String() string {
	switch p {
	case PoolDefault:
		return "default"
	case PoolNone:
		return "none"
	case PoolMean:
		return "mean"
	case PoolCLS:
		return "cls"
	case PoolLast:
		return "last"
	case PoolRank:
		return "rank"
	}
	return fmt.Sprintf("pooling(%d)", int(p))
}

// poolingFromGGUF reads {arch}.pooling_type; a missing key is PoolNone.
func poolingFromGGUF(md *gguf.Metadata, arch string) (Pooling, error) {
	v, ok := md.Uint(arch + ".pooling_type")
	if !ok {
		return PoolNone, nil
	}
	if v > uint64(PoolRank) {
		return PoolNone, fmt.Errorf("gguf: %s.pooling_type = %d is not a known pooling", arch, v)
	}
	return Pooling(v), nil
}

// Pool runs b through the model as Forward does, writing its keys and
// values into kv, and returns, for each sequence of b (len(b.Tables)), one
// vector of Embd floats pooled from the final-normed hidden states of that
// sequence's tokens in this batch: their mean (PoolMean), the state of its
// position 0 (PoolCLS; zeros when the batch lacks it) or of its last token
// in the batch (PoolLast). A sequence without tokens in b gets zeros. The
// vectors are not normalised. A caller that splits a sequence over several
// batches combines their results: means weighted by their token counts,
// the first batch's CLS, the last batch's last state. The returned slice is
// the Runner's, valid until its next call. b.Logits is ignored.
func (r *Runner) Pool(b *Batch, kv *KV, how Pooling) ([]float32, error) {
	if how != PoolMean && how != PoolCLS && how != PoolLast {
		return nil, fmt.Errorf("pool: %s pooling is not supported", how)
	}
	if err := r.hidden(b, kv); err != nil {
		return nil, err
	}
	c := &r.m.Config
	T, E, S := len(b.Tokens), c.Embd, len(b.Tables)
	x := r.xn[:T*E]
	r.be.RMSNorm(x, r.x[:T*E], r.m.outNorm, c.NormEps)
	if cap(r.hid) < S*E {
		r.hid = make([]float32, S*E)
		r.logits = make([]float32, S*c.VocabSize)
	}
	out := r.hid[:S*E]
	clear(out)
	counts := make([]int, S)
	for i := range T {
		s := int(b.Seq[i])
		row, dst := x[i*E:(i+1)*E], out[s*E:(s+1)*E]
		switch how {
		case PoolMean:
			for j, v := range row {
				dst[j] += v
			}
		case PoolCLS:
			if b.Pos[i] == 0 {
				copy(dst, row)
			}
		case PoolLast:
			copy(dst, row) // tokens of a sequence come in position order
		}
		counts[s]++
	}
	if how == PoolMean {
		for s, n := range counts {
			if n > 0 {
				inv := 1 / float32(n)
				for j := range out[s*E : (s+1)*E] {
					out[s*E+j] *= inv
				}
			}
		}
	}
	return out, nil
}
