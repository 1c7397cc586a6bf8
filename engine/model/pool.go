package model

import (
	"fmt"
	"math"

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

// loadClassHead loads the classification head of a rank-pooled decoder:
// cls.output, ClassOut rows of Embd (Qwen3-Reranker's GGUF holds the "yes"
// and "no" rows of its LM head there). The dense cls layer some encoder
// rerankers put before it is not part of any decoder reranker and is
// refused rather than ignored.
func (m *Model) loadClassHead() error {
	if _, ok := m.File.Tensor("cls.weight"); ok {
		return fmt.Errorf("gguf: a %s reranker with a dense cls layer is not supported (only cls.output)", m.Config.Arch)
	}
	t, ok := m.File.Tensor("cls.output.weight")
	if !ok {
		return fmt.Errorf("gguf: %s.pooling_type is rank but the file has no cls.output.weight", m.Config.Arch)
	}
	if len(t.Shape) != 2 || t.Shape[1] < 1 {
		return fmt.Errorf("gguf: tensor cls.output.weight has shape %v", t.Shape)
	}
	var err error
	m.clsOut, err = linearLayer(m.File, "cls.output", int(t.Shape[1]), m.Config.Embd)
	return err
}

// ClassOut is the number of outputs of the model's classification head:
// the values rank pooling gives per sequence (0 for a model not pooled by
// rank).
func (m *Model) ClassOut() int { return m.clsOut.w.Rows }

// PoolWidth is the number of values Runner.Pool gives per sequence for
// how: Embd, or ClassOut for PoolRank.
func (m *Model) PoolWidth(how Pooling) int {
	if how == PoolRank {
		return m.ClassOut()
	}
	return m.Config.Embd
}

// Pool runs b through the model as Forward does, writing its keys and
// values into kv, and returns, for each sequence of b (len(b.Tables)),
// PoolWidth(how) values pooled from the final-normed hidden states of that
// sequence's tokens in this batch: their mean (PoolMean), the state of its
// position 0 (PoolCLS; zeros when the batch lacks it) or of its last token
// in the batch (PoolLast). PoolRank (a file with a classification head)
// takes the last token's state, as a decoder reranker reads its verdict
// after the whole pair, through the head, then for architectures whose
// llama.cpp graph does so (qwen3) through a softmax: Qwen3-Reranker's
// first value is then P("yes"). A sequence without tokens in b gets zeros.
// The vectors are not normalised. A caller that splits a sequence over
// several batches combines their results: means weighted by their token
// counts, the first batch's CLS, the last batch's last state or rank. The
// returned slice is the Runner's, valid until its next call. b.Logits is
// ignored.
func (r *Runner) Pool(b *Batch, kv *KV, how Pooling) ([]float32, error) {
	switch how {
	case PoolMean, PoolCLS, PoolLast:
	case PoolRank:
		if r.m.ClassOut() == 0 {
			return nil, fmt.Errorf("pool: rank pooling needs a classification head, which model %q lacks", r.m.Config.Name)
		}
	default:
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
		case PoolLast, PoolRank:
			copy(dst, row) // tokens of a sequence come in position order
		}
		counts[s]++
	}
	switch how {
	case PoolMean:
		for s, n := range counts {
			if n > 0 {
				inv := 1 / float32(n)
				for j := range out[s*E : (s+1)*E] {
					out[s*E+j] *= inv
				}
			}
		}
	case PoolRank:
		return r.rank(out, counts), nil
	}
	return out, nil
}

// rank puts the last states hid (one row of Embd per sequence) through
// the classification head, into r.logits; a sequence without tokens
// (counts) gets zeros.
func (r *Runner) rank(hid []float32, counts []int) []float32 {
	S, n := len(counts), r.m.ClassOut()
	if cap(r.logits) < S*n {
		r.logits = make([]float32, S*n)
	}
	scores := r.logits[:S*n]
	r.linear(scores, &r.m.clsOut, hid, S)
	for s, c := range counts {
		row := scores[s*n : (s+1)*n]
		switch {
		case c == 0:
			clear(row)
		case archs[r.m.Config.Arch].rankSoftmax:
			softmax(row)
		}
	}
	return scores
}

// softmax turns v into probabilities, in place.
func softmax(v []float32) {
	m := v[0]
	for _, x := range v[1:] {
		m = max(m, x)
	}
	sum := 0.0
	for i, x := range v {
		e := math.Exp(float64(x - m))
		v[i] = float32(e)
		sum += e
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / sum)
	}
}
