//! The catalog the DNS fuzz tests query: an in-memory server with a few
//! nodes and `web` instances on an IPv4 address, an IPv6 address, a host
//! name and the node's address, and node metadata that needs escaping.
//! Shared by `tests/fuzz_queries.rs` and the cargo-fuzz target.

use std::sync::Arc;
use std::time::Duration;

use legate_agent::dns_config::DnsConfig;
use legate_dns::Resolver;
use legate_server::{Server, ServerConfig};
use legate_types::rpc::ServerRpc;
use legate_types::{RegisterRequest, WriteOptions};

/// Starts the server, registers the fixture and returns a resolver over it.
pub async fn resolver() -> Arc<Resolver> {
    let server = Server::start(ServerConfig::in_memory("dc1", "fuzz"))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    for (i, address) in ["10.0.0.1", "2001:db8::1", "db.example.com", ""]
        .iter()
        .enumerate()
    {
        let request: RegisterRequest = serde_json::from_value(serde_json::json!({
            "Node": format!("n{i}"), "Address": "127.0.0.1",
            "NodeMeta": {"rfc1035-x": "y", "k=`e y ": "v`"},
            "Service": {"ID": format!("web{i}"), "Service": "web", "Port": 80 + i,
                        "Address": address, "Tags": ["v1"]}
        }))
        .unwrap();
        server
            .catalog_register(&WriteOptions::default(), request)
            .await
            .unwrap();
    }
    let rpc: Arc<dyn ServerRpc> = server;
    let config = DnsConfig {
        alt_domain: Some("alt.example".into()),
        ..Default::default()
    };
    Arc::new(Resolver::new(rpc, config, "dc1".into()))
}
