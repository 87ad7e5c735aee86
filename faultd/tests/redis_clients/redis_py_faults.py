"""redis-py through a faultd Redis route: each injected error raises the exception a real server's error raises,
pipelines and MULTI/EXEC keep their order, RESP3 push messages pass between replies, a delay holds a reply, a hang
and a close end as they would against a sick server, and the bytes of untouched commands are those the server
sends. Arguments: faultd's port, then the server's own port. Prints `ok: ...` per check and `ok: done` at the end;
any failed check raises."""

import socket
import sys
import time

import redis
from redis import exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

via_port, direct_port = int(sys.argv[1]), int(sys.argv[2])
# redis-py retries some errors (-LOADING, timeouts) by default; each check here wants the first answer.
NO_RETRY = Retry(NoBackoff(), 0)
via = redis.Redis(host="127.0.0.1", port=via_port, socket_timeout=5, retry=NO_RETRY)
direct = redis.Redis(host="127.0.0.1", port=direct_port, socket_timeout=5)
direct.flushall()


def raises(kind, call):
    try:
        call()
    except kind as e:
        return e
    raise AssertionError(f"expected {kind.__name__}")


# The SET an -OOM entry takes is answered by faultd and never written.
# redis-py raises OutOfMemoryError (a ResponseError) for -OOM, with the text after the word.
e = raises(exceptions.OutOfMemoryError, lambda: via.set("cart:1", "x"))
assert isinstance(e, exceptions.ResponseError) and "command not allowed" in str(e), e
assert direct.get("cart:1") is None, "the SET reached the server"
assert via.set("user:1", "x") is True and direct.get("user:1") == b"x"
print("ok: -OOM raised", type(e).__name__, "and the key was not written")

e = raises(exceptions.BusyLoadingError, lambda: via.get("loading:1"))
print("ok: -LOADING raised BusyLoadingError")
e = raises(exceptions.ReadOnlyError, lambda: via.delete("ro:1"))
print("ok: -READONLY raised ReadOnlyError")

# A pipeline keeps its order around the commands faultd answers itself; every second INCR of n:* fails.
p = via.pipeline(transaction=False)
p.set("a", "1")
p.set("cart:2", "y")
p.get("a")
# redis-py's incr() sends INCRBY; the entry matches INCR.
p.execute_command("INCR", "n:1")
p.execute_command("INCR", "n:1")
p.execute_command("INCR", "n:1")
p.get("missing")
got = p.execute(raise_on_error=False)
assert got[0] is True and got[2] == b"1" and got[6] is None, got
assert isinstance(got[1], exceptions.OutOfMemoryError), got
assert got[3] == 1 and isinstance(got[4], exceptions.ResponseError) and got[5] == 2, got
assert direct.get("n:1") == b"2", "the failed INCR reached the server"
print("ok: a pipeline of 7 kept its order:", [type(x).__name__ for x in got])

# MULTI/EXEC: +QUEUED per command, then EXEC's array.
t = via.pipeline(transaction=True)
t.set("t", "1")
t.get("t")
t.incr("t")
t.lpush("l", "a", "b")
assert t.execute() == [True, b"1", 2, 2]
print("ok: MULTI/EXEC answered in order")

# Untouched commands: the same bytes through faultd as from the server itself.
SCRIPT = (
    b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\nhello\r\n"
    b"*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n"
    b"*5\r\n$5\r\nRPUSH\r\n$2\r\nk2\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    b"*4\r\n$6\r\nLRANGE\r\n$2\r\nk2\r\n$1\r\n0\r\n$2\r\n-1\r\n"
    b"*4\r\n$4\r\nHSET\r\n$2\r\nk3\r\n$1\r\nf\r\n$1\r\nv\r\n"
    b"*2\r\n$7\r\nHGETALL\r\n$2\r\nk3\r\n"
    b"*2\r\n$4\r\nINCR\r\n$2\r\nk1\r\n"
    b"*1\r\n$5\r\nMULTI\r\n*2\r\n$4\r\nINCR\r\n$2\r\nk4\r\n*1\r\n$4\r\nEXEC\r\n"
    b"ECHO inline\r\n"
    b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"
)


def raw(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(SCRIPT + b"*1\r\n$4\r\nQUIT\r\n")
        answer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return answer
            answer += chunk


for key in (b"k1", b"k2", b"k3", b"k4"):
    direct.delete(key)
through = raw(via_port)
for key in (b"k1", b"k2", b"k3", b"k4"):
    direct.delete(key)
assert through == raw(direct_port), through
print(f"ok: {len(through)} bytes of replies identical through faultd")

# RESP3: push messages (client-side caching invalidations) between replies do not break the pairing.
r3 = redis.Redis(
    host="127.0.0.1", port=via_port, protocol=3, socket_timeout=5, single_connection_client=True, retry=NO_RETRY
)
pushes = []
assert r3.ping() is True
r3.connection._parser.set_invalidation_push_handler(pushes.append)
r3.execute_command("CLIENT", "TRACKING", "ON")
direct.set("tracked", "1")
assert r3.get("tracked") == b"1"
direct.set("tracked", "2")
deadline = time.time() + 5
while not pushes and time.time() < deadline:
    assert r3.ping() is True
assert pushes, "no invalidation push reached the client"
assert r3.get("tracked") == b"2"
raises(exceptions.BusyLoadingError, lambda: r3.get("loading:3"))
assert r3.hset("h3", mapping={"f": "v"}) == 1 and r3.hgetall("h3") == {b"f": b"v"}
print("ok: RESP3 with", len(pushes), "push message(s) between replies")

# A delay holds the reply; a hang never answers; a close ends the connection.
start = time.time()
assert via.get("slow:1") is None
held = time.time() - start
assert held >= 0.3, held
print(f"ok: delay held the reply {held:.3f}s")
hung = redis.Redis(host="127.0.0.1", port=via_port, socket_timeout=0.5, retry=NO_RETRY)
raises(exceptions.TimeoutError, lambda: hung.get("hang:1"))
print("ok: hang timed the client out")
closed = redis.Redis(host="127.0.0.1", port=via_port, socket_timeout=5, retry=NO_RETRY)
raises(exceptions.ConnectionError, lambda: closed.get("close:1"))
print("ok: close ended the connection")
print("ok: done")
