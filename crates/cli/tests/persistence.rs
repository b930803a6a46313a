//! State survives `kill -9` and a restart with the same data dir: the
//! Raft log and snapshots (catalog, KV) and the agent's local state.

mod common;

use std::time::Duration;

use common::{eventually, TestAgent};
use serde_json::json;

fn server_flags(dir: &str) -> Vec<String> {
    let mut flags = vec![
        "-server".into(),
        "-bootstrap-expect=1".into(),
        format!("-data-dir={dir}"),
        "-node=persist".into(),
        "-bind=127.0.0.1".into(),
    ];
    flags.extend(common::own_server_ports());
    flags
}

#[test]
fn kv_and_sidecar_registration_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let dir_text = dir.path().display().to_string();
    let flags = server_flags(&dir_text);
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let node_id;
    {
        let mut agent = TestAgent::start(&flag_refs);
        assert_eq!(agent.put("/v1/kv/app/config", "v1").1, "true");
        let body = r#"{"Name":"web","Port":8080,"Check":{"TTL":"5m","Status":"passing"},
            "Connect":{"SidecarService":{"Proxy":{"Upstreams":[{"DestinationName":"db","LocalBindPort":9191}]}}}}"#;
        assert_eq!(agent.put("/v1/agent/service/register", body).0, 200);
        // Enough writes to make Raft take a snapshot and keep a log tail after it.
        for i in 0..50 {
            agent.put(&format!("/v1/kv/bulk/{i}"), "x");
        }
        eventually(Duration::from_secs(5), || {
            (agent
                .get("/v1/catalog/service/web-sidecar-proxy")
                .ok()?
                .as_array()?
                .len()
                == 1)
                .then_some(())
        });
        node_id = agent.get("/v1/agent/self").unwrap()["Config"]["NodeID"].clone();
        agent.kill9();
    }
    let agent = TestAgent::start(&flag_refs);
    assert_eq!(
        agent.get("/v1/agent/self").unwrap()["Config"]["NodeID"],
        node_id
    );
    assert_eq!(agent.get_text("/v1/kv/app/config?raw").unwrap(), "v1");
    assert_eq!(
        agent
            .get("/v1/kv/bulk/?keys")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        50
    );
    let services = agent.get("/v1/agent/services").unwrap();
    assert_eq!(services["web"]["Port"], 8080);
    assert_eq!(services["web-sidecar-proxy"]["Port"], 21000);
    assert_eq!(
        services["web-sidecar-proxy"]["Proxy"]["Upstreams"][0]["DestinationName"],
        json!("db")
    );
    // The TTL check kept its status across the restart.
    assert_eq!(
        agent.get("/v1/agent/checks").unwrap()["service:web"]["Status"],
        "passing"
    );
    // The catalog never lost them either.
    let rows = agent.get("/v1/catalog/service/web").unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert!(dir.path().join("raft/raft.db").exists());
}

#[test]
fn graceful_shutdown_exits_zero_on_sigterm_and_leave() {
    let mut agent = TestAgent::dev(&[]);
    sigterm(&agent);
    let exit = wait_exit(&mut agent.child, Duration::from_secs(10));
    assert_eq!(exit, Some(0), "log:\n{}", agent.log_text());

    // /v1/agent/leave through the CLI, with a blocking query in flight.
    let mut agent = TestAgent::dev(&[]);
    agent.put("/v1/kv/k", "v");
    let port = agent.http_port;
    let blocked = std::thread::spawn(move || {
        common::try_http_request(port, "GET", "/v1/kv/k?index=1000000&wait=5m", None)
    });
    std::thread::sleep(Duration::from_millis(200));
    let out = agent.cli(&["leave"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Graceful leave complete"
    );
    let exit = wait_exit(&mut agent.child, Duration::from_secs(10));
    assert_eq!(exit, Some(0), "log:\n{}", agent.log_text());
    // The blocking query was answered with what the store held, as
    // Consul's servers answer theirs when they shut down, not cut off.
    let (status, headers, body) = blocked
        .join()
        .unwrap()
        .expect("the blocking query was answered");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"Key\":\"k\""), "{body}");
    assert!(
        headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("x-consul-index")),
        "{headers:?}"
    );
}

#[test]
fn stopping_closes_idle_keep_alive_connections_at_once() {
    use std::io::{Read, Write};
    let agent = TestAgent::dev(&[]);
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", agent.http_port)).unwrap();
    idle.write_all(b"GET /v1/status/leader HTTP/1.1\r\nHost: agent\r\n\r\n")
        .unwrap();
    let mut answer = [0u8; 1024];
    let read = idle.read(&mut answer).unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    sigterm(&agent);
    // The stop reaches every connection: this one, between requests, is
    // closed at once, not cut off when the five-second grace for
    // requests in flight runs out.
    idle.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    let closed = idle.read(&mut answer);
    assert!(
        matches!(closed, Ok(0)),
        "{closed:?}; log:\n{}",
        agent.log_text()
    );
}

fn sigterm(agent: &TestAgent) {
    let pid = agent.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_exit(child: &mut std::process::Child, timeout: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn api_registrations_survive_a_restart_beside_config_file_services() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::write(
        dir.path(),
        "services.hcl",
        "services {\n  name = \"from-config\"\n  port = 7000\n}\n",
    );
    let data = dir.path().join("data").display().to_string();
    let mut flags = server_flags(&data);
    flags.push(format!("-config-file={}", config.display()));
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut agent = TestAgent::start(&flag_refs);
    for body in [
        r#"{"Name":"from-api","Port":7001}"#,
        // Same ID as the config file's service: the config wins later.
        r#"{"Name":"from-config","Port":7999}"#,
    ] {
        assert_eq!(agent.put("/v1/agent/service/register", body).0, 200);
    }
    agent.kill9();
    let agent = TestAgent::start(&flag_refs);
    let services = agent.get("/v1/agent/services").unwrap();
    assert_eq!(services["from-api"]["Port"], 7001, "{services}");
    assert_eq!(services["from-config"]["Port"], 7000, "{services}");
}

#[test]
fn a_restart_syncs_a_service_whose_definition_changed_and_keeps_the_others_rows() {
    let dir = tempfile::tempdir().unwrap();
    let services = |changed_port: u16| {
        format!(
            "services {{\n  name = \"same\"\n  port = 7000\n  tags = [\"a\"]\n  meta {{ k = \"v\" }}\n}}\n\
             services {{\n  name = \"changes\"\n  port = {changed_port}\n}}\n"
        )
    };
    let config = common::write(dir.path(), "services.hcl", &services(7100));
    let data = dir.path().join("data").display().to_string();
    let mut flags = server_flags(&data);
    flags.push(format!("-config-file={}", config.display()));
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let catalog_row = |agent: &TestAgent, name: &str| {
        agent
            .get(&format!("/v1/catalog/service/{name}"))
            .ok()
            .and_then(|rows| rows.as_array()?.first().cloned())
    };
    let mut agent = TestAgent::start(&flag_refs);
    let same_before = eventually(Duration::from_secs(10), || {
        catalog_row(&agent, "changes")?;
        catalog_row(&agent, "same")
    });
    agent.kill9();
    common::write(dir.path(), "services.hcl", &services(7200));
    let agent = TestAgent::start(&flag_refs);
    // The full sync at start finds the changed port and pushes it.
    eventually(Duration::from_secs(10), || {
        (catalog_row(&agent, "changes")?["ServicePort"] == 7200).then_some(())
    });
    // The unchanged service's row is the one it was (the catalog also
    // ignores an identical write, as Consul's does).
    let same_after = catalog_row(&agent, "same").unwrap();
    assert_eq!(same_after["ModifyIndex"], same_before["ModifyIndex"]);
    assert_eq!(same_after["ServiceTags"], json!(["a"]));
}
