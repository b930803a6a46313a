//! `/v1/coordinate/*`: the servers' WAN coordinates by datacenter, the
//! nodes' LAN coordinates (blocking, `X-Consul-Index`), and updates;
//! all refused with Consul's 401 on an agent with `disable_coordinates`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use legate_types::coordinate::CoordinateEntry;

use crate::util::{decode_body, json, json_meta, ApiError, ApiResult};
use crate::{AppState, Req};

/// Consul's 401 on an agent with `disable_coordinates`.
fn enabled(st: &AppState) -> Result<(), ApiError> {
    if st.agent.config().disable_coordinates {
        return Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "Coordinate support disabled".into(),
        });
    }
    Ok(())
}

/// `GET /v1/coordinate/datacenters`.
pub async fn datacenters(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let all = st.agent.rpc().coordinate_datacenters().await?;
    Ok(json(&req.params, &all))
}

/// `GET /v1/coordinate/nodes`.
pub async fn nodes(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.coordinate_nodes(&opts).await })
        .await
}

/// `GET /v1/coordinate/node/:node`: 404 with an empty body when the node
/// has no coordinate, as Consul answers.
pub async fn node(State(st): State<AppState>, Path(node): Path<String>, req: Req) -> ApiResult {
    enabled(&st)?;
    let opts = req.query_options()?;
    let result = st.agent.rpc().coordinate_node(&opts, node).await?;
    if result.value.is_empty() {
        return Ok(crate::util::with_meta(
            StatusCode::NOT_FOUND.into_response(),
            &result.meta,
        ));
    }
    Ok(json_meta(&req.params, &result.meta, &result.value))
}

/// `PUT /v1/coordinate/update`: `{Node, Segment, Coord}`, queued for the
/// leader's next batch.
pub async fn update(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    enabled(&st)?;
    let entry: CoordinateEntry = decode_body(&body)?;
    st.agent
        .rpc()
        .coordinate_update(&req.write_options(), entry)
        .await?;
    Ok(StatusCode::OK.into_response())
}
