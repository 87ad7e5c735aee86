"""shop.Prices: a team's own gRPC service, as faultline meets it, in Python on grpcio with pybreaker's breaker.

It serves one unary method, /shop.Prices/Get (GetPriceRequest { string sku = 1; } -> Price { string sku = 1;
int64 cents = 2; bool fallback = 3; }), with generic handlers and hand-written protobuf, so no protoc step is
needed. Each call asks its pricing dependency (PRICING_URL, plain HTTP: GET /price/SKU) through a pybreaker
CircuitBreaker. While the breaker is open, the answer is a default price marked `fallback` and carries the
trailing metadata `x-fallback: breaker-open`; a failed call while it is closed is UNAVAILABLE.

Every change of the breaker's state is one line on stdout, `breaker pricing: closed -> open`, which is what
faultline's log source reads. `serving shop.Prices on HOST:PORT` says it is ready.

Environment: PORT (to listen on 127.0.0.1), PRICING_URL, CALL_TIMEOUT_MS (default 200), FAIL_MAX (consecutive
failures that open the breaker, default 5), RESET_MS (how long it stays open before a trial call, default 1000).
"""

import os
import signal
import sys
import threading
import urllib.request
from concurrent import futures

import grpc
import pybreaker

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


def main():
    port = int(os.environ["PORT"])
    pricing_url = os.environ["PRICING_URL"].rstrip("/")
    timeout = int(os.environ.get("CALL_TIMEOUT_MS", "200")) / 1000
    # No proxy from the environment: the dependency is on loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    breaker = pybreaker.CircuitBreaker(
        fail_max=int(os.environ.get("FAIL_MAX", "5")),
        reset_timeout=int(os.environ.get("RESET_MS", "1000")) / 1000,
        listeners=[PrintTransitions()],
        name="pricing",
    )

    def fetch_price(sku):
        with opener.open("%s/price/%s" % (pricing_url, sku), timeout=timeout) as answer:
            answer.read()
        return 100 + sum(sku.encode("utf-8")) % 900

    def get(request, context):
        sku = read_request(request)
        try:
            cents = breaker.call(fetch_price, sku)
        except pybreaker.CircuitBreakerError:
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
