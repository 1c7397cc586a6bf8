package kvcache

import (
	"iter"
	"slices"
)

// Link is one full block of a prefix chain as a tier below memory sees it:
// its chain hash, which covers the Manager's scope and every token before
// it and so names the prefix, its parent's hash, and its tokens, which the
// tier keeps so that a hit is verified token by token as Match verifies
// memory hits.
type Link struct {
	Hash, Parent uint64
	Tokens       []int32
}

// Load extends the cached prefix of prompt with blocks from a tier below
// memory (a disk), so that a Match that follows finds them. It walks the
// full blocks Match may use: a block indexed in memory is kept as it is;
// for the first one that is not, fetch says whether the tier holds it and
// has it ready, and if so Load takes a free block (evicting its content,
// see Options.Evict), calls put with its id, which must write the block's
// memory, and indexes it. It stops at the first block fetch refuses and
// when no block is free.
//
// Loading never evicts a block of the prompt's own chain. Loaded blocks are
// left free and cached, as if just freed (so Match counts them as hits);
// the prompt's blocks end up among the most recently freed. It returns the
// number of blocks loaded. Links passed to fetch are valid only during the
// call.
func (m *Manager) Load(prompt []int32, fetch func(Link) bool, put func(id int32)) int {
	// The chain walked so far is held, so that no block of it is handed
	// out while the next is loaded; releasing it at the end puts the free
	// ones back as Free does.
	var s Seq
	defer m.Free(&s)
	loaded := 0
	full := (len(prompt) - 1) / m.bs
	for i := 0; i < full; i++ {
		toks := prompt[i*m.bs : (i+1)*m.bs]
		parent := s.last(m.root)
		h := chain(parent, toks)
		if id, ok := m.index[h]; ok {
			b := &m.blocks[id]
			if b.parent != parent || !slices.Equal(b.tokens, toks) {
				break // a hash collision: Match stops here too
			}
			m.ref(id)
			s.Blocks, s.hashes = append(s.Blocks, id), append(s.hashes, h)
			continue
		}
		if m.nFree == 0 || !fetch(Link{Hash: uint64(h), Parent: uint64(parent), Tokens: toks}) {
			break
		}
		id := m.takeHead()
		put(id)
		b := &m.blocks[id]
		b.hashed, b.h, b.parent = true, h, parent
		b.tokens = append(b.tokens[:0], toks...)
		m.index[h] = id
		s.Blocks, s.hashes = append(s.Blocks, id), append(s.hashes, h)
		loaded++
	}
	return loaded
}

// Cached yields every indexed block with its link: blocks in use first,
// then free ones from the most recently freed on, so that a prefix's
// earlier blocks tend to come before its later ones (Free frees a
// sequence's last block first). It is for saving the cache at shutdown.
// The Manager must not change during the iteration.
func (m *Manager) Cached() iter.Seq2[int32, Link] {
	return func(yield func(int32, Link) bool) {
		link := func(id int32) Link {
			b := &m.blocks[id]
			return Link{Hash: uint64(b.h), Parent: uint64(b.parent), Tokens: b.tokens}
		}
		for id := range m.blocks {
			if b := &m.blocks[id]; b.hashed && !b.free {
				if !yield(int32(id), link(int32(id))) {
					return
				}
			}
		}
		for id := m.tail; id >= 0; id = m.blocks[id].prev {
			if m.blocks[id].hashed {
				if !yield(id, link(id)) {
					return
				}
			}
		}
	}
}
