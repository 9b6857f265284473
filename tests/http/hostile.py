#!/usr/bin/env python3
"""Hostile HTTP clients against a live coordinator (tests/http/serve.sh
starts it): every bad request gets a clear error or its connection closed,
and the server keeps serving the others.

    hostile.py HOST:PORT IDLE_TIMEOUT_S MAX_BODY_BYTES [SHARDLINE_CLI ZMQ_ENDPOINT]

Raw sockets only (the standard library), so that nothing is fixed up on
the way: malformed JSON, wrong types, out-of-range values, a 10 MB body,
a chunked body past the limit, invalid UTF-8, garbage instead of HTTP,
oversized headers, requests that stall half-way, 1,000 idle connections,
and clients that hang up mid-request (their requests are cancelled: the
coordinator's /metrics shows them cancelled and nothing left running, and
`shardline status` over ZeroMQ, when given, shows the slot and every KV
block free). Prints "N passed, N failed".
"""
import json
import re
import socket
import subprocess
import sys
import threading
import time

ADDR = sys.argv[1]
HOST, PORT = ADDR.rsplit(":", 1)
PORT = int(PORT)
IDLE_S = float(sys.argv[2])
MAX_BODY = int(sys.argv[3])
CLI = sys.argv[4:6] if len(sys.argv) >= 6 else None
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


def connect(timeout=10.0):
    s = socket.create_connection((HOST, PORT), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


LEFT = {}  # socket -> bytes read past the response returned (pipelining)


def read_response(s, timeout=30.0):
    """(status, headers dict, body bytes) of one response; status 0 when the
    connection closed first. Bytes of a next response are kept for the next
    call."""
    s.settimeout(timeout)
    buf = LEFT.pop(s, b"")
    while b"\r\n\r\n" not in buf:
        try:
            d = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            return 0, {}, buf
        if not d:
            return 0, {}, buf
        buf += d
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdr = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdr[k.strip().lower()] = v.strip()
    if "content-length" in hdr:
        n = int(hdr["content-length"])
        while len(body) < n:
            d = s.recv(65536)
            if not d:
                break
            body += d
        body, LEFT[s] = body[:n], body[n:]
    elif hdr.get("transfer-encoding") == "chunked":
        while b"0\r\n\r\n" not in body:
            d = s.recv(65536)
            if not d:
                break
            body += d
        end = body.find(b"0\r\n\r\n")
        if end >= 0:
            body, LEFT[s] = body[:end + 5], body[end + 5:]
    return status, hdr, body


def request(method, path, body=None, headers=None, raw_body=None):
    s = connect()
    data = raw_body if raw_body is not None else (json.dumps(body).encode() if body is not None else b"")
    h = {"Host": ADDR, "Content-Type": "application/json", "Content-Length": str(len(data))}
    h.update(headers or {})
    req = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    try:
        s.sendall(req.encode() + data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    r = read_response(s)
    s.close()
    return r


def error_of(body):
    try:
        e = json.loads(body)["error"]
        return e if isinstance(e, dict) and "message" in e and "type" in e else None
    except (ValueError, KeyError, TypeError):
        return None


def bad(body, param, why, status=400, raw=None):
    st, _, b = request("POST", "/v1/completions", body, raw_body=raw)
    e = error_of(b)
    check(st == status and e is not None and (param is None or e.get("param") == param),
          f"{why}: want {status} naming {param}, got {st} {b[:300]!r}")


def metrics():
    st, _, b = request("GET", "/metrics")
    m = {}
    for ln in b.decode().splitlines():
        if ln and not ln.startswith("#"):
            k, _, v = ln.rpartition(" ")
            m[k] = float(v)
    return m


def served(what):
    """A good request still gets its answer."""
    st, _, b = request("POST", "/v1/completions", {"prompt": "still here", "max_tokens": 2})
    ok = st == 200 and json.loads(b)["choices"][0]["finish_reason"] in ("length", "stop")
    check(ok, f"served after {what}: {st} {b[:200]!r}")


# --- keep-alive: requests one after the other, and pipelined, on one connection ---
s = connect()
for i in range(3):
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    st, h, b = read_response(s)
    check(st in (200, 503) and h.get("connection", "").lower() != "close", f"keep-alive request {i}: {st} {h}")
body = json.dumps({"prompt": "pipelined", "max_tokens": 2}).encode()
post = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body)
s.sendall(post + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
st1, _, b1 = read_response(s)
st2, _, b2 = read_response(s)
check(st1 == 200 and b'"text_completion"' in b1 and st2 == 200 and b'"list"' in b2,
      f"pipelined POST then GET on one connection: {st1} {b1[:80]!r} / {st2} {b2[:80]!r}")
s.close()

# --- bad JSON and bad fields: 400 naming the field ---------------------------
bad(None, None, "malformed JSON", raw=b'{"prompt": "x",')
bad(None, None, "not an object", raw=b'[1, 2, 3]')
bad(None, None, "trailing garbage", raw=b'{"prompt": "x"} xyz')
bad(None, None, "empty body", raw=b'')
bad(None, None, "invalid UTF-8", raw=b'{"prompt": "caf\xe9 \xff\xfe"}')
bad(None, None, "NUL in a string", raw=b'{"prompt": "a\\u0000b"}')
bad(None, None, "lone surrogate escape", raw=b'{"prompt": "\\udc80"}')
bad({"prompt": 5}, "prompt", "prompt of the wrong type")
bad({"prompt": []}, "prompt", "empty prompt array")
bad({"prompt": [[1, 2], "x", 3]}, "prompt", "mixed prompt array")
bad({"prompt": [1, -2]}, "prompt", "negative token id")
bad({"prompt": [1, 2.5]}, "prompt", "fractional token id")
bad({"prompt": [1, 99999999]}, "prompt", "token id past the vocabulary")
bad({"prompt": ""}, "prompt", "empty prompt")
bad({"prompt": "x" * (300 << 10)}, "prompt", "prompt of 300 KiB")
bad({"prompt": "x", "max_tokens": 0}, "max_tokens", "max_tokens 0")
bad({"prompt": "x", "max_tokens": "ten"}, "max_tokens", "max_tokens a string")
bad({"prompt": "x", "max_tokens": 1e30}, "max_tokens", "max_tokens 1e30")
bad({"prompt": "x", "temperature": -1}, "temperature", "temperature -1")
bad({"prompt": "x", "temperature": "hot"}, "temperature", "temperature a string")
bad({"prompt": "x", "top_p": 0}, "top_p", "top_p 0")
bad({"prompt": "x", "top_p": 1.5}, "top_p", "top_p 1.5")
bad({"prompt": "x", "top_k": 10 ** 9}, "top_k", "top_k past the vocabulary")
bad({"prompt": "x", "min_p": 2}, "min_p", "min_p 2")
bad({"prompt": "x", "presence_penalty": 3}, "presence_penalty", "presence_penalty 3")
bad({"prompt": "x", "frequency_penalty": -3}, "frequency_penalty", "frequency_penalty -3")
bad({"prompt": "x", "repetition_penalty": 0}, "repetition_penalty", "repetition_penalty 0")
bad({"prompt": "x", "logprobs": 21}, "logprobs", "logprobs 21")
bad({"prompt": "x", "n": 0}, "n", "n 0")
bad({"prompt": "x", "n": 1000}, "n", "n 1000")
bad({"prompt": "x", "seed": 1.5}, "seed", "fractional seed")
bad({"prompt": "x", "stop": 7}, "stop", "stop a number")
bad({"prompt": "x", "stop": [""]}, "stop", "empty stop string")
bad({"prompt": "x", "stop": ["s"] * 17}, "stop", "17 stop strings")
bad({"prompt": "x", "stream": "yes"}, "stream", "stream a string")
bad({"prompt": "x", "stream_options": {"include_usage": 1}}, "stream_options.include_usage",
    "include_usage a number")
bad({"prompt": "x", "foo": 1}, "foo", "an unknown field")
bad({"prompt": "x", "top_logprobs": 2}, "top_logprobs", "chat's top_logprobs on completions")
bad({"prompt": "x", "echo": True, "logprobs": 1}, "echo", "echo with logprobs")
bad({"prompt": "x", "echo": 1}, "echo", "echo a number")
bad({"prompt": "x", "logit_bias": [5]}, "logit_bias", "logit_bias an array")
bad({"prompt": "x", "logit_bias": {"5": 100.5}}, "logit_bias", "logit_bias 100.5")
bad({"prompt": "x", "logit_bias": {"-1": 1}}, "logit_bias", "logit_bias of a negative id")
bad({"prompt": "x", "logit_bias": {str(i): 1 for i in range(301)}}, "logit_bias", "301 logit_bias entries")
bad({"prompt": "x", "stop_token_ids": [1.5]}, "stop_token_ids", "a fractional stop id")
bad({"prompt": "x", "stop_token_ids": list(range(33))}, "stop_token_ids", "33 stop ids")
bad({"prompt": "x", "min_tokens": -1}, "min_tokens", "min_tokens -1")
bad({"prompt": "x", "max_tokens": 4, "min_tokens": 5}, "min_tokens", "min_tokens past max_tokens")
bad({"prompt": "x", "model": 3}, "model", "model a number")
bad({"prompt": "x", "model": "no-such-model"}, "model", "unknown model", status=404)
st, _, b = request("POST", "/v1/chat/completions", raw_body=b'{"messages": "hi"}')
check(st == 400 and error_of(b), f"chat messages a string: {st} {b[:200]!r}")
st, _, b = request("GET", "/v1/nothing")
check(st == 404 and error_of(b), f"unknown path: {st}")
st, h, b = request("GET", "/v1/completions")
check(st == 405 and "POST" in h.get("allow", "") and error_of(b), f"GET completions: {st} {h}")
served("bad fields")

# --- bodies past the limit ---------------------------------------------------
s = connect()
s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          f"Content-Length: {10 << 20}\r\n\r\n".encode())
st, _, b = read_response(s)
check(st == 413 and error_of(b), f"10 MB Content-Length: want 413 before the body, got {st}")
s.close()
st, _, b = request("POST", "/v1/completions", raw_body=b'{"prompt": "' + b"x" * (10 << 20) + b'"}')
check(st in (0, 413), f"10 MB body sent whole: want 413 or a closed connection, got {st}")
s = connect()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
closed = False
try:
    chunk = b"x" * 65536
    for _ in range((MAX_BODY // len(chunk)) + 4):
        s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    st, _, b = read_response(s, timeout=10)
    closed = st in (0, 413)
except (BrokenPipeError, ConnectionResetError):
    closed = True
check(closed, "a chunked body past the limit closes the connection")
s.close()
served("large bodies")

# --- not HTTP, oversized headers ---------------------------------------------
for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"GET\r\n\r\n", b"POST /v1/completions HTTP/9.9\r\n\r\n",
             b"GET /health HTTP/1.1\r\nBad Header Without Colon\r\n\r\n"):
    s = connect()
    s.sendall(junk)
    st, _, _ = read_response(s, timeout=10)
    check(st in (0, 400, 505), f"junk {junk[:20]!r}: want 400/505 or close, got {st}")
    s.close()
s = connect()
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (256 << 10) + b"\r\n\r\n")
st, _, _ = read_response(s, timeout=10)
check(st in (0, 413, 431), f"256 KiB header: want 413/431 or close, got {st}")
s.close()
served("junk")

# --- slow and partial requests: closed after the idle timeout ------------------
partial = [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":",
           b"GET /health HTTP/1.1\r\nHost: x\r\n"]
socks = []
for p in partial:
    s = connect(timeout=IDLE_S * 4 + 10)
    s.sendall(p)
    socks.append(s)
t0 = time.monotonic()
served("partial requests pending")
for s in socks:
    s.settimeout(IDLE_S * 4 + 10)
    try:
        d = s.recv(4096)
        got = d[:12]
    except (ConnectionResetError, socket.timeout) as e:
        got = repr(e)
    closed_after = time.monotonic() - t0
    check(closed_after < IDLE_S * 4 + 5, f"partial request closed after {closed_after:.1f} s "
          f"(idle timeout {IDLE_S} s): {got!r}")
    s.close()

# --- 1,000 idle connections ------------------------------------------------------
idle = []
try:
    for _ in range(1000):
        idle.append(connect())
except OSError as e:
    print(f"note: opened {len(idle)} idle connections: {e}")
check(len(idle) == 1000, f"1000 idle connections opened ({len(idle)})")
time.sleep(0.5)
served("1000 idle connections")
st, _, b = request("GET", "/health")
check(st in (200, 503), f"/health with 1000 idle connections: {st}")
m = metrics()
check(m.get("shardline_http_connections", 0) >= 1000,
      f"shardline_http_connections {m.get('shardline_http_connections')} >= 1000")
t0 = time.monotonic()
closed = 0
for s in idle:
    s.settimeout(max(0.1, IDLE_S * 4 + 10 - (time.monotonic() - t0)))
    try:
        closed += s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        pass
check(closed == len(idle), f"idle connections closed by the idle timeout: {closed} of {len(idle)}")
for s in idle:
    s.close()
served("idle connections closed")


# --- clients that hang up: their requests are cancelled -------------------------
def running():
    return metrics().get("shardline_requests_running", -1)


def cancelled():
    return metrics().get('shardline_requests_total{model="tiny",finish_reason="cancelled"}', 0)


def status_idle():
    """`shardline status`: nothing active, every group idle with all KV blocks free."""
    if not CLI:
        return True
    out = subprocess.run([CLI[0], "--coordinator", CLI[1], "status"], capture_output=True, text=True,
                         timeout=20).stdout
    groups = [ln.split() for ln in out.splitlines() if ln[:1].isdigit()]
    free = all(g[6] == "0" and g[8] == "0" and g[9].split("/")[0] == g[9].split("/")[1] for g in groups)
    return " 0 active" in out and groups and free


def wait_idle(what):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        m = metrics()
        used = sum(v for k, v in m.items() if k.startswith("shardline_kv_blocks_used"))
        if m.get("shardline_requests_running", -1) == 0 and used == 0 and status_idle():
            return True
        time.sleep(0.1)
    return False


for stream in (True, False):
    before = cancelled()
    s = connect()
    body = json.dumps({"prompt": "a long story", "max_tokens": 200, "stream": stream,
                       "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    if stream:
        s.settimeout(10)
        got = s.recv(4096)
        check(b"200 OK" in got, f"stream started: {got[:60]!r}")
    else:
        time.sleep(0.3)
    check(running() >= 1, f"request running before the hang-up (stream={stream})")
    s.close()
    ok = wait_idle(f"hang-up (stream={stream})")
    check(ok, f"nothing running and no KV block used after the hang-up (stream={stream})")
    check(cancelled() == before + 1, f"hang-up counted as cancelled (stream={stream}): "
          f"{before} -> {cancelled()}")
served("hang-ups")

# --- many bad clients at once, a good one in the middle ---------------------------
errs = []


def flood(i):
    try:
        st, _, b = request("POST", "/v1/completions", raw_body=b'{"prompt": ' + str(i).encode())
        if st != 400:
            errs.append(st)
    except OSError as e:
        errs.append(repr(e))


ts = [threading.Thread(target=flood, args=(i,)) for i in range(200)]
for t in ts:
    t.start()
served("a flood of bad requests")
for t in ts:
    t.join()
check(not errs, f"every flooded bad request got 400: {errs[:5]}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
