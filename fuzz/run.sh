#!/usr/bin/env bash
# Runs every fuzz target for RUNS executions each (default 1,000,000) on stable Rust with cargo-fuzz
# (`cargo install cargo-fuzz`), without a sanitizer (`-s none`: sanitizers need nightly). The corpora start from
# the bundled scenarios (scenarios/*.yaml) and the control-API and Toxiproxy-API bodies, the import records, the RESP streams and the DNS queries in fuzz/seeds/. Prints libFuzzer's closing
# line per target ("Done N runs in S second(s)"); any panic stops the run with the crashing input in
# fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")"
RUNS="${RUNS:-1000000}"
# Every target, or those named as arguments (fuzz/run.sh toxiproxy_api). import_readers runs once per reader
# (IMPORT_READER), RUNS executions each; READERS narrows them (READERS="har otlp-json" fuzz/run.sh import_readers).
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(scenario_parse control_config control_route toxiproxy_api import_formats import_readers redis_resp dns_query postgres_v3)
READERS=(${READERS:-nginx nginx-timed envoy haproxy har otlp-json regex})
mkdir -p corpus/scenario_parse corpus/control_config corpus/control_route corpus/toxiproxy_api corpus/import_formats \
    corpus/redis_resp corpus/dns_query corpus/postgres_v3
cp ../scenarios/*.yaml corpus/scenario_parse/
cp seeds/control_config/*.json corpus/control_config/
cp seeds/control_route/*.json corpus/control_route/
cp seeds/toxiproxy_api/*.json corpus/toxiproxy_api/
cp seeds/import_formats/* corpus/import_formats/
cp seeds/redis_resp/* corpus/redis_resp/
cp seeds/dns_query/* corpus/dns_query/
cp seeds/postgres_v3/* corpus/postgres_v3/
# The readers' corpora start from the same records without the format byte import_formats reads first: with
# it, a HAR file or an OTLP/JSON export is not JSON, and the JSON readers would spend their runs on the parse error.
for reader in "${READERS[@]}"; do
    mkdir -p "corpus/import_readers-$reader"
    for seed in seeds/import_formats/*; do
        tail -c +2 "$seed" > "corpus/import_readers-$reader/seed-$(basename "$seed")"
    done
done
# One libFuzzer run: the target, its corpus, and what to call it.
fuzz_one() {
    local target=$1 corpus=$2 name=$3
    echo "== $name"
    log="$(mktemp)"
    if ! cargo fuzz run "$target" -s none --release "$corpus" -- \
        -runs="$RUNS" -max_len=8192 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 40 "$log"
        echo "FAILED: $name (the crashing input is in fuzz/artifacts/$target/)"
        exit 1
    fi
    grep -E "^(Done|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|INFO: seed corpus)" "$log"
    rm -f "$log"
}
for target in "${TARGETS[@]}"; do
    if [ "$target" = import_readers ]; then
        for reader in "${READERS[@]}"; do
            IMPORT_READER=$reader fuzz_one import_readers "corpus/import_readers-$reader" "import_readers ($reader)"
        done
    else
        fuzz_one "$target" "corpus/$target" "$target"
    fi
done
