#!/usr/bin/env python3
"""Renderings by Python's jinja2 of the real chat templates in ../shared.

How to run (from the repository root; needs jinja2 3.1.x and ../shared):

    python3 scripts/chat/refgolden.py          # rewrites engine/chat/testdata/refdata_golden.json
    python3 scripts/chat/refgolden.py --check  # exits 1 if the file on disk is stale

Every template under ../shared/refdata/chat-templates (llamacpp-2eb29bf8/
templates, llamacpp-node-bundle, from-metadata) is rendered over every context
below, in the environment Hugging Face transformers renders chat templates
with (see golden.py: sandbox, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, a tojson without HTML escaping, strftime_now frozen at NOW).
A context's keys are the template's variables, as llama.cpp's golden script
passes them (template.render(**context)): messages, tools, bos_token,
eos_token, add_generation_prompt, and kwargs such as enable_thinking; tools
and documents are None when the context lacks them, as apply_chat_template
passes them.

The contexts are llama.cpp's tests/chat/contexts (simple, system, tool_use;
copied from ../shared at the time of writing) and three more that exercise
what newer templates read: reasoning_content, tool_call_id, tool calls with
object arguments, <think> blocks in history, enable_thinking.

The templates are not copied: the file records each one's path and sha256,
and the Go test skips when ../shared is absent. For each (template, context)
it records the output, or the error jinja2 raised (kind "raise" for the
template's own raise_exception).
"""

import argparse
import datetime
import hashlib
import json
import os
import sys

import jinja2
from jinja2.exceptions import TemplateError, TemplateSyntaxError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
REF = os.path.join(SHARED, "refdata", "chat-templates")
OUT = os.path.join(ROOT, "engine", "chat", "testdata", "refdata_golden.json")
TEMPLATE_DIRS = ["llamacpp-2eb29bf8/templates", "llamacpp-node-bundle", "from-metadata"]

NOW = datetime.datetime(2024, 7, 26, 9, 5, 3)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city."},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    }
]

EXTRA_CONTEXTS = {
    "reasoning_tools": {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What's the weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "The user wants the weather; call the tool.",
                "tool_calls": [
                    {
                        "id": "call00001",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "{\"temperature\": 21}"},
            {"role": "assistant", "content": "It is 21 \u00b0C in Paris.", "reasoning_content": "Report it."},
            {"role": "user", "content": "Thanks! And in Tokyo?"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "enable_thinking": False,
    },
    "thinking_history": {
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\nThe answer is 4."},
            {"role": "user", "content": "And 3+3?"},
        ],
        "add_generation_prompt": True,
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "enable_thinking": True,
    },
    "no_thinking": {
        "messages": [{"role": "user", "content": "Say hi."}],
        "add_generation_prompt": True,
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "enable_thinking": False,
    },
}


def build_env():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    try:
        tmpl = env.from_string(source)
    except TemplateSyntaxError as e:
        return {"error": e.message, "kind": "syntax", "line": e.lineno}
    try:
        return {"output": tmpl.render(**variables)}
    except TemplateError as e:
        kind = "raise" if type(e) is TemplateError else type(e).__name__
        return {"error": str(e), "kind": kind}
    except Exception as e:
        return {"error": str(e), "kind": type(e).__name__}


def generate():
    env = build_env()
    contexts = {}
    ctx_dir = os.path.join(REF, "llamacpp-2eb29bf8", "contexts")
    for fname in sorted(os.listdir(ctx_dir)):
        with open(os.path.join(ctx_dir, fname), encoding="utf-8") as f:
            contexts[fname[: -len(".json")]] = json.load(f)
    contexts.update(EXTRA_CONTEXTS)
    out = {
        "generator": "scripts/chat/refgolden.py",
        "jinja2": jinja2.__version__,
        "now": NOW.isoformat(),
        "templates": {},
        "contexts": contexts,
        "cases": [],
    }
    for d in TEMPLATE_DIRS:
        for fname in sorted(os.listdir(os.path.join(REF, d))):
            if not fname.endswith(".jinja"):
                continue
            rel = f"{d}/{fname}"
            with open(os.path.join(REF, d, fname), "rb") as f:
                raw = f.read()
            out["templates"][rel] = hashlib.sha256(raw).hexdigest()
            source = raw.decode("utf-8")
            for cname, ctx in contexts.items():
                case = {"template": rel, "context": cname}
                variables = {"tools": None, "documents": None}
                variables.update(json.loads(json.dumps(ctx)))
                case.update(render(env, source, variables))
                out["cases"].append(case)
    return json.dumps(out, ensure_ascii=False, indent=1) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the file on disk instead of writing it")
    args = ap.parse_args()
    if not os.path.isdir(REF):
        sys.exit(f"refgolden.py: {REF} not found")
    text = generate()
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit("refdata_golden.json is stale: run python3 scripts/chat/refgolden.py")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
