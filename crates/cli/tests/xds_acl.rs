//! ACLs at the xDS door, through the binary with `default_policy = "deny"`:
//! an ADS stream is admitted only with `service:write` on its proxy's
//! destination (`PermissionDenied` without, `Unauthenticated` for an
//! unknown token, and the agent logs why); what a stream sees of the shared
//! caches is filtered by its own token (no `service:read` on db → no db
//! endpoints, although another stream's db endpoints are in the cache); a
//! policy change widens an open stream at once, and a deleted token ends it.

mod common;

use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::mesh::{CLUSTER_TYPE, ENDPOINT_TYPE, SEED_DEMO};
use common::{eventually, free_port};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const PROXY: &str = "web-sidecar-proxy";

struct Demo {
    acl: Acl,
    grpc: u16,
    _dir: tempfile::TempDir,
}

impl Demo {
    /// A dev agent denying by default, whose own reads (and the config
    /// file's registrations) use the management token.
    fn start() -> Demo {
        let dir = tempfile::tempdir().unwrap();
        let file = common::write(dir.path(), "demo.hcl", SEED_DEMO);
        let grpc = free_port();
        let acl = Acl::start_full(
            "",
            &format!("agent = \"{ROOT}\" config_file_service_registration = \"{ROOT}\""),
            &[
                "-dns-port=-1",
                &format!("-grpc-port={grpc}"),
                "-config-file",
                file.to_str().unwrap(),
            ],
        );
        // db's sidecar in the catalog, as the management token sees it.
        eventually(Duration::from_secs(30), || {
            let (status, _, body) = acl.call("GET", "/v1/health/connect/db", Some(ROOT), None);
            let rows: Value = serde_json::from_str(&body).ok()?;
            (status == 200 && rows.as_array()?.len() == 1).then_some(())
        });
        Demo {
            acl,
            grpc,
            _dir: dir,
        }
    }

    fn acl(&self, method: &str, path: &str, body: &str) -> Value {
        self.acl.json(method, path, ROOT, Some(body))
    }

    /// A SotW stream for web's sidecar sending `token` (none when empty).
    async fn stream(
        &self,
        token: &str,
    ) -> (
        mpsc::Sender<DiscoveryRequest>,
        tonic::Streaming<DiscoveryResponse>,
    ) {
        self.stream_for(PROXY, token).await
    }

    /// A SotW stream as proxy `node` sending `token`, asking for clusters.
    async fn stream_for(
        &self,
        node: &str,
        token: &str,
    ) -> (
        mpsc::Sender<DiscoveryRequest>,
        tonic::Streaming<DiscoveryResponse>,
    ) {
        let mut client =
            AggregatedDiscoveryServiceClient::connect(format!("http://127.0.0.1:{}", self.grpc))
                .await
                .unwrap();
        let (tx, rx) = mpsc::channel(16);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if !token.is_empty() {
            request
                .metadata_mut()
                .insert("x-consul-token", token.parse().unwrap());
        }
        let stream = client
            .stream_aggregated_resources(request)
            .await
            .unwrap()
            .into_inner();
        tx.send(ask_for(node, CLUSTER_TYPE, vec![])).await.unwrap();
        (tx, stream)
    }
}

fn ask(type_url: &str, names: Vec<String>) -> DiscoveryRequest {
    ask_for(PROXY, type_url, names)
}

fn ask_for(node: &str, type_url: &str, names: Vec<String>) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node {
            id: node.into(),
            cluster: node.into(),
            ..Default::default()
        }),
        type_url: type_url.into(),
        resource_names: names,
        ..Default::default()
    }
}

async fn next(
    stream: &mut tonic::Streaming<DiscoveryResponse>,
) -> Result<DiscoveryResponse, tonic::Status> {
    let message = tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("an answer in time")?;
    Ok(message.expect("the stream stays open"))
}

/// The db cluster's name from the first (clusters) response, after
/// asking for its endpoints.
async fn ask_db_endpoints(
    tx: &mpsc::Sender<DiscoveryRequest>,
    stream: &mut tonic::Streaming<DiscoveryResponse>,
) -> String {
    let clusters = next(stream).await.expect("clusters");
    assert_eq!(clusters.type_url, CLUSTER_TYPE);
    let db = clusters
        .resources
        .iter()
        .map(|any| Cluster::decode(any.value.as_slice()).unwrap().name)
        .find(|name| name.starts_with("db."))
        .expect("a db cluster");
    tx.send(ask(ENDPOINT_TYPE, vec![db.clone()])).await.unwrap();
    db
}

fn endpoint_count(response: &DiscoveryResponse) -> usize {
    assert_eq!(response.type_url, ENDPOINT_TYPE);
    let cla = ClusterLoadAssignment::decode(response.resources[0].value.as_slice()).unwrap();
    cla.endpoints.iter().map(|l| l.lb_endpoints.len()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ads_streams_are_admitted_and_filtered_by_their_own_token() {
    let demo = Demo::start();
    let writer = demo.acl(
        "PUT",
        "/v1/acl/policy",
        r#"{"Name":"web-writer","Rules":"service \"web\" { policy = \"write\" }"}"#,
    );
    let narrow = demo.acl(
        "PUT",
        "/v1/acl/token",
        r#"{"Description":"web without db","Policies":[{"Name":"web-writer"}]}"#,
    );
    let wide = demo.acl(
        "PUT",
        "/v1/acl/token",
        r#"{"Description":"web","ServiceIdentities":[{"ServiceName":"web"}]}"#,
    );
    let secret = |t: &Value| t["SecretID"].as_str().unwrap().to_string();

    // No token: the anonymous token may not write web.
    let (_tx, mut stream) = demo.stream("").await;
    let status = next(&mut stream).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(
        status
            .message()
            .contains("lacks permission 'service:write' on \"web\""),
        "{status:?}"
    );
    // An unknown token.
    let (_tx, mut stream) = demo.stream("0b7e2a4c-1111-4222-8333-944455556666").await;
    let status = next(&mut stream).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let log = demo.acl.agent.log_text();
    assert!(log.contains("xDS stream refused by ACLs"), "{log}");

    // The service identity reads every service: db's endpoint.
    let (wide_tx, mut wide_stream) = demo.stream(&secret(&wide)).await;
    ask_db_endpoints(&wide_tx, &mut wide_stream).await;
    assert_eq!(endpoint_count(&next(&mut wide_stream).await.unwrap()), 1);

    // A token that may write web but not read db: the cluster, no endpoint.
    let (narrow_tx, mut narrow_stream) = demo.stream(&secret(&narrow)).await;
    ask_db_endpoints(&narrow_tx, &mut narrow_stream).await;
    assert_eq!(endpoint_count(&next(&mut narrow_stream).await.unwrap()), 0);

    // Its policy now reads db and the nodes: the open stream gets the endpoint.
    demo.acl(
        "PUT",
        &format!("/v1/acl/policy/{}", writer["ID"].as_str().unwrap()),
        r#"{"Name":"web-writer","Rules":"service \"web\" { policy = \"write\" }\nservice \"db\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }"}"#,
    );
    let update = next(&mut narrow_stream).await.unwrap();
    assert_eq!(endpoint_count(&update), 1);

    // The wide token is deleted: its stream ends, unauthenticated.
    demo.acl.json(
        "DELETE",
        &format!("/v1/acl/token/{}", wide["AccessorID"].as_str().unwrap()),
        ROOT,
        None,
    );
    let ended = loop {
        match next(&mut wide_stream).await {
            Ok(_) => continue,
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), tonic::Code::Unauthenticated, "{ended:?}");
}

/// Cluster names of the gateway's responses until one starting with each
/// of `present` shows up (acknowledging each).
async fn gateway_clusters(
    tx: &mpsc::Sender<DiscoveryRequest>,
    stream: &mut tonic::Streaming<DiscoveryResponse>,
    present: &[&str],
) -> Vec<String> {
    for _ in 0..20 {
        let response = next(stream).await.expect("clusters");
        let names: Vec<String> = response
            .resources
            .iter()
            .map(|any| Cluster::decode(any.value.as_slice()).unwrap().name)
            .collect();
        tx.send(DiscoveryRequest {
            version_info: response.version_info.clone(),
            response_nonce: response.nonce.clone(),
            ..ask_for("mesh-gateway", CLUSTER_TYPE, vec![])
        })
        .await
        .unwrap();
        let all = present
            .iter()
            .all(|p| names.iter().any(|n| n.starts_with(p)));
        if all {
            return names;
        }
    }
    panic!("no {present:?} clusters came");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateways_stream_needs_write_on_its_own_name_and_sees_what_it_may_read() {
    let demo = Demo::start();
    let (status, _, body) = demo.acl.call(
        "PUT",
        "/v1/agent/service/register",
        Some(ROOT),
        Some(r#"{"Kind":"mesh-gateway","Name":"mesh-gateway","Address":"127.0.0.1","Port":8443}"#),
    );
    assert_eq!(status, 200, "{body}");
    let secret = |t: &Value| t["SecretID"].as_str().unwrap().to_string();
    // A sidecar's identity may not configure the gateway.
    let web = demo.acl(
        "PUT",
        "/v1/acl/token",
        r#"{"ServiceIdentities":[{"ServiceName":"web"}]}"#,
    );
    let (_tx, mut stream) = demo.stream_for("mesh-gateway", &secret(&web)).await;
    let refused = next(&mut stream).await.expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("lacks permission 'service:write' on \"mesh-gateway\""),
        "{refused:?}"
    );
    // Write on its name and read on every service and node (Consul's
    // advice for gateway tokens): both local services behind it.
    let token = |name: &str, rules: &str| {
        let policy = json!({"Name": name, "Rules": rules}).to_string();
        demo.acl("PUT", "/v1/acl/policy", &policy);
        let body = json!({"Policies": [{"Name": name}]}).to_string();
        secret(&demo.acl("PUT", "/v1/acl/token", &body))
    };
    let full = token(
        "gateway",
        "service \"mesh-gateway\" { policy = \"write\" }\nservice_prefix \"\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }",
    );
    let (tx, mut stream) = demo.stream_for("mesh-gateway", &full).await;
    gateway_clusters(&tx, &mut stream, &["db.default.dc1.", "web.default.dc1."]).await;
    // One that may not read db: no db behind it.
    let narrow = token(
        "gateway-narrow",
        "service \"mesh-gateway\" { policy = \"write\" }\nservice \"web\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }",
    );
    let (tx, mut stream) = demo.stream_for("mesh-gateway", &narrow).await;
    let names = gateway_clusters(&tx, &mut stream, &["web.default.dc1."]).await;
    assert!(!names.iter().any(|n| n.starts_with("db.")), "{names:?}");
}
