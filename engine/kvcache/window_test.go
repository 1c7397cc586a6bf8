package kvcache

import (
	"slices"
	"testing"
)

func mustWindow(t *testing.T, blocks, bs, window int) *Manager {
	t.Helper()
	m, err := New(Options{NumBlocks: blocks, BlockSize: bs, Scope: "test", Window: window})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// prefill computes tokens in chunks as the scheduler does: reserve, commit,
// slide to the next position after each chunk.
func prefill(t *testing.T, m *Manager, s *Seq, tokens []int32, from, chunk int) {
	t.Helper()
	for c := from; c < len(tokens); c += chunk {
		end := min(c+chunk, len(tokens))
		if err := m.Reserve(s, end); err != nil {
			t.Fatalf("Reserve(%d): %v", end, err)
		}
		m.Commit(s, tokens[:end])
		m.Slide(s, end)
		if err := m.Check(s); err != nil {
			t.Fatalf("after %d tokens: %v", end, err)
		}
	}
}

// TestSlideFreesOutOfWindow checks that a windowed pool keeps exactly the
// blocks of positions next-Window+1 on: the window of the next token.
func TestSlideFreesOutOfWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		window, next int
		wantHoles    int
	}{
		{8, 0, 0},
		{8, 11, 1}, // reads 4..: block 1 on
		{8, 12, 1}, // reads 5..: block 1 on
		{8, 15, 2}, // reads 8..: block 2 on
		{8, 16, 2}, // reads 9..
		{8, 40, 8}, // reads 33..
		{4, 40, 9}, // reads 37..
		{5, 40, 9}, // reads 36..: block 9
		{6, 40, 8}, // reads 35..: block 8
		{100, 40, 0},
	}
	for _, tc := range tests {
		m := mustWindow(t, 16, 4, tc.window)
		s := &Seq{}
		if err := m.Reserve(s, 40); err != nil {
			t.Fatal(err)
		}
		m.Slide(s, tc.next)
		if s.holes != tc.wantHoles || s.Held() != 10-tc.wantHoles {
			t.Errorf("window %d, next %d: %d holes, %d held; want %d holes", tc.window, tc.next, s.holes, s.Held(), tc.wantHoles)
		}
		for i, id := range s.Blocks {
			if (i < tc.wantHoles) != (id == m.Hole()) {
				t.Errorf("window %d, next %d: entry %d is %d (hole %d)", tc.window, tc.next, i, id, m.Hole())
			}
		}
		if m.FreeBlocks() != 16-10+tc.wantHoles {
			t.Errorf("window %d, next %d: %d free blocks", tc.window, tc.next, m.FreeBlocks())
		}
		if err := m.Check(s); err != nil {
			t.Error(err)
		}
	}
}

// TestWindowedSequenceHoldsItsWindow checks that a long sequence in a
// windowed pool holds a bounded number of blocks, far fewer than in a pool
// without a window.
func TestWindowedSequenceHoldsItsWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		window, chunk, tokens, wantMax int
	}{
		{8, 1, 200, 3},  // decode: the window's 7 earlier positions and the next span at most 3 blocks of 4
		{8, 16, 200, 6}, // prefill chunks of 16: the window before the chunk (2 blocks) and the chunk (4)
		{0, 16, 200, 50},
	}
	for _, tc := range tests {
		m := mustWindow(t, 64, 4, tc.window)
		s := &Seq{}
		most := 0
		toks := seqTokens(tc.tokens, 1)
		for c := 0; c < len(toks); c += tc.chunk {
			end := min(c+tc.chunk, len(toks))
			if err := m.Reserve(s, end); err != nil {
				t.Fatal(err)
			}
			most = max(most, s.Held())
			m.Commit(s, toks[:end])
			m.Slide(s, end)
		}
		if most != tc.wantMax {
			t.Errorf("window %d, chunks of %d: held at most %d blocks, want %d", tc.window, tc.chunk, most, tc.wantMax)
		}
		if err := m.Check(s); err != nil {
			t.Error(err)
		}
	}
}

// TestWindowMatch checks the hit rule of a windowed pool: a prefix counts
// only if every block its next token's window reads is cached, and never
// beyond the limit a full pool sets.
func TestWindowMatch(t *testing.T) {
	t.Parallel()
	prompt := seqTokens(41, 1) // 10 full blocks of 4 before the last token
	tests := []struct {
		name    string
		window  int
		evict   []int // blocks of the first sequence's chain to drop from the index
		limit   int
		want    int
		wantHol int
	}{
		{"all cached", 8, nil, 40, 40, 8},
		{"limited by the full pool", 8, nil, 22, 20, 3},
		{"early blocks gone do not matter", 8, []int{0, 1, 2, 3, 4}, 40, 40, 8},
		{"a block of the window gone", 8, []int{9}, 40, 36, 7},
		{"the block before the window gone", 8, []int{7}, 40, 40, 8},
		{"window of 10 reads block 7", 10, []int{7}, 40, 28, 4},
		{"no window-long run cached", 8, []int{1, 3, 5, 7, 9}, 40, 4, 0},
		{"nothing cached", 8, []int{0, 1, 3, 5, 7, 9}, 40, 0, 0},
		{"a short prefix needs no early block", 8, []int{2, 3, 4, 5, 6, 7, 8, 9}, 40, 8, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := mustWindow(t, 64, 4, tc.window)
			a := &Seq{}
			prefill(t, m, a, prompt, 0, 4)
			chain := slices.Clone(a.hashes)
			m.Free(a)
			for _, i := range tc.evict {
				id := m.index[chain[i]]
				m.takeFree(id) // hand it out for other content
				delete(m.index, chain[i])
				m.blocks[id].hashed = false
				m.pushFreeFront(id)
			}
			b := &Seq{}
			hit := m.MatchUpTo(b, prompt, tc.limit)
			if hit != tc.want || b.holes != tc.wantHol || len(b.Blocks) != hit/4 {
				t.Fatalf("hit %d with %d holes of %d entries; want %d with %d holes", hit, b.holes, len(b.Blocks), tc.want, tc.wantHol)
			}
			if err := m.Check(b); err != nil {
				t.Fatal(err)
			}
			// The rest computes from the hit on; committing it must not
			// disturb the index, and freeing leaves every block free.
			prefill(t, m, b, prompt, hit, 4)
			m.Free(b)
			if err := m.Check(); err != nil {
				t.Fatal(err)
			}
			if m.FreeBlocks() != 64 {
				t.Fatalf("%d blocks free after Free, want 64", m.FreeBlocks())
			}
		})
	}
}

// TestWindowFork checks that a fork shares the leader's window blocks and
// holes, and that both release theirs independently.
func TestWindowFork(t *testing.T) {
	t.Parallel()
	m := mustWindow(t, 32, 4, 8)
	a := &Seq{}
	prompt := seqTokens(30, 1)
	prefill(t, m, a, prompt, 0, 8)
	child, src, dst, copied, err := m.Fork(a, 30)
	if err != nil {
		t.Fatal(err)
	}
	if !copied || src != a.Blocks[7] || dst != child.Blocks[7] || child.holes != a.holes {
		t.Fatalf("fork: copied %v %d->%d, holes %d (leader %d)", copied, src, dst, child.holes, a.holes)
	}
	if err := m.Check(a, child); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Seq{a, child} {
		if err := m.Reserve(s, 40); err != nil {
			t.Fatal(err)
		}
		m.Slide(s, 40)
	}
	if err := m.Check(a, child); err != nil {
		t.Fatal(err)
	}
	m.Free(a)
	m.Free(child)
	if err := m.Check(); err != nil || m.FreeBlocks() != 32 {
		t.Fatalf("after Free: %v, %d free", err, m.FreeBlocks())
	}
}
