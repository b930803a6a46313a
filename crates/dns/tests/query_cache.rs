//! `.query` lookups with `use_cache`: the first lookup runs the query,
//! later ones are answered from the agent's cache, which runs the query
//! again every `cache_max_age` (here 1 s) for as long as it is asked for.

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Name, RecordType};
use legate_agent::dns_config::DnsConfig;
use legate_dns::{Resolver, Transport};
use legate_server::{Server, ServerConfig};
use legate_types::prepared_query::{PreparedQuery, PreparedQueryOp};
use legate_types::rpc::ServerRpc;
use legate_types::{DeregisterRequest, RegisterRequest, WriteOptions};

async fn addresses(resolver: &Resolver, name: &str) -> (ResponseCode, usize) {
    let name = Name::from_ascii(name).unwrap();
    let answer = resolver
        .resolve(&name, RecordType::A, Transport::Tcp)
        .await
        .unwrap();
    (answer.code, answer.answers.len())
}

#[tokio::test]
async fn query_answers_come_from_the_cache_and_follow_the_catalog_within_its_max_age() {
    let server = Server::start(ServerConfig::in_memory("dc1", "dns-cache"))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    for i in 1..=2 {
        let request: RegisterRequest = serde_json::from_value(serde_json::json!({
            "Node": format!("n{i}"), "Address": format!("10.0.0.{i}"),
            "Service": {"ID": format!("api{i}"), "Service": "api", "Port": 80}
        }))
        .unwrap();
        server
            .catalog_register(&WriteOptions::default(), request)
            .await
            .unwrap();
    }
    let query: PreparedQuery = serde_json::from_value(serde_json::json!({
        "Name": "api-q", "Service": {"Service": "api"}
    }))
    .unwrap();
    server
        .prepared_query_apply(&WriteOptions::default(), PreparedQueryOp::Create, query)
        .await
        .unwrap();
    let rpc: Arc<dyn ServerRpc> = server.clone();
    let config = DnsConfig {
        cache_max_age: Duration::from_secs(1),
        ..Default::default()
    };
    let resolver = Resolver::new(rpc, config, "dc1".into());

    // An unknown query is NXDOMAIN, asked every time (nothing to cache).
    assert_eq!(
        addresses(&resolver, "nope.query.consul.").await.0,
        ResponseCode::NXDomain
    );
    assert_eq!(
        addresses(&resolver, "api-q.query.consul.").await,
        (ResponseCode::NoError, 2)
    );
    // Let the cache's own first run finish, then change the catalog: the
    // next lookup is still the cached answer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    server
        .catalog_deregister(
            &WriteOptions::default(),
            DeregisterRequest {
                node: "n2".into(),
                service_id: "api2".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        addresses(&resolver, "api-q.query.consul.").await,
        (ResponseCode::NoError, 2),
        "answered from the cache"
    );
    // Within the max age and a little, the cache has run it again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        addresses(&resolver, "api-q.query.consul.").await,
        (ResponseCode::NoError, 1)
    );
}
