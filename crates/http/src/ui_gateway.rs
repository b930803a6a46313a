//! `GET /v1/internal/ui/gateway-services-nodes/:gateway` in Consul's shape
//! (`UIGatewayServicesNodes`): a service summary for every service the
//! gateway's config entry links (wildcards expanded), with its instances'
//! health, and for an ingress gateway the addresses each is reached at
//! (`GatewayConfig.Addresses`: its hosts, else
//! `<service>.ingress.<dc>.<domain>`, with the listener's port).

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{json, Value};

use crate::gateway_services::{gateway_rows, may_read, non_blocking, text, INGRESS};
use crate::ui_internal::{summarize, summary_fields};
use crate::util::{json_meta, ApiResult};
use crate::{AppState, Req};

/// `GET /v1/internal/ui/gateway-services-nodes/`: Consul's 400.
pub async fn missing_name() -> ApiResult {
    Ok((StatusCode::BAD_REQUEST, "Missing gateway name").into_response())
}

/// The addresses an ingress gateway serves `service` at (none without a port).
fn ingress_addresses(row: &Value, service: &str, dc: &str, domains: &[String]) -> Vec<String> {
    let port = row["Port"].as_u64().unwrap_or(0);
    if port == 0 {
        return Vec::new();
    }
    let hosts: Vec<String> = row["Hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let hosts = if hosts.is_empty() {
        domains
            .iter()
            .map(|d| format!("{service}.ingress.{dc}.{}", d.trim_end_matches('.')))
            .collect()
    } else {
        hosts
    };
    hosts.into_iter().map(|h| format!("{h}:{port}")).collect()
}

/// `GET /v1/internal/ui/gateway-services-nodes/:gateway`: `service:read`
/// on the gateway (else 403); services the token may not read are left
/// out; `[]` for a gateway without an entry.
pub async fn gateway_services_nodes(
    State(st): State<AppState>,
    Path(gateway): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let (mut meta, kind, rows) = gateway_rows(&st, &req, &opts, &gateway).await?;
    let config = st.agent.config();
    let dc = config.datacenter.clone();
    let mut domains = vec![config.dns.domain.clone()];
    domains.extend(config.dns.alt_domain.clone());
    // Each linked service with the addresses it is reached at.
    let mut linked: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in rows {
        let service = text(&row["Service"], "Name").to_string();
        let addresses = if kind == INGRESS {
            ingress_addresses(&row, &service, &dc, &domains)
        } else {
            Vec::new()
        };
        linked.entry(service).or_default().extend(addresses);
    }
    let plain = non_blocking(&opts);
    let dump = st.agent.rpc().catalog_service_dump_all(&plain).await?;
    let instances: Vec<_> = dump
        .value
        .into_iter()
        .filter(|csn| linked.contains_key(&csn.service.service))
        .collect();
    let mut rows = summarize(&instances);
    let mut out = Vec::new();
    let mut filtered = dump.meta.results_filtered_by_acls;
    for (service, addresses) in &linked {
        if !may_read(&st, &req, service).await? {
            filtered = true;
            continue;
        }
        let row = rows.remove(service).unwrap_or_default();
        let mut value = summary_fields(service, &row);
        if !addresses.is_empty() {
            value.insert("GatewayConfig".into(), json!({"Addresses": addresses}));
        }
        out.push(Value::Object(value));
    }
    meta.results_filtered_by_acls |= filtered;
    Ok(json_meta(&req.params, &meta, &out))
}

/// `GET /v1/internal/ui/gateway-intentions/`: Consul's 400.
pub async fn intentions_missing_name() -> ApiResult {
    Ok((StatusCode::BAD_REQUEST, "Missing gateway name").into_response())
}

/// `GET /v1/internal/ui/gateway-intentions/:gateway`: the intentions whose
/// destination is a service the gateway links (or `*`), in Consul's
/// order; `service:read` on the gateway, intentions the token may not read
/// left out; blocking on the config entries (intentions among them).
pub async fn gateway_intentions(
    State(st): State<AppState>,
    Path(gateway): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let (mut meta, _, rows) = gateway_rows(&st, &req, &opts, &gateway).await?;
    let services: BTreeSet<String> = rows
        .iter()
        .map(|row| text(&row["Service"], "Name").to_string())
        .collect();
    let plain = non_blocking(&opts);
    let all = st.agent.rpc().intention_list(&plain).await?;
    let matched: Vec<_> = all
        .value
        .into_iter()
        .filter(|i| {
            !services.is_empty()
                && (i.destination_name == "*" || services.contains(&i.destination_name))
        })
        .collect();
    meta.results_filtered_by_acls |= all.meta.results_filtered_by_acls;
    Ok(json_meta(&req.params, &meta, &matched))
}
