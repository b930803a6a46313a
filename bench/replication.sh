#!/usr/bin/env bash
# Replication from the primary into a secondary, with each datacenter's
# server in its own network namespace: dc1 (a1) and dc2 (b1) talk over one
# veth pair (the "WAN"), and the host reaches each server's HTTP API over
# a link of its own (the host does not route between them).
#   1. Lag: config entry PUT in dc1 -> visible in dc2 (a blocking read
#      there), over WRITES writes spaced SPACING seconds apart (one per
#      replication round); p50, p99, max.
#   2. Catch-up: the WAN link goes down for PARTITION_SECONDS while
#      CATCHUP_ENTRIES entries are written in dc1; time from the link
#      coming back until dc2 holds every one.
# Needs root (network namespaces).
#
#   bash bench/replication.sh            # 200 x 1.2 s, 10-minute partition, 5,000 entries
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
WRITES=${WRITES:-200}
SPACING=${SPACING:-1.2}
PARTITION_SECONDS=${PARTITION_SECONDS:-600}
CATCHUP_ENTRIES=${CATCHUP_ENTRIES:-5000}
cargo build --release --quiet -p legate-cli
LEGATE=$PWD/target/release/legate

tag=$(( $$ % 10000 ))
ns1=lgrep${tag}a ns2=lgrep${tag}b
netns_cleanup() {
    ip netns del "$ns1" 2>/dev/null || true
    ip netns del "$ns2" 2>/dev/null || true
    ip link del "lgh${tag}a" 2>/dev/null || true
    ip link del "lgh${tag}b" 2>/dev/null || true
}
trap 'cleanup; netns_cleanup' EXIT
ip netns add "$ns1"
ip netns add "$ns2"
for ns in "$ns1" "$ns2"; do ip -n "$ns" link set lo up; done
# The WAN link between the datacenters.
ip link add "wan${tag}a" netns "$ns1" type veth peer name "wan${tag}b" netns "$ns2"
ip -n "$ns1" addr add 10.77.0.1/24 dev "wan${tag}a"
ip -n "$ns2" addr add 10.77.0.2/24 dev "wan${tag}b"
ip -n "$ns1" link set "wan${tag}a" up
ip -n "$ns2" link set "wan${tag}b" up
# The host's own link into each (HTTP only).
i=1
for ns in "$ns1" "$ns2"; do
    side=$([ "$ns" = "$ns1" ] && echo a || echo b)
    ip link add "lgh${tag}${side}" type veth peer name "api${tag}${side}" netns "$ns"
    ip addr add "10.78.${i}.254/24" dev "lgh${tag}${side}"
    ip link set "lgh${tag}${side}" up
    ip -n "$ns" addr add "10.78.${i}.1/24" dev "api${tag}${side}"
    ip -n "$ns" link set "api${tag}${side}" up
    i=$((i + 1))
done

common=(-server -bootstrap-expect=1 -dns-port=-1 -grpc-port=-1 -log-level=warn
    -hcl 'primary_datacenter = "dc1"' -retry-interval-wan=1s)
ip netns exec "$ns1" "$LEGATE" agent "${common[@]}" -datacenter=dc1 -node=a1 -bind=10.77.0.1 \
    -client=10.78.1.1 -data-dir="$work/a1" >"$work/a1.log" 2>&1 &
pids+=($!)
ip netns exec "$ns2" "$LEGATE" agent "${common[@]}" -datacenter=dc2 -node=b1 -bind=10.77.0.2 \
    -client=10.78.2.1 -data-dir="$work/b1" -retry-join-wan=10.77.0.1 >"$work/b1.log" 2>&1 &
pids+=($!)
dc1=http://10.78.1.1:8500 dc2=http://10.78.2.1:8500
for url in "$dc1" "$dc2"; do
    for _ in $(seq 1 600); do
        leader=$(curl -sf "$url/v1/status/leader" 2>/dev/null || true)
        [ -n "$leader" ] && [ "$leader" != '""' ] && break
        sleep 0.05
    done
done
for _ in $(seq 1 600); do
    curl -sf "$dc2/v1/catalog/datacenters" | grep -q dc1 && break
    sleep 0.1
done

DC1=$dc1 DC2=$dc2 WRITES=$WRITES SPACING=$SPACING python3 - <<'EOF'
import json, os, time, urllib.request

dc1, dc2 = os.environ["DC1"], os.environ["DC2"]
writes, spacing = int(os.environ["WRITES"]), float(os.environ["SPACING"])

def put(name):
    body = json.dumps({"Kind": "service-defaults", "Name": name, "Protocol": "http"}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{dc1}/v1/config", data=body, method="PUT")).read()

def listed(index):
    with urllib.request.urlopen(f"{dc2}/v1/config/service-defaults?stale&index={index}&wait=10s") as r:
        return int(r.headers["X-Consul-Index"]), {e["Name"] for e in json.load(r)}

index, _ = listed(0)
lags = []
for i in range(writes):
    name = f"lag-{i}"
    started = time.monotonic()
    put(name)
    while True:
        index, names = listed(index)
        if name in names:
            break
    lags.append((time.monotonic() - started) * 1000)
    time.sleep(max(0.0, spacing - (time.monotonic() - started)))
lags.sort()
pick = lambda q: lags[min(len(lags) - 1, int(q * len(lags)))]
print(f"replication_lag_ms writes={writes} spacing={spacing}s p50={pick(0.50):.1f} p99={pick(0.99):.1f} max={lags[-1]:.1f}")
EOF

# Catch-up after a partition.
ip -n "$ns2" link set "wan${tag}b" down
partition_started=$(date +%s)
DC1=$dc1 N=$CATCHUP_ENTRIES python3 - <<'EOF'
import json, os, urllib.request
dc1, n = os.environ["DC1"], int(os.environ["N"])
for i in range(n):
    body = json.dumps({"Kind": "service-resolver", "Name": f"cut-{i}", "ConnectTimeout": "3s"}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{dc1}/v1/config", data=body, method="PUT")).read()
EOF
elapsed=$(( $(date +%s) - partition_started ))
[ "$elapsed" -lt "$PARTITION_SECONDS" ] && sleep $(( PARTITION_SECONDS - elapsed ))
ip -n "$ns2" link set "wan${tag}b" up
healed=$(date +%s.%N)
DC2=$dc2 N=$CATCHUP_ENTRIES HEALED=$healed PARTITION=$PARTITION_SECONDS python3 - <<'EOF'
import json, os, time, urllib.request
dc2, n = os.environ["DC2"], int(os.environ["N"])
healed = float(os.environ["HEALED"])
deadline = time.time() + 1800
count = 0
while time.time() < deadline:
    with urllib.request.urlopen(f"{dc2}/v1/config/service-resolver?stale") as r:
        count = len(json.load(r))
    if count >= n:
        break
    time.sleep(0.2)
print(f"replication_catch_up_seconds partition={os.environ['PARTITION']}s entries={n} "
      f"replicated={count} seconds={time.time() - healed:.1f} "
      f"(replicator applies at Consul's 100 writes/s: at least {n / 100:.0f} s)")
EOF
