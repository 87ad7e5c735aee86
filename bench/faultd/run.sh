#!/usr/bin/env bash
# faultd benchmarks, 127.0.0.1 only, every run bounded in time; prints results (figures go to bench/faultd.md).
#   (a) throughput and added latency of a healthy faultd route vs nginx returning the same bytes ({"ok":true},
#       application/json): wrk -t1 -c50 saturation rps, counted by each server (nginx's stub_status, faultd's
#       recording) over the run (ratio of medians, target >= 1.0x nginx) and, at a fixed
#       2000/s from loadgen, the latency faultd adds over nginx (p50/p99, from the actual send). A third server
#       alternates with them, bench-floor (bench/floor): the same answer on faultd's runtime with nothing but
#       httparse per request, counted at itself, so the figures say how much of the gap is the runtime's.
#   (b) delay accuracy: a fixed 50 ms delay at 500/s (DELAY_RATE) from loadgen; error = client-measured latency
#       - 50 ms at p50/p99/p99.9 (target p99 <= 1 ms), and faultd's CPU time per round; nginx at the same rate
#       gives the loopback + client floor.
#   (c) RSS per held call with 1k, 5k, 19k hung calls (target <= 10 KB); a fresh faultd per count, RSS from
#       /proc/PID/status before and after, the calls confirmed by faultd's own faultd_in_flight. The same for calls
#       held by a long delay (still served by hyper), for comparison.
#   (d) user-space instructions per request of the healthy route, counted by valgrind's callgrind under wrk (with
#       a Host header only, then with four more headers per request): two runs of different lengths, and the
#       difference of their counts over the difference of their requests (by faultd's recording), so start-up and
#       shutdown drop out. Counted, not timed, so it tells two builds apart by a few per cent where timings on a
#       shared host move by ten or more. Then the same count (Host header only) for nginx (one process,
#       `master_process off`, counted by its stub_status) and bench-floor (counted at itself), for scale. Needs
#       valgrind; not part of "all".
# Usage: bench/faultd/run.sh [a|b|c|d|all]
#   env: ROUNDS=3 SAT_SECS=5 LAT_SECS=5 DELAY_SECS=10 DELAY_RATE=500 HELD="1000 5000 19000" KINDS="hang delay"
#        IR_SECS="2 6" (the two runs of (d))
#        FAULTD=target/release/faultd (another build to compare, e.g. one from before a change)
# The servers (nginx with one worker, faultd with one tokio worker) run on CPU 0, the clients on CPU 1. Runs
# alternate (faultd, nginx, faultd, nginx, ...) and the medians are quoted.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHAT=${1:-all}
ROUNDS=${ROUNDS:-3}; SAT_SECS=${SAT_SECS:-5}; LAT_SECS=${LAT_SECS:-5}; DELAY_SECS=${DELAY_SECS:-10}
DELAY_RATE=${DELAY_RATE:-500}
HELD=${HELD:-"1000 5000 19000"}; KINDS=${KINDS:-"hang delay"}
read -r -a IR_SECS <<< "${IR_SECS:-2 6}"
FAULTD=${FAULTD:-target/release/faultd}
LOADGEN=${LOADGEN:-target/release/loadgen}
FLOOR=${FLOOR:-target/release/bench-floor}
[ -x "$FAULTD" ] && [ -x "$LOADGEN" ] && [ -x "$FLOOR" ] || cargo build --release -p faultd -p loadgen -p bench-floor

WORK=$(mktemp -d /tmp/faultd-bench.XXXXXX)
source bench/lib.sh
NGINX_PORT=$(free_port); STATUS_PORT=$(free_port)
write_nginx_conf "$WORK" "$NGINX_PORT" "default_type application/json; return 200 '{\"ok\":true}';" "" "" \
  "server { listen 127.0.0.1:$STATUS_PORT; location / { stub_status; } }"
cat > "$WORK/faultd.yaml" <<'YAML'
seed: 1
routes:
  ok:    { path: /ok }
  delay: { path: /delay, latency: { fixed: 50ms } }
  hang:  { path: /hang/*, hang: 100% }
  held:  { path: /held/*, latency: { fixed: 10m } }
YAML

trap cleanup EXIT

# "221.95us" / "2.41ms" / "1.20s" -> milliseconds
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /ns$/) {sub(/ns$/,"",v); v/=1e6} else if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; printf "%.3f\n", v}'; }
# The uncorrected (actual send) latency at percentile $1 ("50.000%") from loadgen's table, in ms.
lg_pct() { awk -v p="$1" '$1 == p {print $3}' | to_ms; }

taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" &
PIDS+=($!)
FAULTD_PORT=$(free_port); FD_CONTROL=$(free_port)
TOKIO_WORKER_THREADS=1 taskset -c 0 "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$FAULTD_PORT" \
  --control "127.0.0.1:$FD_CONTROL" 2> "$WORK/faultd.log" &
FAULTD_PID=$!; PIDS+=($FAULTD_PID)
FLOOR_PORT=$(free_port)
taskset -c 0 "$FLOOR" "127.0.0.1:$FLOOR_PORT" &
FLOOR_PID=$!; PIDS+=($FLOOR_PID)
wait_port "$NGINX_PORT"; wait_port "$STATUS_PORT"; wait_port "$FAULTD_PORT"; wait_port "$FD_CONTROL"; wait_port "$FLOOR_PORT"
NGINX_WORKER=$(cat /proc/"$(cat "$WORK/nginx.pid")"/task/*/children | awk '{print $1}')
NGINX="http://127.0.0.1:$NGINX_PORT"; FD="http://127.0.0.1:$FAULTD_PORT"; FL="http://127.0.0.1:$FLOOR_PORT"
[ "$(curl -s "$NGINX/ok")" = "$(curl -s "$FD/ok")" ] || { echo "faultd and nginx answer different bodies" >&2; exit 3; }
[ "$(curl -s "$NGINX/ok")" = "$(curl -s "$FL/ok")" ] || { echo "bench-floor and nginx answer different bodies" >&2; exit 3; }
# Requests each server has served so far, by its own count: nginx's stub_status (this status request included,
# so between two readings nginx served after - before - 1 others), faultd's recording (calls of every route),
# bench-floor's /count (which it does not count).
served() {
  if [ "$1" = ng ]; then nginx_served "$STATUS_PORT"
  elif [ "$1" = fl ]; then curl -s "$FL/count"
  else curl -s "http://127.0.0.1:$FD_CONTROL/recording" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sum(v["totals"]["arrivals"] for v in r["routes"].values()))'
  fi
}
echo "nginx (1 worker), faultd (1 tokio worker) and bench-floor on CPU 0; clients on CPU 1; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $WHAT == a || $WHAT == all ]]; then
  echo "== (a) healthy route: wrk -t1 -c50 ${SAT_SECS}s saturation, then loadgen 2000/s ${LAT_SECS}s; $ROUNDS alternating rounds"
  for who in fd ng fl; do for f in rps p50 p99 eff usr sys; do : > "$WORK/${who}_$f"; done; done
  for i in $(seq "$ROUNDS"); do
    for who in fd ng fl; do
      case $who in fd) url=$FD/ok; pid=$FAULTD_PID;; ng) url=$NGINX/ok; pid=$NGINX_WORKER;; fl) url=$FL/ok; pid=$FLOOR_PID;; esac
      c0=$(cpu_s "$pid"); u0=$(cpu_user_sys "$pid"); n0=$(served $who); st0=$(steal_ticks)
      taskset -c 1 wrk -t1 -c50 -d"${SAT_SECS}s" "$url" > /dev/null
      st1=$(steal_ticks); n=$(( $(served $who) - n0 )); [ $who = ng ] && n=$((n - 1))
      u1=$(cpu_user_sys "$pid")
      # The server's user and system CPU per request, in microseconds: where its cost per request lies.
      read -r usr sys < <(awk -v a="$u0" -v b="$u1" -v n="$n" 'BEGIN {split(a, x, " "); split(b, y, " ");
        printf "%.2f %.2f\n", (y[1] - x[1]) / n * 1e6, (y[2] - x[2]) / n * 1e6}')
      echo "$usr" >> "$WORK/${who}_usr"; echo "$sys" >> "$WORK/${who}_sys"
      rps=$(awk -v n="$n" -v t="$SAT_SECS" 'BEGIN {printf "%.0f", n/t}')
      busy=$(awk -v a="$c0" -v b="$(cpu_s "$pid")" -v t="$SAT_SECS" 'BEGIN {printf "%.0f", (b-a)/t*100}')
      out=$(TOKIO_WORKER_THREADS=1 taskset -c 1 "$LOADGEN" --url "$url" --rate 2000/s --duration "${LAT_SECS}s" --connections 50)
      p50=$(lg_pct 50.000% <<<"$out"); p99=$(lg_pct 99.000% <<<"$out")
      echo "$rps" >> "$WORK/${who}_rps"; echo "$p50" >> "$WORK/${who}_p50"; echo "$p99" >> "$WORK/${who}_p99"
      # Requests per CPU-second of the server: on a shared machine the share of CPU 0 a server gets varies from
      # run to run, and this does not depend on it.
      awk -v r="$rps" -v b="$busy" 'BEGIN {printf "%.0f\n", (b > 0 ? r / (b / 100) : 0)}' >> "$WORK/${who}_eff"
      echo "  round $i $who: wrk $rps rps by the server's count (server used ${busy}% of its core, user $usr us + system $sys us per request; steal $(share_pct "$st0" "$st1")%); at 2000/s p50 $p50 ms, p99 $p99 ms"
    done
  done
  FR=$(median < "$WORK/fd_rps"); NR=$(median < "$WORK/ng_rps")
  FE=$(median < "$WORK/fd_eff"); NE=$(median < "$WORK/ng_eff")
  echo "  median requests per CPU-second of the server: faultd $FE, nginx $NE, ratio $(awk -v a="$FE" -v b="$NE" 'BEGIN {printf "%.2f", a/b}')x"
  F50=$(median < "$WORK/fd_p50"); N50=$(median < "$WORK/ng_p50"); F99=$(median < "$WORK/fd_p99"); N99=$(median < "$WORK/ng_p99")
  echo "  median rps: faultd $FR, nginx $NR, ratio $(awk -v a="$FR" -v b="$NR" 'BEGIN {printf "%.2f", a/b}')x (target >= 1.0x)"
  echo "  median latency at 2000/s: faultd p50 $F50 ms p99 $F99 ms; nginx p50 $N50 ms p99 $N99 ms;" \
       "added p50 $(awk -v a="$F50" -v b="$N50" 'BEGIN {printf "%.3f", a-b}') ms, p99 $(awk -v a="$F99" -v b="$N99" 'BEGIN {printf "%.3f", a-b}') ms"
  LR=$(median < "$WORK/fl_rps"); LE=$(median < "$WORK/fl_eff")
  echo "  the floor (bench-floor): median rps $LR, $(ratio "$LR" "$NR")x nginx's; faultd $(ratio "$FR" "$LR")x the floor's;" \
       "per CPU-second $LE, $(ratio "$LE" "$NE")x nginx's; at 2000/s p50 $(median < "$WORK/fl_p50") ms, p99 $(median < "$WORK/fl_p99") ms"
  echo "  median CPU per request, user + system: faultd $(median < "$WORK/fd_usr") + $(median < "$WORK/fd_sys") us," \
       "nginx $(median < "$WORK/ng_usr") + $(median < "$WORK/ng_sys") us, the floor $(median < "$WORK/fl_usr") + $(median < "$WORK/fl_sys") us"
  echo "  round by round, faultd/nginx: $(paste -d' ' "$WORK/fd_rps" "$WORK/ng_rps" | awk '{printf "%.2f ", $1/$2}');" \
       "floor/nginx: $(paste -d' ' "$WORK/fl_rps" "$WORK/ng_rps" | awk '{printf "%.2f ", $1/$2}')"
fi

if [[ $WHAT == b || $WHAT == all ]]; then
  echo "== (b) fixed 50 ms delay at ${DELAY_RATE}/s for ${DELAY_SECS}s (loadgen, 1 worker, CPU 1); nginx at the same rate as the floor"
  for f in e50 e99 e999 n50 n99 n999 cpu; do : > "$WORK/$f"; done
  for i in $(seq "$ROUNDS"); do
    # faultd's CPU time (user + sys) across the round, in ms: what waiting precisely costs.
    t0=$(cpu_s "$FAULTD_PID")
    out=$(TOKIO_WORKER_THREADS=1 taskset -c 1 "$LOADGEN" --url "$FD/delay" --rate "${DELAY_RATE}/s" --duration "${DELAY_SECS}s" --connections 200)
    t1=$(cpu_s "$FAULTD_PID")
    cpu=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", (b - a) * 1000}'); echo "$cpu" >> "$WORK/cpu"
    # Every call must have been answered: an error or a timeout would not be a delay.
    grep -q "Outcomes: ok $((DELAY_RATE * DELAY_SECS)), " <<<"$out" || { echo "$out" >&2; exit 3; }
    e50=$(lg_pct 50.000% <<<"$out" | awk '{printf "%.3f", $1-50}')
    e99=$(lg_pct 99.000% <<<"$out" | awk '{printf "%.3f", $1-50}')
    e999=$(lg_pct 99.900% <<<"$out" | awk '{printf "%.3f", $1-50}')
    echo "$e50" >> "$WORK/e50"; echo "$e99" >> "$WORK/e99"; echo "$e999" >> "$WORK/e999"
    out=$(TOKIO_WORKER_THREADS=1 taskset -c 1 "$LOADGEN" --url "$NGINX/ok" --rate "${DELAY_RATE}/s" --duration "${DELAY_SECS}s" --connections 200)
    n50=$(lg_pct 50.000% <<<"$out"); n99=$(lg_pct 99.000% <<<"$out"); n999=$(lg_pct 99.900% <<<"$out")
    echo "$n50" >> "$WORK/n50"; echo "$n99" >> "$WORK/n99"; echo "$n999" >> "$WORK/n999"
    echo "  round $i: faultd error p50 +$e50 ms, p99 +$e99 ms, p99.9 +$e999 ms, faultd CPU ${cpu} ms | nginx latency p50 $n50 ms, p99 $n99 ms, p99.9 $n999 ms"
  done
  echo "  median faultd error: p50 +$(median < "$WORK/e50") ms, p99 +$(median < "$WORK/e99") ms, p99.9 +$(median < "$WORK/e999") ms (target p99 <= 1 ms)"
  echo "  median nginx latency (the floor): p50 $(median < "$WORK/n50") ms, p99 $(median < "$WORK/n99") ms, p99.9 $(median < "$WORK/n999") ms"
  echo "  median faultd CPU per round: $(median < "$WORK/cpu") ms in ${DELAY_SECS} s"
fi

# The shared servers are not needed for (c): stop them so the held-call runs have the machine to themselves.
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
PIDS=()

if [[ $WHAT == c || $WHAT == all ]]; then
  echo "== (c) RSS per held call, a fresh faultd (default runtime) per count, $ROUNDS rounds"
  echo "   hang: the hung route (the target); delay: calls held by a 10 min fixed delay (for comparison)"
  ulimit -n 20000
  for kind in $KINDS; do
    for n in $HELD; do
      : > "$WORK/per"
      for i in $(seq "$ROUNDS"); do
        port=$(free_port); cport=$(free_port)
        "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$port" --control "127.0.0.1:$cport" \
          2> "$WORK/faultd-c.log" &
        pid=$!; PIDS+=($pid)
        wait_port "$port"; curl -s "http://127.0.0.1:$port/ok" > /dev/null
        path=/hang/1; [ "$kind" = delay ] && path=/held/1
        line=$(python3 bench/faultd/held_calls.py --pid "$pid" --port "$port" --control "$cport" --calls "$n" \
                 --path "$path")
        kill "$pid"; wait "$pid" 2>/dev/null || true; PIDS=()
        echo "  $kind $n held, round $i: $line"
        awk '{print $8}' <<<"$line" >> "$WORK/per"
      done
      echo "  $kind $n held: median $(median < "$WORK/per") bytes of RSS per held call (target <= 10240)"
    done
  done
fi

if [[ $WHAT == d ]]; then
  # Instructions are counted, not timed: the same build gives the same figure within a fraction of a per cent on a
  # host whose timings move by 10-20% from run to run, so two builds can be told apart by a change of a few per cent.
  command -v valgrind > /dev/null || { echo "(d) needs valgrind (Debian: apt-get install -y valgrind)" >&2; exit 2; }
  # "NAME: N instructions per request" from the two runs in irs ("requests instructions" each): the difference
  # of the runs leaves out what a server does once (start-up, shutdown).
  per_request() {
    awk -v s="$1" -v a="${irs[0]}" -v b="${irs[1]}" 'BEGIN {split(a, x, " "); split(b, y, " ");
      printf "  %s: %.0f instructions per request (from the difference of the runs: %d requests)\n", s, (y[2] - x[2]) / (y[1] - x[1]), y[1] - x[1]}'
  }
  echo "== (d) user-space instructions per request of faultd's healthy route (callgrind; wrk -t1 -c50, ${IR_SECS[*]} s runs)"
  # wrk's requests carry a Host header and nothing else; the second set adds the four more a client library sends.
  HEADERS=(-H "accept: */*" -H "accept-encoding: gzip" -H "user-agent: faultline-bench/1" -H "x-request-id: 5f0c2a9e41d7")
  for set in host headers; do
    irs=()
    for secs in "${IR_SECS[@]}"; do
      port=$(free_port); cport=$(free_port)
      TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.$secs" "$FAULTD" \
        --config "$WORK/faultd.yaml" --listen "127.0.0.1:$port" --control "127.0.0.1:$cport" 2> "$WORK/valgrind.$secs" &
      pid=$!; PIDS+=($pid)
      for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$port/ok" && break; sleep 0.1; done
      FD_CONTROL=$cport
      extra=(); [ $set = headers ] && extra=("${HEADERS[@]}")
      taskset -c 1 wrk -t1 -c50 -d"${secs}s" "${extra[@]}" "http://127.0.0.1:$port/ok" > /dev/null
      n=$(served fd)
      kill -INT "$pid"; wait "$pid" 2>/dev/null || true; PIDS=()
      ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$WORK/callgrind.$secs")
      echo "  $set, ${secs} s: $n requests, $ir instructions in all"
      irs+=("$n $ir")
    done
    per_request "$set"
  done
  # nginx and the floor under the same count, Host header only: how many instructions a request costs a server
  # that does nothing else. nginx runs as one process (no master) so callgrind sees the worker.
  for server in nginx floor; do
    irs=()
    for secs in "${IR_SECS[@]}"; do
      port=$(free_port); sport=$(free_port)
      if [ $server = nginx ]; then
        mkdir -p "$WORK/ng-ir"
        write_nginx_conf "$WORK/ng-ir" "$port" "default_type application/json; return 200 '{\"ok\":true}';" "" "" \
          "server { listen 127.0.0.1:$sport; location / { stub_status; } }"
        sed -i 's/^daemon off;/daemon off;\nmaster_process off;/' "$WORK/ng-ir/nginx.conf"
        valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.$server.$secs" nginx -p "$WORK/ng-ir" \
          -c "$WORK/ng-ir/nginx.conf" 2> "$WORK/valgrind.$server.$secs" &
      else
        TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.$server.$secs" \
          "$FLOOR" "127.0.0.1:$port" 2> "$WORK/valgrind.$server.$secs" &
      fi
      pid=$!; PIDS+=($pid)
      for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$port/ok" && break; sleep 0.1; done
      # nginx's count includes the status request that reads it; the floor does not count /count.
      count() { if [ $server = nginx ]; then nginx_served "$sport"; else curl -s "http://127.0.0.1:$port/count"; fi; }
      before=$(count)
      taskset -c 1 wrk -t1 -c50 -d"${secs}s" "http://127.0.0.1:$port/ok" > /dev/null
      n=$(( $(count) - before ))
      [ $server = nginx ] && n=$((n - 1))
      # nginx quits on QUIT; the floor stops on INT or TERM. Either way callgrind writes its file at exit.
      if [ $server = nginx ]; then kill -QUIT "$pid"; else kill -INT "$pid"; sleep 1; kill "$pid" 2>/dev/null || true; fi
      wait "$pid" 2>/dev/null || true; PIDS=()
      ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$WORK/callgrind.$server.$secs")
      echo "  $server, ${secs} s: $n requests, $ir instructions in all"
      irs+=("$n $ir")
    done
    per_request "$server"
  done
fi
