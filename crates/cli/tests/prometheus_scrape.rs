//! Three servers with ACLs on and `telemetry { prometheus_retention_time }`,
//! scraped by a real Prometheus (Debian's 2.42) the way Consul's docs say
//! (`metrics_path: /v1/agent/metrics`, `params: {format: [prometheus]}`, the
//! token as a bearer credential). After a workload — KV writes, a
//! transaction, catalog registrations, ACL writes, DNS and reverse DNS
//! lookups, a sidecar proxy on an xDS stream — every PromQL expression of
//! Consul's server-monitoring Grafana dashboard returns a result, the xDS
//! push-latency histogram has samples, and `promtool check metrics` finds
//! no parse error and no metric without help text in any server's output.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::prometheus::Killed;
use common::{free_port, http_request_full, try_http_request, TestAgent};
use serde_json::Value;

const ROOT: &str = "d9c2a0a8-5b8e-4d8e-9f3c-2f6b1a7c9e10";
const IPS: [&str; 3] = ["127.0.0.61", "127.0.0.62", "127.0.0.63"];

/// Every expression of Consul's server-monitoring dashboard (Grafana
/// 13396) that Legate's metrics feed, and the push-latency histogram.
const DASHBOARD: &[&str] = &[
    "consul_raft_commitTime",
    "rate(consul_raft_apply[5m])",
    "consul_raft_leader_lastContact != 0",
    "rate(consul_raft_state_candidate[1m])",
    "rate(consul_raft_state_leader[1m])",
    "consul_autopilot_healthy",
    "rate(consul_dns_domain_query_count[5m])",
    "consul_dns_domain_query",
    "consul_dns_ptr_query",
    "rate(consul_kvs_apply_count[5m])",
    "consul_kvs_apply",
    "consul_txn_apply",
    "rate(consul_acl_ResolveToken_count[5m])",
    "consul_acl_ResolveToken",
    "rate(consul_acl_apply_count[5m])",
    "consul_acl_apply",
    "rate(consul_catalog_register_count[5m])",
    "rate(consul_catalog_deregister_count[5m])",
    "consul_catalog_register",
    "consul_catalog_deregister",
    "consul_xds_server_push_latency_count > 0",
    "sum by (le) (consul_xds_server_push_latency_bucket) > 0",
];

fn call(agent: &TestAgent, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let (status, _, text) = http_request_full(
        agent.http_port,
        method,
        path,
        &[("X-Consul-Token", ROOT)],
        body,
    );
    (status, text)
}

fn ok(agent: &TestAgent, method: &str, path: &str, body: Option<&str>) -> String {
    let (status, text) = call(agent, method, path, body);
    assert_eq!(status, 200, "{method} {path}: {text}");
    text
}

/// Three servers; the first also answers DNS on `dns` and xDS on `grpc`.
fn servers(dns: u16, grpc: u16) -> (Vec<TestAgent>, Vec<tempfile::TempDir>) {
    let serf: Vec<u16> = IPS.iter().map(|_| free_port()).collect();
    let mut agents = Vec::new();
    let mut dirs = Vec::new();
    for i in 0..IPS.len() {
        let data = tempfile::tempdir().unwrap();
        let mut flags = common::loopback_server_flags(i, &IPS, &serf, data.path());
        flags.extend([
            format!("-dns-port={}", if i == 0 { dns as i32 } else { -1 }),
            format!("-grpc-port={}", if i == 0 { grpc as i32 } else { -1 }),
            "-grpc-tls-port=-1".into(),
            format!(
                "-hcl=acl {{ enabled = true default_policy = \"deny\" tokens {{ initial_management = \"{ROOT}\" agent = \"{ROOT}\" dns = \"{ROOT}\" }} }}"
            ),
            "-hcl=telemetry { prometheus_retention_time = \"10m\" disable_hostname = true }"
                .into(),
        ]);
        let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
        agents.push(TestAgent::spawn(&refs, false));
        dirs.push(data);
    }
    for agent in &agents {
        common::eventually(Duration::from_secs(60), || {
            let (status, _, leader) =
                try_http_request(agent.http_port, "GET", "/v1/status/leader", None)?;
            if status != 200 || leader.trim().len() <= 2 {
                return None;
            }
            // The leader has written the management token.
            let (status, _) = call(agent, "GET", "/v1/acl/token/self", None);
            (status == 200).then_some(())
        });
    }
    (agents, dirs)
}

/// KV, a transaction, catalog and ACL writes, DNS and reverse lookups.
fn workload(agent: &TestAgent, dns: u16) {
    for n in 0..20 {
        ok(agent, "PUT", &format!("/v1/kv/app/k{n}"), Some("v"));
    }
    let txn = r#"[{"KV":{"Verb":"set","Key":"app/txn","Value":"dg=="}}]"#;
    ok(agent, "PUT", "/v1/txn", Some(txn));
    for n in 0..5 {
        let node = format!(r#"{{"Node":"ext{n}","Address":"10.0.0.{n}"}}"#);
        ok(agent, "PUT", "/v1/catalog/register", Some(&node));
        ok(agent, "PUT", "/v1/catalog/deregister", Some(&node));
    }
    let policy = r#"{"Name":"readers","Rules":"key_prefix \"\" { policy = \"read\" }"}"#;
    ok(agent, "PUT", "/v1/acl/policy", Some(policy));
    ok(
        agent,
        "PUT",
        "/v1/acl/token",
        Some(r#"{"Policies":[{"Name":"readers"}]}"#),
    );
    for _ in 0..5 {
        let a = common::dig::dig(dns, &["consul.service.consul", "A"]);
        assert_eq!(a.status, "NOERROR");
        let ptr = common::dig::dig(dns, &["-x", IPS[0]]);
        assert_eq!(ptr.status, "NOERROR", "{:?}", ptr.answer);
    }
}

/// A Prometheus scraping `targets` every second.
fn prometheus(dir: &std::path::Path, targets: &[u16]) -> (Killed, u16) {
    let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: legate\n    metrics_path: /v1/agent/metrics\n\
         \x20   params:\n      format: [prometheus]\n\
         \x20   authorization:\n      credentials: {ROOT}\n\
         \x20   static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    common::prometheus::start(dir, |_| config)
}

/// The series a PromQL query returns now.
fn query(port: u16, expression: &str) -> Vec<Value> {
    let path = format!("/api/v1/query?query={}", common::percent_encode(expression));
    let Some((200, _, body)) = try_http_request(port, "GET", &path, None) else {
        return Vec::new();
    };
    let answer: Value = serde_json::from_str(&body).unwrap_or_default();
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn consuls_server_dashboard_has_data_from_a_real_prometheus() {
    let dns = free_port();
    let grpc = free_port();
    let (agents, _dirs) = servers(dns, grpc);
    let first = &agents[0];
    workload(first, dns);

    // A sidecar on an xDS stream: its pushes feed the latency histogram.
    let web = r#"{"Name":"web","Port":9090,"Connect":{"SidecarService":{}}}"#;
    ok(first, "PUT", "/v1/agent/service/register", Some(web));
    let scratch = tempfile::tempdir().unwrap();
    let _proxy = common::mesh::start_proxy_with(
        first,
        "web",
        &scratch.path().join("proxy.log"),
        &["-token", ROOT],
    );

    // Once its stream is open, a change in the store reaches it: the push
    // that carries it is timed from the change to the response written.
    common::eventually(Duration::from_secs(30), || {
        let text = ok(first, "GET", "/v1/agent/metrics?format=prometheus", None);
        (common::prometheus::sum(&text, "consul_xds_server_streams", &[]) >= 1.0).then_some(())
    });
    let defaults = r#"{"Kind":"service-defaults","Name":"web","Protocol":"http"}"#;
    ok(first, "PUT", "/v1/config", Some(defaults));

    let ports: Vec<u16> = agents.iter().map(|a| a.http_port).collect();
    let (_prometheus, prometheus_port) = prometheus(scratch.path(), &ports);
    common::eventually(Duration::from_secs(60), || {
        let up = query(prometheus_port, "up == 1");
        (up.len() == 3).then_some(())
    });

    let deadline = Instant::now() + Duration::from_secs(90);
    let mut empty: Vec<&str> = DASHBOARD.to_vec();
    while !empty.is_empty() && Instant::now() < deadline {
        empty.retain(|expression| query(prometheus_port, expression).is_empty());
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        empty.is_empty(),
        "expressions without data: {empty:?}\nprometheus log:\n{}\nproxy log:\n{}",
        std::fs::read_to_string(scratch.path().join("prometheus.log")).unwrap_or_default(),
        std::fs::read_to_string(scratch.path().join("proxy.log")).unwrap_or_default(),
    );

    // The scrape needs the token: without one, 403.
    let (status, _) = {
        let (status, _, text) = http_request_full(
            first.http_port,
            "GET",
            "/v1/agent/metrics?format=prometheus",
            &[],
            None,
        );
        (status, text)
    };
    assert_eq!(status, 403);

    // promtool: no parse error, and help text for every metric. Its other
    // complaints are about Consul's own names (counters without `_total`,
    // camelCase such as `commitTime`), which dashboards depend on.
    for agent in &agents {
        let text = ok(agent, "GET", "/v1/agent/metrics?format=prometheus", None);
        let mut promtool = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool (Debian's prometheus package)");
        use std::io::Write;
        promtool
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = promtool.wait_with_output().unwrap();
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(out.status.code(), Some(1), "parse error: {report}\n{text}");
        for line in report.lines().filter(|l| !l.trim().is_empty()) {
            let consuls_naming = line.contains("should have \"_total\" suffix")
                || line.contains("'snake_case' not 'camelCase'")
                || line.contains("should not contain abbreviated units");
            assert!(consuls_naming, "promtool: {line}\n{text}");
        }
    }
}

#[test]
fn labels_with_escapes_parse() {
    let text = "# TYPE x counter\nx{a=\"1\",b=\"q\\\"uote\"} 3\nx{a=\"2\"} 4\ny 1\n";
    assert_eq!(common::prometheus::sum(text, "x", &[]), 7.0);
    assert_eq!(common::prometheus::sum(text, "x", &[("b", "q\"uote")]), 3.0);
    assert_eq!(common::prometheus::sum(text, "y", &[]), 1.0);
    assert_eq!(common::prometheus::sum(text, "z", &[]), 0.0);
}
