//! Remote token resolution (Consul's, for a secondary that does not
//! replicate tokens): a server of a secondary datacenter that does not
//! hold a request's token asks the primary for it before the call runs
//! (a [`TokenHook`] in front of the endpoints), so the call's synchronous
//! checks find it resolved. Answers are kept for `acl.token_ttl`; a token
//! local to another datacenter is refused with Consul's error; while the
//! primary cannot be reached, `acl.down_policy` decides.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use legate_acl::{Authorizer, DefaultPolicy, DownAnswer, DownPolicy, PolicyAuthorizer};
use legate_rpc::TokenHook;
use legate_types::acl::{AclIdentity, ANONYMOUS_TOKEN_SECRET};
use legate_types::{Consistency, QueryOptions, RpcError};

use crate::acl::ResolvedToken;
use crate::Server;

/// How long a down policy's answer without a token stands before the
/// primary is asked again.
const DOWN_RETRY: Duration = Duration::from_secs(1);

/// What the primary said of a token (or what stands in for it).
#[derive(Clone)]
pub(crate) enum RemoteAnswer {
    /// The token, resolved for this datacenter.
    Resolved {
        identity: AclIdentity,
        token: Arc<ResolvedToken>,
    },
    /// The token is refused here (another datacenter's local token).
    Refused(RpcError),
    /// The primary could not be asked and the down policy answered with
    /// no token of its own; agents asking get `error` and apply theirs.
    Down {
        token: Arc<ResolvedToken>,
        error: RpcError,
    },
}

struct Entry {
    answer: RemoteAnswer,
    fresh_until: Instant,
}

/// Tokens a secondary's server resolved in the primary, by SecretID.
#[derive(Default)]
pub(crate) struct RemoteTokens {
    entries: Mutex<HashMap<String, Entry>>,
}

impl RemoteTokens {
    fn get(&self, secret: &str) -> Option<(RemoteAnswer, bool)> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(secret)
            .map(|e| (e.answer.clone(), Instant::now() < e.fresh_until))
    }

    fn put(&self, secret: &str, answer: RemoteAnswer, fresh_for: Duration, capacity: usize) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= capacity && !entries.contains_key(secret) {
            let before = entries.len();
            let now = Instant::now();
            entries.retain(|_, e| now < e.fresh_until);
            if entries.len() >= capacity {
                entries.clear();
            }
            crate::acl::count_evictions("token", before - entries.len());
        }
        entries.insert(
            secret.to_string(),
            Entry {
                answer,
                fresh_until: Instant::now() + fresh_for,
            },
        );
    }

    fn remove(&self, secret: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(secret);
    }
}

/// The secret a request stands for (empty: the anonymous token's).
fn effective(secret: &str) -> &str {
    if secret.is_empty() {
        ANONYMOUS_TOKEN_SECRET
    } else {
        secret
    }
}

impl Server {
    /// What the primary last said of `secret`, however old (`None` when
    /// this server never asked, or the primary did not know it).
    pub(crate) fn remote_token(&self, secret: &str) -> Option<RemoteAnswer> {
        if !self.is_secondary() || self.tokens_replicated() {
            return None;
        }
        self.remote_tokens
            .get(effective(secret))
            .map(|(answer, _)| answer)
    }

    /// Readies `secret` for this call: in a secondary, a token this
    /// server does not hold is asked of the primary unless a fresh
    /// answer is kept.
    async fn prepare_remote_token(self: &Arc<Self>, secret: &str) {
        if !self.config.acl.enabled || !self.is_secondary() || self.tokens_replicated() {
            return;
        }
        let secret = effective(secret);
        if self.store.read().acl_token_by_secret(secret).is_some() {
            return;
        }
        let kept = self.remote_tokens.get(secret);
        match kept {
            Some((_, true)) => {}
            Some((RemoteAnswer::Resolved { .. }, false))
                if self.config.acl.down_policy == DownPolicy::AsyncCache =>
            {
                // The stale answer now; a fresh one for the next request.
                let server = self.clone();
                let secret = secret.to_string();
                tokio::spawn(async move { server.fetch_remote_token(&secret).await });
            }
            _ => self.fetch_remote_token(secret).await,
        }
    }

    async fn fetch_remote_token(&self, secret: &str) {
        let settings = &self.config.acl;
        let capacity = settings.token_cache_capacity;
        let asked = match self.to_primary() {
            Ok((primary_rpc, primary)) => {
                let opts = QueryOptions {
                    datacenter: primary,
                    consistency: Consistency::Stale,
                    token: secret.to_string(),
                    ..Default::default()
                };
                primary_rpc
                    .acl_resolve_for(&opts, self.config.datacenter.clone())
                    .await
            }
            Err(e) => Err(e),
        };
        match asked {
            Ok(identity)
                if identity.local && identity.source_datacenter != self.config.datacenter =>
            {
                let refusal = RpcError::PermissionDenied(format!(
                    "This is a local token in datacenter {:?}",
                    identity.source_datacenter
                ));
                let answer = RemoteAnswer::Refused(refusal);
                self.remote_tokens
                    .put(secret, answer, settings.token_ttl, capacity);
            }
            Ok(identity) => {
                let token = self.token_from_identity(&identity);
                let answer = RemoteAnswer::Resolved { identity, token };
                self.remote_tokens
                    .put(secret, answer, settings.token_ttl, capacity);
            }
            // Unknown tokens are never kept (#11704).
            Err(RpcError::AclNotFound) => self.remote_tokens.remove(secret),
            Err(e @ RpcError::PermissionDenied(_)) => {
                let answer = RemoteAnswer::Refused(e);
                self.remote_tokens
                    .put(secret, answer, settings.token_ttl, capacity);
            }
            Err(error) => {
                tracing::warn!(
                    error = %error,
                    policy = settings.down_policy.as_str(),
                    "acl: the primary could not resolve a token; applying down_policy"
                );
                let stale = match self.remote_tokens.get(secret) {
                    Some((answer @ RemoteAnswer::Resolved { .. }, _)) => Some(answer),
                    _ => None,
                };
                let (answer, fresh_for) =
                    match settings.down_policy.answer(stale, settings.default_policy) {
                        // Extended: kept as it was for another TTL.
                        DownAnswer::Stale(answer) => (answer, settings.token_ttl),
                        DownAnswer::Static(default) => {
                            let token = static_token(default);
                            (RemoteAnswer::Down { token, error }, DOWN_RETRY)
                        }
                    };
                self.remote_tokens.put(secret, answer, fresh_for, capacity);
            }
        }
    }

    /// An authorizer built here from the rules the primary sent.
    fn token_from_identity(&self, identity: &AclIdentity) -> Arc<ResolvedToken> {
        let rules: Vec<legate_acl::Rules> = identity
            .rules
            .iter()
            .filter_map(|text| legate_acl::parse(text).ok())
            .collect();
        Arc::new(ResolvedToken {
            accessor_id: identity.accessor_id.clone(),
            authorizer: Authorizer::new(
                PolicyAuthorizer::new(&rules),
                self.config.acl.default_policy,
            ),
            expires_at: identity
                .expiration_time
                .as_deref()
                .and_then(|at| humantime::parse_rfc3339_weak(at).ok()),
        })
    }

    /// The hook that readies every call's token on this server.
    pub fn token_hook(self: &Arc<Self>) -> Arc<dyn TokenHook> {
        Arc::new(RemoteResolution(self.clone()))
    }
}

/// A token no policy backs: `default` decides everything.
fn static_token(default: DefaultPolicy) -> Arc<ResolvedToken> {
    Arc::new(ResolvedToken {
        accessor_id: String::new(),
        authorizer: Authorizer::new(PolicyAuthorizer::default(), default),
        expires_at: None,
    })
}

/// [`TokenHook`] of a server: remote resolution in a secondary.
struct RemoteResolution(Arc<Server>);

#[async_trait::async_trait]
impl TokenHook for RemoteResolution {
    async fn prepare(&self, token: &str) {
        self.0.prepare_remote_token(token).await;
    }
}
