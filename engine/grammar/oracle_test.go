package grammar

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// uncachedMask computes the mask the slow way: walk the whole token trie
// from the matcher's current stacks, no mask cache involved.
func uncachedMask(m *Matcher, dst []uint64) {
	clear(dst)
	if m.Ended() {
		return
	}
	init := slices.Clone(m.current())
	var w trieWalker
	w.g = m.g
	w.arena = m.w.arena // read-only below its length; the walk appends and truncates
	w.walk(&m.v.trie, init, func(node int, _ []frame) {
		for _, id := range m.v.trie.tokens(node) {
			dst[id>>6] |= 1 << (id & 63)
		}
	})
	if m.Done() {
		for _, id := range m.v.eog {
			dst[id>>6] |= 1 << (id & 63)
		}
	}
}

func assertMaskMatchesOracle(t *testing.T, m *Matcher, mask, oracle []uint64) {
	t.Helper()
	m.Mask(mask)
	uncachedMask(m, oracle)
	for i := range mask {
		if mask[i] != oracle[i] {
			diff := mask[i] ^ oracle[i]
			for b := 0; b < 64; b++ {
				if diff&(1<<b) != 0 {
					id := i*64 + b
					t.Fatalf("after %d tokens: token %d %q is %v in the mask, %v in the uncached walk",
						m.Len(), id, m.v.Token(id), mask[i]&(1<<b) != 0, oracle[i]&(1<<b) != 0)
				}
			}
		}
	}
}

// TestMaskMatchesUncachedWalk: along a realistic document, and along
// sampled documents of every property schema, the cached mask equals the
// uncached one bit for bit.
func TestMaskMatchesUncachedWalk(t *testing.T) {
	t.Parallel()
	for _, name := range realVocabs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := loadVocab(t, name)
			// The document as written (pretty-printed) under the bounded
			// policy, and compacted under the default one.
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(benchDoc)); err != nil {
				t.Fatal(err)
			}
			for doc, opts := range map[string]JSONOptions{benchDoc: benchOpts, compact.String(): {}} {
				g, err := FromJSONSchema([]byte(benchSchema), opts)
				if err != nil {
					t.Fatal(err)
				}
				m := NewMatcher(g, v)
				mask, oracle := make([]uint64, MaskWords(v.Size())), make([]uint64, MaskWords(v.Size()))
				for _, id := range append(greedyTokens(t, v, doc), v.EOG()[0]) {
					assertMaskMatchesOracle(t, m, mask, oracle)
					if err := m.Accept(id); err != nil {
						t.Fatalf("%+v: %v", opts, err)
					}
				}
			}
		})
	}
	vocabs := map[string]*Vocab{"bytes": byteVocab(t, `{"`, `":`, `", "`, `"}`, "\n  ", `\n`, `é`)}
	if !testing.Short() {
		vocabs["llama-spm"] = loadVocab(t, "llama-spm")
	}
	for vname, v := range vocabs {
		for _, c := range propertySchemas {
			t.Run(vname+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				g, err := FromJSONSchema([]byte(c.schema), JSONOptions{})
				if err != nil {
					t.Fatal(err)
				}
				s := newSampler(v, 11)
				mask, oracle := make([]uint64, MaskWords(v.Size())), make([]uint64, MaskWords(v.Size()))
				m := NewMatcher(g, v)
				for step := range 120 {
					assertMaskMatchesOracle(t, m, mask, oracle)
					id := s.next(m, step)
					if id < 0 || m.Accept(id) != nil || m.Ended() {
						break
					}
				}
			})
		}
	}
}
