//! The openraft state machine over Legate's [`StateStore`]: applies
//! committed commands in order and builds and installs snapshots.
//!
//! Snapshots are files, never buffers: one is written record by record
//! from a copy of the tables (which shares KV values with them), sent to
//! followers in chunks read from the file, received into a file, and read
//! back record by record (see [`legate_state::stream`]). With a data dir
//! they live in its `raft/` folder as `snapshot-<id>.bin` beside
//! `snapshot.meta`, which names the current one and is replaced last, so
//! a crash leaves the previous snapshot in force; without one (`-dev`) in
//! a private temporary folder. An older data dir's `snapshot.json` is
//! read once and rewritten in the new form. A build and an install may
//! finish at once: making one current is serialized, an older one never
//! replaces a newer one, and a replaced file is removed only under the
//! lock that opening the current one takes. Leftovers (unfinished writes
//! and receptions) are removed at start only.
//!
//! When a snapshot is due is decided here too ([`StateMachine::snapshot_due`]):
//! besides openraft's entry count, after 64 MiB of values were applied
//! (the log held in memory stays small) and after the live data shrank
//! to under half of what the last snapshot held (so a large delete gives
//! back its disk and memory).

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use legate_state::{CommandResult, SnapshotData, StateStore};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::TypeConfig;

type NodeId = u64;

/// The file naming the current snapshot.
const META_FILE: &str = "snapshot.meta";
/// The single-file JSON snapshot earlier Legate wrote.
const LEGACY_FILE: &str = "snapshot.json";
/// Value bytes applied after which a snapshot is due, whatever the count.
const LOG_BYTES_BUDGET: u64 = 64 << 20;
/// Below this size a shrinking store does not call for a snapshot.
const SHRINK_FLOOR: u64 = 8 << 20;

/// `snapshot.meta`: the current snapshot and the file holding it.
#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct CurrentSnapshot {
    pub(crate) meta: SnapshotMeta<NodeId, BasicNode>,
    pub(crate) file: String,
}

/// The JSON form of `snapshot.json` (stream version 0 inside).
#[derive(Deserialize)]
struct LegacySnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

/// What the snapshot policy tracks between snapshots.
#[derive(Default)]
struct Budget {
    /// Value bytes applied since the last snapshot.
    applied: u64,
    /// The live-size estimate when the last snapshot was taken.
    live_at_snapshot: u64,
    /// When a snapshot was asked for that is not built yet (a request
    /// openraft dropped counts for a minute only).
    asked: Option<std::time::Instant>,
}

#[derive(Default)]
struct Inner {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    current: Option<CurrentSnapshot>,
    snapshot_seq: u64,
    /// The file the snapshot being received is written to.
    incoming: Option<PathBuf>,
    budget: Budget,
}

/// Where snapshots are kept.
struct SnapshotDir {
    path: PathBuf,
    /// Serializes making a snapshot current (a build and an install may
    /// finish at the same time).
    commit: Mutex<()>,
    /// Removes the folder when it is a temporary one.
    _temporary: Option<tempfile::TempDir>,
}

/// The state machine; clones share the same state.
#[derive(Clone)]
pub struct StateMachine {
    store: Arc<StateStore>,
    inner: Arc<Mutex<Inner>>,
    dir: Arc<SnapshotDir>,
    wanted: Arc<tokio::sync::Notify>,
}

fn sm_err(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageError::IO {
        source: StorageIOError::write_state_machine(openraft::AnyError::error(e.to_string())),
    }
}

/// A snapshot id made safe to be part of a file name.
fn file_name_for(snapshot_id: &str) -> String {
    let id: String = snapshot_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("snapshot-{id}.bin")
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `snapshot.meta` naming `current`, atomically (its own tmp
/// name, fsync, rename, fsync of the folder).
fn write_meta(dir: &Path, current: &CurrentSnapshot) -> std::io::Result<()> {
    let tmp = dir.join(format!("snapshot.meta.{}.tmp", current.file));
    let bytes = serde_json::to_vec(current).map_err(std::io::Error::other)?;
    {
        let mut out = std::fs::File::create(&tmp)?;
        out.write_all(&bytes)?;
        out.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(META_FILE))?;
    sync_dir(dir)
}

/// At start only: removes snapshot files other than `keep` (older
/// snapshots, unfinished writes and receptions) and the legacy file.
fn remove_stale_files(dir: &Path, keep: Option<&str>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let snapshot_file = name.starts_with("snapshot-")
            || name == LEGACY_FILE
            || (name.starts_with("snapshot") && name.ends_with(".tmp"));
        if snapshot_file && Some(name.as_str()) != keep {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes `data` as the file of snapshot `meta` into `dir` (durably; it
/// is not current until [`StateMachine::make_current`]).
fn save_snapshot(
    dir: &Path,
    meta: &SnapshotMeta<NodeId, BasicNode>,
    data: &SnapshotData,
) -> Result<CurrentSnapshot, String> {
    let file = file_name_for(&meta.snapshot_id);
    let tmp = dir.join(format!("{file}.tmp"));
    let written = (|| -> Result<(), String> {
        let out = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
        let mut out = BufWriter::with_capacity(1 << 20, out);
        data.write_to(&mut out).map_err(|e| e.to_string())?;
        let out = out.into_inner().map_err(|e| e.to_string())?;
        out.sync_all().map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, dir.join(&file)).map_err(|e| e.to_string())?;
        sync_dir(dir).map_err(|e| e.to_string())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("writing snapshot {file}: {e}"));
    }
    Ok(CurrentSnapshot {
        meta: meta.clone(),
        file,
    })
}

impl StateMachine {
    /// A state machine over `store`; with `snapshot_dir`, the last snapshot
    /// is loaded from there (restoring the store) and new ones are saved
    /// there, otherwise in a temporary folder.
    pub fn new(
        store: Arc<StateStore>,
        snapshot_dir: Option<PathBuf>,
    ) -> Result<StateMachine, String> {
        let dir = match snapshot_dir {
            Some(path) => {
                std::fs::create_dir_all(&path)
                    .map_err(|e| format!("creating {}: {e}", path.display()))?;
                SnapshotDir {
                    path,
                    commit: Mutex::new(()),
                    _temporary: None,
                }
            }
            None => {
                let temporary = tempfile::Builder::new()
                    .prefix("legate-snapshots-")
                    .tempdir()
                    .map_err(|e| format!("creating a snapshot folder: {e}"))?;
                SnapshotDir {
                    path: temporary.path().to_path_buf(),
                    commit: Mutex::new(()),
                    _temporary: Some(temporary),
                }
            }
        };
        let machine = StateMachine {
            store,
            inner: Arc::new(Mutex::new(Inner::default())),
            dir: Arc::new(dir),
            wanted: Arc::new(tokio::sync::Notify::new()),
        };
        machine.load()?;
        Ok(machine)
    }

    /// Loads the current snapshot, converting a legacy `snapshot.json`.
    fn load(&self) -> Result<(), String> {
        let dir = &self.dir.path;
        let meta_path = dir.join(META_FILE);
        let legacy_path = dir.join(LEGACY_FILE);
        let current = if meta_path.exists() {
            let bytes = std::fs::read(&meta_path)
                .map_err(|e| format!("reading {}: {e}", meta_path.display()))?;
            let current: CurrentSnapshot = serde_json::from_slice(&bytes)
                .map_err(|e| format!("decoding {}: {e}", meta_path.display()))?;
            let path = dir.join(&current.file);
            let file = std::fs::File::open(&path)
                .map_err(|e| format!("opening {}: {e}", path.display()))?;
            self.store
                .restore_from(BufReader::with_capacity(1 << 20, file))
                .map_err(|e| format!("restoring {}: {e}", path.display()))?;
            current
        } else if legacy_path.exists() {
            let file = std::fs::File::open(&legacy_path)
                .map_err(|e| format!("opening {}: {e}", legacy_path.display()))?;
            let legacy: LegacySnapshot =
                serde_json::from_reader(BufReader::with_capacity(1 << 20, file))
                    .map_err(|e| format!("decoding {}: {e}", legacy_path.display()))?;
            self.store
                .restore(&legacy.data)
                .map_err(|e| format!("restoring {}: {e}", legacy_path.display()))?;
            drop(legacy.data);
            let current = save_snapshot(dir, &legacy.meta, &self.store.snapshot_data())?;
            write_meta(dir, &current).map_err(|e| format!("recording snapshot: {e}"))?;
            tracing::info!(
                file = %current.file,
                "rewrote the JSON snapshot of an older Legate in the binary form"
            );
            current
        } else {
            remove_stale_files(dir, None);
            return Ok(());
        };
        remove_stale_files(dir, Some(&current.file));
        let mut inner = self.lock();
        inner.last_applied = current.meta.last_log_id;
        inner.membership = current.meta.last_membership.clone();
        inner.budget.live_at_snapshot = self.store.read().approx_bytes();
        inner.current = Some(current);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the tables with the log id of the last entry they include.
    pub(crate) fn consistent_copy(&self) -> (legate_state::SnapshotData, u64, u64) {
        let inner = self.lock();
        let copy = self.store.snapshot_data();
        let (index, term) = inner
            .last_applied
            .map(|l| (l.index, l.leader_id.term))
            .unwrap_or((0, 0));
        (copy, index, term)
    }

    /// Woken when applied values passed the log budget.
    pub(crate) fn wanted(&self) -> &tokio::sync::Notify {
        &self.wanted
    }

    /// Whether a snapshot should be taken now: the values applied since the
    /// last one passed the budget (64 MiB, or a quarter of the live data
    /// when that is more), or the live data shrank below half of what it
    /// was at the last one. Asks only once until the snapshot is built.
    pub(crate) fn snapshot_due(&self) -> bool {
        let (applied, live_then) = {
            let inner = self.lock();
            if inner
                .budget
                .asked
                .is_some_and(|at| at.elapsed() < std::time::Duration::from_secs(60))
            {
                return false;
            }
            (inner.budget.applied, inner.budget.live_at_snapshot)
        };
        let budget = LOG_BYTES_BUDGET.max(live_then / 4);
        let due = applied >= budget || {
            live_then > SHRINK_FLOOR && self.store.read().approx_bytes() * 2 < live_then
        };
        if due {
            self.lock().budget.asked = Some(std::time::Instant::now());
        }
        due
    }

    /// Makes `candidate` (its file written) the current snapshot unless
    /// the current one is newer, in which case the candidate's file is
    /// removed; then removes the file it replaced. Returns whether it
    /// became current. Blocking (file system).
    pub(crate) fn make_current(&self, candidate: CurrentSnapshot) -> Result<bool, String> {
        let _commit = self.dir.commit.lock().unwrap_or_else(|e| e.into_inner());
        let newer_held = self
            .lock()
            .current
            .as_ref()
            .is_some_and(|c| c.meta.last_log_id > candidate.meta.last_log_id);
        if newer_held {
            let _ = std::fs::remove_file(self.dir.path.join(&candidate.file));
            return Ok(false);
        }
        write_meta(&self.dir.path, &candidate).map_err(|e| format!("recording snapshot: {e}"))?;
        // Swap and remove under the lock, so get_current_snapshot never
        // names a file that is gone.
        let mut inner = self.lock();
        let keep = candidate.file.clone();
        if let Some(old) = inner.current.replace(candidate) {
            if old.file != keep {
                let _ = std::fs::remove_file(self.dir.path.join(&old.file));
            }
        }
        Ok(true)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        // Copy the tables while holding the lock, so no entry is applied
        // between the copy and the log id it corresponds to (the copy
        // shares KV values, so it is small); write it out after releasing
        // the lock, so applies are not held up.
        let (copy, meta) = {
            let mut inner = self.lock();
            let copy = self.store.snapshot_data();
            inner.snapshot_seq += 1;
            let meta = SnapshotMeta {
                last_log_id: inner.last_applied,
                last_membership: inner.membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    inner.last_applied.map(|l| l.index).unwrap_or(0),
                    inner.snapshot_seq
                ),
            };
            inner.budget.applied = 0;
            (copy, meta)
        };
        let live = self.store.read().approx_bytes();
        let machine = self.clone();
        let saved_meta = meta.clone();
        let file = tokio::task::spawn_blocking(move || -> Result<std::fs::File, String> {
            let saved = save_snapshot(&machine.dir.path, &saved_meta, &copy);
            drop(copy);
            crate::release_free_memory();
            let saved = saved?;
            // Opened before it can be superseded: the handle stays valid.
            let file = std::fs::File::open(machine.dir.path.join(&saved.file))
                .map_err(|e| e.to_string())?;
            machine.make_current(saved)?;
            Ok(file)
        })
        .await
        .map_err(sm_err)?
        .map_err(sm_err)?;
        {
            let mut inner = self.lock();
            inner.budget.live_at_snapshot = live;
            inner.budget.asked = None;
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let inner = self.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut results = Vec::new();
        let mut applied_bytes = 0u64;
        let mut inner = self.lock();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => results.push(CommandResult::Done),
                EntryPayload::Normal(command) => {
                    applied_bytes += crate::log_budget_bytes(&command) as u64;
                    let started = std::time::Instant::now();
                    results.push(self.store.apply(entry.log_id.index, &command));
                    metrics::histogram!("raft.fsm.apply")
                        .record(legate_telemetry::millis_since(started));
                }
                EntryPayload::Membership(membership) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), membership);
                    results.push(CommandResult::Done);
                }
            }
        }
        inner.budget.applied += applied_bytes;
        let over = inner.budget.applied >= LOG_BYTES_BUDGET.max(inner.budget.live_at_snapshot / 4);
        drop(inner);
        if over {
            self.wanted.notify_one();
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<tokio::fs::File>, StorageError<NodeId>> {
        let path = {
            let mut inner = self.lock();
            inner.snapshot_seq += 1;
            let path = self
                .dir
                .path
                .join(format!("snapshot-incoming-{}.tmp", inner.snapshot_seq));
            if let Some(previous) = inner.incoming.replace(path.clone()) {
                let _ = std::fs::remove_file(previous);
            }
            path
        };
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .map_err(sm_err)?;
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError<NodeId>> {
        let mut file = *snapshot;
        tokio::io::AsyncWriteExt::flush(&mut file)
            .await
            .map_err(sm_err)?;
        let file = file.into_std().await;
        let incoming = self
            .lock()
            .incoming
            .take()
            .ok_or_else(|| sm_err("a snapshot was installed that was never received"))?;
        let machine = self.clone();
        let (store, dir, meta_owned) = (self.store.clone(), self.dir.path.clone(), meta.clone());
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            use std::io::Seek;
            let mut file = file;
            file.sync_all().map_err(|e| e.to_string())?;
            file.seek(std::io::SeekFrom::Start(0))
                .map_err(|e| e.to_string())?;
            // Either stream version: an older leader sends JSON.
            let data = SnapshotData::read_from(BufReader::with_capacity(1 << 20, file))
                .map_err(|e| format!("installing snapshot {}: {e}", meta_owned.snapshot_id))?;
            store.restore_data(data);
            crate::release_free_memory();
            let name = file_name_for(&meta_owned.snapshot_id);
            std::fs::rename(&incoming, dir.join(&name)).map_err(|e| e.to_string())?;
            sync_dir(&dir).map_err(|e| e.to_string())?;
            machine.make_current(CurrentSnapshot {
                meta: meta_owned,
                file: name,
            })?;
            Ok(())
        })
        .await
        .map_err(sm_err)?
        .map_err(sm_err)?;
        let live = self.store.read().approx_bytes();
        let mut inner = self.lock();
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.budget = Budget {
            applied: 0,
            live_at_snapshot: live,
            asked: None,
        };
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        // Opened under the lock that guards replacing (and removing) it.
        let inner = self.lock();
        let Some(current) = inner.current.clone() else {
            return Ok(None);
        };
        let file = std::fs::File::open(self.dir.path.join(&current.file)).map_err(sm_err)?;
        drop(inner);
        Ok(Some(Snapshot {
            meta: current.meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        }))
    }
}
