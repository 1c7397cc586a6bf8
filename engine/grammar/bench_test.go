package grammar

import (
	"testing"
)

// benchSchema is a realistic structured-output schema: nested object,
// strings, enum, bounded integer, number, boolean, array of objects.
const benchSchema = `{
  "type": "object",
  "properties": {
    "title": {"type": "string"},
    "category": {"type": "string", "enum": ["meeting", "travel", "personal", "other"]},
    "attendees": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "email": {"type": "string"}, "optional": {"type": "boolean"}},
      "required": ["name", "email", "optional"], "additionalProperties": false}},
    "duration_minutes": {"type": "integer", "minimum": 1, "maximum": 1440},
    "budget": {"type": "number"},
    "notes": {"type": ["string", "null"]}
  },
  "required": ["title", "category", "attendees", "duration_minutes", "budget", "notes"],
  "additionalProperties": false
}`

const benchDoc = `{"title": "Quarterly planning review with the \"core\" team", "category": "meeting",
  "attendees": [{"name": "Ada Lovelace", "email": "ada@example.com", "optional": false},
    {"name": "Grace Hopper", "email": "grace@example.com", "optional": true},
    {"name": "Émile Borel", "email": "emile@example.org", "optional": false}],
  "duration_minutes": 90, "budget": 1250.75, "notes": "Bring the Q3 numbers; room 4.2 is booked.\nDial-in on request."}`

// benchOpts are the options benchDoc needs: it is written as models that
// pretty-print write, with whitespace between tokens, which the default
// compact grammar refuses.
var benchOpts = JSONOptions{MaxWhitespace: BoundedWhitespace}

// greedyTokens splits text into the longest vocabulary tokens, a stand-in for
// the model's tokenizer with realistic token lengths.
func greedyTokens(tb testing.TB, v *Vocab, text string) []int {
	tb.Helper()
	var out []int
	for len(text) > 0 {
		best, bestLen := -1, 0
		node := 0
		for i := 0; i < len(text); i++ {
			// find child of node with byte text[i]
			next := -1
			for c := node + 1; c < int(v.trie.nodes[node].end); c = int(v.trie.nodes[c].end) {
				if v.trie.nodes[c].b == text[i] {
					next = c
					break
				}
			}
			if next < 0 {
				break
			}
			node = next
			if toks := v.trie.tokens(node); len(toks) > 0 {
				best, bestLen = int(toks[0]), i+1
			}
		}
		if best < 0 {
			tb.Fatalf("no token for %q", text[:1])
		}
		out = append(out, best)
		text = text[bestLen:]
	}
	return out
}

func benchmarkMaskAccept(b *testing.B, vocab string) {
	v := loadVocab(b, vocab)
	g, err := FromJSONSchema([]byte(benchSchema), benchOpts)
	if err != nil {
		b.Fatal(err)
	}
	toks := greedyTokens(b, v, benchDoc)
	toks = append(toks, v.EOG()[0])
	m := NewMatcher(g, v)
	mask := make([]uint64, MaskWords(v.Size()))
	run := func() {
		for _, id := range toks {
			m.Mask(mask)
			if mask[id>>6]&(1<<(id&63)) == 0 {
				b.Fatalf("token %d %q not in mask after %d tokens", id, v.Token(id), m.Len())
			}
			if err := m.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
		if err := m.Rollback(m.Len()); err != nil {
			b.Fatal(err)
		}
	}
	run() // warm the vocabulary's mask cache
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
	b.ReportMetric(float64(len(toks)), "tokens/doc")
}

func BenchmarkMaskAcceptSPM32k(b *testing.B)    { benchmarkMaskAccept(b, "llama-spm") }
func BenchmarkMaskAcceptQwen152k(b *testing.B)  { benchmarkMaskAccept(b, "qwen2") }
func BenchmarkMaskAcceptLlama128k(b *testing.B) { benchmarkMaskAccept(b, "llama-bpe") }

// benchmarkMaskBudget is benchmarkMaskAccept with MaskBudget: with an
// ample budget (nothing to take out, the usual case), and with the
// tightest budget the document fits in, so that the budget takes tokens
// out wherever it can.
func benchmarkMaskBudget(b *testing.B, vocab string) {
	v := loadVocab(b, vocab)
	g, err := FromJSONSchema([]byte(benchSchema), benchOpts)
	if err != nil {
		b.Fatal(err)
	}
	toks := greedyTokens(b, v, benchDoc)
	toks = append(toks, v.EOG()[0])
	m := NewMatcher(g, v)
	// The tightest budget: the document's tokens up to each one, the
	// distance after it and the end token.
	tight := len(toks)
	for i, id := range toks[:len(toks)-1] {
		if err := m.Accept(id); err != nil {
			b.Fatal(err)
		}
		tight = max(tight, i+1+m.Distance()+1)
	}
	if err := m.Rollback(m.Len()); err != nil {
		b.Fatal(err)
	}
	mask := make([]uint64, MaskWords(v.Size()))
	for _, budget := range []struct {
		name  string
		total int
	}{{"ample", 1 << 20}, {"tight", tight}} {
		b.Run(budget.name, func(b *testing.B) {
			run := func() {
				for _, id := range toks {
					m.MaskBudget(mask, budget.total-m.Len())
					if mask[id>>6]&(1<<(id&63)) == 0 {
						b.Fatalf("token %d %q not in mask after %d tokens", id, v.Token(id), m.Len())
					}
					if err := m.Accept(id); err != nil {
						b.Fatal(err)
					}
				}
				if err := m.Rollback(m.Len()); err != nil {
					b.Fatal(err)
				}
			}
			run()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				run()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
		})
	}
}

func BenchmarkMaskBudgetSPM32k(b *testing.B)   { benchmarkMaskBudget(b, "llama-spm") }
func BenchmarkMaskBudgetQwen152k(b *testing.B) { benchmarkMaskBudget(b, "qwen2") }

// BenchmarkColdSchema measures a new schema on a warm model: compile, then
// walk the document with an empty mask cache (every state's entry is built).
func benchmarkCold(b *testing.B, vocab string) {
	v := loadVocab(b, vocab)
	toks := greedyTokens(b, v, benchDoc)
	mask := make([]uint64, MaskWords(v.Size()))
	b.ReportAllocs()
	for b.Loop() {
		v.cache = newMaskCache(defaultCacheBytes)
		g, err := FromJSONSchema([]byte(benchSchema), benchOpts)
		if err != nil {
			b.Fatal(err)
		}
		m := NewMatcher(g, v)
		for _, id := range toks {
			m.Mask(mask)
			if err := m.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
}

func BenchmarkColdSPM32k(b *testing.B)   { benchmarkCold(b, "llama-spm") }
func BenchmarkColdQwen152k(b *testing.B) { benchmarkCold(b, "qwen2") }

func BenchmarkStringEntryBuild(b *testing.B) {
	for _, name := range []string{"llama-spm", "qwen2"} {
		b.Run(name, func(b *testing.B) {
			v := loadVocab(b, name)
			bl := NewBuilder()
			g, err := bl.Build(bl.jsonc().str())
			if err != nil {
				b.Fatal(err)
			}
			// The state after the opening quote.
			s := g.states[g.rules[g.root].start].edges
			_ = s
			var body int32 = -1
			for i, st := range g.states {
				if st.rule == 1 && len(st.edges) > 5 {
					body = int32(i)
					break
				}
			}
			for b.Loop() {
				buildEntry(g, v, body, false, g.distances(v.single))
			}
		})
	}
}

// benchmarkUncached is the peer of benchmarkMaskAccept: the same document,
// each mask computed by a full trie walk from the live stacks without the
// cache (how a grammar engine without per-state caching works).
func benchmarkUncached(b *testing.B, vocab string) {
	v := loadVocab(b, vocab)
	g, err := FromJSONSchema([]byte(benchSchema), benchOpts)
	if err != nil {
		b.Fatal(err)
	}
	toks := greedyTokens(b, v, benchDoc)
	m := NewMatcher(g, v)
	mask := make([]uint64, MaskWords(v.Size()))
	b.ReportAllocs()
	for b.Loop() {
		for _, id := range toks {
			uncachedMask(m, mask)
			if err := m.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
		if err := m.Rollback(m.Len()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
}

func BenchmarkUncachedSPM32k(b *testing.B)   { benchmarkUncached(b, "llama-spm") }
func BenchmarkUncachedQwen152k(b *testing.B) { benchmarkUncached(b, "qwen2") }
