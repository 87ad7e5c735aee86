#!/usr/bin/env bash
# TLS benchmarks, 127.0.0.1 only, every run bounded in time; prints results (figures go to bench/tls.md).
#   (a) faultd over TLS vs nginx over TLS: the same ECDSA P-256 certificate and key, the same response bytes
#       ({"ok":true}, application/json), one worker each on CPU 0, the client on CPU 1: wrk -t1 -c50 (HTTPS,
#       keep-alive, HTTP/1.1) and h2load -t1 -c50 -m10 (h2 over TLS by ALPN). Requests are counted at the server
#       (nginx's stub_status, faultd's recording) over each run; target >= 0.8x nginx's rps.
#   (b) new handshakes per second without resumption: S_TIME_CLIENTS (4) `openssl s_time -new -www /ok` at once,
#       each making one connection, one full handshake and one HTTP/1.0 request after another (wrk would resume
#       sessions); counted at the server. nginx also has no session cache and no tickets; faultd's recording says
#       how many of its handshakes were resumed (the figure is only quoted if none was). Target >= 0.8x nginx's.
#   (c) loadgen at a fixed 5,000/s against the same nginx, over HTTPS and over cleartext: whole-process CPU time
#       (user + system, every thread) per request, read from /proc/PID/stat; target HTTPS <= 1.5x cleartext.
# Usage: bench/tls/run.sh [a|b|c|all]
#   env: ROUNDS=3 SAT_SECS=5 HS_SECS=5 S_TIME_CLIENTS=4 LG_SECS=10 LG_RATE=5000 FAULTD=target/release/faultd
#        LOADGEN=target/release/loadgen
# Needs nginx, wrk, h2load (nghttp2-client), openssl, curl: apt-get install -y nginx wrk nghttp2-client openssl curl.
# Runs alternate (faultd, nginx, faultd, nginx, ...) and the medians are quoted.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHAT=${1:-all}
ROUNDS=${ROUNDS:-3}; SAT_SECS=${SAT_SECS:-5}; HS_SECS=${HS_SECS:-5}; LG_SECS=${LG_SECS:-10}
LG_RATE=${LG_RATE:-5000}; S_TIME_CLIENTS=${S_TIME_CLIENTS:-4}
FAULTD=${FAULTD:-target/release/faultd}
LOADGEN=${LOADGEN:-target/release/loadgen}
for tool in nginx wrk h2load openssl curl python3; do
  command -v "$tool" > /dev/null || { echo "bench/tls: $tool is missing: apt-get install -y nginx wrk nghttp2-client openssl curl python3" >&2; exit 2; }
done
[ -x "$FAULTD" ] && [ -x "$LOADGEN" ] || cargo build --release -p faultd -p loadgen

WORK=$(mktemp -d /tmp/tls-bench.XXXXXX)
source bench/lib.sh
trap cleanup EXIT

# One CA and one ECDSA P-256 leaf for 127.0.0.1, served by both servers.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2> /dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 \
  -keyout "$WORK/leaf.key" -out "$WORK/leaf.csr" 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > "$WORK/leaf.ext"
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial -days 2 \
  -extfile "$WORK/leaf.ext" -out "$WORK/leaf.pem" 2> /dev/null

# nginx: TLS on one port (h2 by ALPN; `http2 on` from 1.25.1, a listen flag before; TLS 1.3 named, as before 1.23.4
# it is not in nginx's default, while rustls offers it), cleartext on another for (c), stub_status on a third. No
# session cache and no tickets: every new connection is a full handshake.
NGINX_TLS=$(free_port); NGINX_PLAIN=$(free_port); NGINX_STATUS=$(free_port)
nginx_version=$(nginx -v 2>&1 | sed 's|.*nginx/||')
if printf '1.25.1\n%s\n' "$nginx_version" | sort -V -C; then h2_listen=ssl; h2_directive='http2 on;'
else h2_listen='ssl http2'; h2_directive=''; fi
BODY='default_type application/json; return 200 '"'"'{"ok":true}'"'"';'
write_nginx_conf "$WORK" "$NGINX_TLS" "$BODY" "$h2_listen" \
  "$h2_directive ssl_protocols TLSv1.2 TLSv1.3; ssl_certificate $WORK/leaf.pem; ssl_certificate_key $WORK/leaf.key; ssl_session_cache off; ssl_session_tickets off;" \
  "server { listen 127.0.0.1:$NGINX_PLAIN backlog=8192; location / { $BODY } }
  server { listen 127.0.0.1:$NGINX_STATUS; location / { stub_status; } }"
cat > "$WORK/faultd.yaml" <<YAML
seed: 1
tls: { cert: $WORK/leaf.pem, key: $WORK/leaf.key }
routes:
  ok: { path: /ok }
YAML

taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" &
PIDS+=($!)
FAULTD_PORT=$(free_port); FAULTD_CONTROL=$(free_port)
TOKIO_WORKER_THREADS=1 taskset -c 0 "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$FAULTD_PORT" \
  --control "127.0.0.1:$FAULTD_CONTROL" 2> "$WORK/faultd.log" &
FAULTD_PID=$!; PIDS+=($FAULTD_PID)
wait_port "$NGINX_TLS"; wait_port "$NGINX_STATUS"; wait_port "$FAULTD_PORT"; wait_port "$FAULTD_CONTROL"
NGINX_WORKER=$(cat /proc/"$(cat "$WORK/nginx.pid")"/task/*/children | awk '{print $1}')
NG="https://127.0.0.1:$NGINX_TLS"; FD="https://127.0.0.1:$FAULTD_PORT"
[ "$(curl -s --cacert "$WORK/ca.pem" "$NG/ok")" = "$(curl -s --cacert "$WORK/ca.pem" "$FD/ok")" ] \
  || { echo "faultd and nginx answer different bodies" >&2; exit 3; }

# Requests served so far, counted by the server: nginx's stub_status (less the status request itself, which it
# counts as it answers), faultd's recording of its route (the control API is another listener: not counted).
served() {
  if [ "$1" = ng ]; then curl -s "http://127.0.0.1:$NGINX_STATUS/" | awk 'NR == 3 {print $3 - 1}'
  else curl -s "http://127.0.0.1:$FAULTD_CONTROL/recording" | python3 -c 'import json,sys; print(json.load(sys.stdin)["routes"]["ok"]["totals"]["arrivals"])'; fi
}
# faultd's handshakes so far by outcome, as "ok N resumed M".
faultd_handshakes() {
  curl -s "http://127.0.0.1:$FAULTD_CONTROL/recording" \
    | python3 -c 'import json,sys; h=json.load(sys.stdin)["tls"]["totals"]["handshakes"]; print(h.get("ok",0), h.get("resumed",0))'
}
negotiated() { openssl s_client -connect "127.0.0.1:$1" -CAfile "$WORK/ca.pem" -alpn h2,http/1.1 < /dev/null 2> /dev/null \
  | awk '/^New,/ {p=$2" "$NF} /^ALPN protocol/ {a=$3} END {print p", ALPN " a}'; }
echo "nginx $nginx_version (1 worker) and faultd (1 tokio worker) on CPU 0; clients on CPU 1; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ECDSA P-256 leaf for 127.0.0.1; negotiated: nginx $(negotiated "$NGINX_TLS"); faultd $(negotiated "$FAULTD_PORT")"

# S_TIME_CLIENTS openssl s_time clients at once against port $1 for $2 seconds, each new connection a full handshake.
s_time_clients() {
  local port=$1 secs=$2 k pids=()
  for k in $(seq "$S_TIME_CLIENTS"); do
    taskset -c 1 openssl s_time -connect "127.0.0.1:$port" -new -www /ok -time "$secs" -CAfile "$WORK/ca.pem" \
      > "$WORK/s_time.$k" 2>&1 &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k"; done
}

# Runs a client command ($3...) against server $1 (fd|ng) for $2 seconds; writes "server-counted-rps cpu%" to
# $WORK/counted and the client's output to $WORK/client.out.
counted_run() {
  local who=$1 secs=$2; shift 2
  local pid=$FAULTD_PID; [ "$who" = ng ] && pid=$NGINX_WORKER
  local n0 c0 n1 c1
  n0=$(served "$who"); c0=$(cpu_s "$pid")
  "$@" > "$WORK/client.out" 2>&1 || { cat "$WORK/client.out" >&2; exit 3; }
  n1=$(served "$who"); c1=$(cpu_s "$pid")
  awk -v a="$n0" -v b="$n1" -v c="$c0" -v d="$c1" -v t="$secs" 'BEGIN {printf "%.0f %.0f\n", (b-a)/t, (d-c)/t*100}' \
    > "$WORK/counted"
}

if [[ $WHAT == a || $WHAT == all ]]; then
  echo "== (a) keep-alive throughput over TLS: wrk -t1 -c50 (HTTP/1.1) and h2load -t1 -c50 -m10 (h2), ${SAT_SECS}s each, $ROUNDS alternating rounds"
  for f in fd_wrk ng_wrk fd_h2 ng_h2; do : > "$WORK/$f"; done
  for i in $(seq "$ROUNDS"); do
    for who in fd ng; do
      url=$FD/ok; [ $who = ng ] && url=$NG/ok
      counted_run "$who" "$SAT_SECS" taskset -c 1 wrk -t1 -c50 -d"${SAT_SECS}s" "$url"
      read -r rps busy < "$WORK/counted"
      client=$(awk '/Requests\/sec/ {print $2}' "$WORK/client.out")
      echo "$rps" >> "$WORK/${who}_wrk"
      counted_run "$who" "$SAT_SECS" taskset -c 1 h2load -t1 -c50 -m10 -D "$SAT_SECS" "$url"
      read -r h2rps h2busy < "$WORK/counted"
      h2client=$(awk '/^finished in/ {print $4}' "$WORK/client.out")
      echo "$h2rps" >> "$WORK/${who}_h2"
      echo "  round $i $who: wrk $rps rps counted at the server (client said $client; server at ${busy}% of its core);" \
           "h2load $h2rps rps (client said $h2client; ${h2busy}%)"
    done
  done
  FW=$(median < "$WORK/fd_wrk"); NW=$(median < "$WORK/ng_wrk"); FH=$(median < "$WORK/fd_h2"); NH=$(median < "$WORK/ng_h2")
  echo "  median wrk (HTTPS keep-alive): faultd $FW rps, nginx $NW rps, ratio $(ratio "$FW" "$NW")x (target >= 0.8x)"
  echo "  median h2load (h2 over TLS): faultd $FH rps, nginx $NH rps, ratio $(ratio "$FH" "$NH")x (target >= 0.8x)"
fi

if [[ $WHAT == b || $WHAT == all ]]; then
  echo "== (b) new handshakes per second, no resumption: $S_TIME_CLIENTS x openssl s_time -new, ${HS_SECS}s, $ROUNDS alternating rounds"
  : > "$WORK/fd_hs"; : > "$WORK/ng_hs"
  for i in $(seq "$ROUNDS"); do
    for who in fd ng; do
      port=$FAULTD_PORT; [ $who = ng ] && port=$NGINX_TLS
      [ $who = fd ] && read -r full0 resumed0 < <(faultd_handshakes)
      counted_run "$who" "$HS_SECS" s_time_clients "$port" "$HS_SECS"
      read -r rps busy < "$WORK/counted"
      note=""
      if [ $who = fd ]; then
        read -r full1 resumed1 < <(faultd_handshakes)
        note=" ($((full1 - full0)) full handshakes, $((resumed1 - resumed0)) resumed, by faultd's recording)"
        if [ $((resumed1 - resumed0)) -ne 0 ]; then echo "  round $i: the client resumed sessions with faultd; not a full-handshake figure" >&2; exit 3; fi
      fi
      echo "$rps" >> "$WORK/${who}_hs"
      echo "  round $i $who: $rps handshakes/s (one request per connection, counted at the server; server at ${busy}% of its core)$note"
    done
  done
  FH=$(median < "$WORK/fd_hs"); NH=$(median < "$WORK/ng_hs")
  echo "  median new handshakes/s: faultd $FH, nginx $NH, ratio $(ratio "$FH" "$NH")x (target >= 0.8x)"
fi

# Everything but nginx stops: (c) measures the client against nginx alone.
kill "$FAULTD_PID" 2>/dev/null || true; wait "$FAULTD_PID" 2>/dev/null || true

if [[ $WHAT == c || $WHAT == all ]]; then
  echo "== (c) loadgen at ${LG_RATE}/s for ${LG_SECS}s against nginx, HTTPS vs cleartext, whole-process CPU per request from /proc, $ROUNDS alternating rounds"
  : > "$WORK/tls_cpu"; : > "$WORK/plain_cpu"
  for i in $(seq "$ROUNDS"); do
    for kind in tls plain; do
      url="https://127.0.0.1:$NGINX_TLS/ok"; extra=(--ca "$WORK/ca.pem")
      [ $kind = plain ] && url="http://127.0.0.1:$NGINX_PLAIN/ok" && extra=()
      taskset -c 1 "$LOADGEN" --url "$url" --rate "${LG_RATE}/s" --duration "${LG_SECS}s" --connections 50 "${extra[@]}" \
        > "$WORK/lg.out" 2>&1 &
      lg=$!
      # The last reading before the process is gone: at most 50 ms of its teardown are not counted.
      cpu=0
      while stat=$(cat "/proc/$lg/stat" 2> /dev/null) && [ "$(awk '{print $3}' <<<"$stat")" != Z ]; do
        cpu=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' <<<"$stat")
        sleep 0.05
      done
      wait "$lg" || { cat "$WORK/lg.out" >&2; exit 3; }
      done_n=$(sed -n 's/.*Outcomes: ok \([0-9]*\).*/\1/p' "$WORK/lg.out")
      hs=$(sed -n 's/.*TLS handshakes: \(.*\)/\1/p' "$WORK/lg.out")
      per=$(awk -v c="$cpu" -v n="${done_n:-0}" 'BEGIN {printf "%.2f", (n > 0 ? c / n * 1e6 : 0)}')
      echo "$per" >> "$WORK/${kind}_cpu"
      echo "  round $i $kind: ${done_n:-0} ok, ${cpu} s CPU, $per us per request${hs:+ (TLS handshakes: $hs)}"
    done
  done
  T=$(median < "$WORK/tls_cpu"); P=$(median < "$WORK/plain_cpu")
  echo "  median CPU per request: HTTPS $T us, cleartext $P us, ratio $(ratio "$T" "$P")x (target <= 1.5x)"
fi
