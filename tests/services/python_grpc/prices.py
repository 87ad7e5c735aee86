"""shop.Prices: a team's own gRPC service, as faultline meets it, in Python on grpcio with pybreaker's breaker.

It serves one unary method, /shop.Prices/Get (GetPriceRequest { string sku = 1; } -> Price { string sku = 1;
int64 cents = 2; bool fallback = 3; }), with generic handlers and hand-written protobuf, so no protoc step is
needed. Each call asks its pricing dependency (PRICING_URL, plain HTTP: GET /price/SKU) through a pybreaker
CircuitBreaker. While the breaker is open, the answer is a default price marked `fallback` and carries the
trailing metadata `x-fallback: breaker-open`; a failed call while it is closed is UNAVAILABLE.

Every change of the breaker's state is one line on stdout, `breaker pricing: closed -> open`, which is what
faultline's log source reads. `serving shop.Prices on HOST:PORT` says it is ready.

Environment: PORT (to listen on 127.0.0.1), PRICING_URL, CALL_TIMEOUT_MS (default 200), FAIL_MAX (consecutive
failures that open the breaker, default 5), RESET_MS (how long it stays open before a trial call, default 1000),
SUCCESS_THRESHOLD (pybreaker: trial calls that must succeed in turn before it closes, default 1).

BREAKER picks the library: `pybreaker` (default; it runs every call under its lock, so one at a time, and admits
one trial call while half-open) or `circuitbreaker` (fabfuel's; while half-open it lets every call through until
one ends). With METRICS_PORT set, GET /metrics on it answers the breaker's state in the Prometheus text format:
`pricing_breaker_state{breaker="pricing"}` 0 closed, 1 open, 2 half-open.
"""

import os
import signal
import sys
import threading
import urllib.request
from concurrent import futures

import grpc
import pybreaker
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVICE = "shop.Prices"
DEFAULT_CENTS = 999
_print_lock = threading.Lock()


def log(line):
    # Lines go to a pipe, which Python buffers: flush each, or faultline would read them seconds late.
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def read_varint(data, i):
    value, shift = 0, 0
    while True:
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7


def write_varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_request(data):
    """GetPriceRequest: field 1, the SKU; other fields are skipped."""
    sku, i = "", 0
    while i < len(data):
        key, i = read_varint(data, i)
        kind = key & 7
        if kind == 0:
            _, i = read_varint(data, i)
        elif kind == 2:
            n, i = read_varint(data, i)
            if key >> 3 == 1:
                sku = data[i : i + n].decode("utf-8")
            i += n
        elif kind == 1:
            i += 8
        elif kind == 5:
            i += 4
        else:
            raise ValueError("unreadable GetPriceRequest")
    return sku


def write_price(sku, cents, fallback):
    raw = sku.encode("utf-8")
    out = b"\x0a" + write_varint(len(raw)) + raw + b"\x10" + write_varint(cents)
    if fallback:
        out += b"\x18\x01"
    return out


class PrintTransitions(pybreaker.CircuitBreakerListener):
    def state_change(self, cb, old_state, new_state):
        log("breaker %s: %s -> %s" % (cb.name, old_state.name if old_state else "none", new_state.name))


STATE_VALUES = {"closed": 0, "open": 1, "half-open": 2, "half_open": 2}


def serve_metrics(port, state):
    """GET /metrics on 127.0.0.1:port: the breaker's state, as `state()` names it, as a gauge."""

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = (
                "# TYPE pricing_breaker_state gauge\n"
                'pricing_breaker_state{breaker="pricing"} %d\n' % STATE_VALUES[state()]
            ).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main():
    port = int(os.environ["PORT"])
    pricing_url = os.environ["PRICING_URL"].rstrip("/")
    timeout = int(os.environ.get("CALL_TIMEOUT_MS", "200")) / 1000
    # No proxy from the environment: the dependency is on loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def fetch_price(sku):
        with opener.open("%s/price/%s" % (pricing_url, sku), timeout=timeout) as answer:
            answer.read()
        return 100 + sum(sku.encode("utf-8")) % 900

    fail_max = int(os.environ.get("FAIL_MAX", "5"))
    reset = int(os.environ.get("RESET_MS", "1000")) / 1000
    library = os.environ.get("BREAKER", "pybreaker")
    if library == "pybreaker":
        breaker = pybreaker.CircuitBreaker(
            fail_max=fail_max,
            reset_timeout=reset,
            success_threshold=int(os.environ.get("SUCCESS_THRESHOLD", "1")),
            listeners=[PrintTransitions()],
            name="pricing",
        )
        open_error = pybreaker.CircuitBreakerError
        guarded = lambda sku: breaker.call(fetch_price, sku)  # noqa: E731
        state = lambda: breaker.current_state  # noqa: E731
    elif library == "circuitbreaker":
        import circuitbreaker

        breaker = circuitbreaker.CircuitBreaker(
            failure_threshold=fail_max, recovery_timeout=reset, name="pricing"
        )
        open_error = circuitbreaker.CircuitBreakerError
        # Its check for an open circuit is in the decorated function, not in `call`.
        guarded = breaker.decorate(fetch_price)
        state = lambda: breaker.state  # noqa: E731
    else:
        sys.exit("BREAKER must be pybreaker or circuitbreaker, not %r" % library)
    if os.environ.get("METRICS_PORT"):
        serve_metrics(int(os.environ["METRICS_PORT"]), state)

    def get(request, context):
        sku = read_request(request)
        try:
            cents = guarded(sku)
        except open_error:
            context.set_trailing_metadata((("x-fallback", "breaker-open"),))
            return write_price(sku, DEFAULT_CENTS, True)
        except Exception as e:  # a timeout, a refused connection, a 5xx: the dependency failed this call
            context.abort(grpc.StatusCode.UNAVAILABLE, "pricing failed: %s" % e)
        return write_price(sku, cents, False)

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Get": grpc.unary_unary_rpc_method_handler(
                get, request_deserializer=None, response_serializer=None
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0.5))
    log("serving %s on 127.0.0.1:%d" % (SERVICE, bound))
    server.wait_for_termination()


if __name__ == "__main__":
    main()
