//! The UI's internal endpoints in Consul's shapes (`agent/ui_endpoint.go`):
//! `GET /v1/internal/ui/services`, `/nodes`, `/node/:node` and
//! `/catalog-overview`. Other tools read them too.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use legate_types::catalog::{CheckServiceNode, HealthStatus};
use legate_types::config_entry::ConfigEntry;
use serde_json::{json, Value};

use crate::util::{json, json_meta, ApiResult};
use crate::{AppState, Req};

/// One service's row as Consul's `summarizeServices` builds it.
#[derive(Default)]
pub(crate) struct Summary {
    pub(crate) kind: String,
    datacenter: String,
    tags: BTreeSet<String>,
    nodes: BTreeSet<String>,
    external_sources: Vec<String>,
    instances: u64,
    /// Check status by (node, check ID): each check counted once.
    checks: BTreeMap<(String, String), HealthStatus>,
    /// Whether every proxy of the service runs in transparent mode
    /// (`None`: no proxy seen).
    transparent_proxy: Option<bool>,
    connect_native: bool,
    has_proxy: bool,
    associated_services: u64,
}

impl Summary {
    /// A row with no instances (an upstream known only from routing config).
    pub(crate) fn empty_in(datacenter: &str) -> Summary {
        Summary {
            datacenter: datacenter.to_string(),
            ..Default::default()
        }
    }

    fn add_checks(&mut self, csn: &CheckServiceNode) {
        for check in &csn.checks {
            self.checks
                .insert((check.node.clone(), check.check_id.clone()), check.status);
        }
    }

    fn counts(&self) -> (u64, u64, u64) {
        let mut counts = (0, 0, 0);
        for status in self.checks.values() {
            match status {
                HealthStatus::Passing => counts.0 += 1,
                HealthStatus::Warning => counts.1 += 1,
                HealthStatus::Critical => counts.2 += 1,
                HealthStatus::Maintenance => {}
            }
        }
        counts
    }
}

/// The rows of every service (sidecars are rows of their own; their checks
/// also count toward the service they front).
pub(crate) fn summarize(instances: &[CheckServiceNode]) -> BTreeMap<String, Summary> {
    let mut rows: BTreeMap<String, Summary> = BTreeMap::new();
    for csn in instances {
        let service = &csn.service;
        let row = rows.entry(service.service.clone()).or_default();
        row.instances += 1;
        row.kind = service.kind.clone();
        row.datacenter = csn.node.datacenter.clone();
        row.nodes.insert(csn.node.node.clone());
        row.tags.extend(service.tags.iter().cloned());
        if let Some(source) = service.meta.get("external-source") {
            if !row.external_sources.contains(source) {
                row.external_sources.push(source.clone());
            }
        }
        row.connect_native |= service.connect.as_ref().is_some_and(|c| c.native);
        row.add_checks(csn);
        if service.kind == "connect-proxy" {
            if let Some(proxy) = &service.proxy {
                let destination = rows
                    .entry(proxy.destination_service_name.clone())
                    .or_default();
                destination.has_proxy = true;
                destination.add_checks(csn);
                let transparent = proxy.mode == "transparent";
                destination.transparent_proxy =
                    Some(destination.transparent_proxy.unwrap_or(true) && transparent);
            }
        }
    }
    rows
}

fn list_or_null<T: serde::Serialize>(items: Vec<T>) -> Value {
    if items.is_empty() {
        Value::Null
    } else {
        json!(items)
    }
}

/// The services each terminating or ingress gateway entry links
/// (a wildcard stands for every typical service that has instances).
fn gateway_links(
    entries: &[ConfigEntry],
    rows: &BTreeMap<String, Summary>,
) -> Vec<(String, String)> {
    let typical: Vec<&String> = rows
        .iter()
        .filter(|(name, row)| row.kind.is_empty() && row.instances > 0 && *name != "consul")
        .map(|(name, _)| name)
        .collect();
    let mut links = BTreeSet::new();
    for entry in entries {
        let services: Vec<&Value> = match entry.kind.as_str() {
            "terminating-gateway" => entry
                .body
                .get("Services")
                .and_then(Value::as_array)
                .map(|s| s.iter().collect())
                .unwrap_or_default(),
            "ingress-gateway" => entry
                .body
                .get("Listeners")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|l| l.get("Services").and_then(Value::as_array))
                .flatten()
                .collect(),
            _ => continue,
        };
        for service in services {
            let name = service.get("Name").and_then(Value::as_str).unwrap_or("");
            if name == "*" {
                for each in &typical {
                    links.insert((entry.name.clone(), (*each).clone()));
                }
            } else if !name.is_empty() {
                links.insert((entry.name.clone(), name.to_string()));
            }
        }
    }
    links.into_iter().collect()
}

/// A service's row in Consul's `ServiceSummary` keys and order.
pub(crate) fn summary_fields(name: &str, row: &Summary) -> serde_json::Map<String, Value> {
    let (passing, warning, critical) = row.counts();
    let mut value = serde_json::Map::new();
    if !row.kind.is_empty() {
        value.insert("Kind".into(), json!(row.kind));
    }
    let gateway = if row.associated_services > 0 {
        json!({"AssociatedServiceCount": row.associated_services})
    } else {
        json!({})
    };
    for (key, field) in [
        ("Name", json!(name)),
        ("Datacenter", json!(row.datacenter)),
        ("Tags", list_or_null(row.tags.iter().collect())),
        ("Nodes", list_or_null(row.nodes.iter().collect())),
        (
            "ExternalSources",
            list_or_null(row.external_sources.clone()),
        ),
        ("InstanceCount", json!(row.instances)),
        ("ChecksPassing", json!(passing)),
        ("ChecksWarning", json!(warning)),
        ("ChecksCritical", json!(critical)),
        ("GatewayConfig", gateway),
        (
            "TransparentProxy",
            json!(row.transparent_proxy.unwrap_or(false)),
        ),
        ("ConnectNative", json!(row.connect_native)),
    ] {
        value.insert(key.into(), field);
    }
    value
}

/// `GET /v1/internal/ui/services`: one row per service name, sorted by
/// name; `[]` when there is none.
pub async fn services(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let rpc = st.agent.rpc();
    let dump = rpc.catalog_service_dump_all(&opts).await?;
    let plain = crate::gateway_services::non_blocking(&opts);
    let kinds = ["terminating-gateway", "ingress-gateway"];
    let entries = rpc
        .config_list_all(&plain, kinds.iter().map(|k| k.to_string()).collect())
        .await?
        .value;
    let mut rows = summarize(&dump.value);
    let links = gateway_links(&entries, &rows);
    let mut linked = BTreeSet::new();
    for (gateway, service) in &links {
        if let Some(row) = rows.get_mut(gateway) {
            row.associated_services += 1;
            linked.insert(service.clone());
        }
    }
    let out: Vec<Value> = rows
        .into_iter()
        .map(|(name, row)| {
            let mut value = summary_fields(&name, &row);
            value.insert("ConnectedWithProxy".into(), json!(row.has_proxy));
            value.insert(
                "ConnectedWithGateway".into(),
                json!(linked.contains(&name) && row.instances > 0),
            );
            Value::Object(value)
        })
        .collect();
    Ok(json_meta(&req.params, &dump.meta, &out))
}

/// `GET /v1/internal/ui/nodes`: every node the token may read with its
/// services and checks; `[]` when there is none.
pub async fn nodes(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let dump = st.agent.rpc().catalog_node_dump(&opts, None).await?;
    Ok(json_meta(&req.params, &dump.meta, &dump.value))
}

/// `GET /v1/internal/ui/node/:node`: one node, or 404 with an empty body
/// when it does not exist or the token may not read it (Consul's), with
/// the query's headers.
pub async fn node(State(st): State<AppState>, Path(name): Path<String>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let dump = st.agent.rpc().catalog_node_dump(&opts, Some(name)).await?;
    match dump.value.into_iter().next() {
        Some(info) => Ok(json_meta(&req.params, &dump.meta, &info)),
        None => {
            let mut response = StatusCode::NOT_FOUND.into_response();
            response = crate::util::with_meta(response, &dump.meta);
            Ok(response)
        }
    }
}

/// `GET /v1/internal/ui/node/`: Consul's 400 for a missing name.
pub async fn node_missing() -> ApiResult {
    Ok((StatusCode::BAD_REQUEST, "Missing node name").into_response())
}

/// `GET /v1/internal/ui/catalog-overview`: `operator:read`; not blocking
/// and without `X-Consul-Index`, as Consul's.
pub async fn catalog_overview(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let summary = st.agent.rpc().catalog_overview(&opts).await?;
    Ok(json(&req.params, &summary))
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_types::catalog::{HealthCheck, Node, NodeService};

    fn instance(
        node: &str,
        service: NodeService,
        checks: &[(&str, HealthStatus)],
    ) -> CheckServiceNode {
        CheckServiceNode {
            node: Node {
                node: node.into(),
                datacenter: "dc1".into(),
                ..Default::default()
            },
            checks: checks
                .iter()
                .map(|(id, status)| HealthCheck {
                    node: node.into(),
                    check_id: id.to_string(),
                    status: *status,
                    ..Default::default()
                })
                .collect(),
            service,
        }
    }

    #[test]
    fn proxies_are_rows_and_their_checks_count_toward_their_service() {
        let api = NodeService {
            id: "api".into(),
            service: "api".into(),
            tags: vec!["b".into(), "a".into()],
            ..Default::default()
        };
        let proxy = NodeService {
            kind: "connect-proxy".into(),
            id: "api-proxy".into(),
            service: "api-proxy".into(),
            proxy: Some(Box::new(legate_types::catalog::ConnectProxyConfig {
                destination_service_name: "api".into(),
                mode: "transparent".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let rows = summarize(&[
            instance(
                "foo",
                api,
                &[
                    ("serfHealth", HealthStatus::Passing),
                    ("api-check", HealthStatus::Warning),
                ],
            ),
            instance(
                "foo",
                proxy,
                &[
                    ("serfHealth", HealthStatus::Passing),
                    ("proxy-check", HealthStatus::Passing),
                ],
            ),
        ]);
        // Consul's own example: the node check once, the api check, the
        // proxy's check.
        assert_eq!(rows["api"].counts(), (2, 1, 0));
        assert!(rows["api"].has_proxy);
        assert_eq!(rows["api"].transparent_proxy, Some(true));
        assert_eq!(rows["api-proxy"].counts(), (2, 0, 0));
        assert_eq!(rows["api-proxy"].kind, "connect-proxy");
        assert_eq!(
            rows["api"].tags.iter().cloned().collect::<Vec<_>>(),
            vec!["a".to_string(), "b".to_string()]
        );
    }
}
