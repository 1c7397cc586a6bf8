package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"rill/engine/grammar"
)

// xmlLayout is the whitespace a grammar writes between the elements of an
// XML format, as its chat template renders them.
type xmlLayout struct {
	afterOpen, beforeClose string // inside the region's markers
	afterName              string // after the call's opening tag
	afterParam             string // after each parameter's closing tag
	beforeValue            string // between the parameter's name and its value (GLM)
	valuePre, valuePost    string // inside the value's tags
	betweenCalls           string // between calls (multi) or regions
}

var xmlLayouts = map[Format]xmlLayout{
	QwenXML:      {afterOpen: "\n", beforeClose: "\n", afterName: "\n", afterParam: "\n", valuePre: "\n", valuePost: "\n", betweenCalls: "\n"},
	GLM:          {afterName: "\n", beforeValue: "\n", afterParam: "\n", betweenCalls: "\n"},
	GLM47:        {},
	MiniMax:      {afterOpen: "\n", beforeClose: "\n", afterName: "\n", afterParam: "\n", betweenCalls: "\n"},
	SeedOSS:      {afterOpen: "\n", beforeClose: "\n", afterName: "\n", afterParam: "\n", betweenCalls: "\n"},
	DeepSeekDSML: {afterOpen: "\n", beforeClose: "\n", afterName: "\n", afterParam: "\n", betweenCalls: "\n"},
}

// xmlRegionNode is the grammar of one or more calls (parallel) in an XML
// format; calls is the alternative of the tools' calls.
func xmlRegionNode(f Format, call grammar.Node, parallel bool) grammar.Node {
	spec, lay := xmlSpecs[f], xmlLayouts[f]
	if spec.multi {
		body := repeatSep(call, lay.betweenCalls, parallel)
		if spec.close == "" {
			return grammar.Seq(grammar.Lit(spec.open+lay.afterOpen), body)
		}
		return grammar.Seq(grammar.Lit(spec.open+lay.afterOpen), body, grammar.Lit(lay.beforeClose+spec.close))
	}
	region := grammar.Seq(grammar.Lit(spec.open+lay.afterOpen), call)
	if spec.close != "" {
		region = grammar.Seq(region, grammar.Lit(lay.beforeClose+spec.close))
	}
	return repeatSep(region, lay.betweenCalls, parallel)
}

// xmlCallNode is the grammar of a call of t in an XML format: the schema's
// properties in their order, the required ones always, the others
// optionally; a string property's value is any text without the closing
// tag (or one of its enum), the others JSON valid against their schema.
// A tool without properties takes any parameters with text values.
func xmlCallNode(b *grammar.Builder, f Format, t Tool, jo grammar.JSONOptions) (grammar.Node, error) {
	spec, lay := xmlSpecs[f], xmlLayouts[f]
	for _, c := range []byte(t.Name) {
		if c == '<' || c == '>' || c == '"' || isSpace(c) {
			return nil, errors.New("the name must not hold '<', '>', '\"' or whitespace in this model's tool format")
		}
	}
	props, required, err := orderedProps(t.Parameters)
	if err != nil {
		return nil, err
	}
	closeTag := lay.valuePost + spec.paramClose
	text := grammar.Ref("xml-text")
	if !b.Defined("xml-text") {
		b.Define("xml-text", grammar.Seq(withoutNode(spec.paramClose), grammar.Lit(closeTag)))
	}
	param := func(key string, isString bool, value grammar.Node) grammar.Node {
		head := spec.paramOpen + key + spec.paramNameEnd
		if spec.stringAttr {
			head += dsmlAttr + map[bool]string{true: `true">`, false: `false">`}[isString]
		}
		if spec.valueOpen != "" {
			head += lay.beforeValue + spec.valueOpen
		}
		return grammar.Seq(grammar.Lit(head+lay.valuePre), value, grammar.Lit(lay.afterParam))
	}
	var params []grammar.Node
	if len(props) == 0 {
		name := grammar.Repeat(grammar.Alt(grammar.ByteRange('a', 'z'), grammar.ByteRange('A', 'Z'), grammar.ByteRange('0', '9'), grammar.Bytes("_-.")), 1, 64)
		any := grammar.Seq(grammar.Lit(spec.paramOpen), name, grammar.Lit(spec.paramNameEnd), stringAttrLit(spec, true),
			grammar.Lit(valueOpenLit(spec, lay)+lay.valuePre), text, grammar.Lit(lay.afterParam))
		params = append(params, grammar.Repeat(any, 0, -1))
	}
	for _, pr := range props {
		var value grammar.Node
		isString := isStringSchema(pr.schema)
		if enum := stringEnum(pr.schema); enum != nil {
			var alts []grammar.Node
			for _, e := range enum {
				if bytes.Contains([]byte(e), []byte(closeTag)) {
					continue
				}
				alts = append(alts, grammar.Lit(e+closeTag))
			}
			value = grammar.Alt(alts...)
		} else if isString {
			value = text
			if lo, hi, ok := lengthBounds(pr.schema); ok {
				value = grammar.Seq(grammar.Repeat(charNoLT, lo, hi), grammar.Lit(closeTag))
			}
		} else {
			n, err := b.JSONSchema(pr.schema, jo)
			if err != nil {
				var se *grammar.SchemaError
				if errors.As(err, &se) {
					se.Pointer = "/properties/" + pr.name + se.Pointer
				}
				return nil, err
			}
			value = grammar.Seq(n, grammar.Lit(closeTag))
		}
		n := param(pr.name, isString, value)
		if !required[pr.name] {
			n = grammar.Opt(n)
		}
		params = append(params, n)
	}
	parts := []grammar.Node{grammar.Lit(spec.callOpen + t.Name + spec.nameEnd + lay.afterName)}
	parts = append(parts, params...)
	parts = append(parts, grammar.Lit(spec.callClose))
	return grammar.Seq(parts...), nil
}

func stringAttrLit(spec *xmlSpec, isString bool) grammar.Node {
	if !spec.stringAttr {
		return grammar.Lit("")
	}
	return grammar.Lit(dsmlAttr + map[bool]string{true: `true">`, false: `false">`}[isString])
}

func valueOpenLit(spec *xmlSpec, lay xmlLayout) string {
	if spec.valueOpen == "" {
		return ""
	}
	return lay.beforeValue + spec.valueOpen
}

// stringEnum returns the members of a schema's enum when all are strings.
func stringEnum(raw json.RawMessage) []string {
	var s struct {
		Enum []any `json:"enum"`
	}
	if json.Unmarshal(raw, &s) != nil || len(s.Enum) == 0 {
		return nil
	}
	out := make([]string, len(s.Enum))
	for i, e := range s.Enum {
		str, ok := e.(string)
		if !ok {
			return nil
		}
		out[i] = str
	}
	return out
}

// lengthBounds returns a string schema's minLength and maxLength (-1:
// none), ok when it has either.
func lengthBounds(raw json.RawMessage) (lo, hi int, ok bool) {
	var s struct {
		Min *int `json:"minLength"`
		Max *int `json:"maxLength"`
	}
	if json.Unmarshal(raw, &s) != nil || (s.Min == nil && s.Max == nil) {
		return 0, 0, false
	}
	lo, hi = 0, -1
	if s.Min != nil {
		lo = *s.Min
	}
	if s.Max != nil {
		hi = *s.Max
	}
	return lo, hi, true
}

// charNoLT is one UTF-8 character other than '<': a string of them, as
// a length-bounded value is written, cannot hold a closing tag.
var charNoLT = grammar.Alt(
	notBytes(append([]byte{'<'}, highBytes()...)...),
	grammar.Seq(grammar.ByteRange(0xc2, 0xdf), cont),
	grammar.Seq(grammar.Lit("\xe0"), grammar.ByteRange(0xa0, 0xbf), cont),
	grammar.Seq(grammar.ByteRange(0xe1, 0xec), cont, cont),
	grammar.Seq(grammar.Lit("\xed"), grammar.ByteRange(0x80, 0x9f), cont),
	grammar.Seq(grammar.ByteRange(0xee, 0xef), cont, cont),
	grammar.Seq(grammar.Lit("\xf0"), grammar.ByteRange(0x90, 0xbf), cont, cont),
	grammar.Seq(grammar.ByteRange(0xf1, 0xf3), cont, cont, cont),
	grammar.Seq(grammar.Lit("\xf4"), grammar.ByteRange(0x80, 0x8f), cont, cont),
)

var cont = grammar.ByteRange(0x80, 0xbf)

func highBytes() []byte {
	out := make([]byte, 0, 128)
	for b := 0x80; b <= 0xff; b++ {
		out = append(out, byte(b))
	}
	return out
}

type prop struct {
	name   string
	schema json.RawMessage
}

// orderedProps returns an object schema's properties in the order written
// (each with the root's $defs and definitions, so that its references
// resolve on its own) and its required names.
func orderedProps(schema json.RawMessage) ([]prop, map[string]bool, error) {
	if len(schema) == 0 {
		return nil, nil, nil
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, nil, &grammar.SchemaError{Message: "the parameters are not a JSON object"}
	}
	var req []string
	if r, ok := root["required"]; ok {
		_ = json.Unmarshal(r, &req)
	}
	required := map[string]bool{}
	for _, r := range req {
		required[r] = true
	}
	raw, ok := root["properties"]
	if !ok {
		return nil, required, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, &grammar.SchemaError{Pointer: "/properties", Message: "properties must be an object"}
	}
	var out []prop
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, &grammar.SchemaError{Pointer: "/properties", Message: err.Error()}
		}
		key := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, &grammar.SchemaError{Pointer: "/properties", Message: err.Error()}
		}
		if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '{' {
			var m map[string]json.RawMessage
			if json.Unmarshal(v, &m) == nil {
				for _, d := range []string{"$defs", "definitions"} {
					if _, has := m[d]; !has && root[d] != nil {
						m[d] = root[d]
					}
				}
				v, _ = json.Marshal(m)
			}
		}
		out = append(out, prop{name: key, schema: v})
	}
	return out, required, nil
}

// withoutNode matches any text that does not contain d. d's first
// byte must not occur again in d (true of the closing tags here), which
// keeps the pattern a plain expression: in the matching automaton, the
// states after a partial match of d[:k] go back to the start on any byte
// but d[k] and d[0], and to the state after d[0] on d[0].
func withoutNode(d string) grammar.Node {
	if len(d) < 2 || bytes.IndexByte([]byte(d[1:]), d[0]) >= 0 {
		panic(fmt.Sprintf("toolcall: withoutNode(%q): the first byte recurs", d))
	}
	c := d[0]
	// Returning to the state after c: c, or d[1:k] then c.
	var loops, exits, partial []grammar.Node
	for k := 1; k < len(d); k++ {
		loops = append(loops, grammar.Lit(d[1:k]+string(c)))
		exits = append(exits, grammar.Seq(grammar.Lit(d[1:k]), notBytes(d[k], c)))
		if k > 1 {
			partial = append(partial, grammar.Lit(d[1:k]))
		}
	}
	z := grammar.Repeat(grammar.Alt(loops...), 0, -1)
	step := grammar.Alt(notBytes(c), grammar.Seq(grammar.Lit(string(c)), z, grammar.Alt(exits...)))
	tail := grammar.Seq(grammar.Lit(string(c)), z)
	if len(partial) > 0 {
		tail = grammar.Seq(tail, grammar.Opt(grammar.Alt(partial...)))
	}
	return grammar.Seq(grammar.Repeat(step, 0, -1), grammar.Opt(tail))
}

// notBytes matches one byte other than those given.
func notBytes(excl ...byte) grammar.Node {
	var alts []grammar.Node
	lo := 0
	for b := 0; b <= 256; b++ {
		if b == 256 || bytes.IndexByte(excl, byte(b)) >= 0 {
			if lo < b {
				alts = append(alts, grammar.ByteRange(byte(lo), byte(b-1)))
			}
			lo = b + 1
		}
	}
	return grammar.Alt(alts...)
}
