#!/usr/bin/env python3
"""Chat against the real SmolLM2-135M-Instruct (a GGUF served by a CPU node
group; tests/http/serve.sh starts it when build/models has the file): the
coordinator takes the chat template, the BOS/EOS strings and the stop
tokens from the GGUF itself.

    smol_chat.py BASE_URL MODEL PROMPT_TOKENS

PROMPT_TOKENS: what the driver counted for the ChatML text below with
shardline-tok (the template's own text, special tokens recognised, no
BOS added), so the prompt must be exactly that conversation rendered by
SmolLM2's template. Checks greedy answers that a 135M instruct model gets
right, that it stops at its turn end (<|im_end|>: finish_reason "stop"),
and that streaming gives the same text. Prints "N passed, N failed".
"""
import sys

import openai

BASE, M, WANT_PROMPT = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = openai.OpenAI(base_url=BASE, api_key="none", max_retries=0, timeout=300)
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


# rendered by SmolLM2's template, which adds its default system turn, as
# (the driver counts its tokens):
# <|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n
# <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n
# transformers 5.23.0 (fp32, the same GGUF dequantized) answers it greedily with
# "The capital of France is Paris.<|im_end|>".
msgs = [{"role": "user", "content": "What is the capital of France?"}]
r = client.chat.completions.create(model=M, messages=msgs, max_tokens=48, temperature=0)
text = r.choices[0].message.content
print(f"note: SmolLM2 says: {text!r} ({r.choices[0].finish_reason}, {r.usage})")
check(text == "The capital of France is Paris.", f"transformers' greedy answer: {text!r}")
check(r.choices[0].finish_reason == "stop", f"stops at <|im_end|>: {r.choices[0].finish_reason}")
check(r.usage.prompt_tokens == WANT_PROMPT,
      f"prompt tokens {r.usage.prompt_tokens} == {WANT_PROMPT} (the GGUF's template, no added BOS)")
parts = []
for ch in client.chat.completions.create(model=M, messages=msgs, max_tokens=48, temperature=0,
                                         stream=True):
    for c in ch.choices:
        parts.append(c.delta.content or "")
check("".join(parts) == text, f"streamed == whole: {''.join(parts)!r}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
