#!/usr/bin/env bash
# The agent cache on a client agent joined to one server (two release
# agents on loopback addresses):
#  - health reads of a 10-instance service with `?cached` against the
#    same reads without it, side by side (legate-bench http-get);
#  - the client's RSS after 10,000 distinct `?cached` prepared-query
#    answers (one template query, 10,000 names) under
#    `cache { max_bytes = "64MiB" }`, and what the cache says it holds.
#
#   bash bench/cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --release --quiet -p legate-cli -p legate-bench
LEGATE=target/release/legate
BENCH=target/release/legate-bench
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CONCURRENCY=${CONCURRENCY:-32}
QUERIES=${QUERIES:-10000}

server_http=$(port); client_http=$(port)
"$LEGATE" agent -server -bootstrap-expect=1 -node=bench-server -bind=127.0.0.95 \
    -data-dir="$work/server" -http-port="$server_http" -dns-port=-1 -grpc-port=-1 \
    -log-level=warn >"$work/server.log" 2>&1 &
pids+=($!)
echo 'cache { max_bytes = "64MiB" }' >"$work/cache.hcl"
"$LEGATE" agent -node=bench-client -bind=127.0.0.96 -retry-join=127.0.0.95 \
    -data-dir="$work/client" -config-file="$work/cache.hcl" -http-port="$client_http" \
    -dns-port=-1 -grpc-port=-1 -log-level=warn >"$work/client.log" 2>&1 &
client_pid=$!; pids+=($client_pid)
client="http://127.0.0.1:$client_http"
wait_http "http://127.0.0.1:$server_http/v1/status/leader"
for _ in $(seq 1 200); do
    [ "$(curl -sf "$client/v1/catalog/nodes" | grep -o '"Node"' | wc -l)" -ge 2 ] && break
    sleep 0.1
done
for i in $(seq 1 10); do
    curl -sf -X PUT "$client/v1/catalog/register" \
        -d "{\"Node\":\"n$i\",\"Address\":\"10.3.0.$i\",\"Service\":{\"ID\":\"web$i\",\"Service\":\"web\",\"Port\":80}}" >/dev/null
done
curl -sf "$client/v1/health/service/web?cached" >/dev/null
sleep 1
echo -n "health web uncached: "; "$BENCH" http-get --url "$client/v1/health/service/web" --concurrency "$CONCURRENCY" --seconds "$SECONDS_PER_RUN"
echo -n "health web ?cached:  "; "$BENCH" http-get --url "$client/v1/health/service/web?cached" --concurrency "$CONCURRENCY" --seconds "$SECONDS_PER_RUN"

# 10,000 distinct cached answers: a template answers every `q-<n>`.
curl -sf -X POST "$client/v1/query" \
    -d '{"Name":"q-","Template":{"Type":"name_prefix_match"},"Service":{"Service":"web"}}' >/dev/null
echo "before queries: client_rss_kb=$(rss_kb "$client_pid")"
seq 1 "$QUERIES" | xargs -P 16 -I{} curl -sf -o /dev/null "$client/v1/query/q-{}/execute?cached"
sleep 2
echo "after $QUERIES distinct cached queries: client_rss_kb=$(rss_kb "$client_pid")"
curl -sf "$client/v1/agent/metrics" | python3 -c '
import json, sys
for g in json.load(sys.stdin)["Gauges"]:
    if ".agent.cache." in g["Name"] and g["Labels"].get("cache") == "cached_queries":
        print(g["Name"], int(g["Value"]))
'
