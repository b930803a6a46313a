//! Token resolution on a server: a SecretID becomes an authorizer — the
//! token's policies, its roles' policies and the synthetic policies of its
//! identities, merged over the default policy — read from this server's
//! state store. Resolved tokens are cached, bounded, and dropped whenever
//! any ACL table changes (so a deleted token is refused by the next
//! request), and policies' parsed rules are kept by (ID, ModifyIndex).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use legate_acl::identities::{node_identity_rules, service_identity_rules};
use legate_acl::{Authorizer, DefaultPolicy, PolicyAuthorizer, Rules};
use legate_state::{Command, Table, Tables};
use legate_types::acl::{AclToken, ANONYMOUS_TOKEN_ID, ANONYMOUS_TOKEN_SECRET};
use legate_types::RpcError;

use crate::{Access, Resource, Server};

/// The ACL settings of a server (`acl {}` in the agent config).
#[derive(Debug, Clone)]
pub struct AclSettings {
    /// Whether ACLs are enforced.
    pub enabled: bool,
    /// What requests no rule decides get.
    pub default_policy: DefaultPolicy,
    /// The secret of the management token the primary's leader makes when
    /// no token has it (`tokens.initial_management`).
    pub initial_management: Option<String>,
    /// How many resolved tokens a server keeps.
    pub token_cache_capacity: usize,
    /// How many parsed policies (by ID and version) a server keeps.
    pub policy_cache_capacity: usize,
    /// Recursive KV reads (`?recurse`, `?keys`) need `key:list` on the
    /// prefix first (`acl.enable_key_list_policy`).
    pub enable_key_list_policy: bool,
    /// What a secondary does when the primary cannot resolve a token.
    pub down_policy: legate_acl::DownPolicy,
    /// How long a secondary keeps a token the primary resolved.
    pub token_ttl: std::time::Duration,
    /// A secondary replicates global tokens too
    /// (`acl.enable_token_replication`) and resolves tokens from its copy.
    pub enable_token_replication: bool,
    /// How many live tokens one identity may hold from one auth method
    /// (`acl.login_tokens_per_identity`, Legate's).
    pub login_tokens_per_identity: usize,
    /// The token a secondary's own calls to the primary carry (replication
    /// rounds, federation state anti-entropy, signing its intermediate CA):
    /// `acl.tokens.replication`, as the agent's token store has it now.
    pub replication_token: tokio::sync::watch::Receiver<String>,
}

impl Default for AclSettings {
    fn default() -> Self {
        AclSettings {
            enabled: false,
            default_policy: DefaultPolicy::Allow,
            initial_management: None,
            token_cache_capacity: 10 * 1024,
            policy_cache_capacity: 4096,
            enable_key_list_policy: false,
            down_policy: legate_acl::DownPolicy::ExtendCache,
            token_ttl: std::time::Duration::from_secs(30),
            enable_token_replication: false,
            login_tokens_per_identity: crate::acl_login::LIVE_TOKENS_PER_IDENTITY,
            replication_token: tokio::sync::watch::channel(String::new()).1,
        }
    }
}

/// A token resolved for one request.
#[derive(Debug)]
pub struct ResolvedToken {
    /// Its AccessorID (the anonymous token's for tokenless requests).
    pub accessor_id: String,
    /// What it may do.
    pub authorizer: Authorizer,
    /// When it stops being valid (`ExpirationTime`), if ever.
    pub expires_at: Option<std::time::SystemTime>,
}

impl ResolvedToken {
    pub(crate) fn expired(&self) -> bool {
        self.expires_at
            .is_some_and(|at| at <= std::time::SystemTime::now())
    }
}

/// Resolved tokens and parsed policies, valid for one state of the ACL
/// tables. Hits take only the read side: requests resolving the same
/// token on every core do not queue behind each other.
#[derive(Default)]
pub(crate) struct AclCache {
    inner: RwLock<CacheState>,
}

#[derive(Default)]
struct CacheState {
    /// The ACL tables' index the entries were resolved at.
    at: u64,
    tokens: HashMap<String, Arc<ResolvedToken>>,
    /// Parsed rules by (policy ID, ModifyIndex).
    rules: HashMap<(String, u64), Arc<Rules>>,
}

/// Counts entries a server's ACL cache let go to make room
/// (`acl.cache.evictions`, `side=server`).
pub(crate) fn count_evictions(cache: &str, evicted: usize) {
    if evicted > 0 {
        metrics::counter!("acl.cache.evictions", "cache" => cache.to_string(), "side" => "server")
            .increment(evicted as u64);
    }
}

/// How many expired tokens one reaping round deletes (Consul's batch).
pub(crate) const REAP_BATCH: usize = 4096;

/// The index of the ACL tables together.
fn acl_index(tables: &Tables) -> u64 {
    tables.max_index(&[Table::AclTokens, Table::AclPolicies, Table::AclRoles])
}

/// Whether an RFC 3339 expiration time has passed.
pub(crate) fn expired(token: &AclToken) -> bool {
    let Some(at) = &token.expiration_time else {
        return false;
    };
    match humantime::parse_rfc3339_weak(at) {
        Ok(when) => when <= std::time::SystemTime::now(),
        Err(_) => false,
    }
}

impl Server {
    /// Resolves a request's secret (empty: the anonymous token).
    pub(crate) fn resolve_token(&self, secret: &str) -> Result<Arc<ResolvedToken>, RpcError> {
        let _timer = legate_telemetry::MeasureSince::start("acl.ResolveToken");
        let secret = if secret.is_empty() {
            ANONYMOUS_TOKEN_SECRET
        } else {
            secret
        };
        let tables = self.store.read();
        let index = acl_index(&tables);
        {
            let cache = self
                .acl_cache
                .inner
                .read()
                .unwrap_or_else(|e| e.into_inner());
            if cache.at == index {
                if let Some(hit) = cache.tokens.get(secret).filter(|t| !t.expired()) {
                    return Ok(hit.clone());
                }
            }
        }
        {
            let mut cache = self
                .acl_cache
                .inner
                .write()
                .unwrap_or_else(|e| e.into_inner());
            if cache.at != index {
                cache.at = index;
                cache.tokens.clear();
            }
        }
        let Some(token) = tables.acl_token_by_secret(secret) else {
            drop(tables);
            return self.remotely_resolved(secret);
        };
        if expired(token) {
            return Err(RpcError::AclNotFound);
        }
        let rules = self.token_rules(&tables, token);
        let resolved = Arc::new(ResolvedToken {
            accessor_id: token.accessor_id.clone(),
            authorizer: Authorizer::new(
                PolicyAuthorizer::new(rules.iter().map(|r| &**r)),
                self.config.acl.default_policy,
            ),
            expires_at: token
                .expiration_time
                .as_deref()
                .and_then(|at| humantime::parse_rfc3339_weak(at).ok()),
        });
        drop(tables);
        let mut cache = self
            .acl_cache
            .inner
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if cache.at == index {
            if cache.tokens.len() >= self.config.acl.token_cache_capacity {
                count_evictions("token", cache.tokens.len());
                cache.tokens.clear();
            }
            cache.tokens.insert(secret.to_string(), resolved.clone());
        }
        Ok(resolved)
    }

    /// A token this server does not hold, as the primary resolved it
    /// (remote resolution in a secondary; see [`crate::acl_remote`]).
    fn remotely_resolved(&self, secret: &str) -> Result<Arc<ResolvedToken>, RpcError> {
        use crate::acl_remote::RemoteAnswer;
        match self.remote_token(secret) {
            Some(RemoteAnswer::Resolved { token, .. }) if !token.expired() => Ok(token),
            Some(RemoteAnswer::Refused(e)) => Err(e),
            Some(RemoteAnswer::Down { token, .. }) => Ok(token),
            _ => Err(RpcError::AclNotFound),
        }
    }

    /// Every rule set a token carries in this datacenter: its policies,
    /// its roles' policies, and its (and its roles') identities.
    fn token_rules(&self, tables: &Tables, token: &AclToken) -> Vec<Arc<Rules>> {
        self.token_rule_texts(tables, token, &self.config.datacenter)
            .into_iter()
            .filter_map(|(version, text)| match version {
                Some((id, modify_index)) => self.parsed_rules(&id, modify_index, &text),
                None => legate_acl::parse(&text).ok().map(Arc::new),
            })
            .collect()
    }

    /// The rules texts a token carries in datacenter `dc`, each with its
    /// policy's (ID, ModifyIndex) when it is a stored policy (identities'
    /// synthetic policies have none).
    fn token_rule_texts(
        &self,
        tables: &Tables,
        token: &AclToken,
        dc: &str,
    ) -> Vec<(Option<(String, u64)>, String)> {
        let applies_here = |datacenters: &[String]| datacenters.iter().any(|d| d == dc);
        let mut out = Vec::new();
        let mut policy_ids: Vec<&str> = token.policies.iter().map(|l| l.id.as_str()).collect();
        let mut services = token.service_identities.clone();
        let mut nodes = token.node_identities.clone();
        let mut templated = token.templated_policies.clone();
        for link in &token.roles {
            if let Some(role) = tables.acl_role(&link.id).1 {
                policy_ids.extend(role.policies.iter().map(|l| l.id.as_str()));
                services.extend(role.service_identities.iter().cloned());
                nodes.extend(role.node_identities.iter().cloned());
                templated.extend(role.templated_policies.iter().cloned());
            }
        }
        for id in policy_ids {
            let Some(policy) = tables.acl_policy(id).1 else {
                continue; // deleted policies stop contributing
            };
            if !policy.datacenters.is_empty() && !applies_here(&policy.datacenters) {
                continue;
            }
            out.push((
                Some((policy.id.clone(), policy.modify_index)),
                policy.rules.clone(),
            ));
        }
        for identity in services {
            if identity.datacenters.is_empty() || applies_here(&identity.datacenters) {
                out.push((None, service_identity_rules(&identity.service_name)));
            }
        }
        for identity in nodes {
            if identity.datacenter == dc {
                out.push((None, node_identity_rules(&identity.node_name)));
            }
        }
        for rules in crate::acl_templated::rules_in(&templated, dc) {
            out.push((None, rules));
        }
        out
    }

    /// `ACL.ResolveToken` for agents: the request's token and its rules
    /// here (as the primary resolved it, in a secondary that does not
    /// hold it).
    pub(crate) fn acl_identity(
        &self,
        opts: &legate_types::QueryOptions,
    ) -> Result<legate_types::acl::AclIdentity, RpcError> {
        use crate::acl_remote::RemoteAnswer;
        match self.acl_identity_for(opts, &self.config.datacenter) {
            Err(RpcError::AclNotFound) => match self.remote_token(&opts.token) {
                Some(RemoteAnswer::Resolved { identity, token }) if !token.expired() => {
                    Ok(identity)
                }
                Some(RemoteAnswer::Refused(e)) | Some(RemoteAnswer::Down { error: e, .. }) => {
                    Err(e)
                }
                _ => Err(RpcError::AclNotFound),
            },
            other => other,
        }
    }

    /// The request's token as this server holds it, with the rules that
    /// apply in datacenter `dc` (`ACL.ResolveToken`, and the primary's
    /// answer to a secondary's remote resolution).
    pub(crate) fn acl_identity_for(
        &self,
        opts: &legate_types::QueryOptions,
        dc: &str,
    ) -> Result<legate_types::acl::AclIdentity, RpcError> {
        if !self.config.acl.enabled {
            return Err(RpcError::AclDisabled);
        }
        let secret = if opts.token.is_empty() {
            ANONYMOUS_TOKEN_SECRET
        } else {
            &opts.token
        };
        let tables = self.store.read();
        let token = tables
            .acl_token_by_secret(secret)
            .filter(|t| !expired(t))
            .ok_or(RpcError::AclNotFound)?;
        Ok(legate_types::acl::AclIdentity {
            accessor_id: token.accessor_id.clone(),
            rules: self
                .token_rule_texts(&tables, token, dc)
                .into_iter()
                .map(|(_, text)| text)
                .collect(),
            local: token.local,
            source_datacenter: self.config.datacenter.clone(),
            expiration_time: token.expiration_time.clone(),
        })
    }

    /// A policy's rules, parsed once per version (stored rules were
    /// validated when written; an unparsable one contributes nothing).
    fn parsed_rules(&self, id: &str, modify_index: u64, text: &str) -> Option<Arc<Rules>> {
        let key = (id.to_string(), modify_index);
        if let Some(hit) = self
            .acl_cache
            .inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .rules
            .get(&key)
        {
            return Some(hit.clone());
        }
        let parsed = match legate_acl::parse(text) {
            Ok(rules) => Arc::new(rules),
            Err(e) => {
                tracing::warn!(policy = id, error = %e, "acl: a stored policy's rules do not parse; ignoring it");
                return None;
            }
        };
        let mut cache = self
            .acl_cache
            .inner
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if cache.rules.len() >= self.config.acl.policy_cache_capacity {
            count_evictions("policy", cache.rules.len());
            cache.rules.clear();
        }
        cache.rules.insert(key, parsed.clone());
        Some(parsed)
    }

    /// `Ok` when `token` may have `access` to `resource` (always with
    /// ACLs off); Consul's permission error naming what it lacks if not.
    pub(crate) fn authorize(
        &self,
        token: &str,
        resource: Resource,
        access: Access,
    ) -> Result<(), RpcError> {
        if !self.config.acl.enabled {
            return Ok(());
        }
        let resolved = self.resolve_token(token)?;
        let authorizer = &resolved.authorizer;
        let (rule_resource, name) = resource.rule_target();
        let allowed = match &resource {
            Resource::Snapshot => authorizer.snapshot_allowed(),
            Resource::KeyPrefix(prefix) if access == Access::Write => {
                authorizer.key_write_prefix_allowed(prefix)
            }
            _ => authorizer.allowed(rule_resource, name, access.to_acl()),
        };
        if allowed {
            Ok(())
        } else {
            let shown = if let Resource::Snapshot = resource {
                legate_acl::Access::Write
            } else {
                access.to_acl()
            };
            Err(permission_denied(
                &resolved.accessor_id,
                rule_resource,
                shown,
                name,
            ))
        }
    }

    /// With `enable_key_list_policy`, a recursive KV read needs `key:list`
    /// on its prefix before its entries are filtered by `key:read`.
    pub(crate) fn authorize_key_list(&self, token: &str, prefix: &str) -> Result<(), RpcError> {
        if !self.config.acl.enable_key_list_policy {
            return Ok(());
        }
        self.authorize(token, Resource::Key(prefix.to_string()), Access::List)
    }
}

/// Consul's permission error (see [`legate_acl::denial`]).
pub fn permission_denied(
    accessor_id: &str,
    resource: legate_acl::Resource,
    access: legate_acl::Access,
    name: &str,
) -> RpcError {
    RpcError::PermissionDenied(legate_acl::denial(
        accessor_id,
        accessor_id == ANONYMOUS_TOKEN_ID,
        resource,
        access,
        name,
    ))
}

/// The rules of the builtin `global-management` policy (Consul's text).
pub const GLOBAL_MANAGEMENT_RULES: &str = r#"
acl = "write"
agent_prefix "" {
	policy = "write"
}
event_prefix "" {
	policy = "write"
}
key_prefix "" {
	policy = "write"
}
keyring = "write"
node_prefix "" {
	policy = "write"
}
operator = "write"
mesh = "write"
peering = "write"
query_prefix "" {
	policy = "write"
}
service_prefix "" {
	policy = "write"
	intentions = "write"
}
session_prefix "" {
	policy = "write"
}
"#;

impl Server {
    /// Whether ACL rows may be written: every server advertises `acl`, or
    /// some already exist.
    pub(crate) fn acl_tables_enabled(&self) -> bool {
        self.store.read().has_acl_rows()
            || crate::features::cluster_supports(
                &self.server_features(),
                crate::features::ACL_TABLES,
            )
    }

    /// The leader's reaping of expired tokens (Consul's): at most
    /// [`REAP_BATCH`] a round, in one Raft entry. Expired tokens are
    /// refused and hidden from the moment they expire; this takes their
    /// rows (and their memory) away. A secondary reaps only its local
    /// tokens: global ones go in the primary and replication deletes the
    /// copies (a secondary whose clock runs ahead would otherwise delete
    /// what the next round writes back).
    pub(crate) async fn reap_expired_tokens(&self) {
        if !self.config.acl.enabled {
            return;
        }
        let secondary = self.is_secondary();
        let expired_ids: Vec<String> = {
            let tables = self.store.read();
            let (_, tokens) = tables.acl_tokens();
            tokens
                .filter(|t| t.local || !secondary)
                .filter(|t| t.expiration_time.is_some() && expired(t))
                .take(REAP_BATCH)
                .map(|t| t.accessor_id.clone())
                .collect()
        };
        if expired_ids.is_empty() {
            return;
        }
        let count = expired_ids.len();
        let commands = expired_ids
            .into_iter()
            .map(Command::AclTokenDelete)
            .collect();
        match self.write(Command::Batch(commands)).await {
            Ok(_) => tracing::info!(count, "acl: reaped expired tokens"),
            Err(e) => tracing::warn!(error = %e, "acl: reaping expired tokens failed"),
        }
    }

    /// The primary leader's ACL set-up on taking office (Consul's
    /// `initializeACLs`): the builtin policy, the anonymous token, and
    /// the initial management token when configured and absent.
    pub(crate) async fn acl_initialize(&self) -> Result<(), RpcError> {
        use legate_types::acl::{AclLink, AclPolicy};
        use legate_types::acl::{GLOBAL_MANAGEMENT_POLICY_ID, GLOBAL_MANAGEMENT_POLICY_NAME};
        if !self.config.acl.enabled || self.is_secondary() || !self.acl_tables_enabled() {
            return Ok(());
        }
        let (policy, anonymous, management_missing) = {
            let tables = self.store.read();
            let policy = tables.acl_policy(GLOBAL_MANAGEMENT_POLICY_ID).1.cloned();
            let anonymous = tables.acl_token(ANONYMOUS_TOKEN_ID).1.is_some();
            let management_missing = self
                .config
                .acl
                .initial_management
                .as_deref()
                .is_some_and(|secret| tables.acl_token_by_secret(secret).is_none());
            (policy, anonymous, management_missing)
        };
        if policy
            .as_ref()
            .is_none_or(|p| p.rules != GLOBAL_MANAGEMENT_RULES)
        {
            // Rules are restored; a user's rename and description are kept.
            let mut builtin = policy.unwrap_or_else(|| AclPolicy {
                id: GLOBAL_MANAGEMENT_POLICY_ID.into(),
                name: GLOBAL_MANAGEMENT_POLICY_NAME.into(),
                description: "Builtin Policy that grants unlimited access".into(),
                ..Default::default()
            });
            builtin.rules = GLOBAL_MANAGEMENT_RULES.into();
            builtin.datacenters.clear();
            builtin.hash = policy_hash(&builtin);
            self.write(Command::AclPolicySet(Box::new(builtin))).await?;
            tracing::info!("acl: created the global-management policy");
        }
        if !anonymous {
            let mut token = AclToken {
                accessor_id: ANONYMOUS_TOKEN_ID.into(),
                secret_id: ANONYMOUS_TOKEN_SECRET.into(),
                description: "Anonymous Token".into(),
                create_time: legate_types::federation_state::now_rfc3339(),
                ..Default::default()
            };
            token.hash = token_hash(&token);
            self.write(Command::AclTokenSet(Box::new(token))).await?;
            tracing::info!("acl: created the anonymous token");
        }
        if management_missing {
            let secret = self
                .config
                .acl
                .initial_management
                .clone()
                .unwrap_or_default();
            if uuid::Uuid::parse_str(&secret).is_err() {
                tracing::warn!("Configuring a non-UUID management token is deprecated");
            }
            let mut token = AclToken {
                accessor_id: uuid::Uuid::new_v4().to_string(),
                secret_id: secret,
                description: "Initial Management Token".into(),
                policies: vec![AclLink {
                    id: GLOBAL_MANAGEMENT_POLICY_ID.into(),
                    name: String::new(),
                }],
                create_time: legate_types::federation_state::now_rfc3339(),
                ..Default::default()
            };
            token.hash = token_hash(&token);
            // Through the bootstrap path when never bootstrapped, so a later
            // `acl bootstrap` is refused as Consul refuses it.
            let never_bootstrapped = self.store.read().acl_bootstrap_index() == 0;
            let command = if never_bootstrapped {
                Command::AclBootstrap {
                    token: Box::new(token.clone()),
                    reset_index: None,
                }
            } else {
                Command::AclTokenSet(Box::new(token))
            };
            self.write(command).await?;
            tracing::info!("acl: created the initial management token");
        }
        Ok(())
    }
}

/// A token's `Hash`: a digest of what it grants (base64 of 32 bytes).
pub(crate) fn token_hash(token: &AclToken) -> String {
    let mut text = format!("{}\n{}\n", token.description, token.local);
    for link in token.policies.iter().chain(&token.roles) {
        text.push_str(&link.id);
        text.push('\n');
    }
    for s in &token.service_identities {
        text.push_str(&format!("{}:{}\n", s.service_name, s.datacenters.join(",")));
    }
    for n in &token.node_identities {
        text.push_str(&format!("{}@{}\n", n.node_name, n.datacenter));
    }
    for t in &token.templated_policies {
        text.push_str(&crate::acl_templated::hash_line(t));
    }
    digest(&text)
}

/// A policy's `Hash`.
pub(crate) fn policy_hash(policy: &legate_types::acl::AclPolicy) -> String {
    digest(&format!(
        "{}\n{}\n{}\n{}",
        policy.name,
        policy.description,
        policy.rules,
        policy.datacenters.join(",")
    ))
}

/// Base64 of a 32-byte digest of `text`.
fn digest(text: &str) -> String {
    use base64::Engine;
    let sum = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sum.as_ref())
}

impl Server {
    /// The request's resolved token, `None` with ACLs off.
    pub(crate) fn request_token(
        &self,
        token: &str,
    ) -> Result<Option<Arc<ResolvedToken>>, RpcError> {
        if self.config.acl.enabled {
            self.resolve_token(token).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Keeps the rows the request's token may read: each row names what
    /// it needs (`read` on every target); marks the answer when any went.
    pub(crate) fn filter_by_acl<T>(
        &self,
        token: &str,
        mut queried: legate_types::Queried<Vec<T>>,
        targets: impl Fn(&T) -> Vec<(legate_acl::Resource, String)>,
    ) -> Result<legate_types::Queried<Vec<T>>, RpcError> {
        let Some(resolved) = self.request_token(token)? else {
            return Ok(queried);
        };
        let before = queried.value.len();
        queried.value.retain(|row| {
            targets(row).iter().all(|(resource, name)| {
                resolved
                    .authorizer
                    .allowed(*resource, name, legate_acl::Access::Read)
            })
        });
        queried.meta.results_filtered_by_acls = queried.value.len() < before;
        Ok(queried)
    }

    /// A node's services as the token may see them: nothing (`null`) when
    /// it cannot read the node, else the services it may read (Consul's
    /// `filterNodeServices`); marks the answer when anything went.
    pub(crate) fn filter_node_services(
        &self,
        token: &str,
        mut queried: legate_types::Queried<Option<legate_types::NodeServices>>,
    ) -> Result<legate_types::Queried<Option<legate_types::NodeServices>>, RpcError> {
        let Some(resolved) = self.request_token(token)? else {
            return Ok(queried);
        };
        let allowed = |resource, name: &str| {
            resolved
                .authorizer
                .allowed(resource, name, legate_acl::Access::Read)
        };
        let Some(found) = queried.value.as_mut() else {
            return Ok(queried);
        };
        if !allowed(legate_acl::Resource::Node, &found.node.node) {
            queried.value = None;
            queried.meta.results_filtered_by_acls = true;
            return Ok(queried);
        }
        let before = found.services.len();
        found
            .services
            .retain(|_, s| allowed(legate_acl::Resource::Service, &s.service));
        queried.meta.results_filtered_by_acls = found.services.len() < before;
        Ok(queried)
    }
}
