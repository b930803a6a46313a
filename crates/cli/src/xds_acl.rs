//! The agent's ACLs at the xDS door: [`legate_xds::StreamAcl`] over the
//! agent's token resolver and local registrations (the xds and agent
//! crates meet only here, in the binary).

use std::sync::Arc;

use legate_agent::proxy_acl::{visible_snapshot, ProxyRefusal};
use legate_agent::Agent;
use legate_proxycfg::ConnectProxySnapshot;
use legate_xds::{SeeAll, SnapshotView, StreamAcl};
use tokio::sync::watch;
use tonic::Status;

/// Admits ADS streams by the agent's ACLs.
pub struct AgentStreamAcl(pub Arc<Agent>);

/// What one resolved token may see.
struct TokenView(Arc<legate_agent::acl::ResolvedToken>);

impl SnapshotView for TokenView {
    fn visible(&self, snapshot: &Arc<ConnectProxySnapshot>) -> Arc<ConnectProxySnapshot> {
        visible_snapshot(snapshot, &self.0.authorizer)
    }
}

#[tonic::async_trait]
impl StreamAcl for AgentStreamAcl {
    async fn admit(&self, proxy_id: &str, token: &str) -> Result<Arc<dyn SnapshotView>, Status> {
        match self.0.admit_proxy(proxy_id, token).await {
            Ok(Some(resolved)) => Ok(Arc::new(TokenView(resolved))),
            Ok(None) => Ok(Arc::new(SeeAll)),
            Err(refusal @ ProxyRefusal::UnknownToken(_)) => {
                Err(Status::unauthenticated(refusal.to_string()))
            }
            Err(refusal @ ProxyRefusal::Denied(_)) => {
                Err(Status::permission_denied(refusal.to_string()))
            }
            Err(refusal @ ProxyRefusal::NoSuchProxy(_)) => {
                Err(Status::not_found(refusal.to_string()))
            }
            Err(refusal @ ProxyRefusal::Unavailable(_)) => {
                Err(Status::internal(refusal.to_string()))
            }
        }
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.0.acl().changes()
    }
}
