//! The seed demo end to end with Legate's built-in proxy: an agent, two
//! `legate connect proxy` sidecars, an echo server and a TCP client. Echo
//! works; a deny intention stops new connections before a byte reaches
//! the application; deleting it restores echo; an L7 intention the TCP
//! proxy cannot enforce denies its source.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::mesh::{
    admin_port, demo_logs, echo, echo_server, eventually, proxy_stat, start_proxy, Conn, Proxy,
    SeedDemo,
};
use common::{binary, free_port, TestAgent};

#[test]
fn seed_demo_through_the_built_in_proxy() {
    let demo = SeedDemo::new();
    let (dir, upstream, received) = (&demo.dir, demo.upstream, &demo.received);
    let agent = demo.start_agent();
    let _web = start_proxy(&agent, "web", &dir.path().join("web.log"));
    let _db = start_proxy(&agent, "db", &dir.path().join("db.log"));
    let logs = || demo_logs(dir.path(), &agent);
    // The sidecar's listening check passes within seconds of the proxy listening.
    let started = Instant::now();
    db_sidecar_passing(&agent, &logs);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "health took {:?}",
        started.elapsed()
    );
    eventually(
        "echo through web -> db",
        Duration::from_secs(15),
        &logs,
        || echo(upstream, "hello world\n").as_deref() == Some("hello world\n"),
    );

    // legate intention create -deny web db: new connections get no echo,
    // and nothing reaches the application.
    deny_web_to_db(&agent, upstream, received, &logs);

    // db's proxy counts the denial on its admin port.
    let db_log = dir.path().join("db.log");
    let denials = proxy_stat(&db_log, "legate_proxy_rbac_denials_total");
    assert!(denials >= 2, "{denials} denials");
    let (_, _, stats) = common::http_request(admin_port(&db_log), "GET", "/stats", None);
    assert!(stats.contains("legate_proxy_connections_total"));

    // legate intention delete web db: echo again.
    let out = agent.cli(&["intention", "delete", "web", "db"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Intention deleted."
    );
    eventually(
        "echo after the delete",
        Duration::from_secs(5),
        &logs,
        || echo(upstream, "again\n").as_deref() == Some("again\n"),
    );

    // An L7 intention the TCP proxy cannot enforce denies its source.
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-defaults","Name":"db","Protocol":"http"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"web","Permissions":[{"Action":"deny","HTTP":{"PathPrefix":"/admin"}},{"Action":"allow","HTTP":{"PathPrefix":"/"}}]}]}"#,
    );
    assert_eq!(status, 200, "{body}");
    eventually(
        "the L7 intention to deny web at L4",
        Duration::from_secs(5),
        &logs,
        || echo(upstream, "l7\n").is_none(),
    );
    let (status, _, _) = agent.request("DELETE", "/v1/config/service-intentions/db", None);
    assert_eq!(status, 200);
    eventually(
        "echo once the L7 intention is gone",
        Duration::from_secs(5),
        &logs,
        || echo(upstream, "back\n").as_deref() == Some("back\n"),
    );
}

/// The seed demo with web's upstream a prepared query
/// (`destination_type = "prepared_query"`): the sidecar starts before the
/// query exists, follows it once created, echoes through the built-in
/// proxy, honours a deny intention, and follows the answer when db's
/// sidecar fails its check.
#[test]
fn seed_demo_with_a_prepared_query_upstream() {
    let demo = SeedDemo::new();
    let (dir, upstream, received) = (&demo.dir, demo.upstream, &demo.received);
    let text = std::fs::read_to_string(&demo.config).unwrap().replace(
        r#"destination_name = "db""#,
        "destination_type = \"prepared_query\"\n          destination_name = \"nearest-db\"",
    );
    assert!(text.contains("nearest-db"), "{text}");
    std::fs::write(&demo.config, text).unwrap();
    let agent = demo.start_agent();
    let _web = start_proxy(&agent, "web", &dir.path().join("web.log"));
    let _db = start_proxy(&agent, "db", &dir.path().join("db.log"));
    let logs = || demo_logs(dir.path(), &agent);
    // The query does not exist yet: web's sidecar is up, its upstream
    // listener has nothing to dial.
    db_sidecar_passing(&agent, &logs);
    assert_eq!(echo(upstream, "too early\n"), None);
    assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 0);

    let (status, _, body) = agent.request(
        "POST",
        "/v1/query",
        Some(r#"{"Name":"nearest-db","Service":{"Service":"db","OnlyPassing":true}}"#),
    );
    assert_eq!(status, 200, "{body}");
    eventually(
        "echo through web -> nearest-db -> db",
        Duration::from_secs(15),
        &logs,
        || echo(upstream, "hello query\n").as_deref() == Some("hello query\n"),
    );

    // A deny intention stops it before a byte reaches db.
    deny_web_to_db(&agent, upstream, received, &logs);
    let out = agent.cli(&["intention", "delete", "web", "db"]);
    assert!(out.status.success(), "{out:?}");
    eventually(
        "echo after the delete",
        Duration::from_secs(5),
        &logs,
        || echo(upstream, "again\n").as_deref() == Some("again\n"),
    );

    // The query answers only passing instances: once db's sidecar is in
    // maintenance the answer is empty and so is the upstream.
    let (status, _, _) = agent.request(
        "PUT",
        "/v1/agent/service/maintenance/db-sidecar-proxy?enable=true",
        None,
    );
    assert_eq!(status, 200);
    eventually(
        "the upstream to follow the empty answer",
        Duration::from_secs(15),
        &logs,
        || echo(upstream, "gone\n").is_none(),
    );
}

#[test]
fn connections_survive_rotation_and_agent_restart_traffic_leaves_unhealthy_endpoints_and_strangers_are_refused(
) {
    let (echo1, echo2, web_sidecar, db1_sidecar, db2_sidecar, upstream, grpc) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let got1 = echo_server(echo1);
    let got2 = echo_server(echo2);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("services.hcl");
    std::fs::write(
        &config,
        format!(
            r#"
services {{
  name = "web"
  port = 8080
  connect {{ sidecar_service {{ port = {web_sidecar}
    proxy {{ upstreams {{ destination_name = "db"
                         local_bind_port = {upstream} }} }} }} }}
}}
services {{
  id = "db1"
  name = "db"
  port = {echo1}
  connect {{ sidecar_service {{ port = {db1_sidecar} }} }}
}}
services {{
  id = "db2"
  name = "db"
  port = {echo2}
  connect {{ sidecar_service {{ port = {db2_sidecar} }} }}
}}
"#
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut flags = vec![
        "-server".to_string(),
        "-bootstrap".to_string(),
        "-bind=127.0.0.1".to_string(),
        format!("-data-dir={}", data.display()),
        "-dns-port=-1".to_string(),
        format!("-grpc-port={grpc}"),
        "-config-file".to_string(),
        config.display().to_string(),
    ];
    flags.extend(common::own_server_ports());
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut agent = TestAgent::start_with(&args, false);
    let _web = start_proxy(&agent, "web", &dir.path().join("web.log"));
    let proxy_for = |agent: &TestAgent, id: &str, log: &str| {
        let file = std::fs::File::create(dir.path().join(log)).unwrap();
        Proxy(
            Command::new(binary())
                .args([
                    "connect",
                    "proxy",
                    "-proxy-id",
                    id,
                    "-admin-bind",
                    "127.0.0.1:0",
                ])
                .env("CONSUL_HTTP_ADDR", agent.addr())
                .stdout(file.try_clone().unwrap())
                .stderr(file)
                .spawn()
                .unwrap(),
        )
    };
    let _db1 = proxy_for(&agent, "db1-sidecar-proxy", "db1.log");
    let _db2 = proxy_for(&agent, "db2-sidecar-proxy", "db2.log");
    let logs = || {
        ["web.log", "db1.log", "db2.log"]
            .iter()
            .map(|f| {
                format!(
                    "{f}:\n{}",
                    std::fs::read_to_string(dir.path().join(f)).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    eventually(
        "both db sidecars passing",
        Duration::from_secs(15),
        &logs,
        || {
            agent
                .get("/v1/health/connect/db?passing")
                .map(|v| v.as_array().is_some_and(|a| a.len() == 2))
                .unwrap_or(false)
        },
    );
    eventually("echo", Duration::from_secs(15), &logs, || {
        echo(upstream, "hello\n").as_deref() == Some("hello\n")
    });
    let mut open = Conn::open(upstream);
    assert!(open.echo("first\n"));

    // Traffic leaves an unhealthy instance: db1 in maintenance.
    let (status, _) = agent.put(
        "/v1/agent/service/maintenance/db1?enable=true&reason=test",
        "",
    );
    assert_eq!(status, 200);
    eventually("db1 out of rotation", Duration::from_secs(5), &logs, || {
        let before = got1.load(std::sync::atomic::Ordering::SeqCst);
        let all_ok = (0..6).all(|i| echo(upstream, &format!("m{i}\n")).is_some());
        all_ok && got1.load(std::sync::atomic::Ordering::SeqCst) == before
    });
    let before2 = got2.load(std::sync::atomic::Ordering::SeqCst);
    assert!(echo(upstream, "to-db2\n").is_some());
    assert!(got2.load(std::sync::atomic::Ordering::SeqCst) > before2);
    agent.put("/v1/agent/service/maintenance/db1?enable=false", "");

    // Root rotation: the open connection keeps working; new ones too
    // (new leaves are cross-signed, old ones stay trusted).
    let (status, body) = agent.put(
        "/v1/connect/ca/configuration",
        r#"{"Provider":"consul","Config":{"PrivateKeyType":"rsa"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(open.echo("after rotation\n"));
    eventually(
        "new connections after rotation",
        Duration::from_secs(5),
        &logs,
        || echo(upstream, "rotated\n").is_some(),
    );

    // Agent restart under traffic: proxies keep their config meanwhile,
    // then reconnect and resume.
    agent.kill9();
    assert!(open.echo("agent down\n"));
    assert_eq!(
        echo(upstream, "while down\n").as_deref(),
        Some("while down\n")
    );
    let agent = TestAgent::start_with(&args, false);
    assert!(open.echo("agent back\n"));
    eventually(
        "echo after the restart",
        Duration::from_secs(10),
        &logs,
        || echo(upstream, "after\n").as_deref() == Some("after\n"),
    );
    eventually(
        "the proxies resumed their streams",
        Duration::from_secs(10),
        &logs,
        || {
            let m = agent.get("/v1/agent/metrics").unwrap_or_default();
            m["Gauges"]
                .as_array()
                .and_then(|g| {
                    // Gauges carry the host name: consul.<host>.xds.server.streams.
                    g.iter().find(|x| {
                        x["Name"]
                            .as_str()
                            .is_some_and(|n| n.ends_with(".xds.server.streams"))
                    })
                })
                .and_then(|x| x["Value"].as_f64())
                .is_some_and(|v| v >= 3.0)
        },
    );

    // A client with a certificate from another trust domain is refused by
    // db's sidecar before anything reaches the application.
    let stranger = legate_ca::builtin::generate_root(
        "elsewhere.consul",
        "stranger",
        Duration::from_secs(3600),
    )
    .unwrap();
    let id = legate_ca::SpiffeId::service("elsewhere.consul", "dc1", "web");
    let (csr, key) = legate_ca::builtin::make_csr(&id).unwrap();
    let leaf =
        legate_ca::builtin::sign_leaf(&stranger, &csr, &id, Duration::from_secs(3600)).unwrap();
    std::fs::write(dir.path().join("leaf.pem"), &leaf).unwrap();
    std::fs::write(dir.path().join("key.pem"), &key).unwrap();
    let before1 = got1.load(std::sync::atomic::Ordering::SeqCst);
    let mut client = Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-connect",
            &format!("127.0.0.1:{db1_sidecar}"),
        ])
        .arg("-cert")
        .arg(dir.path().join("leaf.pem"))
        .arg("-key")
        .arg(dir.path().join("key.pem"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _ = client.stdin.take().unwrap().write_all(b"stranger data\n");
    std::thread::sleep(Duration::from_millis(500));
    let _ = client.kill();
    let output = client.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&output.stdout).contains("stranger data"));
    assert_eq!(
        got1.load(std::sync::atomic::Ordering::SeqCst),
        before1,
        "nothing reached the app"
    );
    let db1_log = std::fs::read_to_string(dir.path().join("db1.log")).unwrap();
    assert!(
        db1_log.contains("inbound TLS handshake failed") || db1_log.contains("denied"),
        "{db1_log}"
    );
}

#[test]
fn dev_form_registers_proxies_while_they_run() {
    let (echo_port, db_listen, web_listen, upstream) =
        (free_port(), free_port(), free_port(), free_port());
    echo_server(echo_port);
    let agent = TestAgent::start_with(
        &[
            "-dev",
            "-dns-port=-1",
            &format!("-grpc-port={}", free_port()),
        ],
        false,
    );
    let (status, body) = agent.put(
        "/v1/agent/service/register",
        &format!(r#"{{"Name":"db","Port":{echo_port}}}"#),
    );
    assert_eq!(status, 200, "{body}");
    let dir = tempfile::tempdir().unwrap();
    let spawn = |args: Vec<String>, log: &str| {
        let file = std::fs::File::create(dir.path().join(log)).unwrap();
        Proxy(
            Command::new(binary())
                .arg("connect")
                .arg("proxy")
                .args(args)
                .env("CONSUL_HTTP_ADDR", agent.addr())
                .stdout(file.try_clone().unwrap())
                .stderr(file)
                .spawn()
                .unwrap(),
        )
    };
    let db = spawn(
        vec![
            "-service".into(),
            "db".into(),
            "-listen".into(),
            format!("127.0.0.1:{db_listen}"),
        ],
        "db.log",
    );
    let web = spawn(
        vec![
            "-service".into(),
            "web".into(),
            "-service-addr".into(),
            "127.0.0.1:1".into(),
            "-upstream".into(),
            format!("db:{upstream}"),
            "-listen".into(),
            format!("127.0.0.1:{web_listen}"),
        ],
        "web.log",
    );
    let logs = || {
        format!(
            "{}\n{}",
            std::fs::read_to_string(dir.path().join("db.log")).unwrap_or_default(),
            std::fs::read_to_string(dir.path().join("web.log")).unwrap_or_default()
        )
    };
    eventually(
        "echo through dev-form proxies",
        Duration::from_secs(15),
        &logs,
        || echo(upstream, "dev\n").as_deref() == Some("dev\n"),
    );
    let services = agent.get("/v1/agent/services").unwrap();
    assert_eq!(services["db-proxy"]["Kind"], "connect-proxy");
    assert_eq!(
        services["web-proxy"]["Proxy"]["Upstreams"][0]["DestinationName"],
        "db"
    );
    // Stopping a proxy deregisters it.
    terminate(db);
    terminate(web);
    eventually(
        "the proxies deregistered",
        Duration::from_secs(10),
        &logs,
        || {
            let s = agent.get("/v1/agent/services").unwrap();
            s.get("db-proxy").is_none() && s.get("web-proxy").is_none()
        },
    );
}

/// Stops a proxy with SIGTERM (a clean shutdown), then reaps it.
/// Waits for db's one sidecar to pass its checks (its proxy listening).
fn db_sidecar_passing(agent: &TestAgent, logs: &dyn Fn() -> String) {
    eventually(
        "db's sidecar passing",
        Duration::from_secs(15),
        logs,
        || {
            agent
                .get("/v1/health/connect/db?passing")
                .map(|v| v.as_array().is_some_and(|a| a.len() == 1))
                .unwrap_or(false)
        },
    );
}

/// `legate intention create -deny web db`: new connections through web's
/// upstream listener get no echo, and nothing reaches db's application.
fn deny_web_to_db(
    agent: &TestAgent,
    upstream: u16,
    received: &std::sync::atomic::AtomicU64,
    logs: &dyn Fn() -> String,
) {
    let out = agent.cli(&["intention", "create", "-deny", "web", "db"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Created: web => db (deny)"
    );
    eventually(
        "the deny to take effect",
        Duration::from_secs(5),
        logs,
        || echo(upstream, "probe\n").is_none(),
    );
    let before = received.load(std::sync::atomic::Ordering::SeqCst);
    assert!(echo(upstream, "secret\n").is_none());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        received.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "a denied connection must not reach the application"
    );
}

fn terminate(mut proxy: Proxy) {
    let pid = proxy.0.id();
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let _ = proxy.0.wait();
}
