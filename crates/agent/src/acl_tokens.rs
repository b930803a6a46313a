//! The tokens an agent holds, changed at run time through
//! `PUT /v1/agent/token/<kind>` and, with `acl.enable_token_persistence`,
//! kept in `<data_dir>/acl-tokens.json` (Consul's file and keys): a
//! persisted token beats the config's on the next start, with a warning.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::acl_config::AclTokens;

/// Consul's file of persisted agent tokens.
pub const PERSISTED_TOKENS_FILE: &str = "acl-tokens.json";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    replication: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    agent_recovery: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    default: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    agent: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    config_file_service_registration: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    dns: String,
}

/// The kinds `/v1/agent/token/<kind>` takes, with Consul's older names.
fn canonical_kind(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "default" | "acl_token" => "default",
        "agent" | "acl_agent_token" => "agent",
        "agent_recovery" | "agent_master" | "acl_agent_master_token" => "agent_recovery",
        "replication" | "acl_replication_token" => "replication",
        "config_file_service_registration" => "config_file_service_registration",
        "dns" | "dns_token" => "dns",
        _ => return None,
    })
}

/// The agent's tokens.
pub struct TokenStore {
    /// The tokens now, published to whoever follows them (the server's
    /// replication token).
    tokens: tokio::sync::watch::Sender<AclTokens>,
    persist_to: Option<PathBuf>,
}

impl TokenStore {
    /// The config's tokens, overridden by persisted ones when persistence
    /// is on (`warnings` says which).
    pub fn new(
        configured: &AclTokens,
        persistence: bool,
        data_dir: Option<&std::path::Path>,
        warnings: &mut Vec<String>,
    ) -> TokenStore {
        let persist_to = data_dir
            .filter(|_| persistence)
            .map(|d| d.join(PERSISTED_TOKENS_FILE));
        let mut tokens = configured.clone();
        if let Some(path) = &persist_to {
            if let Ok(bytes) = std::fs::read(path) {
                match serde_json::from_slice::<Persisted>(&bytes) {
                    Ok(saved) => {
                        let mut take = |slot: &mut Option<String>, value: String, name: &str| {
                            if !value.is_empty() {
                                if slot.is_some() {
                                    warnings.push(format!(
                                        "\"{name}\" token present in both the configuration and persisted token store, using the persisted token"
                                    ));
                                }
                                *slot = Some(value);
                            }
                        };
                        take(&mut tokens.default, saved.default, "default");
                        take(&mut tokens.agent, saved.agent, "agent");
                        take(
                            &mut tokens.agent_recovery,
                            saved.agent_recovery,
                            "agent_recovery",
                        );
                        take(&mut tokens.replication, saved.replication, "replication");
                        take(
                            &mut tokens.config_file_service_registration,
                            saved.config_file_service_registration,
                            "config_file_service_registration",
                        );
                        take(&mut tokens.dns, saved.dns, "dns");
                    }
                    Err(e) => warnings.push(format!(
                        "failed to load persisted tokens from {}: {e}",
                        path.display()
                    )),
                }
            }
        }
        TokenStore {
            tokens: tokio::sync::watch::Sender::new(tokens),
            persist_to,
        }
    }

    /// The tokens now.
    pub fn get(&self) -> AclTokens {
        self.tokens.borrow().clone()
    }

    /// Follows the tokens as they are set.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<AclTokens> {
        self.tokens.subscribe()
    }

    /// The token tokenless requests use.
    pub fn default_token(&self) -> Option<String> {
        self.get().default
    }

    /// The token of the agent's own operations: `agent`, else `default`.
    pub fn agent_token(&self) -> String {
        let tokens = self.get();
        tokens.agent.or(tokens.default).unwrap_or_default()
    }

    /// The token DNS lookups use: `dns`, else `default` (else none: the
    /// anonymous token).
    pub fn dns_token(&self) -> String {
        let tokens = self.get();
        tokens.dns.or(tokens.default).unwrap_or_default()
    }

    /// The token a registration syncs with: its own, else (for services
    /// and checks from config files) `config_file_service_registration`,
    /// else `default`.
    pub fn registration_token(&self, own: &str, from_config: bool) -> String {
        if !own.is_empty() {
            return own.to_string();
        }
        let tokens = self.get();
        let file = tokens
            .config_file_service_registration
            .filter(|_| from_config);
        file.or(tokens.default).unwrap_or_default()
    }

    /// Sets one kind (`""` clears it); `Err` names an unknown kind.
    /// Persisted when persistence is on.
    pub fn set(&self, kind: &str, token: String) -> Result<&'static str, String> {
        let kind = canonical_kind(kind).ok_or_else(|| format!("Token {kind:?} is unknown"))?;
        let value = Some(token).filter(|t| !t.is_empty());
        self.tokens.send_modify(|tokens| match kind {
            "default" => tokens.default = value,
            "agent" => tokens.agent = value,
            "agent_recovery" => tokens.agent_recovery = value,
            "replication" => tokens.replication = value,
            "config_file_service_registration" => tokens.config_file_service_registration = value,
            _ => tokens.dns = value,
        });
        self.persist()?;
        Ok(kind)
    }

    fn persist(&self) -> Result<(), String> {
        let Some(path) = &self.persist_to else {
            return Ok(());
        };
        let t = self.get();
        let saved = Persisted {
            replication: t.replication.unwrap_or_default(),
            agent_recovery: t.agent_recovery.unwrap_or_default(),
            default: t.default.unwrap_or_default(),
            agent: t.agent.unwrap_or_default(),
            config_file_service_registration: t
                .config_file_service_registration
                .unwrap_or_default(),
            dns: t.dns.unwrap_or_default(),
        };
        let bytes = serde_json::to_vec(&saved).map_err(|e| e.to_string())?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|()| {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
                }
                std::fs::rename(&tmp, path)
            })
            .map_err(|e| format!("Failed persisting tokens: {e}"))
    }
}
