//! Mesh gateways through the binary: `connect envoy -gateway=mesh
//! -register` registers what Consul's CLI registers (and refuses what it
//! refuses), the agent answers a bad gateway registration with Consul's
//! 400, and the gateway's own ADS stream gets a listener on its tagged
//! addresses with `tls_inspector` and the SNI catch-all, and a cluster
//! per local mesh service with its sidecar behind it.

mod common;

use std::time::Duration;

use common::mesh::{CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, SEED_DEMO};
use common::{eventually, free_port, TestAgent};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

struct Mesh {
    agent: TestAgent,
    grpc: u16,
    dir: tempfile::TempDir,
}

fn start() -> Mesh {
    start_with(SEED_DEMO)
}

/// A dev agent with xDS on and `config` (HCL) as a config file.
fn start_with(config: &str) -> Mesh {
    let dir = tempfile::tempdir().unwrap();
    let file = common::write(dir.path(), "demo.hcl", config);
    let grpc = free_port();
    let agent = TestAgent::start_with(
        &[
            "-dev",
            "-dns-port=-1",
            "-grpc-tls-port=-1",
            &format!("-grpc-port={grpc}"),
            "-config-file",
            file.to_str().unwrap(),
        ],
        false,
    );
    Mesh { agent, grpc, dir }
}

fn run(agent: &TestAgent, args: &[&str]) -> (i32, String, String) {
    let out = agent.cli(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `connect envoy -gateway=mesh -register -bootstrap` with LAN address
/// 127.0.0.15:`lan`, WAN address 127.0.0.16:`wan` and `extra` flags.
fn register(agent: &TestAgent, lan: u16, wan: u16, extra: &[&str]) -> (i32, String, String) {
    let (lan, wan) = (format!("127.0.0.15:{lan}"), format!("127.0.0.16:{wan}"));
    let mut args = vec![
        "connect",
        "envoy",
        "-gateway=mesh",
        "-register",
        "-bootstrap",
    ];
    args.extend(["-address", lan.as_str(), "-wan-address", wan.as_str()]);
    args.extend_from_slice(extra);
    run(agent, &args)
}

#[test]
fn connect_envoy_registers_a_mesh_gateway_as_consuls_cli_does() {
    let mesh = start();
    let agent = &mesh.agent;
    let (lan, wan) = (free_port(), free_port());
    let (code, out, err) = register(agent, lan, wan, &["-service", "edge", "-expose-servers"]);
    assert_eq!(code, 0, "{err}");
    let bootstrap: Value = serde_json::from_str(&out).expect("only the bootstrap on stdout");
    assert_eq!(bootstrap["node"]["id"], "edge");
    assert_eq!(bootstrap["node"]["cluster"], "edge");
    let service = agent.get("/v1/agent/service/edge").unwrap();
    assert_eq!(service["Kind"], "mesh-gateway");
    assert_eq!(service["Port"], lan);
    assert_eq!(
        service["TaggedAddresses"],
        json!({"lan": {"Address": "127.0.0.15", "Port": lan}, "wan": {"Address": "127.0.0.16", "Port": wan}})
    );
    assert_eq!(service["Meta"], json!({"consul-wan-federation": "1"}));
    assert_eq!(
        service["Proxy"]["Config"],
        json!({"envoy_gateway_no_default_bind": true, "envoy_gateway_bind_tagged_addresses": true})
    );
    let checks = agent.get("/v1/agent/checks").unwrap();
    let check = checks
        .as_object()
        .unwrap()
        .values()
        .find(|c| c["ServiceID"] == "edge")
        .expect("the gateway's check");
    assert_eq!(check["Name"], "mesh-gateway listening");
    // Without -register the one gateway is found; with two, Consul's error.
    let (code, _, err) = run(agent, &["connect", "envoy", "-gateway=mesh", "-bootstrap"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = run(
        agent,
        &[
            "connect",
            "envoy",
            "-gateway=mesh",
            "-register",
            "-service",
            "edge2",
            "-bootstrap",
        ],
    );
    assert_eq!(code, 0);
    let (code, _, err) = run(agent, &["connect", "envoy", "-gateway=mesh", "-bootstrap"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Cannot lookup the mesh-gateway's proxy ID because multiple are registered with the agent"),
        "{err}"
    );
}

#[test]
fn bad_gateway_flags_and_registrations_get_consuls_errors() {
    let mesh = start();
    let agent = &mesh.agent;
    for (args, expected) in [
        (
            vec!["-gateway=mesh", "-expose-servers"],
            "'-expose-servers' requires '-register'",
        ),
        (
            vec!["-gateway=edge"],
            "Gateway must be one of: api, terminating, mesh, or ingress",
        ),
        (
            vec!["-register", "-proxy-id", "web-sidecar-proxy"],
            "Auto-Registration can only be used for gateways",
        ),
        (
            vec!["-gateway=mesh", "-register", "-address", "nowhere"],
            "Error parsing address \"nowhere\": not an IP address",
        ),
        (
            vec!["-gateway=mesh", "-register", "-address", "192.0.2.7:4431"],
            "The LAN address \"192.0.2.7\" will not be bindable",
        ),
        (
            vec!["-gateway=mesh"],
            "No mesh-gateway services registered with this agent",
        ),
    ] {
        let mut full = vec!["connect", "envoy", "-bootstrap"];
        full.extend(args.iter().copied());
        let (code, _, err) = run(agent, &full);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let (status, body) = agent.put(
        "/v1/agent/service/register",
        r#"{"Kind":"mesh-gateway","Name":"gw"}"#,
    );
    assert_eq!(
        (status, body.as_str()),
        (
            400,
            "Validation failed: 1 error occurred:\n\t* Port must be non-zero for a mesh-gateway\n\n"
        )
    );
    let (status, body) = agent.put(
        "/v1/agent/service/register",
        r#"{"Kind":"mesh-gateway","Name":"gw","Port":443,"Proxy":{"DestinationServiceName":"db","Upstreams":[{"DestinationName":"x","LocalBindPort":1}]}}"#,
    );
    assert_eq!(
        (status, body.as_str()),
        (
            400,
            "Validation failed: 2 errors occurred:\n\t* The Proxy.DestinationServiceName configuration is invalid for a mesh-gateway\n\t* The Proxy.Upstreams configuration is invalid for a mesh-gateway\n\n"
        )
    );
    assert!(
        agent.get("/v1/agent/service/gw").is_err(),
        "nothing registered"
    );
}

fn ask(type_url: &str, names: Vec<String>) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node {
            id: "mesh-gateway".into(),
            cluster: "mesh-gateway".into(),
            ..Default::default()
        }),
        type_url: type_url.into(),
        resource_names: names,
        ..Default::default()
    }
}

async fn next(stream: &mut tonic::Streaming<DiscoveryResponse>) -> DiscoveryResponse {
    tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("an answer in time")
        .expect("no error")
        .expect("the stream stays open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_stream_serves_its_listener_and_the_local_mesh_services() {
    let mesh = start();
    let agent = &mesh.agent;
    eventually(Duration::from_secs(30), || {
        let rows = agent.get("/v1/health/connect/db").ok()?;
        (rows.as_array()?.len() == 1).then_some(())
    });
    let (lan, wan) = (free_port(), free_port());
    let (code, _, err) = register(agent, lan, wan, &[]);
    assert_eq!(code, 0, "{err}");
    // db's resolver: a subset and a connect timeout for its clusters.
    let (status, _) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-resolver","Name":"db","ConnectTimeout":"10s","Subsets":{"v1":{"Filter":"Service.Meta.version == v1"}}}"#,
    );
    assert_eq!(status, 200);
    let td = agent.get("/v1/connect/ca/roots").unwrap()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    let mut client =
        AggregatedDiscoveryServiceClient::connect(format!("http://127.0.0.1:{}", mesh.grpc))
            .await
            .unwrap();
    let (tx, rx) = mpsc::channel(16);
    let mut stream = client
        .stream_aggregated_resources(tonic::Request::new(ReceiverStream::new(rx)))
        .await
        .unwrap()
        .into_inner();
    tx.send(ask(CLUSTER_TYPE, vec![])).await.unwrap();
    let db = format!("db.default.dc1.internal.{td}");
    let web = format!("web.default.dc1.internal.{td}");
    let v1 = format!("v1.db.default.dc1.internal.{td}");
    // Clusters come as the local services' sidecars register.
    let mut names = Vec::new();
    let mut timeouts = std::collections::BTreeMap::new();
    for _ in 0..10 {
        let clusters = next(&mut stream).await;
        let decoded: Vec<Cluster> = clusters
            .resources
            .iter()
            .map(|any| Cluster::decode(any.value.as_slice()).unwrap())
            .collect();
        names = decoded.iter().map(|c| c.name.clone()).collect();
        timeouts = decoded
            .iter()
            .map(|c| (c.name.clone(), c.connect_timeout.map(|d| d.seconds)))
            .collect();
        tx.send(DiscoveryRequest {
            version_info: clusters.version_info.clone(),
            response_nonce: clusters.nonce.clone(),
            ..ask(CLUSTER_TYPE, vec![])
        })
        .await
        .unwrap();
        if names.contains(&db) && names.contains(&web) && names.contains(&v1) {
            break;
        }
    }
    assert!(
        names.contains(&db) && names.contains(&web) && names.contains(&v1),
        "{names:?}"
    );
    assert_eq!(
        (timeouts[&db], timeouts[&v1], timeouts[&web]),
        (Some(10), Some(10), Some(5))
    );
    tx.send(ask(ENDPOINT_TYPE, vec![db.clone()])).await.unwrap();
    let endpoints = loop {
        let response = next(&mut stream).await;
        if response.type_url == ENDPOINT_TYPE {
            break response;
        }
    };
    let cla = ClusterLoadAssignment::decode(endpoints.resources[0].value.as_slice()).unwrap();
    assert_eq!(cla.cluster_name, db);
    let sidecar = agent.get("/v1/agent/service/db-sidecar-proxy").unwrap();
    let port = sidecar["Port"].as_u64().unwrap() as u32;
    let ports: Vec<u32> = cla.endpoints[0]
        .lb_endpoints
        .iter()
        .filter_map(|e| match &e.host_identifier {
            Some(envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier::Endpoint(ep)) => {
                match ep.address.as_ref()?.address.as_ref()? {
                    envoy_types::pb::envoy::config::core::v3::address::Address::SocketAddress(sa) => match sa.port_specifier {
                        Some(envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier::PortValue(p)) => Some(p),
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    assert_eq!(ports, [port], "db's sidecar behind the gateway");
    tx.send(ask(LISTENER_TYPE, vec![])).await.unwrap();
    let listeners = loop {
        let response = next(&mut stream).await;
        if response.type_url == LISTENER_TYPE {
            break response;
        }
    };
    let mut listeners: Vec<Listener> = listeners
        .resources
        .iter()
        .map(|any| Listener::decode(any.value.as_slice()).unwrap())
        .collect();
    listeners.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            format!("lan:127.0.0.15:{lan}"),
            format!("wan:127.0.0.16:{wan}")
        ],
        "both tagged addresses are local: bound by tag"
    );
    for l in &listeners {
        assert_eq!(
            l.listener_filters[0].name,
            "envoy.filters.listener.tls_inspector"
        );
        let last = l.filter_chains.last().unwrap();
        assert_eq!(last.filters[0].name, "envoy.filters.network.sni_cluster");
    }
}

/// `openssl s_client` through the gateway at `port` presenting `sni`
/// and web's leaf; what came back for `line` (empty when the connection
/// was closed).
fn through_gateway(port: u16, sni: &str, files: &std::path::Path, line: &str) -> String {
    use std::io::{Read, Write};
    let mut child = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-connect",
            &format!("127.0.0.15:{port}"),
        ])
        .args(["-servername", sni])
        .arg("-cert")
        .arg(files.join("web.pem"))
        .arg("-key")
        .arg(files.join("web.key"))
        .arg("-CAfile")
        .arg(files.join("roots.pem"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl");
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(format!("{line}\n").as_bytes())
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if got.ends_with(b"\n") {
                break;
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&got).to_string());
    });
    let answer = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    answer.trim().to_string()
}

/// web's leaf and key (`web.pem`, `web.key`) and the roots (`roots.pem`)
/// in `dir`, as a sidecar of web would hold them; the trust domain.
fn write_web_identity(agent: &TestAgent, dir: &std::path::Path) -> String {
    let leaf = agent.get("/v1/agent/connect/ca/leaf/web").unwrap();
    std::fs::write(dir.join("web.pem"), leaf["CertPEM"].as_str().unwrap()).unwrap();
    std::fs::write(dir.join("web.key"), leaf["PrivateKeyPEM"].as_str().unwrap()).unwrap();
    let roots = agent.get("/v1/agent/connect/ca/roots").unwrap();
    let pem: String = roots["Roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["RootCert"].as_str().unwrap().to_string())
        .collect();
    std::fs::write(dir.join("roots.pem"), pem).unwrap();
    roots["TrustDomain"].as_str().unwrap().to_string()
}

/// `connect proxy -gateway=mesh -register` on 127.0.0.15:`lan` against
/// `agent`, logging into `dir`/`name`.log and .err.
fn built_in_gateway(
    agent: &TestAgent,
    lan: u16,
    dir: &std::path::Path,
    name: &str,
) -> common::mesh::Proxy {
    common::mesh::Proxy(
        std::process::Command::new(common::binary())
            .args(["connect", "proxy", "-gateway=mesh", "-register"])
            .args(["-address", &format!("127.0.0.15:{lan}")])
            .args(["-admin-bind", "127.0.0.1:0"])
            .env("CONSUL_HTTP_ADDR", agent.addr())
            .stdout(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
            .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn the_built_in_proxy_as_a_gateway_passes_mtls_through_by_sni() {
    use common::mesh::{echo_server, proxy_stat, seed_demo_on, start_proxy};
    let (echo, web_sidecar, db_sidecar, upstream) =
        (free_port(), free_port(), free_port(), free_port());
    let _received = echo_server(echo);
    let mesh = start_with(&seed_demo_on(echo, web_sidecar, db_sidecar, upstream));
    let (agent, dir) = (&mesh.agent, &mesh.dir);
    let _db = start_proxy(agent, "db", &dir.path().join("db.log"));
    let lan = free_port();
    let gateway_log = dir.path().join("gateway.log");
    let _gateway = built_in_gateway(agent, lan, dir.path(), "gateway");
    let td = write_web_identity(agent, dir.path());
    let db_sni = format!("db.default.dc1.internal.{td}");
    // Through the gateway (untouched mTLS) to db's sidecar, then db.
    let answer = eventually(Duration::from_secs(90), || {
        let got = through_gateway(lan, &db_sni, dir.path(), "hello through the gateway");
        (!got.is_empty()).then_some(got)
    });
    assert_eq!(answer, "hello through the gateway");
    let counted = proxy_stat(
        &gateway_log,
        &format!("legate_proxy_cluster_connections_total{{cluster=\"{db_sni}\"}}"),
    );
    assert!(counted >= 1, "the gateway counted the connection to db");
    // A name no chain or cluster has, and no TLS at all: closed, counted.
    let before = proxy_stat(&gateway_log, "legate_proxy_sni_refusals_total");
    let nothing = through_gateway(lan, "nosuch.default.dc1.internal.example", dir.path(), "x");
    assert_eq!(nothing, "");
    let mut plain = std::net::TcpStream::connect(("127.0.0.15", lan)).unwrap();
    use std::io::{Read, Write};
    plain.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        plain.read(&mut buf).unwrap_or(0),
        0,
        "closed, nothing forwarded"
    );
    let after = proxy_stat(&gateway_log, "legate_proxy_sni_refusals_total");
    assert_eq!(after, before + 2);
}

#[test]
fn a_gateway_whose_port_is_taken_says_so_and_takes_it_once_free() {
    let mesh = start();
    let taken = std::net::TcpListener::bind("127.0.0.15:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let log = mesh.dir.path().join("busy.log");
    let _gateway = built_in_gateway(&mesh.agent, port, mesh.dir.path(), "busy");
    eventually(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&log).ok()?;
        (text.contains("cannot bind listener") && text.contains("Address already in use"))
            .then_some(())
    });
    // Once the port is free the gateway takes it (retried every second).
    drop(taken);
    eventually(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.15", port)).ok()
    });
}

#[test]
fn a_built_in_gateway_holds_its_config_while_its_agent_restarts() {
    use common::mesh::{start_proxy, SeedDemo};
    let demo = SeedDemo::new();
    let (dir, lan) = (&demo.dir, free_port());
    let mut flags = vec![
        "-server".to_string(),
        "-bootstrap".to_string(),
        "-bind=127.0.0.1".to_string(),
        format!("-data-dir={}", dir.path().join("data").display()),
        "-dns-port=-1".to_string(),
        "-grpc-tls-port=-1".to_string(),
        format!("-grpc-port={}", demo.grpc),
        format!("-config-file={}", demo.config.display()),
    ];
    flags.extend(common::own_server_ports());
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut agent = TestAgent::start_with(&args, false);
    let _db = start_proxy(&agent, "db", &dir.path().join("db.log"));
    let _gateway = built_in_gateway(&agent, lan, dir.path(), "gateway");
    let td = write_web_identity(&agent, dir.path());
    let db_sni = format!("db.default.dc1.internal.{td}");
    let answer = eventually(Duration::from_secs(90), || {
        let got = through_gateway(lan, &db_sni, dir.path(), "before");
        (!got.is_empty()).then_some(got)
    });
    assert_eq!(answer, "before");
    // The agent goes: the gateway (and db's sidecar) keep what they had.
    agent.kill9();
    assert_eq!(
        through_gateway(lan, &db_sni, dir.path(), "agent down"),
        "agent down"
    );
    // It comes back from its data directory: the gateway's registration
    // is still there, and the gateway resumes its stream.
    let agent = TestAgent::start_with(&args, false);
    let services = agent.get("/v1/agent/services").unwrap();
    assert_eq!(
        services["mesh-gateway"]["Kind"], "mesh-gateway",
        "{services}"
    );
    eventually(Duration::from_secs(30), || {
        let m = agent.get("/v1/agent/metrics").ok()?;
        let streams = m["Gauges"].as_array()?.iter().find(|x| {
            // Gauges carry the host name: consul.<host>.xds.server.streams.
            x["Name"]
                .as_str()
                .is_some_and(|n| n.ends_with(".xds.server.streams"))
        })?["Value"]
            .as_f64()?;
        (streams >= 2.0).then_some(())
    });
    // db's sidecar check starts over with the agent (critical until its
    // first probe, as Consul's): the gateway follows within an interval.
    let answer = eventually(Duration::from_secs(30), || {
        let got = through_gateway(lan, &db_sni, dir.path(), "agent back");
        (!got.is_empty()).then_some(got)
    });
    assert_eq!(answer, "agent back");
}

/// `openssl s_client` through a gateway at 127.0.0.15:`port` asking for
/// `sni` and `alpn`, checking the far end's certificate against `ca` for
/// `server.dc1.consul`: what it printed.
fn server_through_gateway(port: u16, sni: &str, alpn: &str, ca: &std::path::Path) -> String {
    let out = std::process::Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.15:{port}"))
        .args(["-servername", sni, "-alpn", alpn])
        .args([
            "-verify_hostname",
            "server.dc1.consul",
            "-verify_return_error",
        ])
        .arg("-CAfile")
        .arg(ca)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn a_gateway_exposing_servers_passes_their_tls_through_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let tls = common::server_tls_config(dir.path(), "g1", "");
    let config = common::write(dir.path(), "tls.hcl", &tls);
    let grpc = free_port();
    let mut flags = vec![
        "-server".to_string(),
        "-bootstrap".to_string(),
        "-node=g1".to_string(),
        "-bind=127.0.0.1".to_string(),
        format!("-data-dir={}", dir.path().join("data").display()),
        "-dns-port=-1".to_string(),
        "-grpc-tls-port=-1".to_string(),
        format!("-grpc-port={grpc}"),
        format!("-config-file={}", config.display()),
    ];
    flags.extend(common::own_server_ports());
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let agent = TestAgent::start_with(&args, false);
    let lan = free_port();
    let _gateway = common::mesh::Proxy(
        std::process::Command::new(common::binary())
            .args([
                "connect",
                "proxy",
                "-gateway=mesh",
                "-register",
                "-expose-servers",
            ])
            .args(["-address", &format!("127.0.0.15:{lan}")])
            .args(["-admin-bind", "127.0.0.1:0"])
            .env("CONSUL_HTTP_ADDR", agent.addr())
            .stdout(std::fs::File::create(dir.path().join("gateway.log")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("gateway.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let ca = dir.path().join("consul-agent-ca.pem");
    // Any server of dc1, and g1 by its name: the server port's own TLS,
    // untouched by the gateway, its certificate valid for
    // server.dc1.consul and its ALPN answered.
    for sni in ["server.dc1.consul", "g1.server.dc1.consul"] {
        let printed = eventually(Duration::from_secs(60), || {
            let out = server_through_gateway(lan, sni, "legate/rpc", &ca);
            out.contains("ALPN protocol: legate/rpc").then_some(out)
        });
        assert!(
            printed.contains("Verify return code: 0 (ok)"),
            "{sni}: {printed}"
        );
    }
    // A server name no local server has goes nowhere.
    let out = server_through_gateway(lan, "g9.server.dc1.consul", "legate/rpc", &ca);
    assert!(!out.contains("ALPN protocol"), "{out}");
}
