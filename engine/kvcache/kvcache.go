// Package kvcache allocates the blocks of a paged KV cache and remembers
// which full blocks hold which token prefixes, so that a later request with
// the same prefix reuses them (automatic prefix caching).
//
// It only does bookkeeping: block ids, reference counts, block tables, a hash
// chain over full blocks and an LRU free list. The memory itself belongs to
// the model (engine/model.KV) and is written by the forward pass; the
// scheduler decides what runs, this package decides where it lives.
//
// A block that is freed keeps its hash in the index until the block is handed
// out again, so a prefix stays reusable for as long as memory allows. Free
// blocks are reused least recently freed first.
//
// A Manager is not safe for concurrent use; the scheduler's loop owns it.
package kvcache

import (
	"errors"
	"fmt"
	"slices"
)

// DefaultBlockSize is the number of tokens per block.
const DefaultBlockSize = 16

// ErrNoBlocks means the free list cannot cover an allocation right now.
var ErrNoBlocks = errors.New("kv cache: out of free blocks")

// Options configure a Manager. The zero value of BlockSize means DefaultBlockSize.
type Options struct {
	NumBlocks int
	BlockSize int
	// Scope seeds the hash chain, so that prefixes of different models (or
	// model files) never match. Use something that names the weights.
	Scope string
	// Evict, when set, is called with every indexed block just before it
	// is handed out for other content (by Reserve, Fork or Load): the last
	// moment its memory holds the prefix, for a lower tier to save it (see
	// Load). It runs on the owner's goroutine, inside the call that evicts;
	// l.Tokens is valid only during the call.
	Evict func(id int32, l Link)
	// Indexed, when set, is called with every block Commit newly indexes,
	// whose memory holds its computed keys and values: for a lower tier to
	// save it early, so that a crash loses less. Like Evict it runs inside
	// the call, and l.Tokens is valid only during it.
	Indexed func(id int32, l Link)
	// Window, when positive, makes this the pool of sliding-window layers
	// whose token at position p attends to positions p-Window+1..p only
	// (llama.cpp's is_masked_swa: masked when p - p0 >= Window). Slide
	// then frees the blocks no later token reads; their table entries
	// become Hole(), and Match counts a prefix only if the blocks its
	// window needs are cached. Load is not supported.
	Window int
}

// Stats are cumulative counters and current gauges.
type Stats struct {
	Queries     int64 // prompt tokens looked up (Observe)
	Hits        int64 // prompt tokens served from the cache (Observe)
	Evictions   int64 // cached blocks reused for other content
	BlocksUsed  int   // blocks referenced by live sequences
	BlocksFree  int   // blocks on the free list (cached or empty)
	BlocksTotal int
	Cached      int // blocks holding a registered prefix (used or free)
}

type hash uint64

type block struct {
	ref        int32
	hashed     bool
	h          hash
	parent     hash    // hash of the previous block in the chain (root: the scope's)
	tokens     []int32 // the block's tokens when hashed, to verify hits
	prev, next int32   // free-list links; -1 at the ends
	free       bool
}

// Manager hands out blocks and indexes full ones by prefix hash.
type Manager struct {
	bs     int
	root   hash
	blocks []block
	head   int32 // least recently freed (next to reuse)
	tail   int32
	nFree  int
	index  map[hash]int32
	stats  Stats
	evict  func(id int32, l Link)
	onIdx  func(id int32, l Link)
	window int
	hole   int32 // table entry of a released block (windowed pools); -1 when none
}

// New returns a Manager over opts.NumBlocks blocks, all free.
func New(opts Options) (*Manager, error) {
	bs := opts.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if bs < 1 || opts.NumBlocks < 1 {
		return nil, fmt.Errorf("kv cache of %d blocks of %d tokens", opts.NumBlocks, bs)
	}
	m := &Manager{
		bs:     bs,
		root:   mixString(opts.Scope),
		blocks: make([]block, opts.NumBlocks),
		head:   -1,
		tail:   -1,
		index:  make(map[hash]int32),
		evict:  opts.Evict,
		onIdx:  opts.Indexed,
		window: max(opts.Window, 0),
		hole:   -1,
	}
	if m.window > 0 {
		m.hole = int32(opts.NumBlocks)
	}
	for i := range m.blocks {
		m.blocks[i].prev, m.blocks[i].next = -1, -1
		m.pushFree(int32(i))
	}
	m.stats.BlocksTotal = opts.NumBlocks
	return m, nil
}

// BlockSize is the number of token slots per block.
func (m *Manager) BlockSize() int { return m.bs }

// NumBlocks is the number of blocks managed.
func (m *Manager) NumBlocks() int { return len(m.blocks) }

// Window is the sliding window of the pool's layers (0: they attend to
// every position).
func (m *Manager) Window() int { return m.window }

// Hole is the table entry of a block a windowed pool released (see
// Slide): NumBlocks, one past the pool, so that the memory behind a
// windowed pool must have TableBlocks blocks. Kernels check every table
// entry up to the position they attend to, even those the window skips,
// so the entry must name a block of the memory; it is never written or
// read. -1 for a pool without a window.
func (m *Manager) Hole() int32 { return m.hole }

// TableBlocks is the number of block ids a block table may hold: the
// blocks, and the hole of a windowed pool.
func (m *Manager) TableBlocks() int {
	if m.window > 0 {
		return len(m.blocks) + 1
	}
	return len(m.blocks)
}

// FreeBlocks is the number of blocks an allocation can take now.
func (m *Manager) FreeBlocks() int { return m.nFree }

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	s := m.stats
	s.BlocksFree = m.nFree
	s.BlocksUsed = len(m.blocks) - m.nFree
	s.Cached = len(m.index)
	return s
}

// Seq is one sequence's block table and what of it is in the prefix index.
// The zero value is an empty sequence.
type Seq struct {
	Blocks []int32 // block table: Blocks[i] holds positions [i*bs, (i+1)*bs)
	hashes []hash  // chain hashes of the leading full, verified blocks
	holes  int     // leading entries of Blocks that a windowed pool released
}

// Held is the number of blocks s holds: its table's entries but the
// released ones of a windowed pool.
func (s *Seq) Held() int { return len(s.Blocks) - s.holes }

// last is the hash the next full block chains onto.
func (s *Seq) last(root hash) hash {
	if len(s.hashes) == 0 {
		return root
	}
	return s.hashes[len(s.hashes)-1]
}

// Indexed is the number of s's leading full blocks that are in its prefix
// chain: matched from the cache or committed (indexed by s or found indexed).
// Commit never looks at them again.
func (s *Seq) Indexed() int { return len(s.hashes) }

// Table returns the block table for the forward pass.
func (s *Seq) Table() []int32 { return s.Blocks }

// Match looks up the longest cached prefix of prompt in whole blocks, never
// including the last prompt token (its logits must be computed), and attaches
// those blocks to s. It returns the number of prompt tokens covered (0 when
// s already has blocks). Matched blocks are taken off the free list.
//
// In a windowed pool a prefix of n tokens counts only if the blocks of the
// positions its next token reads (n-Window+1..n-1) are cached; the blocks
// before them are not needed and become holes.
func (m *Manager) Match(s *Seq, prompt []int32) int {
	return m.MatchUpTo(s, prompt, len(prompt)-1)
}

// MatchUpTo is Match of at most limit tokens (whole blocks of them): for a
// windowed pool next to a full one, whose hit must not exceed the full
// pool's.
func (m *Manager) MatchUpTo(s *Seq, prompt []int32, limit int) int {
	if len(s.Blocks) != 0 {
		return 0
	}
	full := min(len(prompt)-1, limit) / m.bs
	if m.window > 0 {
		return m.matchWindow(s, prompt, full)
	}
	for i := 0; i < full; i++ {
		toks := prompt[i*m.bs : (i+1)*m.bs]
		parent := s.last(m.root)
		h := chain(parent, toks)
		id, ok := m.index[h]
		if !ok {
			break
		}
		b := &m.blocks[id]
		if b.parent != parent || !slices.Equal(b.tokens, toks) {
			break // a hash collision: treat as a miss
		}
		m.ref(id)
		s.Blocks = append(s.Blocks, id)
		s.hashes = append(s.hashes, h)
	}
	return len(s.Blocks) * m.bs
}

// matchWindow is Match in a windowed pool over the first full blocks of
// prompt: the longest prefix whose window's blocks are all cached.
func (m *Manager) matchWindow(s *Seq, prompt []int32, full int) int {
	hashes := make([]hash, 0, full)
	ids := make([]int32, 0, full)
	parent := m.root
	best, run := 0, 0 // run: cached blocks ending at block i
	for i := 0; i < full; i++ {
		toks := prompt[i*m.bs : (i+1)*m.bs]
		h := chain(parent, toks)
		id, ok := m.index[h]
		if ok {
			if b := &m.blocks[id]; b.parent != parent || !slices.Equal(b.tokens, toks) {
				ok = false // a hash collision: not this prefix
			}
		}
		hashes, ids = append(hashes, h), append(ids, id)
		parent = h
		if !ok {
			run = 0
			continue
		}
		run++
		if k := i + 1; k-m.firstKept(k*m.bs) <= run {
			best = k
		}
	}
	first := m.firstKept(best * m.bs)
	for i := range best {
		if i < first {
			s.Blocks = append(s.Blocks, m.hole)
			continue
		}
		m.ref(ids[i])
		s.Blocks = append(s.Blocks, ids[i])
	}
	s.hashes = append(s.hashes, hashes[:best]...)
	s.holes = first
	return best * m.bs
}

// firstKept is the first block a windowed sequence that computes position
// next and later still reads: the block of position next-Window+1.
func (m *Manager) firstKept(next int) int {
	return max(0, next-m.window+1) / m.bs
}

// Slide frees the blocks of a windowed pool's sequence that no token at
// position next or later reads (every position below next-Window+1);
// their entries become Hole(). The blocks stay cached, as Free leaves
// them. Call it when next is the sequence's first position still to
// compute. It does nothing in a pool without a window.
func (m *Manager) Slide(s *Seq, next int) {
	if m.window <= 0 {
		return
	}
	end := min(m.firstKept(next), len(s.Blocks))
	for i := s.holes; i < end; i++ {
		m.unref(s.Blocks[i])
		s.Blocks[i] = m.hole
	}
	s.holes = max(s.holes, end)
}

// Observe records one request's prefix lookup in the counters: queried
// prompt tokens and hit tokens. It is separate from Match because a
// sequence may be matched again when its admission is retried or it is
// preempted; the caller observes each request once.
func (m *Manager) Observe(queried, hit int) {
	m.stats.Queries += int64(queried)
	m.stats.Hits += int64(hit)
}

// Reserve makes s's block table cover n token positions, taking blocks from
// the free list. It fails with ErrNoBlocks (and takes nothing) when there are
// not enough free blocks.
func (m *Manager) Reserve(s *Seq, n int) error {
	need := (n+m.bs-1)/m.bs - len(s.Blocks)
	if need <= 0 {
		return nil
	}
	if need > m.nFree {
		return ErrNoBlocks
	}
	for range need {
		s.Blocks = append(s.Blocks, m.takeHead())
	}
	return nil
}

// takeHead takes the least recently freed block off the free list, evicts
// the prefix it holds (telling Options.Evict first) and returns it with one
// reference. The free list must not be empty.
func (m *Manager) takeHead() int32 {
	id := m.head
	m.takeFree(id)
	b := &m.blocks[id]
	if b.hashed {
		if m.evict != nil {
			m.evict(id, Link{Hash: uint64(b.h), Parent: uint64(b.parent), Tokens: b.tokens})
		}
		delete(m.index, b.h)
		b.hashed = false
		b.tokens = b.tokens[:0]
		m.stats.Evictions++
	}
	b.ref = 1
	return id
}

// BlocksFor is the number of blocks that n tokens occupy.
func (m *Manager) BlocksFor(n int) int { return (n + m.bs - 1) / m.bs }

// Commit registers the full blocks among s's first len(tokens) tokens in the
// prefix index. tokens must be the sequence's verified tokens (prompt and
// accepted output) whose keys and values have been computed: never pass
// unverified draft tokens. A block whose content is already indexed under
// another id stays private to s. It returns how many blocks it newly
// indexed: blocks already in s's chain (matched or committed before) and
// blocks whose content was indexed already do not count, so the sum over a
// sequence's Commits is what it added to the cache.
func (m *Manager) Commit(s *Seq, tokens []int32) int {
	added := 0
	full := min(len(tokens)/m.bs, len(s.Blocks))
	for i := len(s.hashes); i < full; i++ {
		toks := tokens[i*m.bs : (i+1)*m.bs]
		parent := s.last(m.root)
		h := chain(parent, toks)
		id := s.Blocks[i]
		if i < s.holes {
			// Released before it was committed: nothing holds it now.
			s.hashes = append(s.hashes, h)
			continue
		}
		b := &m.blocks[id]
		if _, taken := m.index[h]; !taken && !b.hashed {
			b.hashed, b.h, b.parent = true, h, parent
			b.tokens = append(b.tokens[:0], toks...)
			m.index[h] = id
			added++
			if m.onIdx != nil {
				m.onIdx(id, Link{Hash: uint64(h), Parent: uint64(parent), Tokens: b.tokens})
			}
		}
		s.hashes = append(s.hashes, h)
	}
	return added
}

// Truncate shrinks s to n tokens, releasing blocks past them (rollback of
// rejected draft tokens). Index entries of kept blocks stay valid because
// only verified tokens are ever committed.
func (m *Manager) Truncate(s *Seq, n int) {
	keep := m.BlocksFor(n)
	for i := max(keep, s.holes); i < len(s.Blocks); i++ {
		m.unref(s.Blocks[i])
	}
	s.Blocks = s.Blocks[:min(keep, len(s.Blocks))]
	s.holes = min(s.holes, len(s.Blocks))
	// Only verified tokens are committed, so this cuts nothing in practice.
	s.hashes = s.hashes[:min(len(s.hashes), n/m.bs)]
}

// Free releases all of s's blocks; blocks nobody else uses go to the back of
// the free list with their hashes kept for later hits. s becomes empty.
func (m *Manager) Free(s *Seq) {
	// Free the tail first so that, under LRU reuse, a prefix's later blocks are
	// evicted before its earlier ones (an early block is useful without the
	// later ones; the reverse is not).
	for i := len(s.Blocks) - 1; i >= s.holes; i-- {
		m.unref(s.Blocks[i])
	}
	s.Blocks, s.hashes, s.holes = s.Blocks[:0], s.hashes[:0], 0
}

// Fork returns a sequence sharing s's first n tokens (n choices of one
// prompt). Full blocks are shared by reference. If n ends inside a block, the
// fork gets a fresh block for it and the caller must copy the first n%bs slots
// of src into dst (copy-on-write at the first divergent block); copied is
// false when no copy is needed. It fails with ErrNoBlocks.
func (m *Manager) Fork(s *Seq, n int) (child *Seq, src, dst int32, copied bool, err error) {
	full := n / m.bs
	if m.BlocksFor(n) > len(s.Blocks) {
		return nil, 0, 0, false, fmt.Errorf("kvcache: fork of %d tokens from a sequence of %d blocks", n, len(s.Blocks))
	}
	child = &Seq{Blocks: make([]int32, 0, m.BlocksFor(n)+1)}
	if n%m.bs != 0 && m.nFree == 0 {
		return nil, 0, 0, false, ErrNoBlocks
	}
	for i, id := range s.Blocks[:full] {
		if i >= s.holes {
			m.ref(id)
		}
		child.Blocks = append(child.Blocks, id)
	}
	child.holes = min(s.holes, full)
	child.hashes = append([]hash(nil), s.hashes[:min(len(s.hashes), full)]...)
	if n%m.bs == 0 {
		return child, 0, 0, false, nil
	}
	if err := m.Reserve(child, n); err != nil {
		m.Free(child)
		return nil, 0, 0, false, err
	}
	return child, s.Blocks[full], child.Blocks[full], true, nil
}

func (m *Manager) ref(id int32) {
	b := &m.blocks[id]
	if b.free {
		m.takeFree(id)
	}
	b.ref++
}

func (m *Manager) unref(id int32) {
	b := &m.blocks[id]
	if b.ref <= 0 {
		return // released more often than taken: a caller bug that Check reports
	}
	b.ref--
	if b.ref == 0 {
		if !b.hashed {
			// Nothing to keep: reuse it before cached blocks.
			m.pushFreeFront(id)
			return
		}
		m.pushFree(id)
	}
}

func (m *Manager) pushFree(id int32) {
	b := &m.blocks[id]
	b.free, b.prev, b.next = true, m.tail, -1
	if m.tail >= 0 {
		m.blocks[m.tail].next = id
	} else {
		m.head = id
	}
	m.tail = id
	m.nFree++
}

func (m *Manager) pushFreeFront(id int32) {
	b := &m.blocks[id]
	b.free, b.prev, b.next = true, -1, m.head
	if m.head >= 0 {
		m.blocks[m.head].prev = id
	} else {
		m.tail = id
	}
	m.head = id
	m.nFree++
}

func (m *Manager) takeFree(id int32) {
	b := &m.blocks[id]
	if b.prev >= 0 {
		m.blocks[b.prev].next = b.next
	} else {
		m.head = b.next
	}
	if b.next >= 0 {
		m.blocks[b.next].prev = b.prev
	} else {
		m.tail = b.prev
	}
	b.free, b.prev, b.next = false, -1, -1
	m.nFree--
}

// chain hashes a block's tokens onto its parent's hash.
func chain(parent hash, toks []int32) hash {
	h := uint64(parent) ^ 0x9e3779b97f4a7c15
	for _, t := range toks {
		h = mix(h ^ uint64(uint32(t)))
	}
	return hash(mix(h ^ uint64(len(toks))))
}

func mixString(s string) hash {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 0x100000001b3
	}
	return hash(mix(h))
}

// mix is SplitMix64's finaliser: a bijection with good avalanche.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Check verifies the manager's invariants against the live sequences (all
// sequences holding blocks): reference counts, the free list and the index.
// It is meant for tests.
func (m *Manager) Check(live ...*Seq) error {
	refs := make([]int32, len(m.blocks))
	for _, s := range live {
		for i, id := range s.Blocks {
			if i < s.holes {
				if id != m.hole {
					return fmt.Errorf("released entry %d of a table is block %d, not the hole", i, id)
				}
				continue
			}
			if id < 0 || int(id) >= len(m.blocks) {
				return fmt.Errorf("table entry %d is block %d of %d", i, id, len(m.blocks))
			}
			refs[id]++
		}
	}
	n := 0
	prev := int32(-1)
	for id := m.head; id >= 0; id = m.blocks[id].next {
		b := &m.blocks[id]
		if !b.free || b.prev != prev {
			return fmt.Errorf("free list broken at block %d", id)
		}
		prev = id
		n++
		if n > len(m.blocks) {
			return errors.New("free list has a cycle")
		}
	}
	if prev != m.tail || n != m.nFree {
		return fmt.Errorf("free list holds %d blocks ending at %d, counted %d ending at %d", n, prev, m.nFree, m.tail)
	}
	for id := range m.blocks {
		b := &m.blocks[id]
		if b.ref != refs[id] {
			return fmt.Errorf("block %d has %d references, live sequences hold %d", id, b.ref, refs[id])
		}
		if (b.ref == 0) != b.free {
			return fmt.Errorf("block %d: %d references but free=%v", id, b.ref, b.free)
		}
		if b.hashed && m.index[b.h] != int32(id) {
			return fmt.Errorf("block %d is hashed but not indexed", id)
		}
	}
	for h, id := range m.index {
		if b := &m.blocks[id]; !b.hashed || b.h != h {
			return fmt.Errorf("index entry for block %d is stale", id)
		}
	}
	return nil
}
