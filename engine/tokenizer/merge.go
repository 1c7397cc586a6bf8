package tokenizer

import "math"

// Both models merge the same way: a word (BPE) or chunk (SentencePiece) of
// n bytes starts as a segmentation into symbols, and the best adjacent pair
// merges, again and again, until no pair can. The state of that loop lives
// in flat int32 slices indexed by byte offset, so its memory is a fixed few
// bytes per input byte, allocated once at the exact size:
//
//   - ends[s] is the byte offset after the live symbol that starts at s, and
//     0 for an offset where no live symbol starts (inside a character or
//     inside a symbol that has absorbed its right neighbour). The next
//     symbol is ends[s]; the previous one is found by scanning left over
//     zeros, which costs the length of one symbol: a token's at most, or
//     one character's.
//   - mergeQueue holds one entry per start at most: the candidate of a live
//     symbol (its merge with its right neighbour), which a merge replaces
//     or drops when it changes, or the tombstone of a symbol that merged
//     away. So it is never larger than the text.
//
// Merges happen in the same order as with a lazy heap of every pair ever
// queued (the reference in reference_test.go): a queued candidate is
// current exactly when a lazy entry would pass its staleness check.

// The loop that does this, mergeSymbols, serves both models. What differs
// is how a pair's priority is found, which a pairRule says, and what becomes
// of the symbols left, which the callers decide when the loop returns.

// pairRule says whether two adjacent live symbols merge, and at what
// priority (lower first). It takes one of two forms:
//
//   - a pair table (BPE; spm nil): ids[s] is the symbol id of the live
//     symbol that starts at s, and a pair of ids merges at its rank in bpe's
//     merges, into the symbol the merge names.
//   - joined text (SentencePiece; spm set): a pair merges when its joined
//     text is a token, at the priority of that token's score.
//
// It is a struct that the loop branches on rather than an interface or a
// type parameter: Go calls their methods indirectly (through an itab or a
// generic dictionary), so the table lookup no longer inlines, and that call
// per pair cost BPE encodes 3% (llama-bpe) to 8% (qwen2) more instructions
// (callgrind, 1 MiB of Go source). The branch costs nothing measurable.
type pairRule struct {
	bpe *bpeModel
	ids []int32
	spm *spmPairs
}

// mergeState is the merge loop's scratch space (ends and the queue, as
// above), reused from word to word and chunk to chunk.
type mergeState struct {
	ends  []int32
	queue mergeQueue
}

// reset sizes s for a text of n bytes.
func (s *mergeState) reset(n int) {
	s.ends = growInt32(s.ends, n)
	s.queue.reset(n)
}

// splitChars makes text, which reset sized s for, one symbol per UTF-8
// character: a byte that starts no valid sequence takes the length it
// announces, as in llama.cpp, cut short at the end of text.
func (s *mergeState) splitChars(text []byte) {
	n := len(text)
	ends := s.ends[:n]
	for off := 0; off < n; {
		size := min(utf8Len(text[off]), n-off)
		ends[off] = int32(off + size)
		for i := off + 1; i < off+size; i++ {
			ends[i] = 0
		}
		off += size
	}
}

// mergeSymbols merges the symbols that s holds (the initial segmentation of
// a text of n bytes) by rule, the pair of lowest priority first and the
// leftmost of equal priorities, until no pair merges. The symbols left are
// then the live ones in s.ends (and, for a pair table, their ids in
// rule.ids). It returns false when c says to stop.
func mergeSymbols(s *mergeState, rule pairRule, n int, c *canceller) bool {
	ends, q := s.ends, &s.queue
	for p := int32(0); int(p) < n; p = ends[p] {
		q.at[p] = -1
		right := ends[p]
		if int(right) >= n {
			continue
		}
		var priority uint32
		var ok bool
		if rule.spm != nil {
			priority, ok = rule.spm.priority(p, ends[right])
		} else {
			priority, ok = rule.bpe.rank(rule.ids[p], rule.ids[right])
		}
		if ok {
			q.add(priority, p)
		}
	}
	q.init()
	for merges := 1; len(q.heap) > 0; merges++ {
		if merges%mergesPerCheck == 0 && !c.alive() {
			return false
		}
		left, priority := q.top()
		right := ends[left]
		if right == 0 {
			q.popTop() // a tombstone: this symbol merged into its left neighbour
			continue
		}
		if rule.spm == nil {
			rule.ids[left] = rule.bpe.results[priority]
		}
		end := ends[right]
		ends[left] = end
		ends[right] = 0 // right's candidate, if any, is now a tombstone
		// The grown symbol's next candidate replaces the merge just done.
		var ok bool
		if int(end) < n {
			if rule.spm != nil {
				priority, ok = rule.spm.priority(left, ends[end])
			} else {
				priority, ok = rule.bpe.rank(rule.ids[left], rule.ids[end])
			}
		}
		if ok {
			q.replaceTop(priority)
		} else {
			q.popTop()
		}
		// Its left neighbour's candidate changes with its text.
		if prev := prevStart(ends, left); prev >= 0 {
			if rule.spm != nil {
				priority, ok = rule.spm.priority(prev, end)
			} else {
				priority, ok = rule.bpe.rank(rule.ids[prev], rule.ids[left])
			}
			if ok {
				q.set(priority, prev)
			} else {
				q.remove(prev)
			}
		}
	}
	return true
}

// mergeQueue is a 4-ary min-heap of candidate merges keyed by
// priority<<32 | start: the lowest priority first, of equal priorities the
// leftmost pair (the lowest start). at[s] is the heap index of the candidate
// of the live symbol starting at s, -1 when it has none; at is only read at
// the starts of live symbols.
//
// A symbol that merges into its left neighbour never lives again, so its
// candidate is not removed but left as a tombstone that the merge loop
// discards when it comes to the top (its start's ends entry is 0): the heap
// still never holds more than one entry per start.
type mergeQueue struct {
	heap []uint64
	at   []int32
}

// heapArity is the number of children per heap node: four 8-byte keys share
// a cache line, and the heap is half as deep as a binary one.
const heapArity = 4

func mergeKey(priority uint32, start int32) uint64 {
	return uint64(priority)<<32 | uint64(uint32(start))
}

func keyStart(key uint64) int32 { return int32(uint32(key)) }

// reset empties q for a text of n bytes, reusing its slices when they are
// large enough and otherwise allocating them at exactly n.
func (q *mergeQueue) reset(n int) {
	if cap(q.at) < n {
		q.at = make([]int32, n)
		q.heap = make([]uint64, 0, n)
	}
	q.at = q.at[:n]
	q.heap = q.heap[:0]
}

// add appends the candidate of start while the queue is being filled; init
// then orders the heap. Candidates must be added for distinct starts.
func (q *mergeQueue) add(priority uint32, start int32) {
	q.at[start] = int32(len(q.heap))
	q.heap = append(q.heap, mergeKey(priority, start))
}

// init orders the candidates that add appended into a heap (in linear time).
func (q *mergeQueue) init() {
	if len(q.heap) < 2 {
		return
	}
	for i := (len(q.heap) - 2) / heapArity; i >= 0; i-- {
		q.down(i)
	}
}

// top returns the best candidate (or tombstone) without removing it; the
// queue must not be empty.
func (q *mergeQueue) top() (start int32, priority uint32) {
	return keyStart(q.heap[0]), uint32(q.heap[0] >> 32)
}

// popTop removes the top entry.
func (q *mergeQueue) popTop() {
	q.at[keyStart(q.heap[0])] = -1
	last := len(q.heap) - 1
	q.heap[0] = q.heap[last]
	q.heap = q.heap[:last]
	if last > 0 {
		q.down(0)
	}
}

// replaceTop gives the top entry's start a new priority: the merge that
// just grew the symbol at that start queues its next candidate.
func (q *mergeQueue) replaceTop(priority uint32) {
	q.heap[0] = mergeKey(priority, keyStart(q.heap[0]))
	q.down(0)
}

// set makes priority the candidate of the live symbol at start, replacing
// the one it had.
func (q *mergeQueue) set(priority uint32, start int32) {
	key := mergeKey(priority, start)
	i := q.at[start]
	if i < 0 {
		q.heap = append(q.heap, key)
		q.up(len(q.heap) - 1)
		return
	}
	old := q.heap[i]
	q.heap[i] = key
	if key < old {
		q.up(int(i))
	} else if key > old {
		q.down(int(i))
	}
}

// remove drops the candidate of the live symbol at start, if it has one.
func (q *mergeQueue) remove(start int32) {
	i := q.at[start]
	if i < 0 {
		return
	}
	q.at[start] = -1
	last := int32(len(q.heap) - 1)
	moved := q.heap[last]
	q.heap = q.heap[:last]
	if i == last {
		return
	}
	q.heap[i] = moved
	if !q.up(int(i)) {
		q.down(int(i))
	}
}

// up moves the entry at i towards the root while it is less than its
// parent, keeping at current; it reports whether the entry moved.
func (q *mergeQueue) up(i int) bool {
	h := q.heap
	x := h[i]
	from := i
	for i > 0 {
		parent := (i - 1) / heapArity
		if h[parent] <= x {
			break
		}
		h[i] = h[parent]
		q.at[keyStart(h[i])] = int32(i)
		i = parent
	}
	h[i] = x
	q.at[keyStart(x)] = int32(i)
	return i != from
}

// down moves the entry at i towards the leaves while a child is less,
// keeping at current.
func (q *mergeQueue) down(i int) {
	h := q.heap
	n := len(h)
	x := h[i]
	for {
		first := heapArity*i + 1
		if first >= n {
			break
		}
		child := first
		for c := first + 1; c < min(first+heapArity, n); c++ {
			if h[c] < h[child] {
				child = c
			}
		}
		if h[child] >= x {
			break
		}
		h[i] = h[child]
		q.at[keyStart(h[i])] = int32(i)
		i = child
	}
	h[i] = x
	q.at[keyStart(x)] = int32(i)
}

// prevStart returns the start of the live symbol before the one at s, or -1
// at the first symbol.
func prevStart(ends []int32, s int32) int32 {
	for p := s - 1; p >= 0; p-- {
		if ends[p] != 0 {
			return p
		}
	}
	return -1
}

// growInt32 returns s resized to n, reallocated at exactly n when too small.
func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// scorePriority turns a SentencePiece score into a queue priority: higher
// scores give lower priorities. Equal scores give equal priorities (-0 is
// +0), so that ties go to the leftmost pair; a NaN score, which compares
// with nothing, ranks after every number.
func scorePriority(score float32) uint32 {
	if score != score {
		return math.MaxUint32
	}
	if score == 0 {
		score = 0 // -0 and +0 tie
	}
	bits := math.Float32bits(score)
	if bits>>31 != 0 {
		bits = ^bits // negative: larger magnitude, smaller number
	} else {
		bits |= 1 << 31
	}
	return ^bits
}

// mergesPerCheck is how many merges of one word or chunk go by between two
// looks at the encode's context: a giant word (a megabyte of one letter)
// stops within about a millisecond of cancellation.
const mergesPerCheck = 1 << 12
