//! Agent endpoints as Consul answers them: `/v1/agent/monitor` (and
//! `legate monitor`) streaming the agent's log in hclog's shapes.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{binary, TestAgent};

/// Opens `/v1/agent/monitor?<query>` and reads until `until` shows up in
/// what arrived (or `patience` passes), running `trigger` once the stream
/// is open.
fn monitor_until(
    agent: &TestAgent,
    query: &str,
    until: &str,
    patience: Duration,
    trigger: impl FnOnce(),
) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", agent.http_port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    write!(
        stream,
        "GET /v1/agent/monitor?{query} HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + patience;
    let mut trigger = Some(trigger);
    while Instant::now() < deadline {
        if let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&seen);
        if text.contains("\r\n\r\n") {
            if let Some(t) = trigger.take() {
                t();
            }
        }
        if text.contains(until) {
            break;
        }
    }
    String::from_utf8_lossy(&seen).to_string()
}

#[test]
fn monitor_streams_the_log_in_hclogs_shapes_and_refuses_unknown_levels() {
    let agent = TestAgent::dev(&[]);
    let (status, _, body) = agent.request("GET", "/v1/agent/monitor?loglevel=verbose", None);
    assert_eq!((status, body.as_str()), (400, "Unknown log level: verbose"));

    let register = |name: &'static str| {
        let agent = &agent;
        move || {
            let (status, body) = agent.put(
                "/v1/agent/service/register",
                &format!(r#"{{"Name":"{name}","Port":80}}"#),
            );
            assert_eq!(status, 200, "{body}");
        }
    };
    let text = monitor_until(
        &agent,
        "loglevel=info",
        "service=mon-web",
        Duration::from_secs(20),
        register("mon-web"),
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("service=mon-web"))
        .unwrap_or_else(|| panic!("no line for the registration in:\n{text}"));
    // 2026-12-04T01:02:03.456Z [INFO]  agent.sync: Synced service: service=mon-web
    let (stamp, rest) = line.split_once(' ').unwrap();
    assert_eq!(stamp.len(), 24, "{line}");
    assert!(
        stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "{line}"
    );
    assert_eq!(rest, "[INFO]  agent.sync: Synced service: service=mon-web");

    let text = monitor_until(
        &agent,
        "loglevel=INFO&logjson",
        "mon-api",
        Duration::from_secs(20),
        register("mon-api"),
    );
    let line = text
        .lines()
        .find(|l| l.contains("mon-api"))
        .unwrap_or_else(|| panic!("no line for the registration in:\n{text}"));
    let json: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(json["@level"], "info");
    assert_eq!(json["@message"], "Synced service");
    assert_eq!(json["@module"], "agent.sync");
    assert_eq!(json["service"], "mon-api");
    assert!(json["@timestamp"].is_string());

    // At error only, a registration says nothing (the sync runs within
    // the 3 s watched).
    let text = monitor_until(
        &agent,
        "loglevel=err",
        "Synced",
        Duration::from_secs(3),
        register("mon-quiet"),
    );
    assert!(!text.contains("mon-quiet"), "{text}");

    // The CLI: Consul's error text, and lines until interrupted.
    let out = agent.cli(&["monitor", "-log-level=verbose"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "Error starting monitor: Unexpected response code: 400 (Unknown log level: verbose)"
    );
    let mut child = Command::new(binary())
        .args(["monitor", "-log-level=debug"])
        .env("CONSUL_HTTP_ADDR", agent.addr())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    register("mon-cli")();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if seen.contains("service=mon-cli") {
                break;
            }
        }
        seen
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let seen = reader.join().unwrap();
    assert!(
        seen.contains("[INFO]  agent.sync: Synced service: service=mon-cli"),
        "{seen}"
    );
}

/// An object's keys, sorted.
fn keys_of(value: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    keys
}

#[test]
fn host_and_version_take_consuls_shapes() {
    let agent = TestAgent::dev(&[]);
    let host = agent.get("/v1/agent/host").unwrap();
    assert_eq!(
        keys_of(&host),
        ["CPU", "CollectionTime", "Disk", "Errors", "Host", "Memory"]
    );
    assert_eq!(host["Errors"], serde_json::Value::Null, "{host}");
    // The facts are this machine's: /proc/meminfo and uname agree.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert_eq!(host["Memory"]["total"], total_kib * 1024);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(host["Host"]["hostname"], hostname.trim());
    assert_eq!(host["Host"]["os"], "linux");
    let cpus = host["CPU"].as_array().unwrap();
    let processors = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    assert_eq!(cpus.len(), processors);
    assert!(cpus.iter().all(|c| c["modelName"].is_string()), "{cpus:?}");
    assert!(host["Disk"]["total"].as_u64().unwrap() > 0);
    assert_eq!(host["Disk"]["path"], "/");
    assert!(host["CollectionTime"].as_i64().unwrap() > 1_600_000_000_000_000_000);

    let version = agent.get("/v1/agent/version").unwrap();
    assert_eq!(
        keys_of(&version),
        ["BuildDate", "FIPS", "HumanVersion", "SHA"]
    );
    let own: serde_json::Value = agent.get("/v1/agent/self").unwrap();
    assert_eq!(version["HumanVersion"], own["Config"]["Version"]);
}

#[test]
fn autopilot_state_names_the_leader_and_voters_of_the_raft_configuration() {
    let agent = TestAgent::dev(&[]);
    let raft = agent.get("/v1/operator/raft/configuration").unwrap();
    let id = raft["Servers"][0]["ID"].as_str().unwrap().to_string();
    let state = common::eventually(Duration::from_secs(20), || {
        let state = agent.get("/v1/operator/autopilot/state").ok()?;
        (state["Healthy"] == true).then_some(state)
    });
    assert_eq!(
        keys_of(&state),
        [
            "FailureTolerance",
            "Healthy",
            "Leader",
            "OptimisticFailureTolerance",
            "Servers",
            "Voters"
        ]
    );
    assert_eq!(state["Leader"], id.as_str());
    assert_eq!(state["Voters"], serde_json::json!([id]));
    let me = &state["Servers"][id.as_str()];
    assert_eq!(me["Status"], "leader");
    assert_eq!(me["NodeStatus"], "alive");
    assert_eq!(me["Address"], raft["Servers"][0]["Address"]);
    assert_eq!(state["FailureTolerance"], 0);
}

#[test]
fn agent_self_has_consuls_keys_and_stats_that_agree_with_status() {
    let agent = TestAgent::dev(&[]);
    let me = agent.get("/v1/agent/self").unwrap();
    assert_eq!(
        keys_of(&me),
        [
            "Config",
            "Coord",
            "DebugConfig",
            "Member",
            "Meta",
            "Stats",
            "xDS"
        ]
    );
    assert_eq!(
        keys_of(&me["Stats"]),
        ["agent", "build", "consul", "raft", "runtime", "serf_lan", "serf_wan"]
    );
    let consul = &me["Stats"]["consul"];
    for key in [
        "leader",
        "leader_addr",
        "server",
        "bootstrap",
        "known_datacenters",
        "acl",
    ] {
        assert!(consul[key].is_string(), "{key}: {consul}");
    }
    assert_eq!(consul["server"], "true");
    assert_eq!(consul["leader"], "true");
    let leader: String = agent
        .get("/v1/status/leader")
        .unwrap()
        .as_str()
        .unwrap()
        .into();
    assert_eq!(consul["leader_addr"], leader.as_str());
    let peers = agent.get("/v1/status/peers").unwrap();
    let raft = &me["Stats"]["raft"];
    assert_eq!(raft["state"], "Leader");
    assert_eq!(
        raft["num_peers"],
        (peers.as_array().unwrap().len() - 1).to_string()
    );
    assert!(raft["latest_configuration"]
        .as_str()
        .unwrap()
        .contains(peers[0].as_str().unwrap()));
    assert_eq!(me["Meta"]["consul-network-segment"], "");
    assert!(me["DebugConfig"]["Legate"]["Version"].is_string());
}

#[test]
fn info_prints_the_stats_sections_as_consul_does() {
    let agent = TestAgent::dev(&[]);
    let out = agent.cli(&["info"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let sections: Vec<&str> = text.lines().filter(|l| !l.starts_with('\t')).collect();
    assert_eq!(
        sections,
        [
            "agent:",
            "build:",
            "consul:",
            "raft:",
            "runtime:",
            "serf_lan:",
            "serf_wan:"
        ]
    );
    assert!(text.contains("\n\tleader = true\n"), "{text}");
    assert!(text.contains("\tstate = Leader\n"), "{text}");
    let unreachable = std::process::Command::new(binary())
        .args(["info", "-http-addr", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unreachable.stderr).starts_with("Error querying agent: "));
}

#[test]
fn metrics_stream_writes_a_summary_each_interval() {
    let agent = TestAgent::dev(&[]);
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", agent.http_port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    write!(
        stream,
        "GET /v1/agent/metrics/stream HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 65536];
    // The first summary comes at the end of the first 10 s interval.
    let summary = loop {
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "{}",
            String::from_utf8_lossy(&seen)
        );
        if let Ok(n) = stream.read(&mut buf) {
            assert!(n > 0, "the stream ended");
            seen.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&seen).to_string();
        let Some(body) = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()) else {
            continue;
        };
        // One chunk: its size line, the summary, CRLF.
        let Some(start) = body.find('{') else {
            continue;
        };
        let Some(end) = body.rfind("}\n") else {
            continue;
        };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body[start..=end]) {
            break v;
        }
    };
    assert!(started.elapsed() >= Duration::from_secs(9));
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    assert_eq!(
        keys_of(&summary),
        ["Counters", "Gauges", "Points", "Samples", "Timestamp"]
    );
}

#[test]
fn operator_usage_counts_services_instances_and_mesh_kinds_as_consul_ce() {
    let agent = TestAgent::dev(&[]);
    for body in [
        r#"{"Name":"web","Port":80,"Connect":{"SidecarService":{}}}"#,
        r#"{"Name":"api","ID":"api1","Port":81}"#,
        r#"{"Name":"api","ID":"api2","Port":82}"#,
        r#"{"Name":"pay","Port":83,"Connect":{"Native":true}}"#,
        r#"{"Kind":"mesh-gateway","Name":"gw","Port":8443}"#,
    ] {
        let (status, text) = agent.put("/v1/agent/service/register", body);
        assert_eq!(status, 200, "{text}");
    }
    let usage = common::eventually(Duration::from_secs(10), || {
        let usage = agent.get("/v1/operator/usage").ok()?;
        (usage["Usage"]["dc1"]["ServiceInstances"] == 7).then_some(usage)
    });
    let dc1 = &usage["Usage"]["dc1"];
    // consul, web, web-sidecar-proxy, api, pay, gw.
    assert_eq!(dc1["Services"], 6, "{usage}");
    assert_eq!(
        dc1["ConnectServiceInstances"],
        serde_json::json!({"connect-native": 1, "connect-proxy": 1, "ingress-gateway": 0,
                           "mesh-gateway": 1, "terminating-gateway": 0})
    );
    // web, api1, api2, pay: not the proxy, the gateway or consul.
    assert_eq!(dc1["BillableServiceInstances"], 4);
    for key in [
        "Index",
        "LastContact",
        "KnownLeader",
        "ConsistencyLevel",
        "NotModified",
        "Backend",
        "ResultsFilteredByACLs",
    ] {
        assert!(usage.get(key).is_some(), "{key}: {usage}");
    }
    // ?global with one datacenter is the same map.
    let global = agent.get("/v1/operator/usage?global").unwrap();
    assert_eq!(keys_of(&global["Usage"]), ["dc1"]);
}
