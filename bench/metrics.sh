#!/usr/bin/env bash
# What recording metrics costs: KV GET req/s on two release `-dev` agents
# side by side, one recording every metric (the JSON intervals and the
# Prometheus registry, `prometheus_retention_time = "60s"`), the other with
# no recorder installed (`LEGATE_METRICS_RECORDER=off`); 32 clients, each
# run ROUND_SECONDS long, the two interleaved ROUNDS times; medians and
# spread (min..max) of each, and the ratio of the medians.
#
#   bash bench/metrics.sh          (ROUNDS=5 ROUND_SECONDS=5 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --release --quiet -p legate-cli -p legate-bench
BENCH=target/release/legate-bench
ROUNDS=${ROUNDS:-5}
ROUND_SECONDS=${ROUND_SECONDS:-5}

start() { # name, env assignment -> sets ${name}_http
    local http; http=$(port)
    env "$2" target/release/legate agent -dev -http-port="$http" -dns-port=-1 -grpc-port=-1 \
        -log-level=warn -hcl 'telemetry { prometheus_retention_time = "60s" }' \
        >"$work/$1.log" 2>&1 &
    pids+=($!)
    printf -v "${1}_http" '%s' "$http"
    wait_http "http://127.0.0.1:$http/v1/status/leader"
    curl -sf -X PUT "http://127.0.0.1:$http/v1/kv/bench/key" -d 'a value of some bytes' >/dev/null
}
start recording LEGATE_METRICS_RECORDER=on
start bare LEGATE_METRICS_RECORDER=off
# The recording agent really records; the bare one has nothing to show.
curl -sf "http://127.0.0.1:$recording_http/v1/agent/metrics?format=prometheus" |
    grep -q '^consul_api_http_count' || { echo "no api.http metric recorded" >&2; exit 1; }

run() { # name -> ops/s
    local http="${1}_http"
    $BENCH http-get --url "http://127.0.0.1:${!http}/v1/kv/bench/key" \
        --concurrency 32 --seconds "$ROUND_SECONDS" |
        sed -n 's/.*ops_per_sec=\([0-9]*\).*/\1/p'
}
recording=(); bare=()
for round in $(seq 1 "$ROUNDS"); do
    recording+=("$(run recording)")
    bare+=("$(run bare)")
    echo "round $round: recording=${recording[-1]} bare=${bare[-1]}"
done
python3 - "${recording[*]}" "${bare[*]}" <<'PY'
import statistics, sys
rec = [float(x) for x in sys.argv[1].split()]
bare = [float(x) for x in sys.argv[2].split()]
mr, mb = statistics.median(rec), statistics.median(bare)
print(f"recording: median {mr:.0f} req/s (spread {min(rec):.0f}..{max(rec):.0f})")
print(f"no recorder: median {mb:.0f} req/s (spread {min(bare):.0f}..{max(bare):.0f})")
print(f"recording / no recorder = {mr / mb:.3f} ({(mr / mb - 1) * 100:+.1f}%)")
PY
