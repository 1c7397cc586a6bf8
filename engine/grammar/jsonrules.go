package grammar

import (
	"fmt"
	"strings"
)

// BoundedWhitespace is the bound of each run of whitespace between JSON
// tokens under the bounded policy: room for a newline and indentation a few
// levels deep, so that models that pretty-print are not forced into odd
// tokens, yet whitespace alone cannot run on for ever.
const BoundedWhitespace = 20

// Digit bounds of generated JSON numbers: enough for any int64 or float64
// a schema means, and finite, so a number cannot run on for ever.
const (
	maxIntDigits  = 16 // integer part, without sign
	maxFracDigits = 16 // after the decimal point
	maxExpDigits  = 2  // exponent, without sign
)

// JSONOptions tune how JSON is generated. The zero value is the default:
// compact JSON.
type JSONOptions struct {
	// MaxWhitespace bounds each run of whitespace (space, tab, newline,
	// carriage return) between JSON tokens and around the value. 0 (or
	// less) allows none: compact JSON, as OpenAI writes structured outputs
	// and tool arguments. Small models given any room between tokens spend
	// their max_tokens on newlines and never close the document, so
	// whitespace is opt-in; BoundedWhitespace is the bound for models that
	// pretty-print. Whitespace inside strings is text, never affected.
	MaxWhitespace int
	// Loose compiles a schema that asks for more than a grammar can hold
	// output to as the narrowest superset rill can build, instead of
	// refusing it: keywords that only restrict (not, multipleOf,
	// uniqueItems, minProperties, ..., allOf beyond a lone schema, length
	// and item bounds above what is unrolled, length bounds or a format
	// beside a pattern) are dropped, and any other sub-schema rill cannot
	// compile matches any JSON value. The output is then valid JSON, and
	// valid against the schema as far as the grammar could say. A schema
	// that is not JSON is still an error. For tools that are not strict,
	// whose schemas OpenAI does not enforce either.
	Loose bool
}

// Names of the whitespace policies, as flags and configuration files spell
// them (ParseJSONWhitespace).
const (
	WhitespaceCompact = "compact" // no whitespace between tokens (the default)
	WhitespaceBounded = "bounded" // runs of up to BoundedWhitespace bytes
)

// ParseJSONWhitespace returns the options of the whitespace policy called
// name: WhitespaceCompact (or "", the default) or WhitespaceBounded, in any
// case.
func ParseJSONWhitespace(name string) (JSONOptions, error) {
	switch strings.ToLower(name) {
	case "", WhitespaceCompact:
		return JSONOptions{}, nil
	case WhitespaceBounded:
		return JSONOptions{MaxWhitespace: BoundedWhitespace}, nil
	}
	return JSONOptions{}, fmt.Errorf("unknown JSON whitespace policy %q: want %s or %s", name, WhitespaceCompact, WhitespaceBounded)
}

func (o JSONOptions) maxWS() int { return max(o.MaxWhitespace, 0) }

// Whitespace is the whitespace pattern these options allow between JSON
// tokens, for grammars that put text around JSON.
func (o JSONOptions) Whitespace() Node { return Whitespace(o.maxWS()) }

// Whitespace matches up to max bytes of JSON whitespace (none for max <= 0).
func Whitespace(max int) Node {
	if max <= 0 {
		return Lit("")
	}
	return Repeat(Bytes(" \t\n\r"), 0, max)
}

var (
	digit    = ByteRange('0', '9')
	digit1_9 = ByteRange('1', '9')
	hexDigit = Alt(ByteRange('0', '9'), ByteRange('a', 'f'), ByteRange('A', 'F'))
)

// jsonChar matches one character of a JSON string body: a UTF-8 encoded code
// point other than '"', '\' and the control characters, or an escape. \u
// escapes of surrogates are excluded (a lone one is not a character, a pair
// would count as two where JSON Schema counts one).
var jsonChar = func() Node {
	var ascii byteClass
	ascii.addRange(0x20, 0x7f)
	ascii[0] &^= 1 << '"'
	ascii[1] &^= 1 << ('\\' - 64)
	cont := ByteRange(0x80, 0xbf)
	hexNotD := Alt(ByteRange('0', '9'), ByteRange('a', 'c'), ByteRange('e', 'f'), ByteRange('A', 'C'), ByteRange('E', 'F'))
	return Alt(
		ascii,
		Seq(ByteRange(0xc2, 0xdf), cont),
		Seq(Lit("\xe0"), ByteRange(0xa0, 0xbf), cont),
		Seq(ByteRange(0xe1, 0xec), cont, cont),
		Seq(Lit("\xed"), ByteRange(0x80, 0x9f), cont),
		Seq(ByteRange(0xee, 0xef), cont, cont),
		Seq(Lit("\xf0"), ByteRange(0x90, 0xbf), cont, cont),
		Seq(ByteRange(0xf1, 0xf3), cont, cont, cont),
		Seq(Lit("\xf4"), ByteRange(0x80, 0x8f), cont, cont),
		Seq(Lit(`\`), Alt(
			Bytes(`"\/bfnrt`),
			Seq(Lit("u"), Alt(
				Seq(hexNotD, hexDigit, hexDigit, hexDigit),
				Seq(Bytes("dD"), ByteRange('0', '7'), hexDigit, hexDigit),
			)),
		)),
	)
}()

var (
	jsonInteger = Seq(Opt(Lit("-")), Alt(Lit("0"), Seq(digit1_9, Repeat(digit, 0, maxIntDigits-1))))
	jsonFrac    = Seq(Lit("."), Repeat(digit, 1, maxFracDigits))
	jsonExp     = Seq(Bytes("eE"), Opt(Bytes("+-")), Repeat(digit, 1, maxExpDigits))
	jsonNumber  = Seq(jsonInteger, Opt(jsonFrac), Opt(jsonExp))
)

// Names of the shared JSON rules. Whitespace-dependent ones carry the bound.
const (
	ruleString  = "json:string"
	ruleInteger = "json:integer"
	ruleNumber  = "json:number"
	ruleBoolean = "json:boolean"
	ruleNull    = "json:null"
)

// jsonCompiler adds JSON rules to a Builder.
type jsonCompiler struct {
	b *Builder
}

func (b *Builder) jsonc() *jsonCompiler {
	if b.json == nil {
		b.json = &jsonCompiler{b: b}
	}
	return b.json
}

// shared defines a rule once and returns a reference to it.
func (c *jsonCompiler) shared(name string, mk func() Node) Node {
	if !c.b.Defined(name) {
		c.b.Define(name, nil) // reserve the name: mk may refer to it
		c.b.Define(name, mk())
	}
	return Ref(name)
}

func (c *jsonCompiler) str() Node {
	return c.shared(ruleString, func() Node { return Seq(Lit(`"`), Repeat(jsonChar, 0, -1), Lit(`"`)) })
}

func (c *jsonCompiler) integer() Node {
	return c.shared(ruleInteger, func() Node { return jsonInteger })
}
func (c *jsonCompiler) number() Node { return c.shared(ruleNumber, func() Node { return jsonNumber }) }
func (c *jsonCompiler) boolean() Node {
	return c.shared(ruleBoolean, func() Node { return Alt(Lit("true"), Lit("false")) })
}
func (c *jsonCompiler) null() Node { return c.shared(ruleNull, func() Node { return Lit("null") }) }

// anyValue matches any JSON value, with whitespace runs of at most ws bytes.
func (c *jsonCompiler) anyValue(ws int) Node {
	value := fmt.Sprintf("json:value/ws%d", ws)
	object := fmt.Sprintf("json:object/ws%d", ws)
	array := fmt.Sprintf("json:array/ws%d", ws)
	if !c.b.Defined(value) {
		w := Whitespace(ws)
		c.b.Define(value, Alt(Ref(object), Ref(array), c.str(), c.number(), c.boolean(), c.null()))
		member := Seq(c.str(), w, Lit(":"), w, Ref(value))
		c.b.Define(object, Seq(Lit("{"), w, Alt(Lit("}"),
			Seq(member, Repeat(Seq(w, Lit(","), w, member), 0, -1), w, Lit("}")))))
		c.b.Define(array, Seq(Lit("["), w, Alt(Lit("]"),
			Seq(Ref(value), Repeat(Seq(w, Lit(","), w, Ref(value)), 0, -1), w, Lit("]")))))
	}
	return Ref(value)
}

// anyObject matches any JSON object.
func (c *jsonCompiler) anyObject(ws int) Node {
	c.anyValue(ws)
	return Ref(fmt.Sprintf("json:object/ws%d", ws))
}

// boundedString matches a JSON string of min..max characters (max < 0: no
// bound).
func (c *jsonCompiler) boundedString(min, max int) Node {
	if min == 0 && max < 0 {
		return c.str()
	}
	return c.shared(fmt.Sprintf("json:string/%d-%d", min, max), func() Node {
		return Seq(Lit(`"`), Repeat(jsonChar, min, max), Lit(`"`))
	})
}

// JSONSchema compiles a JSON Schema into rules of b and returns the pattern
// of one value valid against it (no surrounding whitespace). Unsupported or
// unsatisfiable schemas give a *SchemaError.
func (b *Builder) JSONSchema(schema []byte, opts JSONOptions) (Node, error) {
	doc, err := parseJSON(schema)
	if err != nil {
		return nil, &SchemaError{Pointer: "", Message: "the schema is not valid JSON: " + err.Error()}
	}
	sc := &schemaCompiler{c: b.jsonc(), root: doc, ws: opts.maxWS(), loose: opts.Loose, refs: map[string]string{}}
	sc.prefix = b.uniqueName("schema")
	b.Define(sc.prefix, nil) // reserve the prefix for this schema's rule names
	n, err := sc.compile(doc, "")
	if err != nil {
		return nil, err
	}
	b.Define(sc.prefix, n)
	return Ref(sc.prefix), nil
}

// AnyJSON returns the pattern of any JSON value (object false: any value;
// object true: any object, the response_format json_object mode).
func (b *Builder) AnyJSON(object bool, opts JSONOptions) Node {
	if object {
		return b.jsonc().anyObject(opts.maxWS())
	}
	return b.jsonc().anyValue(opts.maxWS())
}

// FromJSONSchema compiles schema into a grammar of one JSON value valid
// against it, with optional whitespace around it.
func FromJSONSchema(schema []byte, opts JSONOptions) (*Grammar, error) {
	b := NewBuilder()
	n, err := b.JSONSchema(schema, opts)
	if err != nil {
		return nil, err
	}
	w := Whitespace(opts.maxWS())
	return b.Build(Seq(w, n, w))
}

// AnyJSONObject is the grammar of response_format {"type": "json_object"}:
// one JSON object, with optional whitespace around it.
func AnyJSONObject(opts JSONOptions) *Grammar {
	b := NewBuilder()
	w := Whitespace(opts.maxWS())
	g, err := b.Build(Seq(w, b.AnyJSON(true, opts), w))
	if err != nil {
		panic("grammar: the JSON object grammar does not compile: " + err.Error())
	}
	return g
}

// SchemaError says why a JSON Schema cannot be compiled: a keyword rill does
// not support, a malformed or unsatisfiable schema. It is the client's error
// (HTTP 400). Pointer is the JSON pointer of the offending schema within the
// schema document ("" for the root).
type SchemaError struct {
	Pointer string
	Message string
}

func (e *SchemaError) Error() string {
	p := e.Pointer
	if p == "" {
		p = "(root)"
	}
	return fmt.Sprintf("json schema at %s: %s", p, e.Message)
}

func schemaErr(ptr, format string, args ...any) *SchemaError {
	return &SchemaError{Pointer: ptr, Message: fmt.Sprintf(format, args...)}
}

// pointerToken escapes a key for a JSON pointer.
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
