#!/usr/bin/env bash
# A soak run: what a run of hours costs the runner and its report. `faultline run bench/soak/soak.yaml` for
# DURATION at 1,000 requests per second against the bundled demo, with the embedded faultd cycling every 5 minutes
# (4 minutes healthy, 1 minute of brownout: pricing at 1 s with 20% of its calls answered 503), 127.0.0.1 only.
#   The demo, faultd and the load generator all run inside the runner's process (the demo and faultd embedded,
#   loadgen as a library), so by default one process is measured. AGENTS=1 moves the load generator into an agent
#   child process (`faultline run --agents 1` starts `faultline agent`), measured on its own line.
#   Every minute: each process's resident memory (VmRSS, MB) and CPU (user + system, seconds so far, and the
#   share of one core over the last minute). At the end: the verdicts' exit code, the report folder's size per
#   file and in all, and that size per hour of run.
# Usage: bench/soak/run.sh        env: DURATION=1h (e.g. 10m for a short try) AGENTS=0 (or 1) KEEP=0 (1 keeps the
#        report folder, printed at the end) FAULTLINE=target/release/faultline (another build to compare)
# Needs python3 (a free port is not needed: every listener takes port 0) and the release build of faultline.
# The run is bounded by DURATION plus the runner's own deadline; the script stops the runner if it outlives that
# by 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${DURATION:-1h}; AGENTS=${AGENTS:-0}; KEEP=${KEEP:-0}
FAULTLINE=${FAULTLINE:-target/release/faultline}
missing=()
for tool in python3 awk du; do command -v "$tool" > /dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing: ${missing[*]} (apt-get install -y python3 gawk coreutils)" >&2
  exit 2
fi
[ -x "$FAULTLINE" ] || cargo build --release -p faultline

WORK=$(mktemp -d /tmp/soak-bench.XXXXXX)
source bench/lib.sh
if [ "$KEEP" = 1 ]; then trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT; else trap cleanup EXIT; fi

# DURATION in seconds ("90s", "10m", "2h", "1h30m").
secs=$(python3 -c '
import re, sys
s = sys.argv[1]; t = 0
for n, u in re.findall(r"(\d+)(h|m|s)", s): t += int(n) * {"h": 3600, "m": 60, "s": 1}[u]
if not t or re.sub(r"\d+(h|m|s)", "", s): sys.exit("DURATION: a duration such as 10m, 1h or 1h30m, got " + s)
print(t)' "$DURATION")

# One cycle per 5 minutes after the first (which the scenario holds): healthy-N at 5(N-1) min, brownout-N 4 min later.
cycles=""
for ((n = 2; (n - 1) * 300 < secs; n++)); do
  cycles+="    - { name: healthy-$n, at: $(((n - 1) * 5))m, routes: { pricing: healthy } }"$'\n'
  (((n - 1) * 300 + 240 < secs)) && cycles+="    - { name: brownout-$n, at: $(((n - 1) * 5 + 4))m, routes: *brownout }"$'\n'
done
export DURATION SOAK_CYCLES="$cycles"
"$FAULTLINE" validate bench/soak/soak.yaml

args=(run bench/soak/soak.yaml --report-dir "$WORK/report")
[ "$AGENTS" = 1 ] && args+=(--agents 1)
echo "soak: ${secs}s at 1000/s, a brownout minute every 5 minutes; load generator $([ "$AGENTS" = 1 ] && echo "in an agent process" || echo "inside the runner")"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
"$FAULTLINE" "${args[@]}" > "$WORK/run.out" 2>&1 &
RUNNER=$!; PIDS+=($RUNNER)

rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "-"; }
# The share of one core a process used between two CPU readings a minute apart, in percent.
core_pct() { awk -v a="$1" -v b="$2" -v s="$3" 'BEGIN {printf "%.0f", (b - a) / s * 100}'; }
declare -A last_cpu
sample() {
  local name=$1 pid=$2 cpu
  cpu=$(cpu_s "$pid" 2>/dev/null) || return 0
  printf '  %-8s rss %7s MB  cpu %8.1f s  (%s%% of a core over the minute)\n' "$name" "$(rss_mb "$pid")" "$cpu" \
    "$(core_pct "${last_cpu[$name]:-0}" "$cpu" 60)"
  last_cpu[$name]=$cpu
}
start=$(date +%s); minute=0
deadline=$((start + secs + 300))
while kill -0 "$RUNNER" 2>/dev/null; do
  for _ in $(seq 60); do kill -0 "$RUNNER" 2>/dev/null || break; sleep 1; done
  kill -0 "$RUNNER" 2>/dev/null || break
  minute=$((minute + 1))
  echo "minute $minute:"
  sample runner "$RUNNER"
  if [ "$AGENTS" = 1 ]; then
    for child in $(cat "/proc/$RUNNER/task/"*/children 2>/dev/null); do
      # The agents are the runner's children started as `faultline agent --runner ADDR`.
      grep -qa -e '--runner' "/proc/$child/cmdline" 2>/dev/null && sample loadgen "$child"
    done
  fi
  if (($(date +%s) > deadline)); then echo "the runner outlived its run by 5 minutes: stopped" >&2; kill "$RUNNER"; fi
done
set +e; wait "$RUNNER"; code=$?; set -e
PIDS=()
echo "runner exit code $code ($(($(date +%s) - start)) s); its last lines:"
tail -n 12 "$WORK/run.out" | sed 's/^/  | /'
echo "report folder, per file (bytes):"
(cd "$WORK/report" && find . -type f -printf '%s %P\n' | sort -rn | awk '{printf "  %12s  %s\n", $1, $2}')
total=$(find "$WORK/report" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
echo "  $(printf '%12s' "$total")  in all: $(awk -v t="$total" -v s="$secs" 'BEGIN {printf "%.1f MB, %.1f MB per hour of run", t / 1e6, t / 1e6 / s * 3600}')"
[ "$KEEP" = 1 ] && echo "kept: $WORK/report"
exit 0
