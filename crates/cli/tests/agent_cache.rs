//! `?cached` on a client agent, as Consul's agent cache answers: the
//! first read a MISS from the servers, the next ones HITs from the agent
//! (blocking ones too) with `Age: 0` while the servers answer; with every
//! server gone the agent keeps answering (fail-static) and `Age` counts
//! from the outage. Prepared-query answers (simple kind) follow the
//! request's `Cache-Control` (`max-age`, `must-revalidate`,
//! `stale-if-error`).

mod common;

use std::time::{Duration, Instant};

use common::mesh::{demo_logs, echo, echo_server, seed_demo_on, start_proxy};
use common::{eventually, header, http_request, TestAgent};
use serde_json::Value;

/// A one-server datacenter at `ip`, on ports no other test can hold
/// (defaults such as 8301 could be taken by an agent bound to every
/// address); with the address its LAN gossip answers at.
fn server(ip: &str, dir: &tempfile::TempDir) -> (TestAgent, String) {
    let lan = common::free_port();
    let agent = TestAgent::spawn(
        &[
            "-server",
            "-bootstrap-expect=1",
            "-node=cache-server",
            &format!("-bind={ip}"),
            &format!("-data-dir={}", dir.path().display()),
            &format!("-serf-lan-port={lan}"),
            &format!("-serf-wan-port={}", common::free_port()),
            &format!("-server-port={}", common::free_port()),
        ],
        true,
    );
    (agent, format!("{ip}:{lan}"))
}

fn client(ip: &str, join: &str, dir: &tempfile::TempDir) -> TestAgent {
    TestAgent::spawn(
        &[
            "-node=cache-client",
            &format!("-bind={ip}"),
            &format!("-data-dir={}", dir.path().display()),
            &format!("-serf-lan-port={}", common::free_port()),
            &format!("-retry-join={join}"),
            "-retry-interval=1s",
        ],
        true,
    )
}

/// GET with extra headers: status, `X-Cache`, `Age`, body.
fn get(
    agent: &TestAgent,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, Option<u64>, String) {
    let (status, got, body) =
        common::http_request_with_headers(agent.http_port, "GET", path, headers);
    let cache = header(&got, "x-cache").map(String::from);
    let age = header(&got, "age").and_then(|a| a.parse().ok());
    (status, cache, age, body)
}

fn rows(body: &str) -> usize {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(usize::MAX)
}

#[test]
fn cached_reads_hit_block_and_outlive_the_servers() {
    let (server_dir, client_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut server, join) = server("127.0.0.91", &server_dir);
    let client = client("127.0.0.92", &join, &client_dir);
    server.wait_ready();
    client.wait_ready();
    eventually(Duration::from_secs(30), || {
        let nodes = client.get("/v1/catalog/nodes").ok()?;
        (nodes.as_array()?.len() == 2).then_some(())
    });
    let (status, body) = client.put(
        "/v1/agent/service/register",
        r#"{"ID":"web1","Name":"web","Port":80}"#,
    );
    assert_eq!(status, 200, "{body}");
    eventually(Duration::from_secs(30), || {
        (rows(&client.get_text("/v1/health/service/web").ok()?) == 1).then_some(())
    });
    let (status, _, body) = http_request(
        client.http_port,
        "POST",
        "/v1/query",
        Some(br#"{"Name":"web-q","Service":{"Service":"web"}}"#.to_vec()),
    );
    assert_eq!(status, 200, "{body}");

    // Consul's conflict text.
    let (status, cache, _, body) = get(&client, "/v1/health/service/web?cached&consistent", &[]);
    assert_eq!((status, cache), (400, None));
    assert_eq!(
        body,
        "Cannot specify ?cached with ?consistent, conflicting semantics."
    );

    // Background-refresh kind: MISS, then HIT with Age 0; no X-Cache without ?cached.
    for path in [
        "/v1/health/service/web?cached",
        "/v1/health/service/web?cached&passing",
        "/v1/catalog/service/web?cached",
        "/v1/catalog/services?cached",
        "/v1/agent/connect/ca/roots?cached",
        "/v1/discovery-chain/web?cached",
    ] {
        let (status, cache, age, body) = get(&client, path, &[]);
        assert_eq!(
            (status, cache.as_deref(), age),
            (200, Some("MISS"), None),
            "{path}: {body}"
        );
        let first = body;
        let (status, _, age, body) = eventually(Duration::from_secs(10), || {
            let answer = get(&client, path, &[]);
            (answer.1.as_deref() == Some("HIT")).then_some(answer)
        });
        assert_eq!((status, age), (200, Some(0)), "{path}");
        assert_eq!(body, first, "{path}: a hit answers what the servers did");
    }
    let (_, cache, _, _) = get(&client, "/v1/health/service/web", &[]);
    assert_eq!(cache, None);

    // A blocking read on the cache returns when the servers' answer moves.
    let (_, got, _) = common::http_request_with_headers(
        client.http_port,
        "GET",
        "/v1/health/service/web?cached",
        &[],
    );
    let index: u64 = header(&got, "x-consul-index").unwrap().parse().unwrap();
    let port = client.http_port;
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let (status, got, body) = common::http_request_with_headers(
            port,
            "GET",
            &format!("/v1/health/service/web?cached&index={index}&wait=20s"),
            &[],
        );
        (
            status,
            header(&got, "x-cache").map(String::from),
            rows(&body),
            started.elapsed(),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = client.put(
        "/v1/agent/service/register",
        r#"{"ID":"web2","Name":"web","Port":81}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, cache, count, took) = waiter.join().unwrap();
    assert_eq!((status, cache.as_deref(), count), (200, Some("HIT"), 2));
    assert!(took < Duration::from_secs(15), "{took:?}");

    // Simple kind (prepared-query answers): a hit until Cache-Control asks
    // for fresher.
    let execute = "/v1/query/web-q/execute?cached";
    let (status, cache, _, missed) = get(&client, execute, &[]);
    assert_eq!((status, cache.as_deref()), (200, Some("MISS")), "{missed}");
    let (status, cache, age, hit) = get(&client, execute, &[]);
    assert_eq!((status, cache.as_deref(), age), (200, Some("HIT"), Some(0)));
    let (mut missed, mut hit): (Value, Value) = (
        serde_json::from_str(&missed).unwrap(),
        serde_json::from_str(&hit).unwrap(),
    );
    // Instances come shuffled; the rest is the same answer.
    for answer in [&mut missed, &mut hit] {
        answer["Nodes"]
            .as_array_mut()
            .unwrap()
            .sort_by_key(|n| n["Service"]["ID"].to_string());
    }
    assert_eq!(hit, missed);
    assert_eq!(hit["Nodes"].as_array().unwrap().len(), 2);
    for fresher in ["max-age=0", "must-revalidate"] {
        let (_, cache, _, _) = get(&client, execute, &[("Cache-Control", fresher)]);
        assert_eq!(cache.as_deref(), Some("MISS"), "{fresher}");
    }
    let (status, _, _, body) = get(&client, execute, &[("Cache-Control", "max-age=x")]);
    assert_eq!(
        (status, body.as_str()),
        (400, "Invalid Cache-Control header.")
    );

    // Every server gone: what the agent holds is still answered.
    server.kill9();
    let (status, _, _, _) = get(&client, "/v1/health/service/web", &[]);
    assert_eq!(status, 500, "without ?cached the servers are needed");
    let (status, cache, _, body) = get(&client, "/v1/health/service/web?cached", &[]);
    assert_eq!(
        (status, cache.as_deref(), rows(&body)),
        (200, Some("HIT"), 2),
        "{body}"
    );
    // Age counts from the outage.
    let (_, _, age, _) = eventually(Duration::from_secs(30), || {
        let answer = get(&client, "/v1/health/service/web?cached", &[]);
        (answer.2 >= Some(2)).then_some(answer)
    });
    assert!(age.unwrap() < 60);
    let (status, cache, _, _) = get(&client, "/v1/agent/connect/ca/roots?cached", &[]);
    assert_eq!((status, cache.as_deref()), (200, Some("HIT")));
    // The query answer is a day-long hit unless asked fresher; then only
    // stale-if-error saves it.
    std::thread::sleep(Duration::from_secs(2));
    let (status, cache, _, body) = get(&client, execute, &[]);
    assert_eq!((status, cache.as_deref()), (200, Some("HIT")), "{body}");
    let (status, _, _, _) = get(&client, execute, &[("Cache-Control", "max-age=1")]);
    assert_eq!(status, 500);
    let (status, cache, age, body) = get(
        &client,
        execute,
        &[("Cache-Control", "max-age=1, stale-if-error=3600")],
    );
    assert_eq!((status, cache.as_deref()), (200, Some("HIT")), "{body}");
    assert!(age.unwrap() >= 2);
    let (status, _, _, _) = get(
        &client,
        execute,
        &[("Cache-Control", "max-age=1, stale-if-error=1")],
    );
    assert_eq!(status, 500, "older than stale-if-error allows");
}

/// Fail-static: a client agent's sidecars keep carrying traffic with
/// every server stopped for a minute, a sidecar restarted in the middle
/// of it gets its configuration from what the agent holds, and
/// `connect envoy -bootstrap` still writes a bootstrap.
#[test]
fn sidecars_keep_working_through_a_minute_without_servers() {
    let (server_dir, client_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut server, join) = server("127.0.0.93", &server_dir);
    let (echo_port, web_sidecar, db_sidecar, upstream, grpc) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let received = echo_server(echo_port);
    let config = common::write(
        client_dir.path(),
        "demo.hcl",
        &seed_demo_on(echo_port, web_sidecar, db_sidecar, upstream),
    );
    let data = client_dir.path().join("data");
    let client = TestAgent::spawn(
        &[
            "-node=fail-static-client",
            "-bind=127.0.0.94",
            &format!("-data-dir={}", data.display()),
            &format!("-retry-join={join}"),
            &format!("-serf-lan-port={}", common::free_port()),
            "-retry-interval=1s",
            "-dns-port=-1",
            "-grpc-tls-port=-1",
            &format!("-grpc-port={grpc}"),
            "-config-file",
            config.to_str().unwrap(),
        ],
        false,
    );
    server.wait_ready();
    client.wait_ready();
    let dir = client_dir.path();
    let web = start_proxy(&client, "web", &dir.join("web.log"));
    let _db = start_proxy(&client, "db", &dir.join("db.log"));
    let logs = || demo_logs(dir, &client);
    common::mesh::eventually(
        "echo through web -> db",
        Duration::from_secs(60),
        &logs,
        || echo(upstream, "before\n").as_deref() == Some("before\n"),
    );

    server.kill9();
    let outage = Instant::now();
    let (status, _, _) = http_request(client.http_port, "GET", "/v1/catalog/services", None);
    assert_eq!(status, 500, "the servers are gone");
    // Traffic flows for the whole minute; halfway, web's sidecar restarts.
    let mut web = Some(web);
    let mut restarted = false;
    while outage.elapsed() < Duration::from_secs(60) {
        if !restarted && outage.elapsed() > Duration::from_secs(20) {
            drop(web.take());
            web = Some(start_proxy(&client, "web", &dir.join("web-again.log")));
            restarted = true;
            common::mesh::eventually(
                "echo through web's restarted sidecar",
                Duration::from_secs(30),
                &logs,
                || echo(upstream, "restarted\n").as_deref() == Some("restarted\n"),
            );
        }
        let line = format!("at {:?}\n", outage.elapsed().as_secs());
        assert_eq!(
            echo(upstream, &line).as_deref(),
            Some(line.as_str()),
            "{}",
            logs()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(restarted);
    assert!(received.load(std::sync::atomic::Ordering::SeqCst) > 0);

    // Envoy's bootstrap comes from the agent alone.
    let out = std::process::Command::new(common::binary())
        .args(["connect", "envoy", "-sidecar-for", "web", "-bootstrap"])
        .env("CONSUL_HTTP_ADDR", client.addr())
        .env("CONSUL_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bootstrap: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(bootstrap["node"]["id"], "web-sidecar-proxy");
}
