package sched

import (
	"slices"
	"testing"

	"rill/engine/kvcache"
)

func newWindowScheduler(t *testing.T, blocks, windowBlocks, window int, opts Options) (*Scheduler, *kvcache.Manager, *kvcache.Manager) {
	t.Helper()
	cache, err := kvcache.New(kvcache.Options{NumBlocks: blocks, BlockSize: blockSize})
	if err != nil {
		t.Fatal(err)
	}
	win, err := kvcache.New(kvcache.Options{NumBlocks: windowBlocks, BlockSize: blockSize, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	opts.Window = win
	return New(cache, opts), cache, win
}

func checkWindow(t *testing.T, cache, win *kvcache.Manager, groups ...*Group) {
	t.Helper()
	var live, wlive []*kvcache.Seq
	for _, g := range groups {
		for _, seq := range g.seqs {
			live, wlive = append(live, &seq.KV), append(wlive, &seq.WindowKV)
		}
	}
	if err := cache.Check(live...); err != nil {
		t.Fatal(err)
	}
	if err := win.Check(wlive...); err != nil {
		t.Fatalf("window pool: %v", err)
	}
}

// TestWindowPoolHoldsTheWindow runs one long sequence: the full pool holds
// all its positions, the window pool only the window before the step and
// the step's tokens.
func TestWindowPoolHoldsTheWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		window, budget int
		prompt, steps  int
		wantWindowMost int
	}{
		// Decoding at position p holds positions p-7..p: at most 3 blocks of 4.
		{"decode", 8, 512, 3, 80, 3},
		// A chunk of 8 from a block boundary: 2 blocks of window, 2 of chunk.
		{"chunked prefill", 8, 8, 64, 4, 4},
		// Window 5: positions p-4..p span at most 2 blocks.
		{"small window", 5, 512, 3, 80, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, cache, win := newWindowScheduler(t, 64, 64, tc.window, Options{MaxBatchTokens: tc.budget})
			g := group(t, s, prompt(1, tc.prompt), 1)
			seq := g.seqs[0]
			most := 0
			for range tc.steps {
				s.Schedule()
				most = max(most, seq.WindowKV.Held())
				p := &s.plan
				s.Update(p, sample(p, 0))
				checkWindow(t, cache, win, g)
			}
			if most != tc.wantWindowMost {
				t.Errorf("window pool: held at most %d blocks, want %d", most, tc.wantWindowMost)
			}
			if got, want := seq.KV.Held(), cache.BlocksFor(seq.Computed); got != want {
				t.Errorf("full pool: holds %d blocks for %d computed tokens, want %d", got, seq.Computed, want)
			}
			s.finish(seq)
			checkWindow(t, cache, win)
			if win.FreeBlocks() != 64 || cache.FreeBlocks() != 64 {
				t.Errorf("after finish: %d and %d blocks free", cache.FreeBlocks(), win.FreeBlocks())
			}
		})
	}
}

// TestWindowPrefixHit checks that a prefix hit counts only what both pools
// hold: where the window pool evicted the window before the full pool's
// hit, the hit is cut to where the window is whole, and the full pool's
// table with it.
func TestWindowPrefixHit(t *testing.T) {
	t.Parallel()
	// A window pool of 6 blocks cycles through its blocks while the first
	// prompt (40 tokens in chunks of 8) is computed: of its chain, only
	// the last blocks are still cached when it ends.
	s, cache, win := newWindowScheduler(t, 64, 6, 8, Options{MaxBatchTokens: 8})
	p := prompt(1, 40)
	a := group(t, s, slices.Clone(p), 1)
	for range 6 {
		step(s, 0)
	}
	s.finish(a.seqs[0])
	checkWindow(t, cache, win)

	tests := []struct {
		name   string
		prompt []int32
		cached int
	}{
		// Positions 29..35 (blocks 7, 8), read from 36 on, are cached.
		{"same prompt", slices.Clone(p), 36},
		// The full pool holds 20 tokens; the window before them (blocks 3
		// and 4) was evicted, and so was every earlier window.
		{"window evicted", append(slices.Clone(p[:21]), prompt(500, 10)...), 0},
	}
	for _, tc := range tests {
		full := &kvcache.Seq{}
		fullHit := cache.Match(full, tc.prompt)
		cache.Free(full)
		g := group(t, s, tc.prompt, 1)
		plan := step(s, 0)
		seq := g.seqs[0]
		if g.CachedTokens() != tc.cached || plan.Seqs[0].Start != tc.cached {
			t.Errorf("%s: cached %d, computed from %d; want %d (the full pool alone holds %d)", tc.name, g.CachedTokens(), plan.Seqs[0].Start, tc.cached, fullHit)
		}
		if tc.cached < fullHit && seq.KV.Indexed() > seq.Computed/blockSize {
			t.Errorf("%s: the full table kept %d indexed blocks past the hit", tc.name, seq.KV.Indexed())
		}
		checkWindow(t, cache, win, g)
		for !seq.Done() && seq.Computed < len(tc.prompt) {
			step(s, 0)
		}
		s.finish(seq)
		checkWindow(t, cache, win)
	}
}

// TestWindowForks checks that further choices share the window pool's
// blocks as they share the full pool's, and copy the same partial block.
func TestWindowForks(t *testing.T) {
	t.Parallel()
	s, cache, win := newWindowScheduler(t, 64, 64, 8, Options{})
	g := group(t, s, prompt(1, 30), 3)
	p := s.Schedule()
	forks := s.Update(p, sample(p, 0))
	if len(forks) != 2 {
		t.Fatalf("%d forks, want 2", len(forks))
	}
	leader := g.seqs[0]
	for _, f := range forks {
		c := f.Child
		if !f.Copy || f.WindowSrc != leader.WindowKV.Blocks[7] || f.WindowDst != c.WindowKV.Blocks[7] || f.WindowDst == f.WindowSrc {
			t.Fatalf("fork copies window block %d to %d; leader's partial block is %d", f.WindowSrc, f.WindowDst, leader.WindowKV.Blocks[7])
		}
		if !slices.Equal(c.WindowKV.Blocks[:7], leader.WindowKV.Blocks[:7]) {
			t.Fatalf("child's window table %v does not share the leader's %v", c.WindowKV.Blocks, leader.WindowKV.Blocks)
		}
	}
	checkWindow(t, cache, win, g)
	for range 20 {
		step(s, 0)
		checkWindow(t, cache, win, g)
	}
	s.Abort(g)
	checkWindow(t, cache, win)
	if win.FreeBlocks() != 64 {
		t.Fatalf("%d window blocks free after abort", win.FreeBlocks())
	}
}
