//! `/v1/catalog/*` and `/v1/health/*`: reads and writes of the catalog,
//! answered by the servers.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use legate_types::rpc::ServiceQuery;
use legate_types::{DeregisterRequest, HealthStatus, NodeServiceList, RegisterRequest};

use crate::util::{decode_body, json, json_meta, with_meta, ApiError, ApiResult, Params};
use crate::{AppState, Req};

/// Keeps rows whose node metadata has every `?node-meta=key:value` pair.
fn node_meta_filter(params: &Params) -> Result<Vec<(String, String)>, ApiError> {
    params
        .all("node-meta")
        .into_iter()
        .map(|pair| match pair.split_once(':') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err(ApiError::bad_request(format!(
                "Invalid node-meta {pair:?}: expected key:value"
            ))),
        })
        .collect()
}

fn meta_matches(meta: &legate_types::catalog::Meta, wanted: &[(String, String)]) -> bool {
    wanted.iter().all(|(k, v)| meta.get(k) == Some(v))
}

pub async fn register(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let mut register: RegisterRequest = decode_body(&body)?;
    if let Some(service) = register.service.as_mut() {
        if service
            .connect
            .as_ref()
            .is_some_and(|c| c.sidecar_service.is_some())
        {
            return Err(ApiError::bad_request(
                "Service.Connect.SidecarService is only valid for agent registrations (/v1/agent/service/register)",
            ));
        }
    }
    let mut opts = req.write_options();
    if opts.datacenter.is_empty() {
        opts.datacenter = register.datacenter.clone();
    }
    st.agent.rpc().catalog_register(&opts, register).await?;
    Ok(json(&req.params, &true))
}

pub async fn deregister(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let deregister: DeregisterRequest = decode_body(&body)?;
    let mut opts = req.write_options();
    if opts.datacenter.is_empty() {
        opts.datacenter = deregister.datacenter.clone();
    }
    st.agent.rpc().catalog_deregister(&opts, deregister).await?;
    Ok(json(&req.params, &true))
}

pub async fn datacenters(State(st): State<AppState>, req: Req) -> ApiResult {
    Ok(json(
        &req.params,
        &st.agent.rpc().catalog_datacenters().await?,
    ))
}

pub async fn nodes(State(st): State<AppState>, req: Req) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!([])).await {
        return answer;
    }
    let opts = req.query_options()?;
    let meta_filter = node_meta_filter(&req.params)?;
    let mut result = st.agent.rpc().catalog_nodes(&opts).await?;
    result.value.retain(|n| meta_matches(&n.meta, &meta_filter));
    if crate::translate::active(&st, &opts.datacenter) {
        crate::translate::nodes(&mut result.value);
    }
    Ok(crate::translate::mark(
        &st,
        json_meta(&req.params, &result.meta, &result.value),
    ))
}

pub async fn services(State(st): State<AppState>, req: Req) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!({})).await {
        return answer;
    }
    let opts = req.query_options()?;
    let meta_filter = node_meta_filter(&req.params)?;
    let (result, cache) = if req.cached() {
        let (result, status) = st.agent.cached().catalog_services(&opts).await?;
        (result, Some(status))
    } else {
        (st.agent.rpc().catalog_services(&opts).await?, None)
    };
    let value = if meta_filter.is_empty() {
        result.value
    } else {
        // Keep the services with an instance on a node carrying the metadata
        // (read with the request's token and datacenter, not blocking).
        let plain = legate_types::QueryOptions {
            min_index: 0,
            max_wait: None,
            filter: String::new(),
            ..opts.clone()
        };
        let nodes = st.agent.rpc().catalog_nodes(&plain).await?.value;
        let mut kept = std::collections::BTreeMap::new();
        for (name, tags) in result.value {
            let instances = st
                .agent
                .rpc()
                .catalog_service_nodes(
                    &plain,
                    ServiceQuery {
                        service: name.clone(),
                        ..Default::default()
                    },
                )
                .await?
                .value;
            if instances.iter().any(|i| {
                nodes
                    .iter()
                    .any(|n| n.node == i.node && meta_matches(&n.meta, &meta_filter))
            }) {
                kept.insert(name, tags);
            }
        }
        kept
    };
    Ok(crate::cached::with_cache_status(
        json_meta(&req.params, &result.meta, &value),
        cache,
    ))
}

async fn service_rows(st: &AppState, service: String, req: Req, connect: bool) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!([])).await {
        return answer;
    }
    let opts = req.query_options()?;
    let meta_filter = node_meta_filter(&req.params)?;
    let query = ServiceQuery {
        service,
        tags: req.params.all("tag"),
        passing_only: false,
        connect,
    };
    let (mut result, cache) = if req.cached() {
        let (result, status) = st
            .agent
            .cached()
            .catalog_service_nodes(&opts, query)
            .await?;
        (result, Some(status))
    } else {
        (
            st.agent.rpc().catalog_service_nodes(&opts, query).await?,
            None,
        )
    };
    if crate::central_config::wanted(&req.params) {
        let rows = result.value.iter_mut().map(|r| {
            (
                r.service_kind.as_str(),
                r.service_name.as_str(),
                &mut r.service_proxy,
            )
        });
        crate::central_config::merge_rows(st, &opts, rows).await?;
    }
    result
        .value
        .retain(|r| meta_matches(&r.node_meta, &meta_filter));
    if crate::translate::active(st, &opts.datacenter) {
        crate::translate::service_nodes(&mut result.value);
    }
    let response = json_meta(&req.params, &result.meta, &result.value);
    Ok(crate::translate::mark(
        st,
        crate::cached::with_cache_status(response, cache),
    ))
}

pub async fn service_nodes(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    service_rows(&st, service, req, false).await
}

pub async fn connect_nodes(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    service_rows(&st, service, req, true).await
}

pub async fn node(State(st): State<AppState>, Path(node): Path<String>, req: Req) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!(null)).await {
        return answer;
    }
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.catalog_node_services(&opts, node).await })
        .await
}

pub async fn node_service_list(
    State(st): State<AppState>,
    Path(node): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let result = st
        .agent
        .rpc()
        .catalog_node_services(&opts, node.clone())
        .await?;
    match result.value {
        // With the query's headers, as Consul sets them before answering
        // (a node hidden by ACLs says so).
        None => Ok(with_meta(
            ApiError::not_found(format!("Node not found: {node:?}")).into_response(),
            &result.meta,
        )),
        Some(mut ns) => {
            if crate::central_config::wanted(&req.params) {
                let rows = ns
                    .services
                    .values_mut()
                    .filter(|s| legate_agent::central_config::applies_to(&s.kind))
                    .map(crate::central_config::instance);
                crate::central_config::merge_rows(&st, &opts, rows).await?;
            }
            let list = NodeServiceList {
                node: ns.node,
                services: ns.services.into_values().collect(),
            };
            Ok(json_meta(&req.params, &result.meta, &list))
        }
    }
}

pub async fn health_node(
    State(st): State<AppState>,
    Path(node): Path<String>,
    req: Req,
) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!([])).await {
        return answer;
    }
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.health_node_checks(&opts, node).await })
        .await
}

pub async fn health_checks(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!([])).await {
        return answer;
    }
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.health_service_checks(&opts, service).await })
        .await
}

pub async fn health_state(
    State(st): State<AppState>,
    Path(state): Path<String>,
    req: Req,
) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!([])).await {
        return answer;
    }
    let opts = req.query_options()?;
    let wanted = match state.as_str() {
        "any" => None,
        "passing" | "warning" | "critical" => HealthStatus::parse(&state),
        other => {
            return Err(ApiError::bad_request(format!(
                "Invalid check state {other:?}: must be one of any, passing, warning, critical"
            )))
        }
    };
    let result = st.agent.rpc().health_checks_in_state(&opts, wanted).await?;
    Ok(json_meta(&req.params, &result.meta, &result.value))
}

async fn health_rows(st: &AppState, service: String, req: Req, connect: bool) -> ApiResult {
    if let Some(answer) = req.peer_empty(serde_json::json!([])).await {
        return answer;
    }
    let opts = req.query_options()?;
    let meta_filter = node_meta_filter(&req.params)?;
    let passing_only = req.params.bool("passing")?.unwrap_or(false);
    let query = ServiceQuery {
        service,
        tags: req.params.all("tag"),
        passing_only,
        connect,
    };
    let (mut result, cache) = if req.cached() {
        let (result, status) = st.agent.cached().health_service_nodes(&opts, query).await?;
        (result, Some(status))
    } else {
        (
            st.agent.rpc().health_service_nodes(&opts, query).await?,
            None,
        )
    };
    if crate::central_config::wanted(&req.params) {
        let rows = result
            .value
            .iter_mut()
            .filter(|r| legate_agent::central_config::applies_to(&r.service.kind))
            .map(|r| crate::central_config::instance(&mut r.service));
        crate::central_config::merge_rows(st, &opts, rows).await?;
    }
    result
        .value
        .retain(|r| meta_matches(&r.node.meta, &meta_filter));
    if crate::translate::active(st, &opts.datacenter) {
        crate::translate::check_service_nodes(&mut result.value);
    }
    let response = json_meta(&req.params, &result.meta, &result.value);
    Ok(crate::translate::mark(
        st,
        crate::cached::with_cache_status(response, cache),
    ))
}

pub async fn health_service(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    health_rows(&st, service, req, false).await
}

pub async fn health_connect(
    State(st): State<AppState>,
    Path(service): Path<String>,
    req: Req,
) -> ApiResult {
    health_rows(&st, service, req, true).await
}
