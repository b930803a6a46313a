//! Agent keys Consul users set and Legate now acts on, through the
//! binary: `http_config` (`response_headers`, `block_endpoints`,
//! `allow_write_http_from`, `use_cache`), `check_output_max_size` and
//! `discard_check_output`, `disable_coordinates`, and the Raft snapshot
//! keys; each with Consul's answers, and bad values refused at start with
//! the key named.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{eventually, header, TestAgent};

fn hcl(text: &str) -> String {
    format!("-hcl={text}")
}

#[test]
fn http_config_adds_headers_blocks_endpoints_and_restricts_writes() {
    let agent = TestAgent::dev(&[&hcl(r#"http_config {
             response_headers { "Access-Control-Allow-Origin" = "*", "Content-Type" = "text/x-mine" }
             block_endpoints = ["/v1/acl", "/v1/agent/self"]
             allow_write_http_from = ["10.0.0.0/8", "::1/128"]
           }"#)]);
    // Every answer carries the configured header, errors too; a header
    // the handler sets itself wins.
    let (status, headers, _) = agent.request("GET", "/v1/catalog/nodes", None);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "access-control-allow-origin"), Some("*"));
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    let (status, headers, _) = agent.request("GET", "/v1/no/such/thing", None);
    assert_eq!(status, 404);
    assert_eq!(header(&headers, "access-control-allow-origin"), Some("*"));

    // Blocked prefixes: Consul's 403 before anything else.
    for path in ["/v1/acl/tokens", "/v1/agent/self"] {
        let (status, headers, body) = agent.request("GET", path, None);
        assert_eq!(
            (status, body.as_str()),
            (403, "Endpoint is blocked by agent configuration"),
            "{path}"
        );
        assert_eq!(header(&headers, "access-control-allow-origin"), Some("*"));
    }
    assert_eq!(agent.request("GET", "/v1/agent/members", None).0, 200);

    // Writes from 127.0.0.1 are outside the allowed ranges; reads are not
    // restricted.
    let (status, _, body) = agent.request("PUT", "/v1/kv/app", Some("v"));
    assert_eq!((status, body.as_str()), (403, "Access is restricted"));
    assert_eq!(agent.request("DELETE", "/v1/kv/app", None).0, 403);
    assert_eq!(agent.request("GET", "/v1/kv/app", None).0, 404);
}

#[test]
fn use_cache_false_ignores_cached() {
    let agent = TestAgent::dev(&[&hcl("http_config { use_cache = false }")]);
    let (status, headers, _) = agent.request("GET", "/v1/catalog/services?cached", None);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "x-cache"), None, "answered by the servers");
    // `?cached` being absent, it no longer conflicts with `?consistent`.
    let (status, _, body) = agent.request("GET", "/v1/catalog/services?cached&consistent", None);
    assert_eq!(status, 200, "{body}");
    // With the default, the cache answers (and the conflict is Consul's
    // 400).
    let cached = TestAgent::dev(&[]);
    let (_, headers, _) = cached.request("GET", "/v1/catalog/services?cached", None);
    assert_eq!(header(&headers, "x-cache"), Some("MISS"));
    assert_eq!(
        cached
            .request("GET", "/v1/catalog/services?cached&consistent", None)
            .0,
        400
    );
}

fn register_ttl(agent: &TestAgent) {
    let (status, body) = agent.put(
        "/v1/agent/check/register",
        r#"{"ID": "job", "Name": "job", "TTL": "10m"}"#,
    );
    assert_eq!(status, 200, "{body}");
}

fn catalog_output(agent: &TestAgent) -> String {
    eventually(Duration::from_secs(10), || {
        let checks = agent.get("/v1/health/state/any").ok()?;
        let check = checks.as_array()?.iter().find(|c| c["CheckID"] == "job")?;
        (check["Status"] == "passing").then(|| check["Output"].as_str().unwrap().to_string())
    })
}

#[test]
fn check_outputs_are_cut_at_the_configured_size_or_discarded() {
    let agent = TestAgent::dev(&[&hcl("check_output_max_size = 10")]);
    register_ttl(&agent);
    let (status, _) = agent.put(
        "/v1/agent/check/pass/job?note=abcdefghijklmnopqrstuvwxyz",
        "",
    );
    assert_eq!(status, 200);
    let local = agent.get("/v1/agent/checks").unwrap();
    assert_eq!(
        local["job"]["Output"],
        "abcdefghij ... (captured 10 of 26 bytes)"
    );
    assert_eq!(
        catalog_output(&agent),
        "abcdefghij ... (captured 10 of 26 bytes)"
    );

    let discarding = TestAgent::dev(&[&hcl("discard_check_output = true")]);
    register_ttl(&discarding);
    let (status, _) = discarding.put("/v1/agent/check/pass/job?note=pid%2042", "");
    assert_eq!(status, 200);
    assert_eq!(
        discarding.get("/v1/agent/checks").unwrap()["job"]["Output"],
        ""
    );
    assert_eq!(catalog_output(&discarding), "");
}

#[test]
fn disable_coordinates_refuses_the_coordinate_endpoints() {
    let agent = TestAgent::dev(&[&hcl("disable_coordinates = true")]);
    for (method, path, body) in [
        ("GET", "/v1/coordinate/nodes", None),
        ("GET", "/v1/coordinate/datacenters", None),
        ("GET", "/v1/coordinate/node/x", None),
        ("PUT", "/v1/coordinate/update", Some("{}")),
    ] {
        let (status, _, text) = agent.request(method, path, body);
        assert_eq!(
            (status, text.as_str()),
            (401, "Coordinate support disabled"),
            "{path}"
        );
    }
    // Without the key the same endpoints answer.
    let other = TestAgent::dev(&[]);
    assert_eq!(other.request("GET", "/v1/coordinate/nodes", None).0, 200);
}

#[test]
fn raft_snapshot_threshold_and_trailing_logs_shape_a_servers_snapshots() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().display().to_string();
    let agent = TestAgent::start(&[
        "-server",
        "-bootstrap-expect=1",
        &format!("-data-dir={dir}"),
        &format!("-server-port={}", common::free_port()),
        &format!("-serf-lan-port={}", common::free_port()),
        &format!("-serf-wan-port={}", common::free_port()),
        "-bind=127.0.0.1",
        &hcl(r#"raft_snapshot_threshold = 16
                raft_trailing_logs = 0
                raft_snapshot_interval = "1s""#),
    ]);
    let meta = data.path().join("raft").join("snapshot.meta");
    assert!(!meta.exists(), "no snapshot before the threshold");
    for i in 0..40 {
        let (status, _) = agent.put(&format!("/v1/kv/k{i}"), "v");
        assert_eq!(status, 200);
    }
    eventually(Duration::from_secs(20), || meta.exists().then_some(()));
}

#[test]
fn bad_values_stop_the_agent_naming_the_key() {
    for (config, named) in [
        (
            "check_output_max_size = 0",
            "check_output_max_size must be positive",
        ),
        (
            r#"http_config { allow_write_http_from = ["10.0.0.0/40"] }"#,
            "http_config.allow_write_http_from",
        ),
        (
            r#"http_config { response_headers { "Bad Header" = "x" } }"#,
            "http_config.response_headers",
        ),
        (
            "http_config { use_cache = \"sometimes\" }",
            "http_config.use_cache",
        ),
        ("raft_snapshot_threshold = -1", "raft_snapshot_threshold"),
        (
            "raft_snapshot_interval = \"often\"",
            "raft_snapshot_interval",
        ),
        ("raft_trailing_logs = -5", "raft_trailing_logs"),
        ("disable_coordinates = \"maybe\"", "disable_coordinates"),
        ("max_query_time = \"0s\"", "max_query_time"),
        ("log_rotate_max_files = -2", "log_rotate_max_files"),
        ("log_rotate_duration = \"0s\"", "log_rotate_duration"),
        ("log_rotate_bytes = -1", "log_rotate_bytes"),
        ("serf_lan = \"nowhere\"", "serf_lan"),
        (
            "advertise_addr_ipv4 = \"::1\"",
            "advertise_addr_ipv4 must be an ipv4 address",
        ),
        (
            "advertise_addr_wan_ipv6 = \"10.0.0.1\"",
            "advertise_addr_wan_ipv6 must be an ipv6 address",
        ),
        ("default_query_time = \"soon\"", "default_query_time"),
    ] {
        let out = common::run_to_exit(
            &[
                "agent".into(),
                "-dev".into(),
                hcl(config),
                format!("-http-port={}", common::free_port()),
            ],
            Duration::from_secs(20),
        );
        assert_eq!(out.status.code(), Some(1), "{config} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{config}: {err}");
    }
}

#[test]
fn retry_max_makes_an_agent_that_cannot_join_exit() {
    let data = tempfile::tempdir().unwrap();
    let nobody = format!("127.0.0.1:{}", common::free_port());
    let out = common::run_to_exit(
        &[
            "agent".into(),
            format!("-data-dir={}", data.path().display()),
            "-bind=127.0.0.1".into(),
            format!("-serf-lan-port={}", common::free_port()),
            format!("-http-port={}", common::free_port()),
            "-dns-port=-1".into(),
            "-grpc-port=-1".into(),
            "-grpc-tls-port=-1".into(),
            format!("-retry-join={nobody}"),
            hcl("retry_max = 2\nretry_interval = \"200ms\""),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("max join retry exhausted"), "{text}");
}

/// How long a blocking read of `path` at its current index takes.
fn blocked_for(agent: &TestAgent, path: &str, wait: &str) -> Duration {
    let (_, headers, _) = agent.request("GET", path, None);
    let index = header(&headers, "x-consul-index").unwrap().to_string();
    let started = std::time::Instant::now();
    let (status, _, _) = agent.request("GET", &format!("{path}?index={index}{wait}"), None);
    assert_eq!(status, 200);
    started.elapsed()
}

#[test]
fn query_times_bound_blocking_reads() {
    // `max_query_time` caps an asked wait; `default_query_time` is the
    // wait of a query that asks none (plus up to 1/16 of jitter).
    let agent = TestAgent::dev(&[&hcl(
        "max_query_time = \"1s\"\ndefault_query_time = \"500ms\"",
    )]);
    let capped = blocked_for(&agent, "/v1/catalog/services", "&wait=30s");
    assert!(
        capped >= Duration::from_millis(900) && capped < Duration::from_secs(5),
        "{capped:?}"
    );
    let defaulted = blocked_for(&agent, "/v1/catalog/services", "");
    assert!(
        defaulted >= Duration::from_millis(400) && defaulted < Duration::from_secs(5),
        "{defaulted:?}"
    );
    // Without the keys an asked wait is honoured.
    let plain = TestAgent::dev(&[]);
    let honoured = blocked_for(&plain, "/v1/catalog/services", "&wait=2s");
    assert!(honoured >= Duration::from_millis(1900), "{honoured:?}");
}

#[test]
fn per_family_advertise_addresses_become_tagged_addresses() {
    let agent = TestAgent::dev(&[&hcl(
        "advertise_addr_ipv6 = \"fd00::5\"\nadvertise_addr_wan_ipv4 = \"203.0.113.5\"",
    )]);
    let node = agent.get("/v1/agent/self").unwrap()["Config"]["NodeName"]
        .as_str()
        .unwrap()
        .to_string();
    let tagged = eventually(Duration::from_secs(10), || {
        let found = agent.get(&format!("/v1/catalog/node/{node}")).ok()?;
        let tagged = found["Node"]["TaggedAddresses"].clone();
        (tagged.get("lan_ipv6").is_some()).then_some(tagged)
    });
    assert_eq!(tagged["lan"], "127.0.0.1");
    assert_eq!(tagged["lan_ipv4"], "127.0.0.1");
    assert_eq!(tagged["lan_ipv6"], "fd00::5");
    assert_eq!(tagged["wan_ipv4"], "203.0.113.5");
    assert_eq!(tagged["wan"], "127.0.0.1");
}

/// A one-server datacenter with gossip encryption, on free ports.
fn encrypted_server(data: &std::path::Path, key: &str, extra: &[&str]) -> TestAgent {
    let mut flags: Vec<String> = vec![
        "-server".into(),
        "-bootstrap-expect=1".into(),
        format!("-data-dir={}", data.display()),
        format!("-server-port={}", common::free_port()),
        format!("-serf-lan-port={}", common::free_port()),
        format!("-serf-wan-port={}", common::free_port()),
        "-bind=127.0.0.1".into(),
        format!("-encrypt={key}"),
    ];
    flags.extend(extra.iter().map(|f| f.to_string()));
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    TestAgent::start(&refs)
}

fn keygen() -> String {
    let out = Command::new(common::binary())
        .arg("keygen")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn disable_keyring_file_keeps_gossip_keys_in_memory() {
    for (disabled, extra) in [
        (false, vec![]),
        (true, vec![hcl("disable_keyring_file = true")]),
    ] {
        let data = tempfile::tempdir().unwrap();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let agent = encrypted_server(data.path(), &keygen(), &extra);
        let out = agent.cli(&["keyring", "-install", &keygen()]);
        common::expect_success(&out);
        let file = data.path().join("serf").join("local.keyring");
        if disabled {
            std::thread::sleep(Duration::from_secs(2));
            assert!(!file.exists(), "the keyring was written with the key set");
        } else {
            eventually(Duration::from_secs(10), || file.exists().then_some(()));
        }
    }
}

#[test]
fn log_file_rotates_by_size_and_keeps_the_newest_files() {
    let logs = tempfile::tempdir().unwrap();
    let agent = TestAgent::dev(&[
        "-log-level=debug",
        &hcl(&format!(
            "log_file = \"{}/\"\nlog_rotate_bytes = 300\nlog_rotate_max_files = 2",
            logs.path().display()
        )),
    ]);
    for i in 0..30 {
        let (status, body) = agent.put(
            "/v1/agent/service/register",
            &format!(r#"{{"Name": "svc{i}", "Port": {}}}"#, 1000 + i),
        );
        assert_eq!(status, 200, "{body}");
    }
    // Logging goes on meanwhile, so each look takes the folder as it is:
    // the current file and two old ones of at least the rotation size.
    eventually(Duration::from_secs(20), || {
        let mut names: Vec<String> = std::fs::read_dir(logs.path())
            .ok()?
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        if names.len() != 3 || !names.contains(&"consul.log".to_string()) {
            return None;
        }
        names
            .iter()
            .filter(|n| *n != "consul.log")
            .all(|old| {
                let text = std::fs::read_to_string(logs.path().join(old)).unwrap_or_default();
                old.starts_with("consul-")
                    && old.ends_with(".log")
                    && text.len() >= 300
                    && text.contains("INFO")
            })
            .then_some(())
    });
    // The newest lines are in the current file; the console has them too.
    eventually(Duration::from_secs(10), || {
        let current = std::fs::read_to_string(logs.path().join("consul.log")).ok()?;
        (current.contains("Synced service") && agent.log_text().contains("svc29")).then_some(())
    });
}

#[test]
fn auto_reload_config_follows_edited_files() {
    let dir = tempfile::tempdir().unwrap();
    let first = "auto_reload_config = true\nservice {\n  name = \"web\"\n  port = 80\n}\n";
    let file = common::write(dir.path(), "agent.hcl", first);
    let agent = TestAgent::dev(&["-config-file", file.to_str().unwrap()]);
    let services = |agent: &TestAgent| agent.get("/v1/agent/services").unwrap();
    assert!(services(&agent).get("web").is_some());
    // A second service written into the file appears without a signal.
    std::thread::sleep(Duration::from_millis(1100));
    common::write(
        dir.path(),
        "agent.hcl",
        &format!("{first}service {{\n  name = \"api\"\n  port = 81\n}}\n"),
    );
    eventually(Duration::from_secs(15), || {
        services(&agent).get("api").map(|_| ())
    });
    // A broken file is refused; the running configuration stays.
    common::write(dir.path(), "agent.hcl", "service {\n  name = \n");
    eventually(Duration::from_secs(15), || {
        agent
            .log_text()
            .contains("auto reload failed")
            .then_some(())
    });
    assert!(services(&agent).get("api").is_some());
    assert_eq!(agent.request("GET", "/v1/agent/self", None).0, 200);
}

#[test]
fn unprintable_paths_are_refused_unless_the_filter_is_off() {
    let agent = TestAgent::dev(&[]);
    let (status, _, body) = agent.request("PUT", "/v1/kv/bad%01key", Some("v"));
    assert_eq!(
        (status, body.as_str()),
        (400, ""),
        "go-cleanhttp's bare 400"
    );
    assert_eq!(agent.request("GET", "/v1/kv/tab%09key", None).0, 400);
    assert_eq!(
        agent.request("PUT", "/v1/kv/fine%20key+1", Some("v")).0,
        200
    );
    assert_eq!(agent.request("PUT", "/v1/kv/caf%C3%A9", Some("v")).0, 200);
    let lenient = TestAgent::dev(&[&hcl("disable_http_unprintable_char_filter = true")]);
    assert_eq!(lenient.request("PUT", "/v1/kv/bad%01key", Some("v")).0, 200);
    assert_eq!(lenient.request("GET", "/v1/kv/bad%01key", None).0, 200);
}

#[test]
fn serf_lan_binds_lan_gossip_where_it_says() {
    let data = tempfile::tempdir().unwrap();
    let lan = common::free_port();
    let _agent = TestAgent::start(&[
        "-server",
        "-bootstrap-expect=1",
        &format!("-data-dir={}", data.path().display()),
        "-bind=127.0.0.1",
        "-serf-lan-bind=127.0.0.71",
        &format!("-serf-lan-port={lan}"),
        &format!("-serf-wan-port={}", common::free_port()),
        &format!("-server-port={}", common::free_port()),
    ]);
    assert!(
        std::net::UdpSocket::bind(("127.0.0.71", lan)).is_err(),
        "LAN gossip holds 127.0.0.71"
    );
    assert!(
        std::net::UdpSocket::bind(("127.0.0.1", lan)).is_ok(),
        "and not the -bind address"
    );
}

#[test]
fn disable_host_node_id_false_derives_the_node_id_from_the_host() {
    let node_id = |agent: &TestAgent| {
        agent.get("/v1/agent/self").unwrap()["Config"]["NodeID"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let from_host = hcl("disable_host_node_id = false");
    let a = node_id(&TestAgent::dev(&[&from_host]));
    let b = node_id(&TestAgent::dev(&[&from_host]));
    assert_eq!(a, b, "the same host gives the same id");
    assert_eq!(a.len(), 36);
    let machine = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    assert!(
        !a.replace('-', "").contains(machine.trim()),
        "hashed, not the raw host id"
    );
    // By default (Consul's too) each new node id is random.
    let c = node_id(&TestAgent::dev(&[]));
    let d = node_id(&TestAgent::dev(&[]));
    assert_ne!(c, d);
    assert_ne!(c, a);
}

/// A client agent bound to `ip` that tries to join `server_lan` twice,
/// 200 ms apart; its exit output.
fn client_joining(ip: &str, server_lan: &str) -> std::process::Output {
    let data = tempfile::tempdir().unwrap();
    common::run_to_exit(
        &[
            "agent".into(),
            format!("-data-dir={}", data.path().display()),
            format!("-bind={ip}"),
            format!("-node=client-{ip}"),
            format!("-serf-lan-port={}", common::free_port()),
            format!("-http-port={}", common::free_port()),
            "-dns-port=-1".into(),
            "-grpc-port=-1".into(),
            "-grpc-tls-port=-1".into(),
            format!("-retry-join={server_lan}"),
            hcl("retry_max = 2\nretry_interval = \"200ms\""),
        ],
        Duration::from_secs(60),
    )
}

#[test]
fn serf_lan_allowed_cidrs_keeps_other_sources_out() {
    let data = tempfile::tempdir().unwrap();
    let lan = common::free_port();
    let server = TestAgent::start(&[
        "-server",
        "-bootstrap-expect=1",
        &format!("-data-dir={}", data.path().display()),
        "-bind=127.0.0.75",
        "-node=guarded",
        &format!("-serf-lan-port={lan}"),
        &format!("-serf-wan-port={}", common::free_port()),
        &format!("-server-port={}", common::free_port()),
        &hcl(r#"serf_lan_allowed_cidrs = ["127.0.0.75/32", "127.0.0.76/32"]"#),
    ]);
    let outsider = client_joining("127.0.0.77", &format!("127.0.0.75:{lan}"));
    assert_eq!(outsider.status.code(), Some(1), "the outsider never joined");
    // A source inside the ranges joins (start waits for it to know the
    // leader, which it learns from the server).
    let data = tempfile::tempdir().unwrap();
    let _insider = TestAgent::start(&[
        &format!("-data-dir={}", data.path().display()),
        "-bind=127.0.0.76",
        "-node=insider",
        &format!("-serf-lan-port={}", common::free_port()),
        &format!("-retry-join=127.0.0.75:{lan}"),
    ]);
    let members = server.get("/v1/agent/members").unwrap();
    let addresses: Vec<&str> = members
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Addr"].as_str().unwrap_or(""))
        .collect();
    assert!(addresses.contains(&"127.0.0.76"), "{members}");
    assert!(!addresses.contains(&"127.0.0.77"), "{members}");
}

/// The check's output as the catalog holds it right now.
fn catalog_output_now(agent: &TestAgent) -> String {
    let checks = agent.get("/v1/health/state/any").unwrap();
    let check = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["CheckID"] == "job")
        .unwrap()
        .clone();
    check["Output"].as_str().unwrap().to_string()
}

#[test]
fn check_update_interval_defers_output_only_changes() {
    let agent = TestAgent::dev(&[&hcl("check_update_interval = \"2s\"")]);
    register_ttl(&agent);
    // A status change goes out at once.
    assert_eq!(agent.put("/v1/agent/check/pass/job?note=first", "").0, 200);
    assert_eq!(catalog_output(&agent), "first");
    // The same status with new output: the agent shows it, the catalog
    // gets it between half and one and a half intervals later.
    let changed = std::time::Instant::now();
    assert_eq!(agent.put("/v1/agent/check/pass/job?note=second", "").0, 200);
    assert_eq!(
        agent.get("/v1/agent/checks").unwrap()["job"]["Output"],
        "second"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(catalog_output_now(&agent), "first", "deferred");
    eventually(Duration::from_secs(10), || {
        (catalog_output_now(&agent) == "second").then_some(())
    });
    let waited = changed.elapsed();
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    // A status change is not deferred, and takes the output with it.
    assert_eq!(agent.put("/v1/agent/check/warn/job?note=third", "").0, 200);
    eventually(Duration::from_secs(2), || {
        let checks = agent.get("/v1/health/state/warning").ok()?;
        let check = checks.as_array()?.iter().find(|c| c["CheckID"] == "job")?;
        (check["Output"] == "third").then_some(())
    });

    // Zero: every output change goes out at once.
    let eager = TestAgent::dev(&[&hcl("check_update_interval = \"0s\"")]);
    register_ttl(&eager);
    assert_eq!(eager.put("/v1/agent/check/pass/job?note=first", "").0, 200);
    assert_eq!(catalog_output(&eager), "first");
    assert_eq!(eager.put("/v1/agent/check/pass/job?note=second", "").0, 200);
    eventually(Duration::from_secs(2), || {
        (catalog_output_now(&eager) == "second").then_some(())
    });
}

#[test]
fn a_server_down_longer_than_server_rejoin_age_max_refuses_to_start() {
    let data = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let stale = format!("{{\"last_seen_unix\": {}}}", now - 200 * 3600);
    std::fs::write(data.path().join("server_metadata.json"), &stale).unwrap();
    let server_flags = |extra: &str| -> Vec<String> {
        vec![
            "agent".into(),
            "-server".into(),
            "-bootstrap-expect=1".into(),
            format!("-data-dir={}", data.path().display()),
            "-bind=127.0.0.1".into(),
            format!("-serf-lan-port={}", common::free_port()),
            format!("-serf-wan-port={}", common::free_port()),
            format!("-server-port={}", common::free_port()),
            format!("-http-port={}", common::free_port()),
            "-dns-port=-1".into(),
            "-grpc-port=-1".into(),
            "-grpc-tls-port=-1".into(),
            hcl(extra),
        ]
    };
    let out = common::run_to_exit(&server_flags(""), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1));
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("refusing to rejoin cluster because server has been offline for more than the configured server_rejoin_age_max (168h0m0s) - consider wiping your data dir"),
        "{text}"
    );
    // A longer allowance lets it start, and it records itself as running.
    let flags = server_flags("server_rejoin_age_max = \"300h\"");
    // The test agent picks its own HTTP port and turns DNS and gRPC off.
    let refs: Vec<&str> = flags[1..]
        .iter()
        .map(String::as_str)
        .filter(|f| {
            !["-http-port", "-dns-port", "-grpc"]
                .iter()
                .any(|p| f.starts_with(p))
        })
        .collect();
    let _server = TestAgent::start(&refs);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.path().join("server_metadata.json")).unwrap())
            .unwrap();
    assert!(meta["last_seen_unix"].as_i64().unwrap() >= now);
}

#[test]
fn discovery_max_stale_makes_plain_reads_stale_ones() {
    let consistency = |agent: &TestAgent, path: &str| {
        let (status, headers, _) =
            common::http_request_full(agent.http_port, "GET", path, &[], None);
        assert_eq!(status, 200, "{path}");
        header(&headers, "x-consul-effective-consistency")
            .unwrap_or_default()
            .to_string()
    };
    let agent = TestAgent::dev(&[&hcl("discovery_max_stale = \"5s\"")]);
    assert_eq!(consistency(&agent, "/v1/catalog/nodes"), "stale");
    assert_eq!(consistency(&agent, "/v1/health/service/consul"), "stale");
    assert_eq!(
        consistency(&agent, "/v1/catalog/nodes?consistent"),
        "consistent"
    );
    assert_eq!(consistency(&agent, "/v1/catalog/nodes?leader"), "leader");
    // Only catalog and health reads take the bound (Consul's path test in
    // `parseConsistency`); other reads keep their default.
    assert_eq!(consistency(&agent, "/v1/session/list"), "leader");
    let plain = TestAgent::dev(&[]);
    assert_eq!(consistency(&plain, "/v1/catalog/nodes"), "leader");
    // `?max_stale=` names the consistency itself: a positive bound is a
    // stale read anywhere; zero changes nothing.
    assert_eq!(
        consistency(&plain, "/v1/session/list?max_stale=3s"),
        "stale"
    );
    assert_eq!(
        consistency(&plain, "/v1/catalog/nodes?max_stale=0s"),
        "leader"
    );
    for (path, text) in [
        (
            "/v1/catalog/nodes?max_stale=soon",
            "Invalid max_stale value \"soon\"",
        ),
        (
            "/v1/catalog/nodes?consistent&max_stale=3s",
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        ),
    ] {
        let (status, _, body) = common::http_request_full(plain.http_port, "GET", path, &[], None);
        assert_eq!(status, 400, "{path}");
        assert_eq!(body, text, "{path}");
    }
}

/// The syslog sockets Go's `log/syslog` (and the agent) try, in order.
const SYSLOG_SOCKETS: [&str; 3] = ["/dev/log", "/var/run/syslog", "/var/run/log"];

#[test]
fn enable_syslog_sends_lines_to_the_syslog_daemon() {
    // A private mount namespace where /run (so /var/run) is a directory of
    // the test's holding its syslog socket: the agent finds the daemon at
    // /var/run/syslog (this machine has no /dev/log).
    assert!(
        !std::path::Path::new("/dev/log").exists(),
        "this test stands in for the daemon at /var/run/syslog"
    );
    let run = tempfile::tempdir().unwrap();
    let daemon = std::os::unix::net::UnixDatagram::bind(run.path().join("syslog")).unwrap();
    daemon
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let http = common::free_port();
    let mut agent = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$0\" /run && exec \"$1\" agent -dev -node=syslogger -http-port=\"$2\" -dns-port=-1 -grpc-port=-1 -grpc-tls-port=-1 -serf-lan-port=\"$3\" -server-port=\"$4\" '-hcl=enable_syslog = true' '-hcl=syslog_facility = \"LOCAL3\"'")
        .arg(run.path())
        .arg(common::binary())
        .arg(http.to_string())
        .arg(common::free_port().to_string())
        .arg(common::free_port().to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = vec![0u8; 8192];
    let mut seen = Vec::new();
    let found = loop {
        let Ok(n) = daemon.recv(&mut buf) else {
            break None;
        };
        let line = String::from_utf8_lossy(&buf[..n]).to_string();
        // LOCAL3 (19) * 8 + notice (5): an info line, tagged as Consul's.
        if line.starts_with("<157>") && line.contains(" consul[") {
            break Some(line);
        }
        seen.push(line);
    };
    let _ = agent.kill();
    let _ = agent.wait();
    let line = found.unwrap_or_else(|| panic!("no notice line; got {seen:?}"));
    assert!(line.contains("]: "), "{line}");

    // An unknown facility, and syslog with no daemon, stop the agent.
    let out = common::run_to_exit(
        &[
            "agent".into(),
            "-dev".into(),
            hcl("syslog_facility = \"LOCAL9\""),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid syslog facility"));
    if SYSLOG_SOCKETS.iter().all(|p| {
        std::os::unix::net::UnixDatagram::unbound()
            .unwrap()
            .connect(p)
            .is_err()
    }) {
        let out = common::run_to_exit(
            &[
                "agent".into(),
                "-dev".into(),
                format!("-http-port={}", common::free_port()),
                hcl("enable_syslog = true"),
            ],
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(1));
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(text.contains("Syslog setup failed"), "{text}");
    }
}

/// `curl --unix-socket` (a client we did not write) against the socket.
fn curl_unix(socket: &std::path::Path, args: &[&str]) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "-f", "--max-time", "5", "--unix-socket"])
        .arg(socket)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// A dev agent serving HTTP on `socket` only.
fn unix_socket_agent(socket: &std::path::Path) -> std::process::Child {
    unix_socket_agent_with(socket, "")
}

/// As [`unix_socket_agent`], with more HCL.
fn unix_socket_agent_with(socket: &std::path::Path, more: &str) -> std::process::Child {
    Command::new(common::binary())
        .args([
            "agent",
            "-dev",
            "-dns-port=-1",
            "-grpc-port=-1",
            "-grpc-tls-port=-1",
        ])
        .arg(format!("-serf-lan-port={}", common::free_port()))
        .arg(format!("-server-port={}", common::free_port()))
        .arg(hcl(&format!(
            "addresses {{ http = \"unix://{}\" }}\nunix_sockets {{ mode = \"0600\" }}\n{more}",
            socket.display()
        )))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn the_http_api_serves_on_a_unix_socket_with_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    for round in 0..2 {
        // The second agent finds the first one's socket file and replaces it.
        let mut agent = unix_socket_agent(&socket);
        let leader = eventually(Duration::from_secs(30), || {
            curl_unix(&socket, &["http://localhost/v1/status/leader"]).filter(|l| l.len() > 2)
        });
        assert!(leader.starts_with('"'), "{leader}");
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let written = curl_unix(
            &socket,
            &[
                "-X",
                "PUT",
                "--data",
                "v",
                &format!("http://localhost/v1/kv/round-{round}"),
            ],
        );
        assert_eq!(written.as_deref(), Some("true"));
        let read = curl_unix(
            &socket,
            &[&format!("http://localhost/v1/kv/round-{round}?raw")],
        );
        assert_eq!(read.as_deref(), Some("v"));
        let _ = agent.kill();
        let _ = agent.wait();
    }
    // Something else at the path is not removed: the agent refuses to start.
    let taken = dir.path().join("taken");
    std::fs::write(&taken, "not a socket").unwrap();
    let out = common::run_to_exit(
        &[
            "agent".into(),
            "-dev".into(),
            "-dns-port=-1".into(),
            "-grpc-port=-1".into(),
            "-grpc-tls-port=-1".into(),
            format!("-serf-lan-port={}", common::free_port()),
            format!("-server-port={}", common::free_port()),
            hcl(&format!(
                "addresses {{ http = \"unix://{}\" }}",
                taken.display()
            )),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a socket"));
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "not a socket");
}

#[test]
fn the_cli_and_config_watches_reach_an_agent_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let changes = dir.path().join("changes");
    let watch = format!(
        "watches = [{{ type = \"key\", key = \"sock/flag\", args = [\"sh\", \"-c\", \"cat >> {}\"] }}]",
        changes.display()
    );
    let mut agent = unix_socket_agent_with(&socket, &watch);
    let address = format!("unix://{}", socket.display());
    let cli = |args: &[&str]| {
        Command::new(common::binary())
            .args(args)
            .arg(format!("-http-addr={address}"))
            .output()
            .unwrap()
    };
    // The CLI dials the socket (Consul's `unix://` address form).
    eventually(Duration::from_secs(30), || {
        let out = cli(&["kv", "put", "sock/flag", "on"]);
        out.status.success().then_some(())
    });
    let out = cli(&["kv", "get", "sock/flag"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "on\n");
    // The agent's own watch follows the key through the socket too.
    let seen = eventually(Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&changes).ok()?;
        text.contains("\"Key\":\"sock/flag\"").then_some(text)
    });
    assert!(seen.contains("\"Value\":\"b24=\""), "{seen}");
    let _ = agent.kill();
    let _ = agent.wait();
    // Nothing at the socket: the CLI says it cannot reach the agent.
    let out = cli(&["kv", "get", "sock/flag"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Error"), "{err}");
}
