"""A team's own HTTP service, instrumented with the OpenTelemetry SDK, whose retries are tenacity's.

GET /order/<id> calls its pricing dependency (GET {PRICING_URL}/price/<id>) and answers 200 with the price, or
503 once tenacity gives up. Every attempt is a client span of the request's server span, its context injected with
OpenTelemetry's global propagator (W3C traceparent): the standard way an instrumented service passes its callers'
trace on. Each attempt also carries the caller's remaining budget in x-request-timeout (whole milliseconds) when
the caller gave one.

Retries: tenacity, at most ATTEMPTS attempts, waiting wait_exponential_jitter(initial=BACKOFF_MS, jitter=
JITTER_MS) between them, and never past the caller's budget. PROPAGATE=0 starts the service without propagation
(no traceparent on its calls), as an uninstrumented service would call.
"""

import http.server
import os
import time
import urllib.error
import urllib.request

import tenacity
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider

PORT = int(os.environ["PORT"])
PRICING_URL = os.environ["PRICING_URL"].rstrip("/")
ATTEMPTS = int(os.environ.get("ATTEMPTS", "4"))
CALL_TIMEOUT_S = float(os.environ.get("CALL_TIMEOUT_MS", "300")) / 1000.0
BACKOFF_S = float(os.environ.get("BACKOFF_MS", "50")) / 1000.0
JITTER_S = float(os.environ.get("JITTER_MS", "50")) / 1000.0
PROPAGATE = os.environ.get("PROPAGATE", "1") != "0"

trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("orders")


class Failed(Exception):
    """An attempt that did not get a 2xx from pricing."""


def call_pricing(order_id, deadline):
    """One attempt: a client span whose context goes in the call's headers, with the budget left."""
    with tracer.start_as_current_span("GET /price", kind=trace.SpanKind.CLIENT):
        headers = {}
        if PROPAGATE:
            propagate.inject(headers)
        timeout = CALL_TIMEOUT_S
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise tenacity.TryAgain
            headers["x-request-timeout"] = str(int(left * 1000))
            timeout = min(timeout, left)
        request = urllib.request.Request(PRICING_URL + "/price/" + order_id, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.read()
        except (urllib.error.URLError, OSError) as e:
            raise Failed(str(e)) from e


def price(order_id, deadline):
    def budget_left(retry_state):
        return deadline is not None and time.monotonic() >= deadline

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(ATTEMPTS) | budget_left,
        wait=tenacity.wait_exponential_jitter(initial=BACKOFF_S, max=1.0, jitter=JITTER_S),
        retry=tenacity.retry_if_exception_type((Failed, tenacity.TryAgain)),
        reraise=True,
    )
    return retrying(call_pricing, order_id, deadline)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/health":
            return self.answer(200, b"ok")
        if not self.path.startswith("/order/"):
            return self.answer(404, b"no such path")
        started = time.monotonic()
        budget = self.headers.get("x-request-timeout")
        deadline = started + int(budget) / 1000.0 if budget and budget.isdigit() else None
        context = propagate.extract(dict(self.headers.items()))
        with tracer.start_as_current_span("GET /order", context=context, kind=trace.SpanKind.SERVER):
            try:
                body = price(self.path[len("/order/"):], deadline)
                self.answer(200, body or b"{}")
            except (Failed, tenacity.TryAgain, tenacity.RetryError):
                self.answer(503, b"pricing unavailable")

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


print("orders listening on", PORT, "propagation", "on" if PROPAGATE else "off", flush=True)
Server(("127.0.0.1", PORT), Handler).serve_forever()
