package chat

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"rill/engine"
)

var conversation = []engine.Message{
	{Role: engine.RoleSystem, Content: "Be brief."},
	{Role: engine.RoleUser, Content: "Hi", Name: "ann"},
}

func TestFallback(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "  \n"} {
		tmpl, err := New(src)
		if err != nil {
			t.Fatal(err)
		}
		if tmpl.Name() != Fallback {
			t.Errorf("Name() = %q, want %q", tmpl.Name(), Fallback)
		}
		for _, gen := range []bool{false, true} {
			got, err := tmpl.Render(conversation, gen)
			if err != nil {
				t.Fatal(err)
			}
			var want strings.Builder
			for _, m := range conversation {
				want.WriteString("<|im_start|>" + string(m.Role) + "\n" + m.Content + "<|im_end|>\n")
			}
			if gen {
				want.WriteString("<|im_start|>assistant\n")
			}
			if got != want.String() {
				t.Errorf("gen=%v: got %q, want %q", gen, got, want.String())
			}
		}
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"{{ '<|start_header_id|>' }}", "llama3"},
		{"{{ '[INST] <<SYS>>' }}", "llama2"},
		{"{{ '[INST]' }}", "mistral"},
		{"{{ '<start_of_turn>' }}", "gemma"},
		{"{{ '<|im_start|>' }}", "chatml"},
		{"{{ '<|user|>' + '<|end|>' }}", "phi3"},
		{"{{ '<|user|>' }}", "zephyr"},
		{"{{ messages }}", "jinja"},
	} {
		tmpl, err := New(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if tmpl.Name() != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.src, tmpl.Name(), tc.want)
		}
	}
}

// TestRenderVariables checks what Render passes: messages with name only
// when set, the options' special tokens, tools and documents as None.
func TestRenderVariables(t *testing.T) {
	t.Parallel()
	src := "{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.name is defined }}:{{ m | length }};{% endfor %}" +
		"{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}"
	tmpl, err := NewWithOptions(src, Options{BOS: "<s>", EOS: "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		gen  bool
		want string
	}{
		{true, "system:Be brief.:False:2;user:Hi:True:3;<s>|</s>|True|True|True"},
		{false, "system:Be brief.:False:2;user:Hi:True:3;<s>|</s>|True|True|False"},
	} {
		got, err := tmpl.Render(conversation, tc.gen)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("gen=%v: got %q, want %q", tc.gen, got, tc.want)
		}
	}
}

func render(t *testing.T, src string, vars map[string]value) (string, error) {
	t.Helper()
	tmpl, err := NewWithOptions(src, Options{Now: func() time.Time { return time.Date(2025, 3, 4, 15, 6, 7, 0, time.UTC) }})
	if err != nil {
		return "", err
	}
	return tmpl.execute(vars)
}

func TestExpressions(t *testing.T) {
	t.Parallel()
	msgs := newList([]value{
		dictOf("role", "system", "content", "S"),
		dictOf("role", "user", "content", "U1"),
		dictOf("role", "assistant", "content", "A1"),
	})
	for _, tc := range []struct{ src, want string }{
		{"{{ 1 + 2 * 3 - 4 / 2 }}", "5.0"},
		{"{{ 7 // 2 }},{{ -7 // 2 }},{{ -7 % 3 }},{{ 2 ** 8 }}", "3,-4,2,256"},
		{"{{ 'a' ~ 1 ~ none }}", "a1None"},
		{"{{ 'ab' * 2 }}{{ [0] * 3 }}", "abab[0, 0, 0]"},
		{"{{ 1 < 2 <= 2 != 3 }}", "True"},
		{"{{ 'ell' in 'hello' }},{{ 4 not in [1, 2] }}", "True,True"},
		{"{{ none or 'x' }},{{ 0 and 'y' }},{{ not [] }}", "x,0,True"},
		{"{{ 'yes' if messages else 'no' }}", "yes"},
		{"{{ messages[0].role }},{{ messages[-1]['content'] }},{{ messages[1:] | length }}", "system,A1,2"},
		{"{{ messages[0].missing }}|{{ messages[9] }}", "|"},
		{"{{ 'héllo'[1] }}{{ 'héllo'[::-1] }}{{ 'héllo' | length }}", "éolléh5"},
		{"{{ [1, 'a', 2.5, none, true] }}", "[1, 'a', 2.5, None, True]"},
		{"{{ {'k': [1, {'n': none}]} }}", "{'k': [1, {'n': None}]}"},
		{"{{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1 / 4 }}", "1e+16 1000000000000000.0 0.30000000000000004 0.25"},
		{"{{ '%s is %d' % ('x', 4) }}", "x is 4"},
		{"{{ ' x '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'Ab'.upper() }}|{{ 'ab'.startswith('a') }}", "x|['a', 'b']|AB|True"},
		{"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }}", "U1"},
		{"{{ messages | rejectattr('role', 'in', ['system']) | list | length }}", "2"},
		{"{{ {'b': 1, 'a': 2} | tojson }}|{{ 'é\"' | tojson }}|{{ [1] | tojson(indent=2) }}", "{\"b\": 1, \"a\": 2}|\"é\\\"\"|[\n  1\n]"},
		{"{{ ' a ' | trim | upper }}|{{ x | default('d') }}|{{ 'abc' | replace('b', '') }}|{{ 3.7 | int }}", "A|d|ac|3"},
		{"{% set d = {'a': 1} %}{% for k, v in d.items() %}{{ k }}={{ v }}{% endfor %}{{ d.get('z', 0) }}", "a=10"},
		{"{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "10"},
		{"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", "1"},
		{"{% macro tag(n, c='x') %}<{{ n }}:{{ c }}>{% endmacro %}{{ tag('a') }}{{ tag('b', c='y') }}", "<a:x><b:y>"},
		{"{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%-d %B, %H:%M') }}", "04 Mar 2025|4 March, 15:06"},
		{"{{ 'abc' is string }},{{ 1 is number }},{{ x is defined }},{{ none is none }},{{ 3 is odd }}", "True,True,False,True,True"},
	} {
		got, err := render(t, tc.src, map[string]value{"messages": msgs})
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s\n got: %q\nwant: %q", tc.src, got, tc.want)
		}
	}
}

func dictOf(kv ...value) *dict {
	d := newDict()
	for i := 0; i < len(kv); i += 2 {
		_ = d.set(kv[i], kv[i+1])
	}
	return d
}

func TestWhitespaceControl(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, src, want string }{
		{"trim_blocks drops the newline after a block tag", "{% if true %}\nx\n{% endif %}\ny", "x\ny"},
		{"trim_blocks leaves the newline after a variable", "{{ 'v' }}\nx", "v\nx"},
		{"lstrip_blocks drops indentation before a block tag", "a\n    {% if true %}b{% endif %}", "a\nb"},
		{"lstrip_blocks keeps text before a tag on the line", "a  {% if true %}b{% endif %}", "a  b"},
		{"lstrip_blocks leaves variables alone", "a\n    {{ 'b' }}", "a\n    b"},
		{"minus strips all whitespace before", "a \n\n  {%- if true %}b{% endif %}", "ab"},
		{"minus strips all whitespace after", "{% if true -%}\n\n   b{% endif %}", "b"},
		{"minus on variables", "a  {{- 'b' -}}  \n c", "abc"},
		{"plus keeps indentation", "a\n  {%+ if true %}b{% endif %}", "a\n  b"},
		{"plus keeps the newline", "{% if true +%}\nb{% endif %}", "\nb"},
		{"comments vanish with their line", "a\n  {# note #}\nb", "a\nb"},
		{"one trailing newline is dropped", "x\n", "x"},
		{"only one trailing newline is dropped", "x\n\n", "x\n"},
		{"CRLF becomes LF", "a\r\n{% if true %}\r\nb{% endif %}", "a\nb"},
		{"raw keeps tags as text", "{% raw %}{{ x }}{% endraw %}", "{{ x }}"},
	} {
		got, err := render(t, tc.src, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s\n got: %q\nwant: %q", tc.name, got, tc.want)
		}
	}
}

func TestLoopVariables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
			"10TrueFalse3;21FalseFalse3;32FalseTrue3;"},
		{"{% for x in [1, 2, 3] %}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }},{% endfor %}",
			"322,2113,102,"},
		{"{% for x in range(6) if x is even %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", "0:1/3 2:2/3 4:3/3 "},
		{"{% for x in [] %}x{% else %}empty{% endfor %}", "empty"},
		{"{% for a, b in [[1, 2], [3, 4]] %}{{ a * b }}{{ loop.cycle('-', '+') }}{% endfor %}", "2-12+"},
		{"{% for x in range(9) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", "02"},
		{"{% for i in [1, 2] %}{% for j in [1, 2] %}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}", "121 122 "},
	} {
		got, err := render(t, tc.src, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s\n got: %q\nwant: %q", tc.src, got, tc.want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src       string
		line, col int
		msg       string
	}{
		{"{{ 1 + }}", 1, 8, "unexpected 'end of print statement'"},
		{"a\nb {% if %}x{% endif %}", 2, 9, "expected an expression"},
		{"x\n  {% if true %}\n{% endfor %}", 3, 1, "unknown tag 'endfor'"},
		{"{% for x in y %}{% if x %}", 1, 27, "innermost block that needs to be closed is 'if'"},
		{"{{ 'abc }}", 1, 4, "unexpected char"},
		{"ok\n{# open", 2, 1, "missing end of comment"},
		{"{{ (1 }}", 1, 7, "expected ')'"},
		{"{{ x | nosuch }}", 1, 8, "no filter named 'nosuch'"},
		{"{{ x is nosuch }}", 1, 6, "no test named 'nosuch'"},
		{"{% break %}", 1, 1, "outside of a loop"},
		{"{% macro m(a=1, b) %}{% endmacro %}", 1, 18, "non-default argument"},
		{"{{ 'a\\x4' }}", 1, 4, "truncated"},
		{"{% include 'x' %}", 1, 1, "unsupported tag 'include'"},
		{"ü\n  ü {{ ) }}", 2, 8, "unexpected ')'"},
		{"{{ " + strings.Repeat("(", 500) + "1" + strings.Repeat(")", 500) + " }}", 1, 204, "nested too deeply"},
		{strings.Repeat("{% if true %}", 300), 1, 2594, "nested too deeply"},
	} {
		_, err := New(tc.src)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%.40q: want *SyntaxError, got %v", tc.src, err)
			continue
		}
		if se.Line != tc.line || se.Column != tc.col || !strings.Contains(se.Msg, tc.msg) {
			t.Errorf("%.40q: got %d:%d %q, want %d:%d containing %q", tc.src, se.Line, se.Column, se.Msg, tc.line, tc.col, tc.msg)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	msgs := newList([]value{dictOf("role", "user", "content", "x")})
	for _, tc := range []struct {
		src       string
		line, col int
		msg       string
		raised    bool
	}{
		{"line one\n  {{ 'a' + 1 }}", 2, 10, "can only concatenate str", false},
		{"{{ raise_exception('Roles must alternate') }}", 1, 19, "Roles must alternate", true},
		{"{% for m in messages %}\n{{ m.x.y }}{% endfor %}", 2, 7, "has no attribute 'x'", false},
		{"{{ nothing + 1 }}", 1, 12, "'nothing' is undefined", false},
		{"{{ 1 // 0 }}", 1, 6, "division or modulo by zero", false},
		{"{{ 'a' < 1 }}", 1, 4, "not supported between instances of 'str' and 'int'", false},
		{"{{ messages.append(1) }}", 1, 19, "unsafe", false},
		{"{% if false %}{{ 1 | nosuch }}{% endif %}{{ 2 | nosuch if true }}", 1, 49, "no filter named 'nosuch'", false},
	} {
		_, err := render(t, tc.src, map[string]value{"messages": msgs})
		var re *RenderError
		if !errors.As(err, &re) {
			t.Errorf("%q: want *RenderError, got %v", tc.src, err)
			continue
		}
		if re.Line != tc.line || re.Column != tc.col || !strings.Contains(re.Msg, tc.msg) || re.Raised != tc.raised {
			t.Errorf("%q: got %d:%d %q raised=%v, want %d:%d containing %q raised=%v",
				tc.src, re.Line, re.Column, re.Msg, re.Raised, tc.line, tc.col, tc.msg, tc.raised)
		}
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		src  string
		opts Options
		msg  string
	}{
		{"steps", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", Options{MaxSteps: 50000}, "budget of 50000 steps"},
		{"default steps", "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}", Options{}, "steps"},
		{"recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", Options{MaxDepth: 10}, "nested deeper than 10"},
		{"repetition", "{{ 'x' * 1000000000000 }}", Options{}, "over the limit"},
		{"list repetition", "{{ [1, 2] * 1000000000000 }}", Options{}, "over the limit"},
		{"doubling", "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", Options{MaxOutput: 1 << 16}, "over the limit"},
		{"output", "{% for i in range(100000) %}{{ 'abcdefgh' }}{% endfor %}", Options{MaxOutput: 1 << 16}, "output exceeds"},
		{"range", "{{ range(1000000) | length }}", Options{}, "range too big"},
		{"nesting", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}", Options{}, "nested deeper than 500"},
		{"nesting by filter", "{% set ns = namespace(l=[1]) %}{% for i in range(100000) %}{% set ns.l = ns.l | batch(1) %}{% endfor %}", Options{}, "nested deeper than 500"},
	} {
		tmpl, err := NewWithOptions(tc.src, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		// The error names the limit that stopped the render; a render that
		// never stopped would hit go test's timeout instead. (No wall-clock
		// bound: on a shared machine the 5M default steps take seconds.)
		_, err = tmpl.execute(nil)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.msg)
		}
	}
}

// TestConcurrentRender renders one template from several goroutines: the
// parsed template is shared and must not be mutated by rendering.
func TestConcurrentRender(t *testing.T) {
	t.Parallel()
	src := "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content }}{% endfor %}{{ ns.n }}{{ [1, 2] + [3] }}"
	tmpl, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	want := "Be brief.Hi2[1, 2, 3]"
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				got, err := tmpl.Render(conversation, true)
				if err == nil && got != want {
					err = errors.New("got " + got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
