"""A small service under test for faultline's import tests: every request it serves calls its dependency once
(the same path on DEPENDENCY_URL) and answers with the dependency's status. It keeps two records of what it did,
each with a tool written by others:

- an OTLP/JSON trace export, through the opentelemetry-sdk and its OTLP JSON file exporter
  (opentelemetry-exporter-otlp-json-file): a SERVER span per request and a CLIENT span for its call;
- a HAR file (HTTP Archive 1.2) of its calls to the dependency, one entry per call, written when it stops.

Usage: traced_service.py PORT DEPENDENCY_URL OTLP_PATH HAR_PATH. /health answers 200 without a call or a span.
"""

import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

PORT, DEPENDENCY, OTLP_PATH, HAR_PATH = int(sys.argv[1]), sys.argv[2].rstrip("/"), sys.argv[3], sys.argv[4]
DEP_HOST, DEP_PORT = DEPENDENCY.split("://", 1)[1].split(":")

provider = TracerProvider(resource=Resource.create({"service.name": "traced-service"}))
provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(OTLP_PATH)))
tracer = provider.get_tracer("traced-service")

# No proxy from the environment: the dependency is on loopback.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
har_entries = []
har_lock = threading.Lock()


def call(path):
    """Calls the dependency; returns its status (0 when no answer came) and what the HAR entry needs."""
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    error = None
    try:
        with opener.open(DEPENDENCY + path, timeout=5) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    except (urllib.error.URLError, OSError) as e:
        status, error = 0, "timeout" if "timed out" in str(e) else "reset"
    return status, error, started, (time.perf_counter() - t0) * 1000.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self.answer(200, b"ok\n")
        path, _, query = self.path.partition("?")
        with tracer.start_as_current_span(
            f"GET {path}",
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "GET", "url.path": path, "url.query": query, "url.scheme": "http"},
        ) as server:
            with tracer.start_as_current_span(
                "GET",
                kind=SpanKind.CLIENT,
                attributes={"http.request.method": "GET", "server.address": DEP_HOST, "server.port": int(DEP_PORT),
                            "url.full": DEPENDENCY + self.path},
            ) as client:
                status, error, started, ms = call(self.path)
                if status:
                    client.set_attribute("http.response.status_code", status)
                if error or status >= 500:
                    client.set_status(Status(StatusCode.ERROR))
                    client.set_attribute("error.type", error or str(status))
            with har_lock:
                har_entries.append({
                    "startedDateTime": started.isoformat(timespec="microseconds").replace("+00:00", "Z"),
                    "time": ms,
                    "request": {"method": "GET", "url": DEPENDENCY + self.path, "httpVersion": "HTTP/1.1",
                                "headers": [], "queryString": [], "cookies": [], "headersSize": -1, "bodySize": 0},
                    "response": {"status": status, "statusText": "", "httpVersion": "HTTP/1.1", "headers": [],
                                 "cookies": [], "content": {"size": 0, "mimeType": "text/plain"},
                                 "redirectURL": "", "headersSize": -1, "bodySize": -1},
                    "cache": {},
                    "timings": {"send": 0, "wait": ms, "receive": 0},
                })
            answered = status or 502
            server.set_attribute("http.response.status_code", answered)
            if answered >= 500:
                server.set_status(Status(StatusCode.ERROR))
            self.answer(answered, b"done\n")


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.daemon_threads = True


def stop(*_):
    threading.Thread(target=server.shutdown, daemon=True).start()


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
server.serve_forever()
provider.shutdown()
with har_lock:
    entries = sorted(har_entries, key=lambda e: e["startedDateTime"])
with open(HAR_PATH, "w", encoding="utf-8") as f:
    json.dump({"log": {"version": "1.2", "creator": {"name": "traced_service.py", "version": "1"},
                       "entries": entries}}, f)
