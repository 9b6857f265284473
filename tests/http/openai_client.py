#!/usr/bin/env python3
"""The official `openai` package (pinned by tools/install-deps.sh) against a
live coordinator (tests/http/serve.sh starts it with the tiny random model).

    openai_client.py BASE_URL MODEL TOKENIZER_JSON [--chat CHAT_KIND]
                     [--concurrent N] [--key KEY]

Checks completions and chat, streaming and not, stop strings, seed
reproducibility (and how n=2 derives its seeds), logprobs, the penalties,
usage counts (the prompt's tokens counted with the `tokenizers` library:
no doubled BOS in chat), errors as the SDK's exception classes, and N
concurrent streaming chat clients (AsyncOpenAI) each receiving exactly the
text of the same request sent alone. CHAT_KIND names the chat template
the coordinator was given (tests/http/llama2-chat.jinja: "llama2"), so
the expected prompt can be written out here. Prints "N passed, N failed".
"""
import argparse
import asyncio
import sys

import openai
from tokenizers import Tokenizer

ap = argparse.ArgumentParser()
ap.add_argument("base_url")
ap.add_argument("model")
ap.add_argument("tokenizer")
ap.add_argument("--chat", default="")
ap.add_argument("--concurrent", type=int, default=64)
ap.add_argument("--key", default="none")
args = ap.parse_args()
M = args.model
tok = Tokenizer.from_file(args.tokenizer)
client = openai.OpenAI(base_url=args.base_url, api_key=args.key, max_retries=0, timeout=120)
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


def n_prompt_tokens(text, special=True):
    return len(tok.encode(text, add_special_tokens=special).ids)


# --- models ------------------------------------------------------------------
ids = [m.id for m in client.models.list().data]
check(M in ids, f"/v1/models lists {M}: {ids}")
check(client.models.retrieve(M).id == M, "/v1/models/{id}")

# --- completions, not streamed and streamed --------------------------------------
P = "The quick brown fox jumps over the lazy dog"
r = client.completions.create(model=M, prompt=P, max_tokens=16, temperature=0,
                              extra_body={"ignore_eos": True})
whole = r.choices[0].text
check(r.object == "text_completion" and r.choices[0].finish_reason == "length",
      f"completion finish {r.choices[0].finish_reason}")
check(r.usage.completion_tokens == 16, f"usage.completion_tokens {r.usage.completion_tokens} == 16")
check(r.usage.prompt_tokens == n_prompt_tokens(P),
      f"usage.prompt_tokens {r.usage.prompt_tokens} == tokenizer's {n_prompt_tokens(P)} (BOS included)")
check(r.usage.total_tokens == r.usage.prompt_tokens + 16, "usage.total_tokens")
parts, finish, usage, indexes = [], None, None, set()
for ch in client.completions.create(model=M, prompt=P, max_tokens=16, temperature=0, stream=True,
                                    stream_options={"include_usage": True},
                                    extra_body={"ignore_eos": True}):
    if ch.usage:
        usage = ch.usage
    for c in ch.choices:
        indexes.add(c.index)
        parts.append(c.text)
        finish = c.finish_reason or finish
check("".join(parts) == whole, f"streamed text == whole text: {''.join(parts)!r} vs {whole!r}")
check(finish == "length" and indexes == {0}, f"stream finish {finish}, indexes {indexes}")
check(usage is not None and usage.completion_tokens == 16, f"include_usage: {usage}")

r = client.completions.create(model=M, prompt=[[1, 15, 200, 300], "Hello"], max_tokens=4,
                              temperature=0)
check(len(r.choices) == 2 and [c.index for c in r.choices] == [0, 1], "two prompts, two choices")
check(r.usage.prompt_tokens == 4 + n_prompt_tokens("Hello"), f"two prompts' usage {r.usage}")

# --- stop strings ----------------------------------------------------------------
if len(whole) > 6:
    stop = whole[3:6]
    r = client.completions.create(model=M, prompt=P, max_tokens=16, temperature=0, stop=[stop, "\x01"],
                                  extra_body={"ignore_eos": True})
    t = r.choices[0].text
    check(r.choices[0].finish_reason == "stop" and stop not in t and whole.startswith(t),
          f"stop {stop!r}: {t!r} ({r.choices[0].finish_reason})")
    parts = [c.choices[0].text for c in client.completions.create(
        model=M, prompt=P, max_tokens=16, temperature=0, stop=stop, stream=True,
        extra_body={"ignore_eos": True}) if c.choices]
    check("".join(parts) == t, f"streamed stop: {''.join(parts)!r} vs {t!r}")
else:
    check(False, f"greedy text too short to pick a stop string: {whole!r}")


# --- seeds -------------------------------------------------------------------------
def sample(seed, n=1, prompt=P):
    r = client.completions.create(model=M, prompt=prompt, max_tokens=12, temperature=1.0, seed=seed,
                                  n=n, extra_body={"ignore_eos": True})
    return [c.text for c in r.choices]


a, b = sample(42), sample(42)
check(a == b, f"seed 42 twice: {a} vs {b}")
others = [sample(s)[0] for s in (43, 44, 45)]
check(any(o != a[0] for o in others), "other seeds give other text")
two = sample(42, n=2)
check(len(two) == 2 and two[0] == a[0] and two[1] == sample(43)[0],
      f"n=2 with seed 42: choice j == seed 42 + j alone: {two}")

# --- log-probs and penalties ---------------------------------------------------------
r = client.completions.create(model=M, prompt=P, max_tokens=6, temperature=0, logprobs=3,
                              extra_body={"ignore_eos": True})
lp = r.choices[0].logprobs
ok = lp is not None and len(lp.tokens) == 6 and len(lp.token_logprobs) == 6 and \
    all(len(d) <= 3 for d in lp.top_logprobs) and len(lp.text_offset) == 6
check(ok, f"completions logprobs=3: {lp}")
if ok:
    check(all(t <= 0 for t in lp.token_logprobs), "log-probs <= 0")
    # greedy: the chosen token is the most likely alternative
    check(all(abs(t - max(d.values())) < 1e-4 for t, d in zip(lp.token_logprobs, lp.top_logprobs) if d),
          "greedy picks the top log-prob")
    check("".join(lp.tokens) == r.choices[0].text, f"tokens join to the text: {lp.tokens}")
parts = []
for ch in client.completions.create(model=M, prompt=P, max_tokens=6, temperature=0, logprobs=0,
                                    stream=True, extra_body={"ignore_eos": True}):
    for c in ch.choices:
        if c.logprobs:
            parts += c.logprobs.token_logprobs
check(len(parts) == 6, f"streamed logprobs=0: one log-prob per token: {parts}")


def greedy_ids(**kw):
    extra = {"ignore_eos": True, "return_token_ids": True, **kw.pop("extra", {})}
    r = client.completions.create(model=M, prompt=P, max_tokens=24, temperature=0, extra_body=extra, **kw)
    return (r.choices[0].model_extra or {}).get("token_ids") or []


base = greedy_ids()
check(len(base) == 24, f"return_token_ids: {len(base)} ids")
for kw in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}, {"extra": {"repetition_penalty": 10.0}}):
    got = greedy_ids(**dict(kw))
    rep = len(got) - len(set(got))
    check(len(got) == 24 and rep <= len(base) - len(set(base)),
          f"{kw}: {rep} repeats vs {len(base) - len(set(base))} without")
    if len(base) != len(set(base)):
        check(got != base, f"{kw} changes a greedy text that repeats itself")
r = client.completions.create(model=M, prompt=P, max_tokens=8, temperature=0.7, seed=1,
                              extra_body={"min_p": 0.05, "top_k": 40})
check(r.choices[0].finish_reason in ("length", "stop"), "min_p and top_k accepted")

# --- errors as the SDK sees them ---------------------------------------------------------
for kw, cls, param in (({"temperature": -1}, openai.BadRequestError, "temperature"),
                       ({"model": "nope"}, openai.NotFoundError, "model"),
                       ({"max_tokens": 0}, openai.BadRequestError, "max_tokens")):
    try:
        client.completions.create(**{"model": M, "prompt": P, **kw})
        check(False, f"{kw} accepted")
    except cls as e:
        check(e.body and e.body.get("param") == param, f"{kw}: param {e.body}")
    except openai.APIError as e:
        check(False, f"{kw}: {type(e).__name__} {e}")

# --- chat --------------------------------------------------------------------------------
if args.chat:
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello there"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": [{"type": "text", "text": "Tell me"},
                                         {"type": "text", "text": "a story."}]}]
    r = client.chat.completions.create(model=M, messages=msgs, max_tokens=12, temperature=0,
                                       extra_body={"ignore_eos": True})
    c0 = r.choices[0]
    check(r.object == "chat.completion" and c0.message.role == "assistant" and
          c0.finish_reason == "length", f"chat completion: {r}")
    if args.chat == "llama2":  # tests/http/llama2-chat.jinja, written out
        text = ("<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello there [/INST] Hi.</s>"
                "<s>[INST] Tell me\na story. [/INST]")
        want = n_prompt_tokens(text, special=False)
        check(r.usage.prompt_tokens == want,
              f"chat prompt tokens {r.usage.prompt_tokens} == {want} (template BOS only, no doubled BOS)")
    roles, parts, finish = [], [], None
    for ch in client.chat.completions.create(model=M, messages=msgs, max_tokens=12, temperature=0,
                                             stream=True, extra_body={"ignore_eos": True}):
        for c in ch.choices:
            if c.delta.role:
                roles.append((len(parts), c.delta.role))
            if c.delta.content:
                parts.append(c.delta.content)
            finish = c.finish_reason or finish
    check(roles == [(0, "assistant")], f"the role comes first, once: {roles}")
    check("".join(parts) == c0.message.content, f"streamed chat == whole: {''.join(parts)!r}")
    check(finish == "length", f"chat stream finish {finish}")
    r = client.chat.completions.create(model=M, messages=msgs, max_tokens=4, temperature=0, logprobs=True,
                                       top_logprobs=2, extra_body={"ignore_eos": True})
    lc = r.choices[0].logprobs
    check(lc is not None and len(lc.content) == 4 and all(len(t.top_logprobs) == 2 for t in lc.content),
          f"chat logprobs: {lc}")
    r = client.chat.completions.create(model=M, messages=msgs, max_tokens=6, temperature=1, seed=7, n=2)
    check(len(r.choices) == 2, "chat n=2")
    try:
        client.chat.completions.create(model=M, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}])
        check(False, "an image part was accepted")
    except openai.BadRequestError as e:
        check("messages" in str(e.body.get("param")), f"image part: {e.body}")

    # N concurrent streaming chat clients == each alone
    def convo(i):
        return [{"role": "user", "content": f"Request {i}: tell me about the number {i * 7}."}]

    alone = []
    for i in range(args.concurrent):
        r = client.chat.completions.create(model=M, messages=convo(i), max_tokens=16, temperature=0.8,
                                           seed=i, extra_body={"ignore_eos": True})
        alone.append(r.choices[0].message.content)

    async def one(ac, i):
        parts = []
        stream = await ac.chat.completions.create(model=M, messages=convo(i), max_tokens=16,
                                                  temperature=0.8, seed=i, stream=True,
                                                  extra_body={"ignore_eos": True})
        async for ch in stream:
            for c in ch.choices:
                parts.append(c.delta.content or "")
        return "".join(parts)

    async def all_at_once():
        ac = openai.AsyncOpenAI(base_url=args.base_url, api_key=args.key, max_retries=0, timeout=300)
        try:
            return await asyncio.gather(*(one(ac, i) for i in range(args.concurrent)))
        finally:
            await ac.close()

    together = asyncio.run(all_at_once())
    diff = [i for i in range(args.concurrent) if together[i] != alone[i]]
    check(not diff, f"{args.concurrent} concurrent streams == alone; differ: {diff[:5]} "
          f"{[(alone[i], together[i]) for i in diff[:2]]}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
