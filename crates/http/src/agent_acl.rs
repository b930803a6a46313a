//! ACL checks of the agent's own endpoints (`/v1/agent/*`), answered by
//! the agent's token resolver: Consul's permission per endpoint, and the
//! lists it filters (with `X-Consul-Results-Filtered-By-ACLs`).

use axum::http::HeaderValue;
use axum::response::Response;
use legate_acl::{Access, Resource};
use legate_types::ServiceDefinition;

use crate::util::ApiError;
use crate::{AppState, Req};

/// The request's token.
pub(crate) fn token(req: &Req) -> String {
    req.token()
}

/// `Ok` when the request's token has `access` to `resource` `name`.
pub(crate) async fn check(
    st: &AppState,
    req: &Req,
    resource: Resource,
    name: &str,
    access: Access,
) -> Result<(), ApiError> {
    st.agent
        .check_acl(&token(req), resource, name, access)
        .await
        .map_err(ApiError::from)
}

/// Access to this agent itself (`agent:<access>` on its node name).
pub(crate) async fn check_agent(st: &AppState, req: &Req, access: Access) -> Result<(), ApiError> {
    let node = st.agent.config().node_name.clone();
    check(st, req, Resource::Agent, &node, access).await
}

/// Registering a service needs write on it, on the proxy's destination
/// for a `connect-proxy`, and on the sidecar it brings.
pub(crate) async fn check_service_registration(
    st: &AppState,
    req: &Req,
    def: &ServiceDefinition,
) -> Result<(), ApiError> {
    check(st, req, Resource::Service, &def.name, Access::Write).await?;
    if def.kind == "connect-proxy" {
        if let Some(destination) = def
            .proxy
            .as_ref()
            .map(|p| p.destination_service_name.as_str())
            .filter(|d| !d.is_empty())
        {
            check(st, req, Resource::Service, destination, Access::Write).await?;
        }
    }
    if let Some(sidecar) = def
        .connect
        .as_ref()
        .and_then(|c| c.sidecar_service.as_ref())
    {
        let name = if sidecar.name.is_empty() {
            format!("{}-sidecar-proxy", def.name)
        } else {
            sidecar.name.clone()
        };
        check(st, req, Resource::Service, &name, Access::Write).await?;
    }
    Ok(())
}

/// A check's permission: write on its service, or on this node when it
/// is the node's own.
pub(crate) async fn check_for_check(
    st: &AppState,
    req: &Req,
    service_id: &str,
) -> Result<(), ApiError> {
    if service_id.is_empty() {
        let node = st.agent.config().node_name.clone();
        return check(st, req, Resource::Node, &node, Access::Write).await;
    }
    let name = st
        .agent
        .service(service_id)
        .map(|s| s.service.clone())
        .unwrap_or_else(|| service_id.to_string());
    check(st, req, Resource::Service, &name, Access::Write).await
}

/// Whether the request's token may read `name` of `resource` (for lists).
pub(crate) async fn may_read(st: &AppState, token: &str, resource: Resource, name: &str) -> bool {
    st.agent
        .check_acl(token, resource, name, Access::Read)
        .await
        .is_ok()
}

/// Marks a response whose list lost entries to ACLs.
pub(crate) fn mark_filtered(mut response: Response, filtered: bool) -> Response {
    if filtered {
        response.headers_mut().insert(
            "x-consul-results-filtered-by-acls",
            HeaderValue::from_static("true"),
        );
    }
    response
}
