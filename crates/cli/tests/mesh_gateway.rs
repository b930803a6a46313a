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
    _dir: tempfile::TempDir,
}

fn start() -> Mesh {
    let dir = tempfile::tempdir().unwrap();
    let file = common::write(dir.path(), "demo.hcl", SEED_DEMO);
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
    Mesh {
        agent,
        grpc,
        _dir: dir,
    }
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
    // Clusters come as the local services' sidecars register.
    let mut names = Vec::new();
    for _ in 0..10 {
        let clusters = next(&mut stream).await;
        names = clusters
            .resources
            .iter()
            .map(|any| Cluster::decode(any.value.as_slice()).unwrap().name)
            .collect();
        tx.send(DiscoveryRequest {
            version_info: clusters.version_info.clone(),
            response_nonce: clusters.nonce.clone(),
            ..ask(CLUSTER_TYPE, vec![])
        })
        .await
        .unwrap();
        if names.contains(&db) && names.contains(&web) {
            break;
        }
    }
    assert!(names.contains(&db) && names.contains(&web), "{names:?}");
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
