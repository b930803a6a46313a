//! The agent's intention cache for `/v1/agent/connect/authorize`: the
//! intentions matching each destination, kept current by one blocking
//! query per destination (so an answer changes within one round trip of a
//! write) and dropped after ten minutes without use. Keyed by destination
//! only, never by token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use legate_types::intention::{Intention, MatchBy};
use legate_types::rpc::ServerRpc;
use legate_types::{Consistency, QueryOptions, RpcError};
use tokio::sync::watch;

/// Drop a destination's watch after this long unused.
const IDLE_EXPIRY: Duration = Duration::from_secs(600);

struct Watched {
    state: watch::Sender<Option<Result<Vec<Intention>, RpcError>>>,
    last_used: Mutex<Instant>,
}

/// Intentions per destination.
pub struct IntentionCache {
    rpc: Arc<dyn ServerRpc>,
    datacenter: String,
    watched: Mutex<HashMap<String, Arc<Watched>>>,
    stop: watch::Sender<bool>,
}

impl IntentionCache {
    /// An empty cache.
    pub fn new(rpc: Arc<dyn ServerRpc>, datacenter: String) -> Arc<IntentionCache> {
        Arc::new(IntentionCache {
            rpc,
            datacenter,
            watched: Mutex::new(HashMap::new()),
            stop: watch::channel(false).0,
        })
    }

    /// Stops every watch.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// The intentions matching `destination`, in evaluation order.
    pub async fn for_destination(
        self: &Arc<Self>,
        destination: &str,
    ) -> Result<Vec<Intention>, RpcError> {
        let watched = {
            let mut map = self.watched.lock().unwrap_or_else(|e| e.into_inner());
            match map.get(destination) {
                Some(w) => w.clone(),
                None => {
                    let w = Arc::new(Watched {
                        state: watch::channel(None).0,
                        last_used: Mutex::new(Instant::now()),
                    });
                    map.insert(destination.to_string(), w.clone());
                    tokio::spawn(follow(self.clone(), destination.to_string(), w.clone()));
                    w
                }
            }
        };
        *watched.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        let mut rx = watched.state.subscribe();
        let first = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok())
            .and_then(|v| v.clone());
        match first {
            Some(result) => result,
            None => Err(RpcError::Internal(format!(
                "intentions for {destination} are not available"
            ))),
        }
    }
}

async fn follow(cache: Arc<IntentionCache>, destination: String, watched: Arc<Watched>) {
    let mut stop = cache.stop.subscribe();
    let mut index = 0;
    let mut failures = 0u32;
    loop {
        let idle = watched
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed();
        if idle > IDLE_EXPIRY {
            cache
                .watched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&destination);
            return;
        }
        let opts = QueryOptions {
            datacenter: cache.datacenter.clone(),
            min_index: index,
            max_wait: Some(Duration::from_secs(60)),
            consistency: Consistency::Stale,
            ..Default::default()
        };
        let result = tokio::select! {
            r = cache.rpc.intention_match(&opts, MatchBy::Destination, vec![destination.clone()]) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        match result {
            Ok(q) => {
                failures = 0;
                index = if q.meta.index < index {
                    0
                } else {
                    q.meta.index
                };
                let list = q
                    .value
                    .into_iter()
                    .next()
                    .map(|(_, l)| l)
                    .unwrap_or_default();
                watched.state.send_replace(Some(Ok(list)));
            }
            Err(e) => {
                failures += 1;
                if watched.state.borrow().is_none() {
                    watched.state.send_replace(Some(Err(e)));
                }
                tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(failures.min(6)))).await;
            }
        }
    }
}
