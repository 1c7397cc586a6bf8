package tokenizer

// stripFlags are llama.cpp's LSTRIP/RSTRIP token attributes.
type stripFlags uint8

const (
	stripLeft stripFlags = 1 << iota
	stripRight
)

// specialTrie finds which special tokens occur in a text in one pass: a
// byte trie of their texts. Node 0 is the root; its children are a table,
// deeper nodes keep a short list of edges.
type specialTrie struct {
	root  [256]int32 // child of the root per byte; 0 for none
	nodes []trieNode
}

type trieNode struct {
	edges []trieEdge
	// special is the index in Tokenizer.specials of the token whose text
	// ends here, or -1.
	special int32
}

type trieEdge struct {
	b     byte
	child int32
}

// newSpecialTrie indexes texts; texts[i] belongs to special index i.
func newSpecialTrie(texts []string) specialTrie {
	tr := specialTrie{nodes: []trieNode{{special: -1}}}
	for i, text := range texts {
		node := int32(0)
		for j := 0; j < len(text); j++ {
			node = tr.child(node, text[j], true)
		}
		tr.nodes[node].special = int32(i)
	}
	return tr
}

// child follows the edge for b from node, adding it when add is set; it
// returns 0 when there is none.
func (tr *specialTrie) child(node int32, b byte, add bool) int32 {
	if node == 0 {
		if tr.root[b] == 0 && add {
			tr.root[b] = tr.newNode()
		}
		return tr.root[b]
	}
	for _, e := range tr.nodes[node].edges {
		if e.b == b {
			return e.child
		}
	}
	if !add {
		return 0
	}
	c := tr.newNode()
	tr.nodes[node].edges = append(tr.nodes[node].edges, trieEdge{b: b, child: c})
	return c
}

func (tr *specialTrie) newNode() int32 {
	tr.nodes = append(tr.nodes, trieNode{special: -1})
	return int32(len(tr.nodes) - 1)
}

// find sets (*found)[i] for every special index i whose text occurs in
// text, after resizing *found to n and clearing it. It returns false when c
// says to stop.
func (tr *specialTrie) find(text string, found *[]bool, n int, c *canceller) bool {
	if cap(*found) < n {
		*found = make([]bool, n)
	}
	*found = (*found)[:n]
	clear(*found)
	f := *found
	for i := 0; i < len(text); i++ {
		node := tr.root[text[i]]
		for j := i + 1; node != 0; j++ {
			if s := tr.nodes[node].special; s >= 0 {
				f[s] = true
			}
			if j == len(text) {
				break
			}
			node = tr.child(node, text[j], false)
		}
		if i&(CheckBytes-1) == 0 && !c.advance(CheckBytes) {
			return false
		}
	}
	return true
}
