package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"rill/engine"
)

// The golden file is written by scripts/chat/golden.py from Python's jinja2,
// rendering as Hugging Face does. Every entry must match byte for byte.

type goldenResult struct {
	Output *string `json:"output"`
	Error  string  `json:"error"`
	Kind   string  `json:"kind"` // syntax, raise, or a Python exception name
	Line   int     `json:"line"`
}

type goldenFile struct {
	Now       string `json:"now"`
	Templates map[string]struct {
		BOS string `json:"bos_token"`
		EOS string `json:"eos_token"`
	} `json:"templates"`
	Cases []struct {
		goldenResult
		Template     string `json:"template"`
		Conversation string `json:"conversation"`
		AddGen       bool   `json:"add_generation_prompt"`
		Messages     []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
			Name    string `json:"name"`
		} `json:"messages"`
	} `json:"cases"`
	Snippets []struct {
		goldenResult
		Name   string `json:"name"`
		Source string `json:"source"`
	} `json:"snippets"`
	SnippetVars json.RawMessage `json:"snippet_vars"`
}

func loadGolden(t *testing.T) (*goldenFile, time.Time) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatalf("golden file missing (run python3 scripts/chat/golden.py): %v", err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	now, err := time.Parse("2006-01-02T15:04:05", g.Now)
	if err != nil {
		t.Fatal(err)
	}
	return &g, now
}

// checkResult compares a Go outcome with jinja2's: the same output, or an
// error of the same class (a syntax error at the same line, the message of
// raise_exception, or any render error where Python raised another error).
func checkResult(t *testing.T, want goldenResult, newErr error, got string, renderErr error) {
	t.Helper()
	var se *SyntaxError
	var re *RenderError
	switch {
	case want.Output != nil:
		if newErr != nil || renderErr != nil {
			t.Fatalf("want output %q, got error %v %v", *want.Output, newErr, renderErr)
		}
		if got != *want.Output {
			t.Fatalf("output mismatch\n got: %q\nwant: %q", got, *want.Output)
		}
	case want.Kind == "syntax":
		if !errors.As(newErr, &se) {
			t.Fatalf("want syntax error %q (line %d), got New error %v, render %q %v", want.Error, want.Line, newErr, got, renderErr)
		}
		if se.Line != want.Line {
			t.Errorf("syntax error at line %d, jinja2 says line %d (%v)", se.Line, want.Line, se)
		}
	case want.Kind == "raise":
		if newErr != nil || !errors.As(renderErr, &re) || !re.Raised || re.Msg != want.Error {
			t.Fatalf("want raise_exception(%q), got New error %v, render %q %v", want.Error, newErr, got, renderErr)
		}
	default:
		if newErr == nil && renderErr == nil {
			t.Fatalf("want an error like jinja2's %s: %s; got output %q", want.Kind, want.Error, got)
		}
		if errors.As(renderErr, &re) && re.Raised {
			t.Fatalf("want a render fault like %s, got raise_exception: %v", want.Kind, re)
		}
	}
}

func TestGoldenTemplates(t *testing.T) {
	t.Parallel()
	g, now := loadGolden(t)
	if len(g.Cases) == 0 {
		t.Fatal("golden file has no cases")
	}
	files, err := filepath.Glob(filepath.Join("testdata", "templates", "*.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(g.Templates) {
		t.Errorf("%d templates in testdata/templates but %d in golden.json: run python3 scripts/chat/golden.py", len(files), len(g.Templates))
	}
	sources := map[string]string{}
	for name := range g.Templates {
		src, err := os.ReadFile(filepath.Join("testdata", "templates", name))
		if err != nil {
			t.Fatal(err)
		}
		sources[name] = string(src)
	}
	for _, c := range g.Cases {
		t.Run(fmt.Sprintf("%s/%s/gen=%v", c.Template, c.Conversation, c.AddGen), func(t *testing.T) {
			t.Parallel()
			tok := g.Templates[c.Template]
			tmpl, newErr := NewWithOptions(sources[c.Template], Options{BOS: tok.BOS, EOS: tok.EOS, Now: func() time.Time { return now }})
			var got string
			var renderErr error
			if newErr == nil {
				msgs := make([]engine.Message, len(c.Messages))
				for i, m := range c.Messages {
					msgs[i] = engine.Message{Role: engine.Role(m.Role), Content: m.Content, Name: m.Name}
				}
				got, renderErr = tmpl.Render(msgs, c.AddGen)
			}
			checkResult(t, c.goldenResult, newErr, got, renderErr)
		})
	}
}

func TestGoldenSnippets(t *testing.T) {
	t.Parallel()
	g, now := loadGolden(t)
	base, err := decodeJSONValue(g.SnippetVars)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range g.Snippets {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]value{
				"add_generation_prompt": true, "tools": nil, "documents": nil,
				"bos_token": "<s>", "eos_token": "</s>",
			}
			d := base.(*dict)
			for i, k := range d.keys {
				vars[k.(string)] = d.vals[i]
			}
			tmpl, newErr := NewWithOptions(s.Source, Options{BOS: "<s>", EOS: "</s>", Now: func() time.Time { return now }})
			var got string
			var renderErr error
			if newErr == nil {
				got, renderErr = tmpl.execute(vars)
			}
			checkResult(t, s.goldenResult, newErr, got, renderErr)
		})
	}
}

// decodeJSONValue decodes JSON into template values, keeping object key
// order and telling ints from floats as Python's json does.
func decodeJSONValue(data []byte) (value, error) { return decodeJSON(data) }
