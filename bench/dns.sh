#!/usr/bin/env bash
# DNS: Legate (release build) and BIND 9 (the peer: Debian's bind9 serving
# the same names from a static zone, no health filtering) side by side on
# loopback, queried over UDP by `legate-bench dns` from a separate process.
#
#   bash bench/dns.sh            # prints one line per measurement
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v named >/dev/null 2>&1; then
    apt-get install -y -qq bind9 >/dev/null
fi
# `dig` checks that BIND has loaded its zone before the runs.
command -v dig >/dev/null 2>&1 || apt-get install -y -qq bind9-dnsutils >/dev/null
cargo build --release --quiet -p legate-cli -p legate-bench
LEGATE=${LEGATE:-target/release/legate}
BENCH=target/release/legate-bench
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CONCURRENCY=${CONCURRENCY:-32}
INSTANCES=${INSTANCES:-1000}

# shellcheck source=bench/common.sh
source bench/common.sh

http=$(port); dns=$(port)
"$LEGATE" agent -dev -http-port="$http" -dns-port="$dns" -grpc-port=-1 -log-level=warn >"$work/legate.log" 2>&1 &
pids+=($!); legate_pid=$!
wait_http "http://127.0.0.1:$http/v1/status/leader"
curl -sf -X PUT "http://127.0.0.1:$http/v1/catalog/register" \
    -d '{"Node":"one","Address":"10.1.0.1","Service":{"ID":"web","Service":"web","Port":80}}' >/dev/null
# The zone BIND serves: the same names and addresses.
{
    echo '$TTL 0'
    echo '@ IN SOA ns.consul. hostmaster.consul. 1 3600 600 86400 0'
    echo '@ IN NS ns.consul.'
    echo 'ns IN A 127.0.0.1'
    echo 'web.service IN A 10.1.0.1'
} >"$work/db.consul"
for i in $(seq 1 "$INSTANCES"); do
    a="10.2.$((i / 256)).$((i % 256))"
    curl -sf -X PUT "http://127.0.0.1:$http/v1/catalog/register" \
        -d "{\"Node\":\"n$i\",\"Address\":\"$a\",\"Service\":{\"ID\":\"big$i\",\"Service\":\"big\",\"Port\":80}}" >/dev/null
    echo "big.service IN A $a" >>"$work/db.consul"
done
bind=$(port)
cat >"$work/named.conf" <<CONF
options {
    directory "$work";
    pid-file "$work/named.pid";
    listen-on port $bind { 127.0.0.1; };
    listen-on-v6 { none; };
    recursion no;
    minimal-responses yes;
    max-records-per-type 0;
};
zone "consul" { type master; file "$work/db.consul"; };
CONF
named -g -u root -c "$work/named.conf" -n 2 >"$work/named.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
    [ "$(dig @127.0.0.1 -p "$bind" +short web.service.consul 2>/dev/null)" = "10.1.0.1" ] && break
    sleep 0.1
done
if [ "$(dig @127.0.0.1 -p "$bind" +short web.service.consul)" != "10.1.0.1" ]; then
    echo "BIND did not load the zone:" >&2; cat "$work/named.log" >&2; exit 1
fi
# Prepared queries over the same services (issue: `.query` against the
# plain lookup of the same service, same cache setting).
for name in web big; do
    curl -sf -X POST "http://127.0.0.1:$http/v1/query" \
        -d "{\"Name\":\"$name-q\",\"Service\":{\"Service\":\"$name\"}}" >/dev/null
done
sleep 1
for name in web big; do
    echo -n "dns $name-q.query.consul legate: "; "$BENCH" dns --server "127.0.0.1:$dns" --name "$name-q.query.consul" --concurrency "$CONCURRENCY" --seconds "$SECONDS_PER_RUN"
done
for name in web big; do
    echo -n "dns $name.service.consul legate: "; "$BENCH" dns --server "127.0.0.1:$dns" --name "$name.service.consul" --concurrency "$CONCURRENCY" --seconds "$SECONDS_PER_RUN"
    echo -n "dns $name.service.consul bind9:  "; "$BENCH" dns --server "127.0.0.1:$bind" --name "$name.service.consul" --concurrency "$CONCURRENCY" --seconds "$SECONDS_PER_RUN"
done
echo "legate_rss_kb=$(rss_kb "$legate_pid")"
