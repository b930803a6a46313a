//! Hostile and careless input through the real binary: each request must
//! get a clear answer and leave the agent working (issue 16's defects).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::TestAgent;
use serde_json::{json, Value};

fn assert_alive(agent: &TestAgent) {
    let (status, _, body) = agent.request("GET", "/v1/status/leader", None);
    assert_eq!(status, 200, "the agent stopped answering: {body}");
}

#[test]
fn a_deeply_nested_filter_is_refused_on_every_filtering_endpoint() {
    let agent = TestAgent::dev(&[]);
    assert_eq!(
        agent
            .put("/v1/agent/service/register", r#"{"Name":"web","Port":1}"#)
            .0,
        200
    );
    let nested = format!("{}Node==x{}", "(".repeat(3000), ")".repeat(3000));
    let negated = format!("{}Node==x", "not ".repeat(3000));
    for filter in [&nested, &negated] {
        for path in [
            "/v1/catalog/nodes",
            "/v1/catalog/services",
            "/v1/catalog/service/web",
            "/v1/catalog/node-services/legate-dev",
            "/v1/health/service/web",
            "/v1/health/state/any",
            "/v1/health/checks/web",
            "/v1/agent/services",
            "/v1/agent/checks",
        ] {
            let (status, _, body) = agent.request(
                "GET",
                &format!("{path}?filter={}", common::percent_encode(filter)),
                None,
            );
            assert_eq!(status, 400, "{path}: {body}");
            assert!(
                body.contains("Failed to create boolean expression evaluator")
                    && body.contains("deeper than 64"),
                "{path}: {body}"
            );
        }
    }
    assert_alive(&agent);
    // Long flat chains are fine: they cost no depth.
    let chain: Vec<String> = (0..2000).map(|i| format!("Node == n{i}")).collect();
    let (status, _, body) = agent.request(
        "GET",
        &format!(
            "/v1/catalog/nodes?filter={}",
            common::percent_encode(&chain.join(" or "))
        ),
        None,
    );
    assert_eq!(status, 200, "{body}");
}

fn set_ca_config(agent: &TestAgent, config: Value) -> (u16, String) {
    agent.put(
        "/v1/connect/ca/configuration",
        &json!({"Provider": "consul", "Config": config}).to_string(),
    )
}

fn leaf(agent: &TestAgent, service: &str) -> (u16, String) {
    let (status, _, body) =
        agent.request("GET", &format!("/v1/agent/connect/ca/leaf/{service}"), None);
    (status, body)
}

#[test]
fn ca_configuration_numbers_are_checked_before_they_are_stored() {
    let agent = TestAgent::dev(&[]);
    assert_eq!(leaf(&agent, "before").0, 200);
    for (config, needle) in [
        (json!({"CSRMaxPerSecond": "NaN"}), "not a finite number"),
        (json!({"CSRMaxPerSecond": "inf"}), "not a finite number"),
        (json!({"CSRMaxPerSecond": "-inf"}), "not a finite number"),
        (json!({"CSRMaxPerSecond": null}), "expected a number"),
        (json!({"PrivateKeyBits": 256.9}), "whole number"),
        (json!({"CSRMaxConcurrent": -1}), "whole number"),
        (
            json!({"PrivateKeyType": "rsa", "PrivateKeyBits": 8192}),
            "RSA key length must be 2048 or 4096 bits",
        ),
        (
            json!({"PrivateKeyType": "rsa", "PrivateKeyBits": 4097}),
            "RSA key length must be 2048 or 4096 bits",
        ),
        (
            json!({"PrivateKey": "garbage", "RootCert": "garbage"}),
            "invalid private key",
        ),
    ] {
        let started = Instant::now();
        let (status, body) = set_ca_config(&agent, config.clone());
        assert_eq!(status, 400, "{config}: {body}");
        assert!(body.contains(needle), "{config}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{config} took long"
        );
    }
    // Nothing was stored: leaves are still signed and a valid change works.
    assert_eq!(leaf(&agent, "after").0, 200);
    let stored = agent.get("/v1/connect/ca/configuration").unwrap();
    assert_eq!(stored["Config"]["CSRMaxPerSecond"], 50, "{stored}");
    let (status, body) = set_ca_config(&agent, json!({"CSRMaxPerSecond": 25}));
    assert_eq!(status, 200, "{body}");

    // A rate too small to wait for: one leaf, then Consul's rate-limit
    // answer instead of a panic or a request that never ends.
    let (status, body) = set_ca_config(&agent, json!({"CSRMaxPerSecond": 1e-30}));
    assert_eq!(status, 200, "{body}");
    let mut answers = Vec::new();
    for service in ["tiny-a", "tiny-b", "tiny-c"] {
        let started = Instant::now();
        let answer = leaf(&agent, service);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{service}: no answer for {:?}",
            started.elapsed()
        );
        answers.push(answer);
    }
    assert!(
        answers
            .iter()
            .any(|(s, b)| *s == 429 && b.contains("Rate limit reached, try again later")),
        "{answers:?}"
    );
    assert!(
        !agent.log_text().contains("panicked"),
        "{}",
        agent.log_text()
    );
    let (status, body) = set_ca_config(&agent, json!({"CSRMaxPerSecond": 50}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(leaf(&agent, "tiny-d").0, 200);
}

#[test]
fn a_damaged_stored_ca_configuration_never_blocks_leaves_or_its_repair() {
    let agent = TestAgent::dev(&[]);
    let (status, _, good) =
        common::http_request_bytes(agent.http_port, "GET", "/v1/snapshot", None);
    assert_eq!(status, 200);
    // Damage the stored CA configuration as an older build could store it
    // (a non-finite rate serialised as null), then restore that archive.
    let (meta, data) = legate_state::archive::read_archive(&good).unwrap();
    let mut state = serde_json::to_value(&data).unwrap();
    state["ca_config"]["Config"]["CSRMaxPerSecond"] = Value::Null;
    let damaged: legate_state::SnapshotData = serde_json::from_value(state).unwrap();
    let archive = legate_state::archive::write_archive(&damaged, meta.index, meta.term).unwrap();
    let (status, _, body) =
        common::http_request_bytes(agent.http_port, "PUT", "/v1/snapshot", Some(archive));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let stored = agent.get("/v1/connect/ca/configuration").unwrap();
    assert_eq!(stored["Config"]["CSRMaxPerSecond"], Value::Null, "{stored}");
    // Leaves are still signed (with the default limits) ...
    let (status, body) = leaf(&agent, "web");
    assert_eq!(status, 200, "{body}");
    // ... and a valid configuration replaces the damaged one.
    let (status, body) = set_ca_config(&agent, json!({"CSRMaxPerSecond": 30}));
    assert_eq!(status, 200, "{body}");
    let stored = agent.get("/v1/connect/ca/configuration").unwrap();
    assert_eq!(stored["Config"]["CSRMaxPerSecond"], 30, "{stored}");
    assert_eq!(leaf(&agent, "db").0, 200);
    // Restoring the good snapshot repairs it as well.
    let (status, _, _) =
        common::http_request_bytes(agent.http_port, "PUT", "/v1/snapshot", Some(good));
    assert_eq!(status, 200);
    let stored = agent.get("/v1/connect/ca/configuration").unwrap();
    assert_eq!(stored["Config"]["CSRMaxPerSecond"], 50, "{stored}");
}

fn create_session(agent: &TestAgent, body: Value) -> (u16, String) {
    agent.put("/v1/session/create", &body.to_string())
}

#[test]
fn session_ttl_min_is_honoured_reported_and_refused_in_consuls_words() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = create_session(&agent, json!({"TTL": "7.5s"}));
    assert_eq!(status, 500, "{body}");
    assert_eq!(
        body.trim(),
        "Invalid Session TTL '7500000000', must be between [10s=24h0m0s]"
    );
    let config = agent.get("/v1/agent/self").unwrap();
    assert_eq!(config["Config"]["SessionTTLMin"], 10_000_000_000u64);

    let agent = TestAgent::dev(&["-hcl", r#"session_ttl_min = "5s""#]);
    assert!(!agent.log_text().contains("session_ttl_min"));
    let config = agent.get("/v1/agent/self").unwrap();
    assert_eq!(config["Config"]["SessionTTLMin"], 5_000_000_000u64);
    assert_eq!(config["DebugConfig"]["SessionTTLMin"], "5s");
    let (status, body) = create_session(&agent, json!({"TTL": "7.5s"}));
    assert_eq!(status, 200, "{body}");
    let (status, body) = create_session(&agent, json!({"TTL": "3s"}));
    assert_eq!(status, 500, "{body}");
    assert_eq!(
        body.trim(),
        "Invalid Session TTL '3000000000', must be between [5s=24h0m0s]"
    );
    let (status, body) = create_session(&agent, json!({"TTL": "25h"}));
    assert_eq!(status, 500, "{body}");
    let (status, body) = create_session(&agent, json!({"TTL": "soon"}));
    assert_eq!(status, 500, "{body}");
    assert!(body.starts_with("Session TTL 'soon' invalid"), "{body}");
    // A bad value stops the agent with the key named.
    let out = std::process::Command::new(common::binary())
        .args(["agent", "-dev", "-hcl", r#"session_ttl_min = "0s""#])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("session_ttl_min"));
}

#[test]
fn lock_delay_is_capped_at_consuls_sixty_seconds() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = create_session(&agent, json!({"LockDelay": "1h"}));
    assert_eq!(status, 200, "{body}");
    let first: Value = serde_json::from_str(&body).unwrap();
    let first = first["ID"].as_str().unwrap();
    // Stored as asked (Consul does the same) ...
    let info = agent.get(&format!("/v1/session/info/{first}")).unwrap();
    assert_eq!(info[0]["LockDelay"], 3_600_000_000_000u64);
    assert_eq!(
        agent.put(&format!("/v1/kv/lock?acquire={first}"), "a").1,
        "true"
    );
    agent.put(&format!("/v1/session/destroy/{first}"), "");
    let (_, body) = create_session(&agent, json!({"LockDelay": "0s"}));
    let second: Value = serde_json::from_str(&body).unwrap();
    let second = second["ID"].as_str().unwrap();
    let released = Instant::now();
    // ... honoured at first ...
    assert_eq!(
        agent.put(&format!("/v1/kv/lock?acquire={second}"), "b").1,
        "false"
    );
    // ... but for 60 s, not an hour.
    loop {
        let (_, acquired) = agent.put(&format!("/v1/kv/lock?acquire={second}"), "b");
        if acquired == "true" {
            break;
        }
        assert!(
            released.elapsed() < Duration::from_secs(65),
            "the key is still locked after {:?}",
            released.elapsed()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        released.elapsed() >= Duration::from_secs(55),
        "{:?}",
        released.elapsed()
    );
}

#[test]
fn the_data_dir_and_its_files_are_private_to_their_owner() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    // An existing data dir others can read (as older builds left it).
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("old-file"), "x").unwrap();
    std::fs::set_permissions(dir.join("old-file"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let dir_text = dir.display().to_string();
    let agent = TestAgent::start(&[
        "-server",
        "-bootstrap-expect=1",
        &format!("-data-dir={dir_text}"),
        "-node=private",
        "-bind=127.0.0.71",
    ]);
    assert_eq!(agent.put("/v1/kv/k", "v").1, "true");
    assert_eq!(leaf(&agent, "web").0, 200);
    assert!(
        agent.log_text().contains("restricted it to its owner"),
        "{}",
        agent.log_text()
    );
    let mut seen = 0;
    let mut stack = vec![dir.clone()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, 0o700, "{}", path.display());
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(mode, 0o600, "{}", path.display());
            seen += 1;
        }
    }
    assert!(dir.join("raft/raft.db").exists());
    assert!(seen >= 3, "{seen} files");
}

/// The agent's peak resident memory so far (VmHWM), in KiB.
fn peak_rss_kib(agent: &TestAgent) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_snapshot_bomb_is_refused_without_inflating_it_one_restore_at_a_time() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.snap");
    // A state.json that says it inflates to 2 GiB, 256 MiB of it present:
    // about 1 MB compressed.
    let script = format!(
        r#"(python3 -c "
import sys, tarfile
t = tarfile.TarInfo('state.json'); t.size = 2 << 30
sys.stdout.buffer.write(t.tobuf(format=tarfile.GNU_FORMAT))"; head -c 268435456 /dev/zero) | gzip -1 > {}"#,
        bomb.display()
    );
    assert!(std::process::Command::new("bash")
        .args(["-c", &script])
        .status()
        .unwrap()
        .success());
    let bytes = std::fs::read(&bomb).unwrap();
    assert!(bytes.len() < 4 << 20, "{} bytes", bytes.len());
    let before = peak_rss_kib(&agent);
    let port = agent.http_port;
    let restores: Vec<_> = (0..4)
        .map(|_| {
            let bytes = bytes.clone();
            std::thread::spawn(move || {
                let (status, _, body) =
                    common::http_request_bytes(port, "PUT", "/v1/snapshot", Some(bytes));
                (status, String::from_utf8_lossy(&body).to_string())
            })
        })
        .collect();
    let answers: Vec<(u16, String)> = restores.into_iter().map(|t| t.join().unwrap()).collect();
    for (status, body) in &answers {
        match status {
            400 => assert!(body.contains("state.json is larger than"), "{body}"),
            429 => assert!(body.contains("already in progress"), "{body}"),
            other => panic!("{other}: {body}"),
        }
    }
    assert!(answers.iter().any(|(s, _)| *s == 400), "{answers:?}");
    let peak = peak_rss_kib(&agent);
    assert!(
        peak < before + 64 * 1024,
        "peak RSS went from {before} KiB to {peak} KiB"
    );
    assert_eq!(agent.put("/v1/kv/after", "ok").1, "true");
}

#[test]
fn validation_gaps_are_closed_with_consuls_answers() {
    let agent = TestAgent::dev(&[]);
    // Service metadata.
    let many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (meta, why) in [
        (
            Value::Object(many),
            "Node metadata cannot contain more than 64 key/value pairs",
        ),
        (
            json!({"k".repeat(200): "v"}),
            "Key is too long (limit: 128 characters)",
        ),
        (
            json!({"k": "v".repeat(1000)}),
            "Value is too long (limit: 512 characters)",
        ),
        (
            json!({"consul-x": "v"}),
            "Key prefix 'consul-' is reserved for internal use",
        ),
        (json!({"a b": "v"}), "Key contains invalid characters"),
    ] {
        let body = json!({"Name": "m", "Meta": meta}).to_string();
        let (status, text) = agent.put("/v1/agent/service/register", &body);
        assert_eq!(status, 400, "{text}");
        assert!(
            text.starts_with("Invalid Service Meta: ") && text.contains(why),
            "{text}"
        );
        let body = json!({"Node": "n1", "Address": "10.0.0.1",
                          "Service": {"Service": "m", "Meta": meta}})
        .to_string();
        let (status, text) = agent.put("/v1/catalog/register", &body);
        assert_eq!(status, 500, "{text}");
        assert!(
            text.starts_with("Invalid Service Meta for node n1 and serviceID m: ")
                && text.contains(why),
            "{text}"
        );
    }
    assert!(agent
        .get("/v1/catalog/service/m")
        .unwrap()
        .as_array()
        .unwrap()
        .is_empty());
    let out = std::process::Command::new(common::binary())
        .args(["agent", "-dev", "-hcl", r#"node_meta { "consul-x" = "1" }"#])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("node_meta invalid"));

    // A transaction set without a key creates nothing.
    let (status, text) = agent.put(
        "/v1/txn",
        r#"[{"KV":{"Verb":"set","Value":"eA=="}},{"KV":{"Verb":"set","Key":"ok","Value":"eA=="}}]"#,
    );
    assert_eq!(status, 409, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        answer["Errors"],
        json!([{"OpIndex": 0, "What": "Must provide key"}])
    );
    let (status, _, _) = agent.request("GET", "/v1/kv/ok", None);
    assert_eq!(status, 404, "the transaction was applied in part");

    // A service name with a space gets a percent-encoded SPIFFE id.
    let (status, body) = leaf(&agent, "x%20y");
    assert_eq!(status, 200, "{body}");
    let issued: Value = serde_json::from_str(&body).unwrap();
    let uri = issued["ServiceURI"].as_str().unwrap();
    assert!(uri.ends_with("/svc/x%20y"), "{uri}");
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("leaf.pem");
    std::fs::write(&pem, issued["CertPEM"].as_str().unwrap()).unwrap();
    let san = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(&pem)
        .output()
        .unwrap();
    let san = String::from_utf8_lossy(&san.stdout);
    assert!(san.contains(&format!("URI:{uri}")), "{san}");

    // User events: serf's 512 bytes.
    let (status, text) = agent.put("/v1/event/fire/big", &"x".repeat(600));
    assert_eq!(status, 500, "{text}");
    assert_eq!(
        text,
        "user event exceeds configured limit of 512 bytes before encoding"
    );
    assert_eq!(agent.put("/v1/event/fire/small", &"x".repeat(400)).0, 200);

    // join and force-leave answer Consul's errors.
    let (status, text) = agent.put("/v1/agent/join/%20bogus", "");
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("Failed to resolve"), "{text}");
    let (status, text) = agent.put("/v1/agent/force-leave/nobody", "");
    assert_eq!(status, 500, "{text}");
    assert_eq!(text, "agent: No node found with name 'nobody'");
}

#[test]
fn a_discovery_chain_deeper_than_the_bound_is_refused_with_a_clear_error() {
    let agent = TestAgent::dev(&[]);
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"proxy-defaults","Name":"global","Config":{"protocol":"http"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    for i in 0..=64 {
        let entry = json!({"Kind": "service-splitter", "Name": format!("s{i}"),
                           "Splits": [{"Weight": 100, "Service": format!("s{}", i + 1)}]});
        let (status, body) = agent.put("/v1/config", &entry.to_string());
        if i < 64 {
            assert_eq!(status, 200, "s{i}: {body}");
        } else {
            assert_eq!(status, 400, "s{i}: {body}");
            assert!(
                body.contains("more than 64 splitters or resolver redirects in a row"),
                "{body}"
            );
        }
    }
    // The chain that is stored still compiles.
    let chain = agent.get("/v1/discovery-chain/s0").unwrap();
    assert_eq!(chain["Chain"]["ServiceName"], "s0", "{chain}");
}

#[test]
fn deeply_nested_json_bodies_and_hcl_are_refused_not_fatal() {
    let agent = TestAgent::dev(&[]);
    let deep_json = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_object = format!(
        r#"{{"Kind":"service-defaults","Name":"x","Meta":{}1{}}}"#,
        r#"{"a":"#.repeat(50_000),
        "}".repeat(50_000)
    );
    for (path, body) in [
        ("/v1/agent/service/register", &deep_json),
        ("/v1/catalog/register", &deep_json),
        ("/v1/config", &deep_object),
        ("/v1/txn", &deep_json),
        ("/v1/connect/ca/configuration", &deep_object),
    ] {
        let (status, text) = agent.put(path, body);
        assert!((400..500).contains(&status), "{path}: {status} {text}");
    }
    assert_alive(&agent);
    // A config file nested past the bound stops the agent with a message.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("deep.hcl");
    std::fs::write(
        &file,
        format!("{}{}", "a {".repeat(100_000), "}".repeat(100_000)),
    )
    .unwrap();
    let out = std::process::Command::new(common::binary())
        .args(["agent", "-dev", "-config-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nest deeper than 64 levels"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn filters_on_unknown_fields_are_refused_as_go_bexpr_refuses_them() {
    let agent = TestAgent::dev(&[]);
    let body = r#"{"Name":"web","Port":1,"Meta":{"version":"v1"},"Check":{"TTL":"30s","Status":"passing"}}"#;
    assert_eq!(agent.put("/v1/agent/service/register", body).0, 200);
    let refused = |path: &str, filter: &str, selector: &str| {
        let (status, _, text) = agent.request(
            "GET",
            &format!("{path}?filter={}", common::percent_encode(filter)),
            None,
        );
        assert_eq!(status, 400, "{path} {filter}: {text}");
        assert_eq!(
            text.trim(),
            format!(
                "Failed to create boolean expression evaluator: Selector {selector:?} is not valid"
            ),
            "{path} {filter}"
        );
    };
    refused("/v1/catalog/nodes", "Nodee == vm", "Nodee");
    refused("/v1/catalog/nodes", "not Nodee == vm", "Nodee");
    refused(
        "/v1/catalog/service/web",
        "ServiceMeta.version == v1 and ServicePortt == 1",
        "ServicePortt",
    );
    refused(
        "/v1/health/service/web",
        "Service.Servicee == web",
        "Service.Servicee",
    );
    refused(
        "/v1/health/service/web",
        "Checks.Statuss == passing",
        "Checks.Statuss",
    );
    refused("/v1/agent/services", "Kindd == x", "Kindd");
    refused("/v1/agent/checks", "Statuss == passing", "Statuss");
    refused("/v1/health/state/any", "Node.Name == x", "Node.Name");
    // Valid selectors keep working, lists included.
    for (path, filter, expect) in [
        ("/v1/catalog/nodes", "Node != nobody-here", 1),
        ("/v1/catalog/service/web", "ServiceMeta.version == v1", 1),
        ("/v1/catalog/service/web", "PeerName is empty", 1),
        (
            "/v1/health/service/web",
            "Checks.Status == passing and Service.Meta.version == v1",
            1,
        ),
        ("/v1/health/service/web", "Checks.Status == critical", 0),
    ] {
        let (status, _, text) = agent.request(
            "GET",
            &format!("{path}?filter={}", common::percent_encode(filter)),
            None,
        );
        assert_eq!(status, 200, "{path} {filter}: {text}");
        let rows: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            rows.as_array().unwrap().len(),
            expect,
            "{path} {filter}: {text}"
        );
    }
}
