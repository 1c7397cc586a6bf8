package grammar

import (
	"bytes"
	"fmt"
	"math"
	"slices"
)

// Vocab is a model's vocabulary as the grammar sees it: each token's raw byte
// string, the tokens that never appear inside constrained text, and the
// end-of-generation tokens. It also holds the token trie and the per-model
// mask cache shared by every Matcher over this vocabulary.
//
// A Vocab is built once per model and is safe for concurrent use; its mask
// cache is internally synchronised.
type Vocab struct {
	n      int       // token ids are 0..n-1
	tokens [][]byte  // raw bytes per id; nil for tokens never allowed inside the grammar
	eog    []int32   // end-of-generation ids, allowed exactly when the grammar is complete
	trie   trie      // every allowed token, by its bytes
	single byteClass // the bytes that are a token on their own
	cache  *maskCache
}

// NewVocab builds a Vocab. tokens[id] is the raw byte string the token stands
// for once decoded (for SentencePiece: '▁' as a space and <0xXX> as that
// byte; for byte-level BPE: the GPT-2 byte-to-unicode mapping reversed). A nil
// or empty entry marks a token that never appears inside constrained output:
// control and other special tokens, unused slots. eog lists the
// end-of-generation ids; they are allowed exactly when the grammar is
// complete, whatever their bytes.
//
// The tokens slice is not retained; the byte strings are copied.
func NewVocab(tokens [][]byte, eog []int) (*Vocab, error) {
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("grammar: vocabulary has no tokens")
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("grammar: vocabulary has %d tokens, more than token ids can address", n)
	}
	v := &Vocab{n: n, tokens: make([][]byte, n), cache: newMaskCache(defaultCacheBytes)}
	isEOG := make([]bool, n)
	for _, id := range eog {
		if id < 0 || id >= n {
			return nil, fmt.Errorf("grammar: end-of-generation token %d is outside the vocabulary of %d tokens", id, n)
		}
		if !isEOG[id] {
			isEOG[id] = true
			v.eog = append(v.eog, int32(id))
		}
	}
	for id, t := range tokens {
		if len(t) == 0 || isEOG[id] {
			continue
		}
		if len(t) > math.MaxUint16 {
			return nil, fmt.Errorf("grammar: token %d is %d bytes long, more than %d", id, len(t), math.MaxUint16)
		}
		v.tokens[id] = bytes.Clone(t)
		if len(t) == 1 {
			v.single.add(t[0])
		}
	}
	v.trie = buildTrie(v.tokens)
	return v, nil
}

// Size is the number of token ids; a mask has MaskWords(Size()) words.
func (v *Vocab) Size() int { return v.n }

// EOG returns the end-of-generation token ids.
func (v *Vocab) EOG() []int {
	out := make([]int, len(v.eog))
	for i, id := range v.eog {
		out[i] = int(id)
	}
	return out
}

// Token returns the raw bytes of token id, nil for a token never allowed
// inside the grammar. The slice must not be modified.
func (v *Vocab) Token(id int) []byte {
	if id < 0 || id >= v.n {
		return nil
	}
	return v.tokens[id]
}

func (v *Vocab) isEOG(id int) bool {
	for _, e := range v.eog {
		if int(e) == id {
			return true
		}
	}
	return false
}

// MaskWords is the number of 64-bit words of a mask over size tokens.
func MaskWords(size int) int { return (size + 63) / 64 }

// trie holds byte strings in preorder: node 0 is the root (the empty
// string); the subtree of node i is nodes i..end-1; a node's children follow
// it in ascending byte order. Walking it is a linear scan that skips a
// subtree by jumping to its end, with no recursion and no pointers.
type trie struct {
	nodes []trieNode
	toks  []int32 // token ids by node: node i's tokens are toks[nodes[i].tok:nodes[i+1].tok]
}

type trieNode struct {
	end   int32  // index one past the last node of this subtree
	tok   int32  // first index into toks of this node's tokens
	depth uint16 // length of the byte string this node stands for
	b     byte   // the last byte of that string (unused at the root)
}

// tokens returns the ids whose byte string ends at node i.
func (t *trie) tokens(i int) []int32 {
	hi := int32(len(t.toks))
	if i+1 < len(t.nodes) {
		hi = t.nodes[i+1].tok
	}
	return t.toks[t.nodes[i].tok:hi]
}

// buildTrie builds the trie of the non-nil byte strings, recording each id at
// the node of its string.
func buildTrie(strs [][]byte) trie {
	ids := make([]int32, 0, len(strs))
	for id, s := range strs {
		if s != nil {
			ids = append(ids, int32(id))
		}
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return bytes.Compare(strs[a], strs[b]) })
	return buildTrieSorted(len(ids), func(i int) ([]byte, int32) { return strs[ids[i]], ids[i] })
}

// buildTrieSorted builds a trie from n (string, id) pairs sorted by string.
func buildTrieSorted(n int, at func(i int) ([]byte, int32)) trie {
	t := trie{nodes: []trieNode{{}}}
	path := []int32{0} // node index per depth along the current string
	var prev []byte
	for i := range n {
		s, id := at(i)
		common := 0
		for common < len(prev) && common < len(s) && prev[common] == s[common] {
			common++
		}
		for len(path) > common+1 {
			t.nodes[path[len(path)-1]].end = int32(len(t.nodes))
			path = path[:len(path)-1]
		}
		for d := common; d < len(s); d++ {
			path = append(path, int32(len(t.nodes)))
			t.nodes = append(t.nodes, trieNode{tok: int32(len(t.toks)), depth: uint16(d + 1), b: s[d]})
		}
		t.toks = append(t.toks, id)
		prev = s
	}
	for _, p := range path {
		t.nodes[p].end = int32(len(t.nodes))
	}
	return t
}
