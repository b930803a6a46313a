//! Checks the agent runs: HTTP, TCP, script, alias, status gating, and
//! DeregisterCriticalServiceAfter, against real sockets on loopback.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, TestAgent};

/// A tiny HTTP server answering every request with the current status code.
fn http_server(status: Arc<AtomicU16>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let code = status.load(Ordering::SeqCst);
            let body = format!("status {code}");
            let response = format!(
                "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    port
}

fn check_status(agent: &TestAgent, id: &str) -> Option<String> {
    agent.get("/v1/agent/checks").ok()?[id]["Status"]
        .as_str()
        .map(String::from)
}

#[test]
fn http_checks_follow_the_endpoint() {
    let agent = TestAgent::dev(&[]);
    let status = Arc::new(AtomicU16::new(200));
    let port = http_server(status.clone());
    let body = format!(
        r#"{{"Name":"web","Port":{port},"Check":{{"HTTP":"http://127.0.0.1:{port}/health","Interval":"1s","Header":{{"X-Probe":["yes"]}}}}}}"#
    );
    assert_eq!(agent.put("/v1/agent/service/register", &body).0, 200);
    eventually(Duration::from_secs(10), || {
        (check_status(&agent, "service:web")? == "passing").then_some(())
    });
    let output = agent.get("/v1/agent/checks").unwrap()["service:web"]["Output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        output.contains("200") && output.contains("status 200"),
        "{output}"
    );
    status.store(429, Ordering::SeqCst);
    eventually(Duration::from_secs(10), || {
        (check_status(&agent, "service:web")? == "warning").then_some(())
    });
    status.store(500, Ordering::SeqCst);
    eventually(Duration::from_secs(10), || {
        (check_status(&agent, "service:web")? == "critical").then_some(())
    });
    // The catalog follows through anti-entropy.
    eventually(Duration::from_secs(10), || {
        let checks = agent.get("/v1/health/checks/web").ok()?;
        (checks[0]["Status"] == "critical").then_some(())
    });
}

#[test]
fn tcp_checks_and_failures_before_critical() {
    let agent = TestAgent::dev(&[]);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = format!(
        r#"{{"Name":"db","Port":{port},"Check":{{"TCP":"127.0.0.1:{port}","Interval":"1s","FailuresBeforeCritical":2}}}}"#
    );
    assert_eq!(agent.put("/v1/agent/service/register", &body).0, 200);
    eventually(Duration::from_secs(10), || {
        (check_status(&agent, "service:db")? == "passing").then_some(())
    });
    drop(listener);
    // One failure is not enough; after the second it turns critical.
    std::thread::sleep(Duration::from_millis(1300));
    eventually(Duration::from_secs(10), || {
        (check_status(&agent, "service:db")? == "critical").then_some(())
    });
}

#[test]
fn script_checks_need_enabling() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = agent.put(
        "/v1/agent/check/register",
        r#"{"Name":"s","Args":["true"],"Interval":"1s"}"#,
    );
    assert_eq!(status, 400, "{body}");
    let agent = TestAgent::dev(&["-enable-script-checks"]);
    assert_eq!(
        agent
            .put(
                "/v1/agent/check/register",
                r#"{"Name":"ok","Args":["sh","-c","echo fine"],"Interval":"1s"}"#
            )
            .0,
        200
    );
    assert_eq!(
        agent
            .put(
                "/v1/agent/check/register",
                r#"{"Name":"warn","Args":["sh","-c","exit 1"],"Interval":"1s"}"#
            )
            .0,
        200
    );
    assert_eq!(
        agent
            .put(
                "/v1/agent/check/register",
                r#"{"Name":"bad","Args":["sh","-c","exit 2"],"Interval":"1s"}"#
            )
            .0,
        200
    );
    eventually(Duration::from_secs(10), || {
        let checks = agent.get("/v1/agent/checks").ok()?;
        (checks["ok"]["Status"] == "passing"
            && checks["warn"]["Status"] == "warning"
            && checks["bad"]["Status"] == "critical")
            .then_some(())
    });
    assert_eq!(
        agent.get("/v1/agent/checks").unwrap()["ok"]["Output"],
        "fine\n"
    );
}

#[test]
fn sidecar_alias_check_mirrors_its_parent() {
    let agent = TestAgent::dev(&[]);
    let body = r#"{"Name":"api","Port":1,"Check":{"TTL":"60s"},"Connect":{"SidecarService":{}}}"#;
    assert_eq!(agent.put("/v1/agent/service/register", body).0, 200);
    eventually(Duration::from_secs(5), || {
        (check_status(&agent, "service:api-sidecar-proxy:2")? == "critical").then_some(())
    });
    agent.put("/v1/agent/check/pass/service:api", "");
    eventually(Duration::from_secs(5), || {
        (check_status(&agent, "service:api-sidecar-proxy:2")? == "passing").then_some(())
    });
    agent.put("/v1/agent/check/warn/service:api", "");
    eventually(Duration::from_secs(5), || {
        (check_status(&agent, "service:api-sidecar-proxy:2")? == "warning").then_some(())
    });
}

#[test]
fn critical_services_are_deregistered_after_the_deadline() {
    let agent = TestAgent::dev(&[]);
    let body =
        r#"{"Name":"doomed","Port":1,"Check":{"TTL":"30s","DeregisterCriticalServiceAfter":"1s"}}"#;
    assert_eq!(agent.put("/v1/agent/service/register", body).0, 200);
    eventually(Duration::from_secs(10), || {
        let services = agent.get("/v1/agent/services").ok()?;
        services.get("doomed").is_none().then_some(())
    });
    eventually(Duration::from_secs(10), || {
        (agent.get("/v1/catalog/service/doomed").ok()? == serde_json::json!([])).then_some(())
    });
}

#[test]
fn ttl_check_critical_invalidates_sessions_using_it() {
    let agent = TestAgent::dev(&[]);
    assert_eq!(
        agent
            .put(
                "/v1/agent/check/register",
                r#"{"Name":"guard","TTL":"30s","Status":"passing"}"#
            )
            .0,
        200
    );
    let id = eventually(Duration::from_secs(5), || {
        let (status, body) = agent.put(
            "/v1/session/create",
            r#"{"NodeChecks":["serfHealth","guard"]}"#,
        );
        (status == 200).then(|| {
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["ID"]
                .as_str()
                .unwrap()
                .to_string()
        })
    });
    assert_eq!(
        agent.put(&format!("/v1/kv/guarded?acquire={id}"), "x").1,
        "true"
    );
    agent.put("/v1/agent/check/fail/guard", "");
    eventually(Duration::from_secs(5), || {
        (agent.get(&format!("/v1/session/info/{id}")).ok()? == serde_json::json!([])).then_some(())
    });
    assert!(agent.get("/v1/kv/guarded").unwrap()[0]
        .get("Session")
        .is_none());
}

/// `openssl s_server` on `port` with the test CA's server certificate,
/// answering HTTP (`-www`) only to clients that present a certificate
/// the CA signed (`-Verify 1`).
fn mutual_tls_server(dir: &std::path::Path, port: u16) -> ChildGuard {
    tls_server(dir, port, &[])
}

/// As [`mutual_tls_server`], with more `openssl s_server` arguments.
fn tls_server(dir: &std::path::Path, port: u16, more: &[&str]) -> ChildGuard {
    let ca = format!("{}/consul-agent-ca.pem", dir.display());
    let mut args = vec![
        "-www",
        "-Verify",
        "1",
        "-verify_return_error",
        "-CAfile",
        &ca,
    ];
    args.extend_from_slice(more);
    ChildGuard(common::openssl_server(dir, port, &args, dir))
}

/// Kills the child when dropped.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Registers an HTTPS check of the test server (`extra`: more JSON
/// fields) under `id` and waits for its first result.
fn https_check_status(agent: &TestAgent, port: u16, id: &str, extra: &str) -> (String, String) {
    https_check_of(agent, &format!("https://localhost:{port}/"), id, extra)
}

/// As [`https_check_status`] for a check of `url`.
fn https_check_of(agent: &TestAgent, url: &str, id: &str, extra: &str) -> (String, String) {
    let body = format!(
        r#"{{"ID": "{id}", "Name": "mtls", "HTTP": "{url}", "Interval": "1s", "Timeout": "2s"{extra}}}"#
    );
    let (status, text) = agent.put("/v1/agent/check/register", &body);
    assert_eq!(status, 200, "{text}");
    common::eventually(Duration::from_secs(15), || {
        let checks = agent.get("/v1/agent/checks").ok()?;
        let check = &checks[id];
        let status = check["Status"].as_str()?;
        let output = check["Output"].as_str().unwrap_or("").to_string();
        (status != "critical" || !output.is_empty()).then(|| (status.to_string(), output))
    })
}

#[test]
fn enable_agent_tls_for_checks_presents_the_agents_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let tls = common::server_tls_config(dir.path(), "vm", "");
    let port = common::free_port();
    let _server = mutual_tls_server(dir.path(), port);
    // The server's certificate names localhost, not the node: Consul
    // checks it against server_name, else the node name, unless the check
    // names TLSServerName.
    let named = TestAgent::dev(&[
        "-node=checker",
        &format!("-hcl={tls}\nenable_agent_tls_for_checks = true\nserver_name = \"localhost\""),
    ]);
    assert_eq!(https_check_status(&named, port, "a", "").0, "passing");
    let by_node = TestAgent::dev(&[
        "-node=checker",
        &format!("-hcl={tls}\nenable_agent_tls_for_checks = true"),
    ]);
    let (status, output) = https_check_status(&by_node, port, "b", "");
    assert_eq!(
        status, "critical",
        "checked against the node name: {output}"
    );
    let extra = r#", "TLSServerName": "localhost""#;
    assert_eq!(https_check_status(&by_node, port, "c", extra).0, "passing");
    // Without it the check neither trusts the CA nor has a certificate:
    // even when it skips verifying the server, the server refuses it.
    let without = TestAgent::dev(&[&format!("-hcl={tls}")]);
    assert_eq!(https_check_status(&without, port, "d", "").0, "critical");
    let skip = r#", "TLSSkipVerify": true"#;
    assert_eq!(https_check_status(&without, port, "e", skip).0, "critical");
}

#[test]
fn the_checks_server_name_is_sent_in_the_handshake() {
    // A server that refuses any handshake naming another server (as an
    // SNI-routing proxy would): Consul's check sends its TLSServerName,
    // not the URL's host, while its request still carries the URL's host.
    let dir = tempfile::tempdir().unwrap();
    let tls = common::server_tls_config(dir.path(), "vm", "");
    let port = common::free_port();
    let d = dir.path().display();
    let cert = format!("{d}/dc1-server-consul-0.pem");
    let key = format!("{d}/dc1-server-consul-0-key.pem");
    let _server = tls_server(
        dir.path(),
        port,
        &[
            "-servername",
            "server.dc1.consul",
            "-servername_fatal",
            "-cert2",
            &cert,
            "-key2",
            &key,
        ],
    );
    let agent = TestAgent::dev(&[&format!("-hcl={tls}\nenable_agent_tls_for_checks = true")]);
    let named = r#", "TLSServerName": "server.dc1.consul""#;
    let (status, output) = https_check_status(&agent, port, "sni", named);
    assert_eq!(status, "passing", "{output}");
    // The agent's server_name goes into the handshake the same way, and
    // an address in the URL is no obstacle.
    let by_agent = TestAgent::dev(&[&format!(
        "-hcl={tls}\nenable_agent_tls_for_checks = true\nserver_name = \"server.dc1.consul\""
    )]);
    let url = format!("https://127.0.0.1:{port}/");
    let (status, output) = https_check_of(&by_agent, &url, "agent-sni", "");
    assert_eq!(status, "passing", "{output}");
    // Naming another server is refused by this one.
    let other = r#", "TLSServerName": "localhost""#;
    let (status, output) = https_check_status(&agent, port, "other", other);
    assert_eq!(status, "critical", "{output}");
}
