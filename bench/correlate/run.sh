#!/usr/bin/env bash
# What following each request through the SUT costs, side by side with it off, 127.0.0.1 only, every run bounded
# in time; prints results (figures go to bench/correlate.md).
#   (a) loadgen's CPU per request at RATE/s against nginx (one worker, `ok\n`): plain, then `--correlate` (a fresh
#       traceparent and the deadline header on every request, each request's trace id and times kept), alternating
#       ROUNDS rounds; CPU is user + sys of the whole process (/usr/bin/time), requests are nginx's own count.
#   (b) faultd's CPU per call at RATE/s from loadgen --correlate (every call carries a traceparent either way):
#       faultd without `correlate:`, then with it (each call recorded one by one), a fresh faultd per run,
#       alternating ROUNDS rounds; CPU from /proc/PID/stat over the run, calls are faultd's own count.
# Usage: bench/correlate/run.sh [a|b|all]
#   env: ROUNDS=5 SECS=10 RATE=5000 CONNS=50 LOADGEN=target/release/loadgen FAULTD=target/release/faultd
# The servers run on CPU 0, the client on CPU 1. The medians are quoted, and their ratio (on / off).
set -euo pipefail
cd "$(dirname "$0")/../.."
WHAT=${1:-all}
ROUNDS=${ROUNDS:-5}; SECS=${SECS:-10}; RATE=${RATE:-5000}; CONNS=${CONNS:-50}
LOADGEN=${LOADGEN:-target/release/loadgen}
FAULTD=${FAULTD:-target/release/faultd}
[ -x "$LOADGEN" ] && [ -x "$FAULTD" ] || cargo build --release -p loadgen -p faultd

WORK=$(mktemp -d /tmp/correlate-bench.XXXXXX)
source bench/lib.sh
trap cleanup EXIT
echo "$(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg); $RATE/s for ${SECS}s per run, $ROUNDS rounds"
# CPU seconds (user + sys) recorded by /usr/bin/time -f '%U %S' into $1
cpu_of() { awk '{s=$1+$2} END {print s}' "$1"; }
# Microseconds of CPU per request: CPU seconds $1 over $2 requests.
per_request() { awk -v c="$1" -v n="$2" 'BEGIN {printf "%.2f", (n > 0 ? c / n * 1e6 : 0)}'; }

if [[ $WHAT == a || $WHAT == all ]]; then
  PORT=$(free_port); STATUS_PORT=$(free_port)
  write_nginx_conf "$WORK" "$PORT" 'return 200 "ok\n";' "" "" \
    "server { listen 127.0.0.1:$STATUS_PORT; location / { stub_status; } }"
  taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" & PIDS+=($!)
  wait_port "$PORT"; wait_port "$STATUS_PORT"
  echo "== (a) loadgen CPU per request against nginx, plain vs --correlate"
  : > "$WORK/off"; : > "$WORK/on"
  for i in $(seq "$ROUNDS"); do
    line="  round $i:"
    for mode in off on; do
      flag=(); [[ $mode == on ]] && flag=(--correlate)
      b=$(nginx_served "$STATUS_PORT")
      /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 "$LOADGEN" --url "http://127.0.0.1:$PORT/" \
        --rate "$RATE/s" --duration "${SECS}s" --connections "$CONNS" "${flag[@]}" > /dev/null
      n=$(( $(nginx_served "$STATUS_PORT") - b - 1 ))
      us=$(per_request "$(cpu_of "$WORK/t")" "$n")
      echo "$us" >> "$WORK/$mode"; line="$line $mode $us us ($n requests)"
    done
    echo "$line"
  done
  OFF=$(median < "$WORK/off"); ON=$(median < "$WORK/on")
  echo "  median: off $OFF us, on $ON us per request; on / off $(ratio "$ON" "$OFF")"
fi

if [[ $WHAT == b || $WHAT == all ]]; then
  echo "== (b) faultd CPU per call, without and with correlate: (loadgen --correlate on CPU 1)"
  printf 'routes:\n  pricing: { path: /price/* }\n' > "$WORK/off.yaml"
  printf 'correlate: { header: traceparent }\nroutes:\n  pricing: { path: /price/* }\n' > "$WORK/on.yaml"
  : > "$WORK/f-off"; : > "$WORK/f-on"
  for i in $(seq "$ROUNDS"); do
    line="  round $i:"
    for mode in off on; do
      port=$(free_port); cport=$(free_port)
      TOKIO_WORKER_THREADS=1 taskset -c 0 "$FAULTD" --config "$WORK/$mode.yaml" --listen "127.0.0.1:$port" \
        --control "127.0.0.1:$cport" > /dev/null 2>&1 & pid=$!
      wait_port "$port"; wait_port "$cport"
      curl -s -X POST "http://127.0.0.1:$cport/schedule/start" > /dev/null
      before=$(cpu_s "$pid")
      taskset -c 1 "$LOADGEN" --url "http://127.0.0.1:$port/price/1" --rate "$RATE/s" --duration "${SECS}s" \
        --connections "$CONNS" --correlate > /dev/null
      after=$(cpu_s "$pid")
      n=$(curl -s "http://127.0.0.1:$cport/recording" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["routes"]["pricing"]["totals"]["arrivals"])')
      kill "$pid"; wait "$pid" 2>/dev/null || true
      us=$(per_request "$(awk -v a="$before" -v b="$after" 'BEGIN {print b - a}')" "$n")
      echo "$us" >> "$WORK/f-$mode"; line="$line $mode $us us ($n calls)"
    done
    echo "$line"
  done
  OFF=$(median < "$WORK/f-off"); ON=$(median < "$WORK/f-on")
  echo "  median: off $OFF us, on $ON us per call; on / off $(ratio "$ON" "$OFF")"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
