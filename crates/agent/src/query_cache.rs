//! `?cached` prepared-query execution (Consul's agent cache, simple
//! kind): an answer is kept and served again until the request's
//! `Cache-Control` asks for a fresher one (`max-age`, `must-revalidate`);
//! when the servers then fail, `stale-if-error` lets an old enough answer
//! stand. Keys never hold a token: queries run with the agent's token and
//! each answer keeps the instances the request's token may read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use legate_types::prepared_query::{ExecuteRequest, ExecuteResponse};
use legate_types::rpc::ServerRpc;
use legate_types::{Queried, QueryOptions, RpcError};

use crate::acl::AclResolver;
use crate::acl_tokens::TokenStore;
use crate::cached_reads::{may_read, CacheStatus, ReadShape};
use crate::shared_watch::{report_size, CacheLimits};

/// A request's `Cache-Control` directives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age=<s>`: an older answer is fetched again.
    pub max_age: Option<Duration>,
    /// `stale-if-error=<s>`: when fetching again fails, an answer no older
    /// than this is served.
    pub stale_if_error: Option<Duration>,
    /// `must-revalidate` (or `max-age=0`): always fetch again.
    pub must_revalidate: bool,
}

impl CacheControl {
    /// Parses a `Cache-Control` header as Consul does: comma-separated
    /// directives, seconds as whole numbers; anything else in a number is
    /// Consul's 400 text.
    pub fn parse(header: &str) -> Result<CacheControl, String> {
        let mut c = CacheControl::default();
        let seconds = |text: &str| -> Result<Duration, String> {
            text.parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| "Invalid Cache-Control header.".to_string())
        };
        for directive in header.to_ascii_lowercase().split(',') {
            let directive = directive.trim();
            if directive == "must-revalidate" {
                c.must_revalidate = true;
            } else if let Some(n) = directive.strip_prefix("max-age=") {
                let age = seconds(n)?;
                c.must_revalidate |= age.is_zero();
                c.max_age = Some(age);
            } else if let Some(n) = directive.strip_prefix("stale-if-error=") {
                c.stale_if_error = Some(seconds(n)?);
            }
        }
        Ok(c)
    }
}

/// The key of one answer: the query as asked, and where from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct QueryKey {
    /// Where from and how (the background caches' key shape).
    shape: ReadShape,
    id_or_name: String,
    limit: usize,
    connect: bool,
    agent_node: String,
}

/// An answer as held: its binary encoding (a third of the memory the
/// decoded answer takes), decoded again for each hit.
struct Stored {
    answer: Arc<[u8]>,
    fetched: Instant,
    last_used: Instant,
    bytes: usize,
}

/// The cache of prepared-query answers.
pub struct QueryCache {
    rpc: Arc<dyn ServerRpc>,
    tokens: Arc<TokenStore>,
    acl: Arc<AclResolver>,
    limits: CacheLimits,
    entries: Mutex<HashMap<QueryKey, Stored>>,
    bytes: AtomicUsize,
}

impl QueryCache {
    /// An empty cache within `limits`.
    pub fn new(
        rpc: Arc<dyn ServerRpc>,
        tokens: Arc<TokenStore>,
        acl: Arc<AclResolver>,
        limits: CacheLimits,
    ) -> QueryCache {
        QueryCache {
            rpc,
            tokens,
            acl,
            limits,
            entries: Mutex::new(HashMap::new()),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Answers held now.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the answers held weigh, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Runs (or answers from the cache) a query as `?cached` does.
    pub async fn execute(
        &self,
        opts: &QueryOptions,
        request: ExecuteRequest,
        control: CacheControl,
    ) -> Result<(Queried<ExecuteResponse>, CacheStatus), RpcError> {
        let key = QueryKey {
            shape: ReadShape::of(opts),
            id_or_name: request.id_or_name.clone(),
            limit: request.limit,
            connect: request.connect,
            agent_node: request.agent_node.clone(),
        };
        let held = self.held(&key).and_then(|(bytes, age)| {
            let answer = legate_types::binary::decode::<Queried<ExecuteResponse>>(&bytes).ok()?;
            Some((Arc::new(answer), age))
        });
        let fresh_enough = |age: Duration| {
            !control.must_revalidate && control.max_age.is_none_or(|max| age <= max)
        };
        let (answer, status) = match held {
            Some((answer, age)) if fresh_enough(age) => (answer, CacheStatus { hit: true, age }),
            held => {
                let asked = QueryOptions {
                    token: self.tokens.agent_token(),
                    min_index: 0,
                    max_wait: None,
                    ..opts.clone()
                };
                match self.rpc.prepared_query_execute(&asked, request).await {
                    Ok(answer) => {
                        let answer = Arc::new(answer);
                        self.store(key, answer.clone());
                        let status = CacheStatus {
                            hit: false,
                            age: Duration::ZERO,
                        };
                        (answer, status)
                    }
                    Err(e) => match (held, control.stale_if_error) {
                        (Some((answer, age)), Some(limit)) if age <= limit => {
                            (answer, CacheStatus { hit: true, age })
                        }
                        _ => return Err(e),
                    },
                }
            }
        };
        let mut answer = (*answer).clone();
        if let Some(token) = self.acl.resolve(&opts.token).await? {
            let before = answer.value.nodes.len();
            answer
                .value
                .nodes
                .retain(|csn| may_read(&token, &csn.node.node, &csn.service.service));
            answer.meta.results_filtered_by_acls |= answer.value.nodes.len() != before;
        }
        Ok((answer, status))
    }

    /// The answer held for `key` and its age, touching it.
    fn held(&self, key: &QueryKey) -> Option<(Arc<[u8]>, Duration)> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let stored = entries.get_mut(key)?;
        if stored.last_used.elapsed() > self.limits.idle_ttl {
            return None;
        }
        stored.last_used = Instant::now();
        Some((stored.answer.clone(), stored.fetched.elapsed()))
    }

    fn store(&self, key: QueryKey, answer: Arc<Queried<ExecuteResponse>>) {
        let Ok(encoded) = legate_types::binary::encode(&*answer) else {
            return;
        };
        let answer: Arc<[u8]> = encoded.into();
        let bytes = answer.len();
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let stored = Stored {
            answer,
            fetched: now,
            last_used: now,
            bytes,
        };
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        if let Some(old) = entries.insert(key, stored) {
            self.bytes.fetch_sub(old.bytes, Ordering::AcqRel);
        }
        self.evict(&mut entries);
    }

    /// Drops answers unused for the idle timeout, then the least recently
    /// used while over the entry or byte limit.
    fn evict(&self, entries: &mut HashMap<QueryKey, Stored>) {
        let before = entries.len();
        let idle_ttl = self.limits.idle_ttl;
        let mut freed = 0;
        entries.retain(|_, s| {
            let keep = s.last_used.elapsed() <= idle_ttl;
            if !keep {
                freed += s.bytes;
            }
            keep
        });
        self.bytes.fetch_sub(freed, Ordering::AcqRel);
        while entries.len() > self.limits.max_entries || self.bytes() > self.limits.max_bytes {
            let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(s) = entries.remove(&oldest) {
                self.bytes.fetch_sub(s.bytes, Ordering::AcqRel);
            }
        }
        report_size(
            self.limits.name,
            entries.len(),
            self.bytes(),
            before - entries.len(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_reads_as_consul_reads_it() {
        let c = CacheControl::parse("max-age=30, stale-if-error=259200").unwrap();
        assert_eq!(c.max_age, Some(Duration::from_secs(30)));
        assert_eq!(c.stale_if_error, Some(Duration::from_secs(259200)));
        assert!(!c.must_revalidate);
        assert!(CacheControl::parse("Max-Age=0").unwrap().must_revalidate);
        assert!(
            CacheControl::parse("must-revalidate")
                .unwrap()
                .must_revalidate
        );
        assert_eq!(
            CacheControl::parse("no-cache, public").unwrap(),
            CacheControl::default()
        );
        // Consul splits on commas only: a space-separated pair is one
        // malformed max-age.
        for bad in [
            "max-age=30 stale-if-error=60",
            "max-age=-1",
            "stale-if-error=soon",
        ] {
            assert_eq!(
                CacheControl::parse(bad).unwrap_err(),
                "Invalid Cache-Control header.",
                "{bad}"
            );
        }
    }
}
