#!/usr/bin/env bash
# Requests across datacenters against requests within one, side by side:
# dc1 (server a1 on 127.0.0.81, client agent c1 on 127.0.0.82) and dc2
# (server b1 on 127.0.0.91), federated with one WAN join. Both paths are
# one RPC hop from the agent that takes the HTTP request to the leader
# that answers it:
#   same DC, forwarded: GET c1 /v1/kv/bench/x       (c1 -> a1)
#   across DCs:         GET a1 /v1/kv/bench/x?dc=dc2 (a1 -> b1)
# Then the WAN convergence time: a new dc2 server (b2, joining dc2's LAN
# only) until a1's WAN pool lists it alive (flood join + gossip), with
# Consul's default gossip_wan timing.
#
#   bash bench/wan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n 4096 2>/dev/null || true
# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --release --quiet -p legate-cli -p legate-bench
LEGATE=target/release/legate
BENCH=target/release/legate-bench
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CLIENTS=${CLIENTS:-32}
common=(-dns-port=-1 -grpc-port=-1 -log-level=warn -hcl 'primary_datacenter = "dc1"')

"$LEGATE" agent -server -bootstrap-expect=1 -datacenter=dc1 -node=a1 -bind=127.0.0.81 \
    -client=127.0.0.81 -data-dir="$work/a1" "${common[@]}" >"$work/a1.log" 2>&1 &
pids+=($!)
"$LEGATE" agent -server -bootstrap-expect=1 -datacenter=dc2 -node=b1 -bind=127.0.0.91 \
    -client=127.0.0.91 -data-dir="$work/b1" -retry-join-wan=127.0.0.81 -retry-interval-wan=1s \
    "${common[@]}" >"$work/b1.log" 2>&1 &
pids+=($!)
"$LEGATE" agent -datacenter=dc1 -node=c1 -bind=127.0.0.82 -client=127.0.0.82 \
    -data-dir="$work/c1" -retry-join=127.0.0.81 -retry-interval=1s "${common[@]}" >"$work/c1.log" 2>&1 &
pids+=($!)
for url in http://127.0.0.81:8500 http://127.0.0.91:8500 http://127.0.0.82:8500; do
    for _ in $(seq 1 400); do
        leader=$(curl -sf "$url/v1/status/leader" 2>/dev/null || true)
        [ -n "$leader" ] && [ "$leader" != '""' ] && break
        sleep 0.05
    done
done
for _ in $(seq 1 400); do
    curl -sf 'http://127.0.0.81:8500/v1/agent/members?wan=1' | grep -q '"b1.dc2"' && break
    sleep 0.05
done
curl -sf -X PUT -d value http://127.0.0.91:8500/v1/kv/bench/x >/dev/null
curl -sf -X PUT -d value http://127.0.0.81:8500/v1/kv/bench/x >/dev/null
curl -sf 'http://127.0.0.81:8500/v1/kv/bench/x?dc=dc2' >/dev/null
curl -sf 'http://127.0.0.82:8500/v1/kv/bench/x' >/dev/null

echo -n "kv_get same_dc_forwarded (client agent -> server): "
"$BENCH" http-get --url http://127.0.0.82:8500/v1/kv/bench/x --concurrency "$CLIENTS" --seconds "$SECONDS_PER_RUN"
echo -n "kv_get cross_dc (?dc=dc2, server -> dc2 server): "
"$BENCH" http-get --url 'http://127.0.0.91:8500/v1/kv/bench/x' --concurrency 1 --seconds 1 >/dev/null
"$BENCH" http-get --url 'http://127.0.0.81:8500/v1/kv/bench/x?dc=dc2' --concurrency "$CLIENTS" --seconds "$SECONDS_PER_RUN"

# WAN convergence of a new dc2 server.
started=$(date +%s.%N)
"$LEGATE" agent -server -bootstrap-expect=3 -datacenter=dc2 -node=b2 -bind=127.0.0.92 \
    -client=127.0.0.92 -data-dir="$work/b2" -retry-join=127.0.0.91 -retry-interval=1s \
    "${common[@]}" >"$work/b2.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 1200); do
    if curl -sf 'http://127.0.0.81:8500/v1/agent/members?wan=1' |
        python3 -c 'import json,sys; m=[x for x in json.load(sys.stdin) if x["Name"]=="b2.dc2" and x["Status"]==1]; sys.exit(0 if m else 1)'; then
        break
    fi
    sleep 0.05
done
ended=$(date +%s.%N)
echo "wan_convergence_seconds (b2.dc2 alive in dc1's WAN pool after b2 started): $(python3 -c "print(round($ended - $started, 2))")"
