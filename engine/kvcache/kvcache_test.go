package kvcache

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func seqTokens(n int, base int32) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = base + int32(i)
	}
	return t
}

func mustNew(t *testing.T, blocks, bs int) *Manager {
	t.Helper()
	m, err := New(Options{NumBlocks: blocks, BlockSize: bs, Scope: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// run computes a prompt the way the scheduler does: match, reserve, commit.
func run(t *testing.T, m *Manager, prompt []int32) (*Seq, int) {
	t.Helper()
	s := &Seq{}
	hit := m.Match(s, prompt)
	m.Observe(len(prompt), hit)
	if err := m.Reserve(s, len(prompt)); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	m.Commit(s, prompt)
	return s, hit
}

func TestPrefixHits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		first      []int32
		second     []int32
		wantSecond int
	}{
		{"same prompt: all full blocks but the last token", seqTokens(50, 1), seqTokens(50, 1), 48},
		{"exact multiple keeps the last block out", seqTokens(48, 1), seqTokens(48, 1), 32},
		{"one token", seqTokens(1, 1), seqTokens(1, 1), 0},
		{"17 tokens hit one block", seqTokens(17, 1), seqTokens(17, 1), 16},
		{"longer second prompt", seqTokens(40, 1), seqTokens(100, 1), 32},
		{"diverging in block 2", seqTokens(64, 1), append(seqTokens(20, 1), seqTokens(44, 500)...), 16},
		{"different first block", seqTokens(64, 1), append([]int32{9999}, seqTokens(63, 2)...), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := mustNew(t, 64, 16)
			a, hit := run(t, m, tc.first)
			if hit != 0 {
				t.Fatalf("cold prompt hit %d tokens", hit)
			}
			m.Free(a)
			b, hit := run(t, m, tc.second)
			if hit != tc.wantSecond {
				t.Fatalf("second prompt hit %d tokens, want %d", hit, tc.wantSecond)
			}
			if err := m.Check(b); err != nil {
				t.Fatal(err)
			}
			st := m.Stats()
			if st.Hits != int64(tc.wantSecond) || st.Queries != int64(len(tc.first)+len(tc.second)) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestCommitCountsNewBlocks pins what Commit returns: the full blocks it
// newly indexed, never a partial block, a block matched from the cache, one
// it committed before or one whose content another sequence indexed first.
func TestCommitCountsNewBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// prompts run one after the other, each freed before the next.
		prompts [][]int32
		// hits and added are each prompt's Match and Commit results.
		hits, added []int
	}{
		{"cold: the full blocks, not the partial last one", [][]int32{seqTokens(50, 1)}, []int{0}, []int{3}},
		{"shorter than a block: nothing", [][]int32{seqTokens(15, 1)}, []int{0}, []int{0}},
		{"the same prompt again adds nothing", [][]int32{seqTokens(50, 1), seqTokens(50, 1)}, []int{0, 48}, []int{3, 0}},
		// The second computes the last block again (its last token needs
		// logits) and finds it indexed.
		{"exact multiple: written whole, read but the last block", [][]int32{seqTokens(48, 1), seqTokens(48, 1)}, []int{0, 32}, []int{3, 0}},
		{"a longer prompt adds the blocks past the shared prefix", [][]int32{seqTokens(40, 1), seqTokens(100, 1)}, []int{0, 32}, []int{2, 4}},
		{"a different prompt adds its own", [][]int32{seqTokens(40, 1), seqTokens(40, 500)}, []int{0, 0}, []int{2, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := mustNew(t, 64, 16)
			for i, p := range tc.prompts {
				s := &Seq{}
				hit := m.Match(s, p)
				if err := m.Reserve(s, len(p)); err != nil {
					t.Fatal(err)
				}
				added := m.Commit(s, p)
				if hit != tc.hits[i] || added != tc.added[i] {
					t.Fatalf("prompt %d: hit %d, added %d blocks; want %d, %d", i, hit, added, tc.hits[i], tc.added[i])
				}
				if again := m.Commit(s, p); again != 0 {
					t.Fatalf("prompt %d: committing again added %d blocks", i, again)
				}
				if s.Indexed() != len(p)/16 {
					t.Fatalf("prompt %d: %d blocks indexed, want %d", i, s.Indexed(), len(p)/16)
				}
				m.Free(s)
			}
		})
	}

	// Two live twins computed side by side: the first to commit writes.
	m := mustNew(t, 64, 16)
	p := seqTokens(40, 1)
	a, b := &Seq{}, &Seq{}
	for _, s := range []*Seq{a, b} {
		if hit := m.Match(s, p); hit != 0 {
			t.Fatalf("cold twin hit %d", hit)
		}
		if err := m.Reserve(s, len(p)); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Commit(a, p); got != 2 {
		t.Fatalf("first twin added %d blocks, want 2", got)
	}
	if got := m.Commit(b, p); got != 0 {
		t.Fatalf("second twin added %d blocks, want 0: its content was indexed", got)
	}
	if err := m.Check(a, b); err != nil {
		t.Fatal(err)
	}
}

func TestSharedWhileLive(t *testing.T) {
	t.Parallel()
	m := mustNew(t, 16, 4)
	p := seqTokens(10, 1)
	a, _ := run(t, m, p)
	b, hit := run(t, m, p)
	if hit != 8 {
		t.Fatalf("hit %d, want 8", hit)
	}
	if a.Blocks[0] != b.Blocks[0] || a.Blocks[1] != b.Blocks[1] || a.Blocks[2] == b.Blocks[2] {
		t.Fatalf("tables %v and %v: want the two full blocks shared and the partial one private", a.Blocks, b.Blocks)
	}
	if err := m.Check(a, b); err != nil {
		t.Fatal(err)
	}
	m.Free(a)
	if err := m.Check(b); err != nil {
		t.Fatal(err)
	}
	m.Free(b)
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	if m.FreeBlocks() != 16 {
		t.Fatalf("%d free blocks after freeing everything", m.FreeBlocks())
	}
}

func TestLRUKeepsRecentPrefixes(t *testing.T) {
	t.Parallel()
	m := mustNew(t, 6, 4) // room for two 9-token prompts (3 blocks each)
	p1, p2, p3 := seqTokens(9, 100), seqTokens(9, 200), seqTokens(9, 300)
	for _, p := range [][]int32{p1, p2} {
		s, _ := run(t, m, p)
		m.Free(s)
	}
	// p3 needs 3 blocks: the empty partial blocks go first, then p1's (least
	// recently freed) cached blocks.
	s3, _ := run(t, m, p3)
	m.Free(s3)
	if _, hit := run(t, m, p2); hit != 8 {
		t.Fatalf("p2, freed after p1, lost its prefix: hit %d, want 8", hit)
	}
	if m.Stats().Evictions == 0 {
		t.Fatal("no eviction counted")
	}
}

func TestReserveExhaustion(t *testing.T) {
	t.Parallel()
	m := mustNew(t, 4, 4)
	s := &Seq{}
	if err := m.Reserve(s, 17); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("Reserve 17 tokens in 16 slots: %v", err)
	}
	if len(s.Blocks) != 0 || m.FreeBlocks() != 4 {
		t.Fatal("a failed Reserve took blocks")
	}
	if err := m.Reserve(s, 16); err != nil {
		t.Fatal(err)
	}
	if err := m.Reserve(s, 16); err != nil {
		t.Fatalf("Reserve of an already covered length: %v", err)
	}
}

func TestForkCopyOnWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n        int
		wantCopy bool
	}{{10, true}, {8, false}, {3, true}}
	for _, tc := range tests {
		m := mustNew(t, 16, 4)
		parent, _ := run(t, m, seqTokens(tc.n, 1))
		child, src, dst, copied, err := m.Fork(parent, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if copied != tc.wantCopy {
			t.Fatalf("n=%d: copied=%v, want %v", tc.n, copied, tc.wantCopy)
		}
		full := tc.n / 4
		for i := range full {
			if child.Blocks[i] != parent.Blocks[i] {
				t.Fatalf("n=%d: full block %d not shared", tc.n, i)
			}
		}
		if copied && (src != parent.Blocks[full] || dst != child.Blocks[full] || src == dst) {
			t.Fatalf("n=%d: copy %d -> %d, tables %v %v", tc.n, src, dst, parent.Blocks, child.Blocks)
		}
		if err := m.Check(parent, child); err != nil {
			t.Fatal(err)
		}
		// The child continues with its own tokens and registers them.
		if err := m.Reserve(child, tc.n+8); err != nil {
			t.Fatal(err)
		}
		m.Commit(child, append(seqTokens(tc.n, 1), seqTokens(8, 900)...))
		m.Free(parent)
		m.Free(child)
		if err := m.Check(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTruncateRollsBack(t *testing.T) {
	t.Parallel()
	m := mustNew(t, 8, 4)
	s, _ := run(t, m, seqTokens(6, 1))
	if err := m.Reserve(s, 6+5); err != nil { // five draft tokens
		t.Fatal(err)
	}
	m.Truncate(s, 7) // one accepted
	if len(s.Blocks) != 2 {
		t.Fatalf("after truncate to 7 tokens: %d blocks", len(s.Blocks))
	}
	if err := m.Check(s); err != nil {
		t.Fatal(err)
	}
}

// TestRandomOps drives the manager through random workloads and checks the
// invariants after every operation.
func TestRandomOps(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	m := mustNew(t, 40, 4)
	type live struct {
		s    *Seq
		toks []int32
	}
	var seqs []live
	// added is the sum of what Commit reported: the index holds exactly
	// that, less what eviction took out of it.
	var added int64
	prefixes := [][]int32{seqTokens(30, 1), seqTokens(30, 100), seqTokens(30, 200)}
	for step := range 3000 {
		switch op := r.IntN(5); {
		case op <= 1: // new sequence from a random prefix
			p := prefixes[r.IntN(len(prefixes))]
			toks := append([]int32(nil), p[:1+r.IntN(len(p))]...)
			s := &Seq{}
			hit := m.Match(s, toks)
			if hit >= len(toks) || hit%4 != 0 {
				t.Fatalf("step %d: hit %d of %d tokens", step, hit, len(toks))
			}
			if err := m.Reserve(s, len(toks)); err != nil {
				m.Free(s)
				continue
			}
			added += int64(m.Commit(s, toks))
			seqs = append(seqs, live{s, toks})
		case op == 2 && len(seqs) > 0: // decode a few tokens
			l := &seqs[r.IntN(len(seqs))]
			n := 1 + r.IntN(6)
			if err := m.Reserve(l.s, len(l.toks)+n); err != nil {
				continue
			}
			for range n {
				l.toks = append(l.toks, int32(1000+r.IntN(3)))
			}
			added += int64(m.Commit(l.s, l.toks))
		case op == 3 && len(seqs) > 0: // fork
			l := seqs[r.IntN(len(seqs))]
			c, _, _, _, err := m.Fork(l.s, len(l.toks))
			if err != nil {
				continue
			}
			seqs = append(seqs, live{c, append([]int32(nil), l.toks...)})
		case op == 4 && len(seqs) > 0: // finish
			i := r.IntN(len(seqs))
			m.Free(seqs[i].s)
			seqs = append(seqs[:i], seqs[i+1:]...)
		}
		all := make([]*Seq, len(seqs))
		for i := range seqs {
			all[i] = seqs[i].s
		}
		if err := m.Check(all...); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if st := m.Stats(); int64(st.Cached) != added-st.Evictions {
			t.Fatalf("step %d: %d blocks indexed, but Commit reported %d added and %d were evicted", step, st.Cached, added, st.Evictions)
		}
	}
}
