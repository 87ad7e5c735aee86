"""shop.Prices on grpc.aio, its pricing calls guarded by pyfailsafe's (PyPI) CircuitBreaker.

The same service as prices.py (one unary method, /shop.Prices/Get, the same messages, fallback and log lines), but
asynchronous: every call runs on one event loop, and nothing holds a call back while another is out. pyfailsafe's
breaker opens after FAIL_MAX failures in a row, stays open for RESET_MS, then lets the next call through as its
trial and, while that trial is out, `HALF_OPEN_RATIO` of the calls that come (attempts 1, 2, ... of each hundred
below 100 x the ratio): at 0, the default, the trial alone, so one probe per half-open window; at 0.05 the trial and
the next four, five at once. The trial's answer closes the breaker or opens it again.

Every change of state is one line on stdout, `breaker pricing: open`, `breaker pricing: half-open`,
`breaker pricing: closed`. With METRICS_PORT set, GET /metrics on it answers `pricing_breaker_state{breaker="pricing"}`
(0 closed, 1 open, 2 half-open).

Environment: PORT, PRICING_URL (plain HTTP: GET /price/SKU), CALL_TIMEOUT_MS (default 200), FAIL_MAX (default 5),
RESET_MS (default 1000), HALF_OPEN_RATIO (default 0), METRICS_PORT.
"""

import asyncio
import os
import signal
import urllib.parse

import grpc
from failsafe import CircuitOpen, Failsafe
from failsafe.circuit_breaker import CircuitBreaker

from prices import DEFAULT_CENTS, SERVICE, log, read_request, serve_metrics, write_price


class DependencyFailed(Exception):
    pass


async def fetch(host, port, path, timeout):
    """GET http://host:port/path on a connection of its own; a status other than 200 is a failure."""

    async def exchange():
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(
                ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (path, host, port)).encode("ascii")
            )
            await writer.drain()
            status = await reader.readline()
            await reader.read()
        finally:
            writer.close()
        parts = status.split()
        if len(parts) < 2 or parts[1] != b"200":
            raise DependencyFailed(status.decode("latin-1").strip() or "no answer")

    await asyncio.wait_for(exchange(), timeout)


async def main():
    port = int(os.environ["PORT"])
    pricing = urllib.parse.urlsplit(os.environ["PRICING_URL"])
    timeout = int(os.environ.get("CALL_TIMEOUT_MS", "200")) / 1000
    breaker = CircuitBreaker(
        maximum_failures=int(os.environ.get("FAIL_MAX", "5")),
        reset_timeout_seconds=int(os.environ.get("RESET_MS", "1000")) / 1000,
        half_open_ratio=float(os.environ.get("HALF_OPEN_RATIO", "0")),
        on_open=lambda: log("breaker pricing: open"),
        on_half_open=lambda: log("breaker pricing: half-open"),
        on_close=lambda: log("breaker pricing: closed"),
    )
    guard = Failsafe(circuit_breaker=breaker)
    if os.environ.get("METRICS_PORT"):
        serve_metrics(int(os.environ["METRICS_PORT"]), lambda: breaker.current_state)

    async def get(request, context):
        sku = read_request(request)
        try:
            await guard.run(fetch, pricing.hostname, pricing.port or 80, "/price/" + sku, timeout)
        except CircuitOpen:
            context.set_trailing_metadata((("x-fallback", "breaker-open"),))
            return write_price(sku, DEFAULT_CENTS, True)
        except Exception as e:  # a timeout, a refused connection, a 5xx: the dependency failed this call
            await context.abort(grpc.StatusCode.UNAVAILABLE, "pricing failed: %r" % e)
        return write_price(sku, 100 + sum(sku.encode("utf-8")) % 900, False)

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {"Get": grpc.unary_unary_rpc_method_handler(get, request_deserializer=None, response_serializer=None)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port("127.0.0.1:%d" % port)
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    log("serving %s on 127.0.0.1:%d" % (SERVICE, bound))
    await stop.wait()
    await server.stop(0.5)


if __name__ == "__main__":
    asyncio.run(main())
