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

/// The body of `POST /v1/discovery-chain/:service`.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct ChainRequestBody {
    #[serde(default)]
    override_protocol: String,
    #[serde(default)]
    override_connect_timeout: Option<serde_json::Value>,
    #[serde(default)]
    override_mesh_gateway: Option<MeshGatewayBody>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct MeshGatewayBody {
    #[serde(default)]
    mode: String,
}

fn chain_overrides(body: &[u8]) -> Result<legate_types::rpc::ChainOverrides, ApiError> {
    let parsed: ChainRequestBody = crate::util::decode_body(body)?;
    let connect_timeout = match parsed.override_connect_timeout {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) if s.is_empty() => None,
        Some(serde_json::Value::String(s)) => Some(
            legate_types::duration::parse_go_duration(&s)
                .map_err(|e| ApiError::bad_request(format!("OverrideConnectTimeout: {e}")))?,
        ),
        Some(serde_json::Value::Number(n)) => Some(
            legate_types::duration::from_json_nanos(&n)
                .map_err(|e| ApiError::bad_request(format!("OverrideConnectTimeout: {e}")))?,
        ),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "OverrideConnectTimeout: invalid duration {other}"
            )))
        }
    };
    Ok(legate_types::rpc::ChainOverrides {
        protocol: parsed.override_protocol,
        connect_timeout,
        mesh_gateway_mode: parsed
            .override_mesh_gateway
            .map(|m| m.mode)
            .unwrap_or_default(),
    })
}

async fn chain_response(
    st: AppState,
    service: String,
    req: Req,
    overrides: legate_types::rpc::ChainOverrides,
) -> ApiResult {
    let opts = req.query_options()?;
    let compile_dc = req.params.get("compile-dc").unwrap_or("").to_string();
    let (result, cache) = if req.cached() {
        let (result, status) = st
            .agent
            .cached()
            .discovery_chain(&opts, service, compile_dc, overrides)
            .await?;
        (result, Some(status))
    } else {
        let result = st
            .agent
            .rpc()
            .discovery_chain(&opts, service, compile_dc, overrides)
            .await?;
        (result, None)
    };
    let response = crate::util::json_meta(
        &req.params,
        &result.meta,
        &serde_json::json!({ "Chain": result.value }),
    );
    Ok(crate::cached::with_cache_status(response, cache))
}

pub async fn chain_get(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    chain_response(st, service, req, Default::default()).await
}

pub async fn chain_post(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    let overrides = chain_overrides(&body)?;
    chain_response(st, service, req, overrides).await
}
