#!/usr/bin/env bash
# Three-server clusters side by side: Legate (`-bootstrap-expect=3`, Raft
# log on disk) on 127.0.0.61-63 and etcd (Debian's etcd-server, a
# three-member cluster) on 127.0.0.71-73, each on its own loopback address
# with its default ports. `legate-bench kv-put` writes distinct keys with 64
# clients spread over the three members of each (followers forward to the
# leader in both systems) for SECONDS_PER_RUN seconds.
#
#   bash bench/cluster.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || ulimit -n 4096 2>/dev/null || true

# shellcheck source=bench/common.sh
source bench/common.sh
bench_build_with_etcd
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CLIENTS=${CLIENTS:-64}

legate_urls=()
legate_pids=()
for i in 1 2 3; do
    ip="127.0.0.6$i"
    joins=()
    for j in 1 2 3; do [ "$j" = "$i" ] || joins+=("-retry-join=127.0.0.6$j"); done
    "$LEGATE" agent -server -bootstrap-expect=3 -node="s$i" -bind="$ip" -client="$ip" \
        -data-dir="$work/legate$i" -dns-port=-1 -grpc-port=-1 -retry-interval=1s -log-level=warn \
        "${joins[@]}" >"$work/legate$i.log" 2>&1 &
    pids+=($!); legate_pids+=($!)
    legate_urls+=("http://$ip:8500")
done

etcd_urls=()
etcd_pids=()
initial=""
for i in 1 2 3; do initial+="${initial:+,}e$i=http://127.0.0.7$i:2380"; done
for i in 1 2 3; do
    ip="127.0.0.7$i"
    etcd --name "e$i" --data-dir "$work/etcd$i" \
        --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
        --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
        --initial-cluster "$initial" --initial-cluster-state new --log-level error \
        >"$work/etcd$i.log" 2>&1 &
    pids+=($!); etcd_pids+=($!)
    etcd_urls+=("http://$ip:2379")
done

wait_leader() {
    for _ in $(seq 1 400); do
        if [ "$(curl -sf "$1/v1/status/leader" 2>/dev/null)" != "" ] &&
            [ "$(curl -sf "$1/v1/status/leader")" != '""' ]; then return 0; fi
        sleep 0.05
    done
    echo "no leader at $1" >&2
    return 1
}
for url in "${legate_urls[@]}"; do wait_leader "$url"; done
for url in "${etcd_urls[@]}"; do wait_http "$url/health"; done
sleep 5
rss() { local total=0; for pid in "$@"; do total=$((total + $(rss_kb "$pid"))); done; echo "$total"; }
echo "idle_rss_kb (3 members) legate=$(rss "${legate_pids[@]}") etcd=$(rss "${etcd_pids[@]}")"

join() { local IFS=,; echo "$*"; }
echo -n "kv_put legate_cluster: "
"$BENCH" kv-put --target legate --url "$(join "${legate_urls[@]}")" --concurrency "$CLIENTS" --seconds "$SECONDS_PER_RUN"
echo -n "kv_put etcd_cluster: "
"$BENCH" kv-put --target etcd --url "$(join "${etcd_urls[@]}")" --concurrency "$CLIENTS" --seconds "$SECONDS_PER_RUN"
echo "rss_after_load_kb (3 members) legate=$(rss "${legate_pids[@]}") etcd=$(rss "${etcd_pids[@]}")"
