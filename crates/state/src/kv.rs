//! The KV table: writes (set, CAS, lock/unlock, delete, delete-tree),
//! atomic transactions, and reads.

use std::time::Instant;

use legate_types::rpc::{TxnError, TxnOp, TxnResponse, TxnResult};
use legate_types::{KvEntry, KvOp, KvVerb};

use crate::{Changes, Table, Tables};

/// What a key looked like before a transaction touched it.
struct Undo {
    key: String,
    entry: Option<KvEntry>,
    tombstone: Option<u64>,
}

/// Outcome of one KV operation.
pub(crate) struct KvOutcome {
    /// Whether its condition held.
    pub applied: bool,
    /// The entry read or written.
    pub entry: Option<KvEntry>,
}

impl Tables {
    fn remember(&self, journal: &mut Option<&mut Vec<Undo>>, key: &str) {
        if let Some(journal) = journal.as_deref_mut() {
            journal.push(Undo {
                key: key.to_string(),
                entry: self.kv.get(key).cloned(),
                tombstone: self.kv_tombstones.get(key).copied(),
            });
        }
    }

    pub(crate) fn kv_apply(
        &mut self,
        index: u64,
        op: &KvOp,
        changes: &mut Changes,
    ) -> Result<bool, String> {
        self.kv_apply_one(index, op, changes, None)
            .map(|o| o.applied)
    }

    fn kv_apply_one(
        &mut self,
        index: u64,
        op: &KvOp,
        changes: &mut Changes,
        mut journal: Option<&mut Vec<Undo>>,
    ) -> Result<KvOutcome, String> {
        let key = op.key.as_str();
        let existing = self.kv.get(key).cloned();
        let done = |applied: bool, entry: Option<KvEntry>| Ok(KvOutcome { applied, entry });
        match op.verb {
            KvVerb::Get => match existing {
                Some(e) => done(true, Some(e)),
                None => Err(format!("key {key:?} doesn't exist")),
            },
            KvVerb::GetTree => done(true, None),
            KvVerb::CheckIndex => match existing {
                Some(e) if e.modify_index == op.index => done(true, Some(e)),
                Some(e) => Err(format!(
                    "current modify index {} != {} for key {key:?}",
                    e.modify_index, op.index
                )),
                None => Err(format!("key {key:?} doesn't exist")),
            },
            KvVerb::CheckSession => match existing {
                Some(e) if e.session == op.session => done(true, Some(e)),
                Some(_) => Err(format!(
                    "key {key:?} is not locked by session {:?}",
                    op.session
                )),
                None => Err(format!("key {key:?} doesn't exist")),
            },
            KvVerb::CheckNotExists => match existing {
                Some(_) => Err(format!("key {key:?} exists")),
                None => done(true, None),
            },
            KvVerb::Set => {
                self.remember(&mut journal, key);
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
                self.remember(&mut journal, key);
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
                if self
                    .lock_delays
                    .get(key)
                    .is_some_and(|until| Instant::now() < *until)
                {
                    return done(false, None);
                }
                self.remember(&mut journal, key);
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
                self.remember(&mut journal, key);
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
                self.remember(&mut journal, key);
                self.kv_delete(index, key, changes);
                done(true, None)
            }
            KvVerb::DeleteCas => match &existing {
                None => done(true, None),
                Some(e) if e.modify_index == op.index => {
                    self.remember(&mut journal, key);
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
                    self.remember(&mut journal, k);
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
        if self.kv.remove(key).is_some() {
            self.kv_tombstones.insert(key.to_string(), index);
            self.bump(Table::Kvs, index, changes);
            changes.kv_keys.insert(key.to_string());
        }
    }

    pub(crate) fn txn(&mut self, index: u64, ops: &[TxnOp], changes: &mut Changes) -> TxnResponse {
        let mut journal = Vec::new();
        let mut scratch = Changes::default();
        let saved_kv_index = self.table_index(Table::Kvs);
        let mut results = Vec::new();
        let mut errors = Vec::new();
        for (position, op) in ops.iter().enumerate() {
            match self.kv_apply_one(index, &op.kv, &mut scratch, Some(&mut journal)) {
                Ok(outcome) if outcome.applied => {
                    if op.kv.verb == KvVerb::GetTree {
                        for entry in self
                            .kv
                            .range(op.kv.key.clone()..)
                            .take_while(|(k, _)| k.starts_with(op.kv.key.as_str()))
                        {
                            results.push(TxnResult {
                                kv: entry.1.clone(),
                            });
                        }
                    } else if let Some(mut entry) = outcome.entry {
                        if !op.kv.verb.is_read() {
                            entry.value.clear();
                        }
                        results.push(TxnResult { kv: entry });
                    }
                }
                Ok(_) => errors.push(TxnError {
                    op_index: position,
                    what: format!(
                        "failed to {} key {:?}: condition not met",
                        verb_name(op.kv.verb),
                        op.kv.key
                    ),
                }),
                Err(what) => errors.push(TxnError {
                    op_index: position,
                    what,
                }),
            }
        }
        if errors.is_empty() {
            changes.tables.extend(scratch.tables);
            changes.kv_keys.extend(scratch.kv_keys);
            changes.kv_prefixes.extend(scratch.kv_prefixes);
            return TxnResponse {
                results: Some(results),
                errors: None,
                index,
            };
        }
        for undo in journal.into_iter().rev() {
            match undo.entry {
                Some(entry) => {
                    self.kv.insert(undo.key.clone(), entry);
                }
                None => {
                    self.kv.remove(&undo.key);
                }
            }
            match undo.tombstone {
                Some(t) => {
                    self.kv_tombstones.insert(undo.key, t);
                }
                None => {
                    self.kv_tombstones.remove(&undo.key);
                }
            }
        }
        self.table_index
            .insert(Table::Kvs.name().to_string(), saved_kv_index);
        TxnResponse {
            results: None,
            errors: Some(errors),
            index: 0,
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

fn verb_name(verb: KvVerb) -> &'static str {
    match verb {
        KvVerb::Cas => "CAS",
        KvVerb::Lock => "lock",
        KvVerb::Unlock => "unlock",
        KvVerb::DeleteCas => "delete-CAS",
        _ => "apply",
    }
}
