//! `/v1/acl/templated-policies`, `/v1/acl/templated-policy/name/:name`
//! and `/v1/acl/templated-policy/preview/:name`: Consul's built-in rule
//! templates and what one renders to, answered by the agent itself with
//! `acl:read`, in Consul's shapes and error texts.

use axum::body::Bytes;
use axum::extract::{Path, State};
use legate_acl::templated::{template, Template, TEMPLATES};
use legate_acl::{Access, Resource};
use serde_json::{json, Map, Value};

use crate::agent_acl::check;
use crate::util::{json as json_body, ApiError, ApiResult};
use crate::{AppState, Req};

/// A template as Consul's API shows it.
fn shown(t: &Template) -> Value {
    json!({
        "TemplateName": t.name,
        "Schema": t.schema,
        "Template": t.template,
        "Description": t.description,
    })
}

/// ACLs on, and the token may read ACLs.
async fn readable(st: &AppState, req: &Req) -> Result<(), ApiError> {
    crate::acl::enabled(st)?;
    check(st, req, Resource::Acl, "", Access::Read).await
}

/// `GET /v1/acl/templated-policies`: every template, keyed by name.
pub async fn list(State(st): State<AppState>, req: Req) -> ApiResult {
    readable(&st, &req).await?;
    let all: Map<String, Value> = TEMPLATES
        .iter()
        .map(|t| (t.name.to_string(), shown(t)))
        .collect();
    Ok(json_body(&req.params, &all))
}

/// `GET /v1/acl/templated-policy/name/:name`: an unknown name is
/// Consul's 400.
pub async fn read(State(st): State<AppState>, Path(name): Path<String>, req: Req) -> ApiResult {
    readable(&st, &req).await?;
    let t = template(&name)
        .ok_or_else(|| ApiError::bad_request(format!("Invalid templated policy Name: {name}")))?;
    Ok(json_body(&req.params, &shown(t)))
}

/// The variables of a preview body (`{"Name": ...}`, either case):
/// Consul's decoder refuses an empty body and unknown fields, and takes
/// `null` as no name.
fn preview_name(body: &[u8]) -> Result<String, ApiError> {
    let refuse = |e: String| ApiError::bad_request(format!("Failed to decode request body: {e}"));
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(refuse("EOF".into()));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| refuse(e.to_string()))?;
    let object =
        match value {
            Value::Null => return Ok(String::new()),
            Value::Object(object) => object,
            _ => return Err(refuse(
                "json: cannot unmarshal into Go value of type structs.ACLTemplatedPolicyVariables"
                    .into(),
            )),
        };
    let mut name = String::new();
    for (key, value) in object {
        if !key.eq_ignore_ascii_case("name") {
            return Err(refuse(format!("json: unknown field {key:?}")));
        }
        match value {
            Value::String(text) => name = text,
            Value::Null => {}
            _ => {
                return Err(refuse(
                    "json: cannot unmarshal into Go struct field ACLTemplatedPolicyVariables.name of type string"
                        .into(),
                ))
            }
        }
    }
    Ok(name)
}

/// Base64 of a 32-byte digest of the policy's contents (its `Hash`).
fn policy_hash(name: &str, description: &str, rules: &str) -> String {
    use base64::Engine;
    let text = format!("{name}\n{description}\n{rules}\n");
    let sum = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sum.as_ref())
}

/// `POST /v1/acl/templated-policy/preview/:name` `{"Name": "web"}`: the
/// synthetic policy the template gives.
pub async fn preview(
    State(st): State<AppState>,
    Path(name): Path<String>,
    req: Req,
    body: Bytes,
) -> ApiResult {
    readable(&st, &req).await?;
    let t = template(&name).ok_or_else(|| {
        ApiError::bad_request(format!("templated policy {name:?} does not exist"))
    })?;
    let variable = preview_name(&body)?;
    t.validate(Some(&variable)).map_err(|e| {
        ApiError::bad_request(format!(
            "validation error for templated policy: {name:?}: {e}"
        ))
    })?;
    let policy = t.synthetic_policy(&variable);
    let answer = json!({
        "ID": policy.id,
        "Name": policy.name,
        "Description": policy.description,
        "Rules": policy.rules,
        "Hash": policy_hash(&policy.name, &policy.description, &policy.rules),
        "CreateIndex": 0,
        "ModifyIndex": 0,
    });
    Ok(json_body(&req.params, &answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_bodies_decode_as_consuls_decoder_does() {
        assert_eq!(preview_name(br#"{"Name": "web"}"#).unwrap(), "web");
        assert_eq!(preview_name(br#"{"name": "api"}"#).unwrap(), "api");
        assert_eq!(preview_name(b"null").unwrap(), "");
        let message = |body: &[u8]| preview_name(body).unwrap_err().message;
        assert_eq!(message(b""), "Failed to decode request body: EOF");
        assert_eq!(
            message(br#"{"foo": 1}"#),
            "Failed to decode request body: json: unknown field \"foo\""
        );
        assert!(message(b"[1]").starts_with("Failed to decode request body: json: cannot"));
    }
}
