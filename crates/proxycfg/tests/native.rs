//! A Connect-native service's upstreams follow what its xDS sessions ask
//! for: the union over sessions, released when a session goes away, and
//! ignored for sidecars (whose upstreams are registered).
//!
//! The data sources are an in-memory double of the agent's blocking reads
//! (the real ones are exercised end to end by tests/py/test_grpc_proxyless.py).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_chain::compile::Target;
use legate_chain::{compile, CompileRequest, CompiledChain};
use legate_proxycfg::{
    ConnectProxySnapshot, DataSources, Endpoint, EndpointHealth, Fetched, Manager,
    ProxyRegistration,
};
use legate_types::connect::{IndexedCaRoots, IssuedCert};
use legate_types::intention::Intention;
use legate_types::{ConnectProxyConfig, Upstream};
use tokio::sync::watch;

/// Answers every read at index 1 and then blocks, as a quiet cluster does.
struct Quiet;

async fn once<T>(min_index: u64, value: impl FnOnce() -> T) -> Result<Fetched<T>, String> {
    if min_index >= 1 {
        std::future::pending::<()>().await;
    }
    Ok(Fetched {
        index: 1,
        value: value(),
    })
}

#[async_trait]
impl DataSources for Quiet {
    async fn roots(&self, min_index: u64) -> Result<Fetched<IndexedCaRoots>, String> {
        once(min_index, || IndexedCaRoots {
            trust_domain: "td.consul".into(),
            ..Default::default()
        })
        .await
    }
    async fn leaf(&self, service: &str, min_index: u64) -> Result<Fetched<IssuedCert>, String> {
        once(min_index, || IssuedCert {
            service: service.into(),
            ..Default::default()
        })
        .await
    }
    async fn intentions(
        &self,
        _: &str,
        min_index: u64,
    ) -> Result<Fetched<Arc<Vec<Intention>>>, String> {
        once(min_index, Default::default).await
    }
    async fn chain(
        &self,
        service: &str,
        datacenter: &str,
        _mesh_gateway_mode: &str,
        min_index: u64,
    ) -> Result<Fetched<std::sync::Arc<CompiledChain>>, String> {
        let request = CompileRequest {
            service: service.into(),
            datacenter: datacenter.into(),
            trust_domain: "td.consul".into(),
            ..Default::default()
        };
        let chain = compile(&[], &request).map_err(|e| e.to_string())?;
        once(min_index, || std::sync::Arc::new(chain)).await
    }
    async fn endpoints(
        &self,
        target: &Target,
        min_index: u64,
    ) -> Result<Fetched<Vec<Endpoint>>, String> {
        let endpoint = Endpoint {
            node: "n1".into(),
            service_id: format!("{}-1", target.service),
            address: "127.0.0.1".into(),
            port: 7000,
            health: EndpointHealth::Passing,
            weight: 1,
        };
        once(min_index, || vec![endpoint]).await
    }
    fn default_allow(&self) -> bool {
        true
    }
}

fn registration(id: &str, native: bool, upstreams: &[&str]) -> ProxyRegistration {
    ProxyRegistration {
        proxy_id: id.into(),
        service: "web".into(),
        address: "127.0.0.1".into(),
        port: 0,
        proxy: ConnectProxyConfig {
            destination_service_name: "web".into(),
            upstreams: Arc::new(
                upstreams
                    .iter()
                    .map(|name| Upstream {
                        destination_name: name.to_string(),
                        local_bind_port: 9000,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        },
        datacenter: "dc1".into(),
        native,
        gateway: None,
    }
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Waits for a snapshot whose (complete) upstreams are exactly `want`.
async fn upstreams_become(
    rx: &mut watch::Receiver<Option<Arc<ConnectProxySnapshot>>>,
    want: &[&str],
) -> Arc<ConnectProxySnapshot> {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    let found = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(s) = rx.borrow_and_update().clone() {
                let have: Vec<String> = s.upstreams.iter().map(|u| u.id()).collect();
                if have == want && s.pending_upstreams.is_empty() {
                    return s;
                }
            }
            rx.changed().await.unwrap();
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("upstreams never became {want:?}: {:?}", rx.borrow()))
}

#[tokio::test]
async fn native_upstreams_are_the_union_of_what_sessions_ask_for() {
    let manager = Manager::new(Arc::new(Quiet));
    manager.sync(vec![registration("web-grpc", true, &[])]);
    let mut rx = manager.watch("web-grpc").unwrap();
    let first = upstreams_become(&mut rx, &[]).await;
    assert!(first.native && first.leaf_cert.is_empty());

    manager.want_upstreams("web-grpc", 1, names(&["db"]));
    let s = upstreams_become(&mut rx, &["db"]).await;
    let db = &s.upstreams[0];
    assert_eq!(db.endpoints.len(), db.chain.targets.len());
    assert!(db.endpoints.values().all(|e| e[0].service_id == "db-1"));

    manager.want_upstreams("web-grpc", 2, names(&["api", "db"]));
    upstreams_become(&mut rx, &["api", "db"]).await;
    // Session 1 leaves: session 2 still wants both.
    manager.want_upstreams("web-grpc", 1, BTreeSet::new());
    tokio::time::sleep(Duration::from_millis(100)).await;
    upstreams_become(&mut rx, &["api", "db"]).await;
    // Session 2 narrows, then leaves.
    manager.want_upstreams("web-grpc", 2, names(&["api"]));
    upstreams_become(&mut rx, &["api"]).await;
    manager.want_upstreams("web-grpc", 2, BTreeSet::new());
    upstreams_become(&mut rx, &[]).await;
}

#[tokio::test]
async fn sidecars_keep_their_registered_upstreams() {
    let manager = Manager::new(Arc::new(Quiet));
    manager.sync(vec![registration("web-sidecar-proxy", false, &["db"])]);
    let mut rx = manager.watch("web-sidecar-proxy").unwrap();
    upstreams_become(&mut rx, &["db"]).await;
    manager.want_upstreams("web-sidecar-proxy", 1, names(&["api"]));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = upstreams_become(&mut rx, &["db"]).await;
    assert!(!s.native);
}
