#!/usr/bin/env bash
# Data-plane benchmark: client -> web sidecar -> db sidecar -> echo, three ways
# on loopback, one after the other on the same machine:
#   plain    the client talks to the echo server directly (the limit)
#   legate   two `legate connect proxy` sidecars (mTLS between them), configured by a -dev agent
#   haproxy  two HAProxy 2.6 hops (Debian's package) with TLS and client certificates between them
# Throughput: N connections streaming 16 KiB writes that the echo returns.
# Latency: one connection, 64-byte request-response round trips.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v haproxy >/dev/null 2>&1 || apt-get install -y -qq haproxy >/dev/null
cargo build --release --quiet -p legate-cli -p legate-bench
LEGATE=target/release/legate
BENCH=target/release/legate-bench
SECONDS_EACH=${SECONDS_EACH:-5}
# shellcheck source=bench/common.sh
source bench/common.sh

echo_port=$(port)
"$BENCH" echo --port "$echo_port" & pids+=($!)

run() {  # name addr
    for c in 1 64; do
        echo -n "$1 throughput $c: "; "$BENCH" tcp --addr "$2" --connections "$c" --seconds "$SECONDS_EACH"
    done
    echo -n "$1 latency: "; "$BENCH" tcp --addr "$2" --mode latency --seconds "$SECONDS_EACH"
}

run plain "127.0.0.1:$echo_port"

# Legate: agent + two built-in sidecars.
http=$(port); grpc=$(port); web_sc=$(port); db_sc=$(port); up=$(port)
cat >"$work/demo.hcl" <<HCL
services {
  name = "web"
  port = 8080
  connect { sidecar_service { port = $web_sc
    proxy { upstreams { destination_name = "db"
                        local_bind_port = $up } } } }
}
services {
  name = "db"
  port = $echo_port
  connect { sidecar_service { port = $db_sc } }
}
HCL
"$LEGATE" agent -dev -http-port="$http" -dns-port=-1 -grpc-port="$grpc" -log-level=warn \
    -config-file "$work/demo.hcl" >"$work/agent.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do curl -sf "127.0.0.1:$http/v1/status/leader" >/dev/null && break; sleep 0.1; done
CONSUL_HTTP_ADDR="127.0.0.1:$http" "$LEGATE" connect proxy -sidecar-for web -log-level warn >"$work/web.log" 2>&1 & pids+=($!)
CONSUL_HTTP_ADDR="127.0.0.1:$http" "$LEGATE" connect proxy -sidecar-for db -log-level warn >"$work/db.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do
    [ "$(curl -sf "127.0.0.1:$http/v1/health/connect/db?passing" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] && break
    sleep 0.2
done
run legate "127.0.0.1:$up"

# HAProxy: the same two hops with TLS and client certificates between them.
(cd "$work" && openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null \
  && openssl req -x509 -new -key ca.key -days 2 -subj /CN=bench-ca -out ca.pem 2>/dev/null \
  && for n in hop1 hop2; do
       openssl ecparam -name prime256v1 -genkey -noout -out $n.key 2>/dev/null
       openssl req -new -key $n.key -subj /CN=$n -out $n.csr 2>/dev/null
       printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth,clientAuth\n' $n > $n.ext
       openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile $n.ext -out $n.crt 2>/dev/null
       cat $n.crt $n.key > $n.pem
     done)
h1=$(port); h2=$(port)
cat >"$work/haproxy.cfg" <<CFG
global
    nbthread 2
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend hop1
    bind 127.0.0.1:$h1
    default_backend to_hop2
backend to_hop2
    server hop2 127.0.0.1:$h2 ssl crt $work/hop1.pem ca-file $work/ca.pem verify required verifyhost hop2
frontend hop2
    bind 127.0.0.1:$h2 ssl crt $work/hop2.pem ca-file $work/ca.pem verify required
    default_backend app
backend app
    server echo 127.0.0.1:$echo_port
CFG
haproxy -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1 & pids+=($!)
run haproxy "127.0.0.1:$h1"
