#!/usr/bin/env python3
"""The request fields of issue 37 against the real SmolLM2-135M-Instruct
(tests/http/serve.sh starts it beside smol_chat.py), through the official
`openai` package:

  * strict fields: an unknown field gets a 400 naming it (OpenAI's
    "Unrecognized request argument supplied: X", param X) on both
    endpoints, a chat-only field on /v1/completions too; `user`,
    `metadata`, `store`, `service_tier` are accepted;
  * logit_bias: -100 on the greedy first token changes the answer's first
    token; +100 on a token makes every token that one;
  * min_tokens: the greedy answer ends with EOS after n tokens; with
    min_tokens n + 6 it runs past n + 6 (EOS masked until then);
  * stop_token_ids: the greedy answer's third token as a stop id ends it
    there, finish_reason "stop", text the first two tokens';
  * echo (completions): the text is the prompt then what the same request
    without echo returns, whole and streamed; echo with logprobs is a 400.

    smol_api.py BASE_URL MODEL

Greedy answers are compared with the same server's answers without the
option, so nothing here depends on one model's exact words but the
answer ending with EOS well before 40 tokens. Prints "N passed, N failed".
"""
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


MSGS = [{"role": "user", "content": "What is the capital of France?"}]


def chat(max_tokens=40, **extra):
    r = client.chat.completions.create(model=M, messages=MSGS, max_tokens=max_tokens,
                                       temperature=0,
                                       extra_body={"return_token_ids": True, **extra})
    c = r.choices[0]
    return c.message.content, c.model_extra["token_ids"], c.finish_reason, r.usage


def refused(call, param, what):
    try:
        call()
    except openai.BadRequestError as e:
        err = e.body if isinstance(e.body, dict) else {}
        check(e.status_code == 400 and err.get("param") == param,
              f"{what}: 400 naming {param}, got {e.status_code} {err}")
        return err.get("message", "")
    check(False, f"{what}: accepted, want a 400 naming {param}")
    return ""


# --- strict fields ---------------------------------------------------------
msg = refused(lambda: client.chat.completions.create(model=M, messages=MSGS, max_tokens=1,
                                                     extra_body={"foo": 1}), "foo",
              "chat with an unknown field")
check(msg == "Unrecognized request argument supplied: foo", f"OpenAI's message: {msg!r}")
refused(lambda: client.completions.create(model=M, prompt="x", max_tokens=1,
                                          extra_body={"frequency_penaltyy": 1}),
        "frequency_penaltyy", "completions with a misspelt field")
refused(lambda: client.completions.create(model=M, prompt="x", max_tokens=1,
                                          extra_body={"messages": []}),
        "messages", "completions with chat's messages")
refused(lambda: client.chat.completions.create(model=M, messages=MSGS, max_tokens=1,
                                               extra_body={"echo": True}),
        "echo", "chat with completions' echo")
try:
    r = client.chat.completions.create(model=M, messages=MSGS, max_tokens=2, user="u1",
                                       metadata={"k": "v"}, store=False,
                                       extra_body={"service_tier": "auto"})
    check(r.choices[0].finish_reason == "length", "user, metadata, store, service_tier: answered")
except openai.APIError as e:
    check(False, f"user, metadata, store, service_tier refused: {e}")

# --- the plain greedy answer everything below is compared with -------------
text, ids, finish, usage = chat()
print(f"note: greedy answer {text!r} ids {ids} ({finish})")
check(finish == "stop" and 4 <= len(ids) < 30, f"greedy answer ends with EOS early: {finish} {ids}")
eos = ids[-1]

# --- logit_bias -------------------------------------------------------------
t2, ids2, _, _ = chat(max_tokens=8, logit_bias={str(ids[0]): -100})
check(ids2[0] != ids[0], f"logit_bias -100 on {ids[0]}: first token still {ids2[0]}")
forced = 7042 if ids[0] != 7042 else 504  # any token the answer does not start with
t3, ids3, f3, _ = chat(max_tokens=5, logit_bias={str(forced): 100})
check(ids3 == [forced] * 5 and f3 == "length", f"logit_bias +100 on {forced}: got {ids3}")
r = client.chat.completions.create(model=M, messages=MSGS, max_tokens=5, temperature=1, seed=3,
                                   logit_bias={str(forced): 100},
                                   extra_body={"return_token_ids": True})
check(r.choices[0].model_extra["token_ids"] == [forced] * 5,
      f"logit_bias +100 at temperature 1: {r.choices[0].model_extra['token_ids']}")
refused(lambda: chat(logit_bias={"5": 101}), "logit_bias", "logit_bias 101")
refused(lambda: chat(logit_bias={"99999999": 1}), "logit_bias", "logit_bias past the vocabulary")
refused(lambda: chat(logit_bias={"x": 1}), "logit_bias", "logit_bias key not an id")

# --- min_tokens --------------------------------------------------------------
n = len(ids)
t4, ids4, f4, u4 = chat(max_tokens=n + 20, min_tokens=n + 6)
check(len(ids4) > n + 6 or f4 == "length", f"min_tokens {n + 6}: ended after {len(ids4)} ({f4})")
check(eos not in ids4[:n + 6], f"min_tokens {n + 6}: EOS {eos} inside the first {n + 6}: {ids4}")
check(ids4[:n - 1] == ids[:n - 1], f"min_tokens changes nothing before EOS: {ids4[:n - 1]}")
refused(lambda: chat(max_tokens=5, min_tokens=6), "min_tokens", "min_tokens > max_tokens")

# --- stop_token_ids ------------------------------------------------------------
k = next((i for i in range(2, n - 1) if ids[i] not in ids[:i]), None)
check(k is not None, f"a token of the answer not seen before it: {ids}")
if k is not None:
    t5, ids5, f5, u5 = chat(stop_token_ids=[ids[k]])
    check(ids5 == ids[:k + 1] and f5 == "stop",
          f"stop_token_ids [{ids[k]}]: got {ids5} ({f5}), want {ids[:k + 1]} (stop)")
    check(text.startswith(t5) and len(t5) < len(text), f"its text is the answer's start: {t5!r}")
    # min_tokens also holds back a stop id
    t6, ids6, f6, _ = chat(stop_token_ids=[ids[k]], min_tokens=k + 3, logit_bias={str(ids[k]): 5})
    check(ids[k] not in ids6[:k + 3], f"min_tokens masks stop ids too: {ids6}")
refused(lambda: chat(stop_token_ids=[1, 1]), "stop_token_ids", "a repeated stop id")

# --- echo ---------------------------------------------------------------------
P = "The capital of France is"
plain = client.completions.create(model=M, prompt=P, max_tokens=6, temperature=0).choices[0].text
echoed = client.completions.create(model=M, prompt=P, max_tokens=6, temperature=0,
                                   echo=True).choices[0].text
check(echoed == P + plain, f"echo: {echoed!r} == {P!r} + {plain!r}")
parts = [c.choices[0].text for c in client.completions.create(model=M, prompt=P, max_tokens=6,
                                                              temperature=0, echo=True,
                                                              stream=True)]
check(parts[:1] == [P] and "".join(parts) == P + plain, f"echo streamed: {parts}")
refused(lambda: client.completions.create(model=M, prompt=P, max_tokens=2, echo=True, logprobs=1),
        "echo", "echo with logprobs")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
