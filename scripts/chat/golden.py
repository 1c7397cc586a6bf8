#!/usr/bin/env python3
"""Golden outputs of Python's jinja2 for rill's chat template interpreter.

How to run (from the repository root; needs jinja2 3.1.x, nothing else):

    python3 scripts/chat/golden.py            # rewrites engine/chat/testdata/golden.json
    python3 scripts/chat/golden.py --check    # exits 1 if the file on disk is stale

then `go test ./engine/chat/` compares the Go interpreter with every entry byte
for byte.

The environment is the one Hugging Face transformers renders chat templates
with: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
the loopcontrols extension, a raise_exception global, a tojson filter that does
not escape HTML, and a strftime_now global (frozen here at NOW so that the
output is reproducible; the Go test freezes its clock at the same instant).
The variables are those rill passes: messages (dicts with role, content and
name when set), tools=None, documents=None, add_generation_prompt, bos_token,
eos_token.

The file has three sections:
  cases     every template in engine/chat/testdata/templates over every
            conversation in CONVERSATIONS, with add_generation_prompt true and
            false: the rendered prompt, or the error jinja2 raised.
  snippets  small templates over a few variables, one language feature each.
"""

import argparse
import datetime
import json
import os
import sys

import jinja2
from jinja2.exceptions import TemplateError, TemplateSyntaxError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHAT = os.path.join(ROOT, "engine", "chat", "testdata")
TEMPLATES = os.path.join(CHAT, "templates")
OUT = os.path.join(CHAT, "golden.json")

NOW = datetime.datetime(2024, 7, 26, 9, 5, 3)

# Template file -> the special tokens its model's tokenizer defines.
TEMPLATE_TOKENS = {
    "chatml.jinja": ("", "<|im_end|>"),
    "qwen2.5.jinja": ("", "<|im_end|>"),
    "llama2.jinja": ("<s>", "</s>"),
    "llama3.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral-v0.3.jinja": ("<s>", "</s>"),
    "gemma2.jinja": ("<bos>", "<eos>"),
    "phi3.jinja": ("<s>", "<|endoftext|>"),
    "zephyr.jinja": ("<s>", "</s>"),
    "deepseek-coder.jinja": ("<｜begin▁of▁sentence｜>", "<|EOT|>"),
    "deepseek-v2.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-r1-distill.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v3.1.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}


def m(role, content, name=None):
    d = {"role": role, "content": content}
    if name:
        d["name"] = name
    return d


CONVERSATIONS = {
    "user": [m("user", "Hello")],
    "system-user": [m("system", "You are a helpful assistant."), m("user", "Hello")],
    "multi-turn": [
        m("system", "You are a helpful assistant."),
        m("user", "Hi"),
        m("assistant", "Hello! How can I help?"),
        m("user", "What is 2+2?"),
    ],
    "no-system-multi": [m("user", "Hi"), m("assistant", "Hello."), m("user", "Bye")],
    "ends-assistant": [m("user", "Say yes."), m("assistant", "Yes.")],
    "long": [m("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(9)],
    "unicode": [
        m("system", "Réponds en français 🇫🇷"),
        m("user", "Grüß dich 👋 — 你好！"),
        m("assistant", "Ça va? ✓ ｜full-width｜ ▁"),
        m("user", "ありがとう\u00a0🙂"),
    ],
    "empty-content": [m("user", ""), m("assistant", ""), m("user", "")],
    "whitespace": [
        m("system", "  padded system \n"),
        m("user", "\n  Hello  \n"),
        m("assistant", "   I am an assistant   "),
        m("user", "\tTab\t"),
    ],
    "jinja-like": [m("user", "{{ 1 + 1 }} {% if x %} {# c #} \\ \"q\" 'a' \n<|im_end|>")],
    "named": [m("user", "Hi", "alice"), m("assistant", "Hello alice.")],
    "think": [
        m("user", "What is 2+2?"),
        m("assistant", "<think>\nadd them\n</think>\n\nThe answer is 4."),
        m("user", "Thanks"),
    ],
    "system-only": [m("system", "Be brief.")],
    "empty": [],
    "double-user": [m("user", "one"), m("user", "two")],
    "assistant-first": [m("assistant", "Hi"), m("user", "Hello")],
    "tool": [
        m("user", "What is 6*7?"),
        m("assistant", "Let me compute."),
        m("tool", "42"),
        m("user", "ok"),
    ],
    "developer": [m("developer", "Use metric units."), m("user", "How far?")],
}

MSGS = [m("system", "sys"), m("user", "u1", "bob"), m("assistant", "a1"), m("user", "u2")]
VARS = {
    "m": {"role": "user", "content": "hi", "items": "shadow"},
    "l": [10, 20, 30],
    "s": "héllo",
    "d": {"b": 1, "a": [True, None, 1.5, "é\"\n<>&"], "c": {"x": {}}},
    "msgs": MSGS,
    "messages": [],
}

# name -> template source; every snippet renders with VARS.
SNIPPETS = [
    ("literals", r"""{{ 'a\'b' }}|{{ "tab\there" }}|{{ 'uni\u00e9' }}|{{ 42 }}|{{ 3.5 }}|{{ true }}|{{ True }}|{{ none }}|{{ [1, 'two', 3.0, none, false] }}|{{ {'k': 'v', 'n': 1} }}|{{ (1, 'a') }}|{{ () }}|{{ 1_000 }}|{{ 1e3 }}|{{ 'x' "y" }}|{{ [] }}|{{ {} }}|{{ [[1], {'a': [none]}] }}"""),
    ("string-escapes", r"""{{ 'a\nb' }}|{{ "q\"q" }}|{{ 'u\u263a' }}|{{ 'x\x41' }}|{{ 'back\\slash' }}|{{ 'it''s' }}|{{ ['a\'b', "c\"d", 'e\nf', 'g\\h'] }}"""),
    ("arithmetic", """{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 / 2 }}|{{ 8 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 1.5 + 1 }}|{{ 0.1 + 0.2 }}|{{ -3 }}|{{ - -3 }}|{{ 10 - 2 - 3 }}|{{ 7.5 // 2 }}|{{ 7.5 % 2 }}|{{ true + 1 }}|{{ 2 ** 3 ** 2 }}|{{ 1 / 3 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 123456789.125 }}|{{ -0.0 }}|{{ 3 * 1.0 }}"""),
    ("concat", """{{ 'a' + 'b' }}|{{ 'a' ~ 1 ~ none ~ true ~ 2.5 }}|{{ 'ab' * 3 }}|{{ 3 * 'ab' }}|{{ [1] * 2 }}|{{ [1] + [2, 3] }}|{{ "%s=%d" % ('a', 5) }}|{{ "%05.2f|%x|%%|%r" % (3.14159, 255, 'q') }}|{{ "%s" % 'one' }}|{{ 'a' ~ undefined_thing ~ 'b' }}|{{ 'x' ~ [1, 'a'] }}"""),
    ("compare", """{{ 1 == 1.0 }}|{{ 'a' == 'a' }}|{{ 'a' != 'b' }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'a' < 'b' }}|{{ [1, 2] == [1, 2] }}|{{ {'a': 1} == {'a': 1} }}|{{ none == none }}|{{ 1 == '1' }}|{{ true == 1 }}|{{ 2 >= 2 }}|{{ 1 <= 0 }}|{{ [1, 2] < [1, 3] }}|{{ 'B' < 'a' }}|{{ undefined_thing == undefined_other }}|{{ undefined_thing == none }}|{{ msgs[1] == msgs[1] }}|{{ msgs[1] == msgs[3] }}"""),
    ("membership", """{{ 'b' in 'abc' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 'z' not in 'abc' }}|{{ 3 not in [1, 2] }}|{{ '' in 'abc' }}|{{ 'role' in m }}|{{ 'name' in msgs[0] }}|{{ 'name' in msgs[1] }}|{{ 1 in undefined_thing }}|{{ not 'x' in 'xyz' }}"""),
    ("logic", """{{ true and 'x' }}|{{ false and 'x' }}|{{ '' or 'fallback' }}|{{ 0 or [] }}|{{ not 0 }}|{{ not 'a' }}|{{ none or none }}|{{ 1 and 2 and 3 }}|{{ not true or true }}|{{ undefined_thing or 'u' }}|{{ [] and 1 }}|{{ {} or 'empty-dict' }}|{{ 0.0 or 'zero' }}"""),
    ("condexpr", """{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 else 'no' }}|{{ 'only' if false }}|{{ 'a' if false else 'b' if true else 'c' }}|{{ (1 if true else 2) + 10 }}|{{ messages[0]['role'] if messages else 'none' }}"""),
    ("access", """{{ m.role }}|{{ m['content'] }}|{{ l[0] }}|{{ l[-1] }}|{{ l.1 }}|{{ m.missing }}|{{ l[10] }}|{{ m['items'] }}|{{ s[1] }}|{{ s[-1] }}|{{ d.a[2] }}|{{ d['c']['x'] }}|{{ msgs[1].name }}|{{ msgs[0].name }}|{{ msgs[0].name is defined }}|{{ (msgs | last).content }}"""),
    ("slicing", """{{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ l[5:] }}|{{ l[-2:] }}|{{ l[:] }}|{{ 'abcdef'[1:-1:2] }}|{{ msgs[1:] | length }}|{{ 'x'[5:] }}|{{ l[-10:2] }}"""),
    ("tests", """{{ x is defined }}|{{ l is defined }}|{{ none is none }}|{{ 1 is none }}|{{ 's' is string }}|{{ 1 is string }}|{{ 1 is number }}|{{ 1.5 is number }}|{{ true is boolean }}|{{ 1 is integer }}|{{ 1.0 is float }}|{{ m is mapping }}|{{ l is iterable }}|{{ 's' is iterable }}|{{ l is sequence }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 'a' is equalto 'a' }}|{{ 1 is eq 1 }}|{{ x is undefined }}|{{ 1 is not none }}|{{ 'abc' is lower }}|{{ 'ABC' is upper }}|{{ 2 is in [1,2] }}|{{ true is true }}|{{ 0 is false }}|{{ 5 is gt 3 }}|{{ 5 is ne 5 }}|{{ m is string }}|{{ l is mapping }}|{{ none is defined }}|{{ true is number }}|{{ 3 is sameas 3 }}"""),
    ("filters-strings", """{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'Hello' | upper }}|{{ 'Hello' | lower }}|{{ 'hello WORLD' | capitalize }}|{{ 'hello wORLD-foo (bar) x.y' | title }}|{{ 'aaa' | replace('a', 'b') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'abc' | length }}|{{ 'héllo' | count }}|{{ 42 | string }}|{{ '12' | int + 1 }}|{{ 'x' | int }}|{{ '3.7' | int }}|{{ 3.7 | int }}|{{ '2.5' | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 'abc' | reverse }}|{{ 'abc' | list }}|{{ 'abc' | first }}|{{ 'abc' | last }}|{{ none | string }}|{{ 'x' | int(7) }}|{{ '0x1A' | int(0, 16) }}|{{ 7 | float }}|{{ '<a href="x">&\\'' | e }}|{{ 'a' | safe }}|{{ 'line1\\nline2' | indent(2) }}|{{ 'line1\\nline2' | indent(2, true) }}|{{ 'a b  c' | wordcount }}|{{ '%s-%s' | format('x', 1) }}|{{ 'caps' | center(8) }}|{{ 3.14159 | round(2, 'floor') }}"""),
    ("filters-lists", """{{ l | length }}|{{ l | first }}|{{ l | last }}|{{ l | join(', ') }}|{{ l | join }}|{{ l | sum }}|{{ l | max }}|{{ l | min }}|{{ [3, 1, 2] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ [1, 2, 1, 3] | unique | list }}|{{ l | reverse | list }}|{{ [] | first }}|{{ l | list }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ l | map('string') | join('-') }}|{{ msgs | map(attribute='role') | join(',') }}|{{ msgs | sort(attribute='content') | map(attribute='content') | join(',') }}|{{ [1.5, 2] | sum }}|{{ msgs | length }}|{{ d | length }}|{{ [none, 'x'] | join('+') }}|{{ ['a', 'b'] | batch(1) | list }}"""),
    ("filters-default", """{{ x | default('d') }}|{{ none | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ x | d('short') }}|{{ 0 | default(5, boolean=true) }}|{{ m.missing | default('md') }}|{{ x | default }}|{{ x | default(none) }}"""),
    ("filters-select", """{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }}|{{ msgs | selectattr('name') | list | length }}|{{ msgs | map(attribute='role') | list }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('even') | list }}|{{ msgs | selectattr('role', '==', 'system') | list | length }}|{{ msgs | map(attribute='name', default='anon') | list }}|{{ msgs | selectattr('name', 'defined') | map(attribute='name') | first }}|{{ [0, 1, '', 'a', none] | select | list }}|{{ ['a', 'b'] | map('upper') | list }}|{{ [' a ', 'b '] | map('trim') | join }}|{{ msgs | rejectattr('name') | map(attribute='role') | join(' ') }}|{{ ['x', 'code_interpreter', 'y'] | reject('equalto', 'code_interpreter') | join(', ') }}|{{ msgs | selectattr('role', 'in', ['system', 'assistant']) | list | length }}"""),
    ("tojson", """{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é' | tojson }}|{{ d | tojson(sort_keys=true) }}|{{ [] | tojson }}|{{ {} | tojson(indent=2) }}|{{ '\\u2028\\x01\\t' | tojson }}|{{ 1e100 | tojson }}|{{ 3 | tojson }}|{{ none | tojson }}|{{ d | tojson(separators=(',', ':')) }}|{{ msgs[1] | tojson }}|{{ 'x' | tojson(ensure_ascii=true) }}|{{ 'é😀' | tojson(ensure_ascii=true) }}|{{ [1, [2, []], {}] | tojson(indent=1) }}|{{ 2.50 | tojson }}|{{ (1, 2) | tojson }}"""),
    ("dicts", """{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.get('b') }}|{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}|{{ d | length }}|{{ d | list }}|{% for k, v in d | items %}{{ k }};{% endfor %}|{{ d.keys() | list }}|{{ d.values() | list | length }}|{% for k, v in d | dictsort %}{{ k }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{{ {'a': 1, 'a': 2} }}|{{ dict(x=1, y='z') }}|{{ {1: 'one'}[1] }}|{% for k, v in m | items %}{{ k }}{% endfor %}|{{ m | dictsort(reverse=true) | map('first') | join }}"""),
    ("string-methods", """{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'aXbXc'.replace('X', '-') }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ "they're bill's friends".title() }}|{{ 'hello'.capitalize() }}|{{ 'hello'.find('l') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a<think>b</think>c'.split('</think>')[-1] }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'Ab1'.isalpha() }}|{{ '12'.isdigit() }}|{{ 'x\\ny\\r\\nz'.splitlines() }}|{{ 'abc'.index('c') }}|{{ 'Hello'.swapcase() }}|{{ 'a-b'.partition('-') }}|{{ 'xyz'.removeprefix('x') }}|{{ 'xyz'.removesuffix('z') }}|{{ '  '.isspace() }}|{{ 'ab'.zfill(4) }}|{{ 'ab'.ljust(4) }}|{{ 'ab'.rjust(4, '*') }}|{{ 'a b'.split(' ') }}|{{ 'hello'.rfind('l') }}|{{ 'abc'.startswith('b', 1) }}"""),
    ("loop-variables", """{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ x }};{% endfor %}"""),
    ("loop-filter", """{% for x in range(10) if x is odd %}{{ x }}{{ loop.index }}{{ loop.last }},{% endfor %}"""),
    ("loop-else", """{% for x in [] %}{{ x }}{% else %}none{% endfor %}|{% for x in [1] if false %}{{ x }}{% else %}filtered{% endfor %}|{% for x in undefined_thing %}{{ x }}{% else %}undef{% endfor %}|{% for c in 'ab' %}{{ c }}{% endfor %}"""),
    ("loop-scope", """{% set a = 1 %}{% for i in [1, 2] %}{{ a }}{% set a = a + i %}{{ a }};{% endfor %}{{ a }}|{% for i in [1] %}{% set inner = 5 %}{% endfor %}{{ inner }}|{% if true %}{% set leak = 'if-leaks' %}{% endif %}{{ leak }}"""),
    ("loop-nested", """{% for i in [1, 2] %}{% for j in 'ab' %}{{ i }}{{ j }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}"""),
    ("loop-prev-next-cycle", """{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }}-{{ loop.depth }};{% endfor %}"""),
    ("loop-unpack", """{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}{% for k, v in [('x', 1)] %}{{ k }}{{ v }}{% endfor %}"""),
    ("loop-controls", """{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}"""),
    ("loop-dict", """{% for k in {'b': 1, 'a': 2} %}{{ k }}{{ loop.index }}{% endfor %}"""),
    ("namespace", """{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }}|{{ ns.s }}|{% set e = namespace() %}{% set e.found = true %}{{ e.found }}|{{ e.missing }}|{{ e.missing is defined }}|{% set nd = namespace({'k': 'v'}) %}{{ nd.k }}"""),
    ("if-elif-else", """{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %},{% endfor %}{% if [] %}list{% endif %}{% if 'x' %}str{% endif %}"""),
    ("set", """{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, 2 %}{{ t }}|{% set u = 'U' %}{% set u = u ~ u %}{{ u }}|{% set f | upper %}filtered{% endset %}{{ f }}"""),
    ("macro", """{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }}|{{ greet('b', '?') }}|{{ greet(name='c', punct='.') }}|{{ greet() }}|{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}|{{ greet('x') | upper }}"""),
    ("range", """{{ range(3) | list }}|{{ range(1, 10, 3) | list }}|{{ range(5, 0, -2) | list }}|{{ range(0) | list }}|{{ range(3) | length }}|{% for i in range(2, 4) %}{{ i }}{% endfor %}"""),
    ("precedence", """{{ -1 | abs }}|{{ 'a' + 'b' | upper }}|{{ ('a' + 'b') | upper }}|{{ 2 * '3' }}|{{ not 1 == 2 }}|{{ 'a' + 2 ~ 3 }}|{{ 2 ~ 3 * 2 }}|{{ [1, 2] | length > 1 }}|{{ 'a' if 1 > 2 or 3 > 2 else 'b' }}|{{ -2 ** 2 }}|{{ (-2) ** 2 }}|{{ 10 - 2 * 3 // 4 }}"""),
    ("whitespace-dash", "a  {{- ' b ' -}}  c|x\n  {%- if true -%}\n  y\n  {%- endif -%}\n  z|{{ 1 }}  {#- c -#}  {{ 2 }}"),
    ("whitespace-blocks", "<ul>\n    {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n    {% endfor %}\n</ul>\n  {{ 'var-line' }}\n  {% if true %}x {% endif %}\ny\n"),
    ("whitespace-plus", "{%+ if true %}  kept{% endif +%}\nnext\n  {%+ if true %}plus-lstrip{% endif %}\n"),
    ("whitespace-comments", "a {# comment #} b\n  {# own line #}\nc\n{#- strip -#}   d\n{# multi\nline #}\ne"),
    ("whitespace-tail", "end\n\n"),
    ("whitespace-crlf", "a\r\nb{% if true %}\r\nc{% endif %}\rd"),
    ("whitespace-inline", "{% if true %}  a  {% endif %}  b  {% if false %}x{% else %} c {% endif %}"),
    ("raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}  |"),
    ("undefined", "[{{ undefined_var }}][{{ undefined_var | length }}][{{ undefined_var | trim }}][{{ not undefined_var }}][{{ undefined_var | list }}][{{ undefined_var is none }}][{{ undefined_var | string }}]"),
    ("strftime", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%A %a %B %j %y %I %p %%') }}"),
    ("generation-prompt-vars", "{{ add_generation_prompt is defined }}|{{ tools }}|{{ tools is none }}|{{ documents is none }}|{{ bos_token }}|{{ eos_token }}"),
    ("macro-scope", """{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}|{% macro n() %}[{{ y }}]{% endmacro %}{% for y in [5] %}{{ n() }}{% endfor %}"""),
    ("floats", """{{ 10 / 4 }}|{{ 2**0.5 }}|{{ 1e-7 }}|{{ 1.0e16 }}|{{ 12345678901234567.0 }}|{{ 0.1 * 3 }}|{{ 100.0 }}|{{ 2.5e-5 }}|{{ -7.5 // 2 }}|{{ 7 % -3 }}|{{ -7.5 % 2 }}|{{ 1/3*3 }}|{{ 1.5 | round }}|{{ 2.675 | round(2) }}|{{ 5 | round }}|{{ 1e308 * 10 }}"""),
    ("printf", """{{ "%d%%" % 50 }}|{{ "%5s|%-5s|" % ("a", "b") }}|{{ "%.3e" % 12345.678 }}|{{ "%g" % 0.0001 }}|{{ "%g" % 1e6 }}|{{ "%g" % 100000.0 }}|{{ "%e" % 12345.678 }}|{{ "%(a)s-%(b)d" % {"a": "x", "b": 2} }}|{{ "%d" % 3.9 }}|{{ "%s" % none }}|{{ "%r" % "q" }}|{{ "%+d" % 5 }}|{{ "%x" % -255 }}"""),
    ("str-format", """{{ '{} and {name}'.format(1, name='x') }}|{{ '{0}{0}{{}}'.format(7) }}"""),
    ("repr-quotes", r"""{{ msgs[1] }}|{{ ["it's", 'say "hi"', 'both \'"', 'tab\t', 'nl\n'] }}|{{ "\x00\x7f\u200b\xa0é" | list }}|{{ (1,) }}|{{ [1.0, -0.5, 1e20] }}"""),
    ("unicode-case", """{{ "Ünïcode ß" | upper }}|{{ "ǅ" | lower }}|{{ "ﬁ" | upper }}|{{ "ÉCOLE" | lower }}|{{ "élan vital" | title }}|{{ "éa" | capitalize }}"""),
    ("whitespace-lstrip-inline", "  x {% if true %}y{% endif %}\n  {% if true %}\tz{% endif %}\t\n\t{% if true %}tab{% endif %}\n"),
    ("whitespace-after-dash", "{%- if true -%}\n   {% if true %}x{% endif %}\n{# c #}\n   {% if true %}w{% endif %}\n{% endif %}\n  tail"),
    ("whitespace-after-var", "{{ 1 }}\n  {% if true %}a{% endif %}{{ 2 }}  {% if true %}b{% endif %}\n{{- 3 -}}\n  {% if true %}c{% endif %}"),
    ("whitespace-loop-dash", "{% for x in [1, 2] -%}\n  {{ x }}\n{%- endfor %}|{%- for x in [1,2] %}\n  [{{ x }}]\n{% endfor %}|\n{% for x in [1] %}\n    {%- if x %}\n        {{- 'in' }}\n    {%- endif %}\n{% endfor %}\nend"),
    ("whitespace-only-tags", "{% if true %}\n{% endif %}\n{% if false %}\n{% else %}\n  else-line\n{% endif %}\n{# comment #}\n{% set z = 1 %}\n{{ z }}\n"),
    ("whitespace-mixed", "  {%- if true %}  a  {% endif -%}  \n  b  {%+ if true %}c{%- endif %}  d\n   {%- raw %}  r  {% endraw %}\n"),
    ("literals-trailing-comma", """{{ [1, 2,] }}|{{ {"a": 1,} }}|{{ {"a": {"b": 2}}.a.b }}|{{ (msgs | selectattr("role", "equalto", "user") | list)[-1].content }}|{{ msgs|map(attribute="content")|map("upper")|join }}|{{ (1, 2,) }}"""),
    ("namespace-nested", """{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% for j in range(2) %}{% set ns.l = ns.l + [i * j] %}{% endfor %}{% endfor %}{{ ns.l }}|{% set ns2 = namespace(d={}) %}{{ ns2.d }}"""),
    ("tojson-more", """{{ d | tojson(indent="\\t") }}|{{ {"é": 1, 2: 3, none: 4, true: 5, 1.5: 6} | tojson }}|{{ {"b": 1, "a": 2} | tojson(sort_keys=true, indent=0) }}|{{ ["x"] | tojson(separators=(";", "=")) }}"""),
    ("misc-filters", """{{ "abc" | center(2) }}|{{ "x" ~ 1.0 }}|{{ none | default("z", true) }}|{{ [1, 2] | first }}{{ (1, 2) | last }}{{ {"k": 1} | first }}{{ {"k": 1, "z": 2} | last }}|{{ "a-b" | replace("-", "") | upper }}|{{ [3, 1] | sort | first }}|{{ "  x\\n" | trim | length }}"""),
    ("loop-nested-last", """{% for a in "xy" %}{% for b in [1] %}{{ loop.index }}{{ a }}{% endfor %}{{ loop.last }}{% endfor %}"""),
    ("with-and-filter", """{% set x = 3 %}{% set x = x + 1 %}{{ x }}{% with y = x * 2 %}{{ y }}{% set x = 0 %}{{ x }}{% endwith %}{{ x }}|{% filter upper %}abc{{ 1 }}{% endfilter %}"""),
    ("undefined-tests", """{% if x is not defined %}nd{% endif %}{{ l | selectattr("x") | list }}|{{ msgs[0].name | default("anon") }}|{{ (msgs[0].name or "") | length }}"""),
    ("error-undefined-test", "{{ undefined_x.y is defined }}"),
    ("error-in-none", "{{ 'a' in none }}"),
    ("error-raise-in-loop", "{% for m in msgs %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant at ' ~ loop.index0) }}{% endif %}{{ m.role }}{% endfor %}"),
    ("error-syntax-condexpr", "{{ 1 if true else }}"),
    ("error-syntax-endif-mismatch", "{% for x in l %}\n{% endif %}"),
    ("error-syntax-bad-close", "{{ (1 + 2] }}"),
    ("error-unknown-test", "{{ 1 is frobnicated }}"),
    ("unknown-filter-in-if", "{% if false %}{{ 1 | nosuchfilter }}{% endif %}ok{{ 2 if true else 3 | nosuch }}"),
    ("namespace-cycle", """{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}|{{ ns.self.self.a }}|{{ [ns] | length }}"""),
    ("error-raise", "before{{ raise_exception('Custom failure: ' ~ 42) }}after"),
    ("error-undefined-attr", "{{ m.missing.deeper }}"),
    ("error-undefined-arith", "{{ undefined_var + 1 }}"),
    ("error-undefined-attr-top", "{{ undefined_var.attr }}"),
    ("error-empty-messages", "{{ messages[0]['role'] }}"),
    ("error-type-add", "{{ 'a' + 1 }}"),
    ("error-div-zero", "{{ 1 / 0 }}"),
    ("error-compare", "{{ 'a' < 1 }}"),
    ("error-mutation", "{{ l.append(4) }}"),
    ("error-unknown-filter", "{{ 'x' | nosuchfilter }}"),
    ("error-syntax-for", "{% for %}{% endfor %}"),
    ("error-syntax-unclosed", "{% if true %}unclosed"),
    ("error-syntax-expr", "line one\n{{ 1 + }}"),
    ("error-syntax-stray-end", "{% endfor %}"),
    ("error-syntax-unclosed-var", "{{ 'a' "),
    ("error-syntax-comment", "{# never closed"),
    ("error-syntax-string", "{{ 'unterminated }}"),
]


def build_env():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Hugging Face's override: no HTML escaping, json.dumps options exposed.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    """Returns {"output": ...} or {"error": ..., "kind": ...}."""
    try:
        tmpl = env.from_string(source)
    except TemplateSyntaxError as e:
        return {"error": e.message, "kind": "syntax", "line": e.lineno}
    except Exception as e:  # compile-time assertion errors (unknown filter)
        return {"error": str(e), "kind": type(e).__name__}
    try:
        return {"output": tmpl.render(**variables)}
    except TemplateError as e:
        kind = "raise" if type(e) is TemplateError else type(e).__name__
        return {"error": str(e), "kind": kind}
    except Exception as e:
        return {"error": str(e), "kind": type(e).__name__}


def generate():
    env = build_env()
    out = {
        "generator": "scripts/chat/golden.py",
        "jinja2": jinja2.__version__,
        "now": NOW.isoformat(),
        "templates": {},
        "cases": [],
        "snippets": [],
    }
    for fname in sorted(os.listdir(TEMPLATES)):
        if not fname.endswith(".jinja"):
            continue
        if fname not in TEMPLATE_TOKENS:
            sys.exit(f"golden.py: no special tokens listed for {fname}")
        bos, eos = TEMPLATE_TOKENS[fname]
        out["templates"][fname] = {"bos_token": bos, "eos_token": eos}
        with open(os.path.join(TEMPLATES, fname), encoding="utf-8", newline="") as f:
            source = f.read()
        for cname, msgs in CONVERSATIONS.items():
            for addgen in (True, False):
                variables = {
                    "messages": msgs,
                    "tools": None,
                    "documents": None,
                    "add_generation_prompt": addgen,
                    "bos_token": bos,
                    "eos_token": eos,
                }
                case = {"template": fname, "conversation": cname, "add_generation_prompt": addgen, "messages": msgs}
                case.update(render(env, source, variables))
                out["cases"].append(case)
    for name, source in SNIPPETS:
        variables = dict(VARS)
        variables.update({"add_generation_prompt": True, "tools": None, "documents": None,
                          "bos_token": "<s>", "eos_token": "</s>"})
        snip = {"name": name, "source": source}
        snip.update(render(env, source, variables))
        out["snippets"].append(snip)
    out["snippet_vars"] = VARS
    return json.dumps(out, ensure_ascii=False, indent=1) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the file on disk instead of writing it")
    args = ap.parse_args()
    text = generate()
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit("golden.json is stale: run python3 scripts/chat/golden.py")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
