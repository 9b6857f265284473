#!/usr/bin/env python3
"""Tool calling through the official `openai` SDK against the real
SmolLM2-135M-Instruct (tests/http/serve.sh starts it when build/models has
the GGUF). SmolLM2's template knows no tools, so the server describes them
in the system message and writes earlier calls as Hermes <tool_call> text
(docs/http.md, Tool calling); two earlier calls in the conversation make
the 135M model call the tool again, greedily, so the parse is exercised on
real output:

    smol_tools.py BASE_URL MODEL

Checks: tool_calls not streamed (id, type, name, arguments a JSON string,
content null, finish_reason "tool_calls"); streamed (the first delta of a
call carries id, type, name and arguments "", fragments join to the same
arguments, no <tool_call> text leaks into content); the answer sent back
with a role "tool" result (round trip); tool_choice none, required and a
named function accepted (enforcement waits for the grammar engine; when
calls come back they must be valid); 400s that name the field. Prints
"N passed, N failed".
"""
import json
import sys

import openai

BASE, M = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE, api_key="none", max_retries=0, timeout=300)
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "local_time", "description": "The time in a city",
                                         "parameters": {"type": "object",
                                                        "properties": {"city": {"type": "string"}}}}}


def call(cid, city):
    return {"id": cid, "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


# Two earlier rounds of call, result and answer: the model calls again.
FEW_SHOT = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_1", "Paris")]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny in Paris, 21 C."},
    {"role": "user", "content": "What is the weather in London?"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_2", "London")]},
    {"role": "tool", "tool_call_id": "call_2", "content": "rain, 12 C"},
    {"role": "assistant", "content": "It is raining in London, 12 C."},
    {"role": "user", "content": "What is the weather in Berlin?"},
]

# --- not streamed ---------------------------------------------------------------
r = client.chat.completions.create(model=M, messages=FEW_SHOT, tools=[WEATHER], temperature=0, max_tokens=60)
msg, finish = r.choices[0].message, r.choices[0].finish_reason
print(f"note: SmolLM2 answers {msg.content!r} with calls "
      f"{[(c.function.name, c.function.arguments) for c in msg.tool_calls or []]} ({finish})")
check(msg.tool_calls is not None and len(msg.tool_calls) == 1, f"one tool call: {msg}")
whole_args = None
if msg.tool_calls:
    tc = msg.tool_calls[0]
    whole_args = tc.function.arguments
    check(tc.type == "function" and tc.id.startswith("call_") and len(tc.id) == 29, f"id and type: {tc}")
    check(tc.function.name == "get_weather", f"name {tc.function.name}")
    check(isinstance(whole_args, str) and json.loads(whole_args).get("city") == "Berlin",
          f"arguments, a JSON string: {whole_args!r}")
    check(msg.content is None, f"content null beside the call: {msg.content!r}")
    check(finish == "tool_calls", f"finish_reason {finish}")

# --- streamed: OpenAI's deltas ---------------------------------------------------
first, frags, content, finish_s, ids = None, [], [], None, set()
for ch in client.chat.completions.create(model=M, messages=FEW_SHOT, tools=[WEATHER], temperature=0,
                                         max_tokens=60, stream=True):
    for c in ch.choices:
        finish_s = c.finish_reason or finish_s
        if c.delta.content:
            content.append(c.delta.content)
        for d in c.delta.tool_calls or []:
            ids.add(d.index)
            if first is None:
                first = d
            else:
                check(d.id is None and (d.function.name is None), f"later deltas carry only arguments: {d}")
                frags.append(d.function.arguments or "")
check(first is not None and first.id and first.type == "function" and first.function.name == "get_weather"
      and first.function.arguments == "", f"first delta: id, type, name, arguments '': {first}")
check(ids == {0}, f"one call, index 0: {ids}")
check("".join(frags) == whole_args, f"fragments {''.join(frags)!r} == whole arguments {whole_args!r}")
check(not any("<tool_call>" in t or "</tool_call>" in t for t in content), f"no marker in content: {content}")
check(finish_s == "tool_calls", f"stream finish_reason {finish_s}")

# --- round trip: the call and its result go back in ------------------------------
if msg.tool_calls:
    back = FEW_SHOT + [msg.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "cloudy, 15 C"}]
    r2 = client.chat.completions.create(model=M, messages=back, tools=[WEATHER], temperature=0, max_tokens=40)
    m2 = r2.choices[0].message
    print(f"note: after the result SmolLM2 says {m2.content!r} ({r2.choices[0].finish_reason})")
    check(r2.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"round trip: {r2}")
    check(m2.content is not None or m2.tool_calls, "round trip answers something")
    check(r2.usage.prompt_tokens > r.usage.prompt_tokens, "the result is part of the prompt")

# --- tool_choice --------------------------------------------------------------------
r = client.chat.completions.create(model=M, messages=FEW_SHOT, tools=[WEATHER], tool_choice="none",
                                   temperature=0, max_tokens=30)
check(r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls",
      f"tool_choice none: no calls parsed: {r.choices[0].message}")
# required and a named function are enforced by the grammar (a structural
# tag): every answer is at least one call, of a given function (the named
# one), whose arguments parse and hold the schema's required fields; greedy
# and at temperature 1 with several seeds, a plain question too
def required_fields(name):
    tool = WEATHER if name == "get_weather" else TIME
    return tool["function"]["parameters"].get("required", [])

QUESTIONS = [FEW_SHOT, [{"role": "user", "content": "Hi! How are you?"}]]
for choice in ("required", {"type": "function", "function": {"name": "local_time"}}):
    for msgs in QUESTIONS:
        for temp, seed in ((0, None), (1, 1), (1, 2), (1, 3)):
            r = client.chat.completions.create(model=M, messages=msgs, tools=[WEATHER, TIME], tool_choice=choice,
                                               parallel_tool_calls=False, temperature=temp, seed=seed,
                                               max_tokens=80)
            calls = r.choices[0].message.tool_calls or []
            names = ("local_time",) if isinstance(choice, dict) else ("get_weather", "local_time")
            ok = len(calls) >= 1
            for c in calls:
                try:
                    args = json.loads(c.function.arguments)
                except ValueError:
                    args = None
                ok = ok and c.function.name in names and isinstance(args, dict) and \
                    all(k in args for k in required_fields(c.function.name))
            # greedy: a whole valid call. Sampled: a whole valid call, or the
            # grammar still inside the call when max_tokens ran out (a free
            # string may ramble at T = 1, as with any engine): never a
            # finished answer that is not a valid call
            cut = temp > 0 and r.choices[0].finish_reason == "length" and not calls and \
                (r.choices[0].message.content or "").startswith("<tool_call>")
            if cut:
                print(f"note: tool_choice {choice} T=1 seed={seed}: cut by max_tokens inside the call")
            check((ok and r.choices[0].finish_reason == "tool_calls") or cut,
                  f"tool_choice {choice} T={temp} seed={seed}: a valid call: {r.choices[0]}")
r = client.chat.completions.create(model=M, messages=[{"role": "user", "content": "Hi!"}], tools=[WEATHER],
                                   temperature=0, max_tokens=20)
check(r.choices[0].message.content is not None or r.choices[0].message.tool_calls,
      f"tools given, a plain question: {r.choices[0].message}")

# --- refusals: 400 naming the field ------------------------------------------------
BAD = [
    ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
]
for extra, param in BAD:
    try:
        client.chat.completions.create(model=M, messages=[{"role": "user", "content": "x"}], max_tokens=1,
                                       **{k: v for k, v in extra.items() if k != "parallel_tool_calls"},
                                       extra_body={k: v for k, v in extra.items() if k == "parallel_tool_calls"})
        check(False, f"{extra}: accepted")
    except openai.BadRequestError as e:
        check(e.body and e.body.get("param") == param, f"{extra}: 400 names {param}: {e.body}")
for bad_msgs in ([{"role": "user", "content": "x"}, {"role": "tool", "content": "no id"}],
                 [{"role": "user", "content": "x"},
                  {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                        "function": {"name": "f", "arguments": {"a": 1}}}]}],
                 [{"role": "user", "content": "x", "tool_calls": [call("c", "x")]}]):
    try:
        client.chat.completions.create(model=M, messages=bad_msgs, max_tokens=1)
        check(False, f"{bad_msgs}: accepted")
    except openai.BadRequestError as e:
        check(e.body and e.body.get("param") == "messages", f"{bad_msgs}: 400 names messages: {e.body}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
