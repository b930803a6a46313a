//! `/v1/kv/*` and `/v1/txn`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, StatusCode};
use legate_types::rpc::TxnOp;
use legate_types::{KvOp, KvVerb, KV_MAX_VALUE_SIZE};

use crate::util::{decode_body, json, ApiError, ApiResult};
use crate::{AppState, Req};

pub async fn kv_root(
    State(st): State<AppState>,
    method: Method,
    req: Req,
    body: Bytes,
) -> ApiResult {
    dispatch(st, method, String::new(), req, body).await
}

pub async fn kv(
    State(st): State<AppState>,
    method: Method,
    Path(key): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    dispatch(st, method, key, req, body).await
}

async fn dispatch(st: AppState, method: Method, key: String, req: Req, body: Bytes) -> ApiResult {
    match method {
        Method::GET => get(&st, key, req).await,
        Method::PUT => put(&st, key, &req, body).await,
        Method::DELETE => delete(&st, key, &req).await,
        other => Err(ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("method {other} not allowed"),
        }),
    }
}

/// A read of one key, a prefix (`?recurse`) or its keys (`?keys`). The
/// request is let go before the read may block (see `Req::into_answer`).
async fn get(st: &AppState, key: String, req: Req) -> ApiResult {
    let opts = req.query_options()?;
    let rpc = st.agent.rpc();
    if req.params.has("keys") {
        let separator = req.params.get("separator").unwrap_or("").to_string();
        let answer = req.into_answer();
        let result = rpc.kv_keys(&opts, key, separator).await?;
        return Ok(answer.list_or_404(&result.meta, &result.value));
    }
    if req.params.has("recurse") {
        let answer = req.into_answer();
        let result = rpc.kv_list(&opts, key).await?;
        return Ok(answer.list_or_404(&result.meta, &result.value));
    }
    if key.is_empty() {
        return Err(ApiError::bad_request("Missing key name"));
    }
    let raw = req.params.has("raw");
    let answer = req.into_answer();
    let result = rpc.kv_get(&opts, key).await?;
    match result.value {
        None => Ok(answer.status_meta(StatusCode::NOT_FOUND, &result.meta)),
        Some(entry) if raw => Ok(answer.raw(entry.value, &result.meta)),
        Some(entry) => {
            let body = crate::kv_answer::entry_body(entry, answer.pretty());
            Ok(answer.encoded_meta(&result.meta, body))
        }
    }
}

fn too_large(size: usize) -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!(
            "Request body({size} bytes) too large, max size: {KV_MAX_VALUE_SIZE} bytes. See https://developer.hashicorp.com/consul/docs/agent/config/config-files#kv_max_value_size."
        ),
    }
}

async fn put(st: &AppState, key: String, req: &Req, body: Bytes) -> ApiResult {
    if key.is_empty() {
        return Err(ApiError::bad_request("Missing key name"));
    }
    if body.len() > KV_MAX_VALUE_SIZE {
        return Err(too_large(body.len()));
    }
    let flags = req.params.u64("flags")?.unwrap_or(0);
    let mut op = KvOp {
        verb: KvVerb::Set,
        key,
        // A value of its own size: the body shares the connection's read
        // buffer, which the store would otherwise keep alive per key.
        value: bytes::Bytes::copy_from_slice(&body),
        flags,
        index: 0,
        session: String::new(),
    };
    if let Some(cas) = req.params.u64("cas")? {
        op.verb = KvVerb::Cas;
        op.index = cas;
    }
    let acquire = req.params.get("acquire");
    let release = req.params.get("release");
    match (acquire, release) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "Conflicting flags: ?acquire and ?release",
            ))
        }
        (Some(_), None) if op.verb == KvVerb::Cas => {
            return Err(ApiError::bad_request(
                "Conflicting flags: ?cas and ?acquire",
            ))
        }
        (Some(session), None) => {
            op.verb = KvVerb::Lock;
            op.session = session.to_string();
        }
        (None, Some(session)) => {
            op.verb = KvVerb::Unlock;
            op.session = session.to_string();
        }
        (None, None) => {}
    }
    let opts = req.write_options();
    let applied = st.agent.rpc().kv_apply(&opts, op).await?;
    Ok(json(&req.params, &applied))
}

async fn delete(st: &AppState, key: String, req: &Req) -> ApiResult {
    let recurse = req.params.has("recurse");
    if key.is_empty() && !recurse {
        return Err(ApiError::bad_request("Missing key name"));
    }
    let mut op = KvOp {
        verb: if recurse {
            KvVerb::DeleteTree
        } else {
            KvVerb::Delete
        },
        key,
        value: Default::default(),
        flags: 0,
        index: 0,
        session: String::new(),
    };
    if let Some(cas) = req.params.u64("cas")? {
        if recurse {
            return Err(ApiError::bad_request(
                "Conflicting flags: ?cas and ?recurse",
            ));
        }
        op.verb = KvVerb::DeleteCas;
        op.index = cas;
    }
    let opts = req.write_options();
    let applied = st.agent.rpc().kv_apply(&opts, op).await?;
    Ok(json(&req.params, &applied))
}

/// The KV verbs a transaction may use (`KvVerb`'s names).
const KV_VERBS: &[&str] = &[
    "set",
    "cas",
    "lock",
    "unlock",
    "get",
    "get-tree",
    "check-index",
    "check-session",
    "check-not-exists",
    "delete",
    "delete-tree",
    "delete-cas",
    "get-or-empty",
];

/// KV operations naming a verb nobody knows: Consul's servers reject them
/// as failed operations (409, `unknown KV verb "x"`), not as a bad body.
fn unknown_kv_verbs(ops: &[serde_json::Value]) -> Vec<legate_types::txn::TxnError> {
    ops.iter()
        .enumerate()
        .filter_map(|(op_index, op)| {
            let verb = op.get("KV")?.get("Verb")?.as_str()?;
            (!KV_VERBS.contains(&verb)).then(|| legate_types::txn::TxnError {
                op_index,
                what: format!("unknown KV verb {verb:?}"),
            })
        })
        .collect()
}

pub async fn txn(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    if let Ok(raw) = decode_body::<Vec<serde_json::Value>>(&body) {
        let unknown = unknown_kv_verbs(&raw);
        if !unknown.is_empty() {
            let response = legate_types::txn::TxnResponse {
                errors: Some(unknown),
                ..Default::default()
            };
            let mut out = json(&req.params, &response);
            *out.status_mut() = StatusCode::CONFLICT;
            return Ok(out);
        }
    }
    let ops: Vec<TxnOp> = decode_body(&body)?;
    // Consul's handler keeps only the operations it knows and gives a
    // node without a datacenter the agent's.
    let ops: Vec<TxnOp> = ops
        .into_iter()
        .filter(|op| *op != TxnOp::default())
        .map(|mut op| {
            if let Some(node) = op.node.as_mut().map(|n| &mut n.node) {
                if node.datacenter.is_empty() {
                    node.datacenter = st.agent.config().datacenter.clone();
                }
            }
            op
        })
        .collect();
    let opts = req.write_options();
    let response = st.agent.rpc().txn(&opts, ops).await?;
    let conflict = response.errors.is_some();
    let mut out = json(&req.params, &response);
    if conflict {
        *out.status_mut() = StatusCode::CONFLICT;
    } else if response.index > 0 {
        out.headers_mut()
            .insert("x-consul-index", HeaderValue::from(response.index));
    }
    Ok(out)
}
