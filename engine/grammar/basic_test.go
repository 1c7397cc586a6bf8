package grammar

import (
	"testing"
)

// byteVocab is a vocabulary of the 256 single bytes followed by extra
// multi-byte tokens, and an end-of-generation token last.
func byteVocab(tb testing.TB, extra ...string) *Vocab {
	tb.Helper()
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	for _, e := range extra {
		toks = append(toks, []byte(e))
	}
	toks = append(toks, []byte("</s>"))
	v, err := NewVocab(toks, []int{len(toks) - 1})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// matches feeds s byte by byte and reports whether every byte was allowed
// (checked against Mask too) and whether the grammar is then complete.
func matches(tb testing.TB, g *Grammar, v *Vocab, s string) (prefix, complete bool) {
	tb.Helper()
	m := NewMatcher(g, v)
	mask := make([]uint64, MaskWords(v.Size()))
	for i := 0; i < len(s); i++ {
		m.Mask(mask)
		inMask := mask[s[i]>>6]&(1<<(s[i]&63)) != 0
		err := m.Accept(int(s[i]))
		if inMask != (err == nil) {
			tb.Fatalf("byte %d of %q: mask says %v, Accept says %v", i, s, inMask, err)
		}
		if err != nil {
			return false, false
		}
	}
	return true, m.Done()
}

func TestLiteralGrammar(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	g, err := NewBuilder().Build(Seq(Lit("<a>"), Alt(Lit("x"), Lit("yy")), Repeat(Lit("z"), 1, 3), Lit("</a>")))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in               string
		prefix, complete bool
	}{
		{"", true, false},
		{"<a>", true, false},
		{"<a>xz</a>", true, true},
		{"<a>yyzzz</a>", true, true},
		{"<a>yyzzzz</a>", false, false},
		{"<a>x</a>", false, false},
		{"<a>y", true, false},
		{"<b>", false, false},
	}
	for _, c := range cases {
		p, done := matches(t, g, v, c.in)
		if p != c.prefix || done != c.complete {
			t.Errorf("%q: prefix %v complete %v, want %v %v", c.in, p, done, c.prefix, c.complete)
		}
	}
}
