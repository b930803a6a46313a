//! `/v1/session/*`, `/v1/status/*` and `/v1/event/*`.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use base64::Engine;
use legate_agent::UserEvent;
use legate_types::event::USER_EVENT_SIZE_LIMIT;
use legate_types::rpc::{AutopilotConfiguration, SnapshotArchive};
use legate_types::{Session, SessionCreateRequest, DEFAULT_LOCK_DELAY};
use serde_json::json;

use crate::util::{decode_body, json, json_meta, ApiError, ApiResult};
use crate::{AppState, Req};

pub async fn session_create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let create: SessionCreateRequest = decode_body(&body)?;
    let node = if create.node.is_empty() {
        st.agent.config().node_name.clone()
    } else {
        create.node.clone()
    };
    let node_checks = match (create.node_checks, create.checks) {
        (Some(checks), _) => checks,
        (None, Some(checks)) => checks,
        (None, None) => vec!["serfHealth".to_string()],
    };
    let session = Session {
        id: String::new(),
        name: create.name,
        node,
        lock_delay: create.lock_delay.unwrap_or(DEFAULT_LOCK_DELAY).as_nanos() as u64,
        behavior: create.behavior.unwrap_or_default(),
        ttl: create.ttl,
        node_checks,
        service_checks: create.service_checks.unwrap_or_default(),
        raft: Default::default(),
    };
    let opts = req.write_options();
    let id = st.agent.rpc().session_create(&opts, session).await?;
    Ok(json(&req.params, &json!({ "ID": id })))
}

pub async fn session_destroy(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.write_options();
    st.agent.rpc().session_destroy(&opts, id).await?;
    Ok(json(&req.params, &true))
}

pub async fn session_renew(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.write_options();
    match st.agent.rpc().session_renew(&opts, id.clone()).await? {
        Some(session) => Ok(json(&req.params, &vec![session])),
        None => Err(ApiError::not_found(format!("Session id '{id}' not found"))),
    }
}

pub async fn session_info(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.session_info(&opts, id).await })
        .await
}

pub async fn session_node(
    State(st): State<AppState>,
    Path(node): Path<String>,
    req: Req,
) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.session_node(&opts, node).await })
        .await
}

pub async fn session_list(State(st): State<AppState>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.session_list(&opts).await })
        .await
}

pub async fn status_leader(State(st): State<AppState>, req: Req) -> ApiResult {
    Ok(json(&req.params, &st.agent.rpc().status_leader().await?))
}

pub async fn status_peers(State(st): State<AppState>, req: Req) -> ApiResult {
    Ok(json(&req.params, &st.agent.rpc().status_peers().await?))
}

/// `DELETE /v1/operator/raft/peer?id=|address=`.
pub async fn raft_remove_peer(State(st): State<AppState>, req: Req) -> ApiResult {
    let target = req
        .params
        .get("id")
        .or_else(|| req.params.get("address"))
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request("Must specify either ?id with the server's ID or ?address with IP:port of peer to remove"))?
        .to_string();
    st.agent
        .rpc()
        .raft_remove_peer(&req.write_options(), target)
        .await?;
    Ok(axum::response::IntoResponse::into_response(
        axum::http::StatusCode::OK,
    ))
}

/// `GET /v1/snapshot`: the state as a gzipped archive, with the index it
/// was taken at in `X-Consul-Index`.
pub async fn snapshot_save(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let saved = st.agent.rpc().snapshot_save(&opts).await?;
    let response = axum::response::IntoResponse::into_response((
        [(axum::http::header::CONTENT_TYPE, "application/x-gzip")],
        saved.value.0,
    ));
    Ok(crate::util::with_meta(response, &saved.meta))
}

/// `PUT /v1/snapshot`: replaces the state with the archive in the body.
pub async fn snapshot_restore(
    State(st): State<AppState>,
    req: Req,
    body: axum::body::Body,
) -> ApiResult {
    // One restore at a time through this agent, taken before the body is
    // read: each is held, verified (inflated and decoded) and written, and
    // a second would double that.
    let Some(_restoring) = RestoreSlot::take() else {
        // The upload is read and dropped frame by frame (never held), so
        // the client gets the answer rather than a reset connection.
        discard_body(body, SnapshotArchive::MAX_RESTORE_BYTES).await;
        return Err(ApiError {
            status: axum::http::StatusCode::TOO_MANY_REQUESTS,
            message: "Snapshot restore already in progress; try again when it has finished".into(),
        });
    };
    let limit = SnapshotArchive::MAX_RESTORE_BYTES;
    let body = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError {
            status: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "Request body too large: a snapshot restore takes at most {} MiB",
                limit >> 20
            ),
        })?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "Missing snapshot: the request body must be a snapshot archive",
        ));
    }
    st.agent
        .rpc()
        .snapshot_restore(&req.write_options(), SnapshotArchive(Vec::from(body)))
        .await?;
    Ok(axum::response::IntoResponse::into_response(
        axum::http::StatusCode::OK,
    ))
}

/// Reads and drops a request body of at most `limit` bytes.
async fn discard_body(body: axum::body::Body, limit: usize) {
    use futures::StreamExt;
    let mut frames = body.into_data_stream();
    let mut seen = 0usize;
    while let Some(Ok(chunk)) = frames.next().await {
        seen += chunk.len();
        if seen > limit {
            break;
        }
    }
}

/// Held while this agent restores a snapshot.
struct RestoreSlot;

static RESTORING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl RestoreSlot {
    fn take() -> Option<RestoreSlot> {
        RESTORING
            .compare_exchange(
                false,
                true,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
            )
            .is_ok()
            .then_some(RestoreSlot)
    }
}

impl Drop for RestoreSlot {
    fn drop(&mut self) {
        RESTORING.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// `GET /v1/operator/autopilot/health`: 200 when every server is
/// healthy, 429 otherwise (Consul's codes), the same body either way.
pub async fn autopilot_health(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let health = st.agent.rpc().autopilot_health(&opts).await?;
    let mut response = json(&req.params, &health);
    if !health.healthy {
        *response.status_mut() = axum::http::StatusCode::TOO_MANY_REQUESTS;
    }
    Ok(response)
}

/// `GET /v1/operator/autopilot/state` (Consul CE's shape): autopilot's
/// view of every server, keyed by ID, from the leader's health report and
/// the Raft configuration.
pub async fn autopilot_state(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let rpc = st.agent.rpc();
    let health = rpc.autopilot_health(&opts).await?;
    let raft = rpc.raft_configuration(&opts).await?;
    // Servers in the Raft configuration autopilot has no report of count
    // too, unhealthy and unknown to gossip.
    let unreported = raft
        .servers
        .iter()
        .filter(|r| !health.servers.iter().any(|s| s.id == r.id))
        .map(|r| legate_types::rpc::AutopilotServerHealth {
            id: r.id.clone(),
            name: r.node.clone(),
            address: r.address.clone(),
            serf_status: "none".into(),
            version: String::new(),
            leader: false,
            last_contact: "-".into(),
            last_term: 0,
            last_index: r.last_index,
            healthy: false,
            voter: r.voter,
            stable_since: String::new(),
        })
        .collect::<Vec<_>>();
    let mut servers = serde_json::Map::new();
    let mut voters = Vec::new();
    let mut leader = String::new();
    for s in health.servers.iter().chain(&unreported) {
        let status = match (s.leader, s.voter) {
            (true, _) => "leader",
            (false, true) => "voter",
            (false, false) => "non-voter",
        };
        if s.leader {
            leader = s.id.clone();
        }
        if s.voter {
            voters.push(s.id.clone());
        }
        servers.insert(
            s.id.clone(),
            serde_json::json!({
                "ID": s.id,
                "Name": s.name,
                "Address": s.address,
                "NodeStatus": s.serf_status,
                "Version": s.version,
                "LastContact": s.last_contact,
                "LastTerm": s.last_term,
                "LastIndex": s.last_index,
                "Healthy": s.healthy,
                "StableSince": s.stable_since,
                "ReadReplica": false,
                "Status": status,
                "Meta": {"consul-network-segment": ""},
                "NodeType": "voter",
            }),
        );
    }
    voters.sort();
    Ok(json(
        &req.params,
        &serde_json::json!({
            "Healthy": health.healthy,
            "FailureTolerance": health.failure_tolerance,
            "OptimisticFailureTolerance": health.failure_tolerance,
            "Servers": servers,
            "Leader": leader,
            "Voters": voters,
        }),
    ))
}

/// `GET /v1/operator/usage` (`?global`: every known datacenter, those
/// that cannot answer left out): `{"Usage": {dc: counts}}` with the read's
/// metadata beside it, as Consul's embedded `QueryMeta` gives.
pub async fn operator_usage(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let rpc = st.agent.rpc();
    let local = rpc.operator_usage(&opts).await?;
    let here = if opts.datacenter.is_empty() {
        st.agent.config().datacenter.clone()
    } else {
        opts.datacenter.clone()
    };
    let mut usage = serde_json::Map::new();
    usage.insert(
        here.clone(),
        serde_json::to_value(&local.value).unwrap_or_default(),
    );
    if req.params.has("global") {
        for dc in rpc.catalog_datacenters().await? {
            if dc == here {
                continue;
            }
            let there = legate_types::QueryOptions {
                datacenter: dc.clone(),
                min_index: 0,
                max_wait: None,
                ..opts.clone()
            };
            match rpc.operator_usage(&there).await {
                Ok(answer) => {
                    usage.insert(dc, serde_json::to_value(&answer.value).unwrap_or_default());
                }
                Err(e) => tracing::warn!(datacenter = %dc, error = %e, "operator usage: no answer"),
            }
        }
    }
    let body = crate::prepared_query::with_meta_fields(
        &serde_json::json!({ "Usage": usage }),
        &local.meta,
    );
    Ok(crate::util::json_meta(&req.params, &local.meta, &body))
}

/// `GET /v1/operator/autopilot/configuration`.
pub async fn autopilot_config(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    Ok(json(
        &req.params,
        &st.agent.rpc().autopilot_config(&opts).await?,
    ))
}

/// `PUT /v1/operator/autopilot/configuration[?cas=N]` (Consul's
/// `OperatorAutopilotConfiguration`): the body replaces the whole
/// configuration (a field left out is its zero value); durations are Go
/// duration strings or nanoseconds. Answers `true`, or with `?cas`
/// whether the write happened.
pub async fn autopilot_set_config(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let parse_error =
        |e: String| ApiError::bad_request(format!("Error parsing autopilot config: {e}"));
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(parse_error("EOF".into()));
    }
    let mut value: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| parse_error(e.to_string()))?;
    if let Some(fields) = value.as_object_mut() {
        for (name, field) in fields.iter_mut() {
            let is_duration = name.eq_ignore_ascii_case("LastContactThreshold")
                || name.eq_ignore_ascii_case("ServerStabilizationTime");
            if let (true, Some(nanos)) = (is_duration, field.as_u64()) {
                *field = json!(legate_types::duration::format_go_duration(
                    Duration::from_nanos(nanos)
                ));
            }
        }
    }
    let config: AutopilotConfiguration =
        decode_body(value.to_string().as_bytes()).map_err(|e| {
            parse_error(
                e.message
                    .trim_start_matches("Request decode failed: ")
                    .into(),
            )
        })?;
    config.to_config().map_err(parse_error)?;
    let cas = match req.params.get("cas") {
        None => None,
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|e| ApiError::bad_request(format!("Error parsing cas value: {e}")))?,
        ),
    };
    let opts = req.write_options();
    let written = st
        .agent
        .rpc()
        .autopilot_set_config(&opts, config, cas)
        .await?;
    Ok(json(&req.params, &(written || cas.is_none())))
}

/// `POST /v1/operator/raft/transfer-leader[?id=]`: answers
/// `{"Success": true}` once another server leads; failures are Consul's
/// 500 with the reason (`cannot find peer` with no other voter).
pub async fn raft_transfer_leader(State(st): State<AppState>, req: Req) -> ApiResult {
    let id = req.params.get("id").unwrap_or_default().to_string();
    let opts = req.write_options();
    st.agent.rpc().raft_transfer_leader(&opts, id).await?;
    Ok(json(&req.params, &json!({"Success": true})))
}

/// `GET /v1/operator/raft/configuration`.
pub async fn raft_configuration(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    Ok(json(
        &req.params,
        &st.agent.rpc().raft_configuration(&opts).await?,
    ))
}

pub async fn event_fire(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    if name.is_empty() {
        return Err(ApiError::bad_request("Missing name"));
    }
    for key in ["node", "service", "tag"] {
        if let Some(pattern) = req.params.get(key) {
            regex_lite_check(pattern)
                .map_err(|e| ApiError::bad_request(format!("Invalid {key} filter: {e}")))?;
        }
    }
    if req.params.get("tag").is_some() && req.params.get("service").is_none() {
        return Err(ApiError::bad_request(
            "Cannot provide tag filter without service filter.",
        ));
    }
    // Serf's limit on a user event, with Consul's text and status. Consul
    // counts the event's whole encoding (filters included) against it;
    // Legate counts the name, payload and filters, so an event that fits
    // always fits one gossip datagram.
    let filters: usize = ["node", "service", "tag"]
        .iter()
        .map(|k| req.params.get(k).map_or(0, str::len))
        .sum();
    if name.len() + body.len() + filters > USER_EVENT_SIZE_LIMIT {
        return Err(ApiError::internal(format!(
            "user event exceeds configured limit of {USER_EVENT_SIZE_LIMIT} bytes before encoding"
        )));
    }
    let event = UserEvent {
        id: String::new(),
        name,
        payload: (!body.is_empty())
            .then(|| base64::engine::general_purpose::STANDARD.encode(&body)),
        node_filter: req.params.get("node").unwrap_or("").to_string(),
        service_filter: req.params.get("service").unwrap_or("").to_string(),
        tag_filter: req.params.get("tag").unwrap_or("").to_string(),
        version: 1,
        ltime: 0,
    };
    let opts = req.write_options();
    let fired = st
        .agent
        .fire_event(&opts.datacenter, &opts.token, event)
        .await?;
    Ok(json(&req.params, &fired))
}

fn regex_lite_check(pattern: &str) -> Result<(), String> {
    legate_filter::Expr::parse(&format!("x matches {:?}", pattern))
        .map(|_| ())
        .map_err(|e| e.0)
}

pub async fn event_list(State(st): State<AppState>, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let name = req.params.get("name").unwrap_or("").to_string();
    let token = req.token();
    let mut changes = st.agent.event_changes();
    let deadline = tokio::time::Instant::now() + opts.effective_wait();
    loop {
        changes.borrow_and_update();
        let all = st.agent.events(&name);
        let listed = all.len();
        let mut events = Vec::with_capacity(listed);
        for event in all {
            if crate::agent_acl::may_read(&st, &token, legate_acl::Resource::Event, &event.name)
                .await
            {
                events.push(event);
            }
        }
        // Consul's index: the last event's id folded to 64 bits (1 when
        // there is none); a blocking list returns once it differs.
        let index = events
            .last()
            .map(|e| legate_types::event::index_of(&e.id))
            .unwrap_or(1)
            .max(1);
        if opts.min_index == 0 || index != opts.min_index || tokio::time::Instant::now() >= deadline
        {
            let meta = legate_types::QueryMeta {
                index,
                known_leader: true,
                last_contact: Duration::ZERO,
                consistency: legate_types::Consistency::Default,
                results_filtered_by_acls: events.len() < listed,
            };
            return Ok(json_meta(&req.params, &meta, &events));
        }
        let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
    }
}
