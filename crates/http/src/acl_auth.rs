//! `/v1/acl/auth-method*`, `/v1/acl/binding-rule*`, `/v1/acl/login` and
//! `/v1/acl/logout` in Consul's shapes and texts: bodies decoded without
//! regard to case with unknown fields refused, missing objects 404 with
//! Consul's 1.15+ texts, deletes `true` whether or not the object was
//! there.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use legate_types::acl_auth::{AclAuthMethod, AclBindingRule, LoginRequest};
use serde_json::Value;

use crate::acl::{decode, decode_as, enabled, found};
use crate::util::{json, ApiError, ApiResult};
use crate::{AppState, Req};

/// `TokenNameFormat` (newer Consul) is taken and not kept: Legate's
/// tokens have no names.
const AUTH_METHOD: &[&str] = &[
    "TokenNameFormat",
    "MaxTokenTTL",
    "Name",
    "Type",
    "DisplayName",
    "Description",
    "TokenLocality",
    "Config",
    "CreateIndex",
    "ModifyIndex",
    "Namespace",
    "Partition",
];
const BINDING_RULE: &[&str] = &[
    "ID",
    "Description",
    "AuthMethod",
    "Selector",
    "BindType",
    "BindName",
    "BindVars",
    "CreateIndex",
    "ModifyIndex",
    "Namespace",
    "Partition",
];
const LOGIN: &[&str] = &[
    "AuthMethod",
    "BearerToken",
    "Meta",
    "Namespace",
    "Partition",
];

fn not_found(text: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: text.into(),
    }
}

/// `PUT /v1/acl/auth-method`.
pub async fn method_create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    enabled(&st)?;
    let method: AclAuthMethod = decode(&body, AUTH_METHOD, "AuthMethod")?;
    let written = st
        .agent
        .rpc()
        .acl_auth_method_set(&req.write_options(), method)
        .await?;
    Ok(json(&req.params, &written))
}

/// `PUT /v1/acl/auth-method/:name`: the body's name, if any, must be the
/// URL's.
pub async fn method_update(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    enabled(&st)?;
    let mut method: AclAuthMethod = decode(&body, AUTH_METHOD, "AuthMethod")?;
    if !method.name.is_empty() && method.name != name {
        return Err(ApiError::bad_request(
            "AuthMethod Name in URL and payload do not match",
        ));
    }
    method.name = name;
    let written = st
        .agent
        .rpc()
        .acl_auth_method_set(&req.write_options(), method)
        .await?;
    Ok(json(&req.params, &written))
}

/// `GET /v1/acl/auth-method/:name`.
pub async fn method_read(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_auth_method_get(&req.query_options()?, name)
        .await?;
    found(
        &req,
        result,
        not_found("Requested auth method does not exist: ACL not found"),
    )
}

/// `DELETE /v1/acl/auth-method/:name`: with its rules and tokens.
pub async fn method_delete(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    st.agent
        .rpc()
        .acl_auth_method_delete(&req.write_options(), name)
        .await?;
    Ok(json(&req.params, &true))
}

/// `GET /v1/acl/auth-methods`: stubs without `Config`.
pub async fn method_list(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_auth_method_list(&req.query_options()?)
        .await?;
    let stubs: Vec<Value> = result.value.iter().map(AclAuthMethod::stub).collect();
    Ok(crate::util::json_meta(&req.params, &result.meta, &stubs))
}

/// `PUT /v1/acl/binding-rule`.
pub async fn rule_create(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    enabled(&st)?;
    let rule: AclBindingRule = decode(&body, BINDING_RULE, "BindingRule")?;
    let written = st
        .agent
        .rpc()
        .acl_binding_rule_set(&req.write_options(), rule)
        .await?;
    Ok(json(&req.params, &written))
}

/// `PUT /v1/acl/binding-rule/:id`.
pub async fn rule_update(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    enabled(&st)?;
    let mut rule: AclBindingRule = decode(&body, BINDING_RULE, "BindingRule")?;
    if !rule.id.is_empty() && rule.id != id {
        return Err(ApiError::bad_request(
            "BindingRule ID in URL and payload do not match",
        ));
    }
    rule.id = id;
    let written = st
        .agent
        .rpc()
        .acl_binding_rule_set(&req.write_options(), rule)
        .await?;
    Ok(json(&req.params, &written))
}

/// `GET /v1/acl/binding-rule/:id`.
pub async fn rule_read(State(st): State<AppState>, Path(id): Path<String>, req: Req) -> ApiResult {
    enabled(&st)?;
    let result = st
        .agent
        .rpc()
        .acl_binding_rule_get(&req.query_options()?, id)
        .await?;
    found(
        &req,
        result,
        not_found("Requested binding rule does not exist: ACL not found"),
    )
}

/// `DELETE /v1/acl/binding-rule/:id`.
pub async fn rule_delete(
    State(st): State<AppState>,
    Path(id): Path<String>,
    req: Req,
) -> ApiResult {
    enabled(&st)?;
    st.agent
        .rpc()
        .acl_binding_rule_delete(&req.write_options(), id)
        .await?;
    Ok(json(&req.params, &true))
}

/// `GET /v1/acl/binding-rules?authmethod=`.
pub async fn rule_list(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let method = req.params.get("authmethod").unwrap_or("").to_string();
    let result = st
        .agent
        .rpc()
        .acl_binding_rule_list(&req.query_options()?, method)
        .await?;
    Ok(crate::util::json_meta(
        &req.params,
        &result.meta,
        &result.value,
    ))
}

/// `POST /v1/acl/login`: a new token for the bearer token; no ACL token.
pub async fn login(State(st): State<AppState>, req: Req, body: Bytes) -> ApiResult {
    enabled(&st)?;
    let request: LoginRequest = decode_as(&body, LOGIN, "Failed to decode request body")?;
    let mut opts = req.write_options();
    opts.token = String::new();
    let token = st.agent.rpc().acl_login(&opts, request).await?;
    Ok(json(&req.params, &token))
}

/// `POST /v1/acl/logout`: deletes the request's own token.
pub async fn logout(State(st): State<AppState>, req: Req) -> ApiResult {
    enabled(&st)?;
    let opts = req.write_options();
    if opts.token.is_empty() {
        return Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "Supplied token does not exist".into(),
        });
    }
    st.agent.rpc().acl_logout(&opts).await?;
    Ok(json(&req.params, &true))
}
