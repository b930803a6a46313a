//! Real ADS streams (state-of-the-world and delta) against the agent's gRPC
//! port, for the seed demo's services: initial config, an endpoint
//! appearing, an intention flipped to deny, a NACK, and a delta reconnect
//! with the versions already held.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::mesh::{CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, SEED_DEMO};
use common::{free_port, TestAgent};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

fn start_demo(grpc: u16) -> (TestAgent, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("demo.hcl");
    std::fs::write(&file, SEED_DEMO).unwrap();
    let agent = TestAgent::start_with(
        &[
            "-dev",
            "-dns-port=-1",
            &format!("-grpc-port={grpc}"),
            "-config-file",
            file.to_str().unwrap(),
        ],
        false,
    );
    (agent, dir)
}

fn node(id: &str) -> Option<Node> {
    Some(Node {
        id: id.into(),
        cluster: "web".into(),
        ..Default::default()
    })
}

async fn recv<T>(stream: &mut tonic::Streaming<T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("an xDS response in time")
        .expect("a healthy stream")
        .expect("the stream stays open")
}

/// Names of the resources in a SotW response.
fn names(response: &DiscoveryResponse) -> Vec<String> {
    response
        .resources
        .iter()
        .map(|any| match any.type_url.as_str() {
            LISTENER_TYPE => Listener::decode(any.value.as_slice()).unwrap().name,
            CLUSTER_TYPE => {
                envoy_types::pb::envoy::config::cluster::v3::Cluster::decode(any.value.as_slice())
                    .unwrap()
                    .name
            }
            ENDPOINT_TYPE => {
                envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment::decode(
                    any.value.as_slice(),
                )
                .unwrap()
                .cluster_name
            }
            other => panic!("unexpected type {other}"),
        })
        .collect()
}

fn endpoint_count(any_bytes: &[u8]) -> usize {
    let cla =
        envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment::decode(any_bytes)
            .unwrap();
    cla.endpoints.iter().map(|l| l.lb_endpoints.len()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_stream_serves_the_demo_and_follows_changes() {
    let grpc = free_port();
    let (agent, _dir) = start_demo(grpc);
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(16);
    let mut stream = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DiscoveryRequest {
        node: node("web-sidecar-proxy"),
        type_url: CLUSTER_TYPE.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let clusters = recv(&mut stream).await;
    assert_eq!(clusters.type_url, CLUSTER_TYPE);
    let cluster_names = names(&clusters);
    assert!(
        cluster_names.contains(&"local_app".to_string()),
        "{cluster_names:?}"
    );
    let db_cluster = cluster_names
        .iter()
        .find(|n| n.starts_with("db.default.dc1.internal."))
        .unwrap()
        .clone();
    // ACK, then ask for the db cluster's endpoints and the listeners.
    tx.send(DiscoveryRequest {
        node: node("web-sidecar-proxy"),
        type_url: CLUSTER_TYPE.into(),
        version_info: clusters.version_info.clone(),
        response_nonce: clusters.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    tx.send(DiscoveryRequest {
        node: node("web-sidecar-proxy"),
        type_url: ENDPOINT_TYPE.into(),
        resource_names: vec![db_cluster.clone()],
        ..Default::default()
    })
    .await
    .unwrap();
    let endpoints = recv(&mut stream).await;
    assert_eq!(endpoints.type_url, ENDPOINT_TYPE);
    assert_eq!(names(&endpoints), vec![db_cluster.clone()]);
    assert_eq!(
        endpoint_count(&endpoints.resources[0].value),
        1,
        "db's sidecar"
    );
    tx.send(DiscoveryRequest {
        node: node("web-sidecar-proxy"),
        type_url: LISTENER_TYPE.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let listeners = recv(&mut stream).await;
    let mut listener_names = names(&listeners);
    listener_names.sort();
    assert_eq!(
        listener_names,
        vec![
            "db:127.0.0.1:9191".to_string(),
            "public_listener:0.0.0.0:21000".to_string()
        ]
    );
    // NACK the listeners: logged, nothing resent.
    tx.send(DiscoveryRequest {
        node: node("web-sidecar-proxy"),
        type_url: LISTENER_TYPE.into(),
        version_info: String::new(),
        response_nonce: listeners.nonce.clone(),
        error_detail: Some(RpcStatus {
            code: 3,
            message: "rejected for the test".into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    // A stale nonce is ignored too.
    tx.send(DiscoveryRequest {
        node: node("web-sidecar-proxy"),
        type_url: ENDPOINT_TYPE.into(),
        resource_names: vec![db_cluster.clone()],
        response_nonce: "stale".into(),
        ..Default::default()
    })
    .await
    .unwrap();

    // A second db instance appears: only the endpoints change.
    let (status, body) = agent.put(
        "/v1/agent/service/register",
        r#"{"Name":"db","ID":"db2","Port":9092,"Connect":{"SidecarService":{}}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let update = recv(&mut stream).await;
    assert_eq!(update.type_url, ENDPOINT_TYPE, "only endpoints changed");
    assert_eq!(endpoint_count(&update.resources[0].value), 2);
    // ...and goes away again.
    let (status, _) = agent.put("/v1/agent/service/deregister/db2", "");
    assert_eq!(status, 200);
    let update = recv(&mut stream).await;
    assert_eq!(update.type_url, ENDPOINT_TYPE);
    assert_eq!(endpoint_count(&update.resources[0].value), 1);

    // An intention flips web -> db... which changes db's proxy, not web's:
    // web's stream sees nothing. The NACK log line is in the agent's log.
    let log = agent.log_text();
    assert!(
        log.contains("xDS NACK") && log.contains("rejected for the test"),
        "{log}"
    );
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_stream_sends_changes_removals_and_resumes_from_held_versions() {
    let grpc = free_port();
    let (agent, _dir) = start_demo(grpc);
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(16);
    let mut stream = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DeltaDiscoveryRequest {
        node: node("db-sidecar-proxy"),
        type_url: LISTENER_TYPE.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let first: DeltaDiscoveryResponse = recv(&mut stream).await;
    assert_eq!(first.type_url, LISTENER_TYPE);
    assert_eq!(first.resources.len(), 1);
    let public = Listener::decode(
        first.resources[0]
            .resource
            .as_ref()
            .unwrap()
            .value
            .as_slice(),
    )
    .unwrap();
    assert_eq!(public.name, "public_listener:0.0.0.0:21001");
    let held: BTreeMap<String, String> = first
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.version.clone()))
        .collect();
    tx.send(DeltaDiscoveryRequest {
        node: node("db-sidecar-proxy"),
        type_url: LISTENER_TYPE.into(),
        response_nonce: first.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();

    // An intention web -> db deny changes db's public listener (RBAC).
    let out = agent.cli(&["intention", "create", "-deny", "web", "db"]);
    assert!(out.status.success(), "{out:?}");
    let changed = recv(&mut stream).await;
    assert_eq!(changed.resources.len(), 1);
    assert_eq!(changed.resources[0].name, public.name);
    assert_ne!(held[&public.name], changed.resources[0].version);
    let rbac_bytes = changed.resources[0]
        .resource
        .as_ref()
        .unwrap()
        .value
        .clone();
    let listener = Listener::decode(rbac_bytes.as_slice()).unwrap();
    let rbac_any = listener.filter_chains[0].filters[0]
        .config_type
        .clone()
        .unwrap();
    let envoy_types::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(rbac_any) =
        rbac_any
    else {
        panic!("typed config expected")
    };
    let rbac = envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac::decode(
        rbac_any.value.as_slice(),
    )
    .unwrap();
    let rules = rbac.rules.unwrap();
    assert_eq!(rules.action, 1, "DENY policies under a default of allow");
    assert_eq!(rules.policies.len(), 1);
    let new_version = changed.resources[0].version.clone();
    drop(tx);
    drop(stream);

    // Reconnect holding the current version: nothing to send (an empty
    // answer), then the next change arrives as usual.
    let (tx, rx) = mpsc::channel(16);
    let mut stream = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(DeltaDiscoveryRequest {
        node: node("db-sidecar-proxy"),
        type_url: LISTENER_TYPE.into(),
        initial_resource_versions: [(public.name.clone(), new_version.clone())].into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let resumed = recv(&mut stream).await;
    assert!(
        resumed.resources.is_empty(),
        "nothing new since the held version"
    );
    assert!(resumed.removed_resources.is_empty());
    tx.send(DeltaDiscoveryRequest {
        node: node("db-sidecar-proxy"),
        type_url: LISTENER_TYPE.into(),
        response_nonce: resumed.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let out = agent.cli(&["intention", "delete", "web", "db"]);
    assert!(out.status.success());
    let back = recv(&mut stream).await;
    assert_eq!(back.resources.len(), 1);
    assert_eq!(
        back.resources[0].version, held[&public.name],
        "same config, same version"
    );

    // Deregistering the proxy ends the stream.
    let (status, _) = agent.put("/v1/agent/service/deregister/db", "");
    assert_eq!(status, 200);
    let end = tokio::time::timeout(Duration::from_secs(10), stream.message()).await;
    assert!(matches!(end, Ok(Err(_)) | Ok(Ok(None))), "{end:?}");

    // An unknown node id is refused.
    let (tx2, rx2) = mpsc::channel(4);
    let mut other = client
        .delta_aggregated_resources(ReceiverStream::new(rx2))
        .await
        .unwrap()
        .into_inner();
    tx2.send(DeltaDiscoveryRequest {
        node: node("nobody"),
        type_url: LISTENER_TYPE.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(10), other.message())
        .await
        .unwrap();
    let status = refused.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(status.message().contains("nobody"));
}

#[test]
fn connect_envoy_finds_the_sidecar_or_says_why_not() {
    let grpc = free_port();
    let (agent, dir) = start_demo(grpc);
    let run = |args: &[&str], path: &str| {
        let out = std::process::Command::new(common::binary())
            .args(args)
            .env("CONSUL_HTTP_ADDR", agent.addr())
            .env("PATH", path)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, _) = run(
        &["connect", "envoy", "-sidecar-for", "web", "-bootstrap"],
        "/usr/bin:/bin",
    );
    assert_eq!(code, Some(0));
    let bootstrap: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(bootstrap["node"]["id"], "web-sidecar-proxy");
    assert_eq!(
        bootstrap["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]
            ["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["port_value"],
        grpc
    );
    let (code, _, err) = run(
        &["connect", "envoy", "-sidecar-for", "nothing"],
        "/usr/bin:/bin",
    );
    assert_eq!(code, Some(1));
    assert_eq!(err.trim(), "No sidecar proxy registered for nothing");
    // A second sidecar for web: ambiguous.
    let (status, body) = agent.put(
        "/v1/agent/service/register",
        r#"{"Kind":"connect-proxy","Name":"web-proxy-2","ID":"web-proxy-2","Port":21555,"Proxy":{"DestinationServiceName":"web","DestinationServiceID":"web"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (code, _, err) = run(
        &["connect", "envoy", "-sidecar-for", "web"],
        "/usr/bin:/bin",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("More than one sidecar proxy registered for web"),
        "{err}"
    );
    assert!(
        err.contains("web-proxy-2") && err.contains("web-sidecar-proxy"),
        "{err}"
    );
    // No envoy on PATH: say so and point to the built-in proxy.
    let empty = dir.path().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, _, err) = run(
        &["connect", "envoy", "-proxy-id", "db-sidecar-proxy"],
        empty.to_str().unwrap(),
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("Envoy is not installed"), "{err}");
    assert!(
        err.contains("legate connect proxy -sidecar-for db"),
        "{err}"
    );
    let (code, _, err) = run(
        &[
            "connect",
            "envoy",
            "-proxy-id",
            "db-sidecar-proxy",
            "-admin-bind",
            "nowhere.invalid:1",
        ],
        "/usr/bin:/bin",
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("-admin-bind"), "{err}");
}

#[test]
fn upstreams_are_services_or_prepared_queries_and_nothing_else() {
    let agent = TestAgent::dev(&[]);
    let register = |kind: &str| {
        agent.put(
            "/v1/agent/service/register",
            &format!(
                r#"{{"Name":"web","Port":8080,"Connect":{{"SidecarService":{{"Proxy":{{"Upstreams":[
            {{"DestinationType":"{kind}","DestinationName":"nearest-db","LocalBindPort":9191}}]}}}}}}}}"#
            ),
        )
    };
    let (status, body) = register("prepared_query");
    assert_eq!(status, 200, "{body}");
    let proxy: serde_json::Value = agent.get("/v1/agent/service/web-sidecar-proxy").unwrap();
    assert_eq!(
        proxy["Proxy"]["Upstreams"][0]["DestinationType"],
        "prepared_query"
    );
    let (status, body) = register("queries");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown destination_type"), "{body}");
}

#[test]
fn connect_envoy_execs_envoy_with_the_bootstrap_and_passthrough_arguments() {
    let grpc = free_port();
    let (agent, dir) = start_demo(grpc);
    // A stand-in for Envoy (a process we do not own): records its arguments
    // and the bootstrap it was given.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let record = dir.path().join("envoy-args.txt");
    let script = format!(
        "#!/bin/sh\necho \"$@\" > {rec}\ncat \"$2\" > {rec}.json\n",
        rec = record.display()
    );
    let envoy = bin.join("envoy");
    std::fs::write(&envoy, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&envoy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(common::binary())
        .args([
            "connect",
            "envoy",
            "-sidecar-for",
            "db",
            "-admin-bind",
            "localhost:19001",
            "--",
            "-l",
            "debug",
        ])
        .env("CONSUL_HTTP_ADDR", agent.addr())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let args = std::fs::read_to_string(&record).unwrap();
    assert!(args.starts_with("--config-path "), "{args}");
    assert!(args.contains("--disable-hot-restart -l debug"), "{args}");
    let bootstrap: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.json", record.display())).unwrap(),
    )
    .unwrap();
    assert_eq!(bootstrap["node"]["id"], "db-sidecar-proxy");
    assert_eq!(
        bootstrap["admin"]["address"]["socket_address"]["port_value"],
        19001
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_decode_ends_the_stream_with_internal() {
    use envoy_types::pb::google::protobuf::Duration as WrongMessage;
    let grpc = free_port();
    let (_agent, _dir) = start_demo(grpc);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.unwrap();
    // A Duration's field 1 is a varint, where a DeltaDiscoveryRequest's is
    // the node message: the server cannot decode it.
    let wrong = WrongMessage {
        seconds: 5,
        nanos: 0,
    };
    let codec = tonic_prost::ProstCodec::<WrongMessage, DeltaDiscoveryResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
    );
    let (tx, rx) = mpsc::channel(1);
    tx.send(wrong).await.unwrap();
    let mut stream = client
        .streaming(tonic::Request::new(ReceiverStream::new(rx)), path, codec)
        .await
        .unwrap()
        .into_inner();
    let end = tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("the stream ends in time");
    let status = end.expect_err("the stream ends with an error, not OK");
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    drop(tx);
}
