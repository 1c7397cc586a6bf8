package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Supported JSON Schema (the subset of OpenAI's strict structured outputs,
// and more):
//
//   - type (one name or a list), enum, const, nullable (OpenAPI);
//   - object: properties (generated in the schema's order), required,
//     additionalProperties (false or absent: no other properties; true or a
//     schema: further properties after the listed ones);
//     unevaluatedProperties: false (the same as absent);
//   - array: items, minItems, maxItems (up to maxRepeat);
//   - string: minLength, maxLength (up to maxRepeat), format (date, time,
//     date-time, uuid, email, ipv4), pattern (a regular expression; see
//     regex.go for the supported syntax);
//   - integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum;
//     number: the same, when the bounds are whole numbers;
//   - anyOf, oneOf (generated as anyOf: the alternatives should be
//     disjoint), allOf with one schema, $ref to "#" or a JSON pointer in the
//     document ($defs, definitions, ...), recursion included;
//   - annotations are ignored: title, description, default, examples,
//     $schema, $id, $comment, deprecated, readOnly, writeOnly, and any
//     keyword JSON Schema does not define.
//
// Keywords that assert something the generator cannot guarantee are refused
// with a *SchemaError: not, if/then/else, patternProperties, propertyNames,
// min/maxProperties, dependentRequired, dependentSchemas, dependencies,
// uniqueItems: true, contains, prefixItems, additionalItems,
// unevaluatedItems, multipleOf, $dynamicRef, remote $refs, allOf with more
// than one schema. JSONOptions.Loose compiles them to a superset instead
// (see loosen).

// maxRepeat bounds minItems, maxItems, minLength and maxLength, which are
// compiled by unrolling.
const maxRepeat = 1024

var annotationKeywords = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$anchor": true, "$defs": true, "definitions": true, "$vocabulary": true,
	"contentMediaType": true, "contentEncoding": true, "contentSchema": true,
}

var unsupportedKeywords = []string{
	"not", "if", "then", "else", "patternProperties", "propertyNames", "minProperties",
	"maxProperties", "dependentRequired", "dependentSchemas", "dependencies", "contains",
	"minContains", "maxContains", "prefixItems", "additionalItems", "unevaluatedItems",
	"multipleOf", "$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor",
}

// Keywords by the type they constrain, to infer a missing "type".
var typeKeywords = []struct {
	typ      string
	keywords []string
}{
	{"object", []string{"properties", "required", "additionalProperties", "unevaluatedProperties"}},
	{"array", []string{"items", "minItems", "maxItems"}},
	{"string", []string{"minLength", "maxLength", "format", "pattern"}},
	{"number", []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
}

type schemaCompiler struct {
	c      *jsonCompiler
	root   any
	ws     int
	loose  bool              // JSONOptions.Loose
	prefix string            // rule name prefix of this schema
	refs   map[string]string // JSON pointer -> rule name, for $ref targets
}

func (s *schemaCompiler) b() *Builder { return s.c.b }

func (s *schemaCompiler) whitespace() Node { return Whitespace(s.ws) }

// compile returns the pattern of values valid against schema v at ptr.
// Loose, a sub-schema that cannot be compiled matches any value of its
// type (anyOfType); the innermost one fails first, so the rest of the
// schema still holds.
func (s *schemaCompiler) compile(v any, ptr string) (Node, error) {
	n, err := s.compileExact(v, ptr)
	if _, bad := errors.AsType[*SchemaError](err); bad && s.loose {
		return s.anyOfType(v), nil
	}
	return n, err
}

// anyOfType is Loose's stand-in for a schema that cannot be compiled: any
// value of the one type it names (any object, not rill's closed empty
// one), or any value at all, a superset of what the schema accepts.
func (s *schemaCompiler) anyOfType(v any) Node {
	o, ok := v.(*jsonObject)
	if !ok {
		return s.c.anyValue(s.ws)
	}
	if n, _ := o.get("nullable"); n == true {
		return s.c.anyValue(s.ws)
	}
	switch t, _ := o.get("type"); t {
	case "object":
		return s.c.anyObject(s.ws)
	case "null", "boolean", "string", "integer", "number", "array":
		if n, err := s.typed(&jsonObject{}, t.(string), ""); err == nil {
			return n
		}
	}
	return s.c.anyValue(s.ws)
}

func (s *schemaCompiler) compileExact(v any, ptr string) (Node, error) {
	switch v := v.(type) {
	case bool:
		if !v {
			return nil, schemaErr(ptr, "the schema false accepts no value")
		}
		return s.c.anyValue(s.ws), nil
	case *jsonObject:
		if s.loose {
			v = loosen(v)
		}
		return s.compileObject(v, ptr)
	}
	return nil, schemaErr(ptr, "a schema must be an object or a boolean, not %s", jsonType(v))
}

// restrictions are the unsupported keywords that only ever take values
// away: dropping one accepts a superset. (patternProperties,
// prefixItems, additionalItems, unevaluatedItems and the dynamic
// references also let values in, under rill's closed objects and uniform
// items, so a schema with one of those is left to fail.)
var restrictions = []string{
	"not", "if", "then", "else", "propertyNames", "minProperties", "maxProperties",
	"dependentRequired", "dependentSchemas", "dependencies", "contains", "minContains",
	"maxContains", "multipleOf", "uniqueItems", "$dynamicAnchor", "$recursiveAnchor",
}

// loosen returns o without what Loose drops: the restrictions, an allOf
// that is not one schema alone, a bound on length or items above
// maxRepeat, length bounds beside a format or pattern, and a format
// beside a pattern. Each only widens what o accepts.
func loosen(o *jsonObject) *jsonObject {
	drop := func(k string) {
		if _, ok := o.get(k); ok {
			o = o.without(k)
		}
	}
	for _, k := range restrictions {
		drop(k)
	}
	if a, ok := o.get("allOf"); ok {
		if list, ok := a.([]any); !ok || len(list) != 1 || len(o.assertions("allOf")) > 0 {
			drop("allOf")
		}
	}
	_, format := o.get("format")
	_, pattern := o.get("pattern")
	for _, k := range []string{"minLength", "maxLength", "minItems", "maxItems"} {
		v, _ := o.get(k)
		beside := (format || pattern) && strings.HasSuffix(k, "Length")
		if n, ok := v.(json.Number); ok && (beside || !fitsRepeat(n)) {
			drop(k)
		}
	}
	if format && pattern {
		drop("format")
	}
	return o
}

// fitsRepeat reports whether n is a bound rill unrolls (at most maxRepeat).
func fitsRepeat(n json.Number) bool {
	f, err := n.Float64()
	return err == nil && f <= maxRepeat
}

func (s *schemaCompiler) compileObject(o *jsonObject, ptr string) (Node, error) {
	for _, k := range unsupportedKeywords {
		if _, ok := o.get(k); ok {
			return nil, schemaErr(ptr, "the keyword %q is not supported", k)
		}
	}
	if u, ok := o.get("uniqueItems"); ok && u != false {
		return nil, schemaErr(ptr, "the keyword \"uniqueItems\" is not supported (only false)")
	}
	if u, ok := o.get("unevaluatedProperties"); ok && u != false {
		return nil, schemaErr(ptr, "the keyword \"unevaluatedProperties\" is supported only as false")
	}
	if n, ok := o.get("nullable"); ok && n == true {
		rest := o.without("nullable")
		inner, err := s.compileObject(rest, ptr)
		if err != nil {
			return nil, err
		}
		return Alt(inner, s.c.null()), nil
	}
	if r, ok := o.get("$ref"); ok {
		if others := o.assertions("$ref"); len(others) > 0 {
			return nil, schemaErr(ptr, "\"$ref\" beside other assertions (%s) is not supported", strings.Join(others, ", "))
		}
		ref, ok := r.(string)
		if !ok {
			return nil, schemaErr(ptr+"/$ref", "\"$ref\" must be a string")
		}
		return s.ref(ref, ptr+"/$ref")
	}
	if c, ok := o.get("const"); ok {
		return Lit(literalJSON(c)), nil
	}
	if e, ok := o.get("enum"); ok {
		return s.enum(o, e, ptr)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if a, ok := o.get(kw); ok {
			if others := o.assertions(kw); len(others) > 0 {
				return nil, schemaErr(ptr, "%q beside other assertions (%s) is not supported", kw, strings.Join(others, ", "))
			}
			return s.anyOf(a, ptr+"/"+kw)
		}
	}
	if a, ok := o.get("allOf"); ok {
		list, ok := a.([]any)
		if !ok || len(list) != 1 {
			return nil, schemaErr(ptr+"/allOf", "\"allOf\" is supported only with exactly one schema")
		}
		if others := o.assertions("allOf"); len(others) > 0 {
			return nil, schemaErr(ptr, "\"allOf\" beside other assertions (%s) is not supported", strings.Join(others, ", "))
		}
		return s.compile(list[0], ptr+"/allOf/0")
	}
	types, err := s.types(o, ptr)
	if err != nil {
		return nil, err
	}
	var alts []Node
	for _, t := range types {
		n, err := s.typed(o, t, ptr)
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return Alt(alts...), nil
}

// without returns o less the keyword k.
func (o *jsonObject) without(k string) *jsonObject {
	out := &jsonObject{vals: map[string]any{}}
	for _, key := range o.keys {
		if key != k {
			out.keys = append(out.keys, key)
			out.vals[key] = o.vals[key]
		}
	}
	return out
}

// assertions lists o's keywords that constrain values, other than except.
func (o *jsonObject) assertions(except string) []string {
	var out []string
	for _, k := range o.keys {
		if k == except || annotationKeywords[k] || !isAssertion(k) {
			continue
		}
		out = append(out, k)
	}
	return out
}

func isAssertion(k string) bool {
	switch k {
	case "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable":
		return true
	}
	for _, g := range typeKeywords {
		if slices.Contains(g.keywords, k) {
			return true
		}
	}
	return slices.Contains(unsupportedKeywords, k)
}

// types returns the JSON types o allows: its "type", or the type its
// keywords imply, or every type.
func (s *schemaCompiler) types(o *jsonObject, ptr string) ([]string, error) {
	t, ok := o.get("type")
	if !ok {
		var implied []string
		for _, g := range typeKeywords {
			for _, k := range g.keywords {
				if _, ok := o.get(k); ok {
					implied = append(implied, g.typ)
					break
				}
			}
		}
		switch len(implied) {
		case 0:
			return []string{"any"}, nil
		case 1:
			return implied, nil
		}
		return nil, schemaErr(ptr, "keywords of several types (%s) without \"type\"; say which type is meant", strings.Join(implied, ", "))
	}
	var names []string
	switch t := t.(type) {
	case string:
		names = []string{t}
	case []any:
		for _, e := range t {
			n, ok := e.(string)
			if !ok {
				return nil, schemaErr(ptr+"/type", "\"type\" must list type names")
			}
			names = append(names, n)
		}
	default:
		return nil, schemaErr(ptr+"/type", "\"type\" must be a string or an array of strings")
	}
	if len(names) == 0 {
		return nil, schemaErr(ptr+"/type", "\"type\" lists no type")
	}
	for _, n := range names {
		switch n {
		case "object", "array", "string", "number", "integer", "boolean", "null":
		default:
			return nil, schemaErr(ptr+"/type", "unknown type %q", n)
		}
	}
	if slices.Contains(names, "number") {
		names = slices.DeleteFunc(names, func(n string) bool { return n == "integer" })
	}
	return names, nil
}

func (s *schemaCompiler) typed(o *jsonObject, t, ptr string) (Node, error) {
	switch t {
	case "any":
		return s.c.anyValue(s.ws), nil
	case "null":
		return s.c.null(), nil
	case "boolean":
		return s.c.boolean(), nil
	case "string":
		return s.stringSchema(o, ptr)
	case "integer", "number":
		return s.numberSchema(o, t == "integer", ptr)
	case "array":
		return s.arraySchema(o, ptr)
	}
	return s.objectSchema(o, ptr)
}

// literalJSON is the compact JSON text of v, which a const or enum value
// must match byte for byte.
func literalJSON(v any) string {
	var sb strings.Builder
	encodeJSON(&sb, v)
	return sb.String()
}

func (s *schemaCompiler) enum(o *jsonObject, e any, ptr string) (Node, error) {
	list, ok := e.([]any)
	if !ok {
		return nil, schemaErr(ptr+"/enum", "\"enum\" must be an array")
	}
	var allowed []string
	if _, ok := o.get("type"); ok {
		var err error
		if allowed, err = s.types(o, ptr); err != nil {
			return nil, err
		}
	}
	var alts []Node
	seen := map[string]bool{}
	for _, v := range list {
		if allowed != nil {
			t := jsonType(v)
			if !slices.Contains(allowed, t) && (t != "integer" || !slices.Contains(allowed, "number")) {
				continue
			}
		}
		lit := literalJSON(v)
		if !seen[lit] {
			seen[lit] = true
			alts = append(alts, Lit(lit))
		}
	}
	if len(alts) == 0 {
		return nil, schemaErr(ptr+"/enum", "\"enum\" allows no value")
	}
	return Alt(alts...), nil
}

func (s *schemaCompiler) anyOf(a any, ptr string) (Node, error) {
	list, ok := a.([]any)
	if !ok || len(list) == 0 {
		return nil, schemaErr(ptr, "must be a non-empty array of schemas")
	}
	var alts []Node
	for i, sub := range list {
		n, err := s.compile(sub, fmt.Sprintf("%s/%d", ptr, i))
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	return Alt(alts...), nil
}

// ref resolves a $ref within the document and returns a call of the rule
// compiled from its target (defined once, so references may recurse).
func (s *schemaCompiler) ref(ref, ptr string) (Node, error) {
	if !strings.HasPrefix(ref, "#") {
		return nil, schemaErr(ptr, "only references within the schema (\"#...\") are supported, not %q", ref)
	}
	frag, err := url.PathUnescape(ref[1:])
	if err != nil {
		return nil, schemaErr(ptr, "malformed reference %q", ref)
	}
	if name, ok := s.refs[frag]; ok {
		return Ref(name), nil
	}
	target, err := s.resolve(frag)
	if err != nil {
		return nil, schemaErr(ptr, "reference %q: %v", ref, err)
	}
	name := s.b().uniqueName(s.prefix + "#" + frag)
	s.refs[frag] = name
	s.b().Define(name, nil)
	n, err := s.compile(target, frag)
	if err != nil {
		return nil, err
	}
	s.b().Define(name, n)
	return Ref(name), nil
}

// resolve follows a JSON pointer from the document root.
func (s *schemaCompiler) resolve(frag string) (any, error) {
	if frag == "" {
		return s.root, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("anchors are not supported")
	}
	cur := s.root
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case *jsonObject:
			v, ok := c.get(tok)
			if !ok {
				return nil, fmt.Errorf("no %q", tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("no element %q", tok)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%q is inside a %s", tok, jsonType(c))
		}
	}
	return cur, nil
}

// intKeyword reads a non-negative integer keyword bounded by maxRepeat;
// absent gives def.
func intKeyword(o *jsonObject, k string, def int, ptr string) (int, error) {
	v, ok := o.get(k)
	if !ok {
		return def, nil
	}
	n, isNum := v.(json.Number)
	f, err := n.Float64()
	if !isNum || err != nil || f < 0 || f != math.Trunc(f) {
		return 0, schemaErr(ptr+"/"+k, "%q must be a non-negative integer", k)
	}
	if f > maxRepeat {
		return 0, schemaErr(ptr+"/"+k, "%q above %d is not supported", k, maxRepeat)
	}
	return int(f), nil
}

func (s *schemaCompiler) stringSchema(o *jsonObject, ptr string) (Node, error) {
	minLen, err := intKeyword(o, "minLength", 0, ptr)
	if err != nil {
		return nil, err
	}
	maxLen, err := intKeyword(o, "maxLength", -1, ptr)
	if err != nil {
		return nil, err
	}
	if maxLen >= 0 && maxLen < minLen {
		return nil, schemaErr(ptr, "\"maxLength\" %d is below \"minLength\" %d", maxLen, minLen)
	}
	f, hasFormat := o.get("format")
	p, hasPattern := o.get("pattern")
	if hasFormat || hasPattern {
		if minLen > 0 || maxLen >= 0 {
			return nil, schemaErr(ptr, "string length bounds together with \"format\" or \"pattern\" are not supported")
		}
		if hasFormat && hasPattern {
			return nil, schemaErr(ptr, "\"format\" together with \"pattern\" is not supported")
		}
	}
	if hasFormat {
		name, ok := f.(string)
		if !ok {
			return nil, schemaErr(ptr+"/format", "\"format\" must be a string")
		}
		n, ok := formatNode(name)
		if !ok {
			return nil, schemaErr(ptr+"/format", "the string format %q is not supported", name)
		}
		return s.c.shared("json:format/"+name, func() Node { return Seq(Lit(`"`), n, Lit(`"`)) }), nil
	}
	if hasPattern {
		src, ok := p.(string)
		if !ok {
			return nil, schemaErr(ptr+"/pattern", "\"pattern\" must be a string")
		}
		n, err := patternNode(src)
		if err != nil {
			return nil, schemaErr(ptr+"/pattern", "%v", err)
		}
		name := s.b().uniqueName(s.prefix + ptr + "/pattern")
		s.b().Define(name, Seq(Lit(`"`), n, Lit(`"`)))
		return Ref(name), nil
	}
	return s.c.boundedString(minLen, maxLen), nil
}

func (s *schemaCompiler) arraySchema(o *jsonObject, ptr string) (Node, error) {
	minItems, err := intKeyword(o, "minItems", 0, ptr)
	if err != nil {
		return nil, err
	}
	maxItems, err := intKeyword(o, "maxItems", -1, ptr)
	if err != nil {
		return nil, err
	}
	if maxItems >= 0 && maxItems < minItems {
		return nil, schemaErr(ptr, "\"maxItems\" %d is below \"minItems\" %d", maxItems, minItems)
	}
	item := s.c.anyValue(s.ws)
	if it, ok := o.get("items"); ok {
		if _, isList := it.([]any); isList {
			return nil, schemaErr(ptr+"/items", "\"items\" as an array (tuples) is not supported")
		}
		if item, err = s.compile(it, ptr+"/items"); err != nil {
			return nil, err
		}
	}
	w := s.whitespace()
	var body Node
	if maxItems == 0 {
		body = Lit("]")
	} else {
		more := Repeat(Seq(w, Lit(","), w, item), max(minItems-1, 0), max(maxItems-1, -1))
		body = Seq(item, more, w, Lit("]"))
		if minItems == 0 {
			body = Alt(Lit("]"), body)
		}
	}
	name := s.b().uniqueName(s.prefix + ptr)
	s.b().Define(name, Seq(Lit("["), w, body))
	return Ref(name), nil
}

func (s *schemaCompiler) objectSchema(o *jsonObject, ptr string) (Node, error) {
	var props []objectMember
	if p, ok := o.get("properties"); ok {
		po, ok := p.(*jsonObject)
		if !ok {
			return nil, schemaErr(ptr+"/properties", "\"properties\" must be an object")
		}
		for _, k := range po.keys {
			n, err := s.compile(po.vals[k], ptr+"/properties/"+pointerToken(k))
			if err != nil {
				return nil, err
			}
			props = append(props, objectMember{key: k, value: n})
		}
	}
	var additional Node
	if a, ok := o.get("additionalProperties"); ok && a != false {
		n, err := s.compile(a, ptr+"/additionalProperties")
		if err != nil {
			return nil, err
		}
		additional = n
	}
	if r, ok := o.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return nil, schemaErr(ptr+"/required", "\"required\" must be an array of property names")
		}
		for _, e := range list {
			name, ok := e.(string)
			if !ok {
				return nil, schemaErr(ptr+"/required", "\"required\" must be an array of property names")
			}
			i := slices.IndexFunc(props, func(m objectMember) bool { return m.key == name })
			if i < 0 {
				if additional == nil {
					return nil, schemaErr(ptr+"/required", "required property %q is not in \"properties\" and no other properties are allowed", name)
				}
				props = append(props, objectMember{key: name, value: additional})
				i = len(props) - 1
			}
			props[i].required = true
		}
	}
	name := s.b().uniqueName(s.prefix + ptr)
	var declared []string
	for _, p := range props {
		declared = append(declared, p.key)
	}
	s.b().Define(name, objectNode{members: props, additional: additional, key: keyExcept(declared), ws: s.whitespace()})
	return Ref(name), nil
}

// objectMember is one property of an object pattern.
type objectMember struct {
	key      string
	value    Node
	required bool
}

// objectNode matches a JSON object whose listed members come in order,
// optional ones possibly left out, followed by any number of further members
// (key any string, value additional) when additional is not nil. It is built
// directly rather than from Alt and Seq so that n optional members cost O(n)
// states, not 2^n.
type objectNode struct {
	members    []objectMember
	additional Node
	key        Node // any JSON string, for additional members
	ws         Node
}

func (o objectNode) build(r *ruleBuilder, next int32) int32 {
	closeAfterMember := Seq(o.ws, Lit("}")).build(r, next)
	closeEmpty := Lit("}").build(r, next) // the whitespace after '{' is already consumed
	sep := func(needComma bool) Node {
		if needComma {
			return Seq(o.ws, Lit(","), o.ws)
		}
		return Lit("")
	}
	// tail[c] is the state after the listed members, c: a member was emitted.
	var tail [2]int32
	if o.additional == nil {
		tail = [2]int32{closeEmpty, closeAfterMember}
	} else {
		member := Seq(o.key, o.ws, Lit(":"), o.ws, o.additional)
		loop := r.newState() // after at least one member
		r.states[loop].eps = append(r.states[loop].eps, closeAfterMember, Seq(sep(true), member).build(r, loop))
		first := r.newState()
		r.states[first].eps = append(r.states[first].eps, closeEmpty, member.build(r, loop))
		tail = [2]int32{first, loop}
	}
	for i := len(o.members) - 1; i >= 0; i-- {
		m := o.members[i]
		member := Seq(Lit(quoteJSON(m.key)), o.ws, Lit(":"), o.ws, m.value)
		var cur [2]int32
		for c := range 2 {
			emit := Seq(sep(c == 1), member).build(r, tail[1])
			if m.required {
				cur[c] = emit
			} else {
				s := r.newState()
				r.states[s].eps = append(r.states[s].eps, emit, tail[c])
				cur[c] = s
			}
		}
		tail = cur
	}
	return Seq(Lit("{"), o.ws).build(r, tail[0])
}

// keyExcept matches a JSON string used as the key of an additional
// property: printable ASCII without escapes, and none of the declared
// names (a duplicate key would let the later value replace a declared one).
// Names that need escapes or non-ASCII bytes cannot collide and are not
// excluded.
type keyExcept []string

func (k keyExcept) build(r *ruleBuilder, next int32) int32 {
	var plain byteClass
	plain.addRange(0x20, 0x7e)
	plain[0] &^= 1 << '"'
	plain[1] &^= 1 << ('\\' - 64)
	// free: some byte already left every excluded name.
	free := r.newState()
	r.states[free].edges = classEdges(plain, free, nil)
	r.states[free].edges = append(r.states[free].edges, edge{lo: '"', hi: '"', to: next})
	type node struct {
		state int32
		kids  map[byte]*node
		name  bool
	}
	root := &node{state: r.newState(), kids: map[byte]*node{}}
	for _, name := range k {
		ok := true
		for i := 0; i < len(name); i++ {
			ok = ok && plain.has(name[i])
		}
		if !ok {
			continue
		}
		n := root
		for i := 0; i < len(name); i++ {
			c, found := n.kids[name[i]]
			if !found {
				c = &node{state: r.newState(), kids: map[byte]*node{}}
				n.kids[name[i]] = c
			}
			n = c
		}
		n.name = true
	}
	var wire func(n *node)
	wire = func(n *node) {
		for b := 0; b < 256; b++ {
			c := byte(b)
			switch {
			case n.kids[c] != nil:
				r.states[n.state].edges = append(r.states[n.state].edges, edge{lo: c, hi: c, to: n.kids[c].state})
				wire(n.kids[c])
			case c == '"' && !n.name:
				r.states[n.state].edges = append(r.states[n.state].edges, edge{lo: c, hi: c, to: next})
			case plain.has(c):
				r.states[n.state].edges = append(r.states[n.state].edges, edge{lo: c, hi: c, to: free})
			}
		}
	}
	wire(root)
	open := r.newState()
	r.states[open].edges = []edge{{lo: '"', hi: '"', to: root.state}}
	return open
}
