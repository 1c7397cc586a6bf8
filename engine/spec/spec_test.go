package spec

import (
	"math/rand/v2"
	"slices"
	"testing"

	"rill/engine"
	"rill/engine/sample"
)

func TestVerifyGreedy(t *testing.T) {
	t.Parallel()
	// Vocabulary of 4; each row's argmax is given.
	row := func(best int) []float32 {
		r := []float32{0, 0, 0, 0}
		r[best] = 5
		return r
	}
	rows := slices.Concat(row(2), row(1), row(3), row(0))
	tests := []struct {
		name     string
		draft    []int32
		accepted int
		next     int
	}{
		{"all accepted, bonus from the last row", []int32{2, 1, 3}, 3, 0},
		{"first rejected", []int32{1, 1, 3}, 0, 2},
		{"second rejected", []int32{2, 0, 3}, 1, 1},
		{"empty draft", nil, 0, 2},
	}
	for _, tc := range tests {
		s := sample.New(engine.Sampling{}, 4, 1)
		n := len(tc.draft)
		a, next := Verify(s, rows[:(n+1)*4], 4, tc.draft, nil)
		if a != tc.accepted || next != tc.next {
			t.Errorf("%s: accepted %d next %d, want %d %d", tc.name, a, next, tc.accepted, tc.next)
		}
	}
}

// TestVerifyFollowsTarget draws many single-step verifications of a random
// draft and checks (χ²) that the first emitted token follows the target
// distribution p, for deterministic drafts and for drafts sampled from q.
func TestVerifyFollowsTarget(t *testing.T) {
	t.Parallel()
	logits := []float32{1.5, 0.2, -0.3, 1.0, 0.0, -1.0}
	V := len(logits)
	rows := slices.Concat(logits, logits) // draft of 1 token: 2 rows
	ref := sample.New(engine.Sampling{Temperature: 1}, V, 1)
	p := slices.Clone(ref.Dist(logits))
	q := []float32{0.05, 0.4, 0.3, 0.05, 0.1, 0.1} // a poor draft model

	for _, mode := range []string{"deterministic", "draft model"} {
		s := sample.New(engine.Sampling{Temperature: 1}, V, 42)
		r := rand.New(rand.NewPCG(7, 7))
		const draws = 60000
		counts := make([]int, V)
		accepted := 0
		for range draws {
			var d int32
			var qs [][]float32
			if mode == "draft model" {
				u, acc := r.Float64(), 0.0
				for i, qi := range q {
					acc += float64(qi)
					if u < acc {
						d = int32(i)
						break
					}
				}
				qs = [][]float32{q}
			} else {
				d = int32(r.IntN(V)) // any guess at all
			}
			a, next := Verify(s, rows, V, []int32{d}, qs)
			first := next
			if a == 1 {
				first = int(d)
				accepted++
			}
			counts[first]++
		}
		chi := 0.0
		for i := range V {
			e := float64(p[i]) * draws
			chi += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
		}
		// χ² critical value for 5 degrees of freedom at p = 1e-4.
		if chi > 25.74 {
			t.Errorf("%s: χ² = %.1f; counts %v, want proportions %v", mode, chi, counts, p)
		}
		if accepted == 0 || accepted == draws {
			t.Errorf("%s: accepted %d of %d: the test does not exercise both branches", mode, accepted, draws)
		}
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		seq  []int32
		k    int
		want []int32
	}{
		{"repeat of a trigram", []int32{1, 2, 3, 4, 5, 9, 1, 2, 3}, 3, []int32{4, 5, 9}},
		{"most recent occurrence wins", []int32{7, 8, 1, 7, 8, 2, 7, 8}, 2, []int32{2, 7}},
		{"longest suffix wins", []int32{5, 3, 4, 6, 2, 3, 4, 9, 5, 3, 4}, 2, []int32{6, 2}},
		{"no match", []int32{1, 2, 3}, 4, nil},
		{"cut at the end of the context", []int32{1, 2, 1}, 4, []int32{2, 1}},
	}
	for _, tc := range tests {
		got := Lookup{MinN: 1, MaxN: 4}.Propose(nil, tc.seq, tc.seq, true, tc.k)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPrediction(t *testing.T) {
	t.Parallel()
	p := &Prediction{Tokens: []int32{10, 11, 12, 13, 14, 15}}
	if got := p.Propose(nil, 3); !slices.Equal(got, []int32{10, 11, 12}) {
		t.Fatalf("first proposal %v", got)
	}
	out := []int32{10, 11, 99} // diverged after two tokens
	p.Advance(out, 3)
	if got := p.Propose(nil, 3); got != nil {
		t.Fatalf("lost, but proposed %v", got)
	}
	out = append(out, 13) // back on track at 13
	p.Advance(out, 1)
	if got := p.Propose(nil, 3); !slices.Equal(got, []int32{14, 15}) {
		t.Fatalf("after realigning: %v, want [14 15]", got)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := Backoff{Max: 4}
	if k := b.Next(); k != 4 {
		t.Fatalf("first k = %d", k)
	}
	for range 3 {
		b.Record(b.Next(), 0)
	}
	paused := 0
	for range 4 {
		if b.Next() == 0 {
			paused++
		}
	}
	if paused == 0 {
		t.Fatal("three rejections in a row did not pause drafting")
	}
	for range 10 {
		if k := b.Next(); k > 0 {
			b.Record(k, k)
		}
	}
	if k := b.Next(); k != 4 {
		t.Fatalf("after full acceptances k = %d, want 4", k)
	}

}
