package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestSchemaKeywords checks, per keyword, texts the grammar must accept as
// complete and texts it must refuse.
func TestSchemaKeywords(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	cases := []struct {
		name, schema string
		accept       []string
		reject       []string
	}{
		{"string", `{"type":"string"}`, []string{`""`, `"a b"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9\uFFFF"`, `"é日本🙂"`},
			[]string{`"a`, "\"\x01\"", `"\x"`, `"\ud800"`, `"\uDFFF"`, "\"\xff\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"", `'a'`}},
		{"integer", `{"type":"integer"}`, []string{"0", "-7", "1234567890123456"}, []string{"01", "-0.5", "1e3", "+1", "12345678901234567", "-"}},
		{"number", `{"type":"number"}`, []string{"0", "-0.5", "1e3", "1.25E-07", "3.0"}, []string{".5", "1.", "1e", "01.5", "1e123"}},
		{"boolean", `{"type":"boolean"}`, []string{"true", "false"}, []string{"True", "1", "null"}},
		{"null", `{"type":"null"}`, []string{"null"}, []string{"nil", `"null"`}},
		{"enum", `{"enum":["a",1,null,[true]]}`, []string{`"a"`, "1", "null", "[true]"}, []string{`"b"`, "1.0", "[ true]"}},
		{"const", `{"const":"x<y&z"}`, []string{`"x<y&z"`}, []string{`"x\u003cy&z"`}},
		{"object strict", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"],"additionalProperties":false}`,
			[]string{`{"a":1,"b":"x"}`, "{ \"a\" : 1 ,\n  \"b\": \"x\" }"},
			[]string{`{"b":"x","a":1}`, `{"a":1}`, `{"a":1,"b":"x","c":2}`, `{}`, `{"a":1,"b":"x",}`}},
		{"object optional", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["b"]}`,
			[]string{`{"b":1}`, `{"a":1,"b":2}`, `{"b":2,"c":3}`, `{"a":1,"b":2,"c":3}`},
			[]string{`{}`, `{"a":1}`, `{"c":3,"b":2}`, `{,"b":1}`, `{"b":1,}`}},
		{"object all optional", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}`,
			[]string{`{}`, `{ }`, `{"a":1}`, `{"b":2}`, `{"a":1,"b":2}`}, []string{`{"b":2,"a":1}`, `{,}`}},
		{"object additional", `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}}`,
			[]string{`{}`, `{"a":1}`, `{"x":true}`, `{"a":1,"x":true,"y":false}`, `{"ab":true}`},
			[]string{`{"a":true}`, `{"x":1}`, `{"x":true,"a":1}`, `{"\u0061":true}`}},
		{"any object", `{"type":"object"}`, []string{`{}`}, []string{`{"k":1}`, `[]`}},
		{"array", `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`,
			[]string{"[1]", "[1, 2,3]", "[ 1 ]"}, []string{"[]", "[1,2,3,4]", "[1,]", `["a"]`}},
		{"array any", `{"type":"array"}`, []string{"[]", `[1,"a",{"b":[null]}]`}, []string{"[", "[1 2]"}},
		{"anyOf", `{"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]}`, []string{"5", `"x"`}, []string{`"xy"`, "true"}},
		{"type list", `{"type":["boolean","null"]}`, []string{"true", "null"}, []string{"0"}},
		{"string length", `{"type":"string","minLength":2,"maxLength":3}`, []string{`"ab"`, `"abc"`, `"é\n"`}, []string{`"a"`, `"abcd"`, `""`}},
		{"ref", `{"$defs":{"x":{"type":"integer"}},"type":"array","items":{"$ref":"#/$defs/x"}}`, []string{"[1,2]"}, []string{`["1"]`}},
		{"recursive", `{"$defs":{"l":{"type":"array","items":{"$ref":"#/$defs/l"}}},"$ref":"#/$defs/l"}`, []string{"[]", "[[],[[]]]"}, []string{"[1]"}},
		{"root ref", `{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"],"additionalProperties":false}`,
			[]string{`{"next":null}`, `{"next":{"next":null}}`}, []string{`{}`}},
		{"date", `{"type":"string","format":"date"}`, []string{`"2024-02-28"`, `"1999-12-31"`}, []string{`"2024-02-30"`, `"2024-13-01"`, `"2024-1-01"`, `"2024-04-31"`}},
		{"date-time", `{"type":"string","format":"date-time"}`, []string{`"2024-05-06T07:08:09Z"`, `"2024-05-06T23:59:59.123+05:30"`}, []string{`"2024-05-06 07:08:09Z"`, `"2024-05-06T24:00:00Z"`}},
		{"uuid", `{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123e4567e89b12d3a456426614174000"`}},
		{"ipv4", `{"type":"string","format":"ipv4"}`, []string{`"0.0.0.0"`, `"255.10.1.99"`}, []string{`"256.1.1.1"`, `"01.1.1.1"`}},
		{"email", `{"type":"string","format":"email"}`, []string{`"a.b@example.com"`}, []string{`"a@b"`, `".a@b.c"`}},
		{"pattern", `{"type":"string","pattern":"^[a-c]+\\d?$"}`, []string{`"abc"`, `"a1"`}, []string{`""`, `"d"`, `"a12"`}},
		{"pattern unanchored", `{"type":"string","pattern":"x"}`, []string{`"x"`, `"axb"`}, []string{`"ab"`}},
		{"pattern case folding", `{"type":"string","pattern":"^(?i)ab$"}`, []string{`"aB"`, `"AB"`}, []string{`"ac"`}},
		{"integer bounds", `{"type":"integer","minimum":-5,"exclusiveMaximum":12}`, []string{"-5", "0", "11"}, []string{"-6", "12", "-0"}},
		{"number bounds", `{"type":"number","exclusiveMinimum":0,"maximum":2}`, []string{"0.001", "1", "1.999", "2", "2.000"}, []string{"0", "0.0", "-1", "2.001", "3", "1e0"}},
		{"nullable", `{"type":"string","nullable":true}`, []string{`"a"`, "null"}, []string{"1"}},
		{"annotations ignored", `{"type":"integer","title":"t","description":"d","default":1,"examples":[1],"x-vendor":{}}`, []string{"3"}, []string{`"3"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The bounded grammar takes every accepted text; the default,
			// compact one only those without whitespace between tokens.
			for _, policy := range []struct {
				name string
				opts JSONOptions
			}{{"compact", JSONOptions{}}, {"bounded", JSONOptions{MaxWhitespace: BoundedWhitespace}}} {
				g, err := FromJSONSchema([]byte(c.schema), policy.opts)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range c.accept {
					want := policy.opts.MaxWhitespace > 0 || isCompact(t, s)
					if p, done := matches(t, g, v, s); done != want {
						t.Errorf("%s %s: %q matched %v, want %v (prefix %v)", policy.name, c.schema, s, done, want, p)
					}
				}
				for _, s := range c.reject {
					if p, done := matches(t, g, v, s); p && done {
						t.Errorf("%s %s: accepted %q", policy.name, c.schema, s)
					}
				}
			}
		})
	}
}

// isCompact reports whether the JSON text doc has no whitespace between
// tokens.
func isCompact(t *testing.T, doc string) bool {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(doc)); err != nil {
		t.Fatalf("%q: %v", doc, err)
	}
	return b.String() == doc
}

// TestIntegerRanges checks bounded integers exhaustively around the bounds.
func TestIntegerRanges(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	for _, r := range [][2]int64{{0, 0}, {-3, 3}, {7, 123}, {-1234, -99}, {10, 10000}, {95, 205}, {-1, 1001}} {
		g, err := NewBuilder().Build(intRange(r[0], r[1]))
		if err != nil {
			t.Fatal(err)
		}
		for n := r[0] - 30; n <= r[1]+30; n++ {
			_, done := matches(t, g, v, strconv.FormatInt(n, 10))
			if want := n >= r[0] && n <= r[1]; done != want {
				t.Errorf("range %v: %d matched %v, want %v", r, n, done, want)
			}
		}
		for _, bad := range []string{"-0", "007", "+1"} {
			if _, done := matches(t, g, v, bad); done {
				t.Errorf("range %v matched %q", r, bad)
			}
		}
	}
}

// TestWhitespacePolicy: the default (compact) grammar refuses whitespace at
// every place between JSON tokens and around the value, while keeping it
// inside strings; a bounded one takes runs up to its bound and no longer.
func TestWhitespacePolicy(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	schema := []byte(`{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"string"}},"required":["a","b"],"additionalProperties":false}`)
	// W marks each place whitespace may go between tokens.
	const doc = `W{W"a"W:W[W1W,W2W]W,W"b"W:W"x  y"W}W`
	parts := strings.Split(doc, "W")
	for _, c := range []struct {
		name  string
		opts  JSONOptions
		bound int // the longest run allowed
	}{
		{"zero value is compact", JSONOptions{}, 0},
		{"negative is compact", JSONOptions{MaxWhitespace: -1}, 0},
		{"bounded", JSONOptions{MaxWhitespace: BoundedWhitespace}, BoundedWhitespace},
		{"bound 3", JSONOptions{MaxWhitespace: 3}, 3},
	} {
		fromSchema, err := FromJSONSchema(schema, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		for gname, g := range map[string]*Grammar{"schema": fromSchema, "json_object": AnyJSONObject(c.opts)} {
			what := c.name + "/" + gname
			if _, done := matches(t, g, v, strings.Join(parts, "")); !done {
				t.Errorf("%s: compact text refused", what)
			}
			for place := range len(parts) - 1 {
				for _, run := range []int{1, c.bound, c.bound + 1} {
					if run == 0 {
						continue
					}
					ws := strings.Repeat(" \n\t\r", run)[:run]
					text := strings.Join(parts[:place+1], "") + ws + strings.Join(parts[place+1:], "")
					_, done := matches(t, g, v, text)
					if want := run <= c.bound; done != want {
						t.Errorf("%s: a run of %d at place %d: matched %v, want %v: %q", what, run, place, done, want, text)
					}
				}
			}
		}
	}
}

func TestParseJSONWhitespace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		want JSONOptions
		ok   bool
	}{
		{"", JSONOptions{}, true},
		{"compact", JSONOptions{}, true},
		{"Bounded", JSONOptions{MaxWhitespace: BoundedWhitespace}, true},
		{"pretty", JSONOptions{}, false},
		{"20", JSONOptions{}, false},
	} {
		got, err := ParseJSONWhitespace(c.name)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v, ok %v", c.name, got, err, c.want, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "compact or bounded") {
			t.Errorf("%q: error %q does not name the policies", c.name, err)
		}
	}
}

func TestSchemaErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		schema, pointer, msg string
	}{
		{`{"type":"string","pattern":"(?=a)"}`, "/pattern", "does not compile"},
		{`{"not":{"type":"string"}}`, "", `"not" is not supported`},
		{`{"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}}`, "/properties/a", "uniqueItems"},
		{`{"type":"object","properties":{"a/b":{"if":{}}}}`, "/properties/a~1b", `"if"`},
		{`{"type":"object","patternProperties":{"^x":{}}}`, "", "patternProperties"},
		{`{"type":"integer","multipleOf":2}`, "", "multipleOf"},
		{`{"type":"array","prefixItems":[{}]}`, "", "prefixItems"},
		{`{"allOf":[{"type":"string"},{"maxLength":3}]}`, "/allOf", "exactly one"},
		{`{"$ref":"http://example.com/s.json"}`, "/$ref", "only references within"},
		{`{"$ref":"#/$defs/missing"}`, "/$ref", "no \"$defs\""},
		{`{"type":"strin"}`, "/type", "unknown type"},
		{`{"type":"string","minLength":5,"maxLength":2}`, "", "below"},
		{`{"type":"array","maxItems":100000}`, "/maxItems", "not supported"},
		{`{"type":"integer","minimum":5,"maximum":4}`, "", "no integer"},
		{`{"type":"number","minimum":0.5}`, "", "whole numbers"},
		{`{"type":"string","format":"hostname-ish"}`, "/format", "not supported"},
		{`{"type":"object","required":["x"],"additionalProperties":false}`, "/required", "not in"},
		{`{"enum":[]}`, "/enum", "allows no value"},
		{`{"anyOf":[]}`, "/anyOf", "non-empty"},
		{`false`, "", "accepts no value"},
		{`{"minLength":1,"minimum":1}`, "", "several types"},
		{`{"$ref":"#/$defs/a","maxLength":2,"$defs":{"a":{}}}`, "", "beside other assertions"},
		{`{"type":`, "", "not valid JSON"},
	}
	for _, c := range cases {
		_, err := FromJSONSchema([]byte(c.schema), JSONOptions{})
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %v, want a *SchemaError", c.schema, err)
			continue
		}
		if se.Pointer != c.pointer || !strings.Contains(se.Error(), c.msg) {
			t.Errorf("%s: got pointer %q, %q; want pointer %q and %q", c.schema, se.Pointer, se.Error(), c.pointer, c.msg)
		}
	}
}

// TestLooseSchemas: with Loose, a schema rill cannot hold output to
// exactly compiles to a superset (the keyword dropped, or the sub-schema
// any value) instead of failing, and keeps what it can; each schema here
// is a *SchemaError without Loose. The first is Claude Code's SendMessage
// and Workflow parameters, trimmed.
func TestLooseSchemas(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	cases := []struct {
		name, schema string
		accept       []string
		reject       []string
	}{
		{"allOf of two patterns, a long maxLength", `{"type":"object","properties":{` +
			`"to":{"type":"string","allOf":[{"pattern":"^[^\\n\\r]*$"},{"pattern":"^[\\s\\S]{0,300}$"}]},` +
			`"script":{"type":"string","maxLength":524288},"n":{"type":"integer"}},"required":["to","n"],"additionalProperties":false}`,
			[]string{`{"to":"main","n":1}`, `{"to":"a\nb","script":"x","n":2}`},
			[]string{`{"to":5,"n":1}`, `{"to":"a","script":1,"n":1}`, `{"to":"a","n":"1"}`, `{"to":"a"}`, `{"to":"a","n":1,"x":1}`}},
		{"restrictions dropped", `{"type":"object","properties":{"a":{"type":"integer","multipleOf":2,"not":{"const":4}},` +
			`"b":{"type":"array","items":{"type":"string"},"uniqueItems":true,"minItems":5000}},"minProperties":1,"additionalProperties":false}`,
			[]string{`{"a":3}`, `{"a":4,"b":[]}`, `{"b":["x","x"]}`},
			[]string{`{"a":"3"}`, `{"b":[1]}`, `{"c":1}`}},
		{"bounds beside a pattern, format beside a pattern", `{"type":"array","items":{"anyOf":[` +
			`{"type":"string","pattern":"^a+$","maxLength":3},{"type":"string","format":"date","pattern":"^b+$"}]}}`,
			[]string{`["aaaa"]`, `["b","a"]`},
			[]string{`["c"]`, `[1]`}},
		{"what cannot be dropped is any value", `{"type":"object","properties":{"a":{"type":"object","patternProperties":{"^x":{}}},` +
			`"b":{"$ref":"http://example.com/s.json"},"c":false},"required":["a"],"additionalProperties":false}`,
			[]string{`{"a":{"x":1}}`, `{"a":{},"b":"x","c":[null]}`},
			[]string{`{"a":1}`, `{}`, `{"a":{},"d":1}`}},
		{"a root that cannot be compiled is any object", `{"type":"object","patternProperties":{"^x":{"type":"integer"}}}`,
			[]string{`{}`, `{"x":"1","y":[]}`}, []string{`[]`, `1`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var se *SchemaError
			if _, err := FromJSONSchema([]byte(c.schema), JSONOptions{}); !errors.As(err, &se) {
				t.Fatalf("without Loose: error %v, want a *SchemaError", err)
			}
			g, err := FromJSONSchema([]byte(c.schema), JSONOptions{Loose: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.accept {
				if p, done := matches(t, g, v, s); !done {
					t.Errorf("%q not accepted (prefix %v)", s, p)
				}
			}
			for _, s := range c.reject {
				if p, done := matches(t, g, v, s); p && done {
					t.Errorf("accepted %q", s)
				}
			}
		})
	}
	if _, err := FromJSONSchema([]byte(`{"type":`), JSONOptions{Loose: true}); err == nil {
		t.Error("a schema that is not JSON compiled with Loose")
	}
}

func TestGrammarErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func(b *Builder) Node
		msg   string
	}{
		{"undefined", func(b *Builder) Node { return Ref("nope") }, "undefined rule"},
		{"left recursion", func(b *Builder) Node {
			return b.Define("e", Alt(Seq(Ref("e"), Lit("+x")), Lit("x")))
		}, "left-recursive"},
		{"unproductive", func(b *Builder) Node { return b.Define("loop", Seq(Lit("a"), Ref("loop"))) }, "no finite text"},
		{"empty alternative", func(b *Builder) Node { return Alt() }, "no options"},
		{"bad repeat", func(b *Builder) Node { return Repeat(Lit("a"), 3, 2) }, "invalid"},
	}
	for _, c := range cases {
		b := NewBuilder()
		_, err := b.Build(c.build(b))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.msg)
		}
	}
}

func ExampleFromJSONSchema() {
	g, err := FromJSONSchema([]byte(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`), JSONOptions{MaxWhitespace: -1})
	if err != nil {
		panic(err)
	}
	toks := [][]byte{[]byte(`{"ok":`), []byte("true"), []byte("}"), []byte("false"), nil}
	v, _ := NewVocab(toks, []int{4})
	m := NewMatcher(g, v)
	mask := make([]uint64, MaskWords(v.Size()))
	for _, id := range []int{0, 1, 2} {
		m.Mask(mask)
		fmt.Printf("allowed %04b, accept %q\n", mask[0], toks[id])
		_ = m.Accept(id)
	}
	m.Mask(mask)
	fmt.Printf("allowed %05b, done %v\n", mask[0], m.Done())
	// Output:
	// allowed 0001, accept "{\"ok\":"
	// allowed 1010, accept "true"
	// allowed 0100, accept "}"
	// allowed 10000, done true
}
