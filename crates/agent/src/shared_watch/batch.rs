//! Batched following: one task per cache asks, in one blocking call,
//! which of its keys changed after the index each is known current at,
//! then reads only those again. Keys without a value yet are read first.
//! A key that comes or goes restarts the call (after a short pause, so a
//! proxy registering thousands of upstreams restarts it a few times, not
//! thousands).

use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;

use super::{Accounting, Entry, Fetch, SharedWatch};

/// What the batched call knows about one key: the index it is current at
/// and whether it changed after the index it was asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// Every change of the key up to this index has been seen.
    pub index: u64,
    /// The key changed after the index it was asked about.
    pub changed: bool,
}

/// Why a batched call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangesError {
    /// The servers do not know batched watches (an older version).
    Unsupported,
    /// Anything else; the call is tried again after a pause.
    Failed(String),
}

/// Asks which of the keys changed after the index beside each, blocking
/// until one did or a server-side wait ran out; answers one [`Checked`]
/// per key, in order.
pub type Changes<K> = Arc<
    dyn Fn(
            Vec<(K, u64)>,
        ) -> Pin<Box<dyn Future<Output = Result<Vec<Checked>, ChangesError>> + Send>>
        + Send
        + Sync,
>;

/// How long the driver waits after keys came or went before asking again.
const SETTLE: Duration = Duration::from_millis(20);

/// How many keys are read at once after a change.
const READS_AT_ONCE: usize = 32;

/// The pause before retrying after `failures` failures in a row.
pub(super) fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100 * 2u64.pow(failures.min(6)))
}

/// A key with its entry.
type KeyedEntry<K, V> = (K, Arc<Entry<V>>);

type Keyed<K, V> = Vec<KeyedEntry<K, V>>;

/// The driver of a batched cache; returns when the cache is dropped or
/// falls back to a blocking read per key.
pub(super) async fn drive<K, V>(
    cache: Weak<SharedWatch<K, V>>,
    keys_changed: Arc<Notify>,
    changes: Changes<K>,
) where
    K: Clone + Eq + Hash + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    // Failures in a row of the batched call, or of reading again what it
    // named (each pause grows, as a key's own blocking read backs off).
    let mut failures = 0u32;
    loop {
        let Some(strong) = cache.upgrade() else {
            return;
        };
        let fetch = strong.fetch.clone();
        let accounting = strong.accounting.clone();
        let (unread, mut followed) = strong.split_by_value();
        drop(strong);
        // Registered before the reads: a key that arrives from now on
        // wakes the wait below.
        let keys_changed = keys_changed.notified();
        tokio::pin!(keys_changed);
        keys_changed.as_mut().enable();
        let (read, mut unread) = read_all(&fetch, &accounting, unread).await;
        followed.extend(read);
        let asked: Vec<(K, u64)> = followed
            .iter()
            .map(|(k, e)| (k.clone(), e.checked.load(Ordering::Acquire)))
            .collect();
        let call = async {
            if asked.is_empty() {
                std::future::pending().await
            } else {
                changes(asked).await
            }
        };
        tokio::pin!(call);
        // Keys whose first read failed are read again after a growing
        // pause without giving up the call in flight (a server keeps a
        // call it was sent until it answers); the call is asked again only
        // once one of them has a value to follow.
        let mut unread_failures = 0u32;
        let answer = loop {
            let retry = async {
                if unread.is_empty() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(backoff(unread_failures + 1)).await;
            };
            tokio::select! {
                answer = &mut call => break Some(answer),
                _ = &mut keys_changed => {
                    tokio::time::sleep(SETTLE).await;
                    break None;
                }
                _ = retry => {
                    let (read, still) =
                        read_all(&fetch, &accounting, std::mem::take(&mut unread)).await;
                    unread = still;
                    if !read.is_empty() {
                        break None;
                    }
                    unread_failures += 1;
                }
            }
        };
        match answer {
            None => {}
            Some(Ok(checked)) => {
                for (_, entry) in &followed {
                    entry.answered(true);
                }
                if settle(&fetch, &accounting, followed, checked).await {
                    failures += 1;
                    tokio::time::sleep(backoff(failures)).await;
                } else {
                    failures = 0;
                }
            }
            Some(Err(ChangesError::Unsupported)) => {
                if let Some(strong) = cache.upgrade() {
                    strong.follow_each_alone();
                }
                return;
            }
            Some(Err(ChangesError::Failed(e))) => {
                failures += 1;
                for (_, entry) in &followed {
                    entry.answered(false);
                }
                tracing::debug!(error = %e, "batched watch failed; retrying");
                tokio::time::sleep(backoff(failures)).await;
            }
        }
    }
}

/// Applies one answer: unchanged keys are current at its index; changed
/// ones are read again, and become current once the read succeeded (a
/// failed read leaves the key to be reported again). An answer below what
/// a key knows (a restored or lagging server) reads the key again and
/// takes the lower index. `true` when some read failed.
async fn settle<K, V>(
    fetch: &Fetch<K, V>,
    accounting: &Accounting<V>,
    followed: Keyed<K, V>,
    checked: Vec<Checked>,
) -> bool
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    let mut changed = Vec::new();
    for ((key, entry), state) in followed.into_iter().zip(checked) {
        let known = entry.checked.load(Ordering::Acquire);
        if state.changed || state.index < known {
            changed.push((key, entry, state.index));
        } else {
            entry.checked.fetch_max(state.index, Ordering::AcqRel);
        }
    }
    let failed = std::sync::atomic::AtomicBool::new(false);
    futures::stream::iter(changed)
        .for_each_concurrent(READS_AT_ONCE, |(key, entry, index)| {
            let (fetch, failed) = (fetch.clone(), &failed);
            async move {
                match fetch(key, 0).await {
                    Ok(f) => {
                        publish(accounting, &entry, f.index, f.value);
                        entry.checked.store(index, Ordering::Release);
                    }
                    Err(_) => {
                        entry.answered(false);
                        failed.store(true, Ordering::Relaxed)
                    }
                }
            }
        })
        .await;
    failed.into_inner()
}

/// Reads keys that have no value yet, without blocking: the keys read,
/// and those whose read failed.
async fn read_all<K, V>(
    fetch: &Fetch<K, V>,
    accounting: &Accounting<V>,
    keys: Keyed<K, V>,
) -> (Keyed<K, V>, Keyed<K, V>)
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    let results: Vec<(bool, KeyedEntry<K, V>)> = futures::stream::iter(keys)
        .map(|(key, entry)| {
            let fetch = fetch.clone();
            async move {
                match fetch(key.clone(), 0).await {
                    Ok(f) => {
                        entry.checked.fetch_max(f.index, Ordering::AcqRel);
                        publish(accounting, &entry, f.index, f.value);
                        (true, (key, entry))
                    }
                    Err(e) => {
                        entry.answered(false);
                        if entry.state.borrow().as_ref().is_none_or(|s| s.is_err()) {
                            entry.state.send_replace(Some(Err(e)));
                        }
                        (false, (key, entry))
                    }
                }
            }
        })
        .buffer_unordered(READS_AT_ONCE)
        .collect()
        .await;
    let (read, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(|(ok, _)| *ok);
    (
        read.into_iter().map(|(_, k)| k).collect(),
        failed.into_iter().map(|(_, k)| k).collect(),
    )
}

/// Publishes a value read at `index` unless the key already holds it.
fn publish<V>(accounting: &Accounting<V>, entry: &Entry<V>, index: u64, value: V) {
    let held = matches!(&*entry.state.borrow(), Some(Ok((current, _))) if *current == index);
    if held {
        entry.answered(true);
    } else {
        accounting.store(entry, index, value);
    }
}

impl<K, V> SharedWatch<K, V>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The keys without a value (never read, or the last read failed) and
    /// those with one.
    fn split_by_value(&self) -> (Keyed<K, V>, Keyed<K, V>) {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .partition(|(_, e)| e.state.borrow().as_ref().is_none_or(|s| s.is_err()))
    }

    /// Falls back to a blocking read per key, for every key held now and
    /// every one to come.
    fn follow_each_alone(&self) {
        let Some(batching) = &self.batching else {
            return;
        };
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        batching.per_key.store(true, Ordering::Release);
        tracing::info!("the servers do not answer batched watches; following each key on its own");
        for (key, entry) in entries.iter() {
            self.follow_alone(key, entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_watch::Fetched;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;

    /// A store of versioned values, read as a server would answer: plain
    /// reads, and a batched call that waits for a change.
    #[derive(Default)]
    struct Store {
        values: Mutex<HashMap<String, u64>>,
        index: AtomicU64,
        changed: Notify,
        reads: AtomicU64,
        blocking_reads: AtomicU64,
        calls: AtomicU64,
        /// Keys whose reads fail.
        failing: Mutex<std::collections::HashSet<String>>,
    }

    impl Store {
        /// A store at index 1, where every key reads at index 1.
        fn new() -> Arc<Store> {
            let store = Store::default();
            store.index.store(1, Ordering::SeqCst);
            Arc::new(store)
        }

        fn set(&self, key: &str) {
            let index = self.index.fetch_add(1, Ordering::SeqCst) + 1;
            self.values.lock().unwrap().insert(key.to_string(), index);
            self.changed.notify_waiters();
        }

        fn fetch(self: &Arc<Self>) -> Fetch<String, String> {
            let store = self.clone();
            Arc::new(move |key: String, min_index: u64| {
                let store = store.clone();
                Box::pin(async move {
                    store.reads.fetch_add(1, Ordering::SeqCst);
                    if store.failing.lock().unwrap().contains(&key) {
                        return Err(format!("{key} cannot be read"));
                    }
                    if min_index > 0 {
                        store.blocking_reads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let index = store.values.lock().unwrap().get(&key).copied().unwrap_or(1);
                    Ok(Fetched {
                        index,
                        value: format!("{key}@{index}"),
                    })
                })
            })
        }

        fn changes(self: &Arc<Self>) -> Changes<String> {
            let store = self.clone();
            Arc::new(move |keys: Vec<(String, u64)>| {
                let store = store.clone();
                Box::pin(async move {
                    store.calls.fetch_add(1, Ordering::SeqCst);
                    loop {
                        let changed = store.changed.notified();
                        tokio::pin!(changed);
                        changed.as_mut().enable();
                        let now = store.index.load(Ordering::SeqCst);
                        let values = store.values.lock().unwrap().clone();
                        let checked: Vec<Checked> = keys
                            .iter()
                            .map(|(k, since)| Checked {
                                index: now,
                                changed: values.get(k).is_some_and(|i| i > since),
                            })
                            .collect();
                        if checked.iter().any(|c| c.changed) {
                            return Ok(checked);
                        }
                        changed.await;
                    }
                })
            })
        }
    }

    fn test_limits() -> crate::shared_watch::CacheLimits {
        crate::shared_watch::CacheLimits {
            name: "test",
            max_entries: 1000,
            max_bytes: usize::MAX,
            idle_ttl: Duration::from_secs(60),
        }
    }

    fn batched_cache(store: &Arc<Store>) -> Arc<SharedWatch<String, String>> {
        SharedWatch::batched(
            store.fetch(),
            store.changes(),
            test_limits(),
            crate::shared_watch::json_weigher(),
        )
    }

    async fn value(
        cache: &Arc<SharedWatch<String, String>>,
        key: &str,
        min: u64,
    ) -> Fetched<String> {
        cache
            .get(key.to_string(), min, Duration::from_secs(5))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn one_call_follows_every_key_and_only_changed_keys_are_read_again() {
        let store = Store::new();
        let cache = batched_cache(&store);
        let mut receivers = Vec::new();
        for i in 0..100 {
            let key = format!("k{i}");
            assert_eq!(value(&cache, &key, 0).await.value, format!("{key}@1"));
            receivers.push(cache.entry(&key).1);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(store.reads.load(Ordering::SeqCst), 100);
        store.set("k7");
        // The change reaches the key without a blocking read of its own.
        let fresh = value(&cache, "k7", 1).await;
        assert!(fresh.index > 1);
        assert_eq!(fresh.value, format!("k7@{}", fresh.index));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            store.reads.load(Ordering::SeqCst),
            101,
            "only k7 is read again"
        );
        assert_eq!(store.blocking_reads.load(Ordering::SeqCst), 0);
        drop(receivers);
    }

    #[tokio::test]
    async fn a_key_added_while_the_call_waits_is_followed() {
        let store = Store::new();
        let cache = batched_cache(&store);
        let _first = cache.entry(&"a".to_string()).1;
        value(&cache, "a", 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let calls = store.calls.load(Ordering::SeqCst);
        assert!(calls >= 1);
        let _second = cache.entry(&"b".to_string()).1;
        value(&cache, "b", 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            store.calls.load(Ordering::SeqCst) > calls,
            "the call was asked again"
        );
        store.set("b");
        let index = store.index.load(Ordering::SeqCst);
        let fresh = value(&cache, "b", 1).await;
        assert_eq!(fresh.index, index);
        assert_eq!(store.blocking_reads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_changed_key_that_cannot_be_read_again_is_retried_after_a_pause() {
        let store = Store::new();
        let cache = batched_cache(&store);
        let _held = cache.entry(&"a".to_string()).1;
        value(&cache, "a", 0).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        // `a` changes and then cannot be read: every call names it again.
        store.failing.lock().unwrap().insert("a".into());
        store.set("a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let calls = store.calls.load(Ordering::SeqCst);
        assert!(
            calls < 10,
            "{calls} calls in a second: no pause between them"
        );
        // Once it can be read, the change arrives.
        store.failing.lock().unwrap().clear();
        let index = store.index.load(Ordering::SeqCst);
        assert_eq!(value(&cache, "a", 1).await.index, index);
    }

    #[tokio::test]
    async fn a_key_that_cannot_be_read_does_not_restart_the_call() {
        let store = Store::new();
        let cache = batched_cache(&store);
        let _a = cache.entry(&"a".to_string()).1;
        value(&cache, "a", 0).await;
        store.failing.lock().unwrap().insert("b".into());
        let _b = cache.entry(&"b".to_string()).1;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let calls = store.calls.load(Ordering::SeqCst);
        // `b` is read again after growing pauses; `a`'s call stays.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(store.calls.load(Ordering::SeqCst), calls);
        let reads_of_b_retried = store.reads.load(Ordering::SeqCst);
        assert!(reads_of_b_retried < 12, "{reads_of_b_retried} reads");
        // `a` is still followed.
        store.set("a");
        let index = store.index.load(Ordering::SeqCst);
        assert_eq!(value(&cache, "a", 1).await.index, index);
    }

    #[tokio::test]
    async fn servers_without_batched_watches_get_a_blocking_read_per_key() {
        let store = Store::new();
        let unsupported: Changes<String> =
            Arc::new(|_| Box::pin(async { Err(ChangesError::Unsupported) }));
        let cache = SharedWatch::batched(
            store.fetch(),
            unsupported,
            test_limits(),
            crate::shared_watch::json_weigher(),
        );
        let _held = cache.entry(&"a".to_string()).1;
        assert_eq!(value(&cache, "a", 0).await.value, "a@1");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(store.blocking_reads.load(Ordering::SeqCst) > 0);
        // Keys that come later get their own read too.
        let _later = cache.entry(&"b".to_string()).1;
        store.set("b");
        let index = store.index.load(Ordering::SeqCst);
        assert_eq!(value(&cache, "b", 0).await.index, index);
    }
}
