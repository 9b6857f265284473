#!/usr/bin/env python3
"""Structured output against the real SmolLM2-135M-Instruct through the
official openai package (tests/http/structured.sh starts the server):

    structured.py BASE_URL MODEL SCHEMA_DIR

- every JSON schema in SCHEMA_DIR (tests/data/schemas: 50, of rising
  difficulty) as response_format json_schema, greedy and at temperature 1
  (seed 1): the answer must end by itself (finish_reason "stop"), parse,
  and validate against its schema (jsonschema, formats checked; "time"
  and "ipv4" as the JSON Schema spec defines them: RFC 3339 full-time and
  RFC 2673 dotted-quad, where Python's own checks are stricter: no more
  than 6 fraction digits, no leading zeros);
- response_format json_object, and vLLM's guided_json, guided_regex,
  guided_grammar and guided_choice, streamed and not;
- hostile constraints get a 400 naming the field, quickly: invalid JSON
  schema, regex and grammar syntax, deep nesting, a huge enum, more than
  1 MiB, two constraints at once; a grammar too slow to enforce
  (json_charstar.ebnf) refused by the node, streamed and not, while other
  requests run; and the server still answers after.
Requests run 8 at a time (the node batches them). Prints "N passed, N failed".
"""
import concurrent.futures
import glob
import json
import os
import re
import sys

import jsonschema
import openai

BASE, M, DIR = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=BASE, api_key="none", max_retries=0, timeout=600)
passed = failed = 0
MAX_TOKENS = 400


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


def ask(prompt, **kw):
    return client.chat.completions.create(
        model=M, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS, **kw)


def schema_case(path, temperature):
    schema = json.load(open(path))
    name = os.path.basename(path)[:-5]
    topic = name.split("_", 1)[1].replace("_", " ")
    r = ask(f"Give an example {topic} as JSON.", temperature=temperature, seed=1,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "x" + name, "schema": schema, "strict": True}})
    c = r.choices[0]
    return name, temperature, c.finish_reason, c.message.content, schema


FORMATS = jsonschema.FormatChecker()
TIME = re.compile(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
                  r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")


@FORMATS.checks("time")
def is_time(v):
    return not isinstance(v, str) or TIME.fullmatch(v) is not None


@FORMATS.checks("ipv4")
def is_ipv4(v):
    parts = v.split(".") if isinstance(v, str) else None
    return parts is None or (len(parts) == 4 and all(
        p.isdigit() and 1 <= len(p) <= 3 and int(p) <= 255 for p in parts))


def validate(name, temperature, finish, text, schema):
    what = f"{name} at temperature {temperature}"
    check(finish == "stop", f"{what}: finish_reason {finish}: {text[:200]!r}")
    try:
        value = json.loads(text)
    except ValueError as e:
        check(False, f"{what}: not JSON ({e}): {text[:200]!r}")
        return
    try:
        jsonschema.validate(value, schema, format_checker=FORMATS)
        check(True, what)
    except jsonschema.ValidationError as e:
        check(False, f"{what}: does not validate: {e.message}: {text[:200]!r}")


paths = sorted(glob.glob(os.path.join(DIR, "*.json")))
check(len(paths) == 50, f"{len(paths)} schemas in {DIR}, want 50")
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    jobs = [pool.submit(schema_case, p, t) for t in (0.0, 1.0) for p in paths]
    for j in jobs:
        try:
            validate(*j.result())
        except openai.APIError as e:
            check(False, f"request failed: {e}")

# json_object: any object (bounded here by max_tokens only: a short prompt)
r = ask("Reply with an empty JSON object.", temperature=0,
        response_format={"type": "json_object"})
text = r.choices[0].message.content
if r.choices[0].finish_reason == "stop":
    check(isinstance(json.loads(text), dict), f"json_object: {text!r} is not an object")
else:
    check(text.lstrip().startswith("{"), f"json_object: {text[:100]!r} does not start an object")

# vLLM-style extensions, on completions and chat, streamed and not
r = client.completions.create(model=M, prompt="Is the sky blue? Answer:", max_tokens=8,
                              extra_body={"guided_grammar": 'root ::= " yes" | " no"'})
check(r.choices[0].text in (" yes", " no") and r.choices[0].finish_reason == "stop",
      f"guided_grammar: {r.choices[0].text!r} ({r.choices[0].finish_reason})")
stream = client.completions.create(model=M, prompt="A date:", max_tokens=20, stream=True,
                                   extra_body={"guided_regex": " [0-9]{4}-[0-9]{2}-[0-9]{2}"})
text = "".join(ch.choices[0].text for ch in stream if ch.choices)
check(re.fullmatch(r" [0-9]{4}-[0-9]{2}-[0-9]{2}", text) is not None, f"guided_regex streamed: {text!r}")
choices = ["red", "green", 'say "hi"', "a\\b"]
r = client.completions.create(model=M, prompt="Pick a colour:", max_tokens=10,
                              extra_body={"guided_choice": choices})
check(r.choices[0].text in choices and r.choices[0].finish_reason == "stop",
      f"guided_choice: {r.choices[0].text!r} ({r.choices[0].finish_reason})")
schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
r = ask("Is water wet? JSON please.", temperature=0, extra_body={"guided_json": schema})
text = r.choices[0].message.content
check(r.choices[0].finish_reason == "stop" and isinstance(json.loads(text).get("ok"), bool),
      f"guided_json: {text!r}")
stream = client.chat.completions.create(
    model=M, messages=[{"role": "user", "content": "Is water wet? JSON please."}], max_tokens=40,
    temperature=0, stream=True, extra_body={"guided_json": json.dumps(schema)})
streamed = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
check(streamed == text, f"guided_json streamed {streamed!r} != {text!r}")


def refused(param, want, **body):
    try:
        client.completions.create(model=M, prompt="x", max_tokens=4, extra_body=body)
        check(False, f"{param}: accepted ({want})")
    except openai.BadRequestError as e:
        err = e.body if isinstance(e.body, dict) else {}
        check(err.get("param") == param and want in (err.get("message") or ""),
              f"{param}: want a 400 naming it with '{want}', got {err}")


def deep(n):
    s = {"type": "integer"}
    for _ in range(n):
        s = {"type": "array", "items": s}
    return s


rf = lambda s: {"type": "json_schema", "json_schema": {"name": "h", "schema": s}}
refused("guided_regex", "parenthesis", guided_regex="(ab")
refused("guided_grammar", "EBNF", guided_grammar="root ::= ")
refused("guided_grammar", "root", guided_grammar='start ::= "a"')
refused("guided_json", "Unsupported type", guided_json={"type": "nope"})
refused("guided_json", "not JSON", guided_json="{\"type\": ")
refused("response_format.json_schema.schema", "nested deeper", response_format=rf(deep(40)))
refused("response_format.json_schema.schema", "enum values",
        response_format=rf({"enum": [f"v{i}" for i in range(5000)]}))
refused("guided_regex", "limit", guided_regex="a" * ((1 << 20) + 1))
refused("response_format", "json_object", response_format={"type": "xml"})
refused("response_format.json_schema.name", "name", response_format={"type": "json_schema",
                                                                   "json_schema": {"schema": {}}})
refused("guided_choice", "array", guided_choice="red")
refused("guided_choice", "1 to 1024", guided_choice=[f"c{i}" for i in range(1025)])
refused("guided_regex", "cannot be given together", guided_json={"type": "object"},
        guided_regex="a")

# A grammar that parses but is too slow to enforce (a JSON string as
# `char*` over a rule of its own: ~98% of the vocabulary left to check one
# by one at a string position, milliseconds a token for the whole batch):
# the node refuses it when it compiles it, and the 400 names the field and
# says how to write it, streamed or not, with normal requests in flight.
SLOW = open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "../../bench/data/grammars/json_charstar.ebnf")).read()
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    normal = [pool.submit(client.chat.completions.create, model=M, max_tokens=8, temperature=0,
                          messages=[{"role": "user", "content": "Say hi."}]) for _ in range(2)]
    refused("guided_grammar", "too slow to enforce", guided_grammar=SLOW)
    refused("guided_grammar", "character class", guided_grammar=SLOW)
    try:
        stream = client.chat.completions.create(
            model=M, messages=[{"role": "user", "content": "JSON"}], max_tokens=8, stream=True,
            extra_body={"guided_grammar": SLOW})
        got = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
        check(False, f"slow grammar streamed: accepted ({got!r})")
    except openai.BadRequestError as e:
        err = e.body if isinstance(e.body, dict) else {}
        check(err.get("param") == "guided_grammar" and
              "too slow to enforce" in (err.get("message") or ""),
              f"slow grammar streamed: want a 400 naming guided_grammar, got {err}")
    except openai.APIError as e:  # an error event inside the stream is readable too
        check("too slow to enforce" in str(e), f"slow grammar streamed: {e}")
    for f in normal:
        r = f.result()
        check(r.choices[0].finish_reason in ("stop", "length"),
              f"a request beside the slow grammar: {r.choices[0].finish_reason}")
# the same language written the fast way (bench/data/grammars/json.ebnf) is served
FAST = open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "../../bench/data/grammars/json.ebnf")).read()
r = client.chat.completions.create(
    model=M, messages=[{"role": "user", "content": "A JSON object with a name."}],
    max_tokens=60, temperature=0, extra_body={"guided_grammar": FAST})
check(r.choices[0].finish_reason in ("stop", "length"),
      f"json.ebnf after the slow grammar: {r.choices[0].finish_reason}")
# after all that, still serving
r = client.completions.create(model=M, prompt="Hello", max_tokens=2)
check(len(r.choices) == 1, "the server answers after the hostile requests")
print(f"{passed} passed, {failed} failed")
