//! `/v1/internal/ui/metrics-proxy/*` with Consul's rules: a real Prometheus
//! answers the UI's queries through it, paths outside the allowlist and
//! escapes are refused, the caller's token stays behind while the
//! configured headers go on, ACLs need read on every node and service,
//! and without the UI or a `base_url` it answers Consul's 404s.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::{eventually, http_request_full, TestAgent};
use serde_json::Value;

fn get(agent: &TestAgent, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let (status, _, body) = http_request_full(agent.http_port, "GET", path, headers, None);
    (status, body)
}

#[test]
fn a_real_prometheus_answers_through_the_proxy_within_its_allowlist() {
    let dir = tempfile::tempdir().unwrap();
    // Prometheus scrapes itself, so `up` has a series.
    let (_prometheus, port) = common::prometheus::start(dir.path(), |port| {
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: self\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        )
    });
    let hcl = format!(
        "-hcl=ui_config {{ metrics_provider = \"prometheus\" metrics_proxy {{ base_url = \"http://127.0.0.1:{port}\" }} }}"
    );
    let agent = TestAgent::dev(&[&hcl]);
    eventually(Duration::from_secs(30), || {
        let (status, body) = get(
            &agent,
            "/v1/internal/ui/metrics-proxy/api/v1/query?query=up",
            &[],
        );
        let answer: Value = serde_json::from_str(&body).ok()?;
        (status == 200
            && answer["status"] == "success"
            && !answer["data"]["result"].as_array()?.is_empty())
        .then_some(())
    });
    let (status, body) = get(
        &agent,
        "/v1/internal/ui/metrics-proxy/api/v1/query_range?query=up&start=1&end=2&step=1",
        &[],
    );
    assert_eq!(status, 200, "{body}");
    // Prometheus's other paths are not in the default allowlist: 403, no body.
    for path in [
        "/v1/internal/ui/metrics-proxy/api/v1/targets",
        "/v1/internal/ui/metrics-proxy/api/v1/query/../targets",
        "/v1/internal/ui/metrics-proxy/",
    ] {
        let (status, body) = get(&agent, path, &[]);
        assert_eq!((status, body.as_str()), (403, ""), "{path}");
    }
    // Consul's UI is told the proxy is on.
    let (_, index) = get(&agent, "/ui/", &[]);
    assert!(index.contains("\"metrics_proxy_enabled\": true"), "{index}");
}

/// A backend that records the request head it received and answers `{}`.
fn recording_backend() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            record
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&head).to_lowercase());
            let _ = conn.write_all(
                b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nx-backend: yes\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
            );
        }
    });
    (port, seen)
}

#[test]
fn the_token_stays_behind_headers_are_added_and_acls_need_read_of_everything() {
    let (backend, seen) = recording_backend();
    let acl = Acl::start_full(
        "",
        "",
        &[&format!(
            "-hcl=ui_config {{ metrics_proxy {{ base_url = \"http://127.0.0.1:{backend}/prefix\" add_headers = [{{ name = \"Authorization\", value = \"Bearer backend-secret\" }}, {{ name = \"X-Scope-OrgID\", value = \"tenant-a\" }}] path_allowlist = [\"/prefix/api/v1/query\"] }} }}"
        )],
    );
    let agent = &acl.agent;
    let path = "/v1/internal/ui/metrics-proxy/api/v1/query?query=up&token=abc";
    let (status, body) = get(
        agent,
        path,
        &[("X-Consul-Token", ROOT), ("X-Scope-OrgID", "someone-else")],
    );
    assert_eq!((status, body.as_str()), (201, "{}"));
    let head = seen.lock().unwrap().last().cloned().unwrap();
    // A configured header replaces the caller's of the same name.
    assert!(head.contains("x-scope-orgid: tenant-a"), "{head}");
    assert!(!head.contains("someone-else"), "{head}");
    assert!(
        head.starts_with("get /prefix/api/v1/query?query=up&token=abc "),
        "{head}"
    );
    assert!(
        head.contains("authorization: bearer backend-secret"),
        "{head}"
    );
    assert!(!head.contains("x-consul-token"), "{head}");
    assert!(!head.contains(&ROOT.to_lowercase()), "{head}");
    // A Bearer token is taken as the caller's and replaced too.
    let bearer = format!("Bearer {ROOT}");
    let (status, _) = get(agent, path, &[("Authorization", &bearer)]);
    assert_eq!(status, 201);
    let head = seen.lock().unwrap().last().cloned().unwrap();
    assert!(!head.contains(&ROOT.to_lowercase()), "{head}");

    // A ?token= is the backend's, never the caller's: anonymous, refused.
    let (status, body) = get(
        agent,
        &format!("/v1/internal/ui/metrics-proxy/api/v1/query?token={ROOT}"),
        &[],
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("lacks permission 'node:read'"), "{body}");
    // Reading every service but not every node is not enough.
    let services_only =
        acl.token_with_rules("services", r#"service_prefix "" { policy = "read" }"#);
    let (status, body) = get(agent, path, &[("X-Consul-Token", &services_only)]);
    assert_eq!(status, 403);
    assert!(body.ends_with("lacks permission 'node:read'"), "{body}");
    let one_denied = acl.token_with_rules(
        "all-but-db",
        r#"node_prefix "" { policy = "read" } service_prefix "" { policy = "read" } service "db" { policy = "deny" }"#,
    );
    let (status, body) = get(agent, path, &[("X-Consul-Token", &one_denied)]);
    assert_eq!(status, 403);
    assert!(body.ends_with("lacks permission 'service:read'"), "{body}");
    let readers = acl.token_with_rules(
        "readers",
        r#"node_prefix "" { policy = "read" } service_prefix "" { policy = "read" }"#,
    );
    assert_eq!(get(agent, path, &[("X-Consul-Token", &readers)]).0, 201);
    // Outside the allowlist, and out of the base's prefix.
    let (status, body) = get(
        agent,
        "/v1/internal/ui/metrics-proxy/api/v1/series",
        &[("X-Consul-Token", ROOT)],
    );
    assert_eq!((status, body.as_str()), (403, ""));
}

#[test]
fn without_the_ui_or_a_base_url_it_answers_consuls_404s() {
    let plain = TestAgent::dev(&[]);
    let (status, body) = get(&plain, "/v1/internal/ui/metrics-proxy/api/v1/query", &[]);
    assert_eq!(
        (status, body.as_str()),
        (404, "Metrics proxy is not enabled")
    );
    let off = TestAgent::dev(&[
        "-hcl=ui_config { enabled = false metrics_proxy { base_url = \"http://127.0.0.1:9\" } }",
    ]);
    let (status, body) = get(&off, "/v1/internal/ui/metrics-proxy/api/v1/query", &[]);
    assert_eq!((status, body.as_str()), (404, "UI is not enabled"));
    // A base URL that is no http(s) URL stops the agent with Consul's text.
    let out = common::run_agent_expecting_failure(&[
        "-dev",
        "-hcl=ui_config { metrics_proxy { base_url = \"ftp://x\" } }",
    ]);
    assert!(
        out.contains("ui_config.metrics_proxy.base_url must be a valid http or https URL. received: \"ftp://x\""),
        "{out}"
    );
}
