package grammar

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// propertySchemas exercise every supported keyword; each is sampled under the
// mask and every completed document must validate against it.
var propertySchemas = []struct {
	name, schema string
	validator    string // the schema to validate with, when the validator lacks a keyword
}{
	{"strict object", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ok":{"type":"boolean"},"none":{"type":"null"}},"required":["name","age","ok","none"],"additionalProperties":false}`, ""},
	{"optional properties", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"number"},"d":{"type":"boolean"}},"required":["b"]}`, ""},
	{"enum", `{"enum":["red","green",1,null,true,{"k":[1]}]}`, ""},
	{"typed enum", `{"type":"string","enum":["red",1,"blue"]}`, ""},
	{"const", `{"const":{"x":[1,"a\"b"],"y":null}}`, ""},
	{"array bounds", `{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":4}`, ""},
	{"array empty", `{"type":"array","items":{"type":"integer"},"maxItems":0}`, ""},
	{"anyOf", `{"anyOf":[{"type":"string"},{"type":"object","properties":{"k":{"type":"boolean"}},"required":["k"],"additionalProperties":false}]}`, ""},
	{"oneOf disjoint", `{"oneOf":[{"type":"integer"},{"type":"array","items":{"type":"string"},"maxItems":2}]}`, ""},
	{"recursive $ref", `{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value","children"],"additionalProperties":false}}}`, ""},
	{"definitions $ref", `{"type":"object","properties":{"p":{"$ref":"#/definitions/p"}},"required":["p"],"definitions":{"p":{"type":"string","enum":["x","y"]}}}`, ""},
	{"allOf one", `{"allOf":[{"type":"integer","minimum":3,"maximum":5}]}`, ""},
	{"string length", `{"type":"string","minLength":2,"maxLength":5}`, ""},
	{"date", `{"type":"string","format":"date"}`, ""},
	{"time", `{"type":"string","format":"time"}`, ""},
	{"date-time", `{"type":"string","format":"date-time"}`, ""},
	{"uuid", `{"type":"string","format":"uuid"}`, ""},
	{"email", `{"type":"string","format":"email"}`, ""},
	{"ipv4", `{"type":"string","format":"ipv4"}`, ""},
	{"pattern anchored", `{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}`, ""},
	{"pattern anchored escapes", `{"type":"string","pattern":"^(a|\"|\\n|\\\\|é)+$"}`, ""},
	{"pattern unanchored", `{"type":"string","pattern":"[0-9]{2}"}`, ""},
	{"integer range", `{"type":"integer","minimum":-1234,"maximum":987}`, ""},
	{"integer exclusive", `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":100}`, ""},
	{"number range", `{"type":"number","minimum":-2,"exclusiveMaximum":3}`, ""},
	{"number positive", `{"type":"number","exclusiveMinimum":0}`, ""},
	{"number draft4", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"number","minimum":0,"exclusiveMinimum":true,"maximum":1}`, ""},
	{"type list", `{"type":["string","null"]}`, ""},
	{"nullable", `{"type":"integer","nullable":true}`, `{"type":["integer","null"]}`},
	{"additional schema", `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}`, ""},
	{"additional true", `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":true}`, ""},
	{"any", `{}`, ""},
	{"true", `true`, ""},
	{"weather tool", `{"type":"object","properties":{"location":{"type":"string","description":"City"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["location","unit","days"],"additionalProperties":false}`, ""},
}

// sampler draws tokens uniformly among those the mask allows, leaning
// towards closing tokens (quotes, brackets, digits) after a while so that
// documents end.
type sampler struct {
	rng     *rand.Rand
	v       *Vocab
	mask    []uint64
	closing []uint64 // tokens with '"', ']' or '}', single digits, EOG
	cand    []uint64
}

func newSampler(v *Vocab, seed uint64) *sampler {
	words := MaskWords(v.Size())
	s := &sampler{rng: rand.New(rand.NewPCG(seed, 7)), v: v, mask: make([]uint64, words),
		closing: make([]uint64, words), cand: make([]uint64, words)}
	for id := range v.Size() {
		t := v.Token(id)
		if t == nil || bytes.ContainsAny(t, "\"]}") || (len(t) == 1 && t[0] >= '0' && t[0] <= '9') {
			s.closing[id>>6] |= 1 << (id & 63)
		}
	}
	return s
}

// pick returns a uniformly drawn set bit of set (-1 when none is set).
func (s *sampler) pick(set []uint64) int {
	n := 0
	for _, w := range set {
		n += bits.OnesCount64(w)
	}
	if n == 0 {
		return -1
	}
	k := s.rng.IntN(n)
	for i, w := range set {
		c := bits.OnesCount64(w)
		if k >= c {
			k -= c
			continue
		}
		for ; ; k-- {
			b := bits.TrailingZeros64(w)
			if k == 0 {
				return i*64 + b
			}
			w &^= 1 << b
		}
	}
	return -1
}

// next picks a token allowed by the mask (-1 when none is).
func (s *sampler) next(m *Matcher, step int) int {
	m.Mask(s.mask)
	if step > 24 && s.rng.IntN(4) != 0 {
		for i := range s.cand {
			s.cand[i] = s.mask[i] & s.closing[i]
		}
		if id := s.pick(s.cand); id >= 0 {
			return id
		}
	}
	return s.pick(s.mask)
}

// checkMask compares the mask bit of a few tokens with Allowed, which walks
// the token's bytes without the mask cache.
func checkMask(t *testing.T, m *Matcher, mask []uint64, rng *rand.Rand, picked int) {
	t.Helper()
	ids := []int{picked}
	for range 24 {
		ids = append(ids, rng.IntN(m.v.Size()))
	}
	for id := range min(m.v.Size(), 300) {
		ids = append(ids, id)
	}
	for _, id := range ids {
		inMask := mask[id>>6]&(1<<(id&63)) != 0
		if inMask != m.Allowed(id) {
			t.Fatalf("token %d %q: mask says %v, Allowed says %v", id, m.v.Token(id), inMask, !inMask)
		}
	}
}

func compileValidator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// generate samples one document under g; it returns the text and whether
// the grammar completed (an end-of-generation token was drawn).
func generate(t *testing.T, g *Grammar, s *sampler, maxSteps int, check bool) (string, bool) {
	t.Helper()
	m := NewMatcher(g, s.v)
	var out []byte
	for step := range maxSteps {
		id := s.next(m, step)
		if id < 0 {
			t.Fatalf("no token allowed after %q", out)
		}
		if check {
			checkMask(t, m, s.mask, s.rng, id)
		}
		if err := m.Accept(id); err != nil {
			t.Fatalf("accept %d after %q: %v", id, out, err)
		}
		if m.Ended() {
			return string(out), true
		}
		out = append(out, s.v.Token(id)...)
	}
	return string(out), false
}

func TestSampledDocumentsValidate(t *testing.T) {
	t.Parallel()
	vocabs := map[string]*Vocab{"bytes": byteVocab(t, `{"`, `":`, `", "`, `"}`, `null`, `true`, `},{`, "\n  ", `12`, `\n`, `é`)}
	for _, name := range realVocabs {
		vocabs[name] = loadVocab(t, name)
	}
	samples := 12
	if testing.Short() {
		samples = 3
	}
	for vname, v := range vocabs {
		for _, c := range propertySchemas {
			t.Run(vname+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				g, err := FromJSONSchema([]byte(c.schema), JSONOptions{})
				if err != nil {
					t.Fatal(err)
				}
				vs := c.schema
				if c.validator != "" {
					vs = c.validator
				}
				val := compileValidator(t, vs)
				s := newSampler(v, uint64(len(c.name))*977+uint64(len(vname)))
				completed := 0
				for i := range samples {
					doc, done := generate(t, g, s, 400, i < 2)
					if !done {
						continue
					}
					completed++
					var inst any
					if err := json.Unmarshal([]byte(doc), &inst); err != nil {
						t.Fatalf("sample %d is not JSON: %v\n%s", i, err, doc)
					}
					inst, err = jsonschema.UnmarshalJSON(strings.NewReader(doc))
					if err != nil {
						t.Fatal(err)
					}
					if err := val.Validate(inst); err != nil {
						t.Fatalf("sample %d does not validate: %v\n%s", i, err, doc)
					}
				}
				if completed < samples/2 {
					t.Errorf("only %d of %d samples completed within 400 tokens", completed, samples)
				}
			})
		}
	}
}

func TestJSONObjectMode(t *testing.T) {
	t.Parallel()
	v := loadVocab(t, "qwen2")
	g := AnyJSONObject(JSONOptions{})
	s := newSampler(v, 42)
	for i := range 10 {
		doc, done := generate(t, g, s, 400, i == 0)
		if !done {
			continue
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("sample %d is not a JSON object: %v\n%s", i, err, doc)
		}
	}
	// A JSON value that is not an object is refused from the first byte.
	m := NewMatcher(g, v)
	for _, text := range []string{"[", `"`, "1", "t"} {
		if m.AcceptBytes([]byte(text)) == nil {
			t.Errorf("json_object accepted %q", text)
		}
	}
}
