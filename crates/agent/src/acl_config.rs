//! The agent's `acl {}` block and the older keys it replaced: each old key
//! still works when its new key is unset, with Consul's deprecation
//! warning; `acl_datacenter` also names the primary and turns ACLs on.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{get_bool, get_str, ConfigError};

/// Consul's cache lifetimes on agents that are not authoritative.
pub const DEFAULT_ACL_TTL: Duration = Duration::from_secs(30);

/// The tokens an agent holds (`acl.tokens`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclTokens {
    /// The management token the primary's leader creates if absent.
    pub initial_management: Option<String>,
    /// The agent's own operations (node registration, coordinates).
    pub agent: Option<String>,
    /// The local-only recovery token.
    pub agent_recovery: Option<String>,
    /// Tokenless HTTP and DNS requests.
    pub default: Option<String>,
    /// DNS lookups (falls back to `default`).
    pub dns: Option<String>,
    /// Services and checks from config files without a `token`.
    pub config_file_service_registration: Option<String>,
    /// Replication in a secondary.
    pub replication: Option<String>,
}

/// The agent's ACL settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclConfig {
    /// Enforcement on.
    pub enabled: bool,
    /// `allow` or `deny`.
    pub default_policy: String,
    /// `extend-cache`, `async-cache`, `allow` or `deny`.
    pub down_policy: String,
    /// API-set agent tokens are saved in the data dir.
    pub enable_token_persistence: bool,
    /// Recursive KV reads need `list`.
    pub enable_key_list_policy: bool,
    /// Secondaries replicate tokens.
    pub enable_token_replication: bool,
    /// Cache lifetimes of tokens, policies and roles.
    pub token_ttl: Duration,
    /// Policies' cache lifetime.
    pub policy_ttl: Duration,
    /// Roles' cache lifetime.
    pub role_ttl: Duration,
    /// How many resolved tokens are kept (`acl.token_cache_size`, Legate's;
    /// `None`: 1,024 on client agents, 10,240 on servers, Consul's fixed sizes).
    pub token_cache_size: Option<usize>,
    /// How many parsed policies a server keeps (`acl.policy_cache_size`,
    /// Legate's; `None`: 4,096).
    pub policy_cache_size: Option<usize>,
    /// How many live login tokens one identity may hold per auth method
    /// (`acl.login_tokens_per_identity`, Legate's; `None`: 1,024).
    pub login_tokens_per_identity: Option<usize>,
    /// The tokens.
    pub tokens: AclTokens,
}

impl Default for AclConfig {
    fn default() -> Self {
        AclConfig {
            enabled: false,
            default_policy: "allow".into(),
            down_policy: "extend-cache".into(),
            enable_token_persistence: false,
            enable_key_list_policy: false,
            enable_token_replication: false,
            token_ttl: DEFAULT_ACL_TTL,
            policy_ttl: DEFAULT_ACL_TTL,
            role_ttl: DEFAULT_ACL_TTL,
            token_cache_size: None,
            policy_cache_size: None,
            login_tokens_per_identity: None,
            tokens: AclTokens::default(),
        }
    }
}

/// A string setting from `new`, else from the deprecated `old` (warning).
fn string_with_fallback(
    map: &Map<String, Value>,
    new: &[&str],
    old: &[&[&str]],
    warnings: &mut Vec<String>,
) -> Result<Option<String>, ConfigError> {
    if let Some(value) = get_str(map, new)? {
        return Ok(Some(value));
    }
    for path in old {
        if let Some(value) = get_str(map, path)? {
            warnings.push(format!(
                "The '{}' field is deprecated. Use the '{}' field instead.",
                path.join("."),
                new.join(".")
            ));
            return Ok(Some(value));
        }
    }
    Ok(None)
}

fn bool_with_fallback(
    map: &Map<String, Value>,
    new: &[&str],
    old: &[&str],
    warnings: &mut Vec<String>,
) -> Result<Option<bool>, ConfigError> {
    if let Some(value) = get_bool(map, new)? {
        return Ok(Some(value));
    }
    if let Some(value) = get_bool(map, old)? {
        warnings.push(format!(
            "The '{}' field is deprecated. Use the '{}' field instead.",
            old.join("."),
            new.join(".")
        ));
        return Ok(Some(value));
    }
    Ok(None)
}

fn duration(text: Option<String>, key: &str) -> Result<Option<Duration>, ConfigError> {
    match text {
        None => Ok(None),
        Some(text) => legate_types::duration::parse_go_duration(&text)
            .map(Some)
            .map_err(|e| ConfigError(format!("{key}: {e}"))),
    }
}

fn one_of(value: String, key: &str, allowed: &[&str]) -> Result<String, ConfigError> {
    if allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        Err(ConfigError(format!(
            "{key}: invalid value {value:?}: must be one of {}",
            allowed.join(", ")
        )))
    }
}

/// Parses the ACL settings of a merged config.
pub(crate) fn parse(
    map: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<AclConfig, ConfigError> {
    let defaults = AclConfig::default();
    let token = |new: &str, old: &[&[&str]], warnings: &mut Vec<String>| {
        string_with_fallback(map, &["acl", "tokens", new], old, warnings)
            .map(|t| t.filter(|s| !s.is_empty()))
    };
    let tokens = AclTokens {
        initial_management: token(
            "initial_management",
            &[&["acl", "tokens", "master"], &["acl_master_token"]],
            warnings,
        )?,
        agent: token("agent", &[&["acl_agent_token"]], warnings)?,
        agent_recovery: token(
            "agent_recovery",
            &[
                &["acl", "tokens", "agent_master"],
                &["acl_agent_master_token"],
            ],
            warnings,
        )?,
        default: token("default", &[&["acl_token"]], warnings)?,
        dns: token("dns", &[], warnings)?,
        config_file_service_registration: token("config_file_service_registration", &[], warnings)?,
        replication: token("replication", &[&["acl_replication_token"]], warnings)?,
    };
    let acl_datacenter = get_str(map, &["acl_datacenter"])?;
    if acl_datacenter.is_some() {
        warnings.push(
            "The 'acl_datacenter' field is deprecated. Use the 'primary_datacenter' field instead."
                .into(),
        );
    }
    let enabled = get_bool(map, &["acl", "enabled"])?.unwrap_or(acl_datacenter.is_some());
    let default_policy = string_with_fallback(
        map,
        &["acl", "default_policy"],
        &[&["acl_default_policy"]],
        warnings,
    )?
    .map(|p| one_of(p, "acl.default_policy", &["allow", "deny"]))
    .transpose()?
    .unwrap_or(defaults.default_policy);
    let down_policy = string_with_fallback(
        map,
        &["acl", "down_policy"],
        &[&["acl_down_policy"]],
        warnings,
    )?
    .map(|p| {
        one_of(
            p,
            "acl.down_policy",
            &["allow", "deny", "extend-cache", "async-cache"],
        )
    })
    .transpose()?
    .unwrap_or(defaults.down_policy);
    let token_ttl = duration(
        string_with_fallback(map, &["acl", "token_ttl"], &[&["acl_ttl"]], warnings)?,
        "acl.token_ttl",
    )?
    .unwrap_or(DEFAULT_ACL_TTL);
    Ok(AclConfig {
        enabled,
        default_policy,
        down_policy,
        enable_token_persistence: get_bool(map, &["acl", "enable_token_persistence"])?
            .unwrap_or(false),
        enable_key_list_policy: bool_with_fallback(
            map,
            &["acl", "enable_key_list_policy"],
            &["acl_enable_key_list_policy"],
            warnings,
        )?
        .unwrap_or(false),
        // Consul's older keys: `enable_acl_replication`, and a top-level
        // `acl_replication_token` turns token replication on too.
        enable_token_replication: bool_with_fallback(
            map,
            &["acl", "enable_token_replication"],
            &["enable_acl_replication"],
            warnings,
        )?
        .unwrap_or(
            tokens.replication.is_some() && get_str(map, &["acl_replication_token"])?.is_some(),
        ),
        token_ttl,
        policy_ttl: duration(get_str(map, &["acl", "policy_ttl"])?, "acl.policy_ttl")?
            .unwrap_or(DEFAULT_ACL_TTL),
        role_ttl: duration(get_str(map, &["acl", "role_ttl"])?, "acl.role_ttl")?
            .unwrap_or(DEFAULT_ACL_TTL),
        token_cache_size: cache_size(map, "token_cache_size")?,
        policy_cache_size: cache_size(map, "policy_cache_size")?,
        login_tokens_per_identity: cache_size(map, "login_tokens_per_identity")?,
        tokens,
    })
}

/// `acl.<key>`: a cache size of at least 1.
fn cache_size(map: &Map<String, Value>, key: &str) -> Result<Option<usize>, ConfigError> {
    match map.get("acl").and_then(|acl| acl.get(key)) {
        None => Ok(None),
        Some(value) => match value.as_u64().or_else(|| value.as_str()?.parse().ok()) {
            Some(n) if n >= 1 => Ok(Some(n as usize)),
            _ => Err(ConfigError(format!(
                "acl.{key} must be a whole number of at least 1, not {value}"
            ))),
        },
    }
}

/// The primary datacenter `acl_datacenter` names, when `primary_datacenter` is unset.
pub(crate) fn primary_from_acl_datacenter(
    map: &Map<String, Value>,
) -> Result<Option<String>, ConfigError> {
    get_str(map, &["acl_datacenter"])
}
