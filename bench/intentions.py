"""What a large `service-intentions` entry costs a running agent: registers
`db` with a sidecar, writes an entry of N allow sources for it, and reports
the RSS it added per source once the sidecar's snapshot holds them.

    python3 bench/intentions.py URL PID SOURCES
"""
import json, sys, time, urllib.request

base, pid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

def put(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="PUT")
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()

put("/v1/agent/service/register", {"Name": "db", "Port": 5432, "Connect": {"SidecarService": {}}})
time.sleep(3)
before = rss()
entry = {"Kind": "service-intentions", "Name": "db",
         "Sources": [{"Name": f"web{i}", "Action": "allow"} for i in range(n)]}
print("entry bytes", len(json.dumps(entry)))
print("baseline MB (db and its sidecar registered)", before)
put("/v1/config", entry)
time.sleep(10)
after = rss()
print(f"with {n} sources MB {after} (+{after - before}, {(after - before) * 1024 / n:.1f} KB/source)")
