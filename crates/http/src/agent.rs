//! `/v1/agent/*`: the local agent's services, checks, health, maintenance
//! and lifecycle.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use legate_types::duration::parse_go_duration;
use legate_types::{CheckDefinition, HealthCheck, HealthStatus, NodeService, ServiceDefinition};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::agent_acl::{
    check, check_agent, check_for_check, check_service_registration, mark_filtered, may_read,
};
use crate::util::{decode_body, json, ApiError, ApiResult, Params};
use crate::{AppState, Req};
use legate_acl::{Access, Resource};

/// An agent service as `/v1/agent/services` shows it: no Raft indexes, plus
/// the datacenter.
fn agent_service_json(service: &NodeService, datacenter: &str) -> Value {
    let mut value = serde_json::to_value(service).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("CreateIndex");
        map.remove("ModifyIndex");
        map.insert("Datacenter".into(), Value::String(datacenter.to_string()));
    }
    value
}

fn content_hash(value: &Value) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn filtered<T: serde::Serialize>(
    rows: BTreeMap<String, T>,
    filter: Option<&str>,
    shape: &legate_filter::Shape,
) -> Result<BTreeMap<String, T>, ApiError> {
    let Some(filter) = filter.filter(|f| !f.trim().is_empty()) else {
        return Ok(rows);
    };
    let expr = legate_filter::Expr::parse_for(filter, shape)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(rows
        .into_iter()
        .filter(|(_, row)| expr.matches_row(row))
        .collect())
}

/// Whether a query parameter asks for the WAN pool (`?wan=1`; Consul
/// reads any non-empty value as yes).
fn wants_wan(req: &Req) -> bool {
    req.params.get("wan").is_some_and(|v| !v.is_empty())
}

pub async fn members(State(st): State<AppState>, req: Req) -> ApiResult {
    let membership = if wants_wan(&req) {
        if req
            .params
            .get("segment")
            .is_some_and(|s| !s.is_empty() && s != "_all")
        {
            return Err(ApiError::bad_request(
                "Cannot provide a segment with wan=true",
            ));
        }
        // A client agent is in no WAN pool: an empty list, as Consul's.
        match st.agent.wan_membership() {
            Some(wan) => wan,
            None => return Ok(json(&req.params, &Vec::<Value>::new())),
        }
    } else {
        match st.agent.membership() {
            Some(membership) => membership,
            None => {
                // Without gossip (-dev) the only member is this agent.
                let token = crate::agent_acl::token(&req);
                let node = st.agent.config().node_name.clone();
                let visible = may_read(&st, &token, Resource::Node, &node).await;
                let rows = if visible {
                    vec![crate::agent_self::member(&st)]
                } else {
                    Vec::new()
                };
                return Ok(mark_filtered(json(&req.params, &rows), !visible));
            }
        }
    };
    let token = crate::agent_acl::token(&req);
    let all = membership.members();
    let total = all.len();
    let mut visible = Vec::with_capacity(total);
    for m in all {
        // WAN members are `<node>.<dc>`: the rule names the node.
        let node = m.name.split('.').next().unwrap_or(&m.name).to_string();
        if may_read(&st, &token, Resource::Node, &node).await {
            visible.push(m);
        }
    }
    let filtered = visible.len() < total;
    let rows: Vec<Value> = visible
        .into_iter()
        .map(|m| {
            json!({
                "Name": m.name, "Addr": m.addr, "Port": m.port, "Tags": m.tags,
                "Status": m.status as u8,
                "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
                "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
            })
        })
        .collect();
    Ok(mark_filtered(json(&req.params, &rows), filtered))
}

pub async fn services(State(st): State<AppState>, req: Req) -> ApiResult {
    let dc = st.agent.config().datacenter.clone();
    let token = crate::agent_acl::token(&req);
    let mut all = st.agent.services();
    st.agent.with_central_config(all.values_mut()).await;
    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    for (id, s) in all.iter() {
        if may_read(&st, &token, Resource::Service, &s.service).await {
            rows.insert(id.clone(), agent_service_json(s, &dc));
        }
    }
    let acl_filtered = rows.len() < all.len();
    Ok(mark_filtered(
        json(
            &req.params,
            &filtered(
                rows,
                req.params.get("filter"),
                legate_filter::rows::node_service(),
            )?,
        ),
        acl_filtered,
    ))
}

pub async fn service(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    let dc = st.agent.config().datacenter.clone();
    let wanted_hash = req.params.get("hash").unwrap_or("").to_string();
    let wait = match req.params.get("wait") {
        None | Some("") => Duration::from_secs(300),
        Some(w) => parse_go_duration(w)
            .map_err(|_| ApiError::bad_request(format!("Invalid wait time {w:?}")))?
            .min(Duration::from_secs(600)),
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut changes = st.agent.local_changes();
    if let Some(service) = st.agent.service(&id) {
        check(&st, &req, Resource::Service, &service.service, Access::Read).await?;
    }
    loop {
        changes.borrow_and_update();
        let Some(mut service) = st.agent.service(&id) else {
            return Err(ApiError::not_found(format!("unknown service ID: {id}")));
        };
        st.agent
            .with_central_config(std::iter::once(&mut service))
            .await;
        let mut body = agent_service_json(&service, &dc);
        let hash = content_hash(&body);
        if let Value::Object(map) = &mut body {
            map.insert("ContentHash".into(), Value::String(hash.clone()));
        }
        if wanted_hash.is_empty() || wanted_hash != hash || tokio::time::Instant::now() >= deadline
        {
            let mut response = json(&req.params, &body);
            if let Ok(v) = HeaderValue::from_str(&hash) {
                response.headers_mut().insert("x-consul-contenthash", v);
            }
            return Ok(response);
        }
        let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
    }
}

pub async fn service_register(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let def: ServiceDefinition = decode_body(&body)?;
    check_service_registration(&st, &req, &def).await?;
    let token = crate::util::token(&req.headers, &req.params);
    st.agent
        .register_service(def, &token, req.params.flag("replace-existing-checks"))?;
    Ok(StatusCode::OK.into_response())
}

pub async fn service_deregister(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    if let Some(service) = st.agent.service(&id) {
        check(
            &st,
            &req,
            Resource::Service,
            &service.service,
            Access::Write,
        )
        .await?;
    }
    st.agent.deregister_service(&id)?;
    Ok(StatusCode::OK.into_response())
}

fn enable_param(params: &Params) -> Result<bool, ApiError> {
    match params.get("enable") {
        None | Some("") => Err(ApiError::bad_request("Missing value for enable")),
        Some(_) => Ok(params.bool("enable")?.unwrap_or(false)),
    }
}

pub async fn service_maintenance(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    let enable = enable_param(&req.params)?;
    if let Some(service) = st.agent.service(&id) {
        check(
            &st,
            &req,
            Resource::Service,
            &service.service,
            Access::Write,
        )
        .await?;
    }
    st.agent
        .service_maintenance(&id, enable, req.params.get("reason").unwrap_or(""))?;
    Ok(StatusCode::OK.into_response())
}

pub async fn node_maintenance(State(st): State<AppState>, req: Req) -> ApiResult {
    let enable = enable_param(&req.params)?;
    let node = st.agent.config().node_name.clone();
    check(&st, &req, Resource::Node, &node, Access::Write).await?;
    st.agent
        .node_maintenance(enable, req.params.get("reason").unwrap_or(""))?;
    Ok(StatusCode::OK.into_response())
}

pub async fn checks(State(st): State<AppState>, req: Req) -> ApiResult {
    let token = crate::agent_acl::token(&req);
    let all: BTreeMap<String, HealthCheck> = st.agent.checks();
    let total = all.len();
    let mut rows = BTreeMap::new();
    for (id, c) in all {
        let allowed = if c.service_id.is_empty() {
            may_read(&st, &token, Resource::Node, &c.node).await
        } else {
            may_read(&st, &token, Resource::Service, &c.service_name).await
        };
        if allowed {
            rows.insert(id, c);
        }
    }
    let acl_filtered = rows.len() < total;
    Ok(mark_filtered(
        json(
            &req.params,
            &filtered(
                rows,
                req.params.get("filter"),
                legate_filter::rows::health_check(),
            )?,
        ),
        acl_filtered,
    ))
}

pub async fn check_register(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let def: CheckDefinition = decode_body(&body)?;
    if def.name.is_empty() {
        return Err(ApiError::bad_request("Missing check name"));
    }
    check_for_check(&st, &req, &def.service_id).await?;
    let token = crate::util::token(&req.headers, &req.params);
    st.agent.register_check(def, &token)?;
    Ok(StatusCode::OK.into_response())
}

pub async fn check_deregister(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    if let Some(c) = st.agent.checks().get(&id) {
        check_for_check(&st, &req, &c.service_id).await?;
    }
    st.agent.deregister_check(&id)?;
    Ok(StatusCode::OK.into_response())
}

async fn ttl_update(st: &AppState, id: &str, status: HealthStatus, req: Req) -> ApiResult {
    if let Some(c) = st.agent.checks().get(id) {
        check_for_check(st, &req, &c.service_id).await?;
    }
    let note = req.params.get("note").unwrap_or("");
    st.agent.update_ttl_check(id, status, note)?;
    Ok(StatusCode::OK.into_response())
}

pub async fn check_pass(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    ttl_update(&st, &id, HealthStatus::Passing, req).await
}

pub async fn check_warn(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    ttl_update(&st, &id, HealthStatus::Warning, req).await
}

pub async fn check_fail(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    ttl_update(&st, &id, HealthStatus::Critical, req).await
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CheckUpdate {
    #[serde(default)]
    status: String,
    #[serde(default)]
    output: String,
}

pub async fn check_update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    let update: CheckUpdate = decode_body(&body)?;
    let status = HealthStatus::parse(&update.status)
        .filter(|s| *s != HealthStatus::Maintenance)
        .ok_or_else(|| {
            ApiError::bad_request(format!("Invalid check status: '{}'", update.status))
        })?;
    if let Some(c) = st.agent.checks().get(&id) {
        check_for_check(&st, &req, &c.service_id).await?;
    }
    st.agent.update_ttl_check(&id, status, &update.output)?;
    Ok(StatusCode::OK.into_response())
}

fn health_status_code(status: HealthStatus) -> StatusCode {
    match status {
        HealthStatus::Passing => StatusCode::OK,
        HealthStatus::Warning => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn service_health_body(st: &AppState, id: &str) -> Option<(HealthStatus, Value)> {
    let (service, checks) = st.agent.service_with_checks(id)?;
    let status = legate_types::aggregate_status(checks.iter());
    let body = json!({
        "AggregatedStatus": status.as_str(),
        "Service": agent_service_json(&service, &st.agent.config().datacenter),
        "Checks": checks,
    });
    Some((status, body))
}

fn health_response(params: &Params, status: HealthStatus, body: &Value) -> Response {
    let mut response = if params.get("format") == Some("text") {
        let mut r = status.as_str().to_string().into_response();
        r.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    } else {
        json(params, body)
    };
    *response.status_mut() = health_status_code(status);
    response
}

pub async fn health_by_id(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    if let Some(service) = st.agent.service(&id) {
        check(&st, &req, Resource::Service, &service.service, Access::Read).await?;
    }
    match service_health_body(&st, &id) {
        Some((status, body)) => Ok(health_response(&req.params, status, &body)),
        None => {
            let mut response = if req.params.get("format") == Some("text") {
                format!("ServiceId {id} not found").into_response()
            } else {
                json(
                    &req.params,
                    &json!({"AggregatedStatus": "critical", "Service": null, "Checks": null}),
                )
            };
            *response.status_mut() = StatusCode::NOT_FOUND;
            Ok(response)
        }
    }
}

pub async fn health_by_name(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
) -> ApiResult {
    check(&st, &req, Resource::Service, &name, Access::Read).await?;
    let ids: Vec<String> = st
        .agent
        .services()
        .values()
        .filter(|s| s.service == name)
        .map(|s| s.id.clone())
        .collect();
    if ids.is_empty() {
        let mut response = if req.params.get("format") == Some("text") {
            format!("ServiceName {name} Not Found").into_response()
        } else {
            json(&req.params, &Vec::<Value>::new())
        };
        *response.status_mut() = StatusCode::NOT_FOUND;
        return Ok(response);
    }
    let mut worst = HealthStatus::Passing;
    let mut bodies = Vec::new();
    for id in ids {
        if let Some((status, body)) = service_health_body(&st, &id) {
            if status.severity() > worst.severity() {
                worst = status;
            }
            bodies.push(body);
        }
    }
    Ok(health_response(&req.params, worst, &Value::Array(bodies)))
}

pub async fn reload(State(st): State<AppState>, req: Req) -> ApiResult {
    check_agent(&st, &req, Access::Write).await?;
    st.agent.reload()?;
    Ok(StatusCode::OK.into_response())
}

pub async fn leave(State(st): State<AppState>, req: Req) -> ApiResult {
    check_agent(&st, &req, Access::Write).await?;
    st.agent.request_shutdown();
    Ok(StatusCode::OK.into_response())
}

/// `PUT /v1/agent/force-leave/:node`: a failed member becomes left.
/// `/v1/operator/keyring`: GET lists the keys with how many members hold
/// each; POST installs, PUT makes primary, DELETE removes (`{"Key": ...}`),
/// spread to every member by gossip.
pub async fn keyring(
    State(st): State<AppState>,
    method: axum::http::Method,
    req: Req,
    body: Bytes,
) -> ApiResult {
    use legate_agent::membership::KeyringOp;
    let access = if method == axum::http::Method::GET {
        Access::Read
    } else {
        Access::Write
    };
    check(&st, &req, Resource::Keyring, "", access).await?;
    let disabled = || ApiError::bad_request("Gossip encryption is not enabled on this agent");
    let membership = st.agent.membership().ok_or_else(disabled)?;
    let op = match method.as_str() {
        "GET" => {
            // The WAN pool first (servers), then this datacenter's LAN, as
            // Consul lists them.
            let mut pools = Vec::new();
            if let Some(status) = st.agent.wan_membership().and_then(|w| w.keyring()) {
                pools.push(keyring_pool(&st, true, &status));
            }
            let status = membership.keyring().ok_or_else(disabled)?;
            pools.push(keyring_pool(&st, false, &status));
            return Ok(json(&req.params, &pools));
        }
        "POST" => KeyringOp::Install,
        "PUT" => KeyringOp::Use,
        "DELETE" => KeyringOp::Remove,
        _ => return Err(ApiError::bad_request("Method not allowed")),
    };
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct KeyBody {
        key: String,
    }
    let KeyBody { key } = decode_body(&body)?;
    if key.trim().is_empty() {
        return Err(ApiError::bad_request("Missing Key"));
    }
    // The LAN's keyring changes on every member; each server mirrors
    // the change into the WAN pool's keyring.
    membership
        .change_keyring(op, &key)
        .await
        .map_err(ApiError::bad_request)?;
    Ok(StatusCode::OK.into_response())
}

/// One pool's row of `GET /v1/operator/keyring`.
fn keyring_pool(
    st: &AppState,
    wan: bool,
    status: &legate_agent::membership::KeyringStatus,
) -> Value {
    let keys: serde_json::Map<String, Value> = status
        .keys
        .iter()
        .map(|(k, n)| (k.clone(), json!(n)))
        .collect();
    let primary: serde_json::Map<String, Value> = status
        .keys
        .first()
        .map(|(k, n)| (k.clone(), json!(n)))
        .into_iter()
        .collect();
    json!({
        "WAN": wan,
        "Datacenter": st.agent.config().datacenter,
        "Segment": "",
        "Partition": "",
        "Keys": keys,
        "PrimaryKeys": primary,
        "NumNodes": status.num_nodes,
        "Messages": {},
    })
}

pub async fn force_leave(
    State(st): State<AppState>,
    Path(node): Path<String>,
    req: Req,
) -> ApiResult {
    check(&st, &req, Resource::Operator, "", Access::Write).await?;
    // Consul reads `?prune` and `?wan` by their presence.
    let prune = req.params.get("prune").is_some();
    let wan = req.params.get("wan").is_some();
    let known = match (wan, st.agent.membership(), st.agent.wan_membership()) {
        (true, _, Some(pool)) => pool.force_leave(&node, prune).await,
        (true, _, None) => false,
        (false, Some(membership), _) => membership.force_leave(&node, prune).await,
        // Without gossip (-dev) the only member is this agent.
        (false, None, _) => node == st.agent.config().node_name,
    };
    if !known {
        // Consul's text and status (500).
        return Err(ApiError::internal(format!(
            "agent: No node found with name '{node}'"
        )));
    }
    Ok(StatusCode::OK.into_response())
}

/// `PUT /v1/agent/join/:address?wan=1`: a server contacts a WAN member
/// at `address` (port 8302 unless given); a client agent answers
/// Consul's error.
async fn join_wan(st: &AppState, address: String) -> ApiResult {
    let Some(pool) = st.agent.wan_membership() else {
        return Err(ApiError::internal("Must be a server to join WAN cluster"));
    };
    if st.agent.config().mesh_federation.enabled {
        return Err(ApiError::internal(
            "WAN join is disabled when wan federation via mesh gateways is enabled",
        ));
    }
    match pool.join(vec![address.clone()]).await {
        Ok(n) if n > 0 => Ok(StatusCode::OK.into_response()),
        Ok(_) => Err(ApiError::internal(format!(
            "1 error occurred:\n\t* Failed to join {address}: no member answered"
        ))),
        Err(e) => Err(ApiError::internal(format!(
            "1 error occurred:\n\t* Failed to join {address}: {e}"
        ))),
    }
}

/// `PUT /v1/agent/join/:address`: contacts a member at `address`.
pub async fn join(State(st): State<AppState>, Path(address): Path<String>, req: Req) -> ApiResult {
    check_agent(&st, &req, Access::Write).await?;
    if wants_wan(&req) {
        return join_wan(&st, address).await;
    }
    // Consul's (memberlist's) errors, in its multierror form.
    let failed = |why: String| ApiError::internal(format!("1 error occurred:\n\t* {why}\n\n"));
    let with_port = if address.parse::<std::net::SocketAddr>().is_ok()
        || address
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.contains(':') && port.parse::<u16>().is_ok())
    {
        address.clone()
    } else {
        format!("{address}:8301")
    };
    if let Err(e) = tokio::net::lookup_host(with_port.as_str()).await {
        return Err(failed(format!("Failed to resolve {address}: {e}")));
    }
    let Some(membership) = st.agent.membership() else {
        return Err(failed(format!(
            "Failed to join {address}: this agent runs without gossip (-dev)"
        )));
    };
    match membership.join(vec![address.clone()]).await {
        Ok(n) if n > 0 => Ok(StatusCode::OK.into_response()),
        Ok(_) => Err(ApiError::internal(format!(
            "1 error occurred:\n\t* Failed to join {address}: no member answered"
        ))),
        Err(e) => Err(ApiError::bad_request(e)),
    }
}
