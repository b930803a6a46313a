# Sourced by the bench scripts: a scratch directory, background processes
# that are stopped on exit, and free loopback ports.
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    # A process that has not stopped 10 s after its SIGTERM is reported and
    # killed, so that it cannot weigh on the next run's figures.
    for _ in $(seq 1 100); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            echo "process $pid did not stop within 10 s of SIGTERM; killed" >&2
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
wait_http() {
    for _ in $(seq 1 200); do
        if curl -sf "$1" >/dev/null 2>&1; then return 0; fi
        sleep 0.05
    done
    echo "timed out waiting for $1" >&2
    return 1
}

# Release builds of legate and legate-bench, and etcd (Debian's
# etcd-server), the peer the KV benchmarks compare with.
bench_build_with_etcd() {
    if ! command -v etcd >/dev/null 2>&1; then
        apt-get install -y -qq etcd-server >/dev/null
    fi
    cargo build --release --quiet -p legate-cli -p legate-bench
    LEGATE=target/release/legate
    BENCH=target/release/legate-bench
}

# A release `-dev` agent on a free HTTP port (no DNS, no gRPC), stopped on
# exit; sets $http and $pid.
start_dev_agent() {
    cargo build --release --quiet -p legate-cli
    http=$(port)
    target/release/legate agent -dev -http-port="$http" -dns-port=-1 -grpc-port=-1 \
        -log-level=warn >"$work/agent.log" 2>&1 &
    pid=$!; pids+=($pid)
    wait_http "http://127.0.0.1:$http/v1/status/leader"
}
