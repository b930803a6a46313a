//! `GET /v1/internal/ui/service-topology/:service?kind=` in Consul's shape
//! (`UIServiceTopology`): the service's protocol, whether its proxies are
//! all transparent, its upstreams and downstreams as service summaries
//! (sidecars folded into the service they front and left out themselves)
//! each with how the edge is known (`Source`) and what intentions decide
//! for it (`Intention`), and whether ACLs left instances out.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use legate_types::ui::{topology_source, IntentionDecisionSummary};
use legate_types::CheckServiceNode;
use serde_json::{json, Value};

use crate::ui_internal::{summarize, summary_fields, Summary};
use crate::util::{json_meta, ApiError, ApiResult};
use crate::{AppState, Req};

/// `GET /v1/internal/ui/service-topology/`: Consul's 400.
pub async fn missing_name() -> ApiResult {
    Ok((StatusCode::BAD_REQUEST, "Missing service name").into_response())
}

/// The summaries of `instances` (only typical services and ingress
/// gateways), sorted by name, each with its edge's source and decision.
fn edges(
    instances: &[CheckServiceNode],
    sources: &BTreeMap<String, String>,
    decisions: &BTreeMap<String, IntentionDecisionSummary>,
) -> Vec<Value> {
    summarize(instances)
        .into_iter()
        .filter(|(_, row)| row.kind.is_empty() || row.kind == "ingress-gateway")
        .map(|(name, row)| edge(&name, &row, sources, decisions))
        .collect()
}

fn edge(
    name: &str,
    row: &Summary,
    sources: &BTreeMap<String, String>,
    decisions: &BTreeMap<String, IntentionDecisionSummary>,
) -> Value {
    let mut value = summary_fields(name, row);
    value.insert(
        "Source".into(),
        json!(sources.get(name).cloned().unwrap_or_default()),
    );
    value.insert(
        "Intention".into(),
        json!(decisions.get(name).cloned().unwrap_or_default()),
    );
    Value::Object(value)
}

/// `GET /v1/internal/ui/service-topology/:service?kind=`: `kind` must be
/// given (empty for a typical service, or `ingress-gateway`).
pub async fn service_topology(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let Some(kind) = req.params.get("kind").map(str::to_string) else {
        return Err(ApiError::bad_request("Missing service kind"));
    };
    if !matches!(kind.as_str(), "" | "ingress-gateway") {
        return Err(ApiError::bad_request(format!(
            "Unsupported service kind {kind:?}"
        )));
    }
    let answer = st
        .agent
        .rpc()
        .catalog_service_topology(&opts, service, kind)
        .await?;
    let topology = &answer.value;
    let mut upstreams = edges(
        &topology.upstreams,
        &topology.upstream_sources,
        &topology.upstream_decisions,
    );
    // Upstreams known only from routing config have no instances: Consul
    // adds a bare summary for each.
    let datacenter = if opts.datacenter.is_empty() {
        st.agent.config().datacenter.clone()
    } else {
        opts.datacenter.clone()
    };
    for (name, how) in &topology.upstream_sources {
        if how == topology_source::ROUTING_CONFIG {
            let row = Summary::empty_in(&datacenter);
            upstreams.push(edge(
                name,
                &row,
                &topology.upstream_sources,
                &topology.upstream_decisions,
            ));
        }
    }
    let downstreams = edges(
        &topology.downstreams,
        &topology.downstream_sources,
        &topology.downstream_decisions,
    );
    let body = json!({
        "Protocol": topology.metrics_protocol,
        "TransparentProxy": topology.transparent_proxy,
        "Upstreams": upstreams,
        "Downstreams": downstreams,
        "FilteredByACLs": answer.meta.results_filtered_by_acls,
    });
    Ok(json_meta(&req.params, &answer.meta, &body))
}
