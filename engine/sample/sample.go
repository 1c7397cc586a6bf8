// Package sample turns a row of logits into the next token: greedy decoding,
// temperature, top-k, top-p (nucleus), min-p, OpenAI's presence and frequency
// penalties, a per-choice seeded generator, and log-probabilities.
//
// The order of operations follows vLLM and OpenAI rather than llama.cpp:
// penalties on the raw logits, then temperature, then top-k, top-p and min-p
// on the tempered distribution. Temperature 0 is greedy: the argmax of the
// penalised logits, ties to the lowest token id.
package sample

import (
	"math"
	"math/rand/v2"
	"slices"

	"rill/engine"
)

// Sampler samples the tokens of one choice. It is not safe for concurrent use.
//
// Its vocabulary-sized buffers are allocated at the first call that needs
// them and dropped by Release, so that a choice that is not running costs
// only its generator and penalty counts; between the two, Sample, Dist and
// Accept do not allocate.
type Sampler struct {
	p      engine.Sampling
	vocab  int
	rng    *rand.Rand
	counts map[int32]int32 // generated-token counts, for penalties; nil when no penalty is set
	cands  []cand          // scratch, len vocab; nil until needed
	dense  []float32       // tempered softmax, len vocab; nil until needed
	probs  []float32       // dense distribution of the last Dist call; nil until needed
}

type cand struct {
	id int32
	p  float32 // logit, then probability
}

// pcgStream is the second word of the PCG generator's seed: the seed with
// the golden-ratio constant 2^64/φ folded in, so that one 64-bit seed fills
// both words with well-mixed, different values.
const pcgStream = 0x9e3779b97f4a7c15

// New returns a sampler for a vocabulary of size vocab. seed drives the
// generator; callers derive it from the request's seed (and choice index) or
// from a random source when the request has none. It allocates no
// vocabulary-sized buffer.
func New(p engine.Sampling, vocab int, seed uint64) *Sampler {
	s := &Sampler{
		p:     p,
		vocab: vocab,
		rng:   rand.New(rand.NewPCG(seed, seed^pcgStream)),
	}
	if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
		s.counts = make(map[int32]int32)
	}
	return s
}

// Release drops the sampler's vocabulary-sized buffers (the generator and
// the penalty counts stay): call it when the choice stops running. The next
// call that needs them allocates them again.
func (s *Sampler) Release() {
	s.cands, s.dense, s.probs = nil, nil, nil
}

// Greedy reports whether this sampler takes the argmax (temperature 0).
func (s *Sampler) Greedy() bool { return s.p.Temperature <= 0 }

// Accept records a token emitted by this choice, for the penalties.
func (s *Sampler) Accept(tok int) {
	if s.counts != nil {
		s.counts[int32(tok)]++
	}
}

// Uniform returns the next number in [0,1) from this choice's generator
// (speculative decoding draws its acceptance tests from the same stream).
func (s *Sampler) Uniform() float64 { return s.rng.Float64() }

// Sample returns the next token for logits (len vocab). logits is not modified.
func (s *Sampler) Sample(logits []float32) int {
	if s.Greedy() {
		return s.argmax(logits)
	}
	if !s.filtered() {
		return s.drawDense(s.tempered(logits))
	}
	return s.draw(s.filter(logits))
}

// filtered reports whether top-k, top-p or min-p restrict the distribution.
func (s *Sampler) filtered() bool {
	return (s.p.TopK > 0 && s.p.TopK < s.vocab) || (s.p.TopP > 0 && s.p.TopP < 1) || (s.p.MinP > 0 && s.p.MinP <= 1)
}

// tempered returns softmax(penalised logits / temperature), dense, in the
// sampler's buffer.
func (s *Sampler) tempered(logits []float32) []float32 {
	if len(s.dense) < len(logits) {
		s.dense = make([]float32, max(s.vocab, len(logits)))
	}
	d := s.dense[:len(logits)]
	invT := float32(1 / s.p.Temperature)
	if s.counts == nil {
		for i, l := range logits {
			d[i] = l * invT
		}
	} else {
		for i := range logits {
			d[i] = s.penalised(logits, i) * invT
		}
	}
	softmax(d)
	return d
}

// drawDense draws from a normalised dense distribution in id order.
func (s *Sampler) drawDense(d []float32) int {
	u := float32(s.rng.Float64())
	last := 0
	for i, p := range d {
		if p <= 0 {
			continue
		}
		last = i
		u -= p
		if u < 0 {
			return i
		}
	}
	return last // rounding left a sliver of mass
}

// Dist returns the distribution Sample draws from, dense over the vocabulary
// (zero for filtered tokens). For a greedy sampler it is one-hot on the argmax.
// The slice is owned by the sampler and valid until the next call.
func (s *Sampler) Dist(logits []float32) []float32 {
	if len(s.probs) < len(logits) {
		s.probs = make([]float32, max(s.vocab, len(logits)))
	}
	p := s.probs[:len(logits)]
	if s.Greedy() {
		clear(p)
		p[s.argmax(logits)] = 1
		return p
	}
	if !s.filtered() {
		copy(p, s.tempered(logits))
		return p
	}
	clear(p)
	for _, c := range s.filter(logits) {
		p[c.id] = c.p
	}
	return p
}

// SampleDist draws a token from a dense distribution (need not be normalised),
// such as the residual distribution of a rejected speculative token. For a
// greedy sampler it returns the argmax. It returns -1 if dist has no mass.
func (s *Sampler) SampleDist(dist []float32) int {
	if s.Greedy() {
		best, bestP := -1, float32(0)
		for i, p := range dist {
			if p > bestP {
				best, bestP = i, p
			}
		}
		return best
	}
	var total float64
	for _, p := range dist {
		total += float64(p)
	}
	if total <= 0 {
		return -1
	}
	u := s.rng.Float64() * total
	last := -1
	for i, p := range dist {
		if p <= 0 {
			continue
		}
		last = i
		u -= float64(p)
		if u < 0 {
			return i
		}
	}
	return last
}

// penalised returns the logit of token i after presence and frequency penalties.
func (s *Sampler) penalised(logits []float32, i int) float32 {
	l := logits[i]
	if s.counts != nil {
		if c := s.counts[int32(i)]; c > 0 {
			l -= float32(float64(c)*s.p.FrequencyPenalty + s.p.PresencePenalty)
		}
	}
	return l
}

func (s *Sampler) argmax(logits []float32) int {
	best, bestL := 0, float32(math.Inf(-1))
	if s.counts == nil {
		for i, l := range logits {
			if l > bestL {
				best, bestL = i, l
			}
		}
		return best
	}
	for i := range logits {
		if l := s.penalised(logits, i); l > bestL {
			best, bestL = i, l
		}
	}
	return best
}

// filter applies penalties, temperature, top-k, top-p and min-p and returns
// the kept candidates with normalised probabilities, in an order that is a
// function of the logits alone (so the same seed gives the same token).
func (s *Sampler) filter(logits []float32) []cand {
	d := s.tempered(logits)
	if len(s.cands) < len(logits) {
		s.cands = make([]cand, max(s.vocab, len(logits)))
	}
	c := s.cands[:len(logits)]
	for i, p := range d {
		c[i] = cand{int32(i), p}
	}

	sorted := false
	if k := s.p.TopK; k > 0 && k < len(c) {
		c = topK(c, k)
		sorted = true
	}
	if tp := s.p.TopP; tp > 0 && tp < 1 {
		if !sorted {
			c = nucleus(c, tp)
			sorted = true
		} else {
			c = cutCumulative(c, tp)
		}
	}
	if mp := s.p.MinP; mp > 0 && mp <= 1 {
		var maxP float32
		for _, x := range c {
			maxP = max(maxP, x.p)
		}
		th := float32(mp) * maxP
		n := 0
		for _, x := range c {
			if x.p >= th {
				c[n] = x
				n++
			}
		}
		c = c[:n]
	}
	renormalise(c)
	return c
}

func (s *Sampler) draw(c []cand) int {
	u := float32(s.rng.Float64())
	for _, x := range c {
		u -= x.p
		if u < 0 {
			return int(x.id)
		}
	}
	return int(c[len(c)-1].id) // rounding left a sliver of mass
}

func renormalise(c []cand) {
	var sum float64
	for _, x := range c {
		sum += float64(x.p)
	}
	if sum <= 0 {
		return
	}
	inv := float32(1 / sum)
	for i := range c {
		c[i].p *= inv
	}
}

// before is the canonical order: probability descending, id ascending.
func before(a, b cand) int {
	switch {
	case a.p > b.p:
		return -1
	case a.p < b.p:
		return 1
	case a.id < b.id:
		return -1
	case a.id > b.id:
		return 1
	}
	return 0
}

// topK keeps the k best candidates, sorted canonically.
func topK(c []cand, k int) []cand {
	selectTop(c, k)
	c = c[:k]
	slices.SortFunc(c, before)
	return c
}

// nucleus keeps the smallest canonical prefix whose mass reaches p.
// It partitions around pivots (expected linear time) instead of sorting the
// whole vocabulary, which matters for 32k-150k vocabularies.
func nucleus(c []cand, p float64) []cand {
	lo, hi := 0, len(c) // c[:lo] is kept for sure; the answer lies in c[lo:hi]
	need := p
	for hi-lo > 64 {
		m := partition(c[lo:hi]) // c[lo:lo+m] are canonically before the rest
		var mass float64
		for _, x := range c[lo : lo+m] {
			mass += float64(x.p)
		}
		if mass >= need {
			hi = lo + m
		} else {
			need -= mass
			lo += m
		}
	}
	slices.SortFunc(c[lo:hi], before)
	n := hi
	for i := lo; i < hi; i++ {
		need -= float64(c[i].p)
		if need <= 0 {
			n = i + 1
			break
		}
	}
	// c[:n] is the nucleus, in an order that depends only on the logits
	// (partitioning is deterministic), which is all drawing needs.
	return c[:n]
}

// cutCumulative keeps the shortest prefix of canonically sorted c reaching p.
func cutCumulative(c []cand, p float64) []cand {
	var total float64
	for _, x := range c {
		total += float64(x.p)
	}
	need := p * total
	for i, x := range c {
		need -= float64(x.p)
		if need <= 0 {
			return c[:i+1]
		}
	}
	return c
}

// selectTop moves the k canonically best candidates into c[:k] (unordered).
func selectTop(c []cand, k int) {
	lo, hi := 0, len(c)
	for hi-lo > 1 {
		m := lo + partition(c[lo:hi])
		switch {
		case m == k:
			return
		case m < k:
			lo = m
		default:
			hi = m
		}
	}
}

// partition reorders c so that c[:m] are canonically before c[m:], with
// 0 < m <= len(c) whenever len(c) > 1. The pivot is the median of three.
func partition(c []cand) int {
	n := len(c)
	a, b, d := c[0], c[n/2], c[n-1]
	if before(a, b) > 0 {
		a, b = b, a
	}
	if before(b, d) > 0 {
		b = d
		if before(a, b) > 0 {
			b = a
		}
	}
	pivot := b
	i := 0
	for j := range c {
		if before(c[j], pivot) <= 0 {
			c[i], c[j] = c[j], c[i]
			i++
		}
	}
	if i == n { // everything <= pivot: split off the elements equal to it
		j := 0
		for k := range c {
			if before(c[k], pivot) < 0 {
				c[j], c[k] = c[k], c[j]
				j++
			}
		}
		if j == 0 {
			return 1
		}
		return j
	}
	return i
}
