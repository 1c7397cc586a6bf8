package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rill/internal/shared"
)

// refGolden is testdata/refdata_golden.json, written by
// scripts/chat/refgolden.py from Python's jinja2 over the real templates in
// ../shared/refdata/chat-templates.
type refGolden struct {
	Now       string                     `json:"now"`
	Templates map[string]string          `json:"templates"` // path -> sha256
	Contexts  map[string]json.RawMessage `json:"contexts"`
	Cases     []struct {
		Template string  `json:"template"`
		Context  string  `json:"context"`
		Output   *string `json:"output"`
		Error    string  `json:"error"`
		Kind     string  `json:"kind"`
	} `json:"cases"`
}

func loadRefGolden(t *testing.T) (*refGolden, time.Time) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "refdata_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g refGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	now, err := time.Parse("2006-01-02T15:04:05", g.Now)
	if err != nil {
		t.Fatal(err)
	}
	return &g, now
}

// refTemplate reads a template of ../shared/refdata/chat-templates and
// checks it is the file the golden was made from.
func refTemplate(t *testing.T, rel, sum string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(shared.Path(t, "refdata", "chat-templates"), rel))
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
		t.Fatalf("%s changed since refdata_golden.json was made: run python3 scripts/chat/refgolden.py", rel)
	}
	return string(data)
}

// contextVars decodes a context into template variables, keeping key order;
// with hfDefaults, tools and documents are None unless the context has them.
func contextVars(t *testing.T, raw json.RawMessage, hfDefaults bool) map[string]value {
	t.Helper()
	v, err := decodeJSONValue(raw)
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*dict)
	vars := map[string]value{}
	if hfDefaults {
		vars["tools"], vars["documents"] = nil, nil
	}
	for i, k := range d.keys {
		vars[k.(string)] = d.vals[i]
	}
	return vars
}

// TestRefdataTemplates renders every real template in ../shared over every
// context and wants jinja2's output byte for byte, or an error where jinja2
// raised one (the template's own raise_exception where jinja2's was).
func TestRefdataTemplates(t *testing.T) {
	t.Parallel()
	g, now := loadRefGolden(t)
	if len(g.Cases) < 200 {
		t.Fatalf("only %d cases", len(g.Cases))
	}
	// Every real template renders a plain conversation, except Command-R's
	// named variants, which iterate tools and documents (None here).
	for _, c := range g.Cases {
		variant := strings.Contains(c.Template, ".rag.") || strings.Contains(c.Template, ".tool_use.")
		if c.Context == "simple" && c.Output == nil && !variant {
			t.Errorf("%s: jinja2 failed on the simple conversation (%s: %s)", c.Template, c.Kind, c.Error)
		}
	}
	for _, c := range g.Cases {
		t.Run(c.Template+"/"+c.Context, func(t *testing.T) {
			t.Parallel()
			src := refTemplate(t, c.Template, g.Templates[c.Template])
			tmpl, err := NewWithOptions(src, Options{Now: func() time.Time { return now }})
			var got string
			if err == nil {
				got, err = tmpl.execute(contextVars(t, g.Contexts[c.Context], true))
			}
			switch {
			case c.Output != nil:
				if err != nil {
					t.Fatalf("want output, got error %v", err)
				}
				if got != *c.Output {
					t.Fatalf("output differs from jinja2's\n got: %q\nwant: %q", got, *c.Output)
				}
			case c.Kind == "raise":
				var re *RenderError
				if !errors.As(err, &re) || !re.Raised || re.Msg != c.Error {
					t.Fatalf("want raise_exception(%q), got %q, %v", c.Error, got, err)
				}
			default:
				if err == nil {
					t.Fatalf("want an error like jinja2's %s: %s; got output %q", c.Kind, c.Error, got)
				}
			}
		})
	}
}

// TestLlamaCppGoldens renders llama.cpp's test templates over its contexts
// and wants its golden files (made by jinja2; a render that fails is retried
// with null contents as "", as llama.cpp's golden script did).
func TestLlamaCppGoldens(t *testing.T) {
	t.Parallel()
	dir := shared.Path(t, "refdata", "chat-templates", "llamacpp-2eb29bf8")
	goldens, err := filepath.Glob(filepath.Join(dir, "goldens", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	contexts, _ := filepath.Glob(filepath.Join(dir, "contexts", "*.json"))
	templates, _ := filepath.Glob(filepath.Join(dir, "templates", "*.jinja"))
	if len(goldens) < 20 || len(contexts) != 3 || len(templates) < 10 {
		t.Fatalf("found %d goldens, %d contexts, %d templates", len(goldens), len(contexts), len(templates))
	}
	now := time.Date(2024, 7, 26, 0, 0, 0, 0, time.UTC)
	n := 0
	for _, tpath := range templates {
		base := strings.TrimSuffix(filepath.Base(tpath), ".jinja")
		for _, cpath := range contexts {
			cname := strings.TrimSuffix(filepath.Base(cpath), ".json")
			want, err := os.ReadFile(filepath.Join(dir, "goldens", base+"-"+cname+".txt"))
			if os.IsNotExist(err) {
				continue // llama.cpp skipped this pair (no tools, or no system role)
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
			t.Run(base+"/"+cname, func(t *testing.T) {
				t.Parallel()
				src, err := os.ReadFile(tpath)
				if err != nil {
					t.Fatal(err)
				}
				raw, err := os.ReadFile(cpath)
				if err != nil {
					t.Fatal(err)
				}
				tmpl, err := NewWithOptions(string(src), Options{Now: func() time.Time { return now }})
				if err != nil {
					t.Fatal(err)
				}
				got, err := tmpl.execute(contextVars(t, raw, false))
				if err != nil {
					got, err = tmpl.execute(contextVars(t, nullContentsEmpty(t, raw), false))
				}
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				if got != string(want) {
					t.Fatalf("output differs from the golden\n got: %q\nwant: %q", got, want)
				}
			})
		}
	}
	if n < 20 {
		t.Errorf("only %d template/context pairs have goldens", n)
	}
}

// nullContentsEmpty rewrites a context's null message contents as "".
func nullContentsEmpty(t *testing.T, raw []byte) json.RawMessage {
	t.Helper()
	var ctx map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ctx); err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(ctx["messages"], &msgs); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if c, ok := m["content"]; ok && string(c) == "null" {
			m["content"] = json.RawMessage(`""`)
		}
	}
	// Key order inside messages does not matter to these templates; the
	// other top-level values keep theirs.
	b, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	ctx["messages"] = b
	out, err := json.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
