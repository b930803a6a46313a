#!/usr/bin/env bash
# ACL cost on the read path, side by side in one run: KV GET req/s and
# agent CPU-µs per request on a `-dev` agent with ACLs on (default deny; a
# token of 20 policies holding 200 rules in all) and on one with ACLs off,
# interleaved five times each (median and spread). Then 100,000 tokens in
# the store: the agent's RSS before and after, and the cost of a GET when
# every request carries another of those tokens (each resolved anew past
# the server's token cache) against one token over and over.
#
#   bash bench/acl.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)"
# shellcheck source=bench/common.sh
source bench/common.sh
cargo build --release --quiet -p legate-cli -p legate-bench
BENCH=target/release/legate-bench
ROOT=3e1f6a2b-9c4d-4e7f-8a1b-2c3d4e5f6a7b
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}

start() { # name, extra hcl -> sets ${name}_http ${name}_pid
    local http; http=$(port)
    echo "$2" >"$work/$1.hcl"
    target/release/legate agent -dev -config-file="$work/$1.hcl" -http-port="$http" \
        -dns-port=-1 -grpc-port=-1 -log-level=warn >"$work/$1.log" 2>&1 &
    pids+=($!)
    printf -v "${1}_http" '%s' "$http"
    printf -v "${1}_pid" '%s' "$!"
    wait_http "http://127.0.0.1:$http/v1/status/leader"
}
start on "acl { enabled = true default_policy = \"deny\" tokens { initial_management = \"$ROOT\" } }"
start off ""
sleep 1
H="X-Consul-Token: $ROOT"
# 20 policies of 10 rules each; one of them reads the benchmark key.
links=""
for p in $(seq 1 20); do
    python3 - "$p" >"$work/policy.json" <<'PY'
import json, sys
p = int(sys.argv[1])
rules = "".join(f'key_prefix "app/p{p}/r{r}/" {{ policy = "read" }}\n' for r in range(1, 11))
if p == 20:
    rules += 'key "bench/k" { policy = "read" }\n'
print(json.dumps({"Name": f"p{p}", "Rules": rules}))
PY
    curl -sf -X PUT -H "$H" "http://127.0.0.1:$on_http/v1/acl/policy" -d @"$work/policy.json" >/dev/null
    links+="{\"Name\":\"p$p\"},"
done
token=$(curl -sf -X PUT -H "$H" "http://127.0.0.1:$on_http/v1/acl/token" \
    -d "{\"Policies\":[${links%,}]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["SecretID"])')
curl -sf -X PUT -H "$H" "http://127.0.0.1:$on_http/v1/kv/bench/k" -d value >/dev/null
curl -sf -X PUT "http://127.0.0.1:$off_http/v1/kv/bench/k" -d value >/dev/null

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
run() { # pid, url, extra args -> "ops_per_sec cpu_us_per_op"
    local before after out ops
    before=$(cpu_ticks "$1")
    out=$($BENCH http-get --url "$2" --concurrency 32 --seconds "$SECONDS_PER_RUN" "${@:3}")
    after=$(cpu_ticks "$1")
    ops=$(sed -E 's/.*ops=([0-9]+) .*/\1/' <<<"$out")
    echo "$(sed -E 's/.*ops_per_sec=([0-9]+).*/\1/' <<<"$out") $(( (after - before) * 1000000 / hz / ops ))"
}
: >"$work/on.txt"; : >"$work/off.txt"
for i in 1 2 3 4 5; do
    run "$on_pid" "http://127.0.0.1:$on_http/v1/kv/bench/k" --token "$token" | tee -a "$work/on.txt" | sed "s/^/round $i acl on:  /"
    run "$off_pid" "http://127.0.0.1:$off_http/v1/kv/bench/k" | tee -a "$work/off.txt" | sed "s/^/round $i acl off: /"
done
summary() { # file, label
    python3 - "$1" "$2" <<'PY'
import statistics, sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
ops, cpu = [r[0] for r in rows], [r[1] for r in rows]
print(f"{sys.argv[2]}: median {statistics.median(ops):.0f} req/s (spread {min(ops)}-{max(ops)}), "
      f"median {statistics.median(cpu):.0f} CPU-us/req (spread {min(cpu)}-{max(cpu)})")
PY
}
summary "$work/on.txt" "ACLs on, 20 policies / 200 rules"
summary "$work/off.txt" "ACLs off"

# 100,000 tokens.
echo "rss_kb before tokens: $(rss_kb "$on_pid")"
$BENCH acl-tokens --url "http://127.0.0.1:$on_http" --management "$ROOT" --policy p20 \
    --count "${TOKENS:-100000}" --concurrency 32 --out "$work/tokens.txt"
sleep 2
echo "rss_kb after tokens: $(rss_kb "$on_pid")"
echo "one token:        $(run "$on_pid" "http://127.0.0.1:$on_http/v1/kv/bench/k" --token "$token") (req/s, CPU-us/req)"
echo "rotating tokens:  $(run "$on_pid" "http://127.0.0.1:$on_http/v1/kv/bench/k" --tokens-file "$work/tokens.txt") (req/s, CPU-us/req)"
echo "rss_kb after the rotating run: $(rss_kb "$on_pid")"
