#!/usr/bin/env bash
# Memory per upstream: a `-dev` agent (release build) with one sidecar of
# 10,000 upstreams, then three register/deregister cycles of 2,000; RSS is
# read from /proc after each step (deregistrations wait 50 s: the agent's
# shared caches drop keys nobody follows after 30 s, checked every 15 s).
#
#   bash bench/upstreams.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --release --quiet -p legate-cli
http=$(port)
target/release/legate agent -dev -http-port="$http" -dns-port=-1 -grpc-port=-1 -log-level=warn >"$work/agent.log" 2>&1 &
pid=$!; pids+=($pid)
wait_http "http://127.0.0.1:$http/v1/status/leader"
python3 bench/upstreams.py "http://127.0.0.1:$http" "$pid" 10000 1 50
python3 bench/upstreams.py "http://127.0.0.1:$http" "$pid" 2000 3 50
