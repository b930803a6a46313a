//! A bounded cache of blocking reads shared by every local proxy (and the
//! DNS interface): one value per key (a chain, a target's endpoints, a
//! destination's intentions), however many proxies need it. Keys never
//! include ACL tokens, so a proxy rotating its token does not multiply
//! entries. Entries nobody has asked for within the idle TTL stop and are
//! dropped; past the entry or byte limit ([`CacheLimits`]), the least
//! recently used idle entries go first. Entries someone follows are never
//! evicted. Each cache reports its size and evictions as metrics
//! (`consul.agent.cache.entries`, `.bytes`, `.evictions`, by cache name).
//!
//! A cache learns of changes in one of two ways: a blocking read per key
//! ([`SharedWatch::new`]), or one blocking call for all its keys that
//! names the keys that changed, which are then read again
//! ([`SharedWatch::batched`], see [`batch`]): a sidecar with thousands of
//! upstreams then holds one request in flight rather than thousands.

mod batch;

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use batch::{Changes, ChangesError, Checked};
pub use legate_proxycfg::Fetched;
use tokio::sync::{watch, Notify};

/// Reads one key, blocking until its index passes `min_index`.
pub type Fetch<K, V> = Arc<
    dyn Fn(K, u64) -> Pin<Box<dyn Future<Output = Result<Fetched<V>, String>> + Send>>
        + Send
        + Sync,
>;

type Slot<V> = Option<Result<(u64, V), String>>;

/// After dropping this many entries at once, freed memory is handed back
/// to the system.
const RELEASE_AFTER: usize = 64;

/// A fetch for values no blocking read follows (a prepared query's
/// answer): the first read at once, each later one `every` after the
/// last; the index is a digest of the value's JSON, so an unchanged
/// answer is no change and a changed one is. `read` is told whether it
/// is the first read of the key.
pub fn polled<K, V, F, Fut>(every: Duration, read: F) -> Fetch<K, V>
where
    K: Send + 'static,
    V: serde::Serialize + Send + 'static,
    F: Fn(K, bool) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<V, String>> + Send + 'static,
{
    let read = Arc::new(read);
    Arc::new(move |key: K, last_digest: u64| {
        let read = read.clone();
        Box::pin(async move {
            let first = last_digest == 0;
            if !first {
                tokio::time::sleep(every).await;
            }
            let value = read(key, first).await?;
            use std::hash::Hasher;
            let mut digest = std::collections::hash_map::DefaultHasher::new();
            digest.write(&serde_json::to_vec(&value).unwrap_or_default());
            Ok(Fetched {
                index: digest.finish() | 1,
                value,
            })
        })
    })
}

/// Reports a cache's size and what it just evicted as metrics:
/// `agent.cache.entries`, `.bytes` (gauges) and `.evictions` (a counter),
/// labelled with the cache's name.
pub fn report_size(name: &str, entries: usize, bytes: usize, evicted: usize) {
    let cache = name.to_string();
    metrics::gauge!("agent.cache.entries", "cache" => cache.clone()).set(entries as f64);
    metrics::gauge!("agent.cache.bytes", "cache" => cache.clone()).set(bytes as f64);
    if evicted > 0 {
        metrics::counter!("agent.cache.evictions", "cache" => cache).increment(evicted as u64);
    }
}

/// How big a cached value is, in bytes (an estimate).
pub type Weigher<V> = Arc<dyn Fn(&V) -> usize + Send + Sync>;

/// Weighs a value by the length of its JSON form (counted, not built):
/// close to, and proportional to, what it holds in memory.
pub fn json_weigher<V: serde::Serialize>() -> Weigher<V> {
    Arc::new(|value: &V| {
        struct Count(usize);
        impl std::io::Write for Count {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        let _ = serde_json::to_writer(&mut count, value);
        count.0
    })
}

/// The bounds of one cache (`cache { ... }` in the agent's configuration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheLimits {
    /// The name its metrics carry.
    pub name: &'static str,
    /// The most keys it holds.
    pub max_entries: usize,
    /// The most bytes its values take (by their [`Weigher`]).
    pub max_bytes: usize,
    /// How long a key nobody asks for stays.
    pub idle_ttl: Duration,
}

/// What a cache's values weigh.
struct Accounting<V> {
    weigh: Weigher<V>,
    bytes: AtomicUsize,
}

impl<V> Accounting<V> {
    /// Stores `value` in `entry`'s slot, accounting for its size.
    fn store(&self, entry: &Entry<V>, index: u64, value: V) {
        let size = (self.weigh)(&value);
        let old = entry.bytes.swap(size, Ordering::AcqRel);
        self.bytes.fetch_add(size, Ordering::AcqRel);
        self.bytes.fetch_sub(old, Ordering::AcqRel);
        entry.state.send_replace(Some(Ok((index, value))));
        // After the value: a reader that sees the new version sees it.
        entry.liveness.version.fetch_add(1, Ordering::Release);
        entry.answered(true);
    }

    /// Forgets an entry's bytes.
    fn forget(&self, entry: &Entry<V>) {
        self.bytes
            .fetch_sub(entry.bytes.swap(0, Ordering::AcqRel), Ordering::AcqRel);
    }
}

/// The part of an entry a [`Freshness`] handle shares.
struct Liveness {
    last_used: Mutex<Instant>,
    /// Bumped each time the entry's value is replaced.
    version: AtomicU64,
    /// The entry left the cache: nothing keeps its value current.
    dropped: AtomicBool,
}

impl Liveness {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// Tells, cheaply and without waiting, whether a value read from a
/// [`SharedWatch`] is still its key's current value: nothing replaced it
/// and the key is still followed. Asking counts as a use of the key, so
/// a key whose answer is served from a copy (the DNS fast path) does not
/// idle out. Holding one keeps neither the key followed nor a task alive.
#[derive(Clone)]
pub struct Freshness {
    liveness: Arc<Liveness>,
    seen: u64,
}

impl Freshness {
    /// Whether the value is still current (and marks the key used).
    pub fn is_current(&self) -> bool {
        if !self.unchanged() {
            return false;
        }
        self.liveness.touch();
        true
    }

    /// Nothing replaced the value and the key is still followed.
    fn unchanged(&self) -> bool {
        !self.liveness.dropped.load(Ordering::Acquire)
            && self.liveness.version.load(Ordering::Acquire) == self.seen
    }
}

impl std::fmt::Debug for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Printing is not a use of the key: no touch.
        f.debug_struct("Freshness")
            .field("seen", &self.seen)
            .field("current", &self.unchanged())
            .finish()
    }
}

struct Entry<V> {
    state: watch::Sender<Slot<V>>,
    /// What its value weighs.
    bytes: AtomicUsize,
    /// Since when the reads that keep it current have failed (`None`:
    /// they succeed).
    failing_since: Mutex<Option<Instant>>,
    /// When it was last asked for, its value's version and whether it
    /// was dropped: shared with the [`Freshness`] handles given out.
    liveness: Arc<Liveness>,
    /// Batched mode: the index up to which the key is known unchanged.
    checked: AtomicU64,
    /// Per-key mode: the key's own blocking read.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl<V> Entry<V> {
    fn stop(&self) {
        self.liveness.dropped.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }

    fn touch(&self) {
        self.liveness.touch();
    }

    fn last_used(&self) -> Instant {
        *self
            .liveness
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Records whether the servers answered a read of this key.
    fn answered(&self, ok: bool) {
        let mut since = self.failing_since.lock().unwrap_or_else(|e| e.into_inner());
        if ok {
            *since = None;
        } else {
            since.get_or_insert_with(Instant::now);
        }
    }
}

/// How a batched cache follows its keys.
struct Batching {
    /// Wakes the batch driver when keys come or go.
    keys_changed: Arc<Notify>,
    /// The servers do not know batched watches: every key has its own
    /// blocking read from then on.
    per_key: AtomicBool,
}

/// The cache.
pub struct SharedWatch<K, V> {
    fetch: Fetch<K, V>,
    entries: Mutex<HashMap<K, Arc<Entry<V>>>>,
    limits: CacheLimits,
    accounting: Arc<Accounting<V>>,
    batching: Option<Batching>,
}

impl<K, V> SharedWatch<K, V>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A cache within `limits` (values weighed by `weigh`), each key
    /// followed by its own blocking read.
    pub fn new(fetch: Fetch<K, V>, limits: CacheLimits, weigh: Weigher<V>) -> Arc<Self> {
        Self::start(fetch, limits, weigh, None)
    }

    /// A cache whose keys are followed together: `changes` names the keys
    /// that changed (blocking until one did) and `fetch` reads those again
    /// without blocking. When the servers do not know batched watches
    /// ([`ChangesError::Unsupported`]), every key gets its own blocking
    /// read, as with [`SharedWatch::new`].
    pub fn batched(
        fetch: Fetch<K, V>,
        changes: Changes<K>,
        limits: CacheLimits,
        weigh: Weigher<V>,
    ) -> Arc<Self> {
        let batching = Batching {
            keys_changed: Arc::new(Notify::new()),
            per_key: AtomicBool::new(false),
        };
        let keys_changed = batching.keys_changed.clone();
        let cache = Self::start(fetch, limits, weigh, Some(batching));
        tokio::spawn(batch::drive(Arc::downgrade(&cache), keys_changed, changes));
        cache
    }

    fn start(
        fetch: Fetch<K, V>,
        limits: CacheLimits,
        weigh: Weigher<V>,
        batching: Option<Batching>,
    ) -> Arc<Self> {
        let accounting = Arc::new(Accounting {
            weigh,
            bytes: AtomicUsize::new(0),
        });
        let cache = Arc::new(SharedWatch {
            fetch,
            entries: Mutex::new(HashMap::new()),
            limits,
            accounting,
            batching,
        });
        // Expire idle keys (and trim to the byte limit as values grow)
        // even when no new key arrives.
        let weak = Arc::downgrade(&cache);
        let period = (limits.idle_ttl / 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(cache) = weak.upgrade() else { return };
                let mut entries = cache.entries.lock().unwrap_or_else(|e| e.into_inner());
                cache.evict(&mut entries);
            }
        });
        cache
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the values held weigh, in bytes.
    pub fn bytes(&self) -> usize {
        self.accounting.bytes.load(Ordering::Acquire)
    }

    /// How long the reads that keep `key` current have failed (zero while
    /// they succeed, or for a key not held): the age of its value, as
    /// Consul's `Age`.
    pub fn stale_for(&self, key: &K) -> Duration {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .and_then(|e| *e.failing_since.lock().unwrap_or_else(|e| e.into_inner()))
            .map(|since| since.elapsed())
            .unwrap_or_default()
    }

    /// Whether keys are followed by one batched watch (rather than a
    /// blocking read each).
    fn batched_now(&self) -> bool {
        self.batching
            .as_ref()
            .is_some_and(|b| !b.per_key.load(Ordering::Acquire))
    }

    /// The entry for `key` and a subscription to it, taken under the lock
    /// so eviction can never remove an entry between the two.
    fn entry(self: &Arc<Self>, key: &K) -> (Arc<Entry<V>>, watch::Receiver<Slot<V>>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = entries.get(key) {
            e.touch();
            return (e.clone(), e.state.subscribe());
        }
        self.evict(&mut entries);
        let entry = Arc::new(Entry {
            state: watch::channel(None).0,
            bytes: AtomicUsize::new(0),
            failing_since: Mutex::new(None),
            liveness: Arc::new(Liveness {
                last_used: Mutex::new(Instant::now()),
                version: AtomicU64::new(0),
                dropped: AtomicBool::new(false),
            }),
            checked: AtomicU64::new(0),
            task: Mutex::new(None),
        });
        match &self.batching {
            Some(b) if self.batched_now() => b.keys_changed.notify_one(),
            _ => self.follow_alone(key, &entry),
        }
        let rx = entry.state.subscribe();
        entries.insert(key.clone(), entry.clone());
        (entry, rx)
    }

    /// Gives `entry` its own blocking read.
    fn follow_alone(&self, key: &K, entry: &Arc<Entry<V>>) {
        let fetch = self.fetch.clone();
        let k = key.clone();
        let accounting = self.accounting.clone();
        // The task holds the entry weakly: an evicted entry's task ends.
        let weak = Arc::downgrade(entry);
        let task = tokio::spawn(async move {
            let mut index = 0;
            let mut failures = 0u32;
            loop {
                let answer = fetch(k.clone(), index).await;
                let Some(entry) = weak.upgrade() else { return };
                match answer {
                    Ok(f) => {
                        failures = 0;
                        if f.index != index || index == 0 {
                            index = f.index;
                            accounting.store(&entry, f.index, f.value);
                        } else {
                            entry.answered(true);
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        entry.answered(false);
                        if entry.state.borrow().as_ref().is_none_or(|s| s.is_err()) {
                            entry.state.send_replace(Some(Err(e)));
                        }
                        drop(entry);
                        tokio::time::sleep(batch::backoff(failures)).await;
                    }
                }
            }
        });
        *entry.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Drops idle entries past their TTL, then the least recently used
    /// idle ones while over capacity (entries someone waits on stay).
    fn evict(&self, entries: &mut HashMap<K, Arc<Entry<V>>>) {
        let before = entries.len();
        self.evict_idle(entries);
        let evicted = before - entries.len();
        report_size(self.limits.name, entries.len(), self.bytes(), evicted);
        if evicted > 0 {
            if let Some(b) = &self.batching {
                b.keys_changed.notify_one();
            }
        }
        if evicted >= RELEASE_AFTER {
            // A map keeps its largest capacity; give it back too.
            entries.shrink_to_fit();
            // A proxy with many upstreams went away: give its memory back
            // once the aborted reads have been dropped (the runtime drops
            // an aborted task's state on its next poll, not here).
            tokio::spawn(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                legate_types::memory::release_free_memory();
            });
        }
    }

    fn evict_idle(&self, entries: &mut HashMap<K, Arc<Entry<V>>>) {
        let idle = |e: &Entry<V>| e.state.receiver_count() == 0;
        entries.retain(|_, e| {
            let expired = idle(e) && e.last_used().elapsed() > self.limits.idle_ttl;
            if expired {
                e.stop();
                self.accounting.forget(e);
            }
            !expired
        });
        // Room for one more key, and values within the byte limit.
        while entries.len() >= self.limits.max_entries || self.bytes() > self.limits.max_bytes {
            let oldest = entries
                .iter()
                .filter(|(_, e)| idle(e))
                .min_by_key(|(_, e)| e.last_used())
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    if let Some(e) = entries.remove(&k) {
                        e.stop();
                        self.accounting.forget(&e);
                    }
                }
                None => break,
            }
        }
    }

    /// Whether `key` is held with a value (a read of it would be a hit).
    pub fn holds(&self, key: &K) -> bool {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .is_some_and(|e| matches!(&*e.state.borrow(), Some(Ok(_))))
    }

    /// Starts following `key` (if it is not followed yet) without waiting
    /// for its value.
    pub fn follow(self: &Arc<Self>, key: K) {
        drop(self.entry(&key));
    }

    /// Follows `key`: its value now (once there is one) and every newer
    /// value after it. The key stays cached while the stream lives; no
    /// task or read is held for it beyond the cache's own.
    pub fn subscribe(self: &Arc<Self>, key: K) -> impl futures::Stream<Item = V> + Send + 'static {
        let (entry, rx) = self.entry(&key);
        futures::stream::unfold((entry, rx, None), |(entry, mut rx, last)| async move {
            loop {
                let slot = rx.borrow_and_update().clone();
                if let Some(Ok((index, value))) = slot {
                    if last != Some(index) {
                        entry.touch();
                        return Some((value, (entry, rx, Some(index))));
                    }
                }
                rx.changed().await.ok()?;
            }
        })
    }

    /// The value of `key` once its index passes `min_index` (or after
    /// `wait`, the current value).
    pub async fn get(
        self: &Arc<Self>,
        key: K,
        min_index: u64,
        wait: Duration,
    ) -> Result<Fetched<V>, String> {
        self.get_tracked(key, min_index, wait).await.map(|(f, _)| f)
    }

    /// [`SharedWatch::get`], with a handle telling later whether the value
    /// is still current.
    pub async fn get_tracked(
        self: &Arc<Self>,
        key: K,
        min_index: u64,
        wait: Duration,
    ) -> Result<(Fetched<V>, Freshness), String> {
        let (entry, mut rx) = self.entry(&key);
        let newer = |s: &Slot<V>| match s {
            Some(Ok((index, _))) => *index > min_index,
            Some(Err(_)) => min_index == 0,
            None => false,
        };
        let _ = tokio::time::timeout(wait, rx.wait_for(newer)).await;
        // The version before the value: a value replaced in between reads
        // as not current, never the reverse.
        let freshness = Freshness {
            liveness: entry.liveness.clone(),
            seen: entry.liveness.version.load(Ordering::Acquire),
        };
        let slot = rx.borrow().clone();
        entry.touch();
        match slot {
            Some(Ok((index, value))) => Ok((Fetched { index, value }, freshness)),
            Some(Err(e)) => Err(e),
            None => Err("no value yet".into()),
        }
    }
}

impl<K, V> SharedWatch<K, V> {
    /// Stops every background read and forgets every key.
    pub fn clear(&self) {
        for (_, e) in self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            e.stop();
            self.accounting.forget(&e);
        }
    }
}

impl<K, V> Drop for SharedWatch<K, V> {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn limits(max_entries: usize, idle_ttl: Duration) -> CacheLimits {
        CacheLimits {
            name: "test",
            max_entries,
            max_bytes: usize::MAX,
            idle_ttl,
        }
    }

    fn counting_fetch(calls: Arc<AtomicU64>) -> Fetch<String, String> {
        Arc::new(move |key: String, min_index: u64| {
            let calls = calls.clone();
            Box::pin(async move {
                calls.fetch_add(1, Ordering::SeqCst);
                if min_index > 0 {
                    // Nothing changes: a blocking read that waits.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok(Fetched {
                    index: 7,
                    value: format!("value of {key}"),
                })
            })
        })
    }

    #[tokio::test]
    async fn one_background_read_per_key_however_many_readers() {
        let calls = Arc::new(AtomicU64::new(0));
        let cache = SharedWatch::new(
            counting_fetch(calls.clone()),
            limits(100, Duration::from_secs(60)),
            json_weigher(),
        );
        let mut waits = Vec::new();
        for _ in 0..50 {
            let cache = cache.clone();
            waits.push(tokio::spawn(async move {
                cache.get("db".into(), 0, Duration::from_secs(5)).await
            }));
        }
        for w in waits {
            assert_eq!(w.await.unwrap().unwrap().value, "value of db");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The first read and one blocking read in flight.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(cache.len(), 1);
        // A blocking get past the index times out with the same value.
        let same = cache
            .get("db".into(), 7, Duration::from_millis(50))
            .await
            .unwrap();
        assert_eq!(same.index, 7);
    }

    #[tokio::test]
    async fn capacity_evicts_the_least_recently_used_idle_key() {
        let calls = Arc::new(AtomicU64::new(0));
        let cache = SharedWatch::new(
            counting_fetch(calls),
            limits(3, Duration::from_secs(60)),
            json_weigher(),
        );
        for key in ["a", "b", "c"] {
            cache
                .get(key.into(), 0, Duration::from_secs(5))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cache
            .get("a".into(), 0, Duration::from_secs(5))
            .await
            .unwrap();
        cache
            .get("d".into(), 0, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(cache.len(), 3);
        let keys: Vec<String> = cache.entries.lock().unwrap().keys().cloned().collect();
        assert!(!keys.contains(&"b".to_string()), "{keys:?}");
        assert!(keys.contains(&"a".to_string()));
    }

    #[tokio::test]
    async fn idle_keys_expire() {
        let calls = Arc::new(AtomicU64::new(0));
        let cache = SharedWatch::new(
            counting_fetch(calls),
            limits(100, Duration::from_millis(20)),
            json_weigher(),
        );
        cache
            .get("old".into(), 0, Duration::from_secs(5))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        cache
            .get("new".into(), 0, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn a_value_nobody_follows_is_freed_once_its_key_expires() {
        let value = Arc::new("a compiled chain".to_string());
        let weak = Arc::downgrade(&value);
        let held = std::sync::Mutex::new(Some(value));
        let fetch: Fetch<String, Arc<String>> = Arc::new(move |_key: String, min_index: u64| {
            let first = held.lock().unwrap().take();
            Box::pin(async move {
                match first {
                    Some(value) if min_index == 0 => Ok(Fetched { index: 1, value }),
                    _ => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Err("never".to_string())
                    }
                }
            })
        });
        let cache = SharedWatch::new(
            fetch,
            limits(100, Duration::from_millis(30)),
            json_weigher(),
        );
        let got = cache
            .get("db".into(), 0, Duration::from_secs(5))
            .await
            .unwrap();
        drop(got);
        assert!(weak.upgrade().is_some(), "cached while fresh");
        for _ in 0..100 {
            if weak.upgrade().is_none() {
                assert!(cache.is_empty());
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the value outlived its expired key");
    }

    #[tokio::test]
    async fn the_byte_limit_evicts_the_least_recently_used_idle_keys_and_bytes_are_counted() {
        let calls = Arc::new(AtomicU64::new(0));
        // Each value is "value of <key>": 12 bytes of JSON for a one-letter key.
        let limits = CacheLimits {
            max_bytes: 30,
            ..limits(100, Duration::from_secs(60))
        };
        let cache = SharedWatch::new(counting_fetch(calls), limits, json_weigher());
        for key in ["a", "b"] {
            cache
                .get(key.into(), 0, Duration::from_secs(5))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(cache.bytes(), 2 * "\"value of a\"".len());
        cache
            .get("c".into(), 0, Duration::from_secs(5))
            .await
            .unwrap();
        // Over 30 bytes with three: the periodic trim drops "a", the oldest.
        // Over 30 bytes with three: the periodic trim (every second at
        // most) drops "a", the oldest.
        for _ in 0..300 {
            if cache.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let keys: Vec<String> = cache.entries.lock().unwrap().keys().cloned().collect();
        assert!(!keys.contains(&"a".to_string()), "{keys:?}");
        assert_eq!(cache.bytes(), 2 * "\"value of a\"".len());
        // A key someone follows is never evicted for size.
        let followed = cache.subscribe("z".into());
        tokio::pin!(followed);
        use futures::StreamExt;
        followed.next().await.unwrap();
        for key in ["d", "e", "f"] {
            cache
                .get(key.into(), 0, Duration::from_secs(5))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(cache.entries.lock().unwrap().contains_key("z"));
        assert_eq!(cache.len(), 2, "z and the newest within 30 bytes");
    }

    #[tokio::test]
    async fn the_age_of_what_is_held_counts_from_the_first_failure_until_an_answer() {
        let failing = Arc::new(AtomicBool::new(false));
        let f = failing.clone();
        // "denied" is never answered (a read the servers refuse).
        let fetch: Fetch<String, u64> = Arc::new(move |key: String, min_index: u64| {
            let f = f.clone();
            Box::pin(async move {
                if min_index > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if f.load(Ordering::SeqCst) || key == "denied" {
                    Err("connection refused".to_string())
                } else {
                    Ok(Fetched {
                        index: min_index + 1,
                        value: 1,
                    })
                }
            })
        });
        let cache = SharedWatch::new(fetch, limits(10, Duration::from_secs(60)), json_weigher());
        cache
            .get("k".into(), 0, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(cache.stale_for(&"k".to_string()), Duration::ZERO);
        // A key that keeps failing ages itself, not the others.
        cache.follow("denied".into());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(cache.stale_for(&"denied".to_string()) >= Duration::from_millis(150));
        assert_eq!(cache.stale_for(&"k".to_string()), Duration::ZERO);
        failing.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let age = cache.stale_for(&"k".to_string());
        assert!(age >= Duration::from_millis(150), "{age:?}");
        // The value is still served while failing (fail-static).
        assert_eq!(
            cache
                .get("k".into(), 0, Duration::from_millis(10))
                .await
                .unwrap()
                .value,
            1
        );
        failing.store(false, Ordering::SeqCst);
        for _ in 0..200 {
            if cache.stale_for(&"k".to_string()) == Duration::ZERO {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("still stale after the servers answered");
    }
}
