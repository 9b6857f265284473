#!/usr/bin/env python3
"""Records what Jinja2 renders for chat templates given OpenAI tools and
tool-calling conversations, so the C renderer (text/jinja/) can be checked
byte for byte on them without Python (tests/unit/text/test_chat_template.c,
test tools_conformance).

Owner: coordinator tool calling (issue 37).  Callers: a developer, by hand,
when templates or cases change; tests/chat_tools_conformance.py (make test)
runs it with --check, which renders everything again with the installed
jinja2 and fails on any byte that differs from the committed files.

    python3 tools/make_chat_tools_conformance.py          # write
    python3 tools/make_chat_tools_conformance.py --check  # compare

Inputs:  tests/data/chat_templates/<family>.jinja (README.md there).
Outputs: tests/data/chat_templates/tools_<family>.json: the family's
         special tokens, then conversations with `tools` and messages that
         carry tool_calls / role "tool", each with the rendered text or the
         raise_exception() message.

Rendering: the environment transformers' apply_chat_template builds
(transformers.utils.chat_template_utils._compile_jinja_template), written
out here because transformers is not installed on the build machines:
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
loopcontrols extension, tojson as json.dumps(ensure_ascii=False, indent,
separators, sort_keys), raise_exception raising TemplateError, and
strftime_now pinned to FIXED_NOW; render(messages=, tools=, documents=None,
add_generation_prompt=, bos_token=, eos_token=).  Tool calls carry
`arguments` as a dict, as the server passes them (it parses the OpenAI
JSON string first, as vLLM does) -- except where a case says otherwise.
"""
import datetime as _dt
import json
import os
import platform
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")
FIXED_NOW = _dt.datetime(2024, 9, 25, 12, 0, 0)
FIXED_NOW_UNIX = 1727265600  # the same instant in UTC; the C test runs with TZ=UTC

FAMILIES = {
    "llama3_1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2_5": {"bos_token": None, "eos_token": "<|im_end|>"},
    "mistral_v0_3": {"bos_token": "<s>", "eos_token": "</s>"},
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
}


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web-search_v2",
    "description": "Search the web; returns \"titles\" and snippets (é, 中文).",
    "parameters": {"type": "object",
                   "properties": {"query": {"type": "string"},
                                  "top_k": {"type": "integer", "minimum": 1, "maximum": 10},
                                  "threshold": {"type": "number", "minimum": 0.25,
                                                "maximum": 1e-7, "default": 100.5},
                                  "filters": {"type": "array", "items": {
                                      "type": "object",
                                      "properties": {"field": {"type": "string"},
                                                     "exact": {"type": "boolean"}}}},
                                  "nothing": {"type": "null"}},
                   "required": ["query"], "additionalProperties": False}}}
NOPARAMS = {"type": "function", "function": {"name": "now", "description": "The time."}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def conversations(family):
    """(name, tools, messages, add_generation_prompt)."""
    cid = "abcDEF123"  # Mistral wants 9 alphanumerics
    cid2 = "Z9y8X7w6v"
    q = {"role": "user", "content": "What's the weather in Paris?"}
    called = {"role": "assistant", "content": None,
              "tool_calls": [call(cid, "get_weather", {"city": "Paris", "unit": "celsius"})]}
    result = {"role": "tool", "tool_call_id": cid, "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"}
    two = {"role": "assistant", "content": None,
           "tool_calls": [call(cid, "get_weather", {"city": "Paris"}),
                          call(cid2, "web-search_v2", {"query": "Paris \"events\"", "top_k": 3})]}
    cases = [
        ("tools_first_turn", [WEATHER], [q], True),
        ("tools_sys", [WEATHER, SEARCH], [{"role": "system", "content": "Be brief."}, q], True),
        ("tools_three", [WEATHER, SEARCH, NOPARAMS], [q], True),
        ("round_trip", [WEATHER], [q, called, result], True),
        ("round_trip_sys", [WEATHER, SEARCH],
         [{"role": "system", "content": "You call tools."}, q, called, result], True),
        ("round_trip_answered", [WEATHER],
         [q, called, result, {"role": "assistant", "content": "It is 21.5 C and clear."},
          {"role": "user", "content": "And tomorrow?"}], True),
        ("parallel_calls", [WEATHER, SEARCH],
         [q, two, result, {"role": "tool", "tool_call_id": cid2, "content": "no events"}], True),
        ("no_tools_round_trip", None, [q, called, result], True),
        ("content_and_call", [WEATHER],
         [q, dict(called, content="Let me check."), result], False),
        ("arguments_string", [WEATHER],
         [q, {"role": "assistant", "content": None,
              "tool_calls": [call(cid, "get_weather", "{\"city\": \"Paris\"}")]}, result], True),
        ("tool_name_field", [WEATHER],
         [q, called, dict(result, name="get_weather")], True),
        ("empty_tools", [], [q], True),
    ]
    return cases


def render(env, template, tools, messages, agp, tokens):
    kwargs = {k: v for k, v in tokens.items() if v is not None}
    try:
        out = env.from_string(template).render(messages=messages, tools=tools, documents=None,
                                               add_generation_prompt=agp, **kwargs)
        return {"expected": out}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception()
            return {"raises": str(e)}
        return {"error": type(e).__name__, "python_message": str(e)}
    except Exception as e:  # TypeError and the like
        return {"error": type(e).__name__, "python_message": str(e)}


def make_family(env, family, tokens):
    with open(os.path.join(DATA, family + ".jinja"), encoding="utf-8", newline="") as f:
        template = f.read()
    cases = []
    for name, tools, messages, agp in conversations(family):
        case = {"name": name, "tools": tools, "messages": messages, "add_generation_prompt": agp}
        case.update(render(env, template, tools, messages, agp, tokens))
        cases.append(case)
    return {"family": family, "template": family + ".jinja",
            "generated_by": {"jinja2": jinja2.__version__, "python": platform.python_version()},
            "bos_token": tokens["bos_token"], "eos_token": tokens["eos_token"],
            "now_unix": FIXED_NOW_UNIX, "cases": cases}


def main():
    check = "--check" in sys.argv[1:]
    env = environment()
    bad = 0
    for family, tokens in FAMILIES.items():
        doc = make_family(env, family, tokens)
        path = os.path.join(DATA, "tools_" + family + ".json")
        if not check:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False, indent=1)
                f.write("\n")
            n_ok = sum("expected" in c for c in doc["cases"])
            print(f"{family}: {len(doc['cases'])} conversations ({n_ok} rendered)")
            continue
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        for new_c, old_c in zip(doc["cases"], old["cases"]):
            for k in ("messages", "tools", "expected", "raises", "error"):
                if new_c.get(k) != old_c.get(k):
                    print(f"FAIL {family}/{new_c['name']}: {k} differs from {path} "
                          f"(jinja2 {jinja2.__version__} now renders {new_c.get(k)!r:.200})")
                    bad += 1
        if len(doc["cases"]) != len(old["cases"]):
            print(f"FAIL {family}: {len(doc['cases'])} cases now, {len(old['cases'])} recorded")
            bad += 1
    if check:
        n = sum(len(make_family(env, f, t)["cases"]) for f, t in FAMILIES.items())
        print(f"{n - bad} passed, {bad} failed")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
