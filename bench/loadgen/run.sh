#!/usr/bin/env bash
# loadgen benchmarks against nginx (one worker, small static response) on 127.0.0.1 only.
#   (a) saturation: loadgen vs wrk -t1, alternating, same connections, ratio of medians
#   (b) achieved rate and send-lag p99 at 1k, 5k, 20k rps
#   (c) RSS of a long run at 5k rps, sampled every 10 s
# Usage: bench/loadgen/run.sh [a|b|c|all]     env: ROUNDS=3 SAT_SECS=5 RATE_SECS=10 RSS_SECS=120 SERIES=table
# nginx is pinned to CPU 0 and the client under test to CPU 1, so the two clients get the same single core.
# Besides throughput, (a) prints each client's CPU time per request (user + sys, from /usr/bin/time): when nginx's
# core is the bottleneck (it is whenever other work shares CPU 0), throughput compares nginx's luck in the two
# runs, while CPU per request still compares the clients.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHAT=${1:-all}
ROUNDS=${ROUNDS:-3}; SAT_SECS=${SAT_SECS:-5}; RATE_SECS=${RATE_SECS:-10}; RSS_SECS=${RSS_SECS:-120}
CONNS=${CONNS:-50}
LOADGEN=target/release/loadgen
[ -x "$LOADGEN" ] || cargo build --release -p loadgen

WORK=$(mktemp -d /tmp/loadgen-bench.XXXXXX)
source bench/lib.sh
PORT=$(free_port)
write_nginx_conf "$WORK" "$PORT" 'return 200 "ok\n";'
taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" &
NGINX=$!
trap 'kill $NGINX 2>/dev/null; wait $NGINX 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 0.5
URL="http://127.0.0.1:$PORT/"
echo "nginx (1 worker, CPU 0) on $URL; clients on CPU 1; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# "2.91ms" / "309.50us" / "1.20s" -> microseconds
to_us() { awk '{v=$1; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v); m=(u=="ns")?0.001:(u=="us")?1:(u=="ms")?1000:1000000; printf "%.1f\n", v*m}'; }
# CPU seconds (user + sys) recorded by /usr/bin/time -f '%U %S' into $1
cpu_of() { awk '{s=$1+$2} END {print s}' "$1"; }

if [[ $WHAT == a || $WHAT == all ]]; then
  echo "== (a) saturation, $CONNS connections, ${SAT_SECS}s per run, $ROUNDS alternating rounds"
  : > "$WORK/wrk"; : > "$WORK/lg"; : > "$WORK/wrk-cpu"; : > "$WORK/lg-cpu"
  for i in $(seq "$ROUNDS"); do
    w=$(/usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 wrk -t1 -c"$CONNS" -d"${SAT_SECS}s" "$URL" \
          | awk '/Requests\/sec/ {print $2}')
    wc=$(awk -v c="$(cpu_of "$WORK/t")" -v r="$w" -v s="$SAT_SECS" 'BEGIN {printf "%.2f", c/(r*s)*1e6}')
    # Saturation is a closed-loop figure (wrk keeps CONNS requests outstanding), so loadgen runs its closed
    # model with as many users: same concurrency, same single core (its default: one sending thread).
    l=$(/usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c 1 "$LOADGEN" --url "$URL" --users "$CONNS" \
          --duration "${SAT_SECS}s" --connections "$CONNS" | awk '/Requests\/sec/ {print $4}')
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
    for rate in 1000 5000 20000; do
      out=$("$LOADGEN" --url "$URL" --rate "${rate}/s" --duration "${RATE_SECS}s" --connections 200)
      sent=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      lag=$(grep 'Send lag' <<<"$out" | sed 's/.*p99 \([^,]*\),.*/\1/')
      lag50=$(grep 'Send lag' <<<"$out" | sed 's/.*p50 \([^,]*\),.*/\1/')
      lagmax=$(grep 'Send lag' <<<"$out" | sed 's/.*max \(.*\)$/\1/')
      p99=$(awk '/ 99.000%/ {print $2" corrected, "$3" uncorrected"}' <<<"$out")
      dev=$(awk -v s="$sent" -v r="$rate" 'BEGIN {printf "%+.3f%%", (s-r)/r*100}')
      echo "  round $i, target ${rate}/s: achieved ${sent}/s ($dev), send lag p50 $lag50, p99 $lag (max $lagmax), latency p99 $p99"
      to_us <<<"$lag" >> "$WORK/lag-$rate"
    done
  done
  for rate in 1000 5000 20000; do
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
