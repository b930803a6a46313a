//! ACLs for the proxies this agent configures: which token may configure a
//! proxy (Consul's `service:write` on its destination), what each proxy
//! may see of the shared, token-free data behind proxycfg (its own token's
//! `service:read` and `node:read`), and which token signs its leaf.

use std::sync::Arc;

use legate_acl::{Access, Authorizer, Resource};
use legate_proxycfg::gateway::MeshGatewayState;
use legate_proxycfg::{ConnectProxySnapshot, Endpoint, QueryEndpoint};
use legate_types::RpcError;

use crate::acl::ResolvedToken;
use crate::Agent;

/// Why a proxy's token may not configure it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRefusal {
    /// The token is unknown or expired (`ACL not found`).
    UnknownToken(String),
    /// The token lacks `service:write` on the proxy's destination; Consul's text.
    Denied(String),
    /// No proxy with that id is registered here.
    NoSuchProxy(String),
    /// The servers could not resolve the token.
    Unavailable(String),
}

impl std::fmt::Display for ProxyRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyRefusal::UnknownToken(m)
            | ProxyRefusal::Denied(m)
            | ProxyRefusal::NoSuchProxy(m)
            | ProxyRefusal::Unavailable(m) => f.write_str(m),
        }
    }
}

impl Agent {
    /// The service a local proxy (or Connect-native service) fronts: a
    /// sidecar's `Proxy.DestinationServiceName`, a native service or a
    /// mesh gateway itself.
    pub fn proxy_destination(&self, proxy_id: &str) -> Option<String> {
        let service = self.service(proxy_id)?;
        if service.kind == crate::proxy_sources::MESH_GATEWAY_KIND {
            return Some(service.service);
        }
        if service.kind == "connect-proxy" {
            return service
                .proxy
                .as_ref()
                .map(|p| p.destination_service_name.clone());
        }
        let native = service.connect.as_ref().is_some_and(|c| c.native);
        (service.kind.is_empty() && native).then_some(service.service)
    }

    /// Whether `secret` may configure proxy `proxy_id`: `service:write` on
    /// the service it fronts, as Consul's xDS server asks. The resolved
    /// token (`None` with ACLs off) filters what the proxy sees.
    pub async fn admit_proxy(
        &self,
        proxy_id: &str,
        secret: &str,
    ) -> Result<Option<Arc<ResolvedToken>>, ProxyRefusal> {
        let destination = self.proxy_destination(proxy_id).ok_or_else(|| {
            ProxyRefusal::NoSuchProxy(format!(
                "no proxy with id {proxy_id:?} is registered with this agent"
            ))
        })?;
        let token = match self.acl().resolve(secret).await {
            Ok(Some(token)) => token,
            Ok(None) => return Ok(None),
            Err(RpcError::AclNotFound) => {
                return Err(ProxyRefusal::UnknownToken(
                    "unauthenticated: ACL not found".into(),
                ))
            }
            Err(e) => {
                return Err(ProxyRefusal::Unavailable(format!(
                    "error resolving acl token: {e}"
                )))
            }
        };
        // Decided on the token just resolved: no second resolution.
        match token.check(Resource::Service, &destination, Access::Write) {
            Ok(()) => Ok(Some(token)),
            Err(RpcError::PermissionDenied(text)) => Err(ProxyRefusal::Denied(text)),
            Err(other) => Err(ProxyRefusal::Unavailable(format!(
                "error resolving acl token: {other}"
            ))),
        }
    }

    /// The token that signs the leaf certificate of `service` for its
    /// local proxies: the registration token of a local proxy fronting it
    /// (or of the service itself), in anti-entropy's order.
    pub(crate) fn leaf_token_for(&self, service: &str) -> String {
        let local = self.lock_local();
        let fronting = local.services.values().find(|s| {
            let proxy_of = s.service.kind == "connect-proxy"
                && s.service
                    .proxy
                    .as_ref()
                    .is_some_and(|p| p.destination_service_name == service);
            proxy_of && !s.token.is_empty()
        });
        let own = local
            .services
            .values()
            .find(|s| s.service.kind.is_empty() && s.service.service == service);
        match fronting.or(own) {
            Some(s) => self.tokens().registration_token(&s.token, s.from_config),
            None => self.tokens().registration_token("", false),
        }
    }
}

/// What a proxy whose token is `authorizer` may see of `snapshot`: the
/// endpoints of upstream targets whose service it may not read, or on
/// nodes it may not read, are left out (the caches behind proxycfg are
/// shared by every proxy, whatever its token). The same snapshot when
/// nothing is hidden.
pub fn visible_snapshot(
    snapshot: &Arc<ConnectProxySnapshot>,
    authorizer: &Authorizer,
) -> Arc<ConnectProxySnapshot> {
    let may_read =
        |resource: Resource, name: &str| authorizer.allowed(resource, name, Access::Read);
    if let Some(gateway) = &snapshot.mesh_gateway {
        return visible_gateway(snapshot, gateway, &may_read);
    }
    let hides = snapshot.upstreams.iter().any(|u| {
        u.endpoints.iter().any(|(target, endpoints)| {
            let service = u.chain.targets.get(target).map(|t| t.service.as_str());
            !service.is_some_and(|s| may_read(Resource::Service, s))
                || endpoints.iter().any(|e| !may_read(Resource::Node, &e.node))
        })
    });
    let query_visible = |e: &QueryEndpoint| {
        may_read(Resource::Service, &e.service) && may_read(Resource::Node, &e.endpoint.node)
    };
    let hides = hides
        || snapshot
            .query_upstreams
            .iter()
            .any(|u| !u.endpoints.iter().all(query_visible));
    if !hides {
        return snapshot.clone();
    }
    let mut visible = (**snapshot).clone();
    // A query runs with the agent's token for every proxy that uses it;
    // each proxy keeps the instances its own token may read.
    for upstream in &mut visible.query_upstreams {
        upstream.endpoints.retain(query_visible);
    }
    for upstream in &mut visible.upstreams {
        let chain = upstream.chain.clone();
        upstream.endpoints = upstream
            .endpoints
            .iter()
            .map(|(target, endpoints)| {
                let service = chain.targets.get(target).map(|t| t.service.as_str());
                let kept = if service.is_some_and(|s| may_read(Resource::Service, s)) {
                    endpoints
                        .iter()
                        .filter(|e| may_read(Resource::Node, &e.node))
                        .cloned()
                        .collect()
                } else {
                    Vec::new()
                };
                (target.clone(), kept)
            })
            .collect();
    }
    Arc::new(visible)
}

/// [`visible_snapshot`] of a mesh gateway: the local services its token
/// may read, on the nodes it may read, and the other datacenters'
/// gateways on nodes it may read.
fn visible_gateway(
    snapshot: &Arc<ConnectProxySnapshot>,
    gateway: &MeshGatewayState,
    may_read: &dyn Fn(Resource, &str) -> bool,
) -> Arc<ConnectProxySnapshot> {
    let node_readable = |list: &Vec<Endpoint>| -> Vec<Endpoint> {
        list.iter()
            .filter(|e| may_read(Resource::Node, &e.node))
            .cloned()
            .collect()
    };
    let mut visible = gateway.clone();
    visible.services = gateway
        .services
        .iter()
        .filter(|(name, _)| may_read(Resource::Service, name))
        .map(|(name, list)| (name.clone(), node_readable(list)))
        .filter(|(_, list)| !list.is_empty())
        .collect();
    visible.remote_gateways = gateway
        .remote_gateways
        .iter()
        .map(|(dc, list)| (dc.clone(), node_readable(list)))
        .filter(|(_, list)| !list.is_empty())
        .collect();
    visible.servers = if may_read(Resource::Service, "consul") {
        node_readable(&gateway.servers)
    } else {
        Vec::new()
    };
    if visible == *gateway {
        return snapshot.clone();
    }
    let mut shown = (**snapshot).clone();
    shown.mesh_gateway = Some(Arc::new(visible));
    Arc::new(shown)
}
