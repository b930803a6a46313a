//! Starting the agent from config files and flags, and refusing bad ones.

mod common;

use std::process::Command;
use std::time::Duration;

use common::mesh::SEED_DEMO;
use common::{eventually, write, TestAgent};

#[test]
fn seed_demo_config_registers_services_and_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let demo = write(dir.path(), "demo.hcl", SEED_DEMO);
    // The demo's `-hcl 'ports { grpc = 8502 }'`, on a free port so tests can run side by side.
    let grpc = common::free_port();
    let hcl = format!("ports {{ grpc = {grpc} }}");
    let agent = TestAgent::start_with(
        &[
            "-dev",
            "-hcl",
            &hcl,
            "-config-file",
            &demo.display().to_string(),
        ],
        false,
    );
    let services = agent.get("/v1/agent/services").unwrap();
    for id in ["web", "db", "web-sidecar-proxy", "db-sidecar-proxy"] {
        assert!(services.get(id).is_some(), "{id} missing from {services}");
    }
    let upstream = &services["web-sidecar-proxy"]["Proxy"]["Upstreams"][0];
    assert_eq!(upstream["DestinationName"], "db");
    assert_eq!(upstream["LocalBindPort"], 9191);
    assert_eq!(
        services["db-sidecar-proxy"]["Proxy"]["LocalServicePort"],
        9090
    );
    eventually(Duration::from_secs(5), || {
        (agent.get("/v1/catalog/connect/db").ok()?.as_array()?.len() == 1).then_some(())
    });
    assert_eq!(
        agent.get("/v1/agent/self").unwrap()["DebugConfig"]["GRPCPort"],
        grpc
    );
}

#[test]
fn config_dir_json_and_flags_merge() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.json",
        r#"{"datacenter": "east", "node_meta": {"rack": "r1"}, "service": {"name": "a", "port": 1}}"#,
    );
    write(
        dir.path(),
        "b.hcl",
        "service {\n  name = \"b\"\n  port = 2\n}\nnode_meta { zone = \"z\" }\n",
    );
    write(dir.path(), "ignored.txt", "not config");
    let agent = TestAgent::dev(&[
        "-config-dir",
        &dir.path().display().to_string(),
        "-node-meta",
        "extra:yes",
    ]);
    let me = agent.get("/v1/agent/self").unwrap();
    assert_eq!(me["Config"]["Datacenter"], "east");
    assert_eq!(me["Meta"]["rack"], "r1");
    assert_eq!(me["Meta"]["zone"], "z");
    assert_eq!(me["Meta"]["extra"], "yes");
    let services = agent.get("/v1/agent/services").unwrap();
    assert!(services.get("a").is_some() && services.get("b").is_some());
    let node = eventually(Duration::from_secs(5), || {
        let nodes = agent.get("/v1/catalog/nodes").ok()?;
        let node = nodes.as_array()?.first()?.clone();
        (node["Meta"]["extra"] == "yes").then_some(node)
    });
    assert_eq!(node["Datacenter"], "east");
}

#[test]
fn bad_config_is_refused_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = write(
        dir.path(),
        "unknown.hcl",
        "datacenter = \"dc1\"\nno_such_option = true\n",
    );
    let err = common::run_agent_expecting_failure(&[
        "-dev",
        "-config-file",
        &unknown.display().to_string(),
    ]);
    assert!(
        err.contains("unknown.hcl") && err.contains("no_such_option"),
        "{err}"
    );

    let broken = write(
        dir.path(),
        "broken.hcl",
        "services {\n  name = \"web\"\n  port = 80\n",
    );
    let err = common::run_agent_expecting_failure(&[
        "-dev",
        "-config-file",
        &broken.display().to_string(),
    ]);
    assert!(err.contains("broken.hcl") && err.contains("line"), "{err}");

    let bad_type = write(dir.path(), "type.json", r#"{"ports": {"dns": "eighty"}}"#);
    let err = common::run_agent_expecting_failure(&[
        "-dev",
        "-config-file",
        &bad_type.display().to_string(),
    ]);
    assert!(err.contains("ports.dns"), "{err}");

    let bad_check = write(
        dir.path(),
        "check.hcl",
        "check {\n  name = \"c\"\n  http = \"http://x\"\n  interval = \"ten\"\n}\n",
    );
    let err = common::run_agent_expecting_failure(&[
        "-dev",
        "-config-file",
        &bad_check.display().to_string(),
    ]);
    assert!(
        err.contains("checks[0]") && err.contains("duration"),
        "{err}"
    );

    let err = common::run_agent_expecting_failure(&["-dev", "-config-file", "/no/such/file.hcl"]);
    assert!(err.contains("/no/such/file.hcl"), "{err}");

    let err = common::run_agent_expecting_failure(&["-server"]);
    assert!(err.contains("data_dir"), "{err}");

    let out = Command::new(common::binary())
        .args(["agent", "-no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-flag"));
}

#[test]
fn unimplemented_keys_warn_once_and_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "extra.hcl",
        "telemetry { prometheus_retention_time = \"24h\" statsite_address = \"127.0.0.1:1\" }\nauto_encrypt { tls = true }\n",
    );
    let agent = TestAgent::dev(&["-config-file", &file.display().to_string()]);
    let log = agent.log_text();
    assert_eq!(log.matches("\"auto_encrypt\"").count(), 1, "{log}");
    // `telemetry` is read; a sink Legate lacks is named, once.
    assert_eq!(
        log.matches("telemetry.statsite_address").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("\"telemetry\""), "{log}");
    // `prometheus_retention_time` opens the Prometheus format.
    for (path, headers) in [
        ("/v1/agent/metrics?format=prometheus", vec![]),
        (
            "/v1/agent/metrics",
            vec![("Accept", "text/plain; version=0.4.0")],
        ),
    ] {
        let (status, response_headers, _) =
            common::http_request_full(agent.http_port, "GET", path, &headers, None);
        assert_eq!(status, 200, "{path}");
        assert!(response_headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v.starts_with("text/plain")));
    }
}

#[test]
fn pid_file_is_written_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("legate.pid");
    let mut agent = TestAgent::dev(&["-pid-file", &pid.display().to_string()]);
    let text = std::fs::read_to_string(&pid).unwrap();
    assert_eq!(text.trim(), agent.child.id().to_string());
    let out = agent.cli(&["leave"]);
    assert!(out.status.success());
    let status = agent.child.wait().unwrap();
    assert!(status.success());
    assert!(!pid.exists());
}

#[test]
fn reload_rereads_config_services_and_checks() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "services.hcl",
        "service {\n  name = \"old\"\n  port = 1\n}\n",
    );
    let agent = TestAgent::dev(&["-config-file", &file.display().to_string()]);
    assert_eq!(
        agent
            .put(
                "/v1/agent/service/register",
                r#"{"Name":"api-registered","Port":3}"#
            )
            .0,
        200
    );
    assert!(agent
        .get("/v1/agent/services")
        .unwrap()
        .get("old")
        .is_some());

    write(
        dir.path(),
        "services.hcl",
        "service {\n  name = \"new\"\n  port = 2\n  connect { sidecar_service {} }\n}\ncheck {\n  name = \"disk\"\n  ttl = \"30s\"\n}\n",
    );
    let out = agent.cli(&["reload"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let services = agent.get("/v1/agent/services").unwrap();
    assert!(services.get("old").is_none(), "{services}");
    assert!(
        services.get("new").is_some() && services.get("new-sidecar-proxy").is_some(),
        "{services}"
    );
    assert!(
        services.get("api-registered").is_some(),
        "API registrations survive a reload"
    );
    assert!(agent.get("/v1/agent/checks").unwrap().get("disk").is_some());
    eventually(Duration::from_secs(5), || {
        let services = agent.get("/v1/catalog/services").ok()?;
        (services.get("old").is_none() && services.get("new").is_some()).then_some(())
    });

    // A broken file is reported and changes nothing.
    write(
        dir.path(),
        "services.hcl",
        "service {\n  name = \"broken\"\n",
    );
    let out = agent.cli(&["reload"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("services.hcl"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(agent
        .get("/v1/agent/services")
        .unwrap()
        .get("new")
        .is_some());

    // SIGHUP reloads too.
    write(
        dir.path(),
        "services.hcl",
        "service {\n  name = \"hup\"\n  port = 4\n}\n",
    );
    let status = Command::new("kill")
        .args(["-HUP", &agent.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    eventually(Duration::from_secs(5), || {
        let services = agent.get("/v1/agent/services").ok()?;
        (services.get("hup").is_some() && services.get("new").is_none()).then_some(())
    });
}

#[test]
fn keygen_makes_keys_the_agent_accepts_and_bad_keys_stop_it() {
    let out = Command::new(common::binary())
        .arg("keygen")
        .output()
        .unwrap();
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(key.len(), 44, "{key}");
    let agent = TestAgent::dev(&["-encrypt", &key]);
    assert!(agent.get("/v1/agent/self").is_ok());
    let out = Command::new(common::binary())
        .args([
            "agent",
            "-dev",
            "-encrypt",
            "not-a-key",
            "-http-port=-1",
            "-dns-port=-1",
            "-grpc-port=-1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("encrypt: the key"), "{text}");
}

#[test]
fn wan_federation_through_gateways_is_refused_where_consuls_is() {
    let dir = tempfile::tempdir().unwrap();
    let data = format!("-data-dir={}", dir.path().join("data").display());
    let feature = "connect { enable_mesh_gateway_wan_federation = true }";
    for (args, expected) in [
        (
            vec![data.as_str(), "-hcl", feature],
            "'connect.enable_mesh_gateway_wan_federation = true' requires 'server = true'",
        ),
        (
            vec!["-dev", "-node", "a/b", "-hcl", feature],
            "requires that 'node_name' not contain '/' characters",
        ),
        (
            vec!["-dev", "-retry-join-wan", "127.0.0.1", "-hcl", feature],
            "'retry_join_wan' is incompatible with 'connect.enable_mesh_gateway_wan_federation = true'",
        ),
        (
            vec!["-dev", "-hcl", feature],
            "requires TLS on the server port",
        ),
        (
            vec![data.as_str(), "-primary-gateway", "127.0.0.16:4432"],
            "'primary_gateways' requires 'server = true'",
        ),
        (
            vec!["-dev", "-primary-gateway", "127.0.0.16:4432"],
            "'primary_gateways' should only be configured in a secondary datacenter",
        ),
        (
            vec!["-dev", "-hcl", "primary_datacenter = \"dc0\"", "-primary-gateway", "nowhere"],
            "primary_gateways: \"nowhere\" is not host:port",
        ),
    ] {
        let err = common::run_agent_expecting_failure(&args);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

#[test]
fn a_server_federating_through_gateways_refuses_a_manual_wan_join() {
    let dir = tempfile::tempdir().unwrap();
    let tls = common::server_tls_config(
        dir.path(),
        "g1",
        "verify_outgoing = true\n    verify_incoming = true",
    );
    let config = write(
        dir.path(),
        "wanfed.hcl",
        &format!("connect {{ enable_mesh_gateway_wan_federation = true }}\n{tls}"),
    );
    let mut flags = vec![
        "-server".to_string(),
        "-bootstrap".to_string(),
        "-node=g1".to_string(),
        "-bind=127.0.0.1".to_string(),
        format!("-data-dir={}", dir.path().join("data").display()),
        format!("-config-file={}", config.display()),
    ];
    flags.extend(common::own_server_ports());
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let agent = TestAgent::start(&args);
    let (status, body) = agent.put("/v1/agent/join/127.0.0.1?wan=1", "");
    assert_eq!(
        (status, body.as_str()),
        (
            500,
            "WAN join is disabled when wan federation via mesh gateways is enabled"
        )
    );
}

#[test]
fn locality_goes_on_the_node_and_on_services_that_name_none() {
    let agent = TestAgent::dev(&[
        "-node=placed",
        "-hcl=locality { region = \"us-east-1\" zone = \"us-east-1a\" }",
    ]);
    let own = r#"{"Name": "pinned", "Port": 2, "Locality": {"Region": "eu-west-1"}}"#;
    for body in [r#"{"Name": "web", "Port": 1}"#, own] {
        assert_eq!(agent.put("/v1/agent/service/register", body).0, 200);
    }
    let placed = serde_json::json!({"Region": "us-east-1", "Zone": "us-east-1a"});
    let services = agent.get("/v1/agent/services").unwrap();
    assert_eq!(services["web"]["Locality"], placed);
    assert_eq!(
        services["pinned"]["Locality"],
        serde_json::json!({"Region": "eu-west-1"})
    );
    // The catalog has the node's and the instances' localities once synced.
    let web = eventually(Duration::from_secs(10), || {
        let rows = agent.get("/v1/catalog/service/web").ok()?;
        rows.as_array()?.first().cloned()
    });
    assert_eq!(web["ServiceLocality"], placed);
    let node = agent.get("/v1/catalog/node/placed").unwrap();
    assert_eq!(node["Node"]["Locality"], placed);
    let healthy = agent.get("/v1/health/service/pinned").unwrap();
    assert_eq!(healthy[0]["Node"]["Locality"], placed);
    assert_eq!(
        healthy[0]["Service"]["Locality"],
        serde_json::json!({"Region": "eu-west-1"})
    );
    // Without the block: no Locality on the node or the instance, and
    // catalog rows carry Consul's `"ServiceLocality": null`.
    let plain = TestAgent::dev(&["-node=anywhere"]);
    assert_eq!(
        plain
            .put(
                "/v1/agent/service/register",
                r#"{"Name": "web", "Port": 1}"#
            )
            .0,
        200
    );
    let row = eventually(Duration::from_secs(10), || {
        let rows = plain.get("/v1/catalog/service/web").ok()?;
        rows.as_array()?.first().cloned()
    });
    assert!(row.as_object().unwrap().contains_key("ServiceLocality"));
    assert!(row["ServiceLocality"].is_null());
    let node = plain.get("/v1/catalog/node/anywhere").unwrap();
    assert!(node["Node"].get("Locality").is_none(), "{node}");
    assert!(plain.get("/v1/agent/services").unwrap()["web"]
        .get("Locality")
        .is_none());
    // A key the block does not have stops the agent, as Consul's loader.
    let err = common::run_agent_expecting_failure(&["-dev", "-hcl=locality { rack = \"7\" }"]);
    assert!(err.contains("locality.rack"), "{err}");
}

/// Go's flag package lets a flag be given twice, the last value winning
/// (scripts append overrides that way); flags that collect values
/// (`-config-file`, `-hcl`) keep every one.
#[test]
fn a_repeated_flag_takes_its_last_value_and_collecting_flags_keep_all() {
    let dir = tempfile::tempdir().unwrap();
    let one = write(
        dir.path(),
        "one.hcl",
        r#"services { name = "one" port = 1 }"#,
    );
    let two = write(
        dir.path(),
        "two.hcl",
        r#"services { name = "two" port = 2 }"#,
    );
    let agent = TestAgent::start_with(
        &[
            "-dev",
            "-node=first-name",
            "-node=last-name",
            "-config-file",
            &one.display().to_string(),
            "-config-file",
            &two.display().to_string(),
            "-hcl",
            r#"node_meta { a = "1" }"#,
            "-hcl",
            r#"node_meta { b = "2" }"#,
        ],
        false,
    );
    let me = agent.get("/v1/agent/self").unwrap();
    assert_eq!(me["Config"]["NodeName"], "last-name");
    assert_eq!(me["Meta"]["a"], "1", "{}", me["Meta"]);
    assert_eq!(me["Meta"]["b"], "2");
    let services = agent.get("/v1/agent/services").unwrap();
    assert!(
        services.get("one").is_some() && services.get("two").is_some(),
        "{services}"
    );
}
