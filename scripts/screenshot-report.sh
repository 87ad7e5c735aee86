#!/usr/bin/env bash
# Renders a report.html in headless Chromium, takes a screenshot, and checks that the page works offline:
#   - no console output at all (errors, warnings or logs: the page logs nothing when it works),
#   - no network request made by the page (read from Chromium's net log; the browser's own background
#     traffic is told apart by its network isolation key, and every host name resolves to nothing anyway,
#     so no request can leave the machine),
#   - every chart drawn (each chart's element holds a uPlot canvas in the DOM after the scripts ran).
#
# Usage: scripts/screenshot-report.sh RUN_DIR_OR_REPORT_HTML [OUT_PNG] [WIDTHxHEIGHT]
#   scripts/screenshot-report.sh reports/slow-dependency/2026-01-01T00-00-00Z docs/report.png
# Exit status: 0 all checks passed, 1 a check failed, 2 bad usage or no chromium.
# Every request goes to a proxy on 127.0.0.1:9 (nothing listens there) and host names resolve to nothing.
set -euo pipefail

usage() { echo "usage: $0 RUN_DIR_OR_REPORT_HTML [OUT_PNG] [WIDTHxHEIGHT]" >&2; exit 2; }
[ $# -ge 1 ] || usage
page=$1
[ -d "$page" ] && page=$page/report.html
[ -f "$page" ] || { echo "error: no such file: $page" >&2; exit 2; }
out=${2:-$(dirname "$page")/report.png}
size=${3:-1400x2400}
chromium=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chromium" ] || { echo "error: chromium not found (Debian package chromium)" >&2; exit 2; }

url="file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The flags that keep Chromium from phoning home, plus a resolver that resolves nothing, so that even a
# request the flags miss cannot reach the network.
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update
  --no-first-run --disable-sync --disable-default-apps --disable-extensions --no-pings
  --host-resolver-rules="MAP * ~NOTFOUND" --proxy-server=127.0.0.1:9 --window-size="${size/x/,}")

status=0
timeout 120 "$chromium" "${flags[@]}" --user-data-dir="$work/profile-shot" \
  --enable-logging=stderr --v=0 --log-net-log="$work/net.json" \
  --screenshot="$out" "$url" >"$work/shot.out" 2>"$work/shot.err" || true
[ -s "$out" ] || { echo "FAIL: no screenshot written" >&2; cat "$work/shot.err" >&2; exit 1; }
echo "screenshot: $out"

# 1. Console output.
if grep -q ":CONSOLE" "$work/shot.err"; then
  echo "FAIL: the page wrote to the console:" >&2
  grep ":CONSOLE" "$work/shot.err" >&2
  status=1
else
  echo "ok: no console output"
fi

# 2. Network requests made by the page: requests whose isolation key is the file:// page, to anything but
# file: or data: URLs.
page_requests=$(python3 - "$work/net.json" <<'EOF'
import json, sys
try:
    log = json.load(open(sys.argv[1]))
except ValueError:
    # Chromium may leave the final "]}" off when it exits; the events before it are complete.
    text = open(sys.argv[1]).read().rstrip().rstrip(",")
    log = json.loads(text + "]}")
for e in log.get("events", []):
    p = e.get("params", {})
    url = p.get("url", "")
    key = p.get("network_isolation_key", "")
    if url and "file://" in key and not url.startswith(("file:", "data:")):
        print(url)
EOF
)
if [ -n "$page_requests" ]; then
  echo "FAIL: the page requested:" >&2
  echo "$page_requests" | sort -u >&2
  status=1
else
  echo "ok: no network request from the page"
fi

# 3. Every chart drawn: after the scripts ran, each chart element holds a uPlot canvas, or a note saying why
# there is nothing to draw (no breaker observed, nothing recorded), and no chart reported an error.
timeout 120 "$chromium" "${flags[@]}" --user-data-dir="$work/profile-dom" --dump-dom "$url" >"$work/dom.html" 2>/dev/null || true
if ! python3 - "$work/dom.html" <<'EOF'
import re, sys
dom = open(sys.argv[1]).read()
problems = []
for chart in ["chart-latency", "chart-rates", "chart-inflight", "chart-breakers"]:
    m = re.search(r'<div class="chart" id="%s">(.*?)</div>\s*(<p class="legend"|<h3|</section)' % chart, dom, re.S)
    if not m:
        problems.append(chart + ": element missing")
    elif "<canvas" not in m.group(1) and '<p class="note">' not in m.group(1):
        problems.append(chart + ": no canvas")
phases = len(re.findall(r'id="dist-\d+"', dom))
drawn = len(re.findall(r'id="dist-\d+"[^>]*><div class="uplot', dom))
empty = dom.count('<p class="note">No request was answered in this phase.')
if phases == 0:
    problems.append("no percentile distribution plot")
if drawn + empty != phases:
    problems.append("%d of %d distribution plots drawn" % (drawn, phases))
if 'class="error"' in dom:
    problems.append("a chart reported an error")
for p in problems:
    print("FAIL: " + p, file=sys.stderr)
print("ok: %d canvases, %d distribution plots" % (dom.count("<canvas"), phases))
sys.exit(1 if problems else 0)
EOF
then
  status=1
fi
exit $status
