#!/usr/bin/env bash
# Login cost, side by side in one run on three release `-dev` agents with
# ACLs on: logins/s (an ES256 JWT verified, binding rules applied, a token
# written through Raft) against plain token creates/s (`PUT /v1/acl/token`
# with one policy) — the same write without the JWT — each with 32
# clients; then the Raft state each leaves behind (`/v1/snapshot`, the
# archive a restore reads, and the tokens in it) and the agent's RSS:
# 100,000 logins without logouts, 100,000 logins each followed by its
# logout, and 100,000 created tokens.
#
#   bash bench/login.sh            (COUNT=... to change 100,000)
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)"
# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --release --quiet -p legate-cli -p legate-bench
BENCH=target/release/legate-bench
ROOT=5d0c7a3e-2b1f-4c8d-9e6a-7f1b2c3d4e5f
COUNT=${COUNT:-100000}

start() { # name -> sets ${name}_http ${name}_pid
    local http; http=$(port)
    target/release/legate agent -dev -http-port="$http" -dns-port=-1 -grpc-port=-1 \
        -log-level=warn -hcl "acl { enabled = true default_policy = \"deny\" tokens { initial_management = \"$ROOT\" } }" \
        >"$work/$1.log" 2>&1 &
    pids+=($!)
    printf -v "${1}_http" '%s' "$http"
    printf -v "${1}_pid" '%s' "$!"
    wait_http "http://127.0.0.1:$http/v1/status/leader"
}
state() { # name, label: snapshot bytes, tokens held, RSS
    local http="${1}_http" pid="${1}_pid"
    curl -sf -H "X-Consul-Token: $ROOT" "http://127.0.0.1:${!http}/v1/snapshot" -o "$work/$1.snap"
    local tokens
    tokens=$(curl -sf -H "X-Consul-Token: $ROOT" "http://127.0.0.1:${!http}/v1/acl/tokens" |
        python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
    echo "$2: snapshot_bytes=$(stat -c %s "$work/$1.snap") tokens=$tokens rss_kb=$(rss_kb "${!pid}")"
}
for name in login logout create; do start "$name"; done
sleep 1
for name in login logout create; do state "$name" "$name before"; done

curl -sf -X PUT -H "X-Consul-Token: $ROOT" "http://127.0.0.1:$create_http/v1/acl/policy" \
    -d '{"Name":"svc","Rules":"service_prefix \"svc-\" { policy = \"write\" }"}' >/dev/null
echo "token creates: $($BENCH acl-tokens --url "http://127.0.0.1:$create_http" --management "$ROOT" \
    --policy svc --count "$COUNT" --concurrency 32 --out "$work/created.txt")"
echo "logins:        $($BENCH logins --url "http://127.0.0.1:$login_http" --management "$ROOT" \
    --count "$COUNT" --concurrency 32 | tail -1)"
echo "login+logout:  $($BENCH logins --url "http://127.0.0.1:$logout_http" --management "$ROOT" \
    --count "$COUNT" --concurrency 32 --logout | tail -1)"
sleep 2
state login "after $COUNT logins"
state logout "after $COUNT logins and logouts"
state create "after $COUNT token creates"
