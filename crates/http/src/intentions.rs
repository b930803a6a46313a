//! `/v1/connect/intentions/*` (legacy by-ID and by-name) and
//! `/v1/agent/connect/authorize`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use legate_types::intention::{AuthorizeRequest, Intention, IntentionLookup, IntentionOp, MatchBy};
use legate_types::keys::canonicalize_keys;
use serde_json::{json, Map, Value};

use crate::util::{json, json_meta, ApiError, ApiResult};
use crate::{AppState, Req};

/// A service name as the intentions API takes it: `name` or
/// `default/name` (namespaces other than `default` need Enterprise).
fn target(value: &str, what: &str) -> Result<String, ApiError> {
    let parts: Vec<&str> = value.split('/').collect();
    match parts.as_slice() {
        [name] => Ok(name.to_string()),
        [ns, name] if *ns == "default" || *ns == "*" && *name == "*" => Ok(name.to_string()),
        [_, _] | [_, _, _] => Err(ApiError::bad_request(format!(
            "Invalid intention {what} {value:?}: namespaces and partitions other than \"default\" need Consul Enterprise"
        ))),
        _ => Err(ApiError::bad_request(format!(
            "Invalid intention {what} {value:?}: input can contain at most two '/'"
        ))),
    }
}

fn required(req: &Req, key: &str) -> Result<String, ApiError> {
    match req.params.get(key) {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err(ApiError::bad_request(format!(
            "required query parameter '{key}' not set"
        ))),
    }
}

fn decode_intention(body: &[u8]) -> Result<Intention, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Intention::default());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    serde_json::from_value(canonicalize_keys(value))
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))
}

fn not_found() -> ApiError {
    ApiError::not_found("Intention not found")
}

/// `GET /v1/connect/intentions`.
pub async fn list(State(st): State<AppState>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.intention_list(&opts).await })
        .await
}

/// `POST /v1/connect/intentions`: a legacy intention; answers `{"ID": ...}`.
pub async fn create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let mut intention = decode_intention(&body)?;
    intention.source_name = target(&intention.source_name, "source")?;
    intention.destination_name = target(&intention.destination_name, "destination")?;
    let id = st
        .agent
        .rpc()
        .intention_apply(&req.write_options(), IntentionOp::Create(intention))
        .await?;
    Ok(json(&req.params, &json!({ "ID": id })))
}

/// `GET /v1/connect/intentions/:id`.
pub async fn get_by_id(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    if uuid::Uuid::parse_str(&id).is_err() {
        return Err(ApiError::bad_request(format!(
            "Intention lookup failed: {id:?} is not a UUID"
        )));
    }
    let opts = req.query_options()?;
    let result = st
        .agent
        .rpc()
        .intention_get(&opts, IntentionLookup::Id(id))
        .await?;
    let intention = result.value.ok_or_else(not_found)?;
    Ok(json_meta(&req.params, &result.meta, &intention))
}

/// `PUT /v1/connect/intentions/:id`.
pub async fn update_by_id(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    let mut intention = decode_intention(&body)?;
    intention.id = id;
    intention.source_name = target(&intention.source_name, "source")?;
    intention.destination_name = target(&intention.destination_name, "destination")?;
    let id = st
        .agent
        .rpc()
        .intention_apply(&req.write_options(), IntentionOp::Update(intention))
        .await?;
    Ok(json(&req.params, &json!({ "ID": id })))
}

/// `DELETE /v1/connect/intentions/:id`.
pub async fn delete_by_id(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    st.agent
        .rpc()
        .intention_apply(&req.write_options(), IntentionOp::Delete(id))
        .await?;
    Ok(json(&req.params, &true))
}

fn exact_pair(req: &Req) -> Result<(String, String), ApiError> {
    let source = target(&required(req, "source")?, "source")?;
    let destination = target(&required(req, "destination")?, "destination")?;
    Ok((source, destination))
}

/// `GET /v1/connect/intentions/exact?source=&destination=`.
pub async fn get_exact(State(st): State<AppState>, req: Req) -> ApiResult {
    let (source, destination) = exact_pair(&req)?;
    let opts = req.query_options()?;
    let result = st
        .agent
        .rpc()
        .intention_get(
            &opts,
            IntentionLookup::Exact {
                source,
                destination,
            },
        )
        .await?;
    let intention = result.value.ok_or_else(not_found)?;
    Ok(json_meta(&req.params, &result.meta, &intention))
}

/// `PUT /v1/connect/intentions/exact?source=&destination=`: create or
/// replace by name (names come from the URL, not the body).
pub async fn put_exact(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let (source, destination) = exact_pair(&req)?;
    let mut intention = decode_intention(&body)?;
    intention.id.clear();
    intention.source_name = source;
    intention.destination_name = destination;
    st.agent
        .rpc()
        .intention_apply(&req.write_options(), IntentionOp::Upsert(intention))
        .await?;
    Ok(json(&req.params, &true))
}

/// `DELETE /v1/connect/intentions/exact?source=&destination=`.
pub async fn delete_exact(State(st): State<AppState>, req: Req) -> ApiResult {
    let (source, destination) = exact_pair(&req)?;
    st.agent
        .rpc()
        .intention_apply(
            &req.write_options(),
            IntentionOp::DeleteExact {
                source,
                destination,
            },
        )
        .await?;
    Ok(json(&req.params, &true))
}

/// `GET /v1/connect/intentions/match?by=source|destination&name=...`.
pub async fn matches(State(st): State<AppState>, req: Req) -> ApiResult {
    let by = match req.params.all("by").as_slice() {
        [] => {
            return Err(ApiError::bad_request(
                "required query parameter 'by' not set",
            ))
        }
        [one] => match one.as_str() {
            "source" => MatchBy::Source,
            "destination" => MatchBy::Destination,
            _ => {
                return Err(ApiError::bad_request(
                    "'by' parameter must be one of 'source' or 'destination'",
                ))
            }
        },
        _ => return Err(ApiError::bad_request("'by' parameter must be given once")),
    };
    let names = req.params.all("name");
    if names.is_empty() {
        return Err(ApiError::bad_request(
            "required query parameter 'name' not set",
        ));
    }
    let names = names
        .iter()
        .map(|n| target(n, "name"))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = req.query_options()?;
    let result = st.agent.rpc().intention_match(&opts, by, names).await?;
    let mut out = Map::new();
    for (name, list) in result.value {
        // Consul answers null for a name nothing matches.
        let value = if list.is_empty() {
            Value::Null
        } else {
            serde_json::to_value(list).unwrap_or(Value::Null)
        };
        out.insert(name, value);
    }
    Ok(json_meta(&req.params, &result.meta, &out))
}

/// `GET /v1/connect/intentions/check?source=&destination=`.
pub async fn check(State(st): State<AppState>, req: Req) -> ApiResult {
    let (source, destination) = exact_pair(&req)?;
    if let Some(t) = req.params.get("source-type") {
        if t != "consul" {
            return Err(ApiError::bad_request(format!(
                "unsupported SourceType: {t:?}"
            )));
        }
    }
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.intention_check(&opts, source, destination).await })
        .await
}

/// `POST /v1/agent/connect/authorize`.
pub async fn authorize(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let request: AuthorizeRequest = serde_json::from_value(canonicalize_keys(value))
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    crate::agent_acl::check(
        &st,
        &req,
        legate_acl::Resource::Service,
        &request.target,
        legate_acl::Access::Write,
    )
    .await?;
    let response = st.agent.authorize(&request).await?;
    Ok(json(&req.params, &response))
}
