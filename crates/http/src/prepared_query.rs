//! `/v1/query`: prepared queries — create, list, read, replace, delete,
//! execute and explain, in Consul's shapes (execute and explain carry the
//! read's metadata in their bodies too, as Consul's structs do).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use legate_types::prepared_query::{ExecuteRequest, PreparedQuery, PreparedQueryOp};
use legate_types::QueryMeta;
use serde::Serialize;
use serde_json::{json, Value};

use crate::util::{decode_body, json, json_meta, ApiError, ApiResult};
use crate::{AppState, Req};

async fn apply(
    st: &AppState,
    req: &Req,
    op: PreparedQueryOp,
    query: PreparedQuery,
) -> Result<String, ApiError> {
    let opts = req.write_options();
    Ok(st
        .agent
        .rpc()
        .prepared_query_apply(&opts, op, query)
        .await?)
}

/// A query definition with its keys in any case, as Go decodes them: the
/// keys inside `Service.Failover` too (the key canonicalization leaves a
/// `Failover` object's keys alone, which in resolvers are subset names).
fn decode_query(body: &[u8]) -> Result<PreparedQuery, ApiError> {
    let mut value: Value = decode_body(body)?;
    if let Some(Value::Object(failover)) =
        value.get_mut("Service").and_then(|s| s.get_mut("Failover"))
    {
        *failover = std::mem::take(failover)
            .into_iter()
            .map(|(k, v)| (legate_types::keys::canonical_key(&k), v))
            .collect();
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))
}

/// `POST /v1/query`: `{"ID": …}`.
pub async fn create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let query = decode_query(&body)?;
    let id = apply(&st, &req, PreparedQueryOp::Create, query).await?;
    Ok(json(&req.params, &json!({ "ID": id })))
}

/// `GET /v1/query`: every query the token may read, `[]` when none.
pub async fn list(State(st): State<AppState>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.prepared_query_list(&opts).await })
        .await
}

/// `GET /v1/query/:id`: a list of one.
pub async fn get(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.prepared_query_get(&opts, id).await })
        .await
}

/// `PUT /v1/query/:id`: a full replacement; the ID is the URL's.
pub async fn update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    let mut query = decode_query(&body)?;
    query.id = id;
    apply(&st, &req, PreparedQueryOp::Update, query).await?;
    Ok(StatusCode::OK.into_response())
}

/// `DELETE /v1/query/:id`.
pub async fn delete(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    let query = PreparedQuery {
        id,
        ..Default::default()
    };
    apply(&st, &req, PreparedQueryOp::Delete, query).await?;
    Ok(StatusCode::OK.into_response())
}

/// Go's `strconv.ParseBool`.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `value`'s JSON object with the read's metadata beside its fields, as
/// Consul's response structs embed `QueryMeta`.
pub(crate) fn with_meta_fields<T: Serialize>(value: &T, meta: &QueryMeta) -> Value {
    let mut object = serde_json::to_value(value).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut object {
        fields.insert("Index".into(), json!(meta.index));
        fields.insert(
            "LastContact".into(),
            json!(meta.last_contact.as_nanos() as u64),
        );
        fields.insert("KnownLeader".into(), json!(meta.known_leader));
        fields.insert(
            "ConsistencyLevel".into(),
            json!(meta.consistency.header_value()),
        );
        fields.insert("NotModified".into(), json!(false));
        fields.insert("Backend".into(), json!(0));
        fields.insert(
            "ResultsFilteredByACLs".into(),
            json!(meta.results_filtered_by_acls),
        );
    }
    object
}

/// `GET /v1/query/:id-or-name/execute?near=&limit=&connect`.
pub async fn execute(
    State(st): State<AppState>,
    Path(id_or_name): Path<String>,
    req: Req,
) -> ApiResult {
    let mut opts = req.query_options()?;
    if opts.source_ip.is_empty() {
        // The query's own `Near` may be `_ip`.
        opts.source_ip = req.client_ip();
    }
    // Consul's parse errors leave as 500s; a negative limit is no limit.
    let limit = match req.params.get("limit") {
        None | Some("") => 0,
        Some(text) => text.parse::<i64>().map_err(|_| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("Bad limit: strconv.Atoi: parsing {text:?}: invalid syntax"),
        })?,
    }
    .max(0) as usize;
    // `?connect` counts only with a true value (Go's ParseBool).
    let connect = match req.params.get("connect") {
        None | Some("") => false,
        Some(text) => go_bool(text).ok_or_else(|| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!(
                "Error parsing 'connect' value: strconv.ParseBool: parsing {text:?}: invalid syntax"
            ),
        })?,
    };
    let request = ExecuteRequest {
        id_or_name,
        limit,
        connect,
        agent_node: req.agent_node.clone(),
    };
    let (mut result, cache) = if req.cached() {
        let control = req.cache_control()?;
        let (result, status) = st
            .agent
            .query_cache()
            .execute(&opts, request, control)
            .await?;
        (result, Some(status))
    } else {
        let result = st
            .agent
            .rpc()
            .prepared_query_execute(&opts, request)
            .await?;
        (result, None)
    };
    let from = result.value.datacenter.clone();
    if crate::translate::active(&st, &from) {
        crate::translate::check_service_nodes(&mut result.value.nodes);
    }
    let body = with_meta_fields(&result.value, &result.meta);
    let response = json_meta(&req.params, &result.meta, &body);
    Ok(crate::translate::mark(
        &st,
        crate::cached::with_cache_status(response, cache),
    ))
}

/// `GET /v1/query/:id-or-name/explain`.
pub async fn explain(
    State(st): State<AppState>,
    Path(id_or_name): Path<String>,
    req: Req,
) -> ApiResult {
    let opts = req.query_options()?;
    let result = st
        .agent
        .rpc()
        .prepared_query_explain(&opts, id_or_name)
        .await?;
    let body = with_meta_fields(&result.value, &result.meta);
    Ok(json_meta(&req.params, &result.meta, &body))
}

/// Consul's handler takes everything after `/v1/query/` (less an
/// `/execute` or `/explain` suffix) as the query's ID or name, so a query
/// named `team/web` executes at `/v1/query/team/web/execute`. The router's
/// `{id}` is one segment, so such a path is rewritten before routing with
/// the name's slashes percent-encoded; the `Path` extractor decodes them
/// back. Any other path is left as it is.
pub fn encode_slashed_query_names(mut request: axum::extract::Request) -> axum::extract::Request {
    let Some(rewritten) = slashed_query_path(request.uri().path()) else {
        return request;
    };
    let path_and_query = match request.uri().query() {
        Some(query) => format!("{rewritten}?{query}"),
        None => rewritten,
    };
    let mut parts = request.uri().clone().into_parts();
    if let Ok(value) = path_and_query.parse() {
        parts.path_and_query = Some(value);
        if let Ok(uri) = axum::http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

/// The path with the query name's slashes encoded, when it has any.
fn slashed_query_path(path: &str) -> Option<String> {
    let inner = path.strip_prefix("/v1/query/")?;
    let (name, suffix) = ["/execute", "/explain"]
        .iter()
        .find_map(|suffix| inner.strip_suffix(suffix).map(|name| (name, *suffix)))
        .unwrap_or((inner, ""));
    if name.is_empty() || !name.contains('/') {
        return None;
    }
    Some(format!("/v1/query/{}{suffix}", name.replace('/', "%2F")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slashes_in_a_query_name_are_encoded_and_nothing_else_changes() {
        assert_eq!(
            slashed_query_path("/v1/query/team/web/execute").as_deref(),
            Some("/v1/query/team%2Fweb/execute")
        );
        assert_eq!(
            slashed_query_path("/v1/query/a/b/c/explain").as_deref(),
            Some("/v1/query/a%2Fb%2Fc/explain")
        );
        assert_eq!(
            slashed_query_path("/v1/query/a/b").as_deref(),
            Some("/v1/query/a%2Fb")
        );
        for unchanged in [
            "/v1/query/web/execute",
            "/v1/query/web",
            "/v1/query",
            "/v1/query//execute",
            "/v1/kv/a/b",
        ] {
            assert_eq!(slashed_query_path(unchanged), None, "{unchanged}");
        }
    }
}
