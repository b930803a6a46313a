//! The agent's intention cache: the intentions matching each destination,
//! kept current by one blocking query per destination (so answers change
//! within one round trip of a write), shared by `/v1/agent/connect/authorize`
//! and every local proxy, bounded and dropped when idle. Keyed by
//! destination only, never by token.

use std::sync::Arc;
use std::time::Duration;

use legate_proxycfg::Fetched;
use legate_types::intention::{Intention, MatchBy};
use legate_types::rpc::ServerRpc;
use legate_types::{Consistency, QueryOptions, RpcError};

use crate::acl_tokens::TokenStore;
use crate::cache_config::CacheConfig;
use crate::shared_watch::{json_weigher, SharedWatch};

/// Idle destinations are dropped after this long.
const IDLE_EXPIRY: Duration = Duration::from_secs(600);

/// Intentions per destination.
pub struct IntentionCache {
    watch: Arc<SharedWatch<String, Arc<Vec<Intention>>>>,
}

impl IntentionCache {
    /// An empty cache reading through `rpc` with the agent's own token
    /// (`acl.tokens.agent`, else `default`).
    pub fn new(
        rpc: Arc<dyn ServerRpc>,
        tokens: Arc<TokenStore>,
        datacenter: String,
        cache: &CacheConfig,
    ) -> Arc<IntentionCache> {
        let watch = SharedWatch::new(
            Arc::new(move |destination: String, min_index: u64| {
                let (rpc, datacenter, token) =
                    (rpc.clone(), datacenter.clone(), tokens.agent_token());
                Box::pin(async move {
                    let opts = QueryOptions {
                        datacenter,
                        token,
                        min_index,
                        max_wait: Some(Duration::from_secs(300)),
                        consistency: Consistency::Stale,
                        ..Default::default()
                    };
                    let q = rpc
                        .intention_match(&opts, MatchBy::Destination, vec![destination])
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(Fetched {
                        index: q.meta.index,
                        value: Arc::new(
                            q.value
                                .into_iter()
                                .next()
                                .map(|(_, l)| l)
                                .unwrap_or_default(),
                        ),
                    })
                })
            }),
            cache.limits("intentions", IDLE_EXPIRY),
            json_weigher(),
        );
        Arc::new(IntentionCache { watch })
    }

    /// The shared watch (proxycfg reads through it too).
    pub fn shared(&self) -> Arc<SharedWatch<String, Arc<Vec<Intention>>>> {
        self.watch.clone()
    }

    /// Stops every watch.
    pub fn stop(&self) {
        self.watch.clear();
    }

    /// The intentions matching `destination`, in evaluation order.
    pub async fn for_destination(
        self: &Arc<Self>,
        destination: &str,
    ) -> Result<Arc<Vec<Intention>>, RpcError> {
        self.watch
            .get(destination.to_string(), 0, Duration::from_secs(30))
            .await
            .map(|f| f.value)
            .map_err(RpcError::Internal)
    }
}
