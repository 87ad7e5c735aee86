#!/usr/bin/env bash
# faultd's PostgreSQL routes: what reading the protocol costs over moving bytes. pgbench against one PostgreSQL
# through two routes of one faultd (one tokio worker): `bytes`, a plain TCP route, and `postgres`, the same route
# with `protocol: postgres` and one entry that matches no statement (every statement is framed, paired with its
# reply, matched against the entry's regex and recorded). Rounds alternate (bytes, postgres, bytes, ...); each
# round reads faultd's CPU time (user + system, from /proc) before and after, and divides it by the transactions
# pgbench completed: faultd's CPU time per transaction. Prints each round, the medians per route and their ratio
# (target: postgres / bytes <= 1.3), per pgbench mode (simple: the simple query protocol; prepared: the extended
# protocol with prepared statements). 127.0.0.1 only, every run bounded, every server stopped on exit.
# Usage: bench/tcp/postgres.sh
#   env: ROUNDS=5 SECS=5 CLIENTS=8 MODES="simple prepared" FAULTD=target/release/faultd
# Needs PostgreSQL's server and pgbench (Debian: apt-get install -y postgresql postgresql-contrib).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-5}; SECS=${SECS:-5}; CLIENTS=${CLIENTS:-8}; MODES=${MODES:-"simple prepared"}
FAULTD=${FAULTD:-target/release/faultd}
BIN=/usr/lib/postgresql/15/bin
for tool in "$BIN/initdb" "$BIN/postgres" pgbench psql; do
  command -v "$tool" > /dev/null || { echo "missing: $tool (apt-get install -y postgresql postgresql-contrib)" >&2; exit 2; }
done
[ -x "$FAULTD" ] || cargo build --release -p faultd

WORK=$(mktemp -d /tmp/pg-bench.XXXXXX)
source bench/lib.sh
trap cleanup EXIT

# PostgreSQL refuses to run as root: as root, the cluster belongs to nobody.
as_pg=()
if [ "$(id -u)" = 0 ]; then
  chown nobody:nogroup "$WORK"
  as_pg=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
PG_PORT=$(free_port)
"${as_pg[@]}" "$BIN/initdb" -D "$WORK/data" -U postgres --auth=trust -E UTF8 --no-sync > "$WORK/initdb.log"
"${as_pg[@]}" "$BIN/postgres" -D "$WORK/data" -p "$PG_PORT" -k "$WORK" -c listen_addresses=127.0.0.1 \
  -c fsync=off -c synchronous_commit=off -c max_connections=50 > "$WORK/postgres.log" 2>&1 &
PIDS+=($!)
wait_port "$PG_PORT"
for _ in $(seq 100); do psql -X -h 127.0.0.1 -p "$PG_PORT" -U postgres -c 'select 1' > /dev/null 2>&1 && break; sleep 0.1; done
pgbench -i -q -s 2 -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres > "$WORK/pgbench-init.log" 2>&1

BYTES_PORT=$(free_port); PG_ROUTE_PORT=$(free_port); HTTP=$(free_port); CONTROL=$(free_port)
cat > "$WORK/faultd.yaml" <<YAML
seed: 1
routes:
  bytes:    { tcp: { listen: 127.0.0.1:$BYTES_PORT, upstream: 127.0.0.1:$PG_PORT } }
  postgres: { tcp: { listen: 127.0.0.1:$PG_ROUTE_PORT, upstream: 127.0.0.1:$PG_PORT, protocol: postgres },
              postgres: [ { name: never, match: { statement: "^NEVER MATCHES" }, terminate: true } ] }
YAML
TOKIO_WORKER_THREADS=1 "$FAULTD" --config "$WORK/faultd.yaml" --listen "127.0.0.1:$HTTP" \
  --control "127.0.0.1:$CONTROL" > "$WORK/faultd.log" 2>&1 &
FD_PID=$!; PIDS+=($FD_PID)
wait_port "$BYTES_PORT"; wait_port "$PG_ROUTE_PORT"

# One round: pgbench through PORT in MODE; prints "TPS CPU_US_PER_TX".
round() {
  local port=$1 mode=$2 before after out tx tps
  before=$(cpu_s "$FD_PID")
  out=$(pgbench -n -h 127.0.0.1 -p "$port" -U postgres -c "$CLIENTS" -j 2 -M "$mode" -T "$SECS" postgres 2>&1)
  after=$(cpu_s "$FD_PID")
  tx=$(awk '/number of transactions actually processed/ {print $NF}' <<< "$out" | cut -d/ -f1)
  tps=$(awk '/^tps = / {print $3; exit}' <<< "$out")
  awk -v a="$before" -v b="$after" -v n="$tx" -v t="$tps" 'BEGIN {printf "%s %.2f\n", t, (n > 0 ? (b - a) / n * 1e6 : 0)}'
}

echo "pgbench -c $CLIENTS -j 2 -T $SECS, $ROUNDS rounds per route and mode, faultd with one tokio worker"
for mode in $MODES; do
  : > "$WORK/bytes.$mode"; : > "$WORK/postgres.$mode"
  for r in $(seq "$ROUNDS"); do
    for route in bytes postgres; do
      port=$BYTES_PORT; [ "$route" = postgres ] && port=$PG_ROUTE_PORT
      read -r tps us < <(round "$port" "$mode")
      echo "$mode round $r $route: $tps tps, faultd $us us CPU per transaction"
      echo "$us" >> "$WORK/$route.$mode"
    done
  done
  b=$(median < "$WORK/bytes.$mode"); p=$(median < "$WORK/postgres.$mode")
  echo "$mode: median faultd CPU per transaction: bytes $b us, postgres $p us, ratio $(ratio "$p" "$b")x"
done
# The postgres route read every statement: faultd's recording counts them (all under `other`).
curl -s "http://127.0.0.1:$CONTROL/recording" | python3 -c '
import json, sys
pg = json.load(sys.stdin)["tcp_routes"]["postgres"]["postgres"]["statements"]
print("statements faultd paired with their replies on the postgres route:",
      sum(p["calls"] for s in pg.values() for p in s["phases"].values()))'
