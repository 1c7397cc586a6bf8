package toolcall

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"rill/engine/chat"
	"rill/internal/shared"
)

// templateCalls is testdata/template_calls.json, written by
// scripts/chat/toolgolden.py from Python's jinja2.
type templateCalls struct {
	Now   string          `json:"now"`
	Tools json.RawMessage `json:"tools"`
	Calls []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"calls"`
	Cases []struct {
		Template string         `json:"template"`
		SHA256   string         `json:"sha256"`
		Format   Format         `json:"format"`
		BOS      string         `json:"bos"`
		EOS      string         `json:"eos"`
		Vars     map[string]any `json:"vars"`
		Messages []goldenMessage
		History  string `json:"history"`
		// HistoryError: jinja2 refused to render the history (a template
		// that mutates a list); rill must refuse it too.
		HistoryError string `json:"history_error"`
		// HistoryEscaped is jinja2's own rendering where it HTML-escapes
		// a str added to a Markup; History then has it unescaped, as rill
		// (which has no Markup) and llama.cpp render it.
		HistoryEscaped string `json:"history_escaped"`
		CallsText      string `json:"calls_text"`
	} `json:"cases"`
}

type goldenMessage struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	Name       string `json:"name"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func loadTemplateCalls(t *testing.T) *templateCalls {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "template_calls.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g templateCalls
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// toolSchemas returns the golden's tools' names and parameter schemas.
func (g *templateCalls) toolSchemas(t *testing.T) ([]string, map[string]json.RawMessage) {
	t.Helper()
	var tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(g.Tools, &tools); err != nil {
		t.Fatal(err)
	}
	var names []string
	params := map[string]json.RawMessage{}
	for _, tl := range tools {
		names = append(names, tl.Function.Name)
		params[tl.Function.Name] = tl.Function.Parameters
	}
	return names, params
}

// TestTemplatesRenderCalls: engine/chat renders each template's
// conversation with tool calls and tool results as jinja2 does.
func TestTemplatesRenderCalls(t *testing.T) {
	t.Parallel()
	g := loadTemplateCalls(t)
	now, err := time.Parse("2006-01-02T15:04:05", g.Now)
	if err != nil {
		t.Fatal(err)
	}
	dir := shared.Path(t, "refdata", "chat-templates", "llamacpp-node-bundle")
	for _, c := range g.Cases {
		t.Run(c.Template, func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(filepath.Join(dir, c.Template))
			if err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(src); hex.EncodeToString(sum[:]) != c.SHA256 {
				t.Fatalf("%s changed since template_calls.json was made: run python3 scripts/chat/toolgolden.py", c.Template)
			}
			if got := Detect(string(src)); got != c.Format {
				t.Errorf("detected %s, want %s", got, c.Format)
			}
			tmpl, err := chat.NewWithOptions(string(src), chat.Options{BOS: c.BOS, EOS: c.EOS, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			conv := chat.Conversation{Tools: g.Tools, AddGenerationPrompt: true, Vars: c.Vars}
			for _, m := range c.Messages {
				cm := chat.Message{Role: m.Role, Content: m.Content, Name: m.Name, ToolCallID: m.ToolCallID}
				for _, tc := range m.ToolCalls {
					cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
				}
				conv.Messages = append(conv.Messages, cm)
			}
			got, err := tmpl.RenderConversation(conv)
			if c.HistoryError != "" {
				if err == nil {
					t.Fatalf("rendered %q where jinja2 refused: %s", got, c.HistoryError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.HistoryEscaped != "" {
				t.Logf("jinja2 HTML-escapes part of this template's output (str + Markup); rill does not")
			}
			if got != c.History {
				t.Fatalf("rendering differs from jinja2's\n got: %q\nwant: %q", got, c.History)
			}
		})
	}
}

// TestTemplatesCallsParse: the tool-call text each template renders for an
// assistant turn parses back into the same calls, whole and streamed at
// every split.
func TestTemplatesCallsParse(t *testing.T) {
	t.Parallel()
	g := loadTemplateCalls(t)
	names, params := g.toolSchemas(t)
	for _, c := range g.Cases {
		t.Run(c.Template, func(t *testing.T) {
			t.Parallel()
			opts := Options{Tools: names, Parameters: params}
			content, calls := Parse(c.Format, c.CallsText, opts)
			if strings.Contains(content, c.Format.marker()) && c.Format.marker() != "" {
				t.Errorf("content %q holds call syntax", content)
			}
			if len(calls) != len(g.Calls) {
				t.Fatalf("%d calls (content %q), want %d", len(calls), content, len(g.Calls))
			}
			for i, want := range g.Calls {
				var got, exp any
				if err := json.Unmarshal([]byte(calls[i].Arguments), &got); err != nil {
					t.Fatalf("call %d: arguments %q: %v", i, calls[i].Arguments, err)
				}
				_ = json.Unmarshal(want.Arguments, &exp)
				if calls[i].Name != want.Name || !reflect.DeepEqual(got, exp) {
					t.Errorf("call %d: %s %s, want %s %s", i, calls[i].Name, calls[i].Arguments, want.Name, want.Arguments)
				}
			}
			checkSplitsOpts(t, c.Format, c.CallsText, opts)
		})
	}
}
