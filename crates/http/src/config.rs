//! `/v1/config`: config entries.

use axum::body::Bytes;
use axum::extract::{Path, State};
use legate_types::config_entry;
use legate_types::keys::canonicalize_keys;

use crate::util::{json, ApiError, ApiResult};
use crate::{AppState, Req};

pub async fn apply(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let value: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let entry = config_entry::from_json(canonicalize_keys(value))
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let cas = req.params.u64("cas")?;
    let applied = st
        .agent
        .rpc()
        .config_apply(&req.write_options(), entry, cas)
        .await?;
    Ok(json(&req.params, &applied))
}

pub async fn list(State(st): State<AppState>, Path(kind): Path<String>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.config_list(&opts, kind).await })
        .await
}

pub async fn get(
    State(st): State<AppState>,
    Path((kind, name)): Path<(String, String)>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let result = st
        .agent
        .rpc()
        .config_get(&opts, kind.clone(), name.clone())
        .await?;
    match result.value {
        Some(entry) => Ok(crate::util::json_meta(&req.params, &result.meta, &entry)),
        None => Err(ApiError::not_found(format!(
            "Config entry not found for {kind:?} / {name:?}"
        ))),
    }
}

pub async fn delete(
    State(st): State<AppState>,
    Path((kind, name)): Path<(String, String)>,
    req: Req,
) -> ApiResult {
    let cas = req.params.u64("cas")?;
    let applied = st
        .agent
        .rpc()
        .config_delete(&req.write_options(), kind, name, cas)
        .await?;
    Ok(json(&req.params, &applied))
}
