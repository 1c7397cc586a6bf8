package conformance_test

import (
	"strings"
	"testing"

	"rill/conformance"
)

func TestParseEmbeddings(t *testing.T) {
	t.Parallel()
	// AACAPwAAAEA= is the float32s 1, 2 little-endian; the float64 1 is
	// AAAAAAAA8D8=.
	ok := `{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":[1,2]},{"object":"embedding","index":1,"embedding":"AACAPwAAAEA="}],"usage":{"prompt_tokens":3,"total_tokens":3}}`
	cases := []struct {
		name, body string
		n          int
		want       string // a problem that must be named; empty: none
	}{
		{"float and base64", ok, 2, ""},
		{"too few items", ok, 3, "data has 2 items for 3 inputs"},
		{"object", strings.Replace(ok, `"list"`, `"embeddings"`, 1), 2, `object is "embeddings"`},
		{"item object", strings.Replace(ok, `"object":"embedding","index":1`, `"object":"vector","index":1`, 1), 2, `data[1].object is "vector"`},
		{"index order", strings.Replace(ok, `"index":1`, `"index":0`, 1), 2, "data[1].index is 0, want 1"},
		{"no model", strings.Replace(ok, `"model":"m",`, ``, 1), 2, "model is missing"},
		{"float64 base64", strings.Replace(ok, `"AACAPwAAAEA="`, `"AAAAAAAA8D8="`, 1), 2, ""},
		{"base64 not float32s", strings.Replace(ok, `"AACAPwAAAEA="`, `"AACAPwA="`, 1), 2, "not a whole number of float32s"},
		{"total differs", strings.Replace(ok, `"total_tokens":3`, `"total_tokens":4`, 1), 2, "usage.total_tokens is 4"},
		{"no prompt tokens", strings.Replace(ok, `"prompt_tokens":3`, `"prompt_tokens":0`, 1), 2, "usage.prompt_tokens is 0"},
		{"no usage", strings.Replace(ok, `,"usage":{"prompt_tokens":3,"total_tokens":3}`, ``, 1), 2, "usage is missing"},
		{"lengths differ", strings.Replace(ok, `[1,2]`, `[1,2,3]`, 1), 2, "data[1].embedding has 2 values, data[0]'s 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, p := conformance.ParseEmbeddings([]byte(c.body), c.n)
			if c.want == "" {
				if c.name == "float64 base64" {
					// One float64 decodes as two float32s that are not [1 2].
					if d := conformance.CosineDistance(e.Vectors[0], e.Vectors[1]); d < 1e-6 {
						t.Errorf("float64 base64 decodes to the float vector: distance %g", d)
					}
					return
				}
				if len(p) > 0 {
					t.Fatalf("problems %q", p)
				}
				if d := conformance.CosineDistance(e.Vectors[0], e.Vectors[1]); d > 1e-9 || e.PromptTokens != 3 {
					t.Errorf("vectors %v, distance %g, prompt tokens %d", e.Vectors, d, e.PromptTokens)
				}
				return
			}
			if !strings.Contains(strings.Join(p, "\n"), c.want) {
				t.Errorf("problems %q, want one with %q", p, c.want)
			}
		})
	}
}
