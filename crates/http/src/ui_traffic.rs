//! `GET /v1/internal/ui/traffic/:service`: Legate's own endpoint behind the
//! UI's topology view — the service's edges both ways with the counters and
//! rates its local proxies (and the local proxies of its peers) report to
//! this agent (`legate_types::traffic`). `service:read` on the service;
//! edges whose other service the token may not read are left out, and
//! `FilteredByACLs` says so.

use std::time::Instant;

use axum::extract::{Path, State};
use legate_acl::{Access, Resource};

use crate::util::{json, ApiResult};
use crate::{AppState, Req};

/// `GET /v1/internal/ui/traffic/:service`.
pub async fn service_traffic(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    crate::agent_acl::check(&st, &req, Resource::Service, &service, Access::Read).await?;
    let mut traffic = st.agent.traffic().service(&service, Instant::now());
    let token = st
        .agent
        .acl()
        .resolve(&st.agent.acl().effective_secret(&req.token()))
        .await?;
    if let Some(token) = token {
        let may_read = |name: &str| {
            token
                .authorizer
                .allowed(Resource::Service, name, Access::Read)
        };
        let before = traffic.upstreams.len() + traffic.downstreams.len();
        traffic.upstreams.retain(|e| may_read(&e.destination));
        traffic.downstreams.retain(|e| may_read(&e.source));
        traffic.filtered_by_acls = traffic.upstreams.len() + traffic.downstreams.len() < before;
    }
    Ok(json(&req.params, &traffic))
}
