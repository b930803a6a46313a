"""What a sidecar's upstreams cost a running agent: registers `web` with a
sidecar of N upstreams, reports the RSS it added per upstream, deregisters
it and reports RSS again after the agent's caches let go (cycles times).

    python3 bench/upstreams.py URL PID UPSTREAMS [CYCLES] [SETTLE_SECONDS]
"""
import json, sys, time, urllib.request

base = sys.argv[1]
pid = int(sys.argv[2])
n = int(sys.argv[3])
cycles = int(sys.argv[4]) if len(sys.argv) > 4 else 1

def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()

body = {"Name": "web", "Port": 8080, "Connect": {"SidecarService": {"Proxy": {"Upstreams": [
    {"DestinationName": f"db{i}", "LocalBindPort": 10000 + i} for i in range(n)]}}}}
print("body bytes", len(json.dumps(body)))
time.sleep(2)
base_rss = rss()
print("baseline MB", base_rss)
for c in range(cycles):
    t = time.time()
    call("PUT", "/v1/agent/service/register", body)
    time.sleep(8)
    up = rss()
    print(f"cycle {c}: registered MB {up} (+{up - base_rss}, {(up - base_rss) * 1024 / n:.1f} KB/upstream) in {time.time()-t:.1f}s")
    call("PUT", "/v1/agent/service/deregister/web")
    time.sleep(float(sys.argv[5]) if len(sys.argv) > 5 else 8)
    print(f"cycle {c}: deregistered MB {rss()}")
