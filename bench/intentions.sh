#!/usr/bin/env bash
# Memory per intention source: a `-dev` agent (release build), a `db`
# sidecar, and one `service-intentions` entry of 10,000 sources for `db`;
# RSS is read from /proc before and after.
#
#   bash bench/intentions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
start_dev_agent
python3 bench/intentions.py "http://127.0.0.1:$http" "$pid" 10000
