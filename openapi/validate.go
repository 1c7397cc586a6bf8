package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
)

// FieldError is a JSON document that breaks the schema, described the way
// OpenAI describes invalid requests.
type FieldError struct {
	// Param names the offending field in OpenAI's style ("messages[0].role",
	// "max_tokens"); empty when the whole document is at fault.
	Param string
	// Code is OpenAI's machine-readable code, e.g. "invalid_type",
	// "missing_required_parameter"; empty for an unparsable body.
	Code string
	// Message is a sentence for the client. It quotes at most a short prefix
	// of the offending value.
	Message string
}

func (e *FieldError) Error() string { return e.Message }

// Validator checks request bodies against the request schemas of the
// document's operations. It is safe for concurrent use.
type Validator struct {
	bodies map[string]*openapi3.Schema // "METHOD /path/template": the JSON request body's schema
}

// NewValidator returns a Validator over the embedded document.
func NewValidator() (*Validator, error) {
	doc, err := Load()
	if err != nil {
		return nil, err
	}
	v := &Validator{bodies: make(map[string]*openapi3.Schema)}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			var schema *openapi3.Schema
			if rb := op.RequestBody; rb != nil && rb.Value != nil {
				if mt := rb.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
					schema = mt.Schema.Value
				}
			}
			v.bodies[method+" "+path] = schema
		}
	}
	return v, nil
}

// ValidateBody checks body, the raw body of a request to the operation
// method+path (path as written in the document, e.g. "/v1/completions"),
// against that operation's request schema. The body is always read as JSON,
// whatever Content-Type the client sent.
//
// Its cost is bounded before anything is decoded: a body beyond MaxValues
// values, MaxDepth levels, or an array or object beyond its schema's
// maxItems or maxProperties, is refused after one pass over its bytes.
//
// It returns nil when body is valid, a *FieldError when it is empty, not JSON,
// or breaks the schema or those bounds, and another error for an operation
// the document lacks or that takes no JSON body.
func (v *Validator) ValidateBody(ctx context.Context, method, path string, body []byte) error {
	schema, ok := v.bodies[method+" "+path]
	if !ok || schema == nil {
		return fmt.Errorf("openapi: no operation %s %s with a JSON body", method, path)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return &FieldError{Message: "The request body is empty; expected a JSON object."}
	}
	if !json.Valid(body) {
		return &FieldError{Message: "We could not parse the JSON body of your request. The API expects a JSON payload."}
	}
	// JSON is UTF-8 (RFC 8259 §8.1); encoding/json would quietly turn
	// invalid bytes into U+FFFD, and the prompt the model sees would not be
	// the one the client sent.
	if !utf8.Valid(body) {
		return &FieldError{Message: fmt.Sprintf(
			"We could not parse the JSON body of your request: it is not valid UTF-8 (at byte %d). The API expects a JSON payload encoded in UTF-8.",
			invalidUTF8At(body))}
	}
	if fe := checkBounds(body, schema); fe != nil {
		return fe
	}
	// Decoded in place: a json.Decoder (openapi3filter's, for json.Number)
	// would buffer the body again, growing its buffer to twice its size.
	// Numbers become float64: a number that only rounds to an integer
	// (1.00000000000000001, or beyond 2^53) passes the schema's integer
	// check here, and is refused when the service decodes the body into
	// its Go types.
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return &FieldError{Message: "We could not parse the JSON body of your request. The API expects a JSON payload."}
	}
	if err := schema.VisitJSON(value, openapi3.VisitAsRequest(), openapi3.DisableSchemaErrorDetails()); err != nil {
		return fieldError(err)
	}
	return nil
}

// fieldError describes a schema validation error. A MultiError is described
// by its first error, with the others' messages appended.
func fieldError(err error) *FieldError {
	// A SchemaError wraps its cause, so look at the outermost error first.
	if se, ok := err.(*openapi3.SchemaError); ok {
		return describe(se)
	}
	if me, ok := err.(openapi3.MultiError); ok && len(me) > 0 {
		first := fieldError(me[0])
		for _, e := range me[1:] {
			first.Message += " " + fieldError(e).Message
		}
		return first
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		return describe(se)
	}
	return &FieldError{Code: "invalid_value", Message: "Invalid request: " + err.Error()}
}

// describe turns one SchemaError into OpenAI's wording.
func describe(se *openapi3.SchemaError) *FieldError {
	pointer := se.JSONPointer()
	param := paramName(pointer)
	what := "the request body"
	if param != "" {
		what = "'" + param + "'"
	}
	switch se.SchemaField {
	case "oneOf", "anyOf":
		if sub := closestBranch(se, len(pointer)); sub != nil {
			return describe(sub)
		}
		return &FieldError{Param: param, Code: "invalid_type", Message: fmt.Sprintf(
			"Invalid type for %s: expected %s, but got %s instead.",
			what, branchTypes(se.Schema), jsonType(se.Value))}
	case "required":
		return &FieldError{Param: param, Code: "missing_required_parameter",
			Message: fmt.Sprintf("Missing required parameter: '%s'.", param)}
	case "type", "nullable":
		return &FieldError{Param: param, Code: "invalid_type", Message: fmt.Sprintf(
			"Invalid type for %s: expected %s, but got %s instead.",
			what, schemaTypes(se.Schema), jsonType(se.Value))}
	case "enum":
		quoted := make([]string, len(se.Schema.Enum))
		for i, v := range se.Schema.Enum {
			quoted[i] = fmt.Sprintf("'%v'", v)
		}
		return &FieldError{Param: param, Code: "invalid_value", Message: fmt.Sprintf(
			"Invalid value for '%s': %s. Supported values are: %s.",
			param, short(se.Value), strings.Join(quoted, ", "))}
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		return boundError(se, param)
	case "minItems":
		if a, ok := se.Value.([]any); ok && len(a) == 0 {
			return &FieldError{Param: param, Code: "empty_array", Message: fmt.Sprintf(
				"Invalid '%s': empty array. Expected an array with minimum length %d, but got an empty array instead.",
				param, se.Schema.MinItems)}
		}
		return &FieldError{Param: param, Code: "array_below_min_length", Message: fmt.Sprintf(
			"Invalid '%s': array too short. Expected an array with minimum length %d.", param, se.Schema.MinItems)}
	case "maxItems":
		n := 0
		if a, ok := se.Value.([]any); ok {
			n = len(a)
		}
		return &FieldError{Param: param, Code: "array_above_max_length", Message: fmt.Sprintf(
			"Invalid '%s': array too long. Expected an array with maximum length %d, but got an array with length %d instead.",
			param, *se.Schema.MaxItems, n)}
	}
	return &FieldError{Param: param, Code: "invalid_value",
		Message: fmt.Sprintf("Invalid value for %s: %s.", what, strings.TrimSuffix(se.Reason, "."))}
}

func boundError(se *openapi3.SchemaError, param string) *FieldError {
	kind := "decimal"
	if se.Schema.Type.Is(openapi3.TypeInteger) {
		kind = "integer"
	}
	var code, msg string
	switch se.SchemaField {
	case "minimum", "exclusiveMinimum":
		op := ">="
		if se.SchemaField == "exclusiveMinimum" || se.Schema.ExclusiveMin.IsTrue() {
			op = ">"
		}
		code = kind + "_below_min_value"
		msg = fmt.Sprintf("Invalid '%s': %s below minimum value. Expected a value %s %s, but got %s instead.",
			param, kind, op, number(se.Schema.Min), short(se.Value))
	default:
		op := "<="
		if se.SchemaField == "exclusiveMaximum" || se.Schema.ExclusiveMax.IsTrue() {
			op = "<"
		}
		code = kind + "_above_max_value"
		msg = fmt.Sprintf("Invalid '%s': %s above maximum value. Expected a value %s %s, but got %s instead.",
			param, kind, op, number(se.Schema.Max), short(se.Value))
	}
	return &FieldError{Param: param, Code: code, Message: msg}
}

// closestBranch picks, among the errors of the branches of a oneOf/anyOf at
// depth, the one of the branch that got furthest into the value, so that
// the client hears what is wrong inside the value rather than that no branch
// matched. An error about anything but a type means its branch matched the
// value's type, so such errors rank first; then deeper errors, then errors
// at a later array index (more items passed). It returns nil when every
// branch failed on the type of the value itself.
func closestBranch(se *openapi3.SchemaError, depth int) *openapi3.SchemaError {
	var me openapi3.MultiError
	if se.Origin == nil || !errors.As(se.Origin, &me) {
		return nil
	}
	var best *openapi3.SchemaError
	var bestRank [3]int
	for _, e := range me {
		var sub *openapi3.SchemaError
		if !errors.As(e, &sub) {
			continue
		}
		pointer := sub.JSONPointer()
		typeError := sub.SchemaField == "type" || sub.SchemaField == "nullable"
		if typeError && len(pointer) <= depth {
			continue // this branch is of another type than the value
		}
		rank := [3]int{0, len(pointer), -1}
		if !typeError {
			rank[0] = 1
		}
		if len(pointer) > 0 {
			if i, err := strconv.Atoi(pointer[len(pointer)-1]); err == nil {
				rank[2] = i
			}
		}
		if best == nil || rank[0] > bestRank[0] ||
			rank[0] == bestRank[0] && (rank[1] > bestRank[1] || rank[1] == bestRank[1] && rank[2] > bestRank[2]) {
			best, bestRank = sub, rank
		}
	}
	return best
}

// paramName writes a JSON pointer the way OpenAI names parameters:
// ["messages","0","role"] -> "messages[0].role".
func paramName(pointer []string) string {
	var b strings.Builder
	for _, seg := range pointer {
		if _, err := strconv.Atoi(seg); err == nil && b.Len() > 0 {
			b.WriteString("[" + seg + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return clipParam(b.String())
}

// maxParamBytes caps a parameter name, which can hold a client's keys, so
// that errors never echo large client input.
const maxParamBytes = 256

// clipParam cuts p to maxParamBytes, marking the cut.
func clipParam(p string) string { return clipText(p, maxParamBytes, "…") }

// clipText cuts s to at most n bytes at a UTF-8 boundary and appends mark
// when it did cut.
func clipText(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func schemaTypes(s *openapi3.Schema) string {
	if s == nil || s.Type == nil || len(*s.Type) == 0 {
		return "a different type"
	}
	names := make([]string, len(*s.Type))
	for i, t := range *s.Type {
		names[i] = article(t)
	}
	return strings.Join(names, " or ")
}

func branchTypes(s *openapi3.Schema) string {
	var names []string
	seen := map[string]bool{}
	for _, branch := range append(append(openapi3.SchemaRefs{}, s.OneOf...), s.AnyOf...) {
		if branch.Value == nil {
			continue
		}
		if n := schemaTypes(branch.Value); !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "a different type"
	}
	return strings.Join(names, " or ")
}

func article(t string) string {
	switch t {
	case openapi3.TypeInteger, openapi3.TypeArray, openapi3.TypeObject:
		return "an " + t
	default:
		return "a " + t
	}
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		if v == float64(int64(v)) {
			return "an integer"
		}
		return "a decimal"
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "an integer"
		}
		return "a decimal"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func number(f *float64) string {
	if f == nil {
		return "?"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

// short quotes a scalar value for a message, cut to a few dozen bytes so that
// error messages never echo large client input.
func short(v any) string {
	const limit = 40
	cut := func(s string) string { return clipText(s, limit, "...") }
	switch v := v.(type) {
	case string:
		return "'" + cut(v) + "'"
	case json.Number:
		return cut(string(v))
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	default:
		return jsonType(v)
	}
}

// invalidUTF8At is the offset of the first byte of b that does not start
// a valid UTF-8 sequence, or len(b).
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}
