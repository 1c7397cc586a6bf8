package native

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/chat"
	"rill/engine/toolcall"
)

// peerGolden is testdata/applytemplate/llamacpp.json, written by
// scripts/applytemplate: llama.cpp's server's prompts for a set of chat
// requests, per real template (testdata/applytemplate/templates).
type peerGolden struct {
	Server string `json:"server"`
	Date   string `json:"date"`
	Cases  []struct {
		Name    string          `json:"name"`
		Request json.RawMessage `json:"request"`
	} `json:"cases"`
	Templates map[string]struct {
		SHA256  string          `json:"sha256"`
		Caps    map[string]bool `json:"caps"`
		Error   string          `json:"error"`
		Results map[string]struct {
			Prompt *string `json:"prompt"`
			Status int     `json:"status"`
			Error  string  `json:"error"`
		} `json:"results"`
	} `json:"templates"`
}

// peerDifference is a known difference from llama.cpp's prompts: the
// cases of the templates where rill renders otherwise, and why.
type peerDifference struct {
	reason    string
	templates []string
	cases     []string // nil: every case
	// generic: the templates' tool-call format is toolcall.Generic.
	generic bool
}

// Cases of the golden, by what they hold.
var (
	toolCases    = []string{"tools", "tool-call", "tool-call-answered", "parallel-calls"}
	noToolsCases = []string{"user", "system-user", "four-turns", "developer", "system-only", "typed-content", "reasoning-history", "tool-history-without-tools"}
)

// peerDifferences are the known differences from llama.cpp's prompts. A
// listed case that matches fails the test too, so that the list stays
// true.
var peerDifferences = []peerDifference{
	{
		reason: "rill has no parser for the template's own tool-call syntax (the format is generic): with tools it gives the model " +
			"its generic JSON tool instructions after the system text (or in a system turn of their own) and writes earlier calls as " +
			"generic JSON replies, where llama.cpp renders the template's tool prompt (its autoparser reads many more syntaxes) or, " +
			"for a template without tools, ignores them",
		generic: true, cases: toolCases,
		templates: []string{
			"Apertus-8B-Instruct.jinja", "Apriel-1.6-15b-Thinker-fixed.jinja",
			"CohereForAI-c4ai-command-r-plus-tool_use.jinja",
			"GigaChat3-10B-A1.8B.jinja", "GigaChat3.1-10B-A1.8B.jinja", "HuggingFaceTB-SmolLM3-3B.jinja",
			"Kimi-K3.jinja", "LFM2-8B-A1B.jinja", "LFM2.5-8B-A1B.jinja",
			"LFM2.5-Instruct.jinja", "NVIDIA-Nemotron-Nano-v2.jinja",
			"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
			"deepseek-ai-DeepSeek-V4-Flash-0731.jinja",
			"deepseek-ai-DeepSeek-V4.jinja", "ggml-vocab-phi-3.gguf.chat_template.jinja", "google-gemma-4-31B-it-interleaved.jinja",
			"google-gemma-4-31B-it.jinja", "llama-cpp-deepseek-r1.jinja",
			"llama-cpp-rwkv-world.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
			"muse-glimmer.jinja", "openbmb-MiniCPM5-1B.jinja",
			"tencent-Hy3.jinja", "upstage-Solar-Open-100B.jinja",
		},
	},
	{
		reason:  "as above (generic tool instructions); Gemma 2's template refuses the other tool conversations in both servers",
		generic: true, cases: []string{"tools"}, templates: []string{"google-gemma-2-2b-it.jinja"},
	},
	{
		reason: "llama.cpp's server passes preserve_reasoning by default and, for it, preserve_thinking, clear_thinking, " +
			"truncate_history_thinking and drop_thinking, so these templates keep the reasoning of earlier turns; rill passes " +
			"only what the request sets, and the templates' defaults drop it",
		cases: []string{"reasoning-history"},
		templates: []string{"GLM-4.7-Flash.jinja", "LFM2.5-8B-A1B.jinja", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
			"deepseek-ai-DeepSeek-V4.jinja", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"},
	},
	{
		reason:    "as above (drop_thinking false): DeepSeek V4 then writes an empty <think></think> before earlier answers",
		cases:     []string{"four-turns"},
		templates: []string{"deepseek-ai-DeepSeek-V4.jinja", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"},
	},
	{
		reason: "llama.cpp renders Mistral's reasoning templates through its own Ministral handler, which turns reasoning_content " +
			"into a [THINK] content block (and for Devstral, whose template has no such block, loses the answer's text)",
		cases:     []string{"reasoning-history"},
		templates: []string{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "unsloth-mistral-Devstral-Small-2507.jinja"},
	},
	{
		reason: "llama.cpp's Gemma 4 handler folds tool results into the assistant turn (tool_responses); rill renders the " +
			"conversation as sent (with tools, see the generic difference)",
		cases: []string{"tool-history-without-tools"}, templates: []string{"google-gemma-4-31B-it-interleaved.jinja"},
	},
	{
		reason: "llama.cpp's Firefunction handler puts a system message in place of the template's own tool prompt; rill " +
			"renders the template as jinja2 does (the tool prompt, then the system text), with the functions variable " +
			"llama.cpp's server passes too",
		cases: []string{"system-user", "four-turns", "developer", "system-only", "typed-content", "tools", "tool-call",
			"tool-call-answered", "parallel-calls", "tool-history-without-tools"},
		templates: []string{"fireworks-ai-llama-3-firefunction-v2.jinja"},
	},
	{
		reason: "as jinja2: selectattr over None raises (functionary 3.1 sets tools to none without tools), where llama.cpp's " +
			"engine gives an empty list",
		cases: noToolsCases, templates: []string{"meetkai-functionary-medium-v3.1.jinja"},
	},
	{
		reason: "as jinja2's immutable sandbox (Hugging Face's): list.append is refused, which Kimi K2's templates call on " +
			"earlier tool calls",
		cases:     []string{"tool-call", "tool-call-answered", "parallel-calls", "tool-history-without-tools"},
		templates: []string{"Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja"},
	},
	{
		reason: "as jinja2: indexing an empty list raises (Nemotron Nano 2 takes the last message after the system one), " +
			"where llama.cpp's engine gives undefined",
		cases: []string{"system-only"}, templates: []string{"NVIDIA-Nemotron-Nano-v2.jinja"},
	},
	{
		reason: "a conversation of only a system message, for a template without the system role: rill makes it the user " +
			"turn; llama.cpp drops it (with a warning in its log)",
		cases: []string{"system-only"}, templates: []string{"ggml-vocab-phi-3.gguf.chat_template.jinja", "google-gemma-2-2b-it.jinja"},
	},
}

// wireRequest is the part of a chat completion request the prompt is made
// of, in OpenAI's wire shape.
type wireRequest struct {
	Messages []struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		Name             string          `json:"name"`
		ReasoningContent string          `json:"reasoning_content"`
		ToolCallID       string          `json:"tool_call_id"`
		ToolCalls        []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	Kwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// engineRequest converts a wire request as the service does: content is a
// string, or text parts joined by newlines, or null (an assistant's that
// calls tools); the kwargs stay JSON.
func engineRequest(t *testing.T, raw json.RawMessage) *engine.Request {
	t.Helper()
	var w wireRequest
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	req := &engine.Request{}
	for _, m := range w.Messages {
		em := engine.Message{Role: engine.Role(m.Role), Name: m.Name, ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID}
		switch c := strings.TrimSpace(string(m.Content)); {
		case c == "null" || c == "":
			em.NullContent = true
		case c[0] == '"':
			if err := json.Unmarshal(m.Content, &em.Content); err != nil {
				t.Fatal(err)
			}
		default:
			var parts []struct{ Text string }
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				t.Fatal(err)
			}
			for i, p := range parts {
				if i > 0 {
					em.Content += "\n"
				}
				em.Content += p.Text
			}
		}
		for _, tc := range m.ToolCalls {
			em.ToolCalls = append(em.ToolCalls, engine.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, em)
	}
	for k, v := range w.Kwargs {
		if req.ChatTemplateKwargs == nil {
			req.ChatTemplateKwargs = map[string]any{}
		}
		req.ChatTemplateKwargs[k] = v
	}
	for _, tl := range w.Tools {
		req.Tools = append(req.Tools, engine.Tool{Name: tl.Function.Name, Description: tl.Function.Description, Parameters: tl.Function.Parameters})
	}
	return req
}

// TestPromptsMatchLlamaCpp renders each request of llama.cpp's golden with
// each real template as Generate does and wants llama.cpp's prompt byte
// for byte, or an error where llama.cpp answered one, except for the
// listed differences. It logs how many templates match on every request.
func TestPromptsMatchLlamaCpp(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "applytemplate", "llamacpp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g peerGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	day, err := time.Parse("2006-01-02", g.Date)
	if err != nil {
		t.Fatal(err)
	}
	noon := day.Add(12 * time.Hour)
	names := make([]string, 0, len(g.Templates))
	for name := range g.Templates {
		names = append(names, name)
	}
	sort.Strings(names)
	type listed struct {
		d   *peerDifference
		hit bool // the case differs, as listed
	}
	known := map[string]*listed{}
	for i := range peerDifferences {
		d := &peerDifferences[i]
		cases := d.cases
		if cases == nil {
			for _, c := range g.Cases {
				cases = append(cases, c.Name)
			}
		}
		for _, name := range d.templates {
			if _, ok := g.Templates[name]; !ok {
				t.Errorf("difference %q: no template %s in the golden", d.reason[:30], name)
			}
			for _, c := range cases {
				if known[name+"/"+c] != nil {
					t.Errorf("%s/%s is listed twice", name, c)
				}
				known[name+"/"+c] = &listed{d: d}
			}
		}
	}
	var allMatch, withDiffs []string
	listedDiffs, noToolsMatch, pairsMatch := 0, 0, 0
	for _, name := range names {
		rec := g.Templates[name]
		src, err := os.ReadFile(filepath.Join("testdata", "applytemplate", "templates", name))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(src); hex.EncodeToString(sum[:]) != rec.SHA256 {
			t.Fatalf("%s changed since the golden was recorded: run go run ./scripts/applytemplate", name)
		}
		if rec.Error != "" {
			t.Errorf("%s: llama.cpp's server did not start with it: %s", name, rec.Error)
			continue
		}
		e := newTemplateEngine(t, string(src), noon)
		matched, noToolsMatched := true, true
		for _, c := range g.Cases {
			want, ok := rec.Results[c.Name]
			if !ok {
				t.Fatalf("%s: no result for case %s", name, c.Name)
			}
			got, rerr := e.renderForPeer(engineRequest(t, c.Request))
			var same bool
			var what string
			switch {
			case want.Prompt != nil && rerr == nil:
				same = got == *want.Prompt
				what = "prompt\n" + got + "\nllama.cpp's\n" + *want.Prompt
			case want.Prompt != nil:
				what = "error " + rerr.Error() + "\nllama.cpp's prompt\n" + *want.Prompt
			case rerr == nil:
				what = "prompt\n" + got + "\nllama.cpp's error " + want.Error
			default:
				same = true // both refuse the conversation
			}
			matched = matched && same
			if same {
				pairsMatch++
			}
			if slices.Contains(noToolsCases, c.Name) {
				noToolsMatched = noToolsMatched && same
			}
			l := known[name+"/"+c.Name]
			switch {
			case l != nil && same:
				t.Errorf("%s/%s matches llama.cpp, but is listed as a difference: %s", name, c.Name, l.d.reason)
			case l != nil:
				l.hit = true
				listedDiffs++
				if l.d.generic && e.toolFormat != toolcall.Generic {
					t.Errorf("%s/%s is listed for the generic tool-call format, but the format is %s", name, c.Name, e.toolFormat)
				}
			case !same:
				t.Errorf("%s/%s (tool-call format %s): %s", name, c.Name, e.toolFormat, what)
			}
		}
		if noToolsMatched {
			noToolsMatch++
		}
		if matched {
			allMatch = append(allMatch, name)
		} else {
			withDiffs = append(withDiffs, name)
		}
	}
	t.Logf("llama.cpp (%s): %d of %d templates give the same prompt (or error) on all %d requests, %d on the %d without tools; "+
		"%d of %d template×request pairs match, %d differ as listed; templates with listed differences: %s",
		g.Server, len(allMatch), len(names), len(g.Cases), noToolsMatch, len(noToolsCases),
		pairsMatch, len(names)*len(g.Cases), listedDiffs, strings.Join(withDiffs, ", "))
}

// newTemplateEngine returns an engine (not running) on the embedded test
// model with the template src, its clock stopped at now.
func newTemplateEngine(t *testing.T, src string, now time.Time) *Engine {
	t.Helper()
	m := withTemplate(t, "")
	e, err := New(m, testCompute(t), Options{Logger: discard, ChatTemplate: src, ContextLength: 8192, KVCacheBytes: 4 << 20})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	// The same template with a fixed clock, for templates that print the
	// date (the golden's day).
	tmpl, err := chat.NewWithOptions(src, chat.Options{BOS: e.tok.Text(e.tok.BOS()), EOS: e.tok.Text(e.tok.EOS()),
		MaxOutput: maxPromptBytes(e.tok, e.ctxLen), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	e.tmpl, e.now = tmpl, func() time.Time { return now }
	return e
}

// renderForPeer renders req's prompt text as Generate does.
func (e *Engine) renderForPeer(req *engine.Request) (string, error) {
	k, err := e.constraintFor(req)
	if err != nil {
		return "", err
	}
	r := promptRequest(req, k)
	text, _, err := e.renderChat(chatRender{msgs: r.Messages, tools: r.Tools, kwargs: r.ChatTemplateKwargs})
	return text, err
}

// capsDifferences are the templates whose capabilities rill finds otherwise
// than llama.cpp, and why: the probes fail where rill's interpreter, as
// jinja2, is stricter than llama.cpp's.
var capsDifferences = map[string]string{
	"Kimi-K2-Instruct.jinja":                     "the tool probes call list.append, which jinja2's immutable sandbox refuses",
	"Kimi-K2-Thinking.jinja":                     "the tool probes call list.append, which jinja2's immutable sandbox refuses",
	"fireworks-ai-llama-3-firefunction-v2.jinja": "every probe adds the undefined 'functions' to a string, which jinja2 refuses",
}

// TestCapsMatchLlamaCpp: the capabilities chat.Template.Caps finds are the
// ones llama.cpp's server reports (/props chat_template_caps) for each real
// template, except where listed.
func TestCapsMatchLlamaCpp(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "applytemplate", "llamacpp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g peerGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	same := 0
	for name, rec := range g.Templates {
		src, err := os.ReadFile(filepath.Join("testdata", "applytemplate", "templates", name))
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := chat.New(string(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := tmpl.Caps()
		got := map[string]bool{
			"supports_system_role": c.SystemRole, "supports_string_content": c.StringContent, "supports_typed_content": c.TypedContent,
			"supports_tools": c.Tools, "supports_tool_calls": c.ToolCalls, "supports_parallel_tool_calls": c.ParallelToolCalls,
			"supports_object_arguments": c.ObjectArguments,
		}
		var diffs []string
		for k, v := range got {
			if rec.Caps[k] != v {
				diffs = append(diffs, fmt.Sprintf("%s %v (llama.cpp %v)", k, v, rec.Caps[k]))
			}
		}
		sort.Strings(diffs)
		reason, listed := capsDifferences[name]
		switch {
		case len(diffs) > 0 && !listed:
			t.Errorf("%s: %s", name, strings.Join(diffs, ", "))
		case len(diffs) == 0 && listed:
			t.Errorf("%s: the same capabilities as llama.cpp, but listed as different (%s)", name, reason)
		case len(diffs) == 0:
			same++
		}
	}
	t.Logf("%d of %d templates have llama.cpp's capabilities", same, len(g.Templates))
}
