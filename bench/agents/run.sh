#!/usr/bin/env bash
# Distributed load against nginx (one worker on CPU 0, a small static answer, its stub_status counting requests)
# on 127.0.0.1 only: one loadgen process at RATE against N `loadgen agent` processes at RATE/N each under one
# `faultline run --agents N --agents-listen`, every client on CPU 1, alternating rounds.
#   per round and side: requests nginx served (stub_status, before and after), CPU of the load generators
#   (user + sys from /usr/bin/time: the one process, or the sum of the N agents), CPU of the runner, latency
#   p50 / p99 from the intended send time (loadgen's table; the merged result.json), and for the agents their
#   clock offsets and the runner's bucket-merge p99.
#   The runner is not pinned (it merges the agents' buckets; on a cluster it has a pod of its own), the agents are
#   pinned where CLIENT_CPUS says (CPU 1 by default, the one process's core: the same CPU budget for both).
#   A third side separates what the agents cost from what running N processes at RATE/N each costs: N plain
#   `loadgen --rate RATE/N` processes, independent (no runner, no shares, no streaming), on the same CPUs.
#   Separately, `cargo bench -p loadgen --bench merge` times merging one bucket of 4 agents alone.
# Usage: bench/agents/run.sh        env: ROUNDS=3 SECS=20 RATE=20000 AGENTS=4 CONNS=64 CLIENT_CPUS=1
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-20}; RATE=${RATE:-20000}; AGENTS=${AGENTS:-4}; CONNS=${CONNS:-64}
CLIENT_CPUS=${CLIENT_CPUS:-1}
LOADGEN=target/release/loadgen; FAULTLINE=target/release/faultline
[ -x "$LOADGEN" ] && [ -x "$FAULTLINE" ] || cargo build --release -p loadgen -p faultline

WORK=$(mktemp -d /tmp/agents-bench.XXXXXX)
source bench/lib.sh
trap cleanup EXIT
PORT=$(free_port); STATUS_PORT=$(free_port)
write_nginx_conf "$WORK" "$PORT" 'return 200 "ok\n";' "" "" \
  "server { listen 127.0.0.1:$STATUS_PORT; location / { stub_status; } }"
taskset -c 0 nginx -p "$WORK" -c "$WORK/nginx.conf" & PIDS+=($!)
wait_port "$PORT"; wait_port "$STATUS_PORT"
# Requests nginx has served so far (stub_status's third number on its third line counts every request; the
# status page's own requests are subtracted by reading it once before and once after).
served() { curl -s "http://127.0.0.1:$STATUS_PORT/" | awk 'NR==3 {print $3}'; }
cpu_of() { awk '{s=$1+$2} END {print s}' "$1"; }
# "294.91us" / "1.11ms" / "2s" -> milliseconds
to_ms() { awk '{v=$1; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v); m=(u=="ns")?1e-6:(u=="us")?1e-3:(u=="ms")?1:1000; printf "%.3f\n", v*m}'; }
echo "nginx (1 worker, CPU 0) on 127.0.0.1:$PORT; load generators on CPU $CLIENT_CPUS, the runner unpinned; $RATE/s for ${SECS}s; $AGENTS agents of $((RATE / AGENTS))/s"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"

cat > "$WORK/scenario.yaml" <<YAML
name: agents-bench
duration: ${SECS}s
seed: 3
dependency:
  routes:
    idle: { path: /never, latency: { fixed: 1ms } }
  phases: [ { name: run, at: 0s } ]
sut:
  url: http://127.0.0.1:$PORT
load:
  rate: $RATE/s
  timeout: 5s
  connections: $((CONNS / AGENTS))
  requests: [ { get: /load } ]
YAML

: > "$WORK/one-cpu"; : > "$WORK/ag-cpu"; : > "$WORK/one-p50"; : > "$WORK/ag-p50"; : > "$WORK/one-p99"; : > "$WORK/ag-p99"
: > "$WORK/merge"; : > "$WORK/runner-cpu"; : > "$WORK/plain-cpu"
expected=$((RATE * SECS))
for i in $(seq "$ROUNDS"); do
  # One process.
  before=$(served)
  out=$(/usr/bin/time -o "$WORK/t" -f '%U %S' taskset -c "$CLIENT_CPUS" "$LOADGEN" --url "http://127.0.0.1:$PORT/load" \
        --rate "$RATE/s" --duration "${SECS}s" --connections "$CONNS")
  n=$(( $(served) - before - 1 ))
  c=$(cpu_of "$WORK/t")
  p50=$(awk '/ 50.000%/ {print $2}' <<<"$out" | to_ms); p99=$(awk '/ 99.000%/ {print $2}' <<<"$out" | to_ms)
  echo "  round $i, one process: nginx served $n of $expected; CPU ${c} s ($(awk -v c="$c" -v n="$n" 'BEGIN {printf "%.2f", c/n*1e6}') us/request); p50 ${p50}ms, p99 ${p99}ms"
  awk -v c="$c" -v n="$n" 'BEGIN {printf "%.4f\n", c/n*1e6}' >> "$WORK/one-cpu"
  echo "$p50" >> "$WORK/one-p50"; echo "$p99" >> "$WORK/one-p99"

  # N plain loadgen processes at RATE/N each, independent of each other.
  before=$(served)
  plain=()
  for a in $(seq 0 $((AGENTS - 1))); do
    /usr/bin/time -o "$WORK/plain-$a" -f '%U %S' taskset -c "$CLIENT_CPUS" "$LOADGEN" --url "http://127.0.0.1:$PORT/load" \
      --rate "$((RATE / AGENTS))/s" --duration "${SECS}s" --connections "$((CONNS / AGENTS))" --seed "$((a + 1))" > /dev/null &
    plain+=($!)
  done
  for p in "${plain[@]}"; do wait "$p"; done
  n=$(( $(served) - before - 1 ))
  c=$(cat "$WORK"/plain-[0-9]* | awk '{s+=$1+$2} END {print s}')
  echo "  round $i, $AGENTS plain processes: nginx served $n of $expected; CPU ${c} s ($(awk -v c="$c" -v n="$n" 'BEGIN {printf "%.2f", c/n*1e6}') us/request)"
  awk -v c="$c" -v n="$n" 'BEGIN {printf "%.4f\n", c/n*1e6}' >> "$WORK/plain-cpu"

  # N agents under one runner.
  before=$(served)
  RUNNER_PORT=$(free_port)
  /usr/bin/time -o "$WORK/runner-t" -f '%U %S' "$FAULTLINE" run "$WORK/scenario.yaml" \
    --agents "$AGENTS" --agents-listen "127.0.0.1:$RUNNER_PORT" --report-dir "$WORK/run-$i" > "$WORK/run-$i.out" 2>&1 &
  runner=$!
  agents=()
  for a in $(seq 0 $((AGENTS - 1))); do
    /usr/bin/time -o "$WORK/agent-$a" -f '%U %S' taskset -c "$CLIENT_CPUS" "$LOADGEN" agent --runner "127.0.0.1:$RUNNER_PORT" --index "$a" \
      2> "$WORK/agent-$a.err" &
    agents+=($!)
  done
  for p in "${agents[@]}"; do wait "$p"; done
  wait "$runner" || { echo "the runner failed:"; tail -20 "$WORK/run-$i.out"; exit 1; }
  n=$(( $(served) - before - 1 ))
  c=$(cat "$WORK"/agent-[0-9]* | awk '{s+=$1+$2} END {print s}')
  rc=$(cpu_of "$WORK/runner-t")
  read -r p50 p99 merge offsets <<<"$(python3 - "$WORK/run-$i/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
l = r["phases"][0]["sut_latency"]
d = r["distributed"]
off = max(abs(a["clock_offset_ms"]) for a in d["agents"])
print(f'{l["p50_ms"]:.3f} {l["p99_ms"]:.3f} {d["bucket_merge_p99_ms"]:.3f} {off:.3f}')
PY
)"
  echo "  round $i, $AGENTS agents: nginx served $n of $expected; agents' CPU ${c} s ($(awk -v c="$c" -v n="$n" 'BEGIN {printf "%.2f", c/n*1e6}') us/request), runner ${rc} s; p50 ${p50}ms, p99 ${p99}ms; merge p99 ${merge} ms; largest clock offset ${offsets} ms"
  awk -v c="$c" -v n="$n" 'BEGIN {printf "%.4f\n", c/n*1e6}' >> "$WORK/ag-cpu"
  echo "$p50" >> "$WORK/ag-p50"; echo "$p99" >> "$WORK/ag-p99"; echo "$merge" >> "$WORK/merge"; echo "$rc" >> "$WORK/runner-cpu"
done
OC=$(median < "$WORK/one-cpu"); AC=$(median < "$WORK/ag-cpu")
O50=$(median < "$WORK/one-p50"); A50=$(median < "$WORK/ag-p50")
O99=$(median < "$WORK/one-p99"); A99=$(median < "$WORK/ag-p99")
PC=$(median < "$WORK/plain-cpu")
echo "median CPU per request: one process $OC us, $AGENTS agents $AC us: ratio $(ratio "$AC" "$OC") (target <= 1.1)"
echo "  of which running $AGENTS processes at $((RATE / AGENTS))/s: $AGENTS plain processes $PC us ($(ratio "$PC" "$OC") x one process); the agents' own cost: $(ratio "$AC" "$PC") x the plain processes"
echo "median latency: p50 one $O50 ms, agents $A50 ms (ratio $(ratio "$A50" "$O50")); p99 one $O99 ms, agents $A99 ms (ratio $(ratio "$A99" "$O99")) (target within 10%)"
echo "runner CPU median $(median < "$WORK/runner-cpu") s; bucket merge p99, median of rounds: $(median < "$WORK/merge") ms (target < 5 ms)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
