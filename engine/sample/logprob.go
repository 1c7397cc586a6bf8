package sample

import (
	"math"
	"slices"
)

// Logprob is one token's log-probability.
type Logprob struct {
	ID      int
	Logprob float32
}

// LogSoftmax holds the normaliser of one logits row so that log-probabilities
// of single tokens cost O(1) after one O(vocab) pass. The log-probabilities
// are those of the model's raw distribution: before penalties, temperature and
// filters, as OpenAI and vLLM report them by default.
type LogSoftmax struct {
	logits []float32
	lse    float64 // log(sum(exp(l)))
}

// NewLogSoftmax computes the normaliser of logits, which it keeps (not copied).
// A NaN logit (a broken model or an overflow) has no probability: it is
// left out of the normaliser, as minus infinity would be, so that one NaN
// does not make every log-probability NaN.
func NewLogSoftmax(logits []float32) LogSoftmax {
	maxL := float32(math.Inf(-1))
	for _, l := range logits {
		if l > maxL { // false for NaN, which max would propagate
			maxL = l
		}
	}
	var sum float64
	for _, l := range logits {
		if !math.IsNaN(float64(l)) {
			sum += math.Exp(float64(l - maxL))
		}
	}
	return LogSoftmax{logits: logits, lse: float64(maxL) + math.Log(sum)}
}

// Of returns the log-probability of token id.
func (ls LogSoftmax) Of(id int) float32 { return float32(float64(ls.logits[id]) - ls.lse) }

// Top writes the n most likely tokens into dst[:0] (best first, ties to the
// lower id) and returns it. dst is reused when it has the capacity. Tokens
// whose logit is NaN are never among them (they have no probability), so
// fewer than n come back when fewer than n logits are numbers.
func (ls LogSoftmax) Top(n int, dst []Logprob) []Logprob {
	dst = dst[:0]
	if n <= 0 {
		return dst
	}
	n = min(n, len(ls.logits))
	// Insertion into a small sorted list: n is at most 20 here.
	for id, l := range ls.logits {
		if l != l || len(dst) == n && l <= dst[n-1].Logprob { // l != l: NaN, which no comparison orders
			continue
		}
		e := Logprob{ID: id, Logprob: l}
		i, _ := slices.BinarySearchFunc(dst, e, func(a, b Logprob) int {
			if a.Logprob > b.Logprob {
				return -1
			}
			if a.Logprob < b.Logprob {
				return 1
			}
			return a.ID - b.ID
		})
		if len(dst) < n {
			dst = append(dst, Logprob{})
		}
		copy(dst[i+1:], dst[i:len(dst)-1])
		dst[i] = e
	}
	for i := range dst {
		dst[i].Logprob = float32(float64(dst[i].Logprob) - ls.lse)
	}
	return dst
}
