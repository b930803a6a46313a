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
start_dev_agent
python3 bench/upstreams.py "http://127.0.0.1:$http" "$pid" 10000 1 50
python3 bench/upstreams.py "http://127.0.0.1:$http" "$pid" 2000 3 50
