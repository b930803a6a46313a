//! The KV table: writes (set, CAS, lock/unlock, delete, delete-tree),
//! atomic transactions, and reads.

use std::time::Instant;

use legate_types::{KvEntry, KvOp, KvVerb};

use crate::{Changes, Table, Tables};

/// Outcome of one KV operation.
pub(crate) struct KvOutcome {
    /// Whether its condition held.
    pub applied: bool,
    /// The entry read or written.
    pub entry: Option<KvEntry>,
}

impl Tables {
    /// A transaction's KV read: the entries it returns, or Consul's text
    /// for why it fails. Values are kept only for `get`, `get-or-empty`
    /// and `get-tree`.
    pub(crate) fn kv_read_one(&self, op: &KvOp) -> Result<Vec<KvEntry>, String> {
        let key = op.key.as_str();
        let existing = self.kv.get(key);
        let without_value = |e: &KvEntry| KvEntry {
            value: Default::default(),
            ..e.clone()
        };
        match (op.verb, existing) {
            (KvVerb::Get, Some(e)) => Ok(vec![e.clone()]),
            (KvVerb::Get, None) => Err(format!("key {key:?} doesn't exist")),
            (KvVerb::GetOrEmpty, Some(e)) => Ok(vec![e.clone()]),
            (KvVerb::GetOrEmpty, None) => Ok(vec![KvEntry {
                lock_index: 0,
                key: op.key.clone(),
                flags: op.flags,
                value: Default::default(),
                session: op.session.clone(),
                create_index: 0,
                modify_index: op.index,
            }]),
            (KvVerb::GetTree, _) => Ok(self.kv_list(key).1),
            (KvVerb::CheckIndex, None) => {
                Err(format!("failed to check index, key {key:?} doesn't exist"))
            }
            (KvVerb::CheckIndex, Some(e)) if e.modify_index != op.index => Err(format!(
                "failed index check for key {key:?}, current modify index {} != {}",
                e.modify_index, op.index
            )),
            (KvVerb::CheckSession, None) => Err(format!(
                "failed to check session, key {key:?} doesn't exist"
            )),
            (KvVerb::CheckSession, Some(e)) if e.session != op.session => Err(format!(
                "failed session check for key {key:?}, current session {:?} != {:?}",
                e.session, op.session
            )),
            (KvVerb::CheckIndex | KvVerb::CheckSession, Some(e)) => Ok(vec![without_value(e)]),
            (KvVerb::CheckNotExists, Some(_)) => Err(format!("key {key:?} exists")),
            (KvVerb::CheckNotExists, None) => Ok(Vec::new()),
            (verb, _) => Err(format!("{verb:?} is not a read")),
        }
    }

    /// Whether a lock delay still holds `key`.
    pub(crate) fn lock_delayed(&self, key: &str) -> bool {
        self.lock_delays
            .get(key)
            .is_some_and(|until| Instant::now() < *until)
    }

    pub(crate) fn kv_apply(
        &mut self,
        index: u64,
        op: &KvOp,
        changes: &mut Changes,
    ) -> Result<bool, String> {
        self.kv_apply_one(index, op, changes).map(|o| o.applied)
    }

    pub(crate) fn kv_apply_one(
        &mut self,
        index: u64,
        op: &KvOp,
        changes: &mut Changes,
    ) -> Result<KvOutcome, String> {
        let key = op.key.as_str();
        let existing = self.kv.get(key).cloned();
        let done = |applied: bool, entry: Option<KvEntry>| Ok(KvOutcome { applied, entry });
        match op.verb {
            KvVerb::Get
            | KvVerb::GetOrEmpty
            | KvVerb::GetTree
            | KvVerb::CheckIndex
            | KvVerb::CheckSession
            | KvVerb::CheckNotExists => Err(format!("{:?} is not a write", op.verb)),
            KvVerb::Set => {
                let entry = self.kv_put(index, op, existing.as_ref(), None, changes);
                done(true, Some(entry))
            }
            KvVerb::Cas => {
                let matches = match &existing {
                    None => op.index == 0,
                    Some(e) => op.index != 0 && e.modify_index == op.index,
                };
                if !matches {
                    return done(false, None);
                }
                let entry = self.kv_put(index, op, existing.as_ref(), None, changes);
                done(true, Some(entry))
            }
            KvVerb::Lock => {
                if op.session.is_empty() {
                    return Err("lock requires a session".to_string());
                }
                if !self.sessions.contains_key(&op.session) {
                    return Err(format!("invalid session {:?}", op.session));
                }
                if let Some(e) = &existing {
                    if !e.session.is_empty() && e.session != op.session {
                        return done(false, None);
                    }
                }
                if self.lock_delayed(key) {
                    return done(false, None);
                }
                let entry = self.kv_put(
                    index,
                    op,
                    existing.as_ref(),
                    Some(LockChange::Acquire),
                    changes,
                );
                done(true, Some(entry))
            }
            KvVerb::Unlock => {
                if op.session.is_empty() {
                    return Err("unlock requires a session".to_string());
                }
                match &existing {
                    Some(e) if e.session == op.session => {}
                    _ => return done(false, None),
                }
                let entry = self.kv_put(
                    index,
                    op,
                    existing.as_ref(),
                    Some(LockChange::Release),
                    changes,
                );
                done(true, Some(entry))
            }
            KvVerb::Delete => {
                self.kv_delete(index, key, changes);
                done(true, None)
            }
            KvVerb::DeleteCas => match &existing {
                None => done(true, None),
                Some(e) if e.modify_index == op.index => {
                    self.kv_delete(index, key, changes);
                    done(true, None)
                }
                Some(_) => done(false, None),
            },
            KvVerb::DeleteTree => {
                let keys: Vec<String> = self
                    .kv
                    .range(key.to_string()..)
                    .take_while(|(k, _)| k.starts_with(key))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in &keys {
                    self.kv_delete(index, k, changes);
                }
                changes.kv_prefixes.insert(key.to_string());
                done(true, None)
            }
        }
    }

    fn kv_put(
        &mut self,
        index: u64,
        op: &KvOp,
        existing: Option<&KvEntry>,
        lock: Option<LockChange>,
        changes: &mut Changes,
    ) -> KvEntry {
        self.journal_kv(&op.key);
        let mut entry = KvEntry {
            lock_index: existing.map(|e| e.lock_index).unwrap_or(0),
            key: op.key.clone(),
            flags: op.flags,
            value: op.value.clone(),
            session: existing.map(|e| e.session.clone()).unwrap_or_default(),
            create_index: existing.map(|e| e.create_index).unwrap_or(index),
            modify_index: index,
        };
        match lock {
            Some(LockChange::Acquire) if entry.session != op.session => {
                entry.lock_index += 1;
                entry.session = op.session.clone();
            }
            Some(LockChange::Release) => entry.session.clear(),
            _ => {}
        }
        self.kv.insert(op.key.clone(), entry.clone());
        self.kv_tombstones.remove(&op.key);
        self.bump(Table::Kvs, index, changes);
        changes.kv_keys.insert(op.key.clone());
        entry
    }

    pub(crate) fn kv_delete(&mut self, index: u64, key: &str, changes: &mut Changes) {
        self.journal_kv(key);
        if self.kv.remove(key).is_some() {
            self.kv_tombstones.insert(key.to_string(), index);
            self.bump(Table::Kvs, index, changes);
            changes.kv_keys.insert(key.to_string());
        }
    }

    /// Forgets tombstones at or below `upto` (Consul's tombstone GC).
    pub(crate) fn reap_tombstones(&mut self, upto: u64) {
        self.kv_tombstones.retain(|_, index| *index > upto);
        self.kv_reaped_index = self.kv_reaped_index.max(upto);
    }

    /// The highest tombstone index, if any tombstone exists.
    pub fn max_tombstone_index(&self) -> Option<u64> {
        self.kv_tombstones.values().copied().max()
    }

    // ----- reads -----

    /// One key; the index is the entry's modify index, or the table's.
    pub fn kv_get(&self, key: &str) -> (u64, Option<KvEntry>) {
        match self.kv.get(key) {
            Some(entry) => (entry.modify_index, Some(entry.clone())),
            None => (
                self.kv_tombstones
                    .get(key)
                    .copied()
                    .unwrap_or_else(|| self.table_index(Table::Kvs)),
                None,
            ),
        }
    }

    /// Every entry under a prefix; the index covers deletions (tombstones).
    pub fn kv_list(&self, prefix: &str) -> (u64, Vec<KvEntry>) {
        let entries: Vec<KvEntry> = self
            .kv
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| e.clone())
            .collect();
        (
            self.prefix_index(prefix, entries.iter().map(|e| e.modify_index)),
            entries,
        )
    }

    fn prefix_index(&self, prefix: &str, entry_indexes: impl Iterator<Item = u64>) -> u64 {
        let tombstones = self
            .kv_tombstones
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, i)| *i);
        let index = entry_indexes.chain(tombstones).max().unwrap_or(0);
        let index = if index == 0 {
            0
        } else {
            index.max(self.kv_reaped_index)
        };
        if index == 0 {
            self.table_index(Table::Kvs)
        } else {
            index
        }
    }

    /// Key names under a prefix, folded after `separator` when not empty.
    pub fn kv_keys(&self, prefix: &str, separator: &str) -> (u64, Vec<String>) {
        let mut keys: Vec<String> = Vec::new();
        let mut indexes = Vec::new();
        for (key, entry) in self
            .kv
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            indexes.push(entry.modify_index);
            let rest = &key[prefix.len()..];
            let folded = if separator.is_empty() {
                key.clone()
            } else {
                match rest.find(separator) {
                    Some(at) => format!("{prefix}{}", &rest[..at + separator.len()]),
                    None => key.clone(),
                }
            };
            if keys.last() != Some(&folded) {
                keys.push(folded);
            }
        }
        (self.prefix_index(prefix, indexes.into_iter()), keys)
    }
}

enum LockChange {
    Acquire,
    Release,
}
