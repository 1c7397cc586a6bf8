package toolcall

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// xmlSpec describes a format that writes a call as its function's name and
// one XML element per argument, the value as raw text:
//
//	open callOpen NAME nameEnd
//	  (paramOpen KEY paramNameEnd [valueOpen] VALUE paramClose)*
//	callClose close
//
// with whitespace allowed between the elements. The arguments are
// rebuilt as a JSON object: a value whose property the tool's schema types
// as a string becomes a JSON string, others are read as JSON (see
// convertValue).
type xmlSpec struct {
	open, close string // the region's markers; close "" when callClose ends it
	multi       bool   // several calls per region
	// callOpen "" means the name follows open directly and ends at
	// whitespace or '<' (GLM).
	callOpen, nameEnd, callClose string
	paramOpen, paramNameEnd      string
	valueOpen                    string // after paramNameEnd and whitespace (GLM's <arg_value>)
	paramClose                   string
	// stringAttr: paramNameEnd is followed by ` string="true|false">`,
	// which says whether the value is a string (DeepSeek V3.2's DSML).
	stringAttr bool
	// trimNL: one newline right after the opening tag and one right before
	// the closing tag are layout, not value (Qwen3-Coder).
	trimNL bool
	// jsonToo: the region may hold a Hermes JSON call instead.
	jsonToo bool
}

var xmlSpecs = map[Format]*xmlSpec{
	QwenXML: {
		open: hermesOpen, close: hermesClose,
		callOpen: "<function=", nameEnd: ">", callClose: "</function>",
		paramOpen: "<parameter=", paramNameEnd: ">", paramClose: "</parameter>",
		trimNL: true, jsonToo: true,
	},
	GLM:   glmSpec,
	GLM47: glmSpec,
	MiniMax: {
		open: "<minimax:tool_call>", close: "</minimax:tool_call>", multi: true,
		callOpen: `<invoke name="`, nameEnd: `">`, callClose: "</invoke>",
		paramOpen: `<parameter name="`, paramNameEnd: `">`, paramClose: "</parameter>",
	},
	SeedOSS: {
		open: "<seed:tool_call>", close: "</seed:tool_call>",
		callOpen: "<function=", nameEnd: ">", callClose: "</function>",
		paramOpen: "<parameter=", paramNameEnd: ">", paramClose: "</parameter>",
	},
	DeepSeekDSML: {
		open: "<｜DSML｜function_calls>", close: "</｜DSML｜function_calls>", multi: true,
		callOpen: `<｜DSML｜invoke name="`, nameEnd: `">`, callClose: "</｜DSML｜invoke>",
		paramOpen: `<｜DSML｜parameter name="`, paramNameEnd: `"`, stringAttr: true, paramClose: "</｜DSML｜parameter>",
	},
}

// glmSpec: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>.
var glmSpec = &xmlSpec{
	open:      hermesOpen,
	callClose: hermesClose,
	paramOpen: "<arg_key>", paramNameEnd: "</arg_key>", valueOpen: "<arg_value>", paramClose: "</arg_value>",
}

// dsmlAttr is what follows the parameter name in DeepSeek V3.2's DSML.
const dsmlAttr = ` string="`

// paramIsString reports whether the value of tool's property key is read
// as a string: when the tool's schema types it as one, or does not know
// it. It caches the tools' schemas.
func (p *Parser) paramIsString(tool, key string) bool {
	if p.types == nil {
		p.types = map[string]map[string]bool{}
	}
	props, ok := p.types[tool]
	if !ok {
		props = stringProps(p.opts.Parameters[tool])
		p.types[tool] = props
	}
	isString, known := props[key]
	return isString || !known
}

// stringProps maps each property of an object schema to whether its
// values are strings: "type" is "string" (alone or with "null"), or,
// without a type, every "enum" member or the "const" is a string.
func stringProps(schema json.RawMessage) map[string]bool {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	out := map[string]bool{}
	if json.Unmarshal(schema, &s) != nil {
		return out
	}
	for k, raw := range s.Properties {
		out[k] = isStringSchema(raw)
	}
	return out
}

func isStringSchema(raw json.RawMessage) bool {
	var s struct {
		Type  any   `json:"type"`
		Enum  []any `json:"enum"`
		Const any   `json:"const"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	switch t := s.Type.(type) {
	case string:
		return t == "string"
	case []any:
		str := false
		for _, x := range t {
			switch x {
			case "string":
				str = true
			case "null":
			default:
				return false
			}
		}
		return str
	case nil:
		if s.Const != nil {
			_, ok := s.Const.(string)
			return ok
		}
		for _, e := range s.Enum {
			if _, ok := e.(string); !ok {
				return false
			}
		}
		return len(s.Enum) > 0
	}
	return false
}

// convertValue turns a complete non-string value into JSON text: the
// value itself when it is JSON, else the JSON of the Python literal it
// is (templates that render values with Python's str write True, None,
// {'k': [1]}), else the text as a JSON string.
func convertValue(raw string) string {
	t := strings.TrimSpace(raw)
	if t != "" && json.Valid([]byte(t)) {
		return t
	}
	if js, ok := pyLiteralJSON(t); ok {
		return js
	}
	return quoteJSON(raw)
}

// appendEscaped appends s JSON-escaped (no quotes, no HTML escaping), so
// that escaping a prefix gives a prefix of escaping the whole.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r == '\n':
			dst = append(dst, '\\', 'n')
		case r == '\r':
			dst = append(dst, '\\', 'r')
		case r == '\t':
			dst = append(dst, '\\', 't')
		case r < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&15])
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}

// heldSuffix is how many bytes at the end of v may still turn out to be
// the closing tag (and, with trimNL, the newline before it) or are an
// incomplete UTF-8 sequence.
func heldSuffix(v []byte, closeTag string, trimNL bool) int {
	h := 0
	for n := min(len(closeTag)-1, len(v)); n > 0; n-- {
		if bytes.HasSuffix(v, []byte(closeTag[:n])) {
			h = n
			break
		}
	}
	if trimNL && h < len(v) && v[len(v)-h-1] == '\n' {
		h++
	}
	// An incomplete rune at the end waits for its other bytes.
	for k := 1; k <= utf8.UTFMax && k <= len(v)-h; k++ {
		if c := v[len(v)-h-k]; utf8.RuneStart(c) {
			if !utf8.FullRune(v[len(v)-h-k : len(v)-h]) {
				h += k
			}
			break
		}
	}
	return h
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// scanXML scans a region of an XML format from start (at spec.open).
func (p *Parser) scanXML(spec *xmlSpec, start int) regionScan {
	b := p.text
	var sc regionScan
	if !bytes.HasPrefix(b[start:], []byte(spec.open)) {
		// A call without the region's marker (QwenXML's bare <function=).
		co := p.scanXMLCall(spec, b, start)
		j := skipWS(b, co.end)
		if co.status == scanOK {
			switch matchLiteral(b, j, spec.close) {
			case scanOK:
				co.end = j + len(spec.close)
			case scanMore:
				return regionScan{status: scanMore, end: len(b), calls: []callObject{co}}
			}
		}
		return regionScan{status: co.status, end: co.end, calls: []callObject{co}}
	}
	i := skipWS(b, start+len(spec.open))
	if i >= len(b) {
		return regionScan{status: scanMore, end: i}
	}
	if spec.jsonToo && b[i] == '{' {
		return scanHermes(b, start, Hermes.argKeys())
	}
	for {
		co := p.scanXMLCall(spec, b, i)
		sc.calls = append(sc.calls, co)
		if co.status != scanOK {
			sc.status, sc.end = co.status, co.end
			return sc
		}
		j := skipWS(b, co.end)
		if spec.close == "" {
			sc.status, sc.end = scanOK, co.end
			return sc
		}
		switch matchLiteral(b, j, spec.close) {
		case scanOK:
			sc.status, sc.end = scanOK, j+len(spec.close)
			return sc
		case scanMore:
			sc.status, sc.end = scanMore, len(b)
			return sc
		}
		if spec.multi {
			switch matchLiteral(b, j, spec.callOpen) {
			case scanOK:
				i = j
				continue
			case scanMore:
				sc.status, sc.end = scanMore, len(b)
				return sc
			}
		}
		// No closing marker: the region ends after the call.
		sc.status, sc.end = scanOK, co.end
		return sc
	}
}

// scanXMLCall scans one call at b[i:].
func (p *Parser) scanXMLCall(spec *xmlSpec, b []byte, i int) callObject {
	var co callObject
	fail := func(at int, st scanStatus) callObject {
		co.end, co.status = at, st
		return co
	}
	if spec.callOpen != "" {
		switch matchLiteral(b, i, spec.callOpen) {
		case scanMore:
			return fail(len(b), scanMore)
		case scanBad:
			return fail(i, scanBad)
		}
		i += len(spec.callOpen)
	}
	// The name.
	j := i
	for j < len(b) && b[j] != '<' && b[j] != '>' && b[j] != '"' && !(spec.nameEnd == "" && isSpace(b[j])) {
		if b[j] == '\n' || j-i > maxNameLen {
			return fail(j, scanBad)
		}
		j++
	}
	if j >= len(b) {
		return fail(len(b), scanMore)
	}
	name := strings.TrimSpace(string(b[i:j]))
	if name == "" {
		return fail(j, scanBad)
	}
	k := j
	if spec.nameEnd != "" {
		switch matchLiteral(b, j, spec.nameEnd) {
		case scanMore:
			return fail(len(b), scanMore)
		case scanBad:
			return fail(j, scanBad)
		}
		k = j + len(spec.nameEnd)
	}
	co.name, co.nameOK, co.hasArgs, co.synth = name, true, true, true
	args := []byte{'{'}
	co.argsText = "{"
	first := true
	for {
		k = skipWS(b, k)
		if k >= len(b) {
			return fail(k, scanMore)
		}
		closeSt := matchLiteral(b, k, spec.callClose)
		if closeSt == scanOK {
			co.argsText = string(append(args, '}'))
			co.argsDone = true
			return fail(k+len(spec.callClose), scanOK)
		}
		openSt := matchLiteral(b, k, spec.paramOpen)
		switch {
		case openSt == scanMore || (openSt == scanBad && closeSt == scanMore):
			return fail(len(b), scanMore)
		case openSt == scanBad:
			return fail(k, scanBad)
		}
		// A parameter: its name.
		k += len(spec.paramOpen)
		e := bytes.Index(b[k:], []byte(spec.paramNameEnd))
		if e < 0 {
			if bytes.IndexByte(b[k:], '\n') >= 0 || len(b)-k > maxNameLen {
				return fail(k, scanBad)
			}
			return fail(len(b), scanMore)
		}
		key := string(b[k : k+e])
		if strings.ContainsAny(key, "<>\n") || key == "" {
			return fail(k, scanBad)
		}
		k += e + len(spec.paramNameEnd)
		isString := p.paramIsString(name, key)
		if spec.stringAttr {
			switch matchLiteral(b, k, dsmlAttr) {
			case scanMore:
				return fail(len(b), scanMore)
			case scanBad:
				return fail(k, scanBad)
			}
			k += len(dsmlAttr)
			switch {
			case matchLiteral(b, k, `true">`) == scanOK:
				isString, k = true, k+len(`true">`)
			case matchLiteral(b, k, `false">`) == scanOK:
				isString, k = false, k+len(`false">`)
			case matchLiteral(b, k, `true">`) == scanMore || matchLiteral(b, k, `false">`) == scanMore:
				return fail(len(b), scanMore)
			default:
				return fail(k, scanBad)
			}
		}
		if spec.valueOpen != "" {
			k = skipWS(b, k)
			switch matchLiteral(b, k, spec.valueOpen) {
			case scanMore:
				return fail(len(b), scanMore)
			case scanBad:
				return fail(k, scanBad)
			}
			k += len(spec.valueOpen)
		}
		// The value, up to the closing tag.
		vs := k
		if spec.trimNL && vs < len(b) && b[vs] == '\n' {
			vs++
		}
		sep := ", "
		if first {
			sep = ""
		}
		head := append([]byte(sep), quoteJSON(key)...)
		head = append(head, ": "...)
		end := bytes.Index(b[vs:], []byte(spec.paramClose))
		if end < 0 {
			// Open: a string value streams as far as it is decided.
			if isString && (vs < len(b) || !spec.trimNL) {
				v := b[vs:]
				co.argsText = string(append(append(args, head...), '"'))
				co.open, co.openStart, co.openEnd = true, vs, len(b)-heldSuffix(v, spec.paramClose, spec.trimNL)
			}
			return fail(len(b), scanMore)
		}
		v := b[vs : vs+end]
		if spec.trimNL && len(v) > 0 && v[len(v)-1] == '\n' {
			v = v[:len(v)-1]
		}
		args = append(args, head...)
		if isString {
			args = append(append(append(args, '"'), appendEscaped(nil, string(v))...), '"')
		} else {
			args = append(args, convertValue(string(v))...)
		}
		co.argsText = string(args)
		first = false
		k = vs + end + len(spec.paramClose)
	}
}

// maxNameLen bounds function and parameter names, so that text that only
// looks like the start of a call is not held back for long.
const maxNameLen = 256
