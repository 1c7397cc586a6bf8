// Package spec is speculative decoding: proposers that guess the next few
// tokens of a sequence cheaply, and verification that keeps exactly the
// prefix of a guess the target model agrees with, so the output follows the
// target's distribution whatever the guesses were.
//
// Three proposers exist: a draft model (driven by the scheduler, which runs
// it batched in lockstep with the target), n-gram lookup in the sequence's
// own context, and the client's predicted output (OpenAI's Predicted
// Outputs). The last two are deterministic guesses (q = 1 for the guessed
// token), implemented here as Lookup.
//
// Accounting follows docs/design.md §3 rule 5: a step that proposes k tokens and
// keeps a of them counts a accepted and k-a rejected, and emits a+1 tokens
// (the target's own next token is not "accepted").
package spec

import (
	"math"

	"rill/engine/sample"
)

// Verify decides how much of a draft the target keeps.
//
// rows holds len(draft)+1 rows of target logits (row i is the target's
// distribution for the position of draft[i]; the last row follows the whole
// draft), each of length vocab. q, when not nil, holds the draft model's
// dense proposal distribution for each draft position; nil means the draft
// tokens were deterministic guesses (q = 1 on the guessed token).
//
// Greedy samplers accept while the draft equals the target's argmax
// (penalties included). Sampling samplers use Leviathan et al.'s rule: keep
// draft token x with probability min(1, p(x)/q(x)); on the first rejection
// draw the replacement from norm(max(0, p-q)); if everything is kept draw a
// bonus token from the last row. The emitted tokens then follow the target's
// distribution exactly.
//
// It returns the number of draft tokens accepted and the token that follows
// them. The sampler has Accept called for every accepted token and for next,
// so its penalty state stays in step with the emitted output.
func Verify(s *sample.Sampler, rows []float32, vocab int, draft []int32, q [][]float32) (accepted int, next int) {
	for i, d := range draft {
		row := rows[i*vocab : (i+1)*vocab]
		if s.Greedy() {
			t := s.Sample(row)
			if t != int(d) {
				s.Accept(t)
				return i, t
			}
			s.Accept(t)
			continue
		}
		p := s.Dist(row)
		px := float64(p[d])
		qx := 1.0
		if q != nil {
			qx = float64(q[i][d])
		}
		if qx > 0 && s.Uniform() < math.Min(1, px/qx) {
			s.Accept(int(d))
			continue
		}
		// Rejected: the residual distribution max(0, p - q).
		if q == nil {
			p[d] = 0
		} else {
			for j := range p {
				p[j] = max(0, p[j]-q[i][j])
			}
		}
		t := s.SampleDist(p)
		if t < 0 { // p == q exactly: any draw from p is right
			t = s.Sample(row)
		}
		s.Accept(t)
		return i, t
	}
	last := rows[len(draft)*vocab : (len(draft)+1)*vocab]
	t := s.Sample(last)
	s.Accept(t)
	return len(draft), t
}

// Lookup proposes tokens by finding the longest suffix of the sequence that
// occurred before in a reference and proposing what followed it there.
// N-gram prompt lookup uses the sequence's own context as the reference;
// Predicted Outputs use the client's predicted tokens.
type Lookup struct {
	// MinN and MaxN bound the suffix length matched (defaults 1 and 4).
	MinN, MaxN int
}

// Propose appends to dst up to k tokens that followed the longest (up to
// MaxN, at least MinN) suffix of seq found in ref, preferring the most recent
// occurrence. When ref is seq itself, the suffix's own position does not
// count. It returns dst unchanged when nothing matches.
func (l Lookup) Propose(dst []int32, seq, ref []int32, self bool, k int) []int32 {
	minN, maxN := l.MinN, l.MaxN
	if minN <= 0 {
		minN = 1
	}
	if maxN < minN {
		maxN = max(minN, 4)
	}
	if k <= 0 || len(seq) == 0 {
		return dst
	}
	for n := min(maxN, len(seq)); n >= minN; n-- {
		suffix := seq[len(seq)-n:]
		// The last start in ref whose n tokens equal suffix and that has at
		// least one token after it (excluding the suffix itself when
		// searching the sequence's own context).
		end := len(ref) - n
		if self {
			end = len(seq) - n - 1
		}
		for start := end; start >= 0; start-- {
			if start+n >= len(ref) || !equal(ref[start:start+n], suffix) {
				continue
			}
			follow := ref[start+n:]
			return append(dst, follow[:min(k, len(follow))]...)
		}
	}
	return dst
}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Backoff adapts how many tokens a sequence drafts from how many of its
// recent drafts were kept, so that a proposer that keeps guessing wrong costs
// little: after repeated full rejections it drafts less, down to pausing for
// a few steps, and it grows back when drafts are accepted.
type Backoff struct {
	Max   int // the configured draft length k
	k     int
	pause int // steps left without drafting
	miss  int // consecutive steps with nothing accepted
}

// Next returns how many tokens to draft this step (0: skip drafting).
func (b *Backoff) Next() int {
	if b.k == 0 && b.pause == 0 && b.miss == 0 {
		b.k = b.Max
	}
	if b.pause > 0 {
		b.pause--
		return 0
	}
	return b.k
}

// Record updates the state after a step that proposed proposed tokens and
// kept accepted of them.
func (b *Backoff) Record(proposed, accepted int) {
	if proposed == 0 {
		return
	}
	switch {
	case accepted == proposed:
		b.miss = 0
		b.k = min(b.Max, b.k+1)
	case accepted == 0:
		b.miss++
		b.k = max(1, b.k/2)
		if b.miss >= 3 {
			// Pause longer the longer it keeps missing, up to 16 steps.
			b.pause = min(16, 1<<min(b.miss-2, 4))
		}
	default:
		b.miss = 0
		b.k = max(1, min(b.Max, accepted+1))
	}
}

// Prediction proposes from a client's predicted output, following it while
// the generated text agrees with it and realigning (on the longest recent
// suffix of the output, up to 4 tokens) when it does not.
type Prediction struct {
	Tokens []int32
	pos    int // next predicted token; -1 while lost
	done   int // prediction tokens already matched or skipped (realignment looks after them)
}

// Propose appends up to k predicted tokens to dst.
func (p *Prediction) Propose(dst []int32, k int) []int32 {
	if p.pos < 0 || p.pos >= len(p.Tokens) || k <= 0 {
		return dst
	}
	return append(dst, p.Tokens[p.pos:min(len(p.Tokens), p.pos+k)]...)
}

// Advance moves past the last n tokens of output, which were just emitted.
func (p *Prediction) Advance(output []int32, n int) {
	for i := len(output) - n; i < len(output); i++ {
		t := output[i]
		if p.pos >= 0 && p.pos < len(p.Tokens) && p.Tokens[p.pos] == t {
			p.pos++
			p.done = p.pos
			continue
		}
		p.pos = p.realign(output[:i+1])
	}
}

// realign finds the longest suffix (at most 4 tokens) of out in the
// prediction after the part already used, and returns the index after it.
func (p *Prediction) realign(out []int32) int {
	for n := min(4, len(out)); n >= 1; n-- {
		suffix := out[len(out)-n:]
		for start := p.done; start+n <= len(p.Tokens); start++ {
			if equal(p.Tokens[start:start+n], suffix) {
				p.done = start + n
				return start + n
			}
		}
	}
	return -1
}
