//! `GET /v1/internal/ui/proxy/:id`: Legate's own endpoint behind the UI's
//! per-proxy page — a local proxy's last xDS configuration (resource
//! names, versions and sizes; never their content) and its recent pushes
//! with the proxy's ACK or NACK. `service:read` on the proxy's service;
//! 404 for a service this agent does not run.

use axum::extract::{Path, State};
use legate_acl::{Access, Resource};
use legate_types::proxy_status::ProxyXdsStatus;

use crate::util::{json, ApiError, ApiResult};
use crate::{AppState, Req};

/// `GET /v1/internal/ui/proxy/:id`.
pub async fn proxy_status(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    let Some(service) = st.agent.service(&id) else {
        return Err(ApiError::not_found(format!("unknown service ID: {id}")));
    };
    crate::agent_acl::check(&st, &req, Resource::Service, &service.service, Access::Read).await?;
    let status = st.agent.proxy_status(&id).unwrap_or(ProxyXdsStatus {
        proxy_id: id,
        ..Default::default()
    });
    Ok(json(&req.params, &status))
}
