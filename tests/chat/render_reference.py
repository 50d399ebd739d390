#!/usr/bin/python3
"""Renders chat templates with Python's Jinja2 the way Hugging Face
transformers does (apply_chat_template), as the reference for
tests/chat/chat_template_reference_test.cc.

Usage: render_reference.py CASES.json OUT.json

CASES.json: {"cases": [{"template": str, "messages": [ChatMessage as JSON:
role, content, content_is_null, tool_calls [{id, type, name, arguments}],
tool_call_id, name], "add_generation_prompt": bool, "bos_token": str,
"eos_token": str, "tools_json": [str]}]}
OUT.json: [{"ok": true, "text": str} | {"ok": false, "error": type name,
"message": str, "raised": bool (raise_exception)}], one per case.
"""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(jinja2.exceptions.TemplateError):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: no HTML escaping, json.dumps options exposed.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    from datetime import datetime
    return datetime.now().strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def hf_message(m):
    # What an OpenAI request's message looks like to the template (mirrors
    # MessagesValue in engine/chat/chat_template.cc).
    d = {"role": m["role"],
         "content": None if m.get("content_is_null") else m.get("content", "")}
    if m.get("tool_calls"):
        d["tool_calls"] = [{"id": c.get("id", ""), "type": c.get("type", "function"),
                            "function": {"name": c.get("name", ""),
                                         "arguments": c.get("arguments", "")}}
                           for c in m["tool_calls"]]
    if m.get("tool_call_id"):
        d["tool_call_id"] = m["tool_call_id"]
    if m.get("name"):
        d["name"] = m["name"]
    return d


def render(env, case):
    tools = [json.loads(t) for t in case.get("tools_json", [])] or None
    kwargs = {}
    for key in ("bos_token", "eos_token"):
        if case.get(key):
            kwargs[key] = case[key]
    template = env.from_string(case["template"])
    return template.render(messages=[hf_message(m) for m in case["messages"]], tools=tools,
                           documents=None,
                           add_generation_prompt=case.get("add_generation_prompt", True),
                           **kwargs)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    env = make_env()
    out = []
    for case in cases:
        try:
            out.append({"ok": True, "text": render(env, case)})
        except Exception as e:  # noqa: BLE001 -- every failure is a result to compare
            out.append({"ok": False, "error": type(e).__name__, "message": str(e),
                        "raised": isinstance(e, Raised)})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
