#!/usr/bin/env bash
# WAN federation through mesh gateways against the direct WAN path, same
# security on both (TLS on the server port with verify_incoming,
# verify_outgoing and verify_server_hostname), side by side in each round:
#   direct:   dc1 (a1) and dc2 (b1) federated by a WAN join, each server
#             dialling the other's server port;
#   gateways: the same two servers with connect.enable_mesh_gateway_wan_federation,
#             b1 joining through dc1's gateway (-primary-gateway), a
#             built-in gateway with -expose-servers in each datacenter:
#             a1 -> gw1 (LAN) -> gw2 (WAN) -> b1.
# Measured per path: GET a1/v1/kv/bench/x?dc=dc2 (req/s, p50, p99) and
# the WAN convergence of a new dc2 server (b2, told only of b1's LAN
# address) until a1's WAN pool lists it alive, with Consul's default
# gossip_wan timing. ROUNDS rounds (default 3), medians reported.
#
#   bash bench/wanfed.sh
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
ROUNDS=${ROUNDS:-3}

# One CA; a server certificate with its node name for each server.
(cd "$work" && "$OLDPWD/$LEGATE" tls ca create >/dev/null &&
    "$OLDPWD/$LEGATE" tls cert create -server -dc dc1 -node a1 >/dev/null &&
    "$OLDPWD/$LEGATE" tls cert create -server -dc dc2 -node b1 >/dev/null &&
    "$OLDPWD/$LEGATE" tls cert create -server -dc dc2 -node b2 >/dev/null)
tls() { # dc, certificate index
    echo "tls { defaults { ca_file = \"$work/consul-agent-ca.pem\" cert_file = \"$work/$1-server-consul-$2.pem\" key_file = \"$work/$1-server-consul-$2-key.pem\" verify_outgoing = true } internal_rpc { verify_incoming = true verify_server_hostname = true } }"
}
common=(-dns-port=-1 -grpc-port=8502 -log-level=warn -hcl 'primary_datacenter = "dc1"')
wanfed='connect { enabled = true enable_mesh_gateway_wan_federation = true }'

wait_leader() {
    for _ in $(seq 1 600); do
        leader=$(curl -sf "$1/v1/status/leader" 2>/dev/null || true)
        [ -n "$leader" ] && [ "$leader" != '""' ] && return 0
        sleep 0.05
    done
    echo "no leader at $1" >&2
    return 1
}
alive_in_a1() { # member name
    curl -sf 'http://127.0.0.101:8500/v1/agent/members?wan=1' |
        python3 -c "import json,sys; m=[x for x in json.load(sys.stdin) if x['Name']=='$1' and x['Status']==1]; sys.exit(0 if m else 1)"
}
stop_all() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
}
gateway() { # dc, agent ip, lan ip, wan ip
    "$LEGATE" connect proxy -gateway=mesh -register -expose-servers \
        -address "$3:8443" -wan-address "$4:8443" -admin-bind "$3:19000" \
        -http-addr "$2:8500" -grpc-addr "$2:8502" >"$work/gw-$1.log" 2>&1 &
    pids+=($!)
}

# One path, one round: appends "<mode> req/s p50 p99 convergence" to
# $results (run in this shell, so its processes are stopped on exit).
run_path() { # direct | gateways, round
    local mode=$1 dir="$work/$1-$2"
    mkdir -p "$dir"
    local a1_extra=() b1_extra=() b2_extra=()
    if [ "$mode" = gateways ]; then
        a1_extra=(-hcl "$wanfed")
        b1_extra=(-hcl "$wanfed" -primary-gateway=127.0.0.103:8443)
        b2_extra=(-hcl "$wanfed" -primary-gateway=127.0.0.103:8443)
    else
        b1_extra=(-retry-join-wan=127.0.0.101 -retry-interval-wan=1s)
    fi
    # server <node> <dc> <ip> <cert index> <flags...>: a one-server datacenter.
    server() {
        local node=$1 dc=$2 ip=$3 cert=$4
        shift 4
        "$LEGATE" agent -server -bootstrap-expect=1 -datacenter="$dc" -node="$node" -bind="$ip" \
            -client="$ip" -data-dir="$dir/$node" -hcl "$(tls "$dc" "$cert")" "${common[@]}" "$@" \
            >"$dir/$node.log" 2>&1 &
        pids+=($!)
        wait_leader "http://$ip:8500"
    }
    server a1 dc1 127.0.0.101 0 "${a1_extra[@]}"
    [ "$mode" = gateways ] && gateway dc1 127.0.0.101 127.0.0.102 127.0.0.103
    server b1 dc2 127.0.0.111 0 "${b1_extra[@]}"
    [ "$mode" = gateways ] && gateway dc2 127.0.0.111 127.0.0.113 127.0.0.114
    for _ in $(seq 1 1200); do alive_in_a1 b1.dc2 && break; sleep 0.05; done
    curl -sf -X PUT -d value http://127.0.0.111:8500/v1/kv/bench/x >/dev/null
    local ready=""
    for _ in $(seq 1 1200); do
        curl -sf 'http://127.0.0.101:8500/v1/kv/bench/x?dc=dc2' >/dev/null && ready=1 && break
        sleep 0.05
    done
    if [ -z "$ready" ]; then
        echo "$mode: ?dc=dc2 never answered: $(curl -s 'http://127.0.0.101:8500/v1/kv/bench/x?dc=dc2')" >&2
        tail -n 20 "$dir/a1.log" "$dir/b1.log" "$work"/gw-*.log >&2
        return 1
    fi
    "$BENCH" http-get --url 'http://127.0.0.101:8500/v1/kv/bench/x?dc=dc2' --concurrency 1 --seconds 1 >/dev/null
    local get
    get=$("$BENCH" http-get --url 'http://127.0.0.101:8500/v1/kv/bench/x?dc=dc2' \
        --concurrency "$CLIENTS" --seconds "$SECONDS_PER_RUN")
    # Through gateways a new server's peers reach it only once dc1's
    # gateway routes to dc2's: wait for dc2's federation state in dc1.
    if [ "$mode" = gateways ]; then
        for _ in $(seq 1 1200); do
            curl -sf 'http://127.0.0.101:8500/v1/internal/federation-states/mesh-gateways' |
                python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("dc2") else 1)' && break
            sleep 0.05
        done
    fi
    local started ended
    started=$(date +%s.%N)
    "$LEGATE" agent -server -bootstrap-expect=3 -datacenter=dc2 -node=b2 -bind=127.0.0.112 \
        -client=127.0.0.112 -data-dir="$dir/b2" -retry-join=127.0.0.111 -retry-interval=1s \
        -hcl "$(tls dc2 1)" "${common[@]}" "${b2_extra[@]}" >"$dir/b2.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 2400); do alive_in_a1 b2.dc2 && break; sleep 0.05; done
    ended=$(date +%s.%N)
    stop_all
    local line
    line=$(python3 -c '
import sys
g = dict(kv.split("=") for kv in sys.argv[1].split())
print(g["ops_per_sec"], g["p50_ms"], g["p99_ms"], round(float(sys.argv[3]) - float(sys.argv[2]), 2))
' "$get" "$started" "$ended")
    echo "round $2 $mode: req/s p50_ms p99_ms convergence_s = $line"
    echo "$mode $line" >>"$results"
}

results="$work/results"
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
    for mode in ${MODES:-direct gateways}; do
        run_path "$mode" "$round"
    done
done
python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, *values = line.split()
    rows.setdefault(mode, []).append([float(v) for v in values])
med = {m: [statistics.median(col) for col in zip(*r)] for m, r in rows.items()}
for m in med:
    rps, p50, p99, conv = med[m]
    print(f"{m:9} median: {rps:,.0f} req/s  p50 {p50:.2f} ms  p99 {p99:.2f} ms  convergence {conv:.2f} s")
if len(med) < 2:
    sys.exit(0)
d, g = med["direct"], med["gateways"]
print(f"gateways/direct: throughput {g[0]/d[0]:.2f}x (goal >= 0.8x), convergence {g[3]/d[3]:.2f}x (goal <= 2x)")
EOF
