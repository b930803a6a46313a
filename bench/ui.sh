#!/usr/bin/env bash
# The web UI's first load on a release `-dev` agent holding 200 services:
# bytes transferred and the time until the services rows are in the DOM,
# read through the DevTools protocol in headless Chromium (Debian's), five
# first visits with an empty cache each; medians.
#
#   bash bench/ui.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/common.sh
source bench/common.sh
npm ci --prefix tests/node --no-audit --no-fund --silent
start_dev_agent
for n in $(seq 1 200); do
    curl -sf -X PUT "http://127.0.0.1:$http/v1/agent/service/register" \
        -d "{\"Name\":\"svc-$n\",\"Port\":$((8000 + n)),\"Tags\":[\"v1\",\"team-$((n % 7))\"]}" >/dev/null
done
node bench/ui-load.js "$http" 5
