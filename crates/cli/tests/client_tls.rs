//! TLS for clients, through the binary: certificates from `legate tls`,
//! an agent with `ports { https, grpc_tls }` and `tls { defaults, https,
//! grpc }`; `curl --cacert` on the HTTPS port (a client certificate
//! required with `verify_incoming`), the CLI over HTTPS with `-ca-file`
//! and `-client-cert`/`-client-key` or Consul's environment variables, the
//! Envoy bootstrap's TLS ADS cluster, and the seed demo's traffic through
//! built-in proxies that reach the agent over `grpc_tls`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::mesh::{demo_logs, echo, echo_server, eventually, seed_demo_on, start_proxy_with};
use common::{binary, free_port, TestAgent};
use serde_json::Value;

/// The CA, a server certificate and a client certificate, made by
/// `legate tls` in `dir`.
struct Certs {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
}

fn make_certs(dir: &Path) -> Certs {
    for args in [
        &["tls", "ca", "create"][..],
        &["tls", "cert", "create", "-server", "-dc", "dc1"],
        &["tls", "cert", "create", "-client", "-dc", "dc1"],
    ] {
        let out = Command::new(binary())
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let at = |name: &str| dir.join(name);
    Certs {
        ca: at("consul-agent-ca.pem"),
        server: (
            at("dc1-server-consul-0.pem"),
            at("dc1-server-consul-0-key.pem"),
        ),
        client: (
            at("dc1-client-consul-0.pem"),
            at("dc1-client-consul-0-key.pem"),
        ),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A dev agent with `config`, its DNS and plain gRPC ports off, and its
/// gRPC TLS port off unless `grpc_tls` (the dev default port would clash
/// between tests run at once).
fn dev_agent(config: &Path, grpc_tls: bool) -> TestAgent {
    let mut flags = vec!["-dev", "-dns-port=-1", "-grpc-port=-1"];
    if !grpc_tls {
        flags.push("-grpc-tls-port=-1");
    }
    flags.extend(["-config-file", path(config)]);
    TestAgent::start_with(&flags, false)
}

/// `curl` against the HTTPS port: its exit code and output.
fn curl(args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `curl` trusting the CA and presenting the client certificate.
fn curl_as_client(certs: &Certs, url: &str) -> (i32, String) {
    curl(&[
        "--cacert",
        path(&certs.ca),
        "--cert",
        path(&certs.client.0),
        "--key",
        path(&certs.client.1),
        url,
    ])
}

#[test]
fn https_grpc_tls_the_cli_envoy_and_the_built_in_proxy_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let (https, grpc_tls, echo_port, web_sidecar, db_sidecar, upstream) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let received = echo_server(echo_port);
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        format!(
            r#"
ports {{ https = {https} grpc_tls = {grpc_tls} }}
tls {{
  defaults {{
    ca_file = "{ca}"
    cert_file = "{cert}"
    key_file = "{key}"
  }}
  https {{ verify_incoming = true }}
}}
"#,
            ca = path(&certs.ca),
            cert = path(&certs.server.0),
            key = path(&certs.server.1),
        ) + &seed_demo_on(echo_port, web_sidecar, db_sidecar, upstream),
    )
    .unwrap();
    // The plain gRPC port is off: xDS is served over TLS only.
    let agent = dev_agent(&config, true);
    let url = format!("https://127.0.0.1:{https}/v1/status/leader");

    // curl: the CA checks the agent; verify_incoming wants a client certificate.
    let (code, out) = curl(&["--cacert", path(&certs.ca), &url]);
    assert_ne!(code, 0, "no client certificate must fail: {out}");
    let (code, out) = curl_as_client(&certs, &url);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out, "\"127.0.0.1:8300\"");
    // Without the CA the agent's certificate is not trusted.
    let (code, out) = curl(&[
        "--cert",
        path(&certs.client.0),
        "--key",
        path(&certs.client.1),
        &url,
    ]);
    assert_ne!(code, 0, "{out}");

    // The CLI over HTTPS, by flags and by Consul's environment variables.
    let https_addr = format!("https://127.0.0.1:{https}");
    let cli = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(binary())
            .args(args)
            .envs(env.iter().copied())
            .env_remove("CONSUL_HTTP_ADDR")
            .env_remove("LEGATE_HTTP_ADDR")
            .output()
            .unwrap()
    };
    let out = cli(
        &[
            "catalog",
            "services",
            "-http-addr",
            &https_addr,
            "-ca-file",
            path(&certs.ca),
            "-client-cert",
            path(&certs.client.0),
            "-client-key",
            path(&certs.client.1),
        ],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("web"),
        "{out:?}"
    );
    let bare = format!("127.0.0.1:{https}");
    let env = [
        ("CONSUL_HTTP_ADDR", bare.as_str()),
        ("CONSUL_HTTP_SSL", "true"),
        ("CONSUL_CACERT", path(&certs.ca)),
        ("CONSUL_CLIENT_CERT", path(&certs.client.0)),
        ("CONSUL_CLIENT_KEY", path(&certs.client.1)),
    ];
    let out = Command::new(binary())
        .args(["catalog", "services"])
        .envs(env)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Without a client certificate the agent refuses the handshake.
    let out = cli(
        &[
            "catalog",
            "services",
            "-http-addr",
            &https_addr,
            "-ca-file",
            path(&certs.ca),
        ],
        &[],
    );
    assert!(!out.status.success(), "{out:?}");
    // A CA file that cannot be read is named.
    let out = cli(
        &[
            "catalog",
            "services",
            "-http-addr",
            &https_addr,
            "-ca-file",
            "/nonexistent/ca.pem",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ca.pem"),
        "{out:?}"
    );

    // The agent says where its TLS xDS port is.
    let me = agent.get("/v1/agent/self").unwrap();
    assert_eq!(me["xDS"]["Ports"]["TLS"], grpc_tls);
    assert_eq!(me["xDS"]["Ports"]["Plaintext"], -1);

    // connect envoy: the ADS cluster dials the TLS port and checks the CA.
    let out = Command::new(binary())
        .args([
            "connect",
            "envoy",
            "-sidecar-for",
            "web",
            "-bootstrap",
            "-grpc-ca-file",
            path(&certs.ca),
        ])
        .env("CONSUL_HTTP_ADDR", agent.addr())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bootstrap: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cluster = &bootstrap["static_resources"]["clusters"][0];
    assert_eq!(
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
            ["socket_address"]["port_value"],
        grpc_tls
    );
    let ca_text = std::fs::read_to_string(&certs.ca).unwrap();
    assert_eq!(
        cluster["transport_socket"]["typed_config"]["common_tls_context"]["validation_context"]
            ["trusted_ca"]["inline_string"],
        ca_text.as_str()
    );

    // The seed demo's traffic through built-in proxies that reach the agent over TLS.
    let grpc_addr = format!("https://127.0.0.1:{grpc_tls}");
    let flags = [
        "-grpc-addr",
        grpc_addr.as_str(),
        "-grpc-ca-file",
        path(&certs.ca),
    ];
    let _web = start_proxy_with(&agent, "web", &dir.path().join("web.log"), &flags);
    let _db = start_proxy_with(&agent, "db", &dir.path().join("db.log"), &flags);
    let logs = || demo_logs(dir.path(), &agent);
    eventually(
        "echo through web -> db over grpc_tls",
        Duration::from_secs(30),
        &logs,
        || echo(upstream, "over tls\n").as_deref() == Some("over tls\n"),
    );
    assert!(received.load(std::sync::atomic::Ordering::Relaxed) > 0);

    // A proxy that does not trust the agent's certificate gets nothing.
    let other = tempfile::tempdir().unwrap();
    let foreign = make_certs(other.path());
    let flags = [
        "-grpc-addr",
        grpc_addr.as_str(),
        "-grpc-ca-file",
        path(&foreign.ca),
    ];
    let log = dir.path().join("untrusting.log");
    let _untrusting = start_proxy_with(&agent, "web", &log, &flags);
    eventually(
        "the untrusting proxy's TLS failure",
        Duration::from_secs(20),
        &logs,
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("over TLS")
        },
    );
}

/// `ca_path`: a folder of CA certificates stands in for `ca_file` (here
/// for `verify_incoming` on HTTPS); an empty folder stops the agent.
#[test]
fn ca_path_trusts_every_certificate_in_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let cas = dir.path().join("cas");
    std::fs::create_dir(&cas).unwrap();
    std::fs::copy(&certs.ca, cas.join("agent-ca.pem")).unwrap();
    std::fs::write(cas.join("notes.txt"), "not a certificate").unwrap();
    let https = free_port();
    let config = |ca_path: &Path| {
        format!(
            "ports {{ https = {https} }}\ntls {{\n  defaults {{\n    ca_path = \"{}\"\n    cert_file = \"{}\"\n    key_file = \"{}\"\n  }}\n  https {{ verify_incoming = true }}\n}}\n",
            path(ca_path),
            path(&certs.server.0),
            path(&certs.server.1),
        )
    };
    let file = dir.path().join("agent.hcl");
    std::fs::write(&file, config(&cas)).unwrap();
    let _agent = dev_agent(&file, false);
    let url = format!("https://127.0.0.1:{https}/v1/status/leader");
    let (code, out) = curl(&["--cacert", path(&certs.ca), &url]);
    assert_ne!(code, 0, "a client certificate is required: {out}");
    let (code, out) = curl_as_client(&certs, &url);
    assert_eq!(code, 0, "the CA from ca_path checked the client: {out}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let bad = dir.path().join("bad.hcl");
    std::fs::write(
        &bad,
        config(&empty).replace(&https.to_string(), &free_port().to_string()),
    )
    .unwrap();
    let out = Command::new(binary())
        .args([
            "agent",
            "-dev",
            "-dns-port=-1",
            "-grpc-port=-1",
            "-config-file",
            path(&bad),
        ])
        .arg(format!("-http-port={}", free_port()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("holds no .pem or .crt file")
            || String::from_utf8_lossy(&out.stdout).contains("holds no .pem or .crt file"),
        "{out:?}"
    );
}

/// Client processes, killed when dropped (so a failing test leaves none).
struct Clients(Vec<std::process::Child>);

impl Drop for Clients {
    fn drop(&mut self) {
        for client in &mut self.0 {
            let _ = client.kill();
            let _ = client.wait();
        }
    }
}

/// A blocking query over HTTPS whose client leaves is dropped at once,
/// over HTTP/1.1 and over HTTP/2 alike: the connection itself reads the
/// end of the stream (hyper's HTTP/1 read of a busy connection, h2's
/// frame reader), with no periodic peek of the socket.
#[test]
fn a_blocking_query_over_https_whose_client_left_is_dropped_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let https = free_port();
    let file = dir.path().join("agent.hcl");
    std::fs::write(
        &file,
        format!(
            "ports {{ https = {https} }}\ntelemetry {{ prometheus_retention_time = \"60s\" disable_hostname = true }}\ntls {{\n  defaults {{\n    cert_file = \"{}\"\n    key_file = \"{}\"\n  }}\n}}\n",
            path(&certs.server.0),
            path(&certs.server.1),
        ),
    )
    .unwrap();
    let agent = dev_agent(&file, false);
    let base = format!("https://127.0.0.1:{https}");
    // Each protocol is what curl negotiates, not only what it asks for.
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let url = format!("{base}/v1/status/leader");
        let (code, out) = curl(&[
            "--cacert",
            path(&certs.ca),
            flag,
            "-o",
            "/dev/null",
            "-w",
            "%{http_version}",
            &url,
        ]);
        assert_eq!((code, out.as_str()), (0, version), "{flag}");
    }
    let blocking = || {
        let text = agent
            .get_text("/v1/agent/metrics?format=prometheus")
            .unwrap();
        common::prometheus::sum(&text, "consul_rpc_queries_blocking", &[])
    };
    let before = blocking();
    let url = format!("{base}/v1/kv/held?index=100000&wait=10m");
    let clients = Clients(
        ["--http1.1", "--http1.1", "--http2", "--http2"]
            .iter()
            .map(|flag| {
                Command::new("curl")
                    .args([
                        "-s",
                        "--max-time",
                        "600",
                        "--cacert",
                        path(&certs.ca),
                        flag,
                        &url,
                    ])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("curl")
            })
            .collect(),
    );
    let during = common::eventually(Duration::from_secs(10), || {
        let now = blocking();
        (now >= before + 4.0).then_some(now)
    });
    drop(clients);
    // Their ten-minute waits end with the clients, not with the wait.
    common::eventually(Duration::from_secs(10), || {
        (blocking() <= during - 4.0).then_some(())
    });
}
