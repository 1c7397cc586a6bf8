package grammar

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// weatherSchema has two required properties, one of them an enum.
const weatherSchema = `{"type":"object","properties":{"city":{"type":"string","maxLength":20},
  "unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}`

// TestDistance: the distance of a prefix is the length of its shortest
// completion (every byte is a token of byteVocab): close the open string,
// add the least value where one is due, the required properties left with
// their least values, and close the arrays and objects.
func TestDistance(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	object := AnyJSONObject(JSONOptions{})
	schema := func(s string) *Grammar {
		g, err := FromJSONSchema([]byte(s), JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	weather := schema(weatherSchema)
	optional := schema(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]}`)
	nested := schema(`{"type":"array","items":{"type":"array","items":{"type":"integer"}}}`)
	bounded := schema(`{"type":"object","properties":{"s":{"type":"string","minLength":3},"n":{"type":"array","items":{"type":"boolean"},"minItems":2}},"required":["s","n"],"additionalProperties":false}`)
	pretty := AnyJSONObject(JSONOptions{MaxWhitespace: BoundedWhitespace})
	for _, c := range []struct {
		name   string
		g      *Grammar
		prefix string
		want   string // a shortest completion
	}{
		{"object start", object, ``, `{}`},
		{"object open", object, `{`, `}`},
		{"key opened", object, `{"`, `":0}`},
		{"inside a key", object, `{"name`, `":0}`},
		{"after a key", object, `{"name"`, `:0}`},
		{"after a colon", object, `{"name":`, `0}`},
		{"inside a value string", object, `{"name":"Tom`, `"}`},
		{"after an escape", object, `{"name":"a\`, `n"}`},
		{"inside a unicode escape", object, `{"name":"\u00`, `00"}`},
		{"inside a literal", object, `{"ok":tr`, `ue}`},
		{"after a minus", object, `{"n":-`, `0}`},
		{"after a decimal point", object, `{"n":1.`, `0}`},
		{"a number may end", object, `{"n":12`, `}`},
		{"after a comma", object, `{"a":1,`, `"":0}`},
		{"in an array", object, `{"a":[`, `]}`},
		{"in nested arrays", object, `{"a":[[1,[`, `]]]}`},
		{"after an array comma", object, `{"a":[[1],`, `0]}`},
		{"in a nested object", object, `{"a":[{"b":{`, `}}]}`},
		{"complete", object, `{"a":[]}`, ``},
		{"required from the start", weather, ``, `{"city":"","unit":"celsius"}`},
		{"inside a required string", weather, `{"city":"Par`, `","unit":"celsius"}`},
		{"inside the last key", weather, `{"city":"Paris","un`, `it":"celsius"}`},
		{"inside an enum value", weather, `{"city":"Paris","unit":"f`, `ahrenheit"}`},
		{"optional properties left out", optional, ``, `{"b":""}`},
		{"optional property begun", optional, `{"a":`, `0,"b":""}`},
		{"nested array", nested, `[[1],[`, `]]`},
		{"minLength and minItems", bounded, `{"s":"a`, `aa","n":[true,true]}`},
		{"minItems left", bounded, `{"s":"abc","n":[false`, `,true]}`},
		{"whitespace allowed, not needed", pretty, "{\n  \"a\": [ 1", `]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewMatcher(c.g, v)
			if c.prefix != "" {
				if err := m.AcceptBytes([]byte(c.prefix)); err != nil {
					t.Fatal(err)
				}
			}
			if got := m.Distance(); got != len(c.want) {
				t.Errorf("Distance after %q = %d, want %d (%q)", c.prefix, got, len(c.want), c.want)
			}
			// The completion is one the grammar takes, and completes it.
			if err := m.AcceptBytes([]byte(c.want)); c.want != "" && err != nil {
				t.Fatalf("the completion %q: %v", c.want, err)
			}
			if !m.Done() || m.Distance() != 0 {
				t.Errorf("after %q%q: Done %v, Distance %d", c.prefix, c.want, m.Done(), m.Distance())
			}
		})
	}
}

// TestDistanceCountsSingleByteTokens: a completion goes byte by byte over
// the bytes that are tokens on their own. In a vocabulary without '}' and
// '0' as tokens the distance takes the way around them, or is -1 where
// there is none; MaskBudget still finds the longer tokens that finish in
// time, and falls back to the plain mask when none does.
func TestDistanceCountsSingleByteTokens(t *testing.T) {
	t.Parallel()
	var toks [][]byte
	for b := range 256 {
		if b != '}' && b != '0' {
			toks = append(toks, []byte{byte(b)})
		}
	}
	toks = append(toks, []byte(`"}`), []byte("</s>"))
	v, err := NewVocab(toks, []int{len(toks) - 1})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder()
	around, err := b.Build(Seq(Lit("<"), Alt(Lit("}"), Lit("abc")), Lit(">")))
	if err != nil {
		t.Fatal(err)
	}
	integer, err := FromJSONSchema([]byte(`{"type":"integer"}`), JSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	object := AnyJSONObject(JSONOptions{})
	closer := tokenID(v, `"}`)
	for _, c := range []struct {
		g      *Grammar
		prefix string
		want   int
		n      int   // a budget
		budget []int // the tokens MaskBudget(n) keeps; nil: none, the plain mask
	}{
		{around, ``, len(`<abc>`), 6, []int{tokenID(v, "<")}},
		{around, ``, len(`<abc>`), 5, nil},
		{around, `<`, len(`abc>`), 5, []int{tokenID(v, "a")}},
		{integer, ``, len(`1`), 3, maskIDs(plainMask(integer, v, ``))},
		{object, ``, -1, 3, nil},
		{object, `{"a":"x`, -1, 3, []int{closer}},
		{object, `{"a":1`, -1, 3, nil},
	} {
		m := NewMatcher(c.g, v)
		if err := m.AcceptBytes([]byte(c.prefix)); c.prefix != "" && err != nil {
			t.Fatal(err)
		}
		if got := m.Distance(); got != c.want {
			t.Errorf("Distance after %q = %d, want %d", c.prefix, got, c.want)
		}
		mask := make([]uint64, MaskWords(v.Size()))
		ok := m.MaskBudget(mask, c.n)
		want := c.budget
		if want == nil {
			want = maskIDs(plainMask(c.g, v, c.prefix))
		}
		if ok != (c.budget != nil) || !slices.Equal(maskIDs(mask), want) {
			t.Errorf("after %q: MaskBudget(%d) = %v with %v, want %v", c.prefix, c.n, ok, maskTexts(v, mask), want)
		}
	}
}

// plainMask is the mask of g after prefix.
func plainMask(g *Grammar, v *Vocab, prefix string) []uint64 {
	m := NewMatcher(g, v)
	if prefix != "" {
		if err := m.AcceptBytes([]byte(prefix)); err != nil {
			panic(err)
		}
	}
	mask := make([]uint64, MaskWords(v.Size()))
	m.Mask(mask)
	return mask
}

func tokenID(v *Vocab, text string) int {
	for id := range v.Size() {
		if string(v.Token(id)) == text {
			return id
		}
	}
	return -1
}

func maskIDs(mask []uint64) []int {
	var out []int
	for i, w := range mask {
		for b := range 64 {
			if w&(1<<b) != 0 {
				out = append(out, i*64+b)
			}
		}
	}
	return out
}

func maskTexts(v *Vocab, mask []uint64) []string {
	var out []string
	for _, id := range maskIDs(mask) {
		out = append(out, fmt.Sprintf("%q", v.Token(id)))
	}
	return out
}

// afterDistances is what MaskBudget decides by, the slow way: every token
// of the plain mask accepted on a clone, and the distance after it (0 for
// an end token).
func afterDistances(m *Matcher, plain []uint64) map[int]int {
	out := map[int]int{}
	c := m.Clone()
	for _, id := range maskIDs(plain) {
		if m.v.isEOG(id) {
			out[id] = 0
			continue
		}
		if err := c.Accept(id); err != nil {
			panic(err)
		}
		out[id] = c.Distance()
		if err := c.Rollback(1); err != nil {
			panic(err)
		}
	}
	return out
}

// budgetOracle sets dst to the tokens of after that fit budget: an end
// token when there is one left for it, any other when the distance after
// it leaves room for the end token. When none does, it is the plain mask
// and budgetOracle returns false.
func budgetOracle(v *Vocab, after map[int]int, plain, dst []uint64, budget int) bool {
	clear(dst)
	fit := false
	for id, d := range after {
		if (v.isEOG(id) && budget >= 1) || (!v.isEOG(id) && d >= 0 && d <= budget-2) {
			dst[id>>6] |= 1 << (id & 63)
			fit = true
		}
	}
	if !fit {
		copy(dst, plain)
	}
	return fit
}

// fillerVocab is byteVocab with extra tokens and n fillers that only fit
// inside strings ("zq0", "zq1", ...), so that outside strings masks are
// sparse and inside them dense.
func fillerVocab(tb testing.TB, n int, extra ...string) *Vocab {
	for i := range n {
		extra = append(extra, fmt.Sprintf("zq%d", i))
	}
	return byteVocab(tb, extra...)
}

// TestMaskBudgetMatchesOracle: along sampled documents, at every budget
// from hopeless to ample, MaskBudget keeps exactly the tokens after which
// the grammar can be completed and the end token emitted within the budget
// (the plain mask when there are none), and with an ample budget equals
// Mask.
func TestMaskBudgetMatchesOracle(t *testing.T) {
	t.Parallel()
	extra := []string{`{"`, `":`, `":"`, `"}`, `"},{"`, `]]`, `}]`, `\u00`, `null`, `true`, `12`, "\n  ", `-1`, `"a`, `1.`}
	vocabs := map[string]*Vocab{"bytes": byteVocab(t, extra...), "bytes and fillers": fillerVocab(t, 3000, extra...)}
	if !testing.Short() {
		vocabs["llama-spm"] = loadVocab(t, "llama-spm")
	}
	grammars := map[string]*Grammar{"json_object": AnyJSONObject(JSONOptions{}), "bounded": AnyJSONObject(JSONOptions{MaxWhitespace: BoundedWhitespace})}
	for _, c := range propertySchemas {
		if c.name == "weather tool" || c.name == "recursive $ref" || c.name == "strict object" {
			g, err := FromJSONSchema([]byte(c.schema), JSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			grammars[c.name] = g
		}
	}
	for vname, v := range vocabs {
		for gname, g := range grammars {
			t.Run(vname+"/"+gname, func(t *testing.T) {
				t.Parallel()
				s := newSampler(v, uint64(len(gname))*31+uint64(len(vname)))
				words := MaskWords(v.Size())
				got, want, plain := make([]uint64, words), make([]uint64, words), make([]uint64, words)
				checks, restricted, steps := 0, 0, 40
				if vname == "llama-spm" {
					steps = 8
				}
				for range 3 {
					m := NewMatcher(g, v)
					for range steps {
						m.Mask(plain)
						after := afterDistances(m, plain)
						d := m.Distance()
						for budget := range max(d, 0) + 8 {
							ok := m.MaskBudget(got, budget)
							fit := budgetOracle(v, after, plain, want, budget)
							if !slices.Equal(got, want) || ok != fit {
								t.Fatalf("after %d tokens (distance %d), budget %d: MaskBudget keeps %v (%v), the oracle %v (%v)",
									m.Len(), d, budget, maskTexts(v, got), ok, maskTexts(v, want), fit)
							}
							if ok && !slices.Equal(got, plain) {
								restricted++
							}
							checks++
						}
						if m.MaskBudget(got, 1<<20); !slices.Equal(got, plain) {
							t.Fatalf("after %d tokens an ample budget changes the mask", m.Len())
						}
						id := s.next(m, m.Len())
						if id < 0 || m.Accept(id) != nil || m.Ended() {
							break
						}
					}
				}
				if restricted == 0 {
					t.Errorf("none of %d checks kept fewer tokens than the plain mask", checks)
				}
				t.Logf("%d checks, %d with fewer tokens than the plain mask", checks, restricted)
			})
		}
	}
}

// TestMaskBudgetFinishes: drawing uniformly among the tokens MaskBudget
// keeps (a "model" to which the end token is one among thousands), every
// document ends with an end token within its budget, from the tightest
// budget that allows it to ample ones, and is valid. Drawn from the plain
// mask, the open-ended ones (objects, strings, arrays) would run out.
func TestMaskBudgetFinishes(t *testing.T) {
	t.Parallel()
	vocabs := map[string]*Vocab{"bytes": byteVocab(t, `{"`, `":`, `", "`, `"}`, `null`, `true`, `},{`, "\n  ", `12`, `\n`, `é`)}
	if !testing.Short() {
		for _, name := range realVocabs {
			vocabs[name] = loadVocab(t, name)
		}
	}
	type target struct {
		name, schema string
		opts         JSONOptions
	}
	targets := []target{{"json_object", "", JSONOptions{}}, {"json_object bounded", "", JSONOptions{MaxWhitespace: BoundedWhitespace}},
		{"weather", weatherSchema, JSONOptions{}}, {"weather bounded", weatherSchema, JSONOptions{MaxWhitespace: BoundedWhitespace}}}
	for _, c := range propertySchemas {
		targets = append(targets, target{c.name, c.schema, JSONOptions{}})
	}
	for vname, v := range vocabs {
		for _, tg := range targets {
			t.Run(vname+"/"+tg.name, func(t *testing.T) {
				t.Parallel()
				g := AnyJSONObject(tg.opts)
				validator := `{"type":"object"}`
				if tg.schema != "" {
					var err error
					if g, err = FromJSONSchema([]byte(tg.schema), tg.opts); err != nil {
						t.Fatal(err)
					}
					validator = tg.schema
				}
				for _, c := range propertySchemas {
					if c.schema == tg.schema && c.validator != "" {
						validator = c.validator
					}
				}
				val := compileValidator(t, validator)
				s := newSampler(v, uint64(len(tg.name))*131+uint64(len(vname)))
				least := NewMatcher(g, v).Distance() + 1 // the shortest document and its end token
				for _, budget := range []int{least, least + 1, least + 4, least + 20, least + 60} {
					m := NewMatcher(g, v)
					var out []byte
					for m.Len() < budget && !m.Ended() {
						if !m.MaskBudget(s.mask, budget-m.Len()) {
							t.Fatalf("budget %d: no token fits after %d tokens %q", budget, m.Len(), out)
						}
						id := s.pick(s.mask)
						if err := m.Accept(id); err != nil {
							t.Fatal(err)
						}
						out = append(out, v.Token(id)...)
					}
					if !m.Ended() {
						t.Fatalf("budget %d: no end after %d tokens: %q", budget, m.Len(), out)
					}
					inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(out)))
					if err != nil {
						t.Fatalf("budget %d: not JSON: %v: %q", budget, err, out)
					}
					if err := val.Validate(inst); err != nil {
						t.Fatalf("budget %d: not valid: %v: %q", budget, err, out)
					}
					if !json.Valid(out) {
						t.Fatalf("budget %d: %q", budget, out)
					}
				}
			})
		}
	}
}
