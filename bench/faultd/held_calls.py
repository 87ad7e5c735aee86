#!/usr/bin/env python3
"""Holds N hung calls at a server on 127.0.0.1 and reports the server's RSS growth per held call.

Used by bench/faultd/run.sh (benchmark c). The client runs in its own process so that only the server's memory
is measured. Each call is one connection with one complete HTTP/1.1 GET; the server is expected to never answer.

    held_calls.py --pid PID --port PORT --calls N [--control CPORT] [--path /hang/1] [--settle 2]

Prints one line: "calls N base_kb B held_kb H per_call_bytes P confirmed C", where confirmed is faultd's own
faultd_in_flight sum read from its control API (or "-" without --control). Exit 1 if the server answered or closed
any held call, or did not confirm all N in flight within the timeout.
"""

import argparse
import select
import socket
import sys
import time
import urllib.request


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def in_flight(control_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{control_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("faultd_in_flight{"):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--control", type=int)
    p.add_argument("--path", default="/hang/1")
    p.add_argument("--settle", type=float, default=2.0, help="seconds to wait before reading RSS")
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args()

    request = f"GET {a.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: held-calls\r\n\r\n".encode()
    time.sleep(a.settle)
    base = rss_kb(a.pid)
    socks = []
    for _ in range(a.calls):
        s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
        s.sendall(request)
        socks.append(s)
    deadline = time.monotonic() + a.timeout
    confirmed = "-"
    if a.control:
        while True:
            n = in_flight(a.control)
            if n >= a.calls:
                confirmed = str(n)
                break
            if time.monotonic() > deadline:
                print(f"only {n} of {a.calls} calls in flight after {a.timeout}s", file=sys.stderr)
                return 1
            time.sleep(0.2)
    time.sleep(a.settle)
    held = rss_kb(a.pid)
    # Nothing may have been answered or closed: a held call has nothing to read.
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
    answered = len(poller.poll(0))
    for s in socks:
        s.close()
    per_call = (held - base) * 1024 / a.calls
    print(f"calls {a.calls} base_kb {base} held_kb {held} per_call_bytes {per_call:.0f} confirmed {confirmed} answered {answered}")
    return 1 if answered else 0


if __name__ == "__main__":
    sys.exit(main())
