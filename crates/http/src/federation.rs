//! `/v1/internal/federation-state*`: Consul's debugging endpoints over the
//! federation states (all GET, blocking, `?dc=` routes the read).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

use crate::util::{json_meta, ApiError, ApiResult};
use crate::{AppState, Req};

/// `GET /v1/internal/federation-states`: every state (`[]` when none).
pub async fn list(State(st): State<AppState>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.federation_state_list(&opts).await })
        .await
}

/// `GET /v1/internal/federation-states/mesh-gateways`: each datacenter's
/// gateways (`{}` when none).
pub async fn mesh_gateways(State(st): State<AppState>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.federation_state_mesh_gateways(&opts).await })
        .await
}

/// `GET /v1/internal/federation-state/`: Consul's 400 for a missing name.
pub async fn missing() -> ApiResult {
    Err(ApiError::bad_request("Missing datacenter name"))
}

/// `GET /v1/internal/federation-state/:dc`: the RPC reply as Consul
/// serializes it (`State` beside the query meta), 404 with an empty body
/// when that datacenter has no state.
pub async fn get(
    State(st): State<AppState>,
    Path(datacenter): Path<String>,
    req: Req,
) -> ApiResult {
    if datacenter.is_empty() {
        return missing().await;
    }
    let opts = req.query_options()?;
    let result = st
        .agent
        .rpc()
        .federation_state_get(&opts, datacenter)
        .await?;
    let Some(state) = result.value else {
        return Ok(crate::util::with_meta(
            StatusCode::NOT_FOUND.into_response(),
            &result.meta,
        ));
    };
    let meta = &result.meta;
    let body = json!({
        "State": state,
        "Index": meta.index,
        "LastContact": meta.last_contact.as_nanos() as u64,
        "KnownLeader": meta.known_leader,
        "ConsistencyLevel": meta.consistency.header_value(),
        "NotModified": false,
        "Backend": 0,
        "ResultsFilteredByACLs": false,
    });
    Ok(json_meta(&req.params, meta, &body))
}

/// `GET /v1/internal/gateway-locator` (Legate's): a server federating
/// through mesh gateways shows its gateway locator — its inputs, the
/// gateways it dials and why. Needs `operator:read`; 404 on an agent that
/// does not federate through gateways.
pub async fn gateway_locator(State(st): State<AppState>, req: Req) -> ApiResult {
    crate::agent_acl::check(
        &st,
        &req,
        legate_acl::Resource::Operator,
        "",
        legate_acl::Access::Read,
    )
    .await?;
    let locator = st.agent.gateway_locator().ok_or_else(|| ApiError {
        status: axum::http::StatusCode::NOT_FOUND,
        message: "WAN federation through mesh gateways is not enabled on this agent".into(),
    })?;
    Ok(crate::util::json(&req.params, &locator))
}
