#!/usr/bin/env bash
# Storage: what 60,000 keys of 4 KiB incompressible values (the live data)
# cost Legate (a server with its Raft log and snapshots on disk) and etcd
# (the peer, bbolt on disk) side by side: peak and settled RSS, the
# on-disk size, restart time of the full store, and all three again after
# every key is deleted.
#
#   bash bench/storage.sh        # KEYS=60000 SIZE=4096 by default
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
bench_build_with_etcd
KEYS=${KEYS:-60000}
SIZE=${SIZE:-4096}
echo "live_data_bytes=$((KEYS * SIZE)) keys=$KEYS value_size=$SIZE"

hwm_kb() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
dir_kb() { du -sk "$1" | cut -f1; }
now_ms() { date +%s%3N; }
# Waits until `url` answers 200; prints the milliseconds since `start`.
ready_after() {
    local url=$1 start=$2
    for _ in $(seq 1 6000); do
        if curl -sf -o /dev/null "$url" 2>/dev/null; then echo $(($(now_ms) - start)); return 0; fi
        sleep 0.01
    done
    echo "timed out waiting for $url" >&2
    return 1
}
b64() { printf '%s' "$1" | base64 -w0; }

legate_port=$(port); legate_rpc=$(port); legate_serf=$(port)
start_legate() {
    "$LEGATE" agent -server -bootstrap-expect=1 -bind=127.0.0.1 -data-dir="$work/legate" -node=bench \
        -http-port="$legate_port" -server-port="$legate_rpc" -serf-lan-port="$legate_serf" \
        -dns-port=-1 -grpc-port=-1 -log-level=warn >>"$work/legate.log" 2>&1 &
    legate_pid=$!; pids+=($legate_pid)
}
etcd_port=$(port); etcd_peer=$(port)
start_etcd() {
    etcd --name bench --data-dir "$work/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "bench=http://127.0.0.1:$etcd_peer" --log-level error >>"$work/etcd.log" 2>&1 &
    etcd_pid=$!; pids+=($etcd_pid)
}
stop() { kill -INT "$1"; wait "$1" 2>/dev/null || true; }
legate_key="http://127.0.0.1:$legate_port/v1/kv/bench/$(printf %08d $((KEYS - 1)))"
etcd_get() { curl -sf -X POST "http://127.0.0.1:$etcd_port/v3/kv/range" -d "{\"key\":\"$(b64 "bench/$(printf %08d $((KEYS - 1)))")\"}" | grep -q '"kvs"'; }

start_legate; start_etcd
wait_http "http://127.0.0.1:$legate_port/v1/status/leader"
wait_http "http://127.0.0.1:$etcd_port/health"
sleep 2
echo "idle rss_kb legate=$(rss_kb $legate_pid) etcd=$(rss_kb $etcd_pid)"

echo -n "fill legate: "; "$BENCH" kv-fill --target legate --url "http://127.0.0.1:$legate_port" --keys "$KEYS" --size "$SIZE"
echo -n "fill etcd: ";   "$BENCH" kv-fill --target etcd --url "http://127.0.0.1:$etcd_port" --keys "$KEYS" --size "$SIZE"
sleep 5
echo "full peak_rss_kb legate=$(hwm_kb $legate_pid) etcd=$(hwm_kb $etcd_pid)"
echo "full rss_kb legate=$(rss_kb $legate_pid) etcd=$(rss_kb $etcd_pid)"
echo "full disk_kb legate=$(dir_kb "$work/legate") etcd=$(dir_kb "$work/etcd")"
ls -l "$work/legate/raft" | sed 's/^/  legate raft\/ /'

stop $legate_pid; start=$(now_ms); start_legate
echo "full restart_ms legate=$(ready_after "$legate_key" "$start") rss_kb=$(rss_kb $legate_pid) peak_rss_kb=$(hwm_kb $legate_pid)"
stop $etcd_pid; start=$(now_ms); start_etcd
until etcd_get; do sleep 0.01; done
echo "full restart_ms etcd=$(($(now_ms) - start)) rss_kb=$(rss_kb $etcd_pid) peak_rss_kb=$(hwm_kb $etcd_pid)"

curl -sf -X DELETE "http://127.0.0.1:$legate_port/v1/kv/bench?recurse" >/dev/null
curl -sf -X POST "http://127.0.0.1:$etcd_port/v3/kv/deleterange" \
    -d "{\"key\":\"$(b64 bench/)\",\"range_end\":\"$(b64 bench0)\"}" >/dev/null
sleep 10
echo "deleted rss_kb legate=$(rss_kb $legate_pid) etcd=$(rss_kb $etcd_pid)"
echo "deleted disk_kb legate=$(dir_kb "$work/legate") etcd=$(dir_kb "$work/etcd")"
ls -l "$work/legate/raft" | sed 's/^/  legate raft\/ /'

stop $legate_pid; start=$(now_ms); start_legate
until curl -sf "http://127.0.0.1:$legate_port/v1/status/leader" 2>/dev/null | grep -q 127.0.0.1; do sleep 0.01; done
echo "deleted restart_ms legate=$(($(now_ms) - start)) rss_kb=$(rss_kb $legate_pid)"
