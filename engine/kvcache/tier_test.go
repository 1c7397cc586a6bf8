package kvcache

import (
	"slices"
	"testing"
)

// tier is a tier below memory for tests: blocks by chain hash.
type tier struct {
	blocks map[uint64]Link
	puts   []int32
}

func newTier() *tier { return &tier{blocks: make(map[uint64]Link)} }

func (t *tier) save(_ int32, l Link) {
	l.Tokens = slices.Clone(l.Tokens)
	t.blocks[l.Hash] = l
}

func (t *tier) fetch(l Link) bool {
	got, ok := t.blocks[l.Hash]
	return ok && got.Parent == l.Parent && slices.Equal(got.Tokens, l.Tokens)
}

func (t *tier) put(id int32) { t.puts = append(t.puts, id) }

func TestEvictedBlocksLoadBack(t *testing.T) {
	t.Parallel()
	lower := newTier()
	m, err := New(Options{NumBlocks: 4, BlockSize: 4, Scope: "test", Evict: lower.save})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := seqTokens(13, 100), seqTokens(13, 200) // 3 full blocks each, 4 with the last token
	s, _ := run(t, m, p1)
	m.Free(s)
	s, _ = run(t, m, p2) // takes every block: p1's 3 cached blocks are evicted
	m.Free(s)
	if len(lower.blocks) != 3 {
		t.Fatalf("the tier got %d blocks of p1, want 3", len(lower.blocks))
	}
	if n := m.Load(p1, lower.fetch, lower.put); n != 3 || len(lower.puts) != 3 {
		t.Fatalf("Load loaded %d blocks (%d puts), want 3", n, len(lower.puts))
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	if s, hit := run(t, m, p1); hit != 12 {
		t.Fatalf("p1 after Load: hit %d, want 12", hit)
	} else if err := m.Check(s); err != nil {
		t.Fatal(err)
	}
}

func TestLoadAcrossARestart(t *testing.T) {
	t.Parallel()
	lower := newTier()
	opts := Options{NumBlocks: 8, BlockSize: 4, Scope: "test", Evict: lower.save}
	m, _ := New(opts)
	p := seqTokens(18, 7) // 4 full blocks Match may use
	s, _ := run(t, m, p)
	m.Free(s)
	for id, l := range m.Cached() {
		lower.save(id, l)
	}
	if len(lower.blocks) != 4 {
		t.Fatalf("Cached yielded %d blocks, want 4", len(lower.blocks))
	}

	tests := []struct {
		name   string
		prompt []int32
		scope  string
		want   int
	}{
		{"same prompt", p, "test", 4},
		{"longer prompt", append(slices.Clone(p), 1, 2, 3, 4, 5), "test", 4},
		{"shorter prompt", p[:9], "test", 2},
		{"other prompt", seqTokens(18, 8), "test", 0},
		{"other scope", p, "other", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.Scope = tt.scope
			m, _ := New(o) // a restart: memory is empty
			if n := m.Load(tt.prompt, lower.fetch, func(int32) {}); n != tt.want {
				t.Fatalf("Load loaded %d blocks, want %d", n, tt.want)
			}
			s, hit := run(t, m, tt.prompt)
			if hit != tt.want*4 {
				t.Fatalf("hit %d after Load, want %d", hit, tt.want*4)
			}
			if err := m.Check(s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLoadKeepsThePromptsOwnBlocks(t *testing.T) {
	t.Parallel()
	lower := newTier()
	m, _ := New(Options{NumBlocks: 5, BlockSize: 4, Scope: "test", Evict: lower.save})
	p := seqTokens(13, 100)
	s, _ := run(t, m, p)
	m.Free(s)
	// Evict p's last two full blocks only: a prompt that shares p's first
	// block takes 4 more blocks, the two free empty ones and then the least
	// recently freed cached ones, which are p's later blocks.
	other := append(slices.Clone(p[:4]), seqTokens(13, 900)...)
	s, _ = run(t, m, other)
	m.Free(s)
	if len(lower.blocks) != 2 {
		t.Fatalf("the tier got %d blocks, want 2", len(lower.blocks))
	}
	// Memory holds p's first block, least recently freed, at the head of
	// the free list: loading p's other two must not take it.
	if n := m.Load(p, lower.fetch, lower.put); n != 2 {
		t.Fatalf("Load loaded %d blocks, want 2", n)
	}
	if _, hit := run(t, m, p); hit != 12 {
		t.Fatalf("hit %d, want 12", hit)
	}
}

func TestLoadStops(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		blocks int
		refuse bool
		want   int
	}{
		{"tier refuses", 8, true, 0},
		{"no free block", 4, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lower := newTier()
			m, _ := New(Options{NumBlocks: tt.blocks, BlockSize: 4, Scope: "test"})
			p := seqTokens(13, 100)
			s, _ := run(t, m, p)
			for id, l := range m.Cached() {
				lower.save(id, l)
			}
			m2, _ := New(Options{NumBlocks: tt.blocks, BlockSize: 4, Scope: "test"})
			hold := &Seq{}
			if tt.blocks == 4 {
				if err := m2.Reserve(hold, 16); err != nil { // every block in use
					t.Fatal(err)
				}
			}
			fetch := lower.fetch
			if tt.refuse {
				fetch = func(Link) bool { return false }
			}
			if n := m2.Load(p, fetch, lower.put); n != tt.want {
				t.Fatalf("Load loaded %d blocks, want %d", n, tt.want)
			}
			if err := m2.Check(hold); err != nil {
				t.Fatal(err)
			}
			m.Free(s)
		})
	}
}

func TestIndexedReportsNewBlocksOnce(t *testing.T) {
	t.Parallel()
	var got []Link
	m, _ := New(Options{NumBlocks: 8, BlockSize: 4, Scope: "test", Indexed: func(_ int32, l Link) {
		l.Tokens = slices.Clone(l.Tokens)
		got = append(got, l)
	}})
	p := seqTokens(10, 100) // 2 full blocks
	s, _ := run(t, m, p)
	if len(got) != 2 || !slices.Equal(got[0].Tokens, p[:4]) || !slices.Equal(got[1].Tokens, p[4:8]) || got[1].Parent != got[0].Hash {
		t.Fatalf("Indexed saw %+v, want p's two blocks in chain order", got)
	}
	m.Free(s)
	got = nil
	s, _ = run(t, m, append(slices.Clone(p[:8]), seqTokens(4, 7)...)) // shares both, adds one
	if len(got) != 1 || !slices.Equal(got[0].Tokens, seqTokens(4, 7)) {
		t.Fatalf("Indexed saw %+v, want only the new third block", got)
	}
	m.Free(s)
}
