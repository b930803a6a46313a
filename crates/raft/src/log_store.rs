//! The Raft log: entries, vote and committed id. Held in memory for reads;
//! when a data dir is given every change is also written to a redb file by
//! one writer thread, which groups whatever has queued up into a single
//! fsync'd transaction (group commit) and only then tells openraft the
//! entries are durable. Votes, truncations and purges wait for their commit.
//!
//! Entries are stored in the binary encoding ([`legate_types::binary`])
//! behind a format byte ([`ENTRY_FORMAT`]); entries an older Legate wrote
//! as JSON are still read. After a purge has shrunk the log, a database
//! file grown past [`COMPACT_ABOVE`] is compacted, so a snapshot gives
//! back the disk the log it replaces took.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use redb::{Database, ReadableDatabase, TableDefinition};

use crate::TypeConfig;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

type NodeId = u64;

/// The format byte in front of a stored entry: 1 is the binary encoding.
/// (Older entries are JSON, which starts with `{`.)
pub const ENTRY_FORMAT: u8 = 1;

/// A database file larger than this is compacted after a purge.
pub const COMPACT_ABOVE: u64 = 32 << 20;

/// The pages redb keeps cached: entries are read back only at start
/// (they are held in memory), so a small cache is enough.
const CACHE_BYTES: usize = 16 << 20;

/// An entry in its stored form.
fn encode_entry(entry: &Entry<TypeConfig>) -> Result<Vec<u8>, legate_types::binary::BinaryError> {
    let mut bytes = vec![ENTRY_FORMAT];
    legate_types::binary::encode_into(&mut bytes, entry)?;
    Ok(bytes)
}

/// An entry from its stored form (either format).
fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry<TypeConfig>, String> {
    match bytes.first() {
        Some(&ENTRY_FORMAT) => legate_types::binary::decode(&bytes[1..]).map_err(|e| e.to_string()),
        Some(b'{') => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        Some(other) => Err(format!("format {other} is not known to this Legate")),
        None => Err("empty".into()),
    }
    .map_err(|e| format!("Raft log entry {index}: {e}"))
}

#[derive(Default)]
struct Inner {
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    disk: Option<std::sync::mpsc::Sender<DiskOp>>,
}

/// One change for the writer thread, applied in the order sent.
enum DiskOp {
    /// Insert encoded entries; report durability through the callback.
    Append(Vec<(u64, Vec<u8>)>, LogFlushed<TypeConfig>),
    /// Set a meta key.
    Meta(
        &'static str,
        Vec<u8>,
        tokio::sync::oneshot::Sender<Result<(), String>>,
    ),
    /// Remove log entries in a range (truncate: `from..`, purge: `..=upto`).
    Remove(
        RemoveRange,
        tokio::sync::oneshot::Sender<Result<(), String>>,
    ),
    /// Commit what is queued, close the database and stop.
    Close(tokio::sync::oneshot::Sender<Result<(), String>>),
}

enum RemoveRange {
    From(u64),
    UpTo(u64),
}

enum Done {
    Flushed(LogFlushed<TypeConfig>),
    Reply(tokio::sync::oneshot::Sender<Result<(), String>>),
}

/// The writer thread: drains the queue, commits once, then reports.
fn run_writer(mut db: Database, path: std::path::PathBuf, rx: std::sync::mpsc::Receiver<DiskOp>) {
    let mut closing = None;
    let mut compacted_len = 0u64;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
            if batch.len() >= 1024 {
                break;
            }
        }
        let mut done = Vec::with_capacity(batch.len());
        let purged = batch
            .iter()
            .any(|op| matches!(op, DiskOp::Remove(RemoveRange::UpTo(_), _)));
        let result = (|| -> Result<(), String> {
            let txn = db.begin_write().map_err(|e| e.to_string())?;
            {
                let mut log = txn.open_table(LOG).map_err(|e| e.to_string())?;
                let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
                for op in batch {
                    match op {
                        DiskOp::Append(entries, callback) => {
                            for (index, bytes) in entries {
                                log.insert(index, bytes.as_slice())
                                    .map_err(|e| e.to_string())?;
                            }
                            done.push(Done::Flushed(callback));
                        }
                        DiskOp::Meta(key, bytes, reply) => {
                            meta.insert(key, bytes.as_slice())
                                .map_err(|e| e.to_string())?;
                            done.push(Done::Reply(reply));
                        }
                        DiskOp::Close(reply) => closing = Some(reply),
                        DiskOp::Remove(range, reply) => {
                            match range {
                                RemoveRange::From(from) => log.retain_in(from.., |_, _| false),
                                RemoveRange::UpTo(upto) => log.retain_in(..=upto, |_, _| false),
                            }
                            .map_err(|e| e.to_string())?;
                            done.push(Done::Reply(reply));
                        }
                    }
                }
            }
            txn.commit().map_err(|e| e.to_string())
        })();

        for d in done {
            match d {
                Done::Flushed(callback) => {
                    callback.log_io_completed(result.clone().map_err(std::io::Error::other))
                }
                Done::Reply(reply) => {
                    let _ = reply.send(result.clone());
                }
            }
        }
        // After the replies: a purge never waits for its compaction (Raft
        // awaits purges; heartbeats must go on).
        if purged && result.is_ok() {
            compact_if_grown(&mut db, &path, &mut compacted_len);
        }
        if let Some(reply) = closing.take() {
            drop(db);
            let _ = reply.send(result);
            return;
        }
    }
}

/// Compacts the database when its file has grown past [`COMPACT_ABOVE`]
/// and to twice what the last compaction left (so a log whose live part
/// is large is not rewritten on every purge for nothing); a failure only
/// leaves the file as large as it was.
fn compact_if_grown(db: &mut Database, path: &Path, compacted_len: &mut u64) {
    let before = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if before <= COMPACT_ABOVE.max(compacted_len.saturating_mul(2)) {
        return;
    }
    let started = std::time::Instant::now();
    match db.compact() {
        Ok(_) => {
            let after = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            *compacted_len = after;
            tracing::debug!(before, after, elapsed = ?started.elapsed(), "compacted the Raft log");
        }
        Err(e) => tracing::warn!(error = %e, "could not compact the Raft log"),
    }
}

/// The log store; clones share one log.
#[derive(Clone, Default)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageError::IO {
        source: StorageIOError::write(&e),
    }
}

impl LogStore {
    /// A log kept only in memory (`-dev`).
    pub fn in_memory() -> LogStore {
        LogStore::default()
    }

    /// A log persisted in `dir/raft.db`, loading what is already there.
    pub fn open(dir: &Path) -> Result<LogStore, Box<dyn std::error::Error + Send + Sync>> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("raft.db");
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&path)?;
        let txn = db.begin_write()?;
        txn.open_table(LOG)?;
        txn.open_table(META)?;
        txn.commit()?;
        let mut inner = Inner::default();
        {
            let read = db.begin_read()?;
            let log = read.open_table(LOG)?;
            for row in log.range(0u64..)? {
                let (key, value) = row?;
                let entry = decode_entry(key.value(), value.value())?;
                inner.entries.insert(key.value(), entry);
            }
            let meta = read.open_table(META)?;
            if let Some(v) = meta.get("vote")? {
                inner.vote = serde_json::from_slice(v.value())?;
            }
            if let Some(v) = meta.get("committed")? {
                inner.committed = serde_json::from_slice(v.value())?;
            }
            if let Some(v) = meta.get("last_purged")? {
                inner.last_purged = serde_json::from_slice(v.value())?;
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || run_writer(db, path, rx))?;
        inner.disk = Some(tx);
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LogStore {
    /// Sends an op that must be durable before the caller goes on, and waits.
    async fn durable(
        &self,
        make: impl FnOnce(tokio::sync::oneshot::Sender<Result<(), String>>) -> DiskOp,
    ) -> Result<(), StorageError<NodeId>> {
        let Some(disk) = self.lock().disk.clone() else {
            return Ok(());
        };
        let (reply, wait) = tokio::sync::oneshot::channel();
        disk.send(make(reply))
            .map_err(|_| io_err(std::io::Error::other("the Raft log writer stopped")))?;
        match wait.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(io_err(std::io::Error::other(e))),
            Err(_) => Err(io_err(std::io::Error::other("the Raft log writer stopped"))),
        }
    }

    /// Flushes queued writes and closes the on-disk log (after Raft stopped).
    pub async fn close(&self) {
        let _ = self.durable(DiskOp::Close).await;
        self.lock().disk = None;
    }

    async fn save_meta(
        &self,
        key: &'static str,
        value: &impl serde::Serialize,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = serde_json::to_vec(value).map_err(io_err)?;
        self.durable(|reply| DiskOp::Meta(key, bytes, reply)).await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .lock()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.lock();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.save_meta("vote", vote).await?;
        self.lock().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        // The committed id only lets a restart apply sooner; a lagging copy
        // on disk is safe, so it rides along with the next group commit
        // instead of waiting for its own.
        let bytes = serde_json::to_vec(&committed).map_err(io_err)?;
        let mut inner = self.lock();
        if let Some(disk) = &inner.disk {
            let (reply, _ignored) = tokio::sync::oneshot::channel();
            disk.send(DiskOp::Meta("committed", bytes, reply))
                .map_err(|_| io_err(std::io::Error::other("the Raft log writer stopped")))?;
        }
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let mut inner = self.lock();
        let disk = inner.disk.clone();
        let encoded = match &disk {
            Some(_) => Some(
                entries
                    .iter()
                    .map(|e| encode_entry(e).map(|b| (e.log_id.index, b)))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(io_err)?,
            ),
            None => None,
        };
        for entry in entries {
            inner.entries.insert(entry.log_id.index, entry);
        }
        drop(inner);
        match (disk, encoded) {
            (Some(disk), Some(encoded)) => {
                // The writer calls back once the group commit holding these is durable.
                disk.send(DiskOp::Append(encoded, callback))
                    .map_err(|_| io_err(std::io::Error::other("the Raft log writer stopped")))?;
            }
            _ => callback.log_io_completed(Ok(())),
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.lock().entries.split_off(&log_id.index);
        self.durable(|reply| DiskOp::Remove(RemoveRange::From(log_id.index), reply))
            .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.save_meta("last_purged", &Some(log_id)).await?;
        {
            let mut inner = self.lock();
            inner.last_purged = Some(log_id);
            let keep = inner.entries.split_off(&(log_id.index + 1));
            let purged = std::mem::replace(&mut inner.entries, keep);
            drop(inner);
            // Freeing and trimming a large purge is off Raft's task.
            tokio::task::spawn_blocking(move || {
                drop(purged);
                crate::release_free_memory();
            });
        }
        self.durable(|reply| DiskOp::Remove(RemoveRange::UpTo(log_id.index), reply))
            .await
    }
}
