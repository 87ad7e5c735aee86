"""grpcio, an independent gRPC stack, as a client of faultd: generic stubs (no protoc, raw bytes) check that each
status code, message and trailing metadata arrives as configured, that a client deadline shorter than the
injected delay ends in DEADLINE_EXCEEDED at the deadline, and how grpcio reports RST_STREAM, GOAWAY and the
stream limit, and that only the calls whose metadata an entry matches get its status. faultd's address is in FAULTD_ADDR; the routes are those of faultd/tests/grpc_clients.rs.

Prints one "ok: ..." line per check and "ok: all checks passed" at the end; any failure raises.
"""

import concurrent.futures
import os
import sys
import time

import grpc

ADDR = os.environ["FAULTD_ADDR"]
CODES = [c for c in grpc.StatusCode if c != grpc.StatusCode.OK]


def channel():
    # No proxy: the traffic stays on loopback whatever the environment says. A subchannel pool of its own: by
    # default grpcio shares connections between channels to the same address, so a block below could reuse the
    # previous block's connection while it is being torn down, and the connections counted would depend on timing.
    return grpc.insecure_channel(
        ADDR, options=[("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]
    )


def call(ch, method, request=b"", timeout=5.0, metadata=None):
    stub = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
    return stub.with_call(request, timeout=timeout, metadata=metadata)


def failure(ch, method, timeout=5.0, metadata=None):
    try:
        call(ch, method, timeout=timeout, metadata=metadata)
    except grpc.RpcError as e:
        return e
    raise AssertionError(f"{method}: expected a failure, got an answer")


def check(name, cond, detail=""):
    if not cond:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok: {name}", flush=True)


def main():
    with channel() as ch:
        response, c = call(ch, "/test.Catalog/GetProduct", b"\x08\x01")
        md = dict(c.initial_metadata())
        tmd = dict(c.trailing_metadata())
        check("healthy answer is the configured message", response == b"\x0a\x03abc", repr(response))
        check("initial and trailing metadata arrive", md.get("x-served-by") == "faultd" and tmd.get("x-cache") == "miss", f"{md} {tmd}")
        response, _ = call(ch, "/test.Echo/Say", b"hello grpcio")
        check("echo answers the request's message", response == b"hello grpcio", repr(response))

        for code in CODES:
            name = code.name
            number = code.value[0]
            e = failure(ch, f"/test.Codes/{name}")
            tmd = dict(e.trailing_metadata() or ())
            expected = f"faultd says {name}: 100% sure \u00fc"
            check(f"status {name} arrives as configured", e.code() == code, f"got {e.code()}")
            check(f"message of {name} arrives decoded", e.details() == expected, repr(e.details()))
            check(
                f"trailing metadata of {name} arrives",
                tmd.get("x-code") == str(number) and tmd.get("grpc-retry-pushback-ms") == "250",
                repr(tmd),
            )

        started = time.monotonic()
        e = failure(ch, "/test.Slow/Get", timeout=0.2)
        took = time.monotonic() - started
        check("a deadline shorter than the delay ends DEADLINE_EXCEEDED", e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, str(e.code()))
        check(f"...at the deadline ({took * 1000:.0f} ms for 200 ms)", 0.19 <= took < 1.0, f"{took}")

        for method, code in [
            ("/test.Rst/Internal", grpc.StatusCode.INTERNAL),
            ("/test.Rst/Cancel", grpc.StatusCode.CANCELLED),
            ("/test.Rst/Calm", grpc.StatusCode.RESOURCE_EXHAUSTED),
            ("/test.Rst/Refused", grpc.StatusCode.UNAVAILABLE),
        ]:
            e = failure(ch, method, timeout=2.0)
            check(f"RST_STREAM on {method} surfaces as {code.name}", e.code() == code, f"{e.code()} {e.details()}")
        response, _ = call(ch, "/test.Catalog/GetProduct")
        check("the connection outlives a reset stream", response == b"\x0a\x03abc")

    # A graceful GOAWAY after 3 streams: grpcio moves to a new connection and no call fails.
    with channel() as ch:
        results = [call(ch, "/test.GoAway/Graceful")[0] for _ in range(7)]
        check("a graceful GOAWAY fails no call", all(r == b"" for r in results))

    # An abrupt GOAWAY on each connection's 2nd stream: that stream is lost, the next goes to a new connection.
    with channel() as ch:
        outcomes = []
        for _ in range(4):
            try:
                call(ch, "/test.GoAway/Abrupt", timeout=3.0)
                outcomes.append("OK")
            except grpc.RpcError as e:
                outcomes.append(e.code().name)
        # Which call meets the GOAWAY depends on when grpcio opens its connections; what must hold is that a lost
        # stream surfaces as UNAVAILABLE, nothing else fails, and the channel recovers on a new connection.
        check(
            "an abrupt GOAWAY loses the stream in flight as UNAVAILABLE",
            set(outcomes) == {"OK", "UNAVAILABLE"} and "OK" in outcomes[outcomes.index("UNAVAILABLE"):],
            repr(outcomes),
        )

    # SETTINGS_MAX_CONCURRENT_STREAMS 2 on the connection: grpcio queues the rest, none fails.
    with channel() as ch:
        stub = ch.unary_unary("/test.Limited/Get", request_serializer=None, response_deserializer=None)
        call(ch, "/test.Limited/Get")  # connect first, so every call below shares the one connection
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            done = list(pool.map(lambda _: stub(b"", timeout=10.0), range(6)))
        took = time.monotonic() - started
        check("calls over the stream limit wait for a stream and succeed", len(done) == 6)
        check(f"...in waves of 2 ({took * 1000:.0f} ms for 6 calls of 200 ms)", took >= 0.55, f"{took}")

    # A server-streaming method: five replies, then OK; a broken stream: two replies, then UNAVAILABLE.
    with channel() as ch:
        watch = ch.unary_stream("/test.Prices/Watch", request_serializer=None, response_deserializer=None)
        replies = list(watch(b"", timeout=5.0))
        check("a streaming method gets every reply", replies == [b"\x08\x01"] * 5, repr(replies))
        broken = ch.unary_stream("/test.Prices/Broken", request_serializer=None, response_deserializer=None)
        got = []
        try:
            for reply in broken(b"", timeout=5.0):
                got.append(reply)
            raise AssertionError("the broken stream ended with OK")
        except grpc.RpcError as e:
            check(
                "a broken stream delivers its first replies, then its status",
                got == [b"\x08\x02"] * 2 and e.code() == grpc.StatusCode.UNAVAILABLE and e.details() == "stream lost",
                f"{got!r} {e.code()} {e.details()!r}",
            )

    # Matched entries: one tenant's metadata gets UNAVAILABLE; of the other calls, every third is exhausted.
    with channel() as ch:
        acme = (("x-tenant", "acme"),)
        for _ in range(2):
            e = failure(ch, "/test.Tenant/Get", metadata=acme)
            check("the tenant's metadata gets its status", e.code() == grpc.StatusCode.UNAVAILABLE and e.details() == "acme is down", f"{e.code()} {e.details()!r}")
        seen = []
        for _ in range(6):
            try:
                call(ch, "/test.Tenant/Get", metadata=(("x-tenant", "acme-2"),))
                seen.append("OK")
            except grpc.RpcError as e:
                seen.append(e.code().name)
        expected = ["OK", "OK", "RESOURCE_EXHAUSTED"] * 2
        check("other tenants' calls get every third call's status only", seen == expected, repr(seen))

    print("ok: all checks passed", flush=True)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", flush=True)
        sys.exit(1)
