#!/usr/bin/env python3
"""Renderings by Python's jinja2 of gpt-oss's chat template over conversations
with earlier reasoning, tool calls and tool results.

How to run (from the repository root; needs jinja2 3.1.x and ../shared):

    python3 scripts/chat/harmonygolden.py          # rewrites engine/native/testdata/harmony_golden.json
    python3 scripts/chat/harmonygolden.py --check  # exits 1 if the file on disk is stale

Each case is an OpenAI chat request (what a client sends to rill). The script
turns it into the template's variables as llama.cpp's server and Hugging Face
transformers do for gpt-oss: tool-call arguments decoded from their JSON text,
null content as "", an assistant turn's reasoning_content copied to
"thinking" (the field the template reads), and, as llama.cpp does, content
removed from an assistant turn that has both reasoning and tool calls (the
template refuses both). reasoning_effort becomes the template's variable. The
environment is refgolden.py's (transformers': sandbox, trim_blocks,
lstrip_blocks, loopcontrols, tojson without HTML escaping, strftime_now frozen
at NOW). engine/native's TestHarmonyHistoryGolden renders the same requests
through rill and wants these prompts byte for byte.
"""

import argparse
import copy
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refgolden  # noqa: E402

TEMPLATE = os.path.join(refgolden.REF, "llamacpp-node-bundle", "openai-gpt-oss-120b.jinja")
OUT = os.path.join(refgolden.ROOT, "engine", "native", "testdata", "harmony_golden.json")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]}}}]


def call(id_, city):
    return {"id": id_, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


USER = {"role": "user", "content": "What is the weather in Paris?"}
TOOL = {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"}

CASES = [
    ("reasoning-then-call", {"tools": TOOLS, "messages": [
        USER,
        {"role": "assistant", "content": None, "reasoning_content": "The user wants the weather. Call the tool.", "tool_calls": [call("c1", "Paris")]},
        TOOL]}),
    ("reasoning-content-and-call", {"tools": TOOLS, "messages": [
        USER,
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need the tool.", "tool_calls": [call("c1", "Paris")]},
        TOOL]}),
    ("content-and-call", {"tools": TOOLS, "messages": [
        USER,
        {"role": "assistant", "content": "Let me look.", "tool_calls": [call("c1", "Paris")]},
        TOOL]}),
    ("answered-then-new-question", {"tools": TOOLS, "reasoning_effort": "high", "messages": [
        {"role": "system", "content": "Be brief."},
        USER,
        {"role": "assistant", "content": None, "reasoning_content": "Call the tool.", "tool_calls": [call("c1", "Paris")]},
        TOOL,
        {"role": "assistant", "content": "Sunny, 21 C.", "reasoning_content": "The tool says sunny."},
        {"role": "user", "content": "And in Rome?"}]}),
    ("effort-low", {"reasoning_effort": "low", "messages": [{"role": "developer", "content": "Answer in French."}, USER]}),
]


def template_vars(req):
    msgs = []
    for m in copy.deepcopy(req["messages"]):
        if m.get("content") is None:
            m["content"] = ""
        for tc in m.get("tool_calls", []):
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
        if isinstance(m.get("reasoning_content"), str):
            m["thinking"] = m["reasoning_content"]
            if m.get("tool_calls"):
                del m["content"]
        msgs.append(m)
    v = {"messages": msgs, "add_generation_prompt": True, "bos_token": "", "eos_token": "<|return|>"}
    if "tools" in req:
        v["tools"] = req["tools"]
    if "reasoning_effort" in req:
        v["reasoning_effort"] = req["reasoning_effort"]
    return v


def generate():
    with open(TEMPLATE, encoding="utf-8") as f:
        src = f.read()
    env = refgolden.build_env()
    cases = []
    for name, req in CASES:
        out = refgolden.render(env, src, template_vars(req))
        if "output" not in out:
            sys.exit(f"{name}: {out}")
        cases.append({"name": name, "request": req, "prompt": out["output"]})
    return {
        "template": "llamacpp-node-bundle/openai-gpt-oss-120b.jinja",
        "sha256": hashlib.sha256(src.encode("utf-8")).hexdigest(),
        "now": refgolden.NOW.isoformat(),
        "cases": cases,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = json.dumps(generate(), indent=1, ensure_ascii=False) + "\n"
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit(f"{OUT} is stale")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
