#!/usr/bin/env bash
# Reproduces the numbers in BENCHMARKS.md: Legate (release build) and etcd
# (the peer, from Debian's etcd-server package) side by side on loopback,
# driven by `legate-bench` from a separate process. Every run is bounded.
#
#   bash bench/run.sh            # prints one line per measurement
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# shellcheck source=bench/common.sh
source bench/common.sh
bench_build_with_etcd
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
WATCHERS=${WATCHERS:-1000 10000}

dev_port=$(port)
# The watch run holds one connection per watcher from one address: above
# the agent's default of 200 per client.
echo 'limits { http_max_conns_per_client = 65536 }' >"$work/dev-limits.hcl"
"$LEGATE" agent -dev -config-file="$work/dev-limits.hcl" -http-port="$dev_port" -dns-port=-1 -grpc-port=-1 -log-level=warn >"$work/dev.log" 2>&1 &
pids+=($!); dev_pid=$!
disk_port=$(port)
"$LEGATE" agent -server -bootstrap-expect=1 -bind=127.0.0.1 -data-dir="$work/legate" -node=bench \
    -http-port="$disk_port" -dns-port=-1 -grpc-port=-1 -log-level=warn >"$work/disk.log" 2>&1 &
pids+=($!); disk_pid=$!
etcd_port=$(port); etcd_peer=$(port)
etcd --name bench --data-dir "$work/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "bench=http://127.0.0.1:$etcd_peer" --log-level error >"$work/etcd.log" 2>&1 &
pids+=($!); etcd_pid=$!

wait_http "http://127.0.0.1:$dev_port/v1/status/leader"
wait_http "http://127.0.0.1:$disk_port/v1/status/leader"
wait_http "http://127.0.0.1:$etcd_port/health"
sleep 5
echo "idle_rss_kb legate_dev=$(rss_kb $dev_pid) legate_server=$(rss_kb $disk_pid) etcd=$(rss_kb $etcd_pid)"

echo -n "kv_put legate_dev: ";    "$BENCH" kv-put --target legate --url "http://127.0.0.1:$dev_port" --seconds "$SECONDS_PER_RUN"
echo -n "kv_put legate_server: "; "$BENCH" kv-put --target legate --url "http://127.0.0.1:$disk_port" --seconds "$SECONDS_PER_RUN"
echo -n "kv_put etcd: ";          "$BENCH" kv-put --target etcd --url "http://127.0.0.1:$etcd_port" --seconds "$SECONDS_PER_RUN"
echo -n "register_agent legate_dev (after ${AGENT_SERVICES:-60000} local services): "
"$BENCH" register --preload "${AGENT_SERVICES:-60000}" --url "http://127.0.0.1:$dev_port" --seconds "$SECONDS_PER_RUN"
echo -n "register_catalog legate_dev: "; "$BENCH" register --catalog --url "http://127.0.0.1:$dev_port" --seconds "$SECONDS_PER_RUN"
# The floor: a bare server answering the same watch requests with one
# pre-encoded answer per index (bench/src/watch_floor.rs), with the same
# client, to show what the kernel and the client cost on this machine.
floor_port=$(port)
"$BENCH" watch-floor --port "$floor_port" &
pids+=($!); floor_pid=$!
wait_http "http://127.0.0.1:$floor_port/v1/kv/watched"
# Each run also reports the share of one core the server used while its
# watchers waited (idle_cpu_pct).
for w in $WATCHERS; do
    echo -n "watch legate_dev: "; "$BENCH" watch --target legate --url "http://127.0.0.1:$dev_port" --watchers "$w" --pid "$dev_pid"
    echo -n "watch etcd: ";       "$BENCH" watch --target etcd --url "http://127.0.0.1:$etcd_port" --watchers "$w" --pid "$etcd_pid"
    echo -n "watch floor (bare server): "; "$BENCH" watch --target legate --url "http://127.0.0.1:$floor_port" --watchers "$w" --pid "$floor_pid"
done
echo "rss_after_load_kb legate_dev=$(rss_kb $dev_pid) legate_server=$(rss_kb $disk_pid) etcd=$(rss_kb $etcd_pid)"
echo -n "csr_sign legate: "; "$BENCH" csr --seconds "${CSR_SECONDS:-5}"
echo -n "reissue_after_rotation unlimited: "; "$BENCH" reissue --agents "${REISSUE_AGENTS:-10000}"
echo -n "reissue_after_rotation 250/s: ";    "$BENCH" reissue --agents "${REISSUE_AGENTS:-10000}" --csr-max-per-second 250
# xDS fan-out: N delta ADS streams for one proxy, one endpoint change.
cat >"$work/demo.hcl" <<'HCL'
# Consul's default paces pushes at 250 proxies a second; the fan-out run
# measures how fast the server can push, so the pace is lifted; the
# 50,000 streams come over 500 connections from one address.
xds { update_max_per_second = 1000000 }
limits { http_max_conns_per_client = 65536 }
services {
  name = "web"
  port = 8080
  connect { sidecar_service { proxy { upstreams { destination_name = "db"
                                                  local_bind_port = 9191 } } } }
}
services {
  name = "db"
  port = 9090
  connect { sidecar_service {} }
}
HCL
xds_http=$(port); xds_grpc=$(port)
"$LEGATE" agent -dev -http-port="$xds_http" -dns-port=-1 -grpc-port="$xds_grpc" -log-level=warn \
    -config-file "$work/demo.hcl" >"$work/xds.log" 2>&1 &
pids+=($!); xds_pid=$!
wait_http "http://127.0.0.1:$xds_http/v1/status/leader"
sleep 1
for n in 1000 10000 50000; do
    echo -n "xds_fanout $n streams: "
    "$BENCH" xds-fanout --url "http://127.0.0.1:$xds_http" --grpc "http://127.0.0.1:$xds_grpc" --streams "$n" --pid "$xds_pid"
    curl -sf -X PUT "http://127.0.0.1:$xds_http/v1/agent/service/deregister/db-bench-2" >/dev/null
    sleep 1
done
echo -n "ecdsa_p256_sign openssl: "; openssl speed -seconds 3 ecdsap256 2>/dev/null | awk '/nistp256/ {print "sign_per_sec=" $(NF-1)}'
# The catalog's bytes per service instance, and snapshot/restore times of
# a 100,000-instance catalog (in process, heap counted exactly).
echo -n "catalog_rows with checks: ";    target/release/legate-catalog-rows --instances 100000
echo -n "catalog_rows services only: ";  target/release/legate-catalog-rows --instances 100000 --without-checks
