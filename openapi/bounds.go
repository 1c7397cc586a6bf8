package openapi

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/getkin/kin-openapi/openapi3"
)

// Limits on the shape of a request body, checked by one pass over its bytes
// before the body is decoded for validation. Decoding JSON into generic
// values costs about 150 bytes and a microsecond per value (a 16 MiB body
// of `{},` or `1,` items is millions of values: gigabytes and seconds), so
// the size of a body alone does not bound its cost; the number of its
// values and their nesting do.
const (
	// MaxValues caps the JSON values (objects, arrays, strings, numbers,
	// booleans, nulls) of one body: room for 256 prompts of 1,000 token ids,
	// or a long conversation with 128 tools, but not for millions of empty
	// items.
	MaxValues = 1 << 18
	// MaxDepth caps the nesting of objects and arrays.
	MaxDepth = 64
)

// checkBounds checks body, which must be valid JSON, against MaxValues,
// MaxDepth and the maxItems and maxProperties of schema, without decoding
// it: an array beyond its schema's maxItems is refused after maxItems+1
// items were looked at, whatever follows. Parts the schema leaves free
// (an object without properties, like a tool) count against MaxValues and
// MaxDepth only. It returns nil or the *FieldError to answer with, worded
// as the validator words the same errors.
func checkBounds(body []byte, schema *openapi3.Schema) *FieldError {
	w := walker{data: body}
	w.skipSpace()
	return w.value(schema, 0)
}

// walker reads a valid JSON document left to right. path is the location
// of the value being read, for error messages.
type walker struct {
	data   []byte
	pos    int
	values int
	path   []segment
}

// segment is an object key (raw, unless it held escapes) or an array index.
type segment struct {
	key   []byte
	index int // -1 for a key
}

// value reads the value at w.pos (after spaces) whose schema is s (nil:
// not described) and depth containers deep.
func (w *walker) value(s *openapi3.Schema, depth int) *FieldError {
	if w.values++; w.values > MaxValues {
		return &FieldError{Code: "too_many_values", Message: fmt.Sprintf(
			"The request body holds more than %d JSON values; this server accepts at most %d per request.", MaxValues, MaxValues)}
	}
	switch w.data[w.pos] {
	case '{':
		if depth >= MaxDepth {
			return w.tooDeep()
		}
		return w.object(branch(s, openapi3.TypeObject), depth+1)
	case '[':
		if depth >= MaxDepth {
			return w.tooDeep()
		}
		return w.array(branch(s, openapi3.TypeArray), depth+1)
	case '"':
		w.skipString()
	default:
		w.skipScalar()
	}
	return nil
}

func (w *walker) tooDeep() *FieldError {
	return &FieldError{Param: w.param(), Code: "too_deep", Message: fmt.Sprintf(
		"The request body nests objects and arrays more than %d deep; this server accepts at most %d.", MaxDepth, MaxDepth)}
}

// object reads an object whose schema is s (nil: not described).
func (w *walker) object(s *openapi3.Schema, depth int) *FieldError {
	w.pos++ // {
	n := 0
	for {
		w.skipSpace()
		if w.data[w.pos] == '}' {
			w.pos++
			return nil
		}
		if w.data[w.pos] == ',' {
			w.pos++
			w.skipSpace()
		}
		key := w.key()
		w.skipSpace()
		w.pos++ // :
		w.skipSpace()
		if n++; s != nil && s.MaxProps != nil && uint64(n) > *s.MaxProps {
			return &FieldError{Param: w.param(), Code: "object_above_max_properties", Message: fmt.Sprintf(
				"Invalid '%s': too many properties. Expected an object with at most %d properties.", w.param(), *s.MaxProps)}
		}
		w.path = append(w.path, segment{key: key, index: -1})
		if e := w.value(property(s, key), depth); e != nil {
			return e
		}
		w.path = w.path[:len(w.path)-1]
	}
}

// array reads an array whose schema is s (nil: not described).
func (w *walker) array(s *openapi3.Schema, depth int) *FieldError {
	w.pos++ // [
	var items *openapi3.Schema
	limit := uint64(0)
	bounded := false
	if s != nil {
		if s.Items != nil {
			items = s.Items.Value
		}
		if s.MaxItems != nil {
			limit, bounded = *s.MaxItems, true
		}
	}
	for i := 0; ; i++ {
		w.skipSpace()
		if w.data[w.pos] == ']' {
			w.pos++
			return nil
		}
		if w.data[w.pos] == ',' {
			w.pos++
			w.skipSpace()
		}
		if bounded && uint64(i) >= limit {
			param := w.param()
			return &FieldError{Param: param, Code: "array_above_max_length", Message: fmt.Sprintf(
				"Invalid '%s': array too long. Expected an array with maximum length %d, but got an array with length %d instead.",
				param, limit, i+w.countRest())}
		}
		w.path = append(w.path, segment{index: i})
		if e := w.value(items, depth); e != nil {
			return e
		}
		w.path = w.path[:len(w.path)-1]
	}
}

// countRest counts the items of the array whose item starts at w.pos,
// that one included, by bracket counting: no schema, no limits.
func (w *walker) countRest() int {
	n, depth := 1, 0
	for ; w.pos < len(w.data); w.pos++ {
		switch w.data[w.pos] {
		case '"':
			w.skipString()
			w.pos--
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return n
			}
			depth--
		case ',':
			if depth == 0 {
				n++
			}
		}
	}
	return n
}

// key reads an object key. It points into the body unless the key holds
// escapes.
func (w *walker) key() []byte {
	start := w.pos
	escaped := w.skipString()
	if !escaped {
		return w.data[start+1 : w.pos-1]
	}
	var k string
	_ = json.Unmarshal(w.data[start:w.pos], &k) // valid JSON
	return []byte(k)
}

// skipString moves past the string at w.pos and reports whether it holds
// escapes.
func (w *walker) skipString() bool {
	escaped := false
	for w.pos++; ; w.pos++ {
		switch w.data[w.pos] {
		case '\\':
			escaped = true
			w.pos++
		case '"':
			w.pos++
			return escaped
		}
	}
}

// skipScalar moves past a number, true, false or null.
func (w *walker) skipScalar() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return
		}
		w.pos++
	}
}

func (w *walker) skipSpace() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
		default:
			return
		}
	}
}

// param names the current location the way OpenAI names parameters.
func (w *walker) param() string {
	segs := make([]string, len(w.path))
	for i, s := range w.path {
		if s.index >= 0 {
			segs[i] = strconv.Itoa(s.index)
		} else {
			segs[i] = string(s.key)
		}
	}
	return paramName(segs)
}

// branch returns the schema that describes a value of JSON type typ under
// s: s itself, or the one branch of its oneOf/anyOf of that type. With
// several such branches it returns a schema with the largest of their
// maxItems (none if one has none) and no items or properties: which branch
// applies is the validator's to find out.
func branch(s *openapi3.Schema, typ string) *openapi3.Schema {
	if s == nil {
		return nil
	}
	alts := append(append(openapi3.SchemaRefs(nil), s.OneOf...), s.AnyOf...)
	if len(alts) == 0 {
		return s
	}
	var found []*openapi3.Schema
	for _, a := range alts {
		if a.Value != nil && (a.Value.Type == nil || a.Value.Type.Includes(typ)) {
			found = append(found, a.Value)
		}
	}
	switch len(found) {
	case 0:
		return nil
	case 1:
		return found[0]
	}
	merged := &openapi3.Schema{}
	for _, f := range found {
		if f.MaxItems == nil {
			return &openapi3.Schema{}
		}
		if merged.MaxItems == nil || *f.MaxItems > *merged.MaxItems {
			merged.MaxItems = f.MaxItems
		}
	}
	return merged
}

// property returns the schema of member key of an object described by s.
func property(s *openapi3.Schema, key []byte) *openapi3.Schema {
	if s == nil {
		return nil
	}
	if p, ok := s.Properties[string(key)]; ok {
		return p.Value
	}
	if ap := s.AdditionalProperties.Schema; ap != nil {
		return ap.Value
	}
	return nil
}
