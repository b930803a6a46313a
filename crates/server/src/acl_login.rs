//! `ACL.Login` and `ACL.Logout`: a JWT checked by its auth method, the
//! method's binding rules applied to its claims, and a token made with
//! what they bind — as Consul's login does, with Legate's bounds on what
//! logins leave behind (a default lifetime, a cap on live tokens per
//! identity). Also where a method's keys come from: its PEM keys, or a
//! JWKS fetched (directly or through OIDC discovery) and kept a while.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use legate_acl::templated::template;
use legate_auth::jwt::{validate_claims, verify_signature, KeySource};
use legate_auth::{Identity, JwtConfig, PublicKey};
use legate_state::Command;
use legate_types::acl::{
    AclLink, AclToken, NodeIdentity, ServiceIdentity, TemplateVariables, TemplatedPolicy,
};
use legate_types::acl_auth::{AclAuthMethod, AclBindingRule, LoginRequest};
use legate_types::{RpcError, WriteOptions};

use crate::acl_endpoints::{dedupe_identities, failed, new_uuid, rfc3339};
use crate::Server;

/// How long a login token lives when its method sets no `MaxTokenTTL`
/// (Consul: for ever, which lets unused login tokens pile up; #22613).
pub const DEFAULT_LOGIN_TTL: Duration = Duration::from_secs(24 * 3600);
/// How many live tokens one identity may hold from one auth method, by
/// default (`acl.login_tokens_per_identity`).
pub const LIVE_TOKENS_PER_IDENTITY: usize = 1024;
/// How long fetched keys are used before they are fetched again.
const KEYS_FRESH_FOR: Duration = Duration::from_secs(300);
/// How long a fetch of a JWKS or discovery document may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest JWKS or discovery document read.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;
/// The shortest time between two fetches a failed signature asks for.
const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(10);

/// Keys kept for one auth method (parsed or fetched).
#[derive(Debug, Clone)]
struct Fetched {
    /// The method's modify index when they were read.
    version: u64,
    at: Instant,
    keys: Arc<Vec<PublicKey>>,
}

/// Keys kept per auth method, by name.
#[derive(Debug, Default)]
pub struct KeyCache {
    fetched: Mutex<HashMap<String, Fetched>>,
}

/// What a matching binding rule gives a login token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Binding {
    Service(String),
    Node(String),
    Role(String),
    Policy(String),
    Templated(TemplatedPolicy),
}

/// An identity whose every mapped claim is `fake`, to check bind names
/// when a rule is written.
pub(crate) fn fake_identity(config: &JwtConfig) -> Identity {
    let mut identity = Identity::default();
    for target in config.claim_mappings.values() {
        identity
            .projected
            .insert(format!("value.{target}"), "fake".into());
    }
    identity
}

/// What `rule` binds for `identity`: its bind name interpolated and
/// checked for its type (templated policies: the template and its
/// variables).
pub(crate) fn bind_target(rule: &AclBindingRule, identity: &Identity) -> Result<Binding, String> {
    if rule.bind_type == "templated-policy" {
        let base = template(&rule.bind_name).ok_or_else(|| {
            format!(
                "Bind name for templated-policy bind type does not match existing template name: {}",
                rule.bind_name
            )
        })?;
        let variables = match &rule.bind_vars {
            Some(vars) => Some(TemplateVariables {
                name: identity
                    .interpolate(&vars.name)
                    .map_err(|e| format!("failed to interpret templated policy variables: {e}"))?,
            }),
            None => None,
        };
        base.validate(variables.as_ref().map(|v| v.name.as_str()))
            .map_err(|e| format!("templated policy failed validation: {e}"))?;
        return Ok(Binding::Templated(TemplatedPolicy {
            template_id: base.id.to_string(),
            template_name: base.name.to_string(),
            template_variables: variables,
            datacenters: Vec::new(),
        }));
    }
    let name = identity.interpolate(&rule.bind_name)?;
    if !crate::acl_auth_methods::valid_bind_name(&rule.bind_type, &name) {
        return Err(format!("invalid bind name: {name:?}"));
    }
    Ok(match rule.bind_type.as_str() {
        "service" => Binding::Service(name),
        "node" => Binding::Node(name),
        "role" => Binding::Role(name),
        "policy" => Binding::Policy(name),
        other => return Err(format!("invalid Binding Rule: unknown BindType {other:?}")),
    })
}

/// A login token's description (Consul's, with the meta as sorted JSON).
fn description(meta: &std::collections::BTreeMap<String, String>) -> String {
    if meta.is_empty() {
        "token created via login".into()
    } else {
        format!(
            "token created via login: {}",
            serde_json::to_string(meta).unwrap_or_default()
        )
    }
}

/// A GET of a JSON document (at most [`MAX_DOCUMENT_BYTES`], no
/// redirects), trusting `ca` when given.
async fn fetch_json(url: &str, ca: &str) -> Result<serde_json::Value, String> {
    let mut client = reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none());
    if !ca.is_empty() {
        let cert = reqwest::Certificate::from_pem(ca.as_bytes()).map_err(|e| e.to_string())?;
        client = client
            .tls_built_in_root_certs(false)
            .add_root_certificate(cert);
    }
    let client = client.build().map_err(|e| e.to_string())?;
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("Get {url:?}: {e}"))?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("{url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        let shown: String = text.trim().chars().take(256).collect();
        return Err(format!("{status} {shown}"));
    }
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

/// The keys of a method whose keys are fetched, as go-oidc reports
/// failures.
async fn fetch_keys(config: &JwtConfig) -> Result<Vec<PublicKey>, String> {
    if !config.jwks_url.is_empty() {
        let document = fetch_json(&config.jwks_url, &config.jwks_ca_cert)
            .await
            .map_err(|e| {
                format!("error checking JWKSURL: fetching keys oidc: get keys failed: {e}")
            })?;
        return legate_auth::keys::from_jwks(&document)
            .map_err(|e| format!("error checking JWKSURL: {e}"));
    }
    let issuer = config.oidc_discovery_url.trim_end_matches('/');
    let discovery = fetch_json(
        &format!("{issuer}/.well-known/openid-configuration"),
        &config.oidc_discovery_ca_cert,
    )
    .await
    .map_err(|e| format!("error checking OIDCDiscoveryURL: {e}"))?;
    let advertised = discovery
        .get("issuer")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    if advertised != config.oidc_discovery_url {
        return Err(format!(
            "error checking OIDCDiscoveryURL: oidc: issuer did not match the issuer returned by provider, expected {:?} got {advertised:?}",
            config.oidc_discovery_url
        ));
    }
    let jwks_uri = discovery
        .get("jwks_uri")
        .and_then(serde_json::Value::as_str)
        .ok_or("error checking OIDCDiscoveryURL: oidc: discovery document has no jwks_uri")?;
    let document = fetch_json(jwks_uri, &config.oidc_discovery_ca_cert)
        .await
        .map_err(|e| format!("fetching keys oidc: get keys failed: {e}"))?;
    legate_auth::keys::from_jwks(&document)
}

impl Server {
    /// Checks at write time that a method's JWKS or discovery URL answers
    /// with keys, as Consul's validator does.
    pub(crate) async fn check_key_source(&self, config: &JwtConfig) -> Result<(), String> {
        if config.jwks_url.is_empty() && config.oidc_discovery_url.is_empty() {
            return Ok(());
        }
        fetch_keys(config).await.map(|_| ())
    }

    /// The keys a method's tokens are checked with, and their source:
    /// parsed once per method version (static keys), or fetched and kept
    /// for a few minutes per method version (fetched again sooner, at most
    /// every 10 s, when `refresh`).
    async fn login_keys(
        &self,
        method: &AclAuthMethod,
        config: &JwtConfig,
        refresh: bool,
    ) -> Result<(Arc<Vec<PublicKey>>, KeySource), String> {
        // Static keys are parsed once per method version; fetched ones
        // are also kept only a while.
        let source = if config.jwt_validation_pub_keys.is_empty() {
            KeySource::Jwks
        } else {
            KeySource::Static
        };
        let cached = self
            .auth_keys
            .fetched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&method.name)
            .filter(|f| f.version == method.modify_index)
            .filter(|f| match (source, refresh) {
                (KeySource::Static, _) => true,
                (KeySource::Jwks, true) => f.at.elapsed() < REFETCH_AT_MOST_EVERY,
                (KeySource::Jwks, false) => f.at.elapsed() < KEYS_FRESH_FOR,
            })
            .map(|f| f.keys.clone());
        if let Some(keys) = cached {
            return Ok((keys, source));
        }
        let keys = Arc::new(match source {
            KeySource::Static => config.validate()?,
            KeySource::Jwks => fetch_keys(config).await?,
        });
        self.auth_keys
            .fetched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                method.name.clone(),
                Fetched {
                    version: method.modify_index,
                    at: Instant::now(),
                    keys: keys.clone(),
                },
            );
        Ok((keys, source))
    }

    /// `ACL.Login`.
    pub(crate) async fn acl_login_write(
        &self,
        _opts: &WriteOptions,
        request: LoginRequest,
    ) -> Result<AclToken, RpcError> {
        self.acl_writable()?;
        let method = self
            .store
            .read()
            .acl_auth_method(&request.auth_method)
            .1
            .cloned()
            .ok_or_else(|| {
                RpcError::Forbidden(format!(
                    "ACL not found: auth method {:?} not found",
                    request.auth_method
                ))
            })?;
        let config = JwtConfig::from_config(method.config.as_ref()).map_err(failed)?;
        let (keys, source) = self
            .login_keys(&method, &config, false)
            .await
            .map_err(failed)?;
        let claims = match verify_signature(&request.bearer_token, &keys, source) {
            // A JWKS may have rotated: a well-formed token its keys do not
            // verify has them fetched again (at most every 10 s).
            Err(e)
                if source == KeySource::Jwks
                    && e.ends_with("failed to verify id token signature") =>
            {
                let (keys, _) = self
                    .login_keys(&method, &config, true)
                    .await
                    .map_err(failed)?;
                verify_signature(&request.bearer_token, &keys, source)
            }
            other => other,
        }
        .map_err(failed)?;
        let now = SystemTime::now();
        let seconds = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        if config.oidc_discovery_url.is_empty() {
            validate_claims(&claims, &config, seconds).map_err(failed)?;
        } else {
            let alg = legate_auth::jwt::algorithm(&request.bearer_token).unwrap_or_default();
            legate_auth::jwt::validate_oidc_claims(&alg, &claims, &config, seconds)
                .map_err(failed)?;
        }
        let identity = Identity::from_claims(&claims, &config).map_err(failed)?;
        let mut token = self.bind(&method, &identity)?;
        token.description = description(&request.meta);
        token.auth_method = method.name.clone();
        token.local = method.token_locality != "global";
        token.accessor_id = new_uuid();
        token.secret_id = new_uuid();
        token.create_time = rfc3339(now);
        let ttl = method.max_token_ttl.unwrap_or(DEFAULT_LOGIN_TTL);
        token.expiration_time = Some(rfc3339(now + ttl));
        self.check_live_tokens(&token)?;
        token.hash = crate::acl::token_hash(&token);
        let accessor = token.accessor_id.clone();
        self.acl_write(Command::AclTokenSet(Box::new(token)))
            .await?;
        self.store
            .read()
            .acl_token(&accessor)
            .1
            .cloned()
            .ok_or_else(|| failed("Failed to retrieve token after insertion"))
    }

    /// The token the method's matching binding rules give `identity`;
    /// Consul's bare `Permission denied` when they give nothing.
    fn bind(&self, method: &AclAuthMethod, identity: &Identity) -> Result<AclToken, RpcError> {
        let tables = self.store.read();
        let selectable = identity.selectable();
        let mut token = AclToken::default();
        let rules = tables
            .acl_binding_rules()
            .1
            .filter(|r| r.auth_method == method.name);
        for rule in rules {
            if !rule.selector.is_empty() {
                match legate_filter::Expr::parse(&rule.selector) {
                    Ok(expr) if expr.matches(&selectable) => {}
                    _ => continue,
                }
            }
            match bind_target(rule, identity).map_err(failed)? {
                Binding::Service(name) => token.service_identities.push(ServiceIdentity {
                    service_name: name,
                    datacenters: Vec::new(),
                }),
                Binding::Node(name) => token.node_identities.push(NodeIdentity {
                    node_name: name,
                    datacenter: self.config.datacenter.clone(),
                }),
                Binding::Role(name) => {
                    if let Some(role) = tables.acl_role_by_name(&name) {
                        token.roles.push(AclLink {
                            id: role.id.clone(),
                            name: role.name.clone(),
                        });
                    }
                }
                Binding::Policy(name) => {
                    if let Some(policy) = tables.acl_policy_by_name(&name) {
                        token.policies.push(AclLink {
                            id: policy.id.clone(),
                            name: policy.name.clone(),
                        });
                    }
                }
                Binding::Templated(policy) => token.templated_policies.push(policy),
            }
        }
        if token.service_identities.is_empty()
            && token.node_identities.is_empty()
            && token.roles.is_empty()
            && token.policies.is_empty()
            && token.templated_policies.is_empty()
        {
            return Err(RpcError::Forbidden("Permission denied".into()));
        }
        dedupe_identities(&mut token.service_identities, &mut token.node_identities);
        token.roles.dedup_by(|a, b| a.id == b.id);
        token.policies.dedup_by(|a, b| a.id == b.id);
        Ok(token)
    }

    /// Legate's bound on what logins leave behind: an identity (the same
    /// method and the same bindings) may hold at most
    /// `acl.login_tokens_per_identity` live tokens.
    fn check_live_tokens(&self, token: &AclToken) -> Result<(), RpcError> {
        let limit = self.config.acl.login_tokens_per_identity;
        let tables = self.store.read();
        let live = tables
            .acl_login_tokens_like(token)
            .filter(|t| {
                let ids =
                    |links: &[AclLink]| links.iter().map(|l| l.id.clone()).collect::<Vec<_>>();
                t.auth_method == token.auth_method
                    && t.local == token.local
                    && !crate::acl::expired(t)
                    && t.service_identities == token.service_identities
                    && t.node_identities == token.node_identities
                    && ids(&t.roles) == ids(&token.roles)
                    && ids(&t.policies) == ids(&token.policies)
                    && t.templated_policies == token.templated_policies
            })
            .count();
        if live >= limit {
            return Err(failed(format!(
                "this identity already holds {live} live tokens from auth method {:?} (at most {limit}): log out the ones no longer used, or wait for them to expire",
                token.auth_method
            )));
        }
        Ok(())
    }

    /// `ACL.Logout`: deletes the request's token, which login made.
    pub(crate) async fn acl_logout_write(&self, opts: &WriteOptions) -> Result<(), RpcError> {
        self.acl_writable()?;
        let token = self
            .store
            .read()
            .acl_token_by_secret(&opts.token)
            .cloned()
            .ok_or(RpcError::AclNotFound)?;
        // Consul's text; refused for any token that login did not make,
        // whatever it may do, so not a permission the token lacks.
        if token.auth_method.is_empty() {
            return Err(RpcError::Forbidden(
                "Permission denied: token wasn't created via login".into(),
            ));
        }
        // A global login token (replicated here) is deleted in the
        // primary, as Consul forwards it; deleting the copy would only
        // see it replicated back.
        if !token.local {
            if let Some((remote, routed)) = self.global_write(opts)? {
                return remote.acl_logout(&routed).await;
            }
        }
        self.acl_write(Command::AclTokenDelete(token.accessor_id))
            .await
            .map(|_| ())
    }
}
