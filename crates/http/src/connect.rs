//! `/v1/connect/ca/*` and `/v1/agent/connect/ca/*`: CA roots, CA
//! configuration, and the agent's leaf certificates.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderValue;
use axum::response::IntoResponse;
use legate_types::connect::{CaConfiguration, IndexedCaRoots};
use legate_types::QueryMeta;

use crate::util::{json_meta, with_meta, ApiError, ApiResult};
use crate::{AppState, Req};

/// The roots as one PEM bundle: each root followed by its intermediates.
fn roots_pem(roots: &IndexedCaRoots) -> String {
    let mut out = String::new();
    for root in &roots.roots {
        for pem in std::iter::once(&root.root_cert).chain(root.intermediate_certs.iter().flatten())
        {
            out.push_str(pem.trim_end());
            out.push('\n');
        }
    }
    out
}

/// The roots; `cacheable` (the agent's endpoint) honours `?cached`.
async fn roots_response(st: &AppState, req: &Req, cacheable: bool) -> ApiResult {
    let opts = req.query_options()?;
    let (result, cache) = if cacheable && req.cached() {
        let (result, status) = st.agent.cached().ca_roots(&opts).await?;
        (result, Some(status))
    } else {
        (st.agent.rpc().ca_roots(&opts).await?, None)
    };
    if req.params.flag("pem") {
        let mut response = roots_pem(&result.value).into_response();
        response.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("application/pem-certificate-chain"),
        );
        return Ok(crate::cached::with_cache_status(
            with_meta(response, &result.meta),
            cache,
        ));
    }
    Ok(crate::cached::with_cache_status(
        json_meta(&req.params, &result.meta, &result.value),
        cache,
    ))
}

/// `GET /v1/connect/ca/roots` (`?pem` for a PEM bundle).
pub async fn roots(State(st): State<AppState>, req: Req) -> ApiResult {
    roots_response(&st, &req, false).await
}

/// `GET /v1/agent/connect/ca/roots`.
pub async fn agent_roots(State(st): State<AppState>, req: Req) -> ApiResult {
    roots_response(&st, &req, true).await
}

/// `GET /v1/connect/ca/configuration`.
pub async fn get_configuration(State(st): State<AppState>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.ca_config_get(&opts).await })
        .await
}

/// `PUT /v1/connect/ca/configuration`.
pub async fn set_configuration(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let config: CaConfiguration = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    st.agent
        .rpc()
        .ca_config_set(&req.write_options(), config)
        .await?;
    // Consul answers an empty 200.
    Ok(axum::http::StatusCode::OK.into_response())
}

/// `GET /v1/agent/connect/ca/leaf/:service`: blocks with `?index` until a
/// newer certificate than that index exists.
pub async fn leaf(State(st): State<AppState>, Path(service): Path<String>, req: Req) -> ApiResult {
    crate::agent_acl::check(
        &st,
        &req,
        legate_acl::Resource::Service,
        &service,
        legate_acl::Access::Write,
    )
    .await?;
    let opts = req.query_options()?;
    let wait = if opts.min_index > 0 {
        opts.effective_wait()
    } else {
        // The first certificate may take a rate-limit window or two.
        legate_types::MAX_BLOCKING_WAIT
    };
    let cert = st
        .agent
        .leaf_certs()
        .get_with_token(&service, &opts.token, opts.min_index, wait)
        .await?;
    let meta = QueryMeta {
        index: cert.raft.modify_index,
        known_leader: true,
        ..Default::default()
    };
    Ok(json_meta(&req.params, &meta, &cert))
}
