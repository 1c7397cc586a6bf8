#!/usr/bin/env python3
"""Tool-call renderings by Python's jinja2 of the chat templates whose
tool-call formats engine/toolcall reads.

How to run (from the repository root; needs jinja2 3.1.x and ../shared):

    python3 scripts/chat/toolgolden.py          # rewrites engine/toolcall/testdata/template_calls.json
    python3 scripts/chat/toolgolden.py --check  # exits 1 if the file on disk is stale

For each template in TEMPLATES (under ../shared/refdata/chat-templates/
llamacpp-node-bundle) it records, in the environment of golden.py
(sandbox, trim_blocks, lstrip_blocks, loopcontrols, raise_exception, a
tojson without HTML escaping, strftime_now frozen at NOW, and from_json,
which DeepSeek V3.2's template calls):

  history   the rendering of a conversation whose assistant turn calls two
            tools, followed by the tools' results, an answer and a new
            question, with add_generation_prompt: engine/chat must render
            the same bytes;
  calls     the text of the assistant's tool-call turn alone: the rendering
            of the conversation up to that turn less the rendering of the
            conversation before it with the generation prompt, cut at the
            template's end-of-turn text: engine/toolcall must parse it back
            into CALLS.

The templates are not copied: each one's sha256 is recorded.
"""

import argparse
import datetime
import functools
import hashlib
import json
import os
import sys

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
REF = os.path.join(SHARED, "refdata", "chat-templates", "llamacpp-node-bundle")
OUT = os.path.join(ROOT, "engine", "toolcall", "testdata", "template_calls.json")

NOW = datetime.datetime(2024, 7, 26, 9, 5, 3)

# template -> (format rill detects, bos, eos, end of the assistant's turn
# in the calls text ("" : the rendering's end), arguments as JSON text).
TEMPLATES = {
    "Qwen3-Coder.jinja": ("qwen-xml", "", "<|im_end|>", "<|im_end|>", False),
    "Qwen3.5-4B.jinja": ("qwen-xml", "", "<|im_end|>", "<|im_end|>", False),
    "GLM-4.6.jinja": ("glm", "", "<|endoftext|>", "", False),
    "GLM-4.7-Flash.jinja": ("glm-4.7", "", "<|endoftext|>", "", False),
    "MiniMax-M2.jinja": ("minimax", "]~!b[", "[e~[", "[e~[", False),
    "ByteDance-Seed-OSS.jinja": ("seed-oss", "<seed:bos>", "<seed:eos>", "<seed:eos>", False),
    "Kimi-K2-Instruct.jinja": ("kimi-k2", "[BOS]", "[EOS]", "<|im_end|>", False),
    "Kimi-K2-Thinking.jinja": ("kimi-k2", "[BOS]", "[EOS]", "<|im_end|>", False),
    "moonshotai-Kimi-K2.jinja": ("kimi-k2", "[BOS]", "[EOS]", "<|im_end|>", False),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("deepseek-v3.1", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>", False),
    "meetkai-functionary-medium-v3.1.jinja": ("functionary-v3.1", "<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>", False),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": ("command-r7b", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", False),
    "fireworks-ai-llama-3-firefunction-v2.jinja": ("firefunction-v2", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>", False),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": ("hermes", "<|begin_of_text|>", "<|im_end|>", "<|im_end|>", False),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("hermes", "<|begin_of_text|>", "<|im_end|>", "<|im_end|>", False),
    "ibm-granite-granite-4.0.jinja": ("hermes", "", "<|end_of_text|>", "<|end_of_text|>", False),
    "ibm-granite-granite-4.1.jinja": ("hermes", "", "<|end_of_text|>", "<|end_of_text|>", False),
    "meetkai-functionary-medium-v3.2.jinja": ("functionary-v3.2", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>", True),
    "deepseek-ai-DeepSeek-V3.2.jinja": ("deepseek-dsml", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>", False),
}

# Variables some templates read besides the usual ones (Firefunction's
# system prompt takes the functions and the date from its caller).
EXTRA_VARS = {
    "fireworks-ai-llama-3-firefunction-v2.jinja": {"datetime": "Jul 26 2024", "functions": "[get_weather, search_code]"},
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city."},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
        }, "required": ["city"]},
    }},
    {"type": "function", "function": {
        "name": "search_code",
        "description": "Search the code.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "paths": {"type": "array", "items": {"type": "string"}},
            "options": {"type": "object"},
        }, "required": ["query"]},
    }},
]

CALLS = [
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "metric": True}},
    {"name": "search_code", "arguments": {"query": "if a < b {\n\treturn \"x\"\n}", "paths": ["src/", "lib/"], "options": {"regex": False, "limit": 10}}},
]


def messages(args_as_text):
    calls = []
    for i, c in enumerate(CALLS):
        args = json.dumps(c["arguments"], ensure_ascii=False) if args_as_text else c["arguments"]
        calls.append({"id": "call%05d%s" % (i, "abcd"), "type": "function", "function": {"name": c["name"], "arguments": args}})
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris, and where is the comparison?"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": calls[0]["id"], "name": "get_weather", "content": "{\"temperature\": 21}"},
        {"role": "tool", "tool_call_id": calls[1]["id"], "name": "search_code", "content": "src/cmp.go:12"},
        {"role": "assistant", "content": "It is 21 \u00b0C; the comparison is in src/cmp.go."},
        {"role": "user", "content": "Thanks!"},
    ]


def build_env(mutable=False, no_markup=False):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    cls = SandboxedEnvironment if mutable else ImmutableSandboxedEnvironment
    env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.filters["from_json"] = json.loads
    if no_markup:
        env.filters["safe"] = str
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


def generate():
    env, mutable_env, safe_env = build_env(), build_env(mutable=True), build_env(no_markup=True)
    out = {"generator": "scripts/chat/toolgolden.py", "jinja2": jinja2.__version__, "now": NOW.isoformat(),
           "tools": TOOLS, "calls": CALLS, "cases": []}
    for fname, (fmt, bos, eos, end, as_text) in TEMPLATES.items():
        with open(os.path.join(REF, fname), "rb") as f:
            raw = f.read()
        msgs = messages(as_text)

        def render(ms, gen, e=env):
            return e.from_string(raw.decode("utf-8")).render(messages=ms, tools=TOOLS, documents=None,
                                                             add_generation_prompt=gen, bos_token=bos, eos_token=eos,
                                                             **EXTRA_VARS.get(fname, {}))

        case = {}
        try:
            case["history"] = render(msgs, True)
            # A str added to a Markup (text|safe + x|tojson, Functionary
            # v3.1) is HTML-escaped by jinja2; rill, like llama.cpp, has
            # no Markup. Where that changes the output, history_escaped
            # keeps jinja2's, and history is the rendering with a safe
            # filter that makes no Markup (nothing escaped).
            unescaped = render(msgs, True, e=safe_env)
            if unescaped != case["history"]:
                case["history_escaped"], case["history"] = case["history"], unescaped
        except SecurityError as e:
            # The template mutates a list (Kimi K2 Instruct's
            # ids.append), which Hugging Face's immutable sandbox refuses:
            # rill must refuse it too. The calls text is then taken from a
            # mutable sandbox, as llama.cpp's renderer allows it.
            case["history_error"] = str(e)
            render = functools.partial(render, e=mutable_env)
            render.__name__ = "render"
        before = render(msgs[:2], True)
        upto = render(msgs[:3], False)
        # Thinking templates open <think> in the generation prompt and
        # render a past turn without it: the calls text starts where the
        # two renderings part.
        common = os.path.commonprefix([before, upto])
        calls = upto[len(common):]
        if end:
            calls = calls[: calls.rindex(end)]
        out["cases"].append({"template": fname, "sha256": hashlib.sha256(raw).hexdigest(), "format": fmt,
                             "bos": bos, "eos": eos, "vars": EXTRA_VARS.get(fname, {}), "messages": msgs, **case, "calls_text": calls})
    return json.dumps(out, ensure_ascii=False, indent=1) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the file on disk instead of writing it")
    args = ap.parse_args()
    text = generate()
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit("template_calls.json is stale: run python3 scripts/chat/toolgolden.py")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
