//! Subscriptions a proxy's or a gateway's task follows, polled together
//! as one stream and each stopped by its key.

use std::collections::HashMap;
use std::hash::Hash;

use futures::stream::{AbortHandle, Abortable, SelectAll};
use futures::StreamExt;

use crate::manager::Subscription;

/// Keyed subscriptions whose items are turned into one update type `U`.
pub(crate) struct Subscriptions<K, U> {
    handles: HashMap<K, AbortHandle>,
    streams: SelectAll<Subscription<U>>,
}

impl<K: Eq + Hash, U: Send + 'static> Subscriptions<K, U> {
    /// None yet.
    pub(crate) fn new() -> Self {
        Subscriptions {
            handles: HashMap::new(),
            streams: SelectAll::new(),
        }
    }

    /// Whether `key` is followed.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.handles.contains_key(key)
    }

    /// Follows `subscription` under `key` (stopping what the key followed
    /// before); `wrap` turns its items into updates.
    pub(crate) fn add<T: Send + 'static>(
        &mut self,
        key: K,
        subscription: Subscription<T>,
        wrap: impl Fn(T) -> U + Send + 'static,
    ) {
        let (handle, registration) = AbortHandle::new_pair();
        self.streams.push(Box::pin(Abortable::new(
            subscription.map(wrap),
            registration,
        )));
        if let Some(old) = self.handles.insert(key, handle) {
            old.abort();
        }
    }

    /// Stops and forgets every subscription whose key `keep` refuses.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.handles.retain(|key, handle| {
            let kept = keep(key);
            if !kept {
                handle.abort();
            }
            kept
        });
    }

    /// The next update of any subscription (pending while there is none).
    pub(crate) async fn next(&mut self) -> U {
        loop {
            if self.streams.is_empty() {
                std::future::pending::<()>().await;
            }
            if let Some(update) = self.streams.next().await {
                return update;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(from: u32) -> Subscription<u32> {
        Box::pin(futures::stream::iter(from..from + 3).chain(futures::stream::pending()))
    }

    #[tokio::test]
    async fn a_stopped_key_yields_nothing_more_and_a_replaced_one_only_its_new_stream() {
        let mut subs: Subscriptions<&str, (String, u32)> = Subscriptions::new();
        subs.add("a", numbers(0), |n| ("a".into(), n));
        subs.add("b", numbers(100), |n| ("b".into(), n));
        subs.retain(|k| *k != "a");
        assert!(!subs.contains(&"a") && subs.contains(&"b"));
        subs.add("b", numbers(200), |n| ("b".into(), n));
        let mut got = Vec::new();
        while let Ok(u) =
            tokio::time::timeout(std::time::Duration::from_millis(50), subs.next()).await
        {
            got.push(u.1);
        }
        got.sort();
        assert_eq!(got, vec![200, 201, 202]);
    }
}
