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
