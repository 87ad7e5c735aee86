#!/usr/bin/env bash
# HTTP/2 and gRPC benchmarks, 127.0.0.1 only, every run bounded; prints results (figures go to bench/h2.md).
#   (a) loadgen's HTTP/2 saturation vs h2load against the same nginx (h2c, one worker): both closed-model with the
#       same concurrency (C connections x M streams; loadgen --users C*M), requests counted at nginx
#       (stub_status), client CPU per request (target: loadgen >= 1.0x h2load's rps).
#   (b) loadgen's HTTP/2 open model at fixed 1k, 5k, 20k rps against nginx: achieved rate counted at nginx
#       (target within 0.5%) and loadgen's send-lag p99 (target <= 1 ms).
#   (c) faultd's healthy gRPC unary route vs nginx answering the same number of bytes over HTTP/2, both under
#       h2load (POST, content-type application/grpc, a 100-byte framed message; faultd's answer is its framed
#       95-byte message plus the grpc-status trailers, nginx's a 100-byte body): requests counted at each server
#       (faultd's recording, nginx's stub_status) (target: faultd >= 0.8x nginx's rps).
#   (d) faultd's RSS per held stream at 10,000 streams (10 connections x 1,000, a route that never answers),
#       the streams confirmed by faultd's own faultd_in_flight (target <= 4 KB).
# Usage: bench/h2/run.sh [a|b|c|d|all]
#   env: ROUNDS=3 SECS=5 RATE_SECS=10 CONNS=10 STREAMS=10 HELD=10000
#        FAULTD=target/release/faultd LOADGEN=target/release/loadgen (other builds to compare)
# Needs nginx and h2load (apt-get install -y nginx nghttp2-client), python3 and curl. Servers (nginx with one
# worker, faultd with one tokio worker) run on CPU 0, clients on CPU 1; runs alternate and medians are quoted.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHAT=${1:-all}
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-5}; RATE_SECS=${RATE_SECS:-10}
CONNS=${CONNS:-10}; STREAMS=${STREAMS:-10}; HELD=${HELD:-10000}
FAULTD=${FAULTD:-target/release/faultd}
LOADGEN=${LOADGEN:-target/release/loadgen}
missing=()
for tool in nginx h2load python3 curl; do command -v "$tool" > /dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing: ${missing[*]} (apt-get install -y nginx nghttp2-client python3 curl)" >&2
  exit 2
fi
[ -x "$FAULTD" ] && [ -x "$LOADGEN" ] || cargo build --release -p faultd -p loadgen

WORK=$(mktemp -d /tmp/h2-bench.XXXXXX)
source bench/lib.sh
ulimit -n "$(ulimit -Hn)"
trap cleanup EXIT

# CPU seconds (user + sys) recorded by /usr/bin/time -f '%U %S' into $1.
cpu_of() { awk '{s=$1+$2} END {print s}' "$1"; }
# Requests nginx has served so far (its stub_status), this status request included: between two readings nginx
# served (after - before - 1) others.
nginx_requests() { curl -s --http2-prior-knowledge "http://127.0.0.1:$NGINX_PORT/nginx_status" | awk 'NR==3 {print $3}'; }
# Calls faultd's routes have received so far (its recording).
faultd_arrivals() {
  curl -s "http://127.0.0.1:$FD_CONTROL/recording" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sum(v["totals"]["arrivals"] for v in r["routes"].values()))'
}

# The request: a gRPC message of 95 bytes framed to 100 (5-byte prefix), both for h2load's POST body and faultd's
# answer; nginx answers 100 bytes of text.
MESSAGE_HEX=$(python3 -c 'print(("0a5d" + "61" * 93))')
python3 -c "import sys; m=bytes.fromhex('$MESSAGE_HEX'); sys.stdout.buffer.write(b'\0' + len(m).to_bytes(4, 'big') + m)" > "$WORK/request.bin"
BODY100=$(python3 -c 'print("b" * 100)')

NGINX_PORT=$(free_port)
mkdir -p "$WORK/nginx/logs"
cat > "$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx; proxy_temp_path $WORK/nginx; fastcgi_temp_path $WORK/nginx; uwsgi_temp_path $WORK/nginx; scgi_temp_path $WORK/nginx;
  keepalive_requests 1000000;
  http2_max_concurrent_streams 1000;
  server {
    listen 127.0.0.1:$NGINX_PORT backlog=8192 http2;
    location = /nginx_status { stub_status; }
    location / { default_type application/grpc; return 200 "$BODY100"; }
  }
}
CONF
taskset -c 0 nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
PIDS+=($!)
wait_port "$NGINX_PORT"

FD_PORT=$(free_port); FD_CONTROL=$(free_port)
cat > "$WORK/faultd.yaml" <<YAML
http2: { max_concurrent_streams: 1000 }
routes:
  catalog: { path: /shop.Catalog/*, grpc_response: { message: "$MESSAGE_HEX" } }
  held: { path: /shop.Held/*, hang: 100% }
YAML
TOKIO_WORKER_THREADS=1 taskset -c 0 "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$FD_PORT" \
  --control "127.0.0.1:$FD_CONTROL" > "$WORK/faultd.log" 2>&1 &
FD_PID=$!; PIDS+=($FD_PID)
wait_port "$FD_PORT"; wait_port "$FD_CONTROL"
echo "nginx $(nginx -v 2>&1 | sed 's/.*\///') (1 worker, h2c) and faultd (1 tokio worker) on CPU 0; clients on CPU 1; $(h2load --version | head -1); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

# loadgen's spec for an HTTP/2 load: CONNS connections, STREAMS streams each, GET / (plain HTTP/2).
cat > "$WORK/h2.yaml" <<YAML
rate: 1/s
connections: $CONNS
streams_per_connection: $STREAMS
timeout: 5s
requests: [ { get: /, http2: true } ]
YAML

if [[ $WHAT == a || $WHAT == all ]]; then
  users=$((CONNS * STREAMS))
  echo "== (a) saturation against nginx, $CONNS connections x $STREAMS streams, ${SECS}s per run, $ROUNDS alternating rounds"
  : > "$WORK/a-h2load"; : > "$WORK/a-lg"; : > "$WORK/a-h2load-cpu"; : > "$WORK/a-lg-cpu"
  for i in $(seq "$ROUNDS"); do
    before=$(nginx_requests)
    /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 h2load -t1 -c "$CONNS" -m "$STREAMS" -D "$SECS" \
      "http://127.0.0.1:$NGINX_PORT/" > "$WORK/h2load.out" 2>&1
    served=$(( $(nginx_requests) - before - 1 ))
    h=$(awk -v n="$served" -v s="$SECS" 'BEGIN {printf "%.0f", n/s}')
    hc=$(awk -v c="$(cpu_of "$WORK/t")" -v n="$served" 'BEGIN {printf "%.2f", c/n*1e6}')
    before=$(nginx_requests)
    /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 "$LOADGEN" --spec "$WORK/h2.yaml" \
      --url "http://127.0.0.1:$NGINX_PORT" --users "$users" --duration "${SECS}s" > "$WORK/lg.out"
    served=$(( $(nginx_requests) - before - 1 ))
    l=$(awk -v n="$served" -v s="$SECS" 'BEGIN {printf "%.0f", n/s}')
    lc=$(awk -v c="$(cpu_of "$WORK/t")" -v n="$served" 'BEGIN {printf "%.2f", c/n*1e6}')
    echo "  round $i: h2load $h rps at nginx ($hc us CPU/request; it says $(awk '/finished in/ {print $4}' "$WORK/h2load.out") req/s), loadgen $l rps at nginx ($lc us CPU/request)"
    echo "$h" >> "$WORK/a-h2load"; echo "$l" >> "$WORK/a-lg"; echo "$hc" >> "$WORK/a-h2load-cpu"; echo "$lc" >> "$WORK/a-lg-cpu"
  done
  H=$(median < "$WORK/a-h2load"); L=$(median < "$WORK/a-lg")
  echo "  median rps at nginx: h2load $H, loadgen $L, loadgen/h2load $(ratio "$L" "$H")x (target >= 1.0x)"
  echo "  median CPU per request: h2load $(median < "$WORK/a-h2load-cpu") us, loadgen $(median < "$WORK/a-lg-cpu") us"
fi

if [[ $WHAT == b || $WHAT == all ]]; then
  echo "== (b) open model at fixed rates against nginx, ${RATE_SECS}s per rate, $ROUNDS rounds, $CONNS connections x 100 streams"
  sed "s/^streams_per_connection: .*/streams_per_connection: 100/" "$WORK/h2.yaml" > "$WORK/h2-rate.yaml"
  for i in $(seq "$ROUNDS"); do
    for rate in 1000 5000 20000; do
      before=$(nginx_requests)
      out=$(taskset -c 1 "$LOADGEN" --spec "$WORK/h2-rate.yaml" --url "http://127.0.0.1:$NGINX_PORT" \
              --rate "${rate}/s" --duration "${RATE_SECS}s")
      served=$(( $(nginx_requests) - before - 1 ))
      expected=$((rate * RATE_SECS))
      dev=$(awk -v s="$served" -v e="$expected" 'BEGIN {printf "%+.3f%%", (s-e)/e*100}')
      lag=$(grep 'Send lag' <<<"$out" | sed 's/.*p99 \([^,]*\),.*/\1/')
      echo "  round $i, ${rate}/s: nginx served $served of $expected ($dev), send lag p99 $lag; loadgen: $(grep -E 'intended, [0-9]+ sent' <<<"$out" | tr -s ' ' | tr '\n' ' ')"
    done
  done
fi

if [[ $WHAT == c || $WHAT == all ]]; then
  echo "== (c) faultd's gRPC unary route vs nginx, same request, h2load -c $CONNS -m $STREAMS, ${SECS}s per run, $ROUNDS alternating rounds"
  : > "$WORK/c-fd"; : > "$WORK/c-ng"
  h2args=(-t1 -c "$CONNS" -m "$STREAMS" -D "$SECS" -d "$WORK/request.bin"
          -H 'content-type: application/grpc' -H 'te: trailers')
  for i in $(seq "$ROUNDS"); do
    before=$(faultd_arrivals)
    taskset -c 1 h2load "${h2args[@]}" "http://127.0.0.1:$FD_PORT/shop.Catalog/GetProduct" > "$WORK/h2load-fd.out" 2>&1
    f=$(awk -v n="$(( $(faultd_arrivals) - before ))" -v s="$SECS" 'BEGIN {printf "%.0f", n/s}')
    before=$(nginx_requests)
    taskset -c 1 h2load "${h2args[@]}" "http://127.0.0.1:$NGINX_PORT/shop.Catalog/GetProduct" > "$WORK/h2load-ng.out" 2>&1
    n=$(awk -v n="$(( $(nginx_requests) - before - 1 ))" -v s="$SECS" 'BEGIN {printf "%.0f", n/s}')
    echo "  round $i: faultd $f rps (counted by faultd; h2load: $(grep -o '[0-9]* succeeded' "$WORK/h2load-fd.out")), nginx $n rps (counted by nginx; h2load: $(grep -o '[0-9]* succeeded' "$WORK/h2load-ng.out"))"
    echo "$f" >> "$WORK/c-fd"; echo "$n" >> "$WORK/c-ng"
  done
  F=$(median < "$WORK/c-fd"); N=$(median < "$WORK/c-ng")
  echo "  median rps: faultd $F, nginx $N, faultd/nginx $(ratio "$F" "$N")x (target >= 0.8x)"
fi

if [[ $WHAT == d || $WHAT == all ]]; then
  conns=10; per=$((HELD / conns))
  echo "== (d) RSS per held stream: $HELD streams ($conns connections x $per) on a route that never answers, $ROUNDS rounds, a fresh faultd each"
  : > "$WORK/d"
  for i in $(seq "$ROUNDS"); do
    port=$(free_port); cport=$(free_port)
    "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$port" --control "127.0.0.1:$cport" 2> "$WORK/faultd-d.log" &
    pid=$!
    wait_port "$port"; wait_port "$cport"
    sleep 1
    base=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    taskset -c 1 timeout 60 h2load -t1 -c "$conns" -m "$per" -n "$HELD" "http://127.0.0.1:$port/shop.Held/Get" > /dev/null 2>&1 &
    client=$!
    held=0
    for _ in $(seq 300); do
      held=$(curl -s "http://127.0.0.1:$cport/metrics" | awk '/^faultd_in_flight\{/ {s += $2} END {print s + 0}')
      [ "$held" -ge "$HELD" ] && break
      sleep 0.1
    done
    sleep 1
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    b=$(awk -v r="$rss" -v b="$base" -v n="$HELD" 'BEGIN {printf "%.0f", (r-b)*1024/n}')
    echo "  round $i: $held streams held (faultd_in_flight), RSS $base kB -> $rss kB: $b bytes per held stream"
    echo "$b" >> "$WORK/d"
    kill "$client" 2>/dev/null || true; wait "$client" 2>/dev/null || true
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
  echo "  median $(median < "$WORK/d") bytes of RSS per held stream at $HELD streams (target <= 4096)"
fi
