#!/usr/bin/env python3
"""Two small Redis clients for bench/tcp/run.sh, raw sockets and RESP, no packages needed.

rate: a fixed-rate (open-model) client. Requests are due on a fixed timetable (t0 + i / rate), spread round-robin
over C connections (a connection with a reply outstanding gets the next request pipelined behind it), and each
latency is measured from the request's intended send time, so a client or server that falls behind is charged
for the wait (no coordinated omission). The loop spins (it owns its CPU) so sends leave within a few
microseconds of their slot.

    redis_client.py rate --port P --rate 10000 --seconds 10 [--connections 8] [--warmup 1] [--cmd get|ping]

Prints one line: "sent N answered A p50_us X p90_us X p99_us X p999_us X max_us X lag_p99_us X", where lag is
how late the client itself sent (actual - intended send time), to show the client kept its timetable. Exit 1
if any reply is missing or is not the expected one.

idle: opens N connections to PORT, makes each one proxied end to end (with --ping, one PING round trip on each;
without, a check that the upstream has accepted N connections via Redis's INFO on --redis), leaves them idle,
and reports the RSS growth of process PID per connection.

    redis_client.py idle --pid PID --port P --connections N --redis RPORT [--ping] [--settle 2]

Prints one line: "connections N base_kb B held_kb H per_conn_bytes P upstream_clients U".
"""

import argparse
import socket
import sys
import time
from collections import deque
from select import POLLERR, POLLHUP, POLLIN, poll, select

KEY = b"bench:tcp:key"
VALUE = b"v" * 16


def resp(*parts):
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


def call(sock, request, expect):
    sock.sendall(request)
    got = b""
    while len(got) < len(expect):
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("connection closed")
        got += chunk
    if got != expect:
        raise RuntimeError(f"unexpected reply {got!r}, wanted {expect!r}")


def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(p / 100.0 * len(sorted_values)))
    return sorted_values[i]


def rate_mode(a):
    if a.cmd == "get":
        request = resp(b"GET", KEY)
        reply = b"$%d\r\n%s\r\n" % (len(VALUE), VALUE)
    else:
        request = resp(b"PING")
        reply = b"+PONG\r\n"
    socks = []
    for _ in range(a.connections):
        s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if a.cmd == "get" and not socks:
            call(s, resp(b"SET", KEY, VALUE), b"+OK\r\n")
        call(s, request, reply)  # the connection works end to end before the clock starts
        s.setblocking(False)
        socks.append(s)
    pending = [deque() for _ in socks]  # intended send times of the requests awaiting a reply, per connection
    partial = [b""] * len(socks)
    fd_index = {s.fileno(): i for i, s in enumerate(socks)}
    total = int(a.rate * a.seconds)
    warm = int(a.rate * a.warmup)
    interval_ns = int(1e9 / a.rate)
    lat = []
    lag = []
    answered = 0
    clock = time.perf_counter_ns
    t0 = clock() + 10_000_000
    nxt = 0
    deadline = t0 + int((a.seconds + 5) * 1e9)
    while answered < total:
        now = clock()
        if now > deadline:
            break
        while nxt < total and now >= t0 + nxt * interval_ns:
            i = nxt % len(socks)
            intended = t0 + nxt * interval_ns
            try:
                socks[i].send(request)  # a few dozen bytes always fit in the socket buffer
            except BlockingIOError:
                print("send buffer full", file=sys.stderr)
                return 1
            if nxt >= warm:
                lag.append(clock() - intended)
            pending[i].append((nxt, intended))
            nxt += 1
            now = clock()
        readable, _, _ = select(socks, [], [], 0)
        if not readable:
            continue
        now = clock()
        for s in readable:
            i = fd_index[s.fileno()]
            data = s.recv(65536)
            if not data:
                print("connection closed by the server", file=sys.stderr)
                return 1
            buf = partial[i] + data
            n = len(buf) // len(reply)
            if buf[: n * len(reply)] != reply * n:
                print(f"unexpected reply {buf[:64]!r}", file=sys.stderr)
                return 1
            partial[i] = buf[n * len(reply):]
            for _ in range(n):
                seq, intended = pending[i].popleft()
                if seq >= warm:
                    lat.append(now - intended)
                answered += 1
    for s in socks:
        s.close()
    lat.sort()
    lag.sort()
    us = lambda ns: ns / 1000.0
    print(
        f"sent {nxt} answered {answered} p50_us {us(pct(lat, 50)):.1f} p90_us {us(pct(lat, 90)):.1f} "
        f"p99_us {us(pct(lat, 99)):.1f} p999_us {us(pct(lat, 99.9)):.1f} max_us {us(lat[-1] if lat else 0):.1f} "
        f"lag_p99_us {us(pct(lag, 99)):.1f}"
    )
    return 0 if answered == total else 1


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def connected_clients(redis_port):
    s = socket.create_connection(("127.0.0.1", redis_port), timeout=10)
    s.sendall(resp(b"INFO", b"clients"))
    data = b""
    while b"\r\n" not in data:
        data += s.recv(65536)
    size = int(data[1 : data.index(b"\r\n")])
    while len(data) < data.index(b"\r\n") + 2 + size:
        data += s.recv(65536)
    s.close()
    for line in data.decode().splitlines():
        if line.startswith("connected_clients:"):
            return int(line.split(":")[1]) - 1  # not this one
    raise RuntimeError("no connected_clients")


def idle_mode(a):
    time.sleep(a.settle)
    base = rss_kb(a.pid)
    before = connected_clients(a.redis)
    socks = []
    for _ in range(a.connections):
        s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
        if a.ping:
            call(s, resp(b"PING"), b"+PONG\r\n")
        socks.append(s)
    deadline = time.monotonic() + a.timeout
    while True:
        upstream = connected_clients(a.redis) - before
        if upstream >= a.connections:
            break
        if time.monotonic() > deadline:
            print(f"only {upstream} of {a.connections} connections reached Redis after {a.timeout}s", file=sys.stderr)
            return 1
        time.sleep(0.2)
    time.sleep(a.settle)
    held = rss_kb(a.pid)
    # Every connection must still be open and silent.
    poller = poll()
    for s in socks:
        poller.register(s, POLLIN | POLLHUP | POLLERR)
    readable = poller.poll(0)
    for s in socks:
        s.close()
    per = (held - base) * 1024 / a.connections
    print(
        f"connections {a.connections} base_kb {base} held_kb {held} per_conn_bytes {per:.0f} "
        f"upstream_clients {upstream} readable {len(readable)}"
    )
    return 1 if readable else 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("rate")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--rate", type=float, required=True)
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--connections", type=int, default=8)
    r.add_argument("--warmup", type=float, default=1.0, help="seconds at the start left out of the figures")
    r.add_argument("--cmd", choices=["get", "ping"], default="get")
    i = sub.add_parser("idle")
    i.add_argument("--pid", type=int, required=True)
    i.add_argument("--port", type=int, required=True)
    i.add_argument("--redis", type=int, required=True)
    i.add_argument("--connections", type=int, required=True)
    i.add_argument("--ping", action="store_true")
    i.add_argument("--settle", type=float, default=2.0)
    i.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args()
    return rate_mode(a) if a.mode == "rate" else idle_mode(a)


if __name__ == "__main__":
    sys.exit(main())
