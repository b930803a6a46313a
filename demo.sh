#!/usr/bin/env bash
# The seed demo (../shared/seeds/002), with `legate` for `consul` and the
# built-in proxy where Envoy is absent. Runs everything on loopback, checks
# each step, and cleans up after itself.
#
#   bash demo.sh            # builds and uses target/release/legate
set -euo pipefail
cd "$(dirname "$0")"
LEGATE=${LEGATE:-target/release/legate}
[ -n "${LEGATE_SKIP_BUILD:-}" ] || cargo build --release --quiet -p legate-cli
# shellcheck source=bench/common.sh
source bench/common.sh
step() { printf '\n$ %s\n' "$*"; }

cat >"$work/demo.hcl" <<'HCL'
services {
  name = "web"
  port = 8080
  connect {
    sidecar_service {
      proxy {
        upstreams {
          destination_name = "db"
          local_bind_port = 9191
        }
      }
    }
  }
}
services {
  name = "db"
  port = 9090
  connect { sidecar_service {} }
}
HCL

step "legate agent -dev -hcl 'ports { grpc = 8502 }' -config-file demo.hcl"
"$LEGATE" agent -dev -hcl 'ports { grpc = 8502 }' -config-file "$work/demo.hcl" >"$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do curl -sf localhost:8500/v1/status/leader >/dev/null && break; sleep 0.1; done

if command -v envoy >/dev/null 2>&1; then
    step "legate connect envoy -sidecar-for web"
    "$LEGATE" connect envoy -sidecar-for web >"$work/web.log" 2>&1 & pids+=($!)
    step "legate connect envoy -sidecar-for db -admin-bind localhost:19001"
    "$LEGATE" connect envoy -sidecar-for db -admin-bind localhost:19001 >"$work/db.log" 2>&1 & pids+=($!)
else
    step "legate connect proxy -sidecar-for web      # no envoy on PATH: the built-in proxy"
    "$LEGATE" connect proxy -sidecar-for web >"$work/web.log" 2>&1 & pids+=($!)
    step "legate connect proxy -sidecar-for db -admin-bind localhost:19001"
    "$LEGATE" connect proxy -sidecar-for db -admin-bind localhost:19001 >"$work/db.log" 2>&1 & pids+=($!)
fi

step 'socat -v tcp-l:9090,fork exec:"/bin/cat"'
if command -v socat >/dev/null 2>&1; then
    socat tcp-l:9090,fork,reuseaddr exec:/bin/cat >"$work/echo.log" 2>&1 & pids+=($!)
else
    python3 -c '
import socketserver
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(4096)
            if not data: break
            self.request.sendall(data)
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", 9090), Echo).serve_forever()' >"$work/echo.log" 2>&1 & pids+=($!)
fi

# Wait until db's sidecar is healthy (its listening check passes).
for _ in $(seq 1 100); do
    [ "$(curl -sf 'localhost:8500/v1/health/connect/db?passing' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] && break
    sleep 0.2
done

send() {  # nc localhost 9191 with one line; prints the echo, if any
    python3 - "$1" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", 9191), timeout=2)
    s.settimeout(1)
    s.sendall(sys.argv[1].encode() + b"\n")
    print(s.recv(4096).decode().rstrip())
except Exception:
    print("")
PY
}
expect_echo() { for _ in $(seq 1 50); do [ "$(send "$1")" = "$1" ] && { echo "$1"; return 0; }; sleep 0.2; done; echo "FAIL: no echo for '$1'" >&2; exit 1; }
expect_none() { for _ in $(seq 1 50); do [ -z "$(send "$1")" ] && { echo "(connection closed, no echo)"; return 0; }; sleep 0.2; done; echo "FAIL: '$1' still echoed" >&2; exit 1; }

step "nc localhost 9191      # hello world"
expect_echo "hello world"
step "legate intention create -deny web db"
"$LEGATE" intention create -deny web db
step "nc localhost 9191      # hello again"
expect_none "hello again"
step "legate intention delete web db"
"$LEGATE" intention delete web db
step "nc localhost 9191      # hello once more"
expect_echo "hello once more"
printf '\nThe demo works.\n'
