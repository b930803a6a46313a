#!/usr/bin/env bash
# Memory after load: four rounds of 5,000 blocking queries on one key, each
# round ended by one write (legate-bench watch); RSS 12 s after each round.
#
#   bash bench/blocking.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)"
# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --release --quiet -p legate-cli -p legate-bench
http=$(port)
echo "limits { http_max_conns_per_client = 20000 }" >"$work/limits.hcl"
target/release/legate agent -dev -config-file="$work/limits.hcl" -http-port="$http" \
    -dns-port=-1 -grpc-port=-1 -log-level=warn >"$work/agent.log" 2>&1 &
pid=$!; pids+=($pid)
wait_http "http://127.0.0.1:$http/v1/status/leader"
sleep 2
echo "baseline rss_kb=$(rss_kb $pid)"
for round in 1 2 3 4; do
    target/release/legate-bench watch --target legate --url "http://127.0.0.1:$http" --watchers 5000 --rounds 1 >/dev/null
    sleep 12
    echo "after round $round of 5,000 blocking queries: rss_kb=$(rss_kb $pid)"
done
