#!/usr/bin/env python3
"""chat.py -- ask the coordinator one chat question over its OpenAI HTTP API
and print the answer as it streams, token by token, as plain text.

    tools/chat.py [--url http://127.0.0.1:8000] [--model NAME] [--max-tokens N]
                  [--temperature T] [--seed S] [--system TEXT] QUESTION

`make demo` runs it. Python's standard library only (http.client, json):
what any OpenAI client does -- POST /v1/chat/completions with "stream":
true, read the server-sent events, print each delta -- in a page a reader
can check, with nothing to install or build. On stderr at the end: the
finish reason, the token counts, the time to the first token and the
decode rate seen by the client, (completion tokens - 1) / (time from the
first token to the last). Exit 0 when the answer finished (EOS, stop or
length), 1 on any error, 130 on Ctrl-C (closing the connection cancels the
request in the coordinator).
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("question")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the coordinator's --http-bind")
    p.add_argument("--model", help="a served model (default: the coordinator's first)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (reproducible)")
    p.add_argument("--seed", type=int)
    p.add_argument("--system", help="a system message (default: the chat template's own)")
    p.add_argument("--timeout", type=float, default=600, help="seconds without a byte from the server")
    return p.parse_args()


def request_body(a):
    messages = ([{"role": "system", "content": a.system}] if a.system else []) + [
        {"role": "user", "content": a.question}]
    body = {"messages": messages, "max_tokens": a.max_tokens, "temperature": a.temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    if a.model:
        body["model"] = a.model
    if a.seed is not None:
        body["seed"] = a.seed
    return json.dumps(body).encode()


def events(resp):
    """The payloads of the stream's `data:` lines, up to [DONE]."""
    while True:
        line = resp.readline()
        if not line:
            raise ConnectionError("the stream ended before [DONE]")
        line = line.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, comments
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


def main():
    a = parse_args()
    url = urllib.parse.urlsplit(a.url)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=a.timeout)
    t_sent = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", body=request_body(a),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
    except OSError as e:
        sys.exit(f"chat: cannot reach the coordinator at {a.url}: {e}")
    if resp.status != 200:
        text = resp.read().decode(errors="replace")
        try:
            text = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            pass
        sys.exit(f"chat: HTTP {resp.status}: {text}")

    t_first = t_last = None
    finish, usage, pieces = None, None, 0
    for ev in events(resp):
        if "error" in ev:
            sys.exit(f"\nchat: error from the server: {ev['error'].get('message', ev['error'])}")
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            text = ch.get("delta", {}).get("content")
            if text:
                t_last = time.monotonic()
                t_first = t_first or t_last
                pieces += 1
                sys.stdout.write(text)
                sys.stdout.flush()
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
                t_last = time.monotonic()  # an EOS token ends the answer without text
    print(flush=True)
    conn.close()

    if finish is None:
        sys.exit("chat: the stream ended without a finish reason")
    n = usage["completion_tokens"] if usage else pieces
    summary = f"chat: finish {finish}, {n} tokens"
    if usage:
        summary += f" ({usage['prompt_tokens']} in the prompt)"
    if t_first is not None:
        summary += f", first after {t_first - t_sent:.2f} s"
        if n > 1 and t_last > t_first:
            rate = (n - 1) / (t_last - t_first)
            summary += f", decode {rate:.1f} tokens/s ({1000 / rate:.0f} ms/token)"
    print(summary, file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
    except (ConnectionError, OSError, ValueError) as e:
        sys.exit(f"\nchat: {e}")
