//! The catalog's view of terminating and ingress gateways, from their
//! config entries (Consul keeps it as a table; Legate derives it on read):
//! `GET /v1/catalog/gateway-services/:gateway` and
//! `GET /v1/health/ingress/:service`.

use axum::extract::{Path, State};
use legate_acl::{Access, Resource};
use legate_types::config_entry::ConfigEntry;
use legate_types::rpc::ServiceQuery;
use legate_types::QueryOptions;
use serde_json::{json, Map, Value};

use crate::util::{json_meta, ApiError, ApiResult};
use crate::{AppState, Req};

pub(crate) const INGRESS: &str = "ingress-gateway";
pub(crate) const TERMINATING: &str = "terminating-gateway";

pub(crate) fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A service's protocol: its `service-defaults`, else the global
/// `proxy-defaults`' `Config.protocol`, else `tcp`.
fn protocol_of(entries: &[ConfigEntry], service: &str) -> String {
    let defaults = entries
        .iter()
        .find(|e| e.kind == "service-defaults" && e.name == service)
        .map(|e| text(&Value::Object(e.body.clone()), "Protocol").to_string())
        .filter(|p| !p.is_empty());
    let global = entries
        .iter()
        .find(|e| e.kind == "proxy-defaults")
        .and_then(|e| e.body.get("Config"))
        .map(|c| text(c, "protocol").to_string())
        .filter(|p| !p.is_empty());
    defaults
        .or(global)
        .unwrap_or_else(|| "tcp".into())
        .to_ascii_lowercase()
}

/// Every service a wildcard may stand for (never `consul`), with whether
/// it has a mesh instance and whether it has a plain one.
async fn catalog_services(
    st: &AppState,
    opts: &QueryOptions,
) -> Result<Vec<(String, bool, bool)>, ApiError> {
    let rpc = st.agent.rpc();
    let plain = QueryOptions {
        min_index: 0,
        max_wait: None,
        filter: String::new(),
        ..opts.clone()
    };
    let names = rpc.catalog_services(&plain).await?.value;
    let mut out = Vec::new();
    for name in names.into_keys().filter(|n| n != "consul") {
        let instances = |connect| ServiceQuery {
            service: name.clone(),
            connect,
            ..Default::default()
        };
        let mesh = !rpc
            .catalog_service_nodes(&plain, instances(true))
            .await?
            .value
            .is_empty();
        let typical = rpc
            .catalog_service_nodes(&plain, instances(false))
            .await?
            .value
            .iter()
            .any(|r| r.service_kind.is_empty());
        out.push((name, mesh, typical));
    }
    Ok(out)
}

/// The rows of one gateway's config entry, wildcards expanded as Consul
/// expands them (ingress: services with a mesh instance and the
/// listener's protocol; terminating: services with a plain instance; a
/// service named outright wins over the wildcard's row for it).
async fn rows_of(
    st: &AppState,
    opts: &QueryOptions,
    gateway: &ConfigEntry,
    entries: &[ConfigEntry],
) -> Result<Vec<Value>, ApiError> {
    let body = Value::Object(gateway.body.clone());
    let base = |service: &str, from_wildcard: bool| {
        let mut row = Map::new();
        row.insert("Gateway".into(), json!({"Name": gateway.name}));
        row.insert("Service".into(), json!({"Name": service}));
        row.insert("GatewayKind".into(), json!(gateway.kind));
        if from_wildcard {
            row.insert("FromWildcard".into(), json!(true));
        }
        row
    };
    let mut listed: Vec<(String, Map<String, Value>)> = Vec::new();
    let mut wildcards: Vec<(Map<String, Value>, Option<String>)> = Vec::new();
    let add = |row: &mut Map<String, Value>, key: &str, value: &Value| {
        let empty = value.is_null()
            || value.as_str() == Some("")
            || value.as_array().is_some_and(|a| a.is_empty());
        if !empty {
            row.insert(key.into(), value.clone());
        }
    };
    if gateway.kind == INGRESS {
        for listener in body["Listeners"].as_array().into_iter().flatten() {
            let port = listener["Port"].clone();
            let protocol = match text(listener, "Protocol") {
                "" => "tcp".to_string(),
                p => p.to_ascii_lowercase(),
            };
            for service in listener["Services"].as_array().into_iter().flatten() {
                let name = text(service, "Name");
                let mut row = base(name, name == "*");
                row.insert("Port".into(), port.clone());
                row.insert("Protocol".into(), json!(protocol));
                add(&mut row, "Hosts", &service["Hosts"]);
                if name == "*" {
                    wildcards.push((row, Some(protocol.clone())));
                } else {
                    listed.push((name.to_string(), row));
                }
            }
        }
    } else {
        for service in body["Services"].as_array().into_iter().flatten() {
            let name = text(service, "Name");
            let mut row = base(name, name == "*");
            for key in ["CAFile", "CertFile", "KeyFile", "SNI"] {
                add(&mut row, key, &service[key]);
            }
            if name == "*" {
                wildcards.push((row, None));
            } else {
                listed.push((name.to_string(), row));
            }
        }
    }
    if !wildcards.is_empty() {
        let services = catalog_services(st, opts).await?;
        for (template, protocol) in wildcards {
            for (name, mesh, typical) in &services {
                let fits = match &protocol {
                    Some(p) => *mesh && protocol_of(entries, name) == *p,
                    None => *typical,
                };
                if fits && !listed.iter().any(|(n, _)| n == name) {
                    let mut row = template.clone();
                    row.insert("Service".into(), json!({"Name": name}));
                    listed.push((name.clone(), row));
                }
            }
        }
    }
    let indexes = json!({
        "CreateIndex": gateway.raft.create_index,
        "ModifyIndex": gateway.raft.modify_index,
    });
    Ok(listed
        .into_iter()
        .map(|(_, mut row)| {
            for (k, v) in indexes.as_object().into_iter().flatten() {
                row.insert(k.clone(), v.clone());
            }
            Value::Object(row)
        })
        .collect())
}

/// The gateway entries, service and proxy defaults (one blocking read of
/// the config entries).
async fn gateway_entries(
    st: &AppState,
    opts: &QueryOptions,
) -> Result<legate_types::Queried<Vec<ConfigEntry>>, ApiError> {
    let kinds = [INGRESS, TERMINATING, "service-defaults", "proxy-defaults"];
    Ok(st
        .agent
        .rpc()
        .config_list_all(opts, kinds.iter().map(|k| k.to_string()).collect())
        .await?)
}

/// Whether the request's token may read `service` (always, without ACLs).
pub(crate) async fn may_read(st: &AppState, req: &Req, service: &str) -> Result<bool, ApiError> {
    let token = st
        .agent
        .acl()
        .resolve(&st.agent.acl().effective_secret(&req.token()))
        .await?;
    Ok(token.is_none_or(|t| {
        t.authorizer
            .allowed(Resource::Service, service, Access::Read)
    }))
}

/// One gateway's rows (the services its entry links, wildcards expanded)
/// once the token may read the gateway (else 403): the config entries'
/// query meta, the gateway's kind (empty without an entry) and the rows.
pub(crate) async fn gateway_rows(
    st: &AppState,
    req: &Req,
    opts: &QueryOptions,
    gateway: &str,
) -> Result<(legate_types::QueryMeta, String, Vec<Value>), ApiError> {
    crate::agent_acl::check(st, req, Resource::Service, gateway, Access::Read).await?;
    let entries = gateway_entries(st, opts).await?;
    let Some(entry) = entries
        .value
        .iter()
        .find(|e| (e.kind == INGRESS || e.kind == TERMINATING) && e.name == gateway)
    else {
        return Ok((entries.meta, String::new(), Vec::new()));
    };
    let rows = rows_of(st, opts, entry, &entries.value).await?;
    Ok((entries.meta, entry.kind.clone(), rows))
}

/// `opts` without blocking: for the second read of a request that blocked
/// on its first.
pub(crate) fn non_blocking(opts: &QueryOptions) -> QueryOptions {
    QueryOptions {
        min_index: 0,
        max_wait: None,
        ..opts.clone()
    }
}

/// `GET /v1/catalog/gateway-services/:gateway`: `service:read` on the
/// gateway (else 403), rows of the services the token may read; `[]` for
/// a gateway without an entry.
pub async fn gateway_services(
    State(st): State<AppState>,
    Path(gateway): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let (mut meta, _, all) = gateway_rows(&st, &req, &opts, &gateway).await?;
    let mut rows = Vec::new();
    for row in all {
        if may_read(&st, &req, text(&row["Service"], "Name")).await? {
            rows.push(row);
        } else {
            meta.results_filtered_by_acls = true;
        }
    }
    Ok(json_meta(&req.params, &meta, &rows))
}

/// `GET /v1/health/ingress/:service`: the instances of every ingress
/// gateway that exposes the service (with `?passing`), read with the
/// request's token; without `service:read` on the service, `[]` (Consul
/// answers the same, without saying it filtered).
pub async fn health_ingress(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let passing_only = req.params.bool("passing")?.unwrap_or(false);
    let entries = gateway_entries(&st, &opts).await?;
    let mut meta = entries.meta;
    let mut instances = Vec::new();
    if may_read(&st, &req, &service).await? {
        for entry in entries.value.iter().filter(|e| e.kind == INGRESS) {
            let rows = rows_of(&st, &opts, entry, &entries.value).await?;
            if !rows.iter().any(|r| text(&r["Service"], "Name") == service) {
                continue;
            }
            let plain = QueryOptions {
                min_index: 0,
                max_wait: None,
                ..opts.clone()
            };
            let query = ServiceQuery {
                service: entry.name.clone(),
                passing_only,
                ..Default::default()
            };
            let found = st.agent.rpc().health_service_nodes(&plain, query).await?;
            meta.results_filtered_by_acls |= found.meta.results_filtered_by_acls;
            instances.extend(found.value);
        }
    } else {
        meta.results_filtered_by_acls = true;
    }
    if crate::central_config::wanted(&req.params) {
        let rows = instances
            .iter_mut()
            .filter(|r| legate_agent::central_config::applies_to(&r.service.kind))
            .map(|r| crate::central_config::instance(&mut r.service));
        crate::central_config::merge_rows(&st, &opts, rows).await?;
    }
    Ok(json_meta(&req.params, &meta, &instances))
}
