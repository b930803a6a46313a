#!/usr/bin/env bash
# Mesh gateways: client -> web sidecar (dc1) -> dc1 gateway -> dc2 gateway
# -> db sidecar (dc2) -> echo, two datacenters of one server each on
# loopback addresses, one after the other on the same machine:
#   legate   two `legate connect proxy -gateway=mesh` gateways (SNI routing, passthrough)
#   haproxy  two HAProxy 2.6 instances (Debian's package) routing on req.ssl_sni
#            (bench/haproxy-gateway.cfg), on the registered gateways' addresses
#   none     the same sidecars without gateways (mode none: sidecar to sidecar)
# The sidecars are the same Legate sidecars every time; mTLS runs end to
# end between them. Throughput: N connections streaming 16 KiB writes
# that the echo returns, each with at most WINDOW bytes (2 MiB) not yet
# echoed (unbounded streams filled every socket buffer on the five-hop
# path until the kernel's TCP memory pressure dropped segments and a
# connection stalled for seconds, in any of the three paths); latency:
# one connection, 64-byte round trips;
# CPU: seconds of each gateway process per GB it moved (both directions)
# during the 64-connection run.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v haproxy >/dev/null 2>&1 || apt-get install -y -qq haproxy >/dev/null
cargo build --release --quiet -p legate-cli -p legate-bench
LEGATE=$PWD/target/release/legate
BENCH=$PWD/target/release/legate-bench
SECONDS_EACH=${SECONDS_EACH:-5}
WINDOW=${WINDOW:-2097152}
# shellcheck source=bench/common.sh
source bench/common.sh

DC1=127.0.0.241 DC2=127.0.0.242
GW1_LAN=127.0.0.243 GW1_WAN=127.0.0.244 GW2_LAN=127.0.0.245 GW2_WAN=127.0.0.246
echo_port=$(port)
"$BENCH" echo --port "$echo_port" & pids+=($!)
web_sc=$(port); ops_sc=$(port); db_sc=$(port); up_local=$(port); up_none=$(port)
gw1=$(port); gw1w=$(port); gw2=$(port); gw2w=$(port)

cat >"$work/dc1.hcl" <<HCL
services {
  name = "web"
  port = 8080
  connect { sidecar_service { port = $web_sc
    proxy { upstreams { destination_name = "db"  datacenter = "dc2"  local_bind_port = $up_local
                        mesh_gateway { mode = "local" } } } } }
}
services {
  name = "ops"
  port = 8081
  connect { sidecar_service { port = $ops_sc
    proxy { upstreams { destination_name = "db"  datacenter = "dc2"  local_bind_port = $up_none
                        mesh_gateway { mode = "none" } } } } }
}
HCL
cat >"$work/dc2.hcl" <<HCL
services {
  name = "db"
  port = $echo_port
  connect { sidecar_service { port = $db_sc } }
}
HCL
http1=$(port); http2=$(port); grpc1=$(port); grpc2=$(port)
server() {  # name ip dc http grpc config [wan-join]
    local join=()
    [ -n "${7:-}" ] && join=(-retry-join-wan "$7")
    "$LEGATE" agent -server -bootstrap-expect=1 -node "$1" -bind "$2" -client 127.0.0.1 \
        -datacenter "$3" -hcl 'primary_datacenter = "dc1"' -retry-interval-wan=1s \
        -http-port="$4" -grpc-port="$5" -grpc-tls-port=-1 -dns-port=-1 -log-level=warn \
        -data-dir "$work/data-$1" -config-file "$6" "${join[@]}" >"$work/$1.log" 2>&1 & pids+=($!)
}
server b1 $DC1 dc1 "$http1" "$grpc1" "$work/dc1.hcl"
server b2 $DC2 dc2 "$http2" "$grpc2" "$work/dc2.hcl" $DC1
for _ in $(seq 1 300); do
    n=$(curl -sf "127.0.0.1:$http2/v1/catalog/datacenters" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>/dev/null || echo 0)
    ic=$(curl -sf "127.0.0.1:$http2/v1/connect/ca/roots?stale" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["Roots"][0].get("IntermediateCerts") or []))' 2>/dev/null || echo 0)
    [ "$n" = 2 ] && [ "$ic" -ge 1 ] && break
    sleep 0.2
done
td=$(curl -sf "127.0.0.1:$http1/v1/connect/ca/roots" | python3 -c 'import json,sys; print(json.load(sys.stdin)["TrustDomain"])')

proxy() {  # http grpc log args...
    local http=$1 grpc=$2 log=$3; shift 3
    CONSUL_HTTP_ADDR="127.0.0.1:$http" "$LEGATE" connect proxy -grpc-addr "127.0.0.1:$grpc" \
        -log-level warn "$@" >"$work/$log.log" 2>&1 & pids+=($!)
}
proxy "$http1" "$grpc1" web -sidecar-for web
proxy "$http1" "$grpc1" ops -sidecar-for ops
proxy "$http2" "$grpc2" db -sidecar-for db

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
until_echoes() {
    for _ in $(seq 1 300); do
        timeout 60 "$BENCH" tcp --addr "$1" --mode latency --seconds 1 >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "no echo through $1" >&2; return 1
}
results=$work/results.txt
run() {  # name addr gateway-pids...
    local name=$1 addr=$2; shift 2
    local out before after cpu=n/a
    out=$(timeout 60 "$BENCH" tcp --addr "$addr" --connections 1 --seconds "$SECONDS_EACH" --window "$WINDOW")
    echo "$name one ${out##*echoed_mb_per_s=}" | tee -a "$results"
    before=0; for p in "$@"; do before=$((before + $(cpu_ticks "$p"))); done
    out=$(timeout 60 "$BENCH" tcp --addr "$addr" --connections 64 --seconds "$SECONDS_EACH" --window "$WINDOW")
    after=0; for p in "$@"; do after=$((after + $(cpu_ticks "$p"))); done
    if [ "$#" -gt 0 ]; then  # CPU seconds per GB moved (both directions), per gateway
        cpu=$(python3 -c 'import sys; b,a,m,g,s,t=map(float,sys.argv[1:]); gb=m*s*2/1000; print(f"{(a-b)/t/g/gb:.2f}" if gb else "n/a")' \
            "$before" "$after" "${out##*echoed_mb_per_s=}" "$#" "$SECONDS_EACH" "$(getconf CLK_TCK)")
    fi
    echo "$name many ${out##*echoed_mb_per_s=} $cpu" | tee -a "$results"
    out=$(timeout 60 "$BENCH" tcp --addr "$addr" --mode latency --seconds "$SECONDS_EACH")
    echo "$name latency $(echo "$out" | sed -E 's/.*p50_us=([0-9.]+) p99_us=([0-9.]+).*/\1 \2/')" | tee -a "$results"
}
haproxy_cfg() {  # name lan wan match sni next
    sed -e "s|@LAN@|$2|" -e "s|@WAN@|$3|" -e "s|@MATCH@|$4|" -e "s|@SNI@|$5|" -e "s|@NEXT@|$6|" \
        bench/haproxy-gateway.cfg >"$work/haproxy-$1.cfg"
    haproxy -c -q -f "$work/haproxy-$1.cfg"
}
haproxy_cfg gw1 "$GW1_LAN:$gw1" "$GW1_WAN:$gw1w" end ".dc2.internal.$td" "$GW2_WAN:$gw2w"
haproxy_cfg gw2 "$GW2_LAN:$gw2" "$GW2_WAN:$gw2w" str "db.default.dc2.internal.$td" "$DC2:$db_sc"
stop() { kill "$@"; for p in "$@"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done; }

# Interleaved rounds (Legate's gateways, HAProxy's on the same registered
# addresses, no gateway), so drift on the machine falls on all three.
for round in $(seq 1 "${ROUNDS:-3}"); do
    echo "round $round"
    proxy "$http1" "$grpc1" gw1 -gateway=mesh -register -address "$GW1_LAN:$gw1" -wan-address "$GW1_WAN:$gw1w"
    gw1_pid=${pids[-1]}
    proxy "$http2" "$grpc2" gw2 -gateway=mesh -register -address "$GW2_LAN:$gw2" -wan-address "$GW2_WAN:$gw2w"
    gw2_pid=${pids[-1]}
    until_echoes "127.0.0.1:$up_local"
    run legate "127.0.0.1:$up_local" "$gw1_pid" "$gw2_pid"
    stop "$gw1_pid" "$gw2_pid"
    haproxy -f "$work/haproxy-gw1.cfg" >"$work/haproxy-gw1.log" 2>&1 & pids+=($!); hap1=${pids[-1]}
    haproxy -f "$work/haproxy-gw2.cfg" >"$work/haproxy-gw2.log" 2>&1 & pids+=($!); hap2=${pids[-1]}
    until_echoes "127.0.0.1:$up_local"
    run haproxy "127.0.0.1:$up_local" "$hap1" "$hap2"
    stop "$hap1" "$hap2"
    until_echoes "127.0.0.1:$up_none"
    run none "127.0.0.1:$up_none"
done

python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(name, what, col=2):
    vals = [float(r[col]) for r in rows if r[0] == name and r[1] == what and r[col] != "n/a"]
    return statistics.median(vals) if vals else float("nan")
print("medians over rounds:")
for n in ("legate", "haproxy", "none"):
    print(f"  {n:8} 1 conn {med(n,'one'):7.1f} MB/s  64 conns {med(n,'many'):7.1f} MB/s  "
          f"p50/p99 {med(n,'latency'):.0f}/{med(n,'latency',3):.0f} us  cpu/GB {med(n,'many',3):.2f}")
for k, what in (("1 conn", "one"), ("64 conns", "many")):
    print(f"  legate/haproxy {k}: {med('legate',what)/med('haproxy',what):.2f}x   legate/none: {med('legate',what)/med('none',what):.2f}x")
print(f"  p99 legate/haproxy: {med('legate','latency',3)/med('haproxy','latency',3):.2f}x (lower is better)")
PY
