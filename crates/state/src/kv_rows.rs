//! The KV table, with what would otherwise take a walk of every entry
//! kept up to date as entries change: the bytes the entries take (the
//! snapshot policy asks for it every few seconds) and the keys each
//! session holds (a session's end releases or deletes them).
//!
//! Reads go through `Deref` to the map; every change goes through the
//! methods here, so the figures cannot drift from the rows.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;

use legate_types::KvEntry;

/// What one entry counts for in [`KvRows::bytes`]: its key and value,
/// plus a flat allowance for the rest of the row.
fn measure(entry: &KvEntry) -> u64 {
    (entry.key.len() + entry.value.len()) as u64 + 64
}

/// KV entries by key, with their byte count and the keys of each session.
#[derive(Debug, Default, Clone)]
pub(crate) struct KvRows {
    rows: BTreeMap<String, KvEntry>,
    counts: Counts,
}

/// What is kept about the rows as they change.
#[derive(Debug, Default, Clone)]
struct Counts {
    bytes: u64,
    by_session: HashMap<String, BTreeSet<String>>,
}

impl Counts {
    fn count_in(&mut self, key: &str, entry: &KvEntry) {
        self.bytes += measure(entry);
        if !entry.session.is_empty() {
            self.by_session
                .entry(entry.session.clone())
                .or_default()
                .insert(key.to_string());
        }
    }

    fn count_out(&mut self, key: &str, entry: &KvEntry) {
        self.bytes -= measure(entry);
        if entry.session.is_empty() {
            return;
        }
        if let Some(keys) = self.by_session.get_mut(&entry.session) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_session.remove(&entry.session);
            }
        }
    }
}

impl Deref for KvRows {
    type Target = BTreeMap<String, KvEntry>;

    fn deref(&self) -> &Self::Target {
        &self.rows
    }
}

impl KvRows {
    /// Stores `entry` under `key`, returning the entry it replaced.
    pub(crate) fn insert(&mut self, key: String, entry: KvEntry) -> Option<KvEntry> {
        match self.rows.entry(key) {
            Entry::Occupied(mut row) => {
                // The old entry goes out first: the new one may hold the
                // same session.
                self.counts.count_out(row.key(), row.get());
                self.counts.count_in(row.key(), &entry);
                Some(row.insert(entry))
            }
            Entry::Vacant(row) => {
                self.counts.count_in(row.key(), &entry);
                row.insert(entry);
                None
            }
        }
    }

    /// Removes the entry under `key`.
    pub(crate) fn remove(&mut self, key: &str) -> Option<KvEntry> {
        let old = self.rows.remove(key)?;
        self.counts.count_out(key, &old);
        Some(old)
    }

    /// Changes the entry under `key` in place; false when there is none.
    pub(crate) fn update(&mut self, key: &str, change: impl FnOnce(&mut KvEntry)) -> bool {
        let Some(entry) = self.rows.get_mut(key) else {
            return false;
        };
        self.counts.count_out(key, entry);
        change(entry);
        self.counts.count_in(key, entry);
        true
    }

    /// About how many bytes the entries take (see [`measure`]), without
    /// walking them.
    pub(crate) fn bytes(&self) -> u64 {
        self.counts.bytes
    }

    /// The keys whose lock `session` holds, in key order.
    pub(crate) fn held_by(&self, session: &str) -> Vec<String> {
        self.counts
            .by_session
            .get(session)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str, session: &str) -> KvEntry {
        KvEntry {
            key: key.into(),
            value: bytes::Bytes::copy_from_slice(value.as_bytes()),
            session: session.into(),
            ..Default::default()
        }
    }

    /// The figures as a walk of every entry finds them.
    fn walked(rows: &KvRows) -> (u64, HashMap<String, BTreeSet<String>>) {
        let mut by_session: HashMap<String, BTreeSet<String>> = HashMap::new();
        for e in rows.values().filter(|e| !e.session.is_empty()) {
            by_session
                .entry(e.session.clone())
                .or_default()
                .insert(e.key.clone());
        }
        (rows.values().map(measure).sum(), by_session)
    }

    fn check(rows: &KvRows) {
        let (bytes, by_session) = walked(rows);
        assert_eq!(rows.bytes(), bytes);
        assert_eq!(rows.counts.by_session, by_session);
    }

    #[test]
    fn the_figures_follow_every_change() {
        let mut rows = KvRows::default();
        rows.insert("a".into(), entry("a", "one", ""));
        rows.insert("b".into(), entry("b", "two", "s1"));
        check(&rows);
        // Overwritten with a longer value and another session.
        rows.insert("b".into(), entry("b", "a longer value", "s2"));
        check(&rows);
        assert!(rows.held_by("s1").is_empty());
        assert_eq!(rows.held_by("s2"), ["b"]);
        // Written again by the session that holds it (a lock's holder
        // updating its value).
        rows.insert("b".into(), entry("b", "a longer value, again", "s2"));
        check(&rows);
        assert_eq!(rows.held_by("s2"), ["b"]);
        assert!(rows.update("a", |e| {
            e.value = bytes::Bytes::from_static(b"changed in place");
            e.session = "s2".into();
        }));
        check(&rows);
        assert_eq!(rows.held_by("s2"), ["a", "b"]);
        assert!(!rows.update("missing", |_| unreachable!()));
        assert!(rows.update("b", |e| e.session.clear()));
        check(&rows);
        assert_eq!(rows.held_by("s2"), ["a"]);
        assert!(rows.remove("a").is_some());
        assert!(rows.remove("a").is_none());
        check(&rows);
        assert!(rows.held_by("s2").is_empty());
        assert!(rows.counts.by_session.is_empty());
        assert!(rows.remove("b").is_some());
        assert_eq!(rows.bytes(), 0);
    }
}
