"""Starts the real `legate` binary for the Python client tests."""

import os
import random
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The ports tests pick from: below Linux's ephemeral range (32768-60999), so
# no outgoing connection (a blocking query's, a proxy's) can be holding one as
# its source port when an agent or a proxy comes to bind it; a kernel-chosen
# port could be.
TEST_PORTS = range(10_000, 32_000)
_given: set = set()


def free_port() -> int:
    """A port nobody listens on, never given twice in this run."""
    for _ in range(2_000):
        port = random.choice(TEST_PORTS)
        if port in _given:
            continue
        _given.add(port)
        try:
            with socket.socket() as s:
                s.bind(("0.0.0.0", port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no free port left in {TEST_PORTS.start}-{TEST_PORTS.stop}")


def legate_binary() -> str:
    path = os.environ.get("LEGATE_BIN", os.path.join(ROOT, "target", "debug", "legate"))
    if not os.path.exists(path):
        raise RuntimeError(f"legate binary not found at {path}: build it first (cargo build)")
    return path


class Agent:
    def __init__(self, extra_args=(), grpc_port=-1):
        self.port = free_port()
        self.grpc_port = grpc_port
        self.log = tempfile.NamedTemporaryFile(prefix="legate-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [legate_binary(), "agent", "-dev", f"-http-port={self.port}", "-dns-port=-1", f"-grpc-port={grpc_port}", *extra_args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/catalog/nodes", timeout=1) as r:
                    if r.status == 200 and r.read() not in (b"[]", b""):
                        return
            except Exception:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("legate agent did not start: " + open(self.log.name).read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def agent():
    a = Agent()
    yield a
    a.stop()


@pytest.fixture
def client(agent):
    import consul

    return consul.Consul(host="127.0.0.1", port=agent.port)
