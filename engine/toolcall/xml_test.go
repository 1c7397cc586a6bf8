package toolcall

import (
	"testing"
)

// TestXMLStringArgumentsStream: a string argument of an XML format streams
// as it is generated, holding back only what may be its closing tag.
func TestXMLStringArgumentsStream(t *testing.T) {
	t.Parallel()
	p := NewParser(QwenXML, Options{NewID: counterIDs(), Parameters: testParams})
	var args string
	steps := []struct{ piece, want string }{
		{"<tool_call>\n<function=get_weather>\n", "{"},
		{"<parameter=city>\n", "{"},
		{"Pa", `{"city": "Pa`},
		{"ris\n</para", `{"city": "Paris`},
		{"meter>\n<parameter=days>\n1", `{"city": "Paris"`},
		{"2\n</parameter>\n", `{"city": "Paris", "days": 12`},
		{"</function>", `{"city": "Paris", "days": 12}`},
	}
	for _, s := range steps {
		for _, d := range p.Feed(s.piece) {
			if d.Call != nil {
				args += d.Call.Arguments
			}
		}
		if args != s.want {
			t.Fatalf("after %q: arguments %q, want %q", s.piece, args, s.want)
		}
	}
}

func TestStringProps(t *testing.T) {
	t.Parallel()
	for schema, want := range map[string]bool{
		`{"type": "string"}`:              true,
		`{"type": ["string", "null"]}`:    true,
		`{"enum": ["a", "b"]}`:            true,
		`{"const": "a"}`:                  true,
		`{"type": "integer"}`:             false,
		`{"type": ["string", "integer"]}`: false,
		`{"enum": ["a", 1]}`:              false,
		`{}`:                              false,
		`{"type": "array", "items": {}}`:  false,
		`{"anyOf": [{"type": "string"}]}`: false,
	} {
		if got := isStringSchema([]byte(schema)); got != want {
			t.Errorf("%s: string %v, want %v", schema, got, want)
		}
	}
}
