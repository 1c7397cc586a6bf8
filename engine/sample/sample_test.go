package sample

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"rill/engine"
)

func TestGreedy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		logits []float32
		p      engine.Sampling
		accept []int
		want   int
	}{
		{"argmax", []float32{0, 3, 1, 2}, engine.Sampling{}, nil, 1},
		{"ties go to the lowest id", []float32{1, 5, 5, 2}, engine.Sampling{}, nil, 1},
		{"negative logits", []float32{-3, -1, -2}, engine.Sampling{}, nil, 1},
		{"frequency penalty moves the argmax", []float32{0, 3, 2.5}, engine.Sampling{FrequencyPenalty: 0.3}, []int{1, 1}, 2},
		{"presence penalty counts once", []float32{0, 3, 2.5}, engine.Sampling{PresencePenalty: 0.4}, []int{1, 1, 1}, 1},
		{"presence penalty large enough", []float32{0, 3, 2.5}, engine.Sampling{PresencePenalty: 0.6}, []int{1}, 2},
		{"top_k 1 at temperature 1 is greedy", []float32{0, 1, 4, 2}, engine.Sampling{Temperature: 1, TopK: 1}, nil, 2},
		{"tiny top_p keeps the best", []float32{0, 1, 4, 2}, engine.Sampling{Temperature: 1, TopP: 0.01}, nil, 2},
		{"min_p 1 keeps the best", []float32{0, 1, 4, 2}, engine.Sampling{Temperature: 1, MinP: 1}, nil, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(tc.p, len(tc.logits), 7)
			for _, a := range tc.accept {
				s.Accept(a)
			}
			for range 20 {
				if got := s.Sample(tc.logits); got != tc.want {
					t.Fatalf("Sample = %d, want %d", got, tc.want)
				}
			}
		})
	}
}

func randomLogits(r *rand.Rand, n int) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 3)
	}
	return l
}

func TestSeedReproducible(t *testing.T) {
	t.Parallel()
	logits := randomLogits(rand.New(rand.NewPCG(1, 2)), 1000)
	p := engine.Sampling{Temperature: 0.9, TopP: 0.95, TopK: 200, MinP: 0.01, FrequencyPenalty: 0.5}
	run := func(seed uint64) []int {
		s := New(p, len(logits), seed)
		var out []int
		for range 64 {
			tok := s.Sample(logits)
			s.Accept(tok)
			out = append(out, tok)
		}
		return out
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed gave different tokens:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 42 and 43 gave the same 64 tokens: %v", a)
	}
}

// TestDistributionChiSquare checks that the sampled frequencies follow the
// filtered, tempered softmax (χ² test, 1e-4 significance).
func TestDistributionChiSquare(t *testing.T) {
	t.Parallel()
	logits := []float32{2, 1.5, 1, 0.5, 0, -0.5, -1, -4}
	tests := []struct {
		name string
		p    engine.Sampling
	}{
		{"temperature 1", engine.Sampling{Temperature: 1}},
		{"temperature 0.5", engine.Sampling{Temperature: 0.5}},
		{"top_k 3", engine.Sampling{Temperature: 1, TopK: 3}},
		{"top_p 0.8", engine.Sampling{Temperature: 1.3, TopP: 0.8}},
		{"min_p 0.2", engine.Sampling{Temperature: 1, MinP: 0.2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(tc.p, len(logits), 99)
			want := slices.Clone(s.Dist(logits))
			var sum float64
			for _, p := range want {
				sum += float64(p)
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("Dist sums to %v", sum)
			}
			const draws = 40000
			counts := make([]int, len(logits))
			for range draws {
				counts[s.Sample(logits)]++
			}
			chi, df := 0.0, -1
			for i, p := range want {
				if p == 0 {
					if counts[i] != 0 {
						t.Fatalf("token %d filtered out but drawn %d times", i, counts[i])
					}
					continue
				}
				e := float64(p) * draws
				chi += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
				df++
			}
			// Critical values of χ² at p = 1e-4 for df 1..7.
			crit := []float64{0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86, 29.88}
			if df >= 1 && chi > crit[df] {
				t.Fatalf("χ² = %.2f with %d degrees of freedom (critical %.2f); counts %v, want %v", chi, df, crit[df], counts, want)
			}
		})
	}
}

// TestFiltersMatchBruteForce compares top-k and top-p selection on large
// vocabularies with a full sort.
func TestFiltersMatchBruteForce(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 30 {
		n := 50 + r.IntN(5000)
		logits := randomLogits(r, n)
		if trial%3 == 0 { // plenty of exact ties
			for i := range logits {
				logits[i] = float32(math.Round(float64(logits[i])))
			}
		}
		k := 1 + r.IntN(min(100, n-1)) // k >= n filters nothing and keeps id order
		topP := 0.05 + 0.9*r.Float64()
		for _, p := range []engine.Sampling{{Temperature: 1, TopK: k}, {Temperature: 0.7, TopP: topP}} {
			s := New(p, n, 1)
			got := s.filter(logits)
			ids := make([]int32, len(got))
			for i, c := range got {
				ids[i] = c.id
			}
			slices.Sort(ids) // membership is what counts; the order is any deterministic one

			ref := New(engine.Sampling{Temperature: p.Temperature}, n, 1)
			all := slices.Clone(ref.filter(logits))
			slices.SortFunc(all, before)
			var want []int32
			if p.TopK > 0 {
				for _, c := range all[:min(k, n)] {
					want = append(want, c.id)
				}
			} else {
				need := p.TopP
				for _, c := range all {
					want = append(want, c.id)
					need -= float64(c.p)
					if need <= 0 {
						break
					}
				}
			}
			slices.Sort(want)
			if !slices.Equal(ids, want) {
				t.Fatalf("trial %d %+v: kept %d ids, want %d\n got %v\nwant %v", trial, p, len(ids), len(want), ids[:min(10, len(ids))], want[:min(10, len(want))])
			}
		}
	}
}

func TestSampleDist(t *testing.T) {
	t.Parallel()
	s := New(engine.Sampling{Temperature: 1}, 4, 3)
	dist := []float32{0, 0.25, 0, 0.75}
	counts := make([]int, 4)
	for range 4000 {
		counts[s.SampleDist(dist)]++
	}
	if counts[0] != 0 || counts[2] != 0 {
		t.Fatalf("drew tokens without mass: %v", counts)
	}
	if counts[3] < 2700 || counts[3] > 3300 {
		t.Fatalf("token 3 drawn %d/4000 times, want about 3000", counts[3])
	}
	if got := s.SampleDist([]float32{0, 0}); got != -1 {
		t.Fatalf("SampleDist of an empty distribution = %d, want -1", got)
	}
	g := New(engine.Sampling{}, 4, 3)
	if got := g.SampleDist(dist); got != 3 {
		t.Fatalf("greedy SampleDist = %d, want 3", got)
	}
}

func TestLogSoftmax(t *testing.T) {
	t.Parallel()
	logits := []float32{1, 3, 3, -2, 0.5}
	ls := NewLogSoftmax(logits)
	var sum float64
	for i := range logits {
		sum += math.Exp(float64(ls.Of(i)))
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	top := ls.Top(3, nil)
	wantIDs := []int{1, 2, 0}
	for i, w := range wantIDs {
		if top[i].ID != w || top[i].Logprob != ls.Of(w) {
			t.Fatalf("Top[%d] = %+v, want id %d logprob %v", i, top[i], w, ls.Of(w))
		}
	}
	if got := ls.Top(10, top); len(got) != len(logits) {
		t.Fatalf("Top(10) over 5 logits returned %d entries", len(got))
	}
}

// TestLogSoftmaxNaN: NaN logits (a model whose norm epsilon or RoPE base
// is NaN makes every logit NaN) have no probability: Top leaves them out
// instead of panicking on a full list, and the other tokens keep finite
// log-probabilities that sum to 1.
func TestLogSoftmaxNaN(t *testing.T) {
	t.Parallel()
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name    string
		logits  []float32
		wantIDs []int
	}{
		{"NaN after the best", []float32{1, 3, 2, nan, nan, 0.5}, []int{1, 2, 0}},
		{"NaN first", []float32{nan, 1, 3, 2, 0.5}, []int{2, 3, 1}},
		{"all NaN", []float32{nan, nan, nan, nan, nan}, nil},
		{"fewer numbers than asked", []float32{nan, 2, nan, nan, 1}, []int{1, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ls := NewLogSoftmax(tc.logits)
			top := ls.Top(3, nil)
			if len(top) != len(tc.wantIDs) {
				t.Fatalf("Top(3) = %+v, want ids %v", top, tc.wantIDs)
			}
			for i, w := range tc.wantIDs {
				if top[i].ID != w || math.IsNaN(float64(top[i].Logprob)) {
					t.Fatalf("Top(3)[%d] = %+v, want id %d with a number", i, top[i], w)
				}
			}
			if len(tc.wantIDs) == 0 {
				return
			}
			var sum float64
			for i, l := range tc.logits {
				if !math.IsNaN(float64(l)) {
					sum += math.Exp(float64(ls.Of(i)))
				}
			}
			if math.Abs(sum-1) > 1e-6 {
				t.Fatalf("the probabilities of the numbers sum to %v", sum)
			}
		})
	}
}

func TestSampleAllocs(t *testing.T) {
	logits := randomLogits(rand.New(rand.NewPCG(8, 9)), 32000)
	s := New(engine.Sampling{Temperature: 0.8, TopP: 0.9, TopK: 40}, len(logits), 1)
	if a := testing.AllocsPerRun(20, func() { s.Sample(logits) }); a != 0 {
		t.Fatalf("Sample allocates %v times per call", a)
	}
}

// TestLazyBuffers: a sampler costs no vocabulary-sized memory until it
// samples, and Release gives that memory back without changing what it
// samples (the generator and the penalty counts are kept).
func TestLazyBuffers(t *testing.T) {
	const vocab = 32000
	logits := randomLogits(rand.New(rand.NewPCG(8, 9)), vocab)
	p := engine.Sampling{Temperature: 0.8, TopP: 0.9, FrequencyPenalty: 0.5}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	samplers := make([]*Sampler, 128)
	for i := range samplers {
		samplers[i] = New(p, vocab, uint64(i))
	}
	runtime.ReadMemStats(&after)
	if perSampler := (after.TotalAlloc - before.TotalAlloc) / uint64(len(samplers)); perSampler > vocab {
		t.Fatalf("New allocates %d bytes per sampler, over the vocabulary's %d tokens", perSampler, vocab)
	}

	kept, released := New(p, vocab, 7), New(p, vocab, 7)
	for i := range 20 {
		a, b := kept.Sample(logits), released.Sample(logits)
		if a != b {
			t.Fatalf("token %d: %d kept, %d after Release", i, a, b)
		}
		kept.Accept(a)
		released.Accept(b)
		released.Release()
		if released.cands != nil || released.dense != nil || released.probs != nil {
			t.Fatal("Release kept a buffer")
		}
	}
}

func BenchmarkSample(b *testing.B) {
	logits := randomLogits(rand.New(rand.NewPCG(8, 9)), 32000)
	for _, tc := range []struct {
		name string
		p    engine.Sampling
	}{
		{"greedy", engine.Sampling{}},
		{"temp", engine.Sampling{Temperature: 0.8}},
		{"top_p", engine.Sampling{Temperature: 0.8, TopP: 0.9}},
		{"top_k_top_p", engine.Sampling{Temperature: 0.8, TopK: 40, TopP: 0.9}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := New(tc.p, len(logits), 1)
			for b.Loop() {
				s.Sample(logits)
			}
		})
	}
}
