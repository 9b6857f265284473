#!/usr/bin/env python3
"""A bounded slowloris against a live coordinator (tests/http/security.sh
starts it), over loopback only: normal requests must keep being answered.

    slowloris.py HOST:PORT MAX_CONNECTIONS REQUEST_TIMEOUT_S [NORMAL_REQUESTS]

2 x MAX_CONNECTIONS connections each send a request line and then one more
header byte every 0.5 s (well inside the idle timeout, so that alone never
closes them); one the server closes is opened again, at most
20 x MAX_CONNECTIONS times in all. Meanwhile NORMAL_REQUESTS (default 200)
plain requests, one after the other, each with 10 s to be answered: at
least 99 % must be. Then, the attack stopped: the server's connection count
falls back (closed connections are released), and a single trickling
connection, below the limit, is closed by the whole-request deadline
although it never goes idle. Everything stops by itself within about 3
minutes. Prints "N passed, N failed".
"""
import json
import selectors
import socket
import sys
import threading
import time

HOST, PORT = sys.argv[1].rsplit(":", 1)
PORT = int(PORT)
MAXCONN = int(sys.argv[2])
DEADLINE_S = float(sys.argv[3])
NORMAL = int(sys.argv[4]) if len(sys.argv) > 4 else 200
TRICKLE_S = 0.5
ATTACK_LIMIT_S = 120  # the attack ends by then whatever happens
assert HOST in ("127.0.0.1", "localhost", "::1"), "loopback only"
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


def answered(method, path, body=None, timeout=10.0):
    """The status of one request on its own connection; 0: no answer in time."""
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    t_end = time.monotonic() + timeout
    try:
        s = socket.create_connection((HOST, PORT), timeout=timeout)
        s.sendall(head.encode() + data)
        buf = b""
        while b"\r\n" not in buf and time.monotonic() < t_end:
            s.settimeout(max(0.01, t_end - time.monotonic()))
            d = s.recv(4096)
            if not d:
                break
            buf += d
        s.close()
        return int(buf.split()[1]) if buf.startswith(b"HTTP/1.") else 0
    except (OSError, ValueError, IndexError):
        return 0


class Attack:
    """The slow connections, driven from one thread with a selector."""

    def __init__(self, n):
        self.n = n
        self.opened = 0
        self.closed_by_server = 0
        self.budget = 20 * MAXCONN
        self.stop = threading.Event()
        self.sel = selectors.DefaultSelector()
        self.socks = {}  # socket -> time of its next byte

    def open_one(self):
        if self.opened >= self.budget:
            return
        s = socket.socket(socket.AF_INET6 if ":" in HOST else socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((HOST, PORT))
        self.opened += 1
        self.socks[s] = 0.0
        self.sel.register(s, selectors.EVENT_READ)

    def drop(self, s):
        self.sel.unregister(s)
        del self.socks[s]
        s.close()

    def run(self):
        for _ in range(self.n):
            self.open_one()
        t_end = time.monotonic() + ATTACK_LIMIT_S
        while not self.stop.is_set() and time.monotonic() < t_end:
            for key, _ in self.sel.select(timeout=0.05):
                s = key.fileobj
                try:
                    gone = s.recv(4096) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    self.closed_by_server += 1
                    self.drop(s)
                    self.open_one()
            now = time.monotonic()
            for s, due in list(self.socks.items()):
                if now < due:
                    continue
                try:
                    s.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-a: " if due == 0.0 else b"a")
                    self.socks[s] = now + TRICKLE_S
                except BlockingIOError:
                    self.socks[s] = now + 0.05  # not connected yet (waits in the backlog)
                except OSError:
                    self.closed_by_server += 1
                    self.drop(s)
                    self.open_one()
        for s in list(self.socks):
            self.drop(s)


def connections():
    """shardline_http_connections from /metrics; -1: no answer."""
    try:
        s = socket.create_connection((HOST, PORT), timeout=10)
        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        buf = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
        s.close()
        for ln in buf.decode("latin-1").splitlines():
            if ln.startswith("shardline_http_connections "):
                return float(ln.split()[1])
    except OSError:
        pass
    return -1


# --- the attack, and normal clients during it ---------------------------------
attack = Attack(2 * MAXCONN)
th = threading.Thread(target=attack.run, daemon=True)
th.start()
time.sleep(2 * TRICKLE_S + 1)  # every slow connection is open and trickling
statuses = []
for i in range(NORMAL):
    # GET a listing, and a POST whose JSON is refused: neither needs a node group
    if i % 2:
        statuses.append(answered("GET", "/v1/models"))
    else:
        statuses.append(answered("POST", "/v1/completions", {"prompt": "x", "max_tokens": -1}))
attack.stop.set()
th.join(timeout=30)
good = sum(1 for i, st in enumerate(statuses) if st == (200 if i % 2 else 400))
print(f"slowloris: {good}/{NORMAL} normal requests answered under {2 * MAXCONN} slow connections "
      f"(limit {MAXCONN}); {attack.opened} slow connections opened, {attack.closed_by_server} "
      f"closed by the server")
check(good * 100 >= 99 * NORMAL, f"at least 99% answered: {good} of {NORMAL} "
      f"(statuses seen: {sorted(set(statuses))})")
check(attack.closed_by_server > 0, "the server closed slow connections")

# --- closed connections are released --------------------------------------------
t0 = time.monotonic()
n = connections()
while n > 2 and time.monotonic() - t0 < 30:
    time.sleep(0.2)
    n = connections()
check(0 <= n <= 2, f"connections released after the attack: shardline_http_connections {n}")

# --- one slow connection below the limit: the deadline, not the limit, ends it ---
s = socket.create_connection((HOST, PORT), timeout=5)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
t0 = time.monotonic()
closed = False
while not closed and time.monotonic() - t0 < DEADLINE_S * 4 + 10:
    try:
        s.send(b"X-b: 1\r\n")
        s.settimeout(TRICKLE_S)
        closed = s.recv(4096) == b""
    except socket.timeout:
        pass
    except OSError:
        closed = True
s.close()
print(f"slowloris: a lone trickling connection was {'closed' if closed else 'NOT closed'} "
      f"after {time.monotonic() - t0:.1f} s (deadline {DEADLINE_S} s)")
check(closed, f"a connection trickling headers is closed by the {DEADLINE_S} s deadline")
check(answered("GET", "/v1/models") == 200, "served after the attack")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
