//! Token resolution on an agent (Consul's client-side ACL resolver): a
//! secret becomes an authorizer built here from the rules the servers
//! send (`acl_resolve`). Resolved tokens are cached, bounded, for
//! `acl.token_ttl`, and the whole cache is dropped whenever the servers
//! report a change to any ACL table (one batched watch), so a deleted
//! token is refused long before its TTL. When the servers cannot be
//! reached, `acl.down_policy` decides.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use legate_acl::{
    Access, Authorizer, DefaultPolicy, DownAnswer, DownPolicy, PolicyAuthorizer, Resource,
};
use legate_types::acl::ANONYMOUS_TOKEN_ID;
use legate_types::rpc::{ServerRpc, Watched};
use legate_types::{Consistency, QueryOptions, RpcError};

use crate::acl_config::AclConfig;
use crate::acl_tokens::TokenStore;

/// How many resolved tokens an agent keeps (Consul's client keeps 1,024).
pub const TOKEN_CACHE_CAPACITY: usize = 1024;
/// How long an agent stops enforcing after the servers said ACLs are off.
const DISABLED_RECHECK: Duration = Duration::from_secs(30);

/// A resolved token.
#[derive(Debug)]
pub struct ResolvedToken {
    /// Its AccessorID.
    pub accessor_id: String,
    /// What it may do.
    pub authorizer: Authorizer,
}

impl ResolvedToken {
    /// `Ok` when this token may have `access` to `resource` `name`;
    /// Consul's permission error when not.
    pub fn check(&self, resource: Resource, name: &str, access: Access) -> Result<(), RpcError> {
        if self.authorizer.allowed(resource, name, access) {
            return Ok(());
        }
        Err(self.denied(resource, name, access))
    }

    /// `Ok` when this token may have `access` to every `resource` name
    /// (Consul's `NodeReadAll`); Consul's unnamed permission error when not.
    pub fn check_all(&self, resource: Resource, access: Access) -> Result<(), RpcError> {
        if self.authorizer.all_allowed(resource, access) {
            return Ok(());
        }
        Err(self.denied(resource, "", access))
    }

    fn denied(&self, resource: Resource, name: &str, access: Access) -> RpcError {
        let accessor = if self.accessor_id.is_empty() {
            ANONYMOUS_TOKEN_ID
        } else {
            &self.accessor_id
        };
        RpcError::PermissionDenied(legate_acl::denial(
            accessor,
            accessor == ANONYMOUS_TOKEN_ID,
            resource,
            access,
            name,
        ))
    }
}

struct Cached {
    token: Arc<ResolvedToken>,
    fetched: Instant,
}

/// Counts entries an ACL cache let go to make room (not those dropped
/// because the ACL tables changed): `acl.cache.evictions` with the cache
/// (`token`, `policy`) and where it lives (`agent`, `server`).
pub fn count_evictions(cache: &str, side: &str, evicted: usize) {
    if evicted > 0 {
        metrics::counter!("acl.cache.evictions", "cache" => cache.to_string(), "side" => side.to_string())
            .increment(evicted as u64);
    }
}

/// The agent's token resolver.
pub struct AclResolver {
    rpc: Arc<dyn ServerRpc>,
    datacenter: String,
    node_name: String,
    config: AclConfig,
    tokens: Arc<TokenStore>,
    cache: Mutex<HashMap<String, Cached>>,
    /// Until when the servers' "ACLs disabled" answer holds.
    disabled_until: Mutex<Option<Instant>>,
    /// Moves whenever the resolved tokens are dropped (an ACL table changed).
    generation: tokio::sync::watch::Sender<u64>,
}

impl AclResolver {
    /// A resolver over `rpc` for this agent.
    pub fn new(
        rpc: Arc<dyn ServerRpc>,
        datacenter: String,
        node_name: String,
        config: AclConfig,
        tokens: Arc<TokenStore>,
    ) -> Arc<AclResolver> {
        Arc::new(AclResolver {
            rpc,
            datacenter,
            node_name,
            config,
            tokens,
            cache: Mutex::new(HashMap::new()),
            disabled_until: Mutex::new(None),
            generation: tokio::sync::watch::channel(0).0,
        })
    }

    fn default_policy(&self) -> DefaultPolicy {
        if self.config.default_policy == "deny" {
            DefaultPolicy::Deny
        } else {
            DefaultPolicy::Allow
        }
    }

    fn static_token(&self, default: DefaultPolicy) -> Arc<ResolvedToken> {
        Arc::new(ResolvedToken {
            accessor_id: String::new(),
            authorizer: Authorizer::new(PolicyAuthorizer::default(), default),
        })
    }

    /// The secret a request without one uses: `acl.tokens.default`, else
    /// the anonymous token's.
    pub fn effective_secret(&self, secret: &str) -> String {
        if !secret.is_empty() {
            return secret.to_string();
        }
        self.tokens
            .default_token()
            .unwrap_or_else(|| legate_types::acl::ANONYMOUS_TOKEN_SECRET.to_string())
    }

    /// Resolves a request's secret (`None` when ACLs are off here).
    pub async fn resolve(
        self: &Arc<Self>,
        secret: &str,
    ) -> Result<Option<Arc<ResolvedToken>>, RpcError> {
        if !self.config.enabled {
            return Ok(None);
        }
        if self
            .disabled_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until)
        {
            return Ok(None);
        }
        let secret = self.effective_secret(secret);
        if let Some(recovery) = self.tokens.get().agent_recovery {
            if secret == recovery {
                return Ok(Some(self.recovery_token()));
            }
        }
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&secret)
            .map(|c| (c.token.clone(), c.fetched.elapsed() < self.config.token_ttl));
        match cached {
            Some((token, true)) => return Ok(Some(token)),
            Some((token, false)) if self.config.down_policy == "async-cache" => {
                // The stale entry now; a fresh one for the next request.
                let me = self.clone();
                tokio::spawn(async move {
                    let _ = me.fetch(&*me.rpc, &secret).await;
                });
                return Ok(Some(token));
            }
            _ => {}
        }
        match self.fetch(&*self.rpc, &secret).await {
            Ok(token) => Ok(Some(token)),
            // Unknown, or refused (another datacenter's local token).
            Err(e @ (RpcError::AclNotFound | RpcError::PermissionDenied(_))) => Err(e),
            Err(RpcError::AclDisabled) => {
                *self
                    .disabled_until
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + DISABLED_RECHECK);
                Ok(None)
            }
            Err(e) => self.when_down(cached.map(|(token, _)| token), e).map(Some),
        }
    }

    /// What `down_policy` answers when the servers cannot resolve a token.
    fn when_down(
        &self,
        stale: Option<Arc<ResolvedToken>>,
        error: RpcError,
    ) -> Result<Arc<ResolvedToken>, RpcError> {
        tracing::warn!(error = %error, policy = %self.config.down_policy, "acl: resolving a token failed; applying down_policy");
        let policy = DownPolicy::parse(&self.config.down_policy).unwrap_or_default();
        match policy.answer(stale, self.default_policy()) {
            DownAnswer::Stale(token) => Ok(token),
            DownAnswer::Static(default) => Ok(self.static_token(default)),
        }
    }

    async fn fetch(
        &self,
        rpc: &dyn ServerRpc,
        secret: &str,
    ) -> Result<Arc<ResolvedToken>, RpcError> {
        let opts = QueryOptions {
            datacenter: self.datacenter.clone(),
            consistency: Consistency::Stale,
            token: secret.to_string(),
            ..Default::default()
        };
        let identity = match rpc.acl_resolve(&opts).await {
            Ok(identity) => identity,
            Err(RpcError::AclNotFound) => {
                self.cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(secret);
                return Err(RpcError::AclNotFound);
            }
            Err(e) => return Err(e),
        };
        let rules: Vec<legate_acl::Rules> = identity
            .rules
            .iter()
            .filter_map(|text| legate_acl::parse(text).ok())
            .collect();
        let token = Arc::new(ResolvedToken {
            accessor_id: identity.accessor_id,
            authorizer: Authorizer::new(PolicyAuthorizer::new(&rules), self.default_policy()),
        });
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let capacity = self.config.token_cache_size.unwrap_or(TOKEN_CACHE_CAPACITY);
        if cache.len() >= capacity {
            let before = cache.len();
            cache.retain(|_, c| c.fetched.elapsed() < self.config.token_ttl);
            if cache.len() >= capacity {
                cache.clear();
            }
            count_evictions("token", "agent", before - cache.len());
        }
        cache.insert(
            secret.to_string(),
            Cached {
                token: token.clone(),
                fetched: Instant::now(),
            },
        );
        Ok(token)
    }

    /// The agent recovery token: write on this agent, read on every node,
    /// nothing else; resolved here without the servers.
    fn recovery_token(&self) -> Arc<ResolvedToken> {
        let rules = format!(
            "agent {:?} {{ policy = \"write\" }}\nnode_prefix \"\" {{ policy = \"read\" }}",
            self.node_name
        );
        let parsed = legate_acl::parse(&rules).unwrap_or_default();
        Arc::new(ResolvedToken {
            accessor_id: format!("agent-recovery:{}", self.node_name),
            authorizer: Authorizer::new(PolicyAuthorizer::new([&parsed]), DefaultPolicy::Deny),
        })
    }

    /// Forgets every resolved token and tells [`AclResolver::changes`]'
    /// followers.
    pub fn invalidate(&self) {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.generation.send_modify(|g| *g += 1);
    }

    /// Moves whenever tokens, policies or roles may have changed: what was
    /// decided with a resolved token should be decided again (open xDS
    /// streams re-check theirs).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Whether this agent enforces ACLs.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// `Ok` when `secret` may have `access` to `resource` `name`; Consul's
    /// permission error when not.
    pub async fn authorize(
        self: &Arc<Self>,
        secret: &str,
        resource: Resource,
        name: &str,
        access: Access,
    ) -> Result<(), RpcError> {
        match self.resolve(secret).await? {
            Some(token) => token.check(resource, name, access),
            None => Ok(()),
        }
    }

    /// Follows the servers' ACL tables and drops the cache whenever they
    /// change (until the agent stops: abort the task).
    pub async fn follow_changes(self: Arc<Self>) {
        if !self.config.enabled {
            return;
        }
        let mut since = 0u64;
        let mut failures = 0u32;
        loop {
            let opts = QueryOptions {
                datacenter: self.datacenter.clone(),
                consistency: Consistency::Stale,
                min_index: since.max(1),
                max_wait: Some(Duration::from_secs(300)),
                token: self.tokens.agent_token(),
                ..Default::default()
            };
            match self
                .rpc
                .changes_since(&opts, vec![(Watched::Acl, since)])
                .await
            {
                Ok(answer) => {
                    failures = 0;
                    if !answer.value.is_empty() && since != 0 {
                        self.invalidate();
                    }
                    since = answer.meta.index;
                }
                Err(e) => {
                    failures += 1;
                    tracing::debug!(error = %e, "acl: following ACL changes failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200 * 2u64.pow(failures.min(6))))
                        .await;
                }
            }
        }
    }
}
