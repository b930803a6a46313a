//! `/v1/acl/*` and `/v1/internal/acl/authorize`: bootstrap, tokens,
//! policies and roles in Consul's shapes. With ACLs off on this agent
//! every route answers 401 `ACL support disabled`; the legacy API's routes
//! answer Consul's 410. Bodies are matched to field names without regard
//! to case, and an unknown field is refused as Consul refuses it.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use legate_types::acl::{AclAuthorizationCheck, AclPolicy, AclRole, AclToken, AclTokenFilter};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::util::{json, ApiError, ApiResult};
use crate::{AppState, Req};

/// The fields each body may carry, and the nested objects' fields.
const LINK: &[&str] = &["ID", "Name"];
const SERVICE_IDENTITY: &[&str] = &["ServiceName", "Datacenters"];
const NODE_IDENTITY: &[&str] = &["NodeName", "Datacenter"];
const TEMPLATED_POLICY: &[&str] = &[
    "TemplateID",
    "TemplateName",
    "TemplateVariables",
    "Datacenters",
];
const TEMPLATE_VARIABLES: &[&str] = &["Name"];
const TOKEN: &[&str] = &[
    "AccessorID",
    "SecretID",
    "Description",
    "Policies",
    "Roles",
    "ServiceIdentities",
    "NodeIdentities",
    "TemplatedPolicies",
    "Local",
    "AuthMethod",
    "ExpirationTime",
    "ExpirationTTL",
    "CreateTime",
    "Hash",
    "CreateIndex",
    "ModifyIndex",
    "Legacy",
    "Namespace",
    "Partition",
];
const POLICY: &[&str] = &[
    "ID",
    "Name",
    "Description",
    "Rules",
    "Datacenters",
    "Hash",
    "CreateIndex",
    "ModifyIndex",
    "Namespace",
    "Partition",
];
const ROLE: &[&str] = &[
    "ID",
    "Name",
    "Description",
    "Policies",
    "ServiceIdentities",
    "NodeIdentities",
    "TemplatedPolicies",
    "Hash",
    "CreateIndex",
    "ModifyIndex",
    "Namespace",
    "Partition",
];

/// The allowed fields of a nested object, by its field name.
fn nested(field: &str) -> Option<&'static [&'static str]> {
    match field {
        "Policies" | "Roles" => Some(LINK),
        "ServiceIdentities" => Some(SERVICE_IDENTITY),
        "NodeIdentities" => Some(NODE_IDENTITY),
        "TemplatedPolicies" => Some(TEMPLATED_POLICY),
        "TemplateVariables" | "BindVars" => Some(TEMPLATE_VARIABLES),
        _ => None,
    }
}

/// Renames `object`'s keys to the allowed spelling (ignoring case and
/// underscores); an unknown one is Consul's decoding error.
fn canonical(object: Map<String, Value>, allowed: &[&str], what: &str) -> Result<Value, ApiError> {
    canonical_as(object, allowed, &format!("{what} decoding failed"))
}

/// [`canonical`] with the whole error prefix (`Failed to decode request
/// body`).
fn canonical_as(
    object: Map<String, Value>,
    allowed: &[&str],
    prefix: &str,
) -> Result<Value, ApiError> {
    let what = prefix;
    let fold = |s: &str| s.replace('_', "").to_ascii_lowercase();
    let mut out = Map::new();
    for (key, value) in object {
        let Some(name) = allowed.iter().find(|a| fold(a) == fold(&key)) else {
            return Err(ApiError::bad_request(format!(
                "{what}: json: unknown field {key:?}"
            )));
        };
        let value = match (nested(name), value) {
            (Some(fields), Value::Array(items)) => Value::Array(
                items
                    .into_iter()
                    .map(|item| match item {
                        Value::Object(inner) => canonical_as(inner, fields, what),
                        other => Ok(other),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            (Some(fields), Value::Object(inner)) => canonical_as(inner, fields, what)?,
            (_, value) => value,
        };
        out.insert(name.to_string(), value);
    }
    Ok(Value::Object(out))
}

/// Decodes a body of `what` (`Token`, `Policy`, `Role`) with `allowed` fields.
pub(crate) fn decode<T: DeserializeOwned + Default>(
    body: &[u8],
    allowed: &[&str],
    what: &str,
) -> Result<T, ApiError> {
    decode_as(body, allowed, &format!("{what} decoding failed"))
}

/// [`decode`] with the whole error prefix (`Failed to decode request
/// body`, as Consul's login handler words it).
pub(crate) fn decode_as<T: DeserializeOwned + Default>(
    body: &[u8],
    allowed: &[&str],
    prefix: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("{prefix}: {e}")))?;
    let Value::Object(object) = value else {
        return Err(ApiError::bad_request(format!(
            "{prefix}: json: cannot unmarshal into an object"
        )));
    };
    let object = canonical_as(object, allowed, prefix)?;
    if object
        .get("Namespace")
        .is_some_and(|v| v != "" && v != "default")
    {
        return Err(ApiError::bad_request(format!(
            "{prefix}: \"Namespace\" field is not supported. Namespaces are a Consul Enterprise feature."
        )));
    }
    serde_json::from_value(object).map_err(|e| ApiError::bad_request(format!("{prefix}: {e}")))
}

/// ACLs must be on at this agent.
pub(crate) fn enabled(st: &AppState) -> Result<(), ApiError> {
    if st.agent.config().acl.enabled {
        Ok(())
    } else {
        Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "ACL support disabled".into(),
        })
    }
}

/// A read's value, or Consul's answer when there is none.
pub(crate) fn found<T: serde::Serialize>(
    req: &Req,
    result: legate_types::Queried<Option<T>>,
    missing: ApiError,
) -> ApiResult {
    match result.value {
        Some(value) => Ok(crate::util::json_meta(&req.params, &result.meta, &value)),
        None => Err(missing),
    }
}

fn acl_not_found() -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        message: "ACL not found".into(),
    }
}

/// `PUT /v1/acl/bootstrap`: the token, with the deprecated `ID` (its secret).
pub async fn bootstrap(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let token = st.agent.rpc().acl_bootstrap(&req.write_options()).await?;
    let mut value = serde_json::to_value(&token).unwrap_or_default();
    if let Value::Object(map) = &mut value {
        map.insert("ID".into(), Value::String(token.secret_id.clone()));
    }
    Ok(json(&req.params, &value))
}

/// `PUT /v1/acl/token`.
pub async fn token_create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    enabled(&st)?;
    let token: AclToken = decode(&body, TOKEN, "Token")?;
    let written = st
        .agent
        .rpc()
        .acl_token_set(&req.write_options(), token, true)
        .await?;
    Ok(json(&req.params, &written))
}

/// `PUT /v1/acl/token/:id`.
pub async fn token_update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    enabled(&st)?;
    let mut token: AclToken = decode(&body, TOKEN, "Token")?;
    if !token.accessor_id.is_empty() && token.accessor_id != id {
        return Err(ApiError::bad_request(
            "Token Accessor ID in URL and payload do not match",
        ));
    }
    token.accessor_id = id;
    let written = st
        .agent
        .rpc()
        .acl_token_set(&req.write_options(), token, false)
        .await?;
    Ok(json(&req.params, &written))
}

/// `GET /v1/acl/token/:id`.
pub async fn token_read(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_token_get(&req.query_options()?, id)
        .await?;
    found(&req, result, acl_not_found())
}

/// `GET /v1/acl/token/self`.
pub async fn token_self(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let token = st.agent.rpc().acl_token_self(&req.query_options()?).await?;
    Ok(json(&req.params, &token))
}

/// `GET /v1/acl/replication`: the status of the leader's ACL replication
/// (always from the leader; no token needed, 401 with ACLs off, as
/// Consul's).
pub async fn replication(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let mut opts = req.query_options()?;
    opts.consistency = legate_types::Consistency::Default;
    let status = st.agent.rpc().acl_replication_status(&opts).await?;
    Ok(json(&req.params, &status))
}

/// `DELETE /v1/acl/token/:id`.
pub async fn token_delete(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    st.agent
        .rpc()
        .acl_token_delete(&req.write_options(), id)
        .await?;
    Ok(json(&req.params, &true))
}

/// `PUT /v1/acl/token/:id/clone`.
pub async fn token_clone(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    enabled(&st)?;
    let request: AclToken = decode(&body, TOKEN, "Token")?;
    let copy = st
        .agent
        .rpc()
        .acl_token_clone(&req.write_options(), id, request.description)
        .await?;
    Ok(json(&req.params, &copy))
}

/// `GET /v1/acl/tokens`: stubs, filtered by `?policy`, `?role`,
/// `?authmethod` and `?servicename`.
pub async fn token_list(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let param = |k: &str| req.params.get(k).unwrap_or("").to_string();
    let filter = AclTokenFilter {
        policy: param("policy"),
        role: param("role"),
        auth_method: param("authmethod"),
        service_name: param("servicename"),
        global_only: false,
    };
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.acl_token_list(&opts, filter).await })
        .await
}

/// `PUT /v1/acl/policy`.
pub async fn policy_create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    enabled(&st)?;
    let policy: AclPolicy = decode(&body, POLICY, "Policy")?;
    if !policy.id.is_empty() {
        return Err(ApiError::bad_request(
            "Cannot specify the ID when creating a new policy",
        ));
    }
    let written = st
        .agent
        .rpc()
        .acl_policy_set(&req.write_options(), policy, true)
        .await?;
    Ok(json(&req.params, &written))
}

/// `PUT /v1/acl/policy/:id`.
pub async fn policy_update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    enabled(&st)?;
    let mut policy: AclPolicy = decode(&body, POLICY, "Policy")?;
    if !policy.id.is_empty() && policy.id != id {
        return Err(ApiError::bad_request(
            "Policy ID in URL and payload do not match",
        ));
    }
    policy.id = id;
    let written = st
        .agent
        .rpc()
        .acl_policy_set(&req.write_options(), policy, false)
        .await?;
    Ok(json(&req.params, &written))
}

/// `GET /v1/acl/policy/:id`.
pub async fn policy_read(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_policy_get(&req.query_options()?, id, false)
        .await?;
    found(&req, result, acl_not_found())
}

/// `GET /v1/acl/policy/name/:name`.
pub async fn policy_read_by_name(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_policy_get(&req.query_options()?, name, true)
        .await?;
    found(&req, result, acl_not_found())
}

/// `DELETE /v1/acl/policy/:id`.
pub async fn policy_delete(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    st.agent
        .rpc()
        .acl_policy_delete(&req.write_options(), id)
        .await?;
    Ok(json(&req.params, &true))
}

/// `GET /v1/acl/policies`: stubs (no rules), always an array.
pub async fn policy_list(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let opts = req.query_options()?;
    let result = st.agent.rpc().acl_policy_list(&opts).await?;
    let stubs: Vec<Value> = result
        .value
        .iter()
        .map(|p| {
            let mut v = serde_json::to_value(p).unwrap_or_default();
            if let Value::Object(map) = &mut v {
                map.remove("Rules");
            }
            v
        })
        .collect();
    Ok(crate::util::json_meta(&req.params, &result.meta, &stubs))
}

/// `PUT /v1/acl/role`.
pub async fn role_create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    enabled(&st)?;
    let role: AclRole = decode(&body, ROLE, "Role")?;
    if !role.id.is_empty() {
        return Err(ApiError::bad_request(
            "Cannot specify the ID when creating a new role",
        ));
    }
    let written = st
        .agent
        .rpc()
        .acl_role_set(&req.write_options(), role, true)
        .await?;
    Ok(json(&req.params, &written))
}

/// `PUT /v1/acl/role/:id`.
pub async fn role_update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    enabled(&st)?;
    let mut role: AclRole = decode(&body, ROLE, "Role")?;
    if !role.id.is_empty() && role.id != id {
        return Err(ApiError::bad_request(
            "Role ID in URL and payload do not match",
        ));
    }
    role.id = id;
    let written = st
        .agent
        .rpc()
        .acl_role_set(&req.write_options(), role, false)
        .await?;
    Ok(json(&req.params, &written))
}

fn role_missing() -> ApiError {
    ApiError::not_found("Requested role does not exist: ACL not found")
}

/// `GET /v1/acl/role/:id`.
pub async fn role_read(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_role_get(&req.query_options()?, id, false)
        .await?;
    found(&req, result, role_missing())
}

/// `GET /v1/acl/role/name/:name`.
pub async fn role_read_by_name(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_role_get(&req.query_options()?, name, true)
        .await?;
    found(&req, result, role_missing())
}

/// `DELETE /v1/acl/role/:id`.
pub async fn role_delete(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    st.agent
        .rpc()
        .acl_role_delete(&req.write_options(), id)
        .await?;
    Ok(json(&req.params, &true))
}

/// `GET /v1/acl/roles`, `?policy=` filters.
pub async fn role_list(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let policy = req.params.get("policy").unwrap_or("").to_string();
    let rpc = st.agent.rpc().clone();
    req.read(|opts| async move { rpc.acl_role_list(&opts, policy).await })
        .await
}

/// `POST /v1/internal/acl/authorize`.
pub async fn authorize(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    let checks: Vec<AclAuthorizationCheck> = if body.iter().all(u8::is_ascii_whitespace) {
        Vec::new()
    } else {
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("Failed to decode request body: {e}")))?;
        let Value::Array(items) = value else {
            return Err(ApiError::bad_request(
                "Failed to decode request body: expected a list of authorization requests",
            ));
        };
        items
            .into_iter()
            .map(|item| match item {
                Value::Object(map) => {
                    canonical(map, &["Resource", "Segment", "Access"], "Authorization").and_then(
                        |v| {
                            serde_json::from_value(v).map_err(|e| {
                                ApiError::bad_request(format!("Failed to decode request body: {e}"))
                            })
                        },
                    )
                }
                _ => Err(ApiError::bad_request(
                    "Failed to decode request body: each authorization request is an object",
                )),
            })
            .collect::<Result<_, _>>()?
    };
    let answers = st
        .agent
        .rpc()
        .acl_authorize(&req.query_options()?, checks)
        .await?;
    Ok(json(&req.params, &answers))
}

/// A legacy ACL API route (`create`, `info`, ...): Consul's 410.
pub fn legacy(name: &'static str) -> Response {
    (
        StatusCode::GONE,
        format!("Endpoint /v1/acl/{name} for the legacy ACL system was removed in Consul 1.11."),
    )
        .into_response()
}

/// `PUT /v1/agent/token/:kind` `{"Token": "..."}`: sets one of the
/// agent's tokens (`""` clears it); needs `agent:write` on this agent.
pub async fn set_agent_token(
    State(st): State<AppState>,
    Path(kind): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    enabled(&st)?;
    crate::agent_acl::check_agent(&st, &req, legate_acl::Access::Write).await?;
    #[derive(serde::Deserialize, Default)]
    struct Body {
        #[serde(rename = "Token", default)]
        token: String,
    }
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?
    };
    let Value::Object(map) = value else {
        return Err(ApiError::bad_request(
            "Request decode failed: expected an object",
        ));
    };
    let body: Body = serde_json::from_value(canonical(map, &["Token"], "Request")?)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    st.agent.set_token(&kind, body.token)?;
    // A token change may grant or take away what the cache answered.
    st.agent.acl().invalidate();
    Ok(StatusCode::OK.into_response())
}
