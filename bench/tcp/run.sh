#!/usr/bin/env bash
# faultd's TCP routes vs HAProxy (mode tcp, one thread), both in front of the same redis-server, 127.0.0.1 only,
# every run bounded; prints results (figures go to bench/tcp.md).
#   (a) throughput: redis-benchmark -t set,get with -P 16 and -P 1 through faultd, through HAProxy and straight to
#       Redis (the ceiling); requests per second as the client reports them and as Redis counts them
#       (INFO commandstats before and after: every request must have arrived), and requests per CPU-second of the
#       proxy (target: faultd >= 1.0x HAProxy's rps). Each round prints the host's steal time during it; the
#       ratios are also given round by round (faultd's round over the HAProxy round right after it), as the
#       median of those pairs and as the median of the pairs in which both rounds lost under STEAL_MAX percent.
#       Each round also prints Redis's CPU per request behind the proxy, Redis's sleeps and the proxy's preemptions per
#       1,000 requests, and CPU 0's idle share: both share CPU 0, so the rate depends on both. A third proxy
#       alternates with them, bench-relay (bench/floor): tokio's copy_bidirectional on faultd's runtime and nothing
#       else, so the figures say what faultd's routes cost over copying and where a plain tokio relay stands.
#   (b) added latency at a fixed 10,000 GET/s (redis_client.py rate: a fixed timetable, latency from the intended
#       send time) through faultd and HAProxy vs straight to Redis: p50/p99 (target: faultd adds <= 50 us at p50,
#       <= 200 us at p99).
#   (c) a latency toxic of 50 ms (downstream) on a second faultd route: error = latency - 50 ms at p50/p99/p99.9
#       (target p99 <= 1 ms), at 1,000 GET/s; Redis straight at the same rate gives the loopback + client floor.
#   (d) RSS per idle proxied connection at 10,000 connections (or as many as the open-file limit allows: faultd
#       holds two descriptors per connection), a fresh faultd (default runtime) per round, RSS from /proc before
#       and after; every connection confirmed at Redis (INFO clients). "fresh": never used; "ping": one PING
#       round trip each, then idle. HAProxy the same way, for comparison (target: faultd <= 16 KB).
#   (e) what framing RESP costs: one faultd (one tokio worker, CPU 0) with two routes to the same Redis, one plain
#       TCP and one `protocol: redis` with no entries, redis-benchmark -t set,get at -P 16 and -P 1 through each in
#       alternating rounds; faultd's CPU seconds per request counted at Redis (INFO stats total_commands_processed),
#       medians and the ratio redis/plain, also round by round (target: <= 1.3x). A CPU-time ratio of rounds side
#       by side, so it holds on a machine shared with other work, where rates would not.
# Usage: bench/tcp/run.sh [a|b|c|d|e|all]
#   env: ROUNDS=3 N_P16=2000000 N_P1=300000 CLIENTS=50 LAT_RATE=10000 LAT_SECS=10 LAT_CONNS=8
#        TOXIC_RATE=1000 TOXIC_SECS=10 IDLE=10000 KINDS="fresh ping" PROXIES="faultd haproxy"
#        FAULTD=target/release/faultd (another build to compare) RELAY=target/release/bench-relay STEAL_MAX=5
# Needs haproxy, redis-server, redis-benchmark (apt-get install -y haproxy redis-server) and python3.
# Redis, faultd (one tokio worker) and HAProxy (nbthread 1) run on CPU 0, the clients on CPU 1. Rounds alternate
# (faultd, HAProxy, relay, direct, faultd, ...) and the medians are quoted.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHAT=${1:-all}
ROUNDS=${ROUNDS:-3}; N_P16=${N_P16:-2000000}; N_P1=${N_P1:-300000}; CLIENTS=${CLIENTS:-50}
LAT_RATE=${LAT_RATE:-10000}; LAT_SECS=${LAT_SECS:-10}; LAT_CONNS=${LAT_CONNS:-8}
TOXIC_RATE=${TOXIC_RATE:-1000}; TOXIC_SECS=${TOXIC_SECS:-10}
IDLE=${IDLE:-10000}; KINDS=${KINDS:-"fresh ping"}; PROXIES=${PROXIES:-"faultd haproxy"}
FAULTD=${FAULTD:-target/release/faultd}
RELAY=${RELAY:-target/release/bench-relay}
STEAL_MAX=${STEAL_MAX:-5}
CLIENT=bench/tcp/redis_client.py
missing=()
for tool in haproxy redis-server redis-benchmark redis-cli python3; do
  command -v "$tool" > /dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing: ${missing[*]} (apt-get install -y haproxy redis-server python3)" >&2
  exit 2
fi
[ -x "$FAULTD" ] && [ -x "$RELAY" ] || cargo build --release -p faultd -p bench-floor

WORK=$(mktemp -d /tmp/tcp-bench.XXXXXX)
source bench/lib.sh
ulimit -n "$(ulimit -Hn)"

trap cleanup EXIT
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; local p keep=(); for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; PIDS=("${keep[@]}"); }

now_s() { date +%s.%N; }
# A process's context switches so far, summed over its threads: "VOLUNTARY INVOLUNTARY".
switches() { cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt/ {v += $2} /^nonvoluntary_ctxt/ {n += $2} END {print v, n}'; }
# Field $3 of two "VOLUNTARY INVOLUNTARY" readings, $1 before and $2 after: how many more, per 1,000 of $4.
per_thousand() { awk -v a="$1" -v b="$2" -v f="$3" -v n="$4" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.0f", (y[f] - x[f]) / n * 1000}'; }
# CPU 0's idle and total clock ticks so far ("IDLE TOTAL", idle including iowait), from /proc/stat.
cpu0_idle() { awk '$1 == "cpu0" {for (i = 2; i <= 9; i++) t += $i; print $5 + $6, t}' /proc/stat; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a - b}'; }
# Field $1 of the client's one-line answer ("sent N answered A p50_us X ...").
field() { awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'; }

REDIS_PORT=$(free_port)
mkdir -p "$WORK/redis"
# No persistence; clients enough for (d) (Redis needs maxclients + 32 descriptors).
taskset -c 0 redis-server --save '' --appendonly no --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/redis" \
  --maxclients $((IDLE + 100)) > "$WORK/redis.log" 2>&1 &
REDIS_PID=$!; PIDS+=($REDIS_PID)
wait_port "$REDIS_PORT"
rcli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
# GET and SET calls Redis has served so far.
served() { rcli info commandstats | awk -F'[:=,]' '/^cmdstat_(get|set):/ {n += $3} END {print n + 0}'; }

# Starts faultd with a healthy route db and a route slow with a 50 ms latency toxic, both to Redis; sets FD_PID,
# FD_PORT, SLOW_PORT, FD_CONTROL. $1: taskset CPU list, or "" for no pinning and the default runtime.
start_faultd() {
  FD_PORT=$(free_port); SLOW_PORT=$(free_port); FD_CONTROL=$(free_port); local http; http=$(free_port)
  cat > "$WORK/faultd.yaml" <<YAML
seed: 1
routes:
  db:   { tcp: { listen: 127.0.0.1:$FD_PORT, upstream: 127.0.0.1:$REDIS_PORT } }
  slow: { tcp: { listen: 127.0.0.1:$SLOW_PORT, upstream: 127.0.0.1:$REDIS_PORT },
          toxics: [ { type: latency, stream: downstream, attributes: { latency: 50 } } ] }
YAML
  if [ -n "$1" ]; then
    TOKIO_WORKER_THREADS=1 taskset -c "$1" "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$http" \
      --control "127.0.0.1:$FD_CONTROL" > "$WORK/faultd.log" 2>&1 &
  else
    "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$http" --control "127.0.0.1:$FD_CONTROL" \
      > "$WORK/faultd.log" 2>&1 &
  fi
  FD_PID=$!; PIDS+=($FD_PID)
  wait_port "$FD_PORT"; wait_port "$SLOW_PORT"
}

# Starts faultd (one tokio worker on CPU 0) with two routes to Redis and no toxics: plain (bytes only) and resp
# (`protocol: redis`, no entries); sets RESP_PID, PLAIN_PORT, RESP_PORT.
start_faultd_resp() {
  PLAIN_PORT=$(free_port); RESP_PORT=$(free_port); local http control; http=$(free_port); control=$(free_port)
  cat > "$WORK/faultd-resp.yaml" <<YAML
seed: 1
routes:
  plain: { tcp: { listen: 127.0.0.1:$PLAIN_PORT, upstream: 127.0.0.1:$REDIS_PORT } }
  resp:  { tcp: { listen: 127.0.0.1:$RESP_PORT, upstream: 127.0.0.1:$REDIS_PORT, protocol: redis } }
YAML
  TOKIO_WORKER_THREADS=1 taskset -c 0 "$FAULTD" --config "$WORK/faultd-resp.yaml" --listen "127.0.0.1:$http" \
    --control "127.0.0.1:$control" > "$WORK/faultd-resp.log" 2>&1 &
  RESP_PID=$!; PIDS+=($RESP_PID)
  wait_port "$PLAIN_PORT"; wait_port "$RESP_PORT"
}

# Starts HAProxy (mode tcp, one thread, no logs) in front of Redis; sets HA_PID, HA_PORT. $1: taskset CPU list
# or ""; $2: maxconn.
start_haproxy() {
  HA_PORT=$(free_port)
  cat > "$WORK/haproxy.cfg" <<CFG
global
  nbthread 1
  maxconn $2
defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h
listen redis
  bind 127.0.0.1:$HA_PORT
  server redis 127.0.0.1:$REDIS_PORT
CFG
  if [ -n "$1" ]; then
    taskset -c "$1" haproxy -db -f "$WORK/haproxy.cfg" > "$WORK/haproxy.log" 2>&1 &
  else
    haproxy -db -f "$WORK/haproxy.cfg" > "$WORK/haproxy.log" 2>&1 &
  fi
  HA_PID=$!; PIDS+=($HA_PID)
  wait_port "$HA_PORT" || { cat "$WORK/haproxy.log" >&2; return 1; }
}

if [[ $WHAT =~ ^(a|b|c|all)$ ]]; then
  start_faultd 0
  start_haproxy 0 4096
  for port in "$FD_PORT" "$HA_PORT"; do
    [ "$(redis-cli -h 127.0.0.1 -p "$port" ping)" = PONG ] || { echo "no PONG through port $port" >&2; exit 3; }
  done
  echo "redis-server $(redis-server --version | awk '{print $3}'), faultd (1 tokio worker), $(haproxy -v | head -1 | awk '{print $1, $3}') (nbthread 1) on CPU 0; clients on CPU 1; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [[ $WHAT == a || $WHAT == all ]]; then
  RELAY_PORT=$(free_port)
  taskset -c 0 "$RELAY" "127.0.0.1:$RELAY_PORT" "127.0.0.1:$REDIS_PORT" &
  RELAY_PID=$!; PIDS+=($RELAY_PID)
  wait_port "$RELAY_PORT"
  [ "$(redis-cli -h 127.0.0.1 -p "$RELAY_PORT" ping)" = PONG ] || { echo "no PONG through bench-relay" >&2; exit 3; }
  for P in 16 1; do
    N=$N_P16; [ "$P" = 1 ] && N=$N_P1
    echo "== (a) redis-benchmark -c $CLIENTS -t set,get -P $P -n $N, $ROUNDS alternating rounds"
    for who in fd ha relay direct; do : > "$WORK/rps_$who"; : > "$WORK/srv_$who"; : > "$WORK/eff_$who"; done
    : > "$WORK/pairs"; : > "$WORK/pairs_calm"
    for i in $(seq "$ROUNDS"); do
      for who in fd ha relay direct; do
        port=$FD_PORT; pid=$FD_PID
        [ $who = ha ] && port=$HA_PORT && pid=$HA_PID
        [ $who = relay ] && port=$RELAY_PORT && pid=$RELAY_PID
        [ $who = direct ] && port=$REDIS_PORT && pid=$REDIS_PID
        s0=$(served); c0=$(cpu_s "$pid"); r0=$(cpu_s "$REDIS_PID"); w0=$(switches "$REDIS_PID"); x0=$(switches "$pid"); i0=$(cpu0_idle); st0=$(steal_ticks); t0=$(now_s)
        out=$(taskset -c 1 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -t set,get -P "$P" -n "$N" --csv)
        t1=$(now_s); st1=$(steal_ticks); i1=$(cpu0_idle); x1=$(switches "$pid"); w1=$(switches "$REDIS_PID"); r1=$(cpu_s "$REDIS_PID"); c1=$(cpu_s "$pid"); s1=$(served)
        stolen=$(share_pct "$st0" "$st1")
        set_rps=$(awk -F'"' '$2 == "SET" {print $4}' <<<"$out"); get_rps=$(awk -F'"' '$2 == "GET" {print $4}' <<<"$out")
        arrived=$((s1 - s0))
        # Every request sent must have been served once: a proxy that lost or doubled one is not measured.
        [ "$arrived" = $((2 * N)) ] || { echo "Redis served $arrived of $((2 * N)) requests ($who)" >&2; exit 3; }
        # The client's figure for the pair: 2N over the time of the two tests (the harmonic mean of the two rates).
        rps=$(awk -v s="$set_rps" -v g="$get_rps" -v n="$N" 'BEGIN {printf "%.0f", 2 * n / (n / s + n / g)}')
        srv=$(awk -v a="$arrived" -v x="$t0" -v y="$t1" 'BEGIN {printf "%.0f", a / (y - x)}')
        busy=$(awk -v a="$c0" -v b="$c1" -v x="$t0" -v y="$t1" 'BEGIN {printf "%.0f", (b - a) / (y - x) * 100}')
        eff=$(awk -v a="$arrived" -v c0="$c0" -v c1="$c1" 'BEGIN {printf "%.0f", (c1 > c0 ? a / (c1 - c0) : 0)}')
        # Redis's CPU per request (ns), its sleeps (voluntary switches) and the proxy's preemptions (involuntary
        # ones) per 1,000 requests, and CPU 0's idle share: with both at work on CPU 0, the proxy's rate depends on
        # what Redis spends per request behind it as much as on its own cost.
        redis_ns=$(awk -v a="$arrived" -v r0="$r0" -v r1="$r1" 'BEGIN {printf "%.0f", (r1 - r0) / a * 1e9}')
        sleeps=$(per_thousand "$w0" "$w1" 1 "$arrived"); preempted=$(per_thousand "$x0" "$x1" 2 "$arrived")
        idle=$(share_pct "$i0" "$i1")
        echo "$rps" >> "$WORK/rps_$who"; echo "$srv" >> "$WORK/srv_$who"; echo "$eff" >> "$WORK/eff_$who"
        [ $who = fd ] && fd_srv=$srv && fd_eff=$eff && fd_stolen=$stolen
        if [ $who = ha ]; then
          pair="$(ratio "$fd_srv" "$srv") $(ratio "$fd_eff" "$eff")"
          echo "$pair" >> "$WORK/pairs"
          [ "$fd_stolen" -lt "$STEAL_MAX" ] && [ "$stolen" -lt "$STEAL_MAX" ] && echo "$pair" >> "$WORK/pairs_calm"
        fi
        name=faultd; [ $who = ha ] && name=haproxy; [ $who = relay ] && name=bench-relay; [ $who = direct ] && name=redis
        echo "  round $i $who: client SET $set_rps GET $get_rps rps (pair $rps); Redis served $arrived in $(awk -v x="$t0" -v y="$t1" 'BEGIN {printf "%.2f", y - x}') s = $srv rps; $name used ${busy}% of CPU 0, $eff requests per CPU-second; Redis ${redis_ns} ns of CPU per request and $sleeps sleeps per 1,000 requests, $name preempted $preempted times per 1,000; CPU 0 idle ${idle}%; steal ${stolen}%"
      done
    done
    F=$(median < "$WORK/rps_fd"); H=$(median < "$WORK/rps_ha"); D=$(median < "$WORK/rps_direct")
    FS=$(median < "$WORK/srv_fd"); HS=$(median < "$WORK/srv_ha"); DS=$(median < "$WORK/srv_direct")
    FE=$(median < "$WORK/eff_fd"); HE=$(median < "$WORK/eff_ha")
    RS=$(median < "$WORK/srv_relay"); RE=$(median < "$WORK/eff_relay")
    echo "  -P $P median client rps: faultd $F, haproxy $H, direct $D; faultd/haproxy $(ratio "$F" "$H")x (target >= 1.0x), faultd/direct $(ratio "$F" "$D")x"
    echo "  -P $P median rps counted at Redis: faultd $FS, haproxy $HS, direct $DS; faultd/haproxy $(ratio "$FS" "$HS")x"
    echo "  -P $P median requests per CPU-second of the proxy: faultd $FE, haproxy $HE; faultd/haproxy $(ratio "$FE" "$HE")x"
    echo "  -P $P bench-relay: median rps counted at Redis $RS, $(ratio "$RS" "$HS")x haproxy's; faultd $(ratio "$FS" "$RS")x the relay's;" \
         "requests per CPU-second $RE, $(ratio "$RE" "$HE")x haproxy's"
    echo "  -P $P round by round (at Redis), faultd/haproxy: $(cut -d' ' -f1 "$WORK/pairs" | tr '\n' ' ')-> median $(cut -d' ' -f1 "$WORK/pairs" | median)x; per CPU-second median $(cut -d' ' -f2 "$WORK/pairs" | median)x"
    if [ -s "$WORK/pairs_calm" ]; then
      echo "  -P $P the $(wc -l < "$WORK/pairs_calm") pairs with steal under ${STEAL_MAX}% in both rounds: $(cut -d' ' -f1 "$WORK/pairs_calm" | tr '\n' ' ')-> median $(cut -d' ' -f1 "$WORK/pairs_calm" | median)x; per CPU-second median $(cut -d' ' -f2 "$WORK/pairs_calm" | median)x"
    else
      echo "  -P $P no pair of rounds had steal under ${STEAL_MAX}% in both"
    fi
  done
fi

# One fixed-rate run (redis_client.py rate); prints the client's line. $1 port, $2 rate, $3 seconds, $4 connections.
# The first second (a quarter of shorter runs) is left out of the figures.
rate_run() {
  taskset -c 1 python3 "$CLIENT" rate --port "$1" --rate "$2" --seconds "$3" --connections "$4" \
    --warmup "$(awk -v s="$3" 'BEGIN {print (s >= 4 ? 1 : s / 4)}')"
}

if [[ $WHAT == b || $WHAT == all ]]; then
  echo "== (b) fixed $LAT_RATE GET/s for ${LAT_SECS}s over $LAT_CONNS connections ($CLIENT rate, CPU 1), latency from the intended send; $ROUNDS alternating rounds"
  for who in fd ha direct; do : > "$WORK/p50_$who"; : > "$WORK/p99_$who"; done
  for i in $(seq "$ROUNDS"); do
    for who in fd ha direct; do
      port=$FD_PORT; [ $who = ha ] && port=$HA_PORT; [ $who = direct ] && port=$REDIS_PORT
      line=$(rate_run "$port" "$LAT_RATE" "$LAT_SECS" "$LAT_CONNS")
      field p50_us <<<"$line" >> "$WORK/p50_$who"; field p99_us <<<"$line" >> "$WORK/p99_$who"
      echo "  round $i $who: $line"
    done
  done
  for who in fd ha direct; do
    eval "${who}50=$(median < "$WORK/p50_$who"); ${who}99=$(median < "$WORK/p99_$who")"
  done
  echo "  median latency (us): direct p50 $direct50 p99 $direct99; faultd p50 $fd50 p99 $fd99; haproxy p50 $ha50 p99 $ha99"
  echo "  added over direct (us): faultd p50 +$(minus "$fd50" "$direct50") p99 +$(minus "$fd99" "$direct99") (target <= 50 / <= 200);" \
       "haproxy p50 +$(minus "$ha50" "$direct50") p99 +$(minus "$ha99" "$direct99")"
fi

if [[ $WHAT == c || $WHAT == all ]]; then
  echo "== (c) latency toxic 50 ms (downstream) at $TOXIC_RATE GET/s for ${TOXIC_SECS}s over 16 connections; Redis straight at the same rate as the floor; $ROUNDS rounds"
  for f in e50 e99 e999 n50 n99 n999 cpu; do : > "$WORK/$f"; done
  for i in $(seq "$ROUNDS"); do
    c0=$(cpu_s "$FD_PID")
    line=$(rate_run "$SLOW_PORT" "$TOXIC_RATE" "$TOXIC_SECS" 16)
    cpu=$(awk -v a="$c0" -v b="$(cpu_s "$FD_PID")" 'BEGIN {printf "%.0f", (b - a) * 1000}'); echo "$cpu" >> "$WORK/cpu"
    e50=$(field p50_us <<<"$line" | awk '{printf "%.3f", $1 / 1000 - 50}')
    e99=$(field p99_us <<<"$line" | awk '{printf "%.3f", $1 / 1000 - 50}')
    e999=$(field p999_us <<<"$line" | awk '{printf "%.3f", $1 / 1000 - 50}')
    echo "$e50" >> "$WORK/e50"; echo "$e99" >> "$WORK/e99"; echo "$e999" >> "$WORK/e999"
    floor=$(rate_run "$REDIS_PORT" "$TOXIC_RATE" "$TOXIC_SECS" 16)
    n50=$(field p50_us <<<"$floor" | awk '{printf "%.3f", $1 / 1000}'); n99=$(field p99_us <<<"$floor" | awk '{printf "%.3f", $1 / 1000}')
    n999=$(field p999_us <<<"$floor" | awk '{printf "%.3f", $1 / 1000}')
    echo "$n50" >> "$WORK/n50"; echo "$n99" >> "$WORK/n99"; echo "$n999" >> "$WORK/n999"
    echo "  round $i: faultd error p50 +$e50 ms, p99 +$e99 ms, p99.9 +$e999 ms, faultd CPU $cpu ms ($line) | direct p50 $n50 ms, p99 $n99 ms, p99.9 $n999 ms"
  done
  echo "  median error: p50 +$(median < "$WORK/e50") ms, p99 +$(median < "$WORK/e99") ms, p99.9 +$(median < "$WORK/e999") ms (target p99 <= 1 ms)"
  echo "  median direct latency (the floor): p50 $(median < "$WORK/n50") ms, p99 $(median < "$WORK/n99") ms, p99.9 $(median < "$WORK/n999") ms"
  echo "  median faultd CPU per round: $(median < "$WORK/cpu") ms in ${TOXIC_SECS} s"
fi

# The shared proxies are not needed for (d): stop them so the idle runs have the machine to themselves.
[ -n "${FD_PID:-}" ] && stop "$FD_PID"
[ -n "${HA_PID:-}" ] && stop "$HA_PID"

if [[ $WHAT == d || $WHAT == all ]]; then
  limit=$(ulimit -n)
  # A proxy holds two descriptors per connection (client and Redis) under one limit, plus a few of its own
  # (faultd about 20; HAProxy asks for 2 x maxconn + 14 at start and refuses to run with less).
  n=$(( (limit - 40) / 2 )); [ "$n" -gt "$IDLE" ] && n=$IDLE
  echo "== (d) RSS per idle proxied connection at $n connections (open-file limit $limit), a fresh proxy (unpinned, default runtime) per round"
  for proxy in $PROXIES; do
    for kind in $KINDS; do
      : > "$WORK/per"
      for i in $(seq "$ROUNDS"); do
        # The previous round's connections must be gone from Redis before this one counts its own.
        for _ in $(seq 100); do [ "$(rcli info clients | awk -F: '/^connected_clients/ {print $2+0}')" -le 1 ] && break; sleep 0.1; done
        if [ "$proxy" = faultd ]; then start_faultd ""; pid=$FD_PID; port=$FD_PORT
        else start_haproxy "" $((n + 5)); pid=$HA_PID; port=$HA_PORT; fi
        base=$(ls "/proc/$pid/fd" | wc -l)
        [ $((base + 2 * n)) -lt "$limit" ] || { echo "$proxy has $base files open: no room for $n connections" >&2; exit 3; }
        ping=(); [ "$kind" = ping ] && ping=(--ping)
        line=$(python3 "$CLIENT" idle --pid "$pid" --port "$port" --redis "$REDIS_PORT" --connections "$n" "${ping[@]}")
        stop "$pid"
        echo "  $proxy $kind, round $i: $line"
        field per_conn_bytes <<<"$line" >> "$WORK/per"
      done
      echo "  $proxy $kind: median $(median < "$WORK/per") bytes of RSS per idle connection at $n connections (target for faultd <= 16384)"
    done
  done
fi

if [[ $WHAT == e || $WHAT == all ]]; then
  start_faultd_resp
  for port in "$PLAIN_PORT" "$RESP_PORT"; do
    [ "$(redis-cli -h 127.0.0.1 -p "$port" ping)" = PONG ] || { echo "no PONG through port $port" >&2; exit 3; }
  done
  # Commands Redis has processed so far (each reading counts itself too: one in millions).
  processed() { rcli info stats | awk -F: '/^total_commands_processed/ {print $2 + 0}'; }
  echo "== (e) faultd's CPU per request, protocol: redis (no entries) vs plain TCP, one faultd with both routes (1 tokio worker, CPU 0), clients on CPU 1; load $(cut -d' ' -f1-3 /proc/loadavg)"
  for P in 16 1; do
    N=$N_P16; [ "$P" = 1 ] && N=$N_P1
    echo "== (e) redis-benchmark -c $CLIENTS -t set,get -P $P -n $N, $ROUNDS alternating rounds (resp, plain, resp, ...)"
    : > "$WORK/ns_resp"; : > "$WORK/ns_plain"; : > "$WORK/pairs_e"
    for i in $(seq "$ROUNDS"); do
      for who in resp plain; do
        port=$RESP_PORT; [ $who = plain ] && port=$PLAIN_PORT
        k0=$(processed); c0=$(cpu_s "$RESP_PID"); st0=$(steal_ticks); t0=$(now_s)
        taskset -c 1 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -t set,get -P "$P" -n "$N" --csv > /dev/null
        t1=$(now_s); st1=$(steal_ticks); c1=$(cpu_s "$RESP_PID"); k1=$(processed)
        arrived=$((k1 - k0))
        [ "$arrived" -ge $((2 * N)) ] || { echo "Redis processed $arrived of $((2 * N)) requests ($who)" >&2; exit 3; }
        ns=$(awk -v a="$arrived" -v c0="$c0" -v c1="$c1" 'BEGIN {printf "%.0f", (c1 - c0) / a * 1e9}')
        echo "$ns" >> "$WORK/ns_$who"
        [ $who = resp ] && resp_ns=$ns
        [ $who = plain ] && echo "$(ratio "$resp_ns" "$ns")" >> "$WORK/pairs_e"
        echo "  round $i $who: Redis processed $arrived in $(awk -v x="$t0" -v y="$t1" 'BEGIN {printf "%.2f", y - x}') s; faultd used $(minus "$c1" "$c0") CPU-s, $ns ns per request; steal $(share_pct "$st0" "$st1")%"
      done
    done
    R=$(median < "$WORK/ns_resp"); L=$(median < "$WORK/ns_plain")
    echo "  -P $P median faultd CPU per request: redis $R ns, plain $L ns: $(ratio "$R" "$L")x (target <= 1.3x)"
    echo "  -P $P round by round, redis/plain: $(tr '\n' ' ' < "$WORK/pairs_e")-> median $(median < "$WORK/pairs_e")x"
  done
fi
